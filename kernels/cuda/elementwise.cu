/* elementwise.cu: the CUDA backend's elementwise ops (fill, ReLU, the
 * conversion to a storage type, SGD, AdamW, FedProx's proximal gradient,
 * the fp16 loss scaler's unscale and update), the per-column bias gradient,
 * and gemm's bias kernels.
 *
 * Each kernel is its thread index, a bounds check and a thread body of
 * kernels/thread_hd.h (tested on the CPU against the CPU backend); built with
 * -fmad=false, the results are the CPU backend's bit for bit. ReLU and the
 * conversion run a thread per two elements over a 2-byte type where they
 * can (thread_hd.h's PAIRS: one 4-byte load or store per tensor instead of
 * two 2-byte ones). The
 * exceptions to "three lines" are the finite flag, ANDed per block with
 * __syncthreads_and and then into sc->finite with atomicAnd (order-free, so
 * deterministic), the optimizers' skip, read from the device scalars, and
 * AdamW's step count and bias corrections, also made on the device. */
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/thread_hd.h"

#define STREAM hfl_cuda_ctx.compute
#define LAUNCH HFL_CUDA_LAUNCH

static __global__ void k_fill(float *p, float value, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_fill(i, p, value);
}

extern "C" cudaError_t cuda_kernels_runnable(void) {
    struct cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, k_fill);
    (void)cudaGetLastError(); /* not sticky: clear it for later calls */
    return e;
}

static __global__ void k_bias_grad(hfl_precision t, float *dbias, const void *dy, int rows,
                                   int cols, int accumulate) {
    size_t i = hfl_cuda_index();
    if (i >= (size_t)cols) return;
    hfl_thread_bias_grad(i, t, dbias, dy, rows, cols, accumulate);
}

static __global__ void k_relu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_relu_fwd(i, t, y, x);
}

static __global__ void k_relu_bwd(hfl_precision t, void *dx, const void *dy, const void *y,
                                  size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_relu_bwd(i, t, dx, dy, y);
}

static __global__ void k_relu_fwd_pairs(hfl_precision t, void *y, const void *x, size_t pairs) {
    size_t j = hfl_cuda_index();
    if (j >= pairs) return;
    hfl_pair_relu_fwd(j, t, y, x);
}

static __global__ void k_relu_bwd_pairs(hfl_precision t, void *dx, const void *dy, const void *y,
                                        size_t pairs) {
    size_t j = hfl_cuda_index();
    if (j >= pairs) return;
    hfl_pair_relu_bwd(j, t, dx, dy, y);
}

static __global__ void k_convert_pairs(hfl_precision t, void *dst, const float *src, size_t pairs) {
    size_t j = hfl_cuda_index();
    if (j >= pairs) return;
    hfl_pair_convert(j, t, dst, src);
}

static __global__ void k_convert(hfl_precision t, void *dst, const float *src, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_convert(i, t, dst, src);
}

static __global__ void k_sgd_step(hfl_precision t, float *master, float *v, const float *g,
                                  void *w, size_t n, float lr, float momentum, float wd,
                                  const hfl_step_scalars *skip_if_nonfinite) {
    size_t i = hfl_cuda_index();
    if (i >= n || (skip_if_nonfinite && !skip_if_nonfinite->finite)) return;
    hfl_thread_sgd_step(i, t, master, v, g, w, lr, momentum, wd);
}

/* AdamW's step count in a.sc (ops_hd.h), one thread, before the update
 * kernel reads it: the same stream orders the two. */
static __global__ void k_adamw_count(hfl_step_scalars *sc, float beta1, float beta2,
                                     const hfl_step_scalars *skip_if_nonfinite) {
    hfl_op_adamw_count(sc, beta1, beta2, skip_if_nonfinite);
}

/* a, with its bias corrections from a.sc when set: thread 0 of each block
 * runs hfl_op_adamw_bias (a double division and square root once a block
 * rather than once an element) and shares the two floats. a.sc is the same
 * for the whole grid, so every thread of a block reaches the barrier. */
static __device__ hfl_adamw_args adamw_block_args(hfl_adamw_args a) {
    __shared__ float bias[2];
    if (!a.sc) return a;
    if (threadIdx.x == 0) {
        hfl_adamw_args b = a;
        hfl_op_adamw_bias(a.sc, &b);
        bias[0] = b.step_size;
        bias[1] = b.bc2_sqrt;
    }
    __syncthreads();
    a.step_size = bias[0];
    a.bc2_sqrt = bias[1];
    return a;
}

static __global__ void k_adamw(hfl_precision t, float *master, float *m, float *v, const float *g,
                               void *w, hfl_adamw_args a, const hfl_step_scalars *skip_if_nonfinite,
                               size_t count) {
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return; /* the whole grid */
    a = adamw_block_args(a);
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_adamw_step(i, t, master, m, v, g, w, a);
}

static __global__ void k_prox_grad(float *g, const float *w, const float *anchor, size_t n,
                                   float mu) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_prox_grad(i, g, w, anchor, mu);
}

extern "C" void cuda_fill(float *p, float value, size_t n) {
    if (n) LAUNCH(k_fill, n, p, value, n);
}

extern "C" void cuda_bias_grad(hfl_precision t, float *dbias, const void *dy, int rows, int cols,
                               int accumulate) {
    if (cols > 0 && (rows > 0 || !accumulate))
        LAUNCH(k_bias_grad, (size_t)cols, t, dbias, dy, rows, cols, accumulate);
}

extern "C" void cuda_relu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    if (!n) return;
    if (hfl_cuda_pairs(t, n, y, x, x)) LAUNCH(k_relu_fwd_pairs, n / 2, t, y, x, n / 2);
    else LAUNCH(k_relu_fwd, n, t, y, x, n);
}

