/* ops_hd.h: the per-element (and per-row) arithmetic of the backend ops.
 *
 * Every formula the backends run is written here once as a `static inline
 * HFL_HD` function: the CPU backend (cpu/backend_cpu.c) calls these in loops,
 * the CUDA backend calls them once per thread (or per row). Only indexing and
 * launching differ between the two, so the arithmetic is tested on every
 * machine by the CPU tests. Nothing here allocates, branches on the backend or
 * touches memory beyond the element or row it is given.
 *
 * The convolution and pooling bodies at the end work on one sample's [C, H, W]
 * plane and a kernels/geom.h window. They are written in *gather* form (each
 * output element computes its own value, nothing is scattered), so a CUDA
 * thread per element needs no atomics and both backends sum in one order.
 *
 * The *_lp bodies at the very end are the same formulas on 2-byte storage
 * (bf16 or fp16, kernels/backend.h): widen exactly with kernels/half_hd.h's
 * conversions, compute in fp32, round once to nearest even. */
#ifndef HFL_OPS_HD_H
#define HFL_OPS_HD_H

#include <math.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/geom.h"
#include "kernels/half_hd.h"
#include "kernels/hd.h"

/* y = x + b for one element of a row-broadcast bias. */
static inline HFL_HD float hfl_op_bias_add(float y, float b) { return y + b; }

/* ReLU forward: max(x, 0). A NaN input maps to 0 (the comparison is false),
 * unlike torch.relu, which propagates it; the select compiles branch-free. */
static inline HFL_HD float hfl_op_relu(float x) { return x > 0.0f ? x : 0.0f; }

/* ReLU backward from the *output* y: dx = dy where the unit was active.
 * y > 0 exactly when x > 0, so the pre-activation need not be kept. */
static inline HFL_HD float hfl_op_relu_bwd(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

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

/* Softmax cross-entropy of one row of logits against its label.
 *
 * Numerically stable: the row maximum is subtracted before exp, so no exp
 * argument is positive and the sum lies in [1, cols]. Returns the row's loss
 * log(sum exp(z - max)) - (z[label] - max). When drow != NULL it receives
 * scale * (softmax(z) - onehot(label)); the caller passes scale = 1/rows so
 * the gradient is that of the mean loss. *is_correct gets 1 when the first
 * index of the row maximum equals the label (torch.argmax's tie rule). */
static inline HFL_HD float hfl_op_softmax_xent_row(const float *z, int32_t label, float *drow,
                                                   int cols, float scale, int *is_correct) {
    float zmax = z[0];
    int amax = 0;
    for (int c = 1; c < cols; c++) {
        if (z[c] > zmax) {
            zmax = z[c];
            amax = c;
        }
    }
    float sum = 0.0f;
    for (int c = 0; c < cols; c++) sum += expf(z[c] - zmax);
    float log_sum = logf(sum);
    if (drow) {
        float inv = 1.0f / sum;
        for (int c = 0; c < cols; c++) {
            float p = expf(z[c] - zmax) * inv;
            drow[c] = scale * (p - (c == label ? 1.0f : 0.0f));
        }
    }
    *is_correct = (amax == label);
    return log_sum - (z[label] - zmax);
}

/* ---- convolution and pooling (one sample, geometry in kernels/geom.h) ---- */

/* im2col: the input offset (ci*h + iy)*w + ix that column entry
 * [(ci*k + ky)*k + kx, oy*wo + ox] copies, or -1 when the tap falls in the
 * zero padding. The CPU backend walks (ci, ky, kx, oy, ox) in nested loops;
 * a CUDA thread derives them from its index. */
static inline HFL_HD long hfl_op_im2col_src(const hfl_window_geom *g, int ci, int ky, int kx,
                                            int oy, int ox) {
    int iy = oy * g->s - g->p + ky, ix = ox * g->s - g->p + kx;
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) return -1;
    return ((long)ci * g->h + iy) * g->w + ix;
}

/* col2im, the adjoint of im2col, for input element (ci, iy, ix): the sum of
 * every column entry im2col copied from it, in (ky, kx) order. The taps that
 * read (iy, ix) are those with oy*s = iy + p - ky for an integer oy in
 * [0, ho), and likewise for the columns. */
