/* ops_hd.h: the per-element (and per-row) arithmetic of the backend ops.
 *
 * Every formula the backends run is written here once as a `static inline
 * HFL_HD` function: the CPU backend (cpu/backend_cpu.c) calls these in loops,
 * the CUDA backend calls them once per thread (or per row). Only indexing and
 * launching differ between the two, so the arithmetic is tested on every
 * machine by the CPU tests. Nothing here allocates, branches on the backend or
 * touches memory beyond the element or row it is given.
 *
 * The convolution and pooling bodies work on one sample's [C, H, W] plane
 * and a kernels/geom.h window. They are written in *gather* form (each
 * output element computes its own value, nothing is scattered), so a CUDA
 * thread per element needs no atomics and both backends sum in one order.
 *
 * A body that reads or writes activations takes their storage type t
 * (kernels/backend.h, STORAGE TYPES) and goes through hfl_ld and hfl_st
 * below, so one body serves fp32, bf16 and fp16: in fp32 it is plain float
 * arithmetic, in a 2-byte type the same arithmetic on exactly widened
 * values with each stored result rounded once. */
#ifndef HFL_OPS_HD_H
#define HFL_OPS_HD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/geom.h"
#include "kernels/half_hd.h"
#include "kernels/hd.h"

/* ---- storage types ---- */

/* The exact fp32 value of a 2-byte element of type lp (bf16 or fp16). */
static inline HFL_HD float hfl_op_widen(hfl_precision lp, uint16_t h) {
    return lp == HFL_PREC_FP16 ? hfl_f16_to_f32(h) : hfl_bf16_to_f32(h);
}

/* x rounded to the 2-byte type lp, nearest even; past the largest finite
 * value it becomes Inf (no saturation: an fp16 overflow must be seen by the
 * loss scaler). */
static inline HFL_HD uint16_t hfl_op_narrow(hfl_precision lp, float x) {
    return lp == HFL_PREC_FP16 ? hfl_f32_to_f16(x) : hfl_f32_to_bf16(x);
}

/* Element i of p, a tensor of type t, as its exact fp32 value. */
static inline HFL_TYPED float hfl_ld(hfl_precision t, const void *p, size_t i) {
    if (t == HFL_PREC_FP32) return ((const float *)p)[i];
    return hfl_op_widen(t, ((const uint16_t *)p)[i]);
}

/* Stores v as element i of p: as it is in fp32, else rounded to t
 * (hfl_op_narrow). */