extern "C" void cuda_relu_bwd(hfl_precision t, void *dx, const void *dy, const void *y, size_t n) {
    if (!n) return;
    if (hfl_cuda_pairs(t, n, dx, dy, y)) LAUNCH(k_relu_bwd_pairs, n / 2, t, dx, dy, y, n / 2);
    else LAUNCH(k_relu_bwd, n, t, dx, dy, y, n);
}

extern "C" void cuda_convert(hfl_precision t, void *dst, const float *src, size_t n) {
    if (!n) return;
    if (hfl_cuda_pairs(t, n, dst, dst, dst)) LAUNCH(k_convert_pairs, n / 2, t, dst, src, n / 2); /* src: floats */
    else LAUNCH(k_convert, n, t, dst, src, n);
}

extern "C" void cuda_sgd_step(hfl_precision t, float *master, float *v, const float *g, void *w,
                              size_t n, float lr, float momentum, float wd,
                              const hfl_step_scalars *skip_if_nonfinite) {
    if (n) LAUNCH(k_sgd_step, n, t, master, v, g, w, n, lr, momentum, wd, skip_if_nonfinite);
}

extern "C" void cuda_adamw_step(hfl_precision t, float *master, float *m, float *v,
                                const float *g, void *w, size_t n, hfl_adamw_args a,
                                const hfl_step_scalars *skip_if_nonfinite) {
    if (a.sc) {
        k_adamw_count<<<1, 1, 0, STREAM>>>(a.sc, a.beta1, a.beta2, skip_if_nonfinite);
        CUDA_CHECK_LAUNCH();
    }
    if (n) LAUNCH(k_adamw, n, t, master, m, v, g, w, a, skip_if_nonfinite, n);
}

extern "C" void cuda_prox_grad(float *g, const float *w, const float *anchor, size_t n, float mu) {
    if (n) LAUNCH(k_prox_grad, n, g, w, anchor, n, mu);
}

/* ---- the fp16 loss scaler ---- */

static __global__ void k_finite_reset(hfl_step_scalars *sc) { sc->finite = 1; }

/* Every thread reaches __syncthreads_and (no early return): those past n
 * vote "finite". One atomicAnd per block that saw a non-finite value. */
static __global__ void k_unscale(float *g, size_t n, hfl_step_scalars *sc) {
    size_t i = hfl_cuda_index();
    int finite = i < n ? hfl_thread_unscale(i, g, 1.0f / sc->loss_scale) : 1;
    if (!__syncthreads_and(finite) && threadIdx.x == 0) atomicAnd((int *)&sc->finite, 0);
}

static __global__ void k_scaler_update(hfl_step_scalars *sc, int interval) {
    hfl_op_scaler_update(sc, interval);
}

extern "C" void cuda_unscale_grads(float *g, size_t n, hfl_step_scalars *sc) {
    k_finite_reset<<<1, 1, 0, STREAM>>>(sc);
    CUDA_CHECK_LAUNCH();
    if (n) LAUNCH(k_unscale, n, g, n, sc);
}

extern "C" void cuda_scaler_update(hfl_step_scalars *sc, int interval) {
    k_scaler_update<<<1, 1, 0, STREAM>>>(sc, interval);
    CUDA_CHECK_LAUNCH();
}

/* ---- gemm's bias ---- */

static __global__ void k_bias_fill(hfl_precision t, void *c, int ldc, int m, int n,
                                   long long stride_c, const void *bias, int bias_axis,
                                   size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_bias_fill(i, t, c, ldc, m, n, stride_c, bias, bias_axis);
}

static __global__ void k_bias_add_f32(hfl_precision t, float *c, int ldc, int m, int n,
                                      long long stride_c, const void *bias, int bias_axis,
                                      size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_bias_add_f32(i, t, c, ldc, m, n, stride_c, bias, bias_axis);
}

static __global__ void k_widen_tile(hfl_precision t, float *w, int ldw, const void *c, int ldc,
                                    int n, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_widen_tile(i, t, w, ldw, c, ldc, n);
}

static __global__ void k_bias_round(hfl_precision t, void *c, int ldc, const float *w, int ldw,
                                    int n, const void *bias, int bias_axis, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_bias_round(i, t, c, ldc, w, ldw, n, bias, bias_axis);
}

extern "C" void cuda_gemm_bias_fill(hfl_precision t, void *c, int ldc, int m, int n,
                                    long long stride_c, int count, const void *bias,
                                    int bias_axis) {
    size_t total = (size_t)count * m * n;
    if (total) LAUNCH(k_bias_fill, total, t, c, ldc, m, n, stride_c, bias, bias_axis, total);
}

extern "C" void cuda_gemm_bias_add_f32(hfl_precision t, float *c, int ldc, int m, int n,
                                       long long stride_c, int count, const void *bias,
                                       int bias_axis) {
    size_t total = (size_t)count * m * n;
    if (total) LAUNCH(k_bias_add_f32, total, t, c, ldc, m, n, stride_c, bias, bias_axis, total);
}

extern "C" void cuda_gemm_widen_tile(hfl_precision t, float *w, int ldw, const void *c, int ldc,
                                     int m, int n) {
    size_t count = (size_t)m * n;
    if (count) LAUNCH(k_widen_tile, count, t, w, ldw, c, ldc, n, count);
}

extern "C" void cuda_gemm_bias_round(hfl_precision t, void *c, int ldc, const float *w, int ldw,
                                     int m, int n, const void *bias, int bias_axis) {
    size_t count = (size_t)m * n;
    if (count) LAUNCH(k_bias_round, count, t, c, ldc, w, ldw, n, bias, bias_axis, count);
}
