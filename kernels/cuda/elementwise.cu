/* elementwise.cu: the CUDA backend's elementwise ops (fill, bias, ReLU, the
 * 2-byte rounding, SGD, FedProx's proximal gradient, the fp16 loss scaler's
 * unscale and update), the per-column bias gradients, and gemm_lp's bias
 * kernels.
 *
 * Each kernel is its thread index, a bounds check and a thread body of
 * kernels/thread_hd.h (tested on the CPU against the CPU backend); built with
 * -fmad=false, the results are the CPU backend's bit for bit. The two
 * exceptions to "three lines" are the finite flag, ANDed per block with
 * __syncthreads_and and then into sc->finite with atomicAnd (order-free, so
 * deterministic), and sgd_step_lp's skip, read from the device scalars. */
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/thread_hd.h"

#define STREAM hfl_cuda_ctx.compute
#define LAUNCH HFL_CUDA_LAUNCH

/* ---- fp32 ---- */

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

static __global__ void k_bias_add(float *y, const float *bias, int cols, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_bias_add(i, y, bias, cols);
}

static __global__ void k_bias_grad(float *dbias, const float *dy, int rows, int cols) {
    size_t i = hfl_cuda_index();
    if (i >= (size_t)cols) return;
    hfl_thread_bias_grad(i, dbias, dy, rows, cols);
}

static __global__ void k_relu_fwd(float *y, const float *x, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_relu_fwd(i, y, x);
}

static __global__ void k_relu_bwd(float *dx, const float *dy, const float *y, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_relu_bwd(i, dx, dy, y);
}

static __global__ void k_sgd_step(float *w, float *v, const float *g, size_t n, float lr,
                                  float momentum, float wd) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_sgd_step(i, w, v, g, lr, momentum, wd);
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

extern "C" void cuda_bias_add(float *y, const float *bias, int rows, int cols) {
    size_t n = rows > 0 && cols > 0 ? (size_t)rows * cols : 0;
    if (n) LAUNCH(k_bias_add, n, y, bias, cols, n);
}

extern "C" void cuda_bias_grad(float *dbias, const float *dy, int rows, int cols) {
    if (cols > 0 && rows > 0) LAUNCH(k_bias_grad, (size_t)cols, dbias, dy, rows, cols);
}

extern "C" void cuda_relu_fwd(float *y, const float *x, size_t n) {
    if (n) LAUNCH(k_relu_fwd, n, y, x, n);
}

extern "C" void cuda_relu_bwd(float *dx, const float *dy, const float *y, size_t n) {
    if (n) LAUNCH(k_relu_bwd, n, dx, dy, y, n);
}

extern "C" void cuda_sgd_step(float *w, float *v, const float *g, size_t n, float lr,
                              float momentum, float wd) {
    if (n) LAUNCH(k_sgd_step, n, w, v, g, n, lr, momentum, wd);
}

extern "C" void cuda_prox_grad(float *g, const float *w, const float *anchor, size_t n, float mu) {
    if (n) LAUNCH(k_prox_grad, n, g, w, anchor, n, mu);
}

/* ---- 2-byte storage ---- */

static __global__ void k_round_lp(hfl_precision lp, uint16_t *dst, const float *src, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_round_lp(i, lp, dst, src);
}

static __global__ void k_relu_fwd_lp(hfl_precision lp, uint16_t *y, const uint16_t *x, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_relu_fwd_lp(i, lp, y, x);
}

static __global__ void k_relu_bwd_lp(hfl_precision lp, uint16_t *dx, const uint16_t *dy,
                                     const uint16_t *y, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_thread_relu_bwd_lp(i, lp, dx, dy, y);
}

static __global__ void k_bias_grad_lp(hfl_precision lp, float *dbias, const uint16_t *dy, int rows,
                                      int cols) {
    size_t i = hfl_cuda_index();
    if (i >= (size_t)cols) return;
    hfl_thread_bias_grad_lp(i, lp, dbias, dy, rows, cols);
}

static __global__ void k_sgd_step_lp(hfl_precision lp, float *master, float *v, const float *g,
                                     uint16_t *w, size_t n, float lr, float momentum, float wd,
                                     const hfl_step_scalars *skip_if_nonfinite) {
    size_t i = hfl_cuda_index();
    if (i >= n || (skip_if_nonfinite && !skip_if_nonfinite->finite)) return;
    hfl_thread_sgd_step_lp(i, lp, master, v, g, w, lr, momentum, wd);
}