static inline HFL_TYPED void hfl_st(hfl_precision t, void *p, size_t i, float v) {
    if (t == HFL_PREC_FP32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = hfl_op_narrow(t, v);
}

/* dst[i] = src[j], the element's bits (a 2-byte NaN keeps its payload). */
static inline HFL_TYPED void hfl_cp(hfl_precision t, void *dst, size_t i, const void *src,
                                    size_t j) {
    if (t == HFL_PREC_FP32) ((float *)dst)[i] = ((const float *)src)[j];
    else ((uint16_t *)dst)[i] = ((const uint16_t *)src)[j];
}

/* dst[i] = src[j]'s bits when keep, else +0: a select, which a CPU loop
 * vectorises (a store in each arm of an if it does not). */
static inline HFL_TYPED void hfl_cp_if(hfl_precision t, void *dst, size_t i, int keep,
                                       const void *src, size_t j) {
    if (t == HFL_PREC_FP32) {
        float v = ((const float *)src)[j];
        ((float *)dst)[i] = keep ? v : 0.0f;
    } else {
        uint16_t v = ((const uint16_t *)src)[j];
        ((uint16_t *)dst)[i] = keep ? v : (uint16_t)0;
    }
}

/* Pair j (elements 2j and 2j + 1) of a 2-byte tensor p copied into or out
 * of a buffer with one 4-byte load or store (thread_hd.h's PAIRS). On the
 * device a typed access, as nvcc makes a memcpy from p four byte loads (its
 * alignment unknown); on the host a memcpy, which GCC makes one load and
 * which keeps C's aliasing rules (the tensors are uint16_t). */
#ifdef __CUDA_ARCH__
#define HFL_PAIR_IN(buf, p, j)                                                                 \
    do {                                                                                       \
        uint32_t pair_ = ((const uint32_t *)(p))[j];                                           \
        memcpy((buf), &pair_, 4);                                                              \
    } while (0)
#define HFL_PAIR_OUT(p, j, buf)                                                                \
    do {                                                                                       \
        uint32_t pair_;                                                                        \
        memcpy(&pair_, (buf), 4);                                                              \
        ((uint32_t *)(p))[j] = pair_;                                                          \
    } while (0)
#else
#define HFL_PAIR_IN(buf, p, j) memcpy((buf), (const char *)(p) + 4 * (size_t)(j), 4)
#define HFL_PAIR_OUT(p, j, buf) memcpy((char *)(p) + 4 * (size_t)(j), (buf), 4)
#endif

/* The address of element i of p (i may be negative: an element before p). */
static inline HFL_TYPED void *hfl_at(hfl_precision t, const void *p, ptrdiff_t i) {
    return (char *)p + i * (t == HFL_PREC_FP32 ? 4 : 2);
}

/* y = x + b for one element of a row-broadcast bias. */
static inline HFL_HD float hfl_op_bias_add(float y, float b) { return y + b; }

/* One element of SGD with momentum and L2 weight decay, in PyTorch's form
 * (torch.optim.SGD with dampening 0, nesterov off):
 *     g' = g + wd * w
 *     v  = momentum * v + g'        (skipped when momentum == 0)
 *     w  = w - lr * v               (or w - lr * g' without momentum)
 * PyTorch sets v = g' on the first step; with v starting at zero the formula
 * above gives the same value, so no first-step flag is needed. Returns the new
 * weight; *v is updated in place (and not touched when momentum == 0). */
static inline HFL_HD float hfl_op_sgd(float w, float *v, float g, float lr, float momentum,
                                      float wd) {
    float gp = g + wd * w;
    if (momentum != 0.0f) {
        float nv = momentum * *v + gp;
        *v = nv;
        gp = nv;
    }
    return w - lr * gp;
}

/* FedProx's proximal term (Li et al., "Federated Optimization in
 * Heterogeneous Networks", MLSys 2020, eq. 2): the local objective gains
 * mu/2 * ||w - w_t||^2, w_t the round's global weights (the anchor), whose
 * gradient adds mu * (w - w_t) to g before the optimizer sees it. */
static inline HFL_HD float hfl_op_prox_grad(float g, float w, float anchor, float mu) {
    return g + mu * (w - anchor);
}

/* The row's pieces, which cuda/loss.cu's warp runs too: exp(z[c] - zmax),
 * column c's dlogit (inv = 1 / sum), and the loss. */
static inline HFL_TYPED float hfl_op_xent_exp(hfl_precision t, const void *z, int c, float zmax) {
    return expf(hfl_ld(t, z, c) - zmax);
}
static inline HFL_TYPED void hfl_op_xent_dlogit(hfl_precision t, void *drow, const void *z, int c,
                                                int32_t label, float zmax, float inv, float scale) {
    float p = hfl_op_xent_exp(t, z, c, zmax) * inv;
    hfl_st(t, drow, c, scale * (p - (c == label ? 1.0f : 0.0f)));
}
static inline HFL_TYPED float hfl_op_xent_loss(hfl_precision t, const void *z, int32_t label,
                                               float zmax, float sum) {
    return logf(sum) - (hfl_ld(t, z, label) - zmax);
}

/* Softmax cross-entropy of one row z of logits (type t) against its label.
 *
 * Numerically stable: the row maximum is subtracted before exp, so no exp
 * argument is positive and the sum lies in [1, cols]. Returns the row's loss
 * log(sum exp(z - max)) - (z[label] - max). When drow != NULL it receives
 * scale * (softmax(z) - onehot(label)), each element stored once as type t;
 * the caller passes scale = loss scale / rows so the gradient is that of the
 * (scaled) mean loss. *is_correct gets 1 when the first index of the row
 * maximum equals the label (torch.argmax's tie rule). Each logit is read
 * where it is used (no copy of the row). The CPU backend runs it; the
 * exponential, dlogit and loss are the bodies the GPU's warp runs too. */
static inline HFL_TYPED float hfl_op_softmax_xent_row(hfl_precision t, const void *z, int32_t label,
                                                      void *drow, int cols, float scale,
                                                      int *is_correct) {
    float zmax = hfl_ld(t, z, 0);
    int amax = 0;
    for (int c = 1; c < cols; c++) {
        float v = hfl_ld(t, z, c);
        if (v > zmax) {
            zmax = v;
            amax = c;
        }
    }
    float sum = 0.0f;
    for (int c = 0; c < cols; c++) sum += hfl_op_xent_exp(t, z, c, zmax);
    if (drow) {
        float inv = 1.0f / sum;
        for (int c = 0; c < cols; c++) hfl_op_xent_dlogit(t, drow, z, c, label, zmax, inv, scale);
    }
    *is_correct = (amax == label);
    return hfl_op_xent_loss(t, z, label, zmax, sum);
}

/* The same row split over HFL_XENT_LANES lanes (cuda/loss.cu's warp per
 * row), giving the bits above:
 * - the argmax: lane l scans columns l, l + LANES, ... for its first largest
 *   value that is not a NaN (hfl_op_xent_lane_max); the lanes' candidates
 *   are combined in any order by hfl_op_xent_pick (the larger; on equal
 *   values, -0 and +0 included, the lower column); a NaN in column 0, which
 *   the scan above keeps, or a row of NaNs, then gives column 0
 *   (hfl_op_xent_argmax_done). That is the scan's (zmax, amax) for any row:
 *   the scan skips every later NaN and keeps the first of equal values.
 * - the sum of hfl_op_xent_exp over the columns runs in column order, in one
 *   lane: the scan's order (a tree would round differently);
 * - the dlogits (hfl_op_xent_dlogit) are independent per column, and the
 *   loss is hfl_op_xent_loss. */
#define HFL_XENT_LANES 32
typedef struct hfl_xent_max {
    float m; /* the value */
    int c;   /* its column; -1: none yet */
} hfl_xent_max;

static inline HFL_TYPED hfl_xent_max hfl_op_xent_lane_max(hfl_precision t, const void *z, int cols,
                                                          int lane) {
    hfl_xent_max a = {0.0f, -1};
    for (int c = lane; c < cols; c += HFL_XENT_LANES) {
        float v = hfl_ld(t, z, c);
        if (a.c < 0 ? v == v : v > a.m) {
            a.m = v;
            a.c = c;
        }
    }
    return a;
}

static inline HFL_HD hfl_xent_max hfl_op_xent_pick(hfl_xent_max a, hfl_xent_max b) {
    if (b.c < 0) return a;
    if (a.c < 0 || b.m > a.m || (b.m == a.m && b.c < a.c)) return b;
    return a;
}

static inline HFL_TYPED hfl_xent_max hfl_op_xent_argmax_done(hfl_precision t, const void *z,
                                                             hfl_xent_max a) {
    float z0 = hfl_ld(t, z, 0);
    if (z0 != z0 || a.c < 0) {
        a.m = z0;
        a.c = 0;
    }
    return a;
}

/* ---- convolution and pooling (one sample, geometry in kernels/geom.h) ---- */

/* im2col: the input offset (ci*h + iy)*w + ix that column entry
 * [(ci*k + ky)*k + kx, oy*wo + ox] of a sample copies, or -1 when the tap falls in the
 * zero padding. The CPU backend walks (ci, ky, kx, oy, ox) in nested loops;
 * a CUDA thread derives them from its index. */
static inline HFL_HD long hfl_op_im2col_src(const hfl_window_geom *g, int ci, int ky, int kx,
                                            int oy, int ox) {
    int iy = oy * g->s - g->p + ky, ix = ox * g->s - g->p + kx;
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) return -1;
    return ((long)ci * g->h + iy) * g->w + ix;
}

