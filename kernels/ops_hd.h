/* ops_hd.h: the per-element (and per-row) arithmetic of the backend ops.
 *
 * Every formula the backends run is written here once as a `static inline
 * HFL_HD` function: the CPU backend (cpu/backend_cpu.c) calls these in loops,
 * the CUDA backend calls them once per thread (or per row). Only indexing and
 * launching differ between the two, so the arithmetic is tested on every
 * machine by the CPU tests. Nothing here allocates, branches on the backend or
 * touches memory beyond the element or row it is given. */
#ifndef HFL_OPS_HD_H
#define HFL_OPS_HD_H

#include <math.h>
#include <stdint.h>

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

#endif