extern "C" void cuda_round_lp(hfl_precision lp, uint16_t *dst, const float *src, size_t n) {
    if (n) LAUNCH(k_round_lp, n, lp, dst, src, n);
}

extern "C" void cuda_relu_fwd_lp(hfl_precision lp, uint16_t *y, const uint16_t *x, size_t n) {
    if (n) LAUNCH(k_relu_fwd_lp, n, lp, y, x, n);
}

extern "C" void cuda_relu_bwd_lp(hfl_precision lp, uint16_t *dx, const uint16_t *dy,
                                 const uint16_t *y, size_t n) {
    if (n) LAUNCH(k_relu_bwd_lp, n, lp, dx, dy, y, n);
}

extern "C" void cuda_bias_grad_lp(hfl_precision lp, float *dbias, const uint16_t *dy, int rows,
                                  int cols) {
    if (cols > 0 && rows > 0) LAUNCH(k_bias_grad_lp, (size_t)cols, lp, dbias, dy, rows, cols);
}

extern "C" void cuda_sgd_step_lp(hfl_precision lp, float *master, float *v, const float *g,
                                 uint16_t *w, size_t n, float lr, float momentum, float wd,
                                 const hfl_step_scalars *skip_if_nonfinite) {
    if (n) LAUNCH(k_sgd_step_lp, n, lp, master, v, g, w, n, lr, momentum, wd, skip_if_nonfinite);
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

/* ---- gemm_lp's bias ---- */

static __global__ void k_bias_fill_lp(uint16_t *c, int ldc, int n, const uint16_t *bias,
                                      int bias_axis, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_bias_fill_lp(i, c, ldc, n, bias, bias_axis);
}

static __global__ void k_widen_tile_lp(hfl_precision lp, float *t, int ldt, const uint16_t *c,
                                       int ldc, int n, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_widen_tile_lp(i, lp, t, ldt, c, ldc, n);
}

static __global__ void k_bias_round_lp(hfl_precision lp, uint16_t *c, int ldc, const float *t,
                                       int ldt, int n, const uint16_t *bias, int bias_axis,
                                       size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_bias_round_lp(i, lp, c, ldc, t, ldt, n, bias, bias_axis);
}

static __global__ void k_bias_fill_lp_strided(uint16_t *c, int ldc, int m, int n,
                                              long long stride_c, const uint16_t *bias,
                                              int bias_axis, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_bias_fill_lp_strided(i, c, ldc, m, n, stride_c, bias, bias_axis);
}

static __global__ void k_bias_add_f32(hfl_precision lp, float *c, int ldc, int n,
                                      const uint16_t *bias, int bias_axis, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_bias_add_f32(i, lp, c, ldc, n, bias, bias_axis);
}

extern "C" void cuda_gemm_bias_fill_lp(uint16_t *c, int ldc, int m, int n, const uint16_t *bias,
                                       int bias_axis) {
    size_t count = (size_t)m * n;
    if (count) LAUNCH(k_bias_fill_lp, count, c, ldc, n, bias, bias_axis, count);
}

extern "C" void cuda_gemm_bias_fill_lp_strided(uint16_t *c, int ldc, int m, int n,
                                               long long stride_c, int batch,
                                               const uint16_t *bias, int bias_axis) {
    size_t count = (size_t)batch * m * n;
    if (count) LAUNCH(k_bias_fill_lp_strided, count, c, ldc, m, n, stride_c, bias, bias_axis, count);
}

extern "C" void cuda_gemm_widen_tile_lp(hfl_precision lp, float *t, int ldt, const uint16_t *c,
                                        int ldc, int m, int n) {
    size_t count = (size_t)m * n;
    if (count) LAUNCH(k_widen_tile_lp, count, lp, t, ldt, c, ldc, n, count);
}

extern "C" void cuda_gemm_bias_round_lp(hfl_precision lp, uint16_t *c, int ldc, const float *t,
                                        int ldt, int m, int n, const uint16_t *bias,
                                        int bias_axis) {
    size_t count = (size_t)m * n;
    if (count) LAUNCH(k_bias_round_lp, count, lp, c, ldc, t, ldt, n, bias, bias_axis, count);
}

extern "C" void cuda_gemm_bias_add_f32(hfl_precision lp, float *c, int ldc, int m, int n,
                                       const uint16_t *bias, int bias_axis) {
    size_t count = (size_t)m * n;
    if (count) LAUNCH(k_bias_add_f32, count, lp, c, ldc, n, bias, bias_axis, count);
}