/* col2im, the adjoint of im2col, for input element (ci, iy, ix): the sum of
 * every column entry im2col copied from it, in (ky, kx) order, where the
 * sample's column entry [row, oy*wo + ox] is cols[row * ld + oy*wo + ox]
 * (ld = n*ho*wo in the chunk layout of kernels/backend.h, cols pointing at
 * the sample's first position). The taps that read (iy, ix) are those with
 * oy*s = iy + p - ky for an integer oy in [0, ho), and likewise for the
 * columns. */
static inline HFL_HD float hfl_op_col2im(const float *cols, const hfl_window_geom *g, long ld,
                                         int ci, int iy, int ix) {
    float sum = 0.0f;
    for (int ky = 0; ky < g->k; ky++) {
        int ty = iy + g->p - ky;
        if (ty < 0 || ty % g->s) continue;
        int oy = ty / g->s;
        if (oy >= g->ho) continue;
        for (int kx = 0; kx < g->k; kx++) {
            int tx = ix + g->p - kx;
            if (tx < 0 || tx % g->s) continue;
            int ox = tx / g->s;
            if (ox >= g->wo) continue;
            long row = ((long)ci * g->k + ky) * g->k + kx;
            sum += cols[row * ld + (long)oy * g->wo + ox];
        }
    }
    return sum;
}