static inline HFL_HD float hfl_op_col2im(const float *cols, const hfl_window_geom *g, int ci,
                                         int iy, int ix) {
    long plane = (long)g->ho * g->wo;
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
            sum += cols[row * plane + (long)oy * g->wo + ox];
        }
    }
    return sum;
}

/* Max pooling: the offset iy*w + ix within one channel plane of the first
 * maximum of window (oy, ox), scanning the window row-major and skipping
 * padding taps (PyTorch's tie rule; a NaN wins only when it comes first).
 * Callers keep p <= k/2 so every window holds at least one real tap. */
static inline HFL_HD int hfl_op_maxpool_argmax(const float *plane, const hfl_window_geom *g,
                                               int oy, int ox) {
    int best = -1;
    float bv = 0.0f;
    for (int ky = 0; ky < g->k; ky++) {
        int iy = oy * g->s - g->p + ky;
        if (iy < 0 || iy >= g->h) continue;
        for (int kx = 0; kx < g->k; kx++) {
            int ix = ox * g->s - g->p + kx;
            if (ix < 0 || ix >= g->w) continue;
            float v = plane[iy * g->w + ix];
            if (best < 0 || v > bv) {
                best = iy * g->w + ix;
                bv = v;
            }
        }
    }
    return best;
}

/* Max pooling backward for input element (iy, ix) of one channel plane: the
 * sum of dy over the windows whose first maximum it is. The argmax is
 * recomputed from the input, so backward needs neither the output nor an
 * index map. Windows containing row iy are oy in
 * [ceil((iy + p - k + 1) / s), floor((iy + p) / s)] within [0, ho). */
static inline HFL_HD float hfl_op_maxpool_bwd(const float *xplane, const float *dyplane,
                                              const hfl_window_geom *g, int iy, int ix) {
    int ty = iy + g->p, tx = ix + g->p;
    int oy0 = ty - g->k + 1 <= 0 ? 0 : (ty - g->k + 1 + g->s - 1) / g->s;
    int ox0 = tx - g->k + 1 <= 0 ? 0 : (tx - g->k + 1 + g->s - 1) / g->s;
    int oy1 = ty / g->s, ox1 = tx / g->s;
    if (oy1 >= g->ho) oy1 = g->ho - 1;
    if (ox1 >= g->wo) ox1 = g->wo - 1;
    float sum = 0.0f;
    for (int oy = oy0; oy <= oy1; oy++)
        for (int ox = ox0; ox <= ox1; ox++)
            if (hfl_op_maxpool_argmax(xplane, g, oy, ox) == iy * g->w + ix)
                sum += dyplane[oy * g->wo + ox];
    return sum;
}

/* Per-channel bias gradient of dy[n, c, hw] for channel ch: the sum over
 * samples and positions, accumulated in float sample by sample. */
static inline HFL_HD float hfl_op_channel_sum(const float *dy, int n, int c, int hw, int ch) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        const float *row = dy + ((long)i * c + ch) * hw;
        for (int j = 0; j < hw; j++) sum += row[j];
    }
    return sum;
}

/* ---- 2-byte storage (bf16 or fp16) ---- */

/* The exact fp32 value of a 2-byte element of type lp. */
static inline HFL_HD float hfl_op_widen(hfl_precision lp, uint16_t h) {
    return lp == HFL_PREC_FP16 ? hfl_f16_to_f32(h) : hfl_bf16_to_f32(h);
}

/* x rounded to lp, nearest even; past the largest finite value it becomes
 * Inf (no saturation: an fp16 overflow must be seen by the loss scaler). */
static inline HFL_HD uint16_t hfl_op_narrow(hfl_precision lp, float x) {
    return lp == HFL_PREC_FP16 ? hfl_f32_to_f16(x) : hfl_f32_to_bf16(x);
}

/* Whether a 2-byte value is > 0 (positive, finite or +Inf; not NaN), on the
 * bits: what hfl_op_relu's x > 0 says of its widened value. */
static inline HFL_HD int hfl_op_positive_lp(hfl_precision lp, uint16_t h) {
    uint16_t inf = lp == HFL_PREC_FP16 ? 0x7C00u : 0x7F80u;
    return h != 0 && h <= inf; /* the sign bit set makes h > inf */
}

