/* backend.h: the device layer's one interface, implemented by cpu/ (OpenBLAS)
 * and later cuda/ (cuBLAS).
 *
 * All float pointers passed to the ops are device pointers obtained from
 * `alloc` (on the CPU backend, ordinary host memory). Matrices are row-major.
 * The per-element arithmetic of every op lives in `kernels/ops_hd.h` so both
 * backends run the same formulas.
 *
 * Convolution and pooling ops take n samples laid out [n, C, H, W] (row-major,
 * CHW within a sample) and the window geometry g of kernels/geom.h. A
 * convolution is im2col + sgemm + channel_bias_add; its backward is sgemm
 * against the columns (dW), channel_bias_grad (db) and sgemm + col2im (dX). */
#ifndef HFL_BACKEND_H
#define HFL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/geom.h"

typedef struct hfl_backend {
    const char *name; /* "cpu", "cuda" */

    /* A buffer of `bytes` (64-byte aligned on the CPU). try_alloc returns NULL
     * with one line in err (may be NULL) when the memory budget or the system
     * refuses; alloc prints that line and exits(1) instead. free(NULL) is a no-op. */
    void *(*alloc)(size_t bytes);
    void *(*try_alloc)(size_t bytes, char *err);
    void (*free)(void *p);
    void (*upload)(void *dst_dev, const void *src_host, size_t bytes);
    void (*download)(void *dst_host, const void *src_dev, size_t bytes);
    void (*copy)(void *dst_dev, const void *src_dev, size_t bytes);

    /* C[m,n] = alpha * op(A) op(B) + beta * C, row-major; op(X) = X^T when trans_x. */
    void (*sgemm)(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *c, int ldc);
    /* y[r, c] += bias[c] for r < rows */
    void (*bias_add)(float *y, const float *bias, int rows, int cols);
    /* dbias[c] += sum_r dy[r, c] */
    void (*bias_grad)(float *dbias, const float *dy, int rows, int cols);
    void (*relu_fwd)(float *y, const float *x, size_t n);
    /* dx = dy * (y > 0); dx may alias dy */
    void (*relu_bwd)(float *dx, const float *dy, const float *y, size_t n);
    /* Mean softmax cross-entropy of logits[rows, cols] against labels; writes
     * dlogits = d(mean loss)/d(logits) when dlogits != NULL, and the number of
     * rows whose argmax equals the label into *correct when correct != NULL. */
    float (*softmax_xent)(const float *logits, const int32_t *labels, float *dlogits, int rows,
                          int cols, int *correct);
    /* SGD with momentum and decoupled-from-nothing (L2) weight decay, PyTorch's form:
     * g' = g + wd*w; v = momentum*v + g'; w -= lr*v  (v unused when momentum == 0) */
    void (*sgd_step)(float *w, float *v, const float *g, size_t n, float lr, float momentum,
                     float wd);
    void (*fill)(float *p, float value, size_t n);

    /* cols[i, (ci*k + ky)*k + kx, oy*wo + ox] = x[i, ci, oy*s - p + ky, ox*s - p + kx],
     * 0 where that falls in the padding; cols is [n, C*k*k, ho*wo]. */
    void (*im2col)(float *cols, const float *x, int n, hfl_window_geom g);
    /* The adjoint of im2col: dx[i, ci, iy, ix] = the sum of the cols entries im2col
     * copied from that element. Overwrites dx [n, C, H, W]. */
    void (*col2im)(float *dx, const float *cols, int n, hfl_window_geom g);
    /* y[i, c, oy, ox] = max of window (oy, ox) of x[i, c] (padding never wins). */
    void (*maxpool_fwd)(float *y, const float *x, int n, hfl_window_geom g);
    /* dx[i, c] = dy routed to the first maximum of each window, recomputed from
     * x (so neither y nor an index map is needed). Overwrites dx. */
    void (*maxpool_bwd)(float *dx, const float *dy, const float *x, int n, hfl_window_geom g);
    /* y[i, ch, j] += bias[ch] for y [n, c, hw] */
    void (*channel_bias_add)(float *y, const float *bias, int n, int c, int hw);
    /* dbias[ch] += sum over i and j of dy[i, ch, j] (accumulates, like bias_grad) */
    void (*channel_bias_grad)(float *dbias, const float *dy, int n, int c, int hw);
} hfl_backend;

const hfl_backend *hfl_backend_cpu(void);

/* The CPU backend's memory budget and accounting (process-wide, thread-safe).
 * Live bytes are the sum of the sizes asked of alloc/try_alloc not yet freed
 * (the planner's figures; the allocator's 64-byte header and rounding are not
 * counted). An allocation that would take live bytes above a non-zero budget
 * fails: try_alloc returns NULL, alloc exits. Setting a budget below the live
 * bytes frees nothing; allocations fail until enough is freed. */
void hfl_backend_cpu_set_budget(uint64_t bytes); /* 0 = no budget (the default) */
uint64_t hfl_backend_cpu_budget(void);
uint64_t hfl_backend_cpu_live_bytes(void);
uint64_t hfl_backend_cpu_peak_bytes(void); /* high-water mark of live bytes */
void hfl_backend_cpu_reset_peak(void);     /* peak := live bytes now */

#endif