/* Max pooling: the offset iy*w + ix within one channel plane (type t) of the
 * first maximum of window (oy, ox), scanning the window row-major and
 * skipping padding taps (PyTorch's tie rule; a NaN wins only when it comes
 * first). Callers keep p <= k/2 so every window holds at least one real tap. */
static inline HFL_TYPED int hfl_op_maxpool_argmax(hfl_precision t, const void *plane,
                                                  const hfl_window_geom *g, int oy, int ox) {
    int best = -1;
    float bv = 0.0f;
    for (int ky = 0; ky < g->k; ky++) {
        int iy = oy * g->s - g->p + ky;
        if (iy < 0 || iy >= g->h) continue;
        for (int kx = 0; kx < g->k; kx++) {
            int ix = ox * g->s - g->p + kx;
            if (ix < 0 || ix >= g->w) continue;
            int at = iy * g->w + ix;
            float v = hfl_ld(t, plane, at);
            if (best < 0 || v > bv) {
                best = at;
                bv = v;
            }
        }
    }
    return best;
}

/* Max pooling backward for input element (iy, ix) of one channel plane: the
 * fp32 sum of dy over the windows whose first maximum it is, in window order
 * (the caller stores it, rounding once). The argmax is recomputed from the
 * input, so backward needs neither the output nor an index map. Windows
 * containing row iy are oy in [ceil((iy + p - k + 1) / s), floor((iy + p) / s)]
 * within [0, ho). */
static inline HFL_TYPED float hfl_op_maxpool_bwd(hfl_precision t, const void *xplane,
                                                 const void *dyplane, const hfl_window_geom *g,
                                                 int iy, int ix) {
    int ty = iy + g->p, tx = ix + g->p;
    int oy0 = ty - g->k + 1 <= 0 ? 0 : (ty - g->k + 1 + g->s - 1) / g->s;
    int ox0 = tx - g->k + 1 <= 0 ? 0 : (tx - g->k + 1 + g->s - 1) / g->s;
    int oy1 = ty / g->s, ox1 = tx / g->s;
    if (oy1 >= g->ho) oy1 = g->ho - 1;
    if (ox1 >= g->wo) ox1 = g->wo - 1;
    float sum = 0.0f;
    for (int oy = oy0; oy <= oy1; oy++)
        for (int ox = ox0; ox <= ox1; ox++)
            if (hfl_op_maxpool_argmax(t, xplane, g, oy, ox) == iy * g->w + ix)
                sum += hfl_ld(t, dyplane, (size_t)oy * g->wo + ox);
    return sum;
}

/* Per-channel bias gradient of dy[n, c, hw] (type t) for channel ch: the sum
 * over samples and positions, accumulated in fp32 sample by sample (the
 * sequential sum the backends ran before the lane tree below; kept as the
 * tests' reference). */
static inline HFL_TYPED float hfl_op_channel_sum(hfl_precision t, const void *dy, int n, int c,
                                                 int hw, int ch) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        size_t row = ((size_t)i * c + ch) * hw;
        for (int j = 0; j < hw; j++) sum += hfl_ld(t, dy, row + j);
    }
    return sum;
}

/* The channel bias gradient's fixed tree, the same on both
 * backends: the channel's m = n*hw values, in (sample, position) order
 * e = 0 .. m-1, are dealt to HFL_CHANNEL_LANES lanes (value e to lane
 * e % LANES); each lane sums its values in increasing e in fp32 from 0
 * (hfl_op_channel_lane), then the lanes' partials are added pairwise, level
 * by level (hfl_op_tree_level for half = LANES/2, ..., 1: p[j] += p[j +
 * half] for j < half), and p[0] is added to dbias. A CUDA block of LANES
 * threads runs the lanes and each level in parallel, the CPU in loops: the
 * same additions on the same operands, so the same bits. Rounding: each
 * value passes through at most ceil(m / LANES) - 1 + log2(LANES) additions,
 * so |sum - exact| <= gamma_(ceil(m/LANES) + 8) * sum|dy| (Higham, ASNA
 * 2nd ed., 4.2), where the sequential sum's bound has gamma_(m - 1). */
#define HFL_CHANNEL_LANES 256
#define HFL_CHANNEL_LEVELS 8 /* log2(HFL_CHANNEL_LANES) */

