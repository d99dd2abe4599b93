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
 * against the columns (dW), channel_bias_grad (db) and sgemm + col2im (dX).
 *
 * REDUCED PRECISION (the *_lp ops). Training in bf16 or fp16 stores
 * activations, activation gradients and working weights as 2-byte values
 * (uint16_t bit patterns of the hfl_precision `lp`) and computes in fp32:
 * every op widens its 2-byte operands exactly, does the fp32 arithmetic of
 * the fp32 op, and rounds each 2-byte result once, to nearest even (the
 * conversions of compress/quant_hd.h), as a GPU's fp32-accumulating kernels
 * do. Parameter gradients, master weights and momentum stay fp32. The CPU
 * backend feeds OpenBLAS sgemm through fp32 staging tiles in a caller-given
 * workspace of hfl_gemm_lp_ws_bytes (planned like any workspace); a cuBLAS
 * backend (GemmEx) would ignore it, so plans do not depend on the backend. */
#ifndef HFL_BACKEND_H
#define HFL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/geom.h"

/* Storage type of a tensor: fp32, or 2-byte bfloat16 / IEEE binary16 held as
 * uint16_t bit patterns. Also the training precision (model/model.h). */
typedef enum { HFL_PREC_FP32, HFL_PREC_BF16, HFL_PREC_FP16 } hfl_precision;

/* gemm_lp operand flags: which of A, B, C are fp32 (float *) rather than 2-byte `lp`. */
enum { HFL_GEMM_A_F32 = 1, HFL_GEMM_B_F32 = 2, HFL_GEMM_C_F32 = 4 };
/* gemm_lp bias: none, bias[j] added to column j, bias[i] added to row i. */
enum { HFL_BIAS_NONE, HFL_BIAS_COL, HFL_BIAS_ROW };

/* Bytes of fp32 staging gemm_lp needs for these operand types and sizes on
 * the CPU backend: for each 2-byte operand a tile of at most HFL_GEMM_TILE
 * rows of op(A) or columns of op(B) by HFL_GEMM_TILE_K of k, and one
 * HFL_GEMM_TILE-square output tile for a 2-byte C (at most 320 KiB in all).
 * Monotone in m, n and k, so a plan for batch b covers any smaller batch. */
#define HFL_GEMM_TILE 128
#define HFL_GEMM_TILE_K 256
size_t hfl_gemm_lp_ws_bytes(unsigned f32_mask, int m, int n, int k);

typedef struct hfl_backend {
    const char *name; /* "cpu", "cuda" */
    int host_memory;  /* 1: device pointers are host pointers (the CPU backend), so the host
                         may write a buffer directly instead of staging and uploading */

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

    /* ---- reduced precision (header comment; lp is HFL_PREC_BF16 or FP16) ---- */

    /* C[m,n] = alpha op(A) op(B) + beta C (+ bias) in fp32, row-major as sgemm;
     * operands flagged in f32_mask are float, the others uint16_t of lp; a
     * 2-byte C is rounded once after the bias. bias (uint16_t of lp, or NULL
     * with HFL_BIAS_NONE) is added per column or per row. ws holds
     * hfl_gemm_lp_ws_bytes(f32_mask, m, n, k) bytes. */
    void (*gemm_lp)(hfl_precision lp, unsigned f32_mask, int trans_a, int trans_b, int m, int n,
                    int k, float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                    void *c, int ldc, const uint16_t *bias, int bias_axis, void *ws);
    /* dst[i] = src[i] rounded to lp (nearest even; overflow gives Inf). */
    void (*round_lp)(hfl_precision lp, uint16_t *dst, const float *src, size_t n);
    void (*relu_fwd_lp)(hfl_precision lp, uint16_t *y, const uint16_t *x, size_t n);
    void (*relu_bwd_lp)(hfl_precision lp, uint16_t *dx, const uint16_t *dy, const uint16_t *y,
                        size_t n);
    /* dbias[c] += sum_r dy[r, c], summed in fp32 (dbias is fp32). */
    void (*bias_grad_lp)(hfl_precision lp, float *dbias, const uint16_t *dy, int rows, int cols);
    void (*channel_bias_grad_lp)(hfl_precision lp, float *dbias, const uint16_t *dy, int n, int c,
                                 int hw);
    /* im2col of a 2-byte x into fp32 columns (exact). */
    void (*im2col_lp)(hfl_precision lp, float *cols, const uint16_t *x, int n, hfl_window_geom g);
    /* col2im of fp32 columns, each dx element summed in fp32 and rounded once. */
    void (*col2im_lp)(hfl_precision lp, uint16_t *dx, const float *cols, int n, hfl_window_geom g);
    void (*maxpool_fwd_lp)(hfl_precision lp, uint16_t *y, const uint16_t *x, int n,
                           hfl_window_geom g);
    void (*maxpool_bwd_lp)(hfl_precision lp, uint16_t *dx, const uint16_t *dy, const uint16_t *x,
                           int n, hfl_window_geom g);
    /* softmax_xent on 2-byte logits; dlogits (2-byte, may be NULL) receives
     * grad_scale times the fp32 op's gradient, rounded once (the loss scale of
     * fp16 training). ws holds 2 * cols floats. */
    float (*softmax_xent_lp)(hfl_precision lp, const uint16_t *logits, const int32_t *labels,
                             uint16_t *dlogits, int rows, int cols, int *correct, float grad_scale,
                             float *ws);
    /* g[i] *= inv_scale; returns 1 when every result is finite, else 0. */
    int (*unscale_grads)(float *g, size_t n, float inv_scale);
    /* sgd_step on the fp32 master weights, then w[i] = master[i] rounded to lp. */
    void (*sgd_step_lp)(hfl_precision lp, float *master, float *v, const float *g, uint16_t *w,
                        size_t n, float lr, float momentum, float wd);
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