/* ReLU forward and backward on 2-byte values, on the bits: hfl_op_relu and
 * hfl_op_relu_bwd of the widened values, whose results are 2-byte values
 * already (a NaN dy passes through unchanged rather than requieted). */
static inline HFL_HD uint16_t hfl_op_relu_lp(hfl_precision lp, uint16_t x) {
    return hfl_op_positive_lp(lp, x) ? x : 0;
}
static inline HFL_HD uint16_t hfl_op_relu_bwd_lp(hfl_precision lp, uint16_t dy, uint16_t y) {
    return hfl_op_positive_lp(lp, y) ? dy : 0;
}

/* hfl_op_maxpool_argmax on a 2-byte plane (same scan, same tie rule). */
static inline HFL_HD int hfl_op_maxpool_argmax_lp(hfl_precision lp, const uint16_t *plane,
                                                  const hfl_window_geom *g, int oy, int ox) {
    int best = -1;
    float bv = 0.0f;
    for (int ky = 0; ky < g->k; ky++) {
        int iy = oy * g->s - g->p + ky;
        if (iy < 0 || iy >= g->h) continue;
        for (int kx = 0; kx < g->k; kx++) {
            int ix = ox * g->s - g->p + kx;
            if (ix < 0 || ix >= g->w) continue;
            float v = hfl_op_widen(lp, plane[iy * g->w + ix]);
            if (best < 0 || v > bv) {
                best = iy * g->w + ix;
                bv = v;
            }
        }
    }
    return best;
}

/* hfl_op_maxpool_bwd on 2-byte planes: the fp32 sum over the windows whose
 * first maximum is (iy, ix), in window order (the caller rounds it once). */
static inline HFL_HD float hfl_op_maxpool_bwd_lp(hfl_precision lp, const uint16_t *xplane,
                                                 const uint16_t *dyplane, const hfl_window_geom *g,
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
            if (hfl_op_maxpool_argmax_lp(lp, xplane, g, oy, ox) == iy * g->w + ix)
                sum += hfl_op_widen(lp, dyplane[oy * g->wo + ox]);
    return sum;
}

/* hfl_op_channel_sum of a 2-byte dy, summed in fp32. */
static inline HFL_HD float hfl_op_channel_sum_lp(hfl_precision lp, const uint16_t *dy, int n,
                                                 int c, int hw, int ch) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        const uint16_t *row = dy + ((long)i * c + ch) * hw;
        for (int j = 0; j < hw; j++) sum += hfl_op_widen(lp, row[j]);
    }
    return sum;
}

/* hfl_op_softmax_xent_row on a 2-byte row: each logit is widened where it is
 * read (exact, so the arithmetic is that of the fp32 body on the widened row,
 * operation for operation) and each gradient element is rounded once to lp.
 * Needs no fp32 copy of the row, so a GPU thread can run it in registers.
 * Keep the two bodies in step: the tests compare them bit for bit. */
static inline HFL_HD float hfl_op_softmax_xent_row_lp(hfl_precision lp, const uint16_t *z,
                                                      int32_t label, uint16_t *drow, int cols,
                                                      float scale, int *is_correct) {
    float zmax = hfl_op_widen(lp, z[0]);
    int amax = 0;
    for (int c = 1; c < cols; c++) {
        float v = hfl_op_widen(lp, z[c]);
        if (v > zmax) {
            zmax = v;
            amax = c;
        }
    }
    float sum = 0.0f;
    for (int c = 0; c < cols; c++) sum += expf(hfl_op_widen(lp, z[c]) - zmax);
    float log_sum = logf(sum);
    if (drow) {
        float inv = 1.0f / sum;
        for (int c = 0; c < cols; c++) {
            float p = expf(hfl_op_widen(lp, z[c]) - zmax) * inv;
            drow[c] = hfl_op_narrow(lp, scale * (p - (c == label ? 1.0f : 0.0f)));
        }
    }
    *is_correct = (amax == label);
    return log_sum - (hfl_op_widen(lp, z[label]) - zmax);
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