static inline HFL_TYPED float hfl_op_channel_lane(hfl_precision t, const void *dy, int n, int c,
                                                  int hw, int ch, int lane) {
    float sum = 0.0f;
    size_t m = (size_t)n * hw;
    for (size_t e = (size_t)lane; e < m; e += HFL_CHANNEL_LANES) {
        size_t i = e / (size_t)hw, j = e % (size_t)hw;
        sum += hfl_ld(t, dy, (i * c + ch) * hw + j);
    }
    return sum;
}

static inline HFL_HD void hfl_op_tree_level(float *p, int j, int half) { p[j] = p[j] + p[j + half]; }

/* ---- AdamW ---- */

/* torch.optim.AdamW's single-tensor step (Loshchilov & Hutter 2019):
 *   w *= 1 - lr*wd;  m += (1 - b1) (g - m);  v = b2 v + (1 - b2) g^2;
 *   w -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
 * with step_size = lr / (1 - b1^step) and bc2_sqrt = sqrt(1 - b2^step),
 * computed in double once per step by hfl_op_adamw_bias; the element body
 * is kernels/thread_hd.h's hfl_thread_adamw_step.
 *
 * The step number lives on the device: with sc set (the trainer's form),
 * adamw_step (kernels/backend.h) first counts the step in sc
 * (hfl_op_adamw_count) and then takes step_size and bc2_sqrt from sc's
 * powers (hfl_op_adamw_bias), so fp16's skipped steps, which only the device
 * knows of, are left out of the count without the host reading the flag
 * back. With sc NULL, step_size and bc2_sqrt are used as given
 * (the tests' adamw_make, to test the op at a chosen step). */

/* One more AdamW step in sc, unless skip_if_nonfinite is given and its
 * finite flag is 0 (fp16's skipped step, which torch's GradScaler does not
 * pass to optimizer.step()). The powers are products in double, one factor a
 * step, rather than pow(): a multiplication rounds the same on every IEEE
 * machine (there is nothing for an FMA to contract), so the CPU and the GPU
 * keep the same bits, while a pow() is each maths library's own. Each
 * product rounds once (unit roundoff u = 2^-53), so beta^t is within t u
 * relative of the exact power of the fp32 beta, and 1 - beta^t, since
 * 1 - b^t >= t (1 - b) b^(t-1), within u b / (1 - b) relative at every t:
 * 1.1e-13 for beta 0.999, 1.1e-12 for 0.9999, some 10^5 times finer than
 * the fp32 rounding of the step_size and bc2_sqrt made from it. */
static inline HFL_HD void hfl_op_adamw_count(hfl_step_scalars *sc, float beta1, float beta2,
                                             const hfl_step_scalars *skip_if_nonfinite) {
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return;
    sc->adam_steps++;
    sc->adam_beta1_pow *= (double)beta1;
    sc->adam_beta2_pow *= (double)beta2;
}

/* a's step_size and bc2_sqrt from sc's powers (the step just counted), in
 * double and rounded once to fp32, as torch computes its Python floats and
 * hands them to an fp32 kernel. Only one subtraction, division and square
 * root, all correctly rounded in IEEE double on both backends. */
static inline HFL_HD void hfl_op_adamw_bias(const hfl_step_scalars *sc, hfl_adamw_args *a) {
    a->step_size = (float)((double)a->lr / (1.0 - sc->adam_beta1_pow));
    a->bc2_sqrt = (float)sqrt(1.0 - sc->adam_beta2_pow);
}

/* fp16's dynamic loss scaler after one step, from the step's finite flag
 * (Micikevicius et al. 2018; PyTorch's GradScaler with growth and backoff 2
 * and 1/2): a step with non-finite gradients was skipped, so count it, halve
 * S and restart the clean count; `interval` clean steps in a row double S. */
static inline HFL_HD void hfl_op_scaler_update(hfl_step_scalars *sc, int interval) {
    if (!sc->finite) {
        sc->skipped++;
        sc->loss_scale *= 0.5f;
        sc->clean_steps = 0;
        return;
    }
    if (++sc->clean_steps == interval) {
        sc->loss_scale *= 2.0f;
        sc->clean_steps = 0;
    }
}

/* g * inv_scale, and whether it is finite (the fp16 loss scaler's check). */
static inline HFL_HD float hfl_op_unscale(float g, float inv_scale, int *finite) {
    float r = g * inv_scale;
    *finite &= (r - r) == 0.0f; /* Inf - Inf and NaN - NaN are NaN */
    return r;
}

#endif
