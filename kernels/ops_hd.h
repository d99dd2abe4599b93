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
 * thread per element needs no atomics and both backends sum in one order. */
#ifndef HFL_OPS_HD_H
#define HFL_OPS_HD_H

#include <math.h>
#include <stdint.h>

#include "kernels/geom.h"
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

#endif
