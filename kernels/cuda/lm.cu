/* lm.cu: the CUDA backend's transformer ops (kernels/lm.h), one thread per
 * output over the thread bodies of kernels/lm_hd.h, which the CPU backend
 * runs in loops: every sum in the CPU's order, so the results are the CPU's
 * bit for bit, except where the device's expf differs from glibc's in the
 * last bits (GELU, the softmax). tests/kernels/test_lm_ops.c checks the
 * gather bodies on the CPU, tests/gpu/test_cuda_lm.c the kernels on a GPU.
 *
 * First cut, written for correctness: layer norm runs one thread per row
 * and its weight gradient one per column, the token embedding's gradient one
 * thread per (token, feature) scanning every row, and the causal softmax one
 * thread per row of T scores. A warp per row (fixed-order shuffles) and a
 * sorted-token scatter are the next step when profiling on a GPU asks; they
 * change the summation order, so they come with their own CPU twins. */
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/lm_hd.h"

#define LAUNCH HFL_CUDA_LAUNCH

static __global__ void k_embed_fwd(hfl_precision t, void *y, const void *tokens, const void *wte,
                                   const void *wpe, int T, int C, int V, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_fwd(i, t, y, tokens, wte, wpe, T, C, V);
}

static __global__ void k_embed_bwd_wte(hfl_precision t, float *dwte, const void *dy,
                                       const void *tokens, int rows, int C, int V, int accumulate,
                                       size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_bwd_wte(i, t, dwte, dy, tokens, rows, C, V, accumulate);
}

static __global__ void k_embed_bwd_wpe(hfl_precision t, float *dwpe, const void *dy, int rows,
                                       int T, int C, int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_bwd_wpe(i, t, dwpe, dy, rows, T, C, accumulate);
}

static __global__ void k_layernorm_fwd(hfl_precision t, void *y, float *mean, float *rstd,
                                       const void *x, const void *w, const void *b, int C,
                                       size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_fwd(i, t, y, mean, rstd, x, w, b, C);
}

static __global__ void k_layernorm_bwd_dx(hfl_precision t, void *dx, const void *dy, const void *x,
                                          const void *w, const float *mean, const float *rstd,
                                          int C, int add, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_bwd_dx(i, t, dx, dy, x, w, mean, rstd, C, add);
}

static __global__ void k_layernorm_bwd_dw(hfl_precision t, float *dw, float *db, const void *dy,
                                          const void *x, const float *mean, const float *rstd,
                                          int rows, int C, int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_bwd_dw(i, t, dw, db, dy, x, mean, rstd, rows, C, accumulate);
}

static __global__ void k_gelu_fwd(hfl_precision t, void *y, const void *x, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_gelu_fwd(i, t, y, x);
}

static __global__ void k_gelu_bwd(hfl_precision t, void *dx, const void *dy, const void *x,
                                  size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_gelu_bwd(i, t, dx, dy, x);
}

static __global__ void k_heads_gather(hfl_precision t, void *heads, const void *rows, int T, int H,
                                      int hs, int ld, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_heads_gather(i, t, heads, rows, T, H, hs, ld);
}

static __global__ void k_heads_scatter(hfl_precision t, void *rows, const void *heads, int T, int H,
                                       int hs, int ld, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_heads_scatter(i, t, rows, heads, T, H, hs, ld);
}

static __global__ void k_causal_softmax(hfl_precision t, void *p, const void *z, int T,
                                        float scale, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_causal_softmax(i, t, p, z, T, scale);
}

static __global__ void k_causal_softmax_bwd(hfl_precision t, void *dz, const void *dp,
                                            const void *p, int T, float scale, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_causal_softmax_bwd(i, t, dz, dp, p, T, scale);
}

extern "C" void cuda_lm_embed_fwd(hfl_precision t, void *y, const void *tokens, const void *wte,
                                  const void *wpe, int rows, int T, int C, int V) {
    size_t count = (size_t)rows * C;
    if (count) LAUNCH(k_embed_fwd, count, t, y, tokens, wte, wpe, T, C, V, count);
}

extern "C" void cuda_lm_embed_bwd(hfl_precision t, float *dwte, float *dwpe, const void *dy,
                                  const void *tokens, int rows, int T, int C, int V,
                                  int accumulate) {
    size_t te = (size_t)V * C, pe = (size_t)T * C;
    if (te) LAUNCH(k_embed_bwd_wte, te, t, dwte, dy, tokens, rows, C, V, accumulate, te);
    if (pe) LAUNCH(k_embed_bwd_wpe, pe, t, dwpe, dy, rows, T, C, accumulate, pe);
}

extern "C" void cuda_lm_layernorm_fwd(hfl_precision t, void *y, float *mean, float *rstd,
                                      const void *x, const void *w, const void *b, int rows,
                                      int C) {
    if (rows > 0) LAUNCH(k_layernorm_fwd, (size_t)rows, t, y, mean, rstd, x, w, b, C, (size_t)rows);
}

/* dw and db first: dx may overwrite dy. */
extern "C" void cuda_lm_layernorm_bwd(hfl_precision t, void *dx, float *dw, float *db,
                                      const void *dy, const void *x, const void *w,
                                      const float *mean, const float *rstd, int rows, int C,
                                      int accumulate, int dx_add) {
    if (C > 0) LAUNCH(k_layernorm_bwd_dw, (size_t)C, t, dw, db, dy, x, mean, rstd, rows, C, accumulate, (size_t)C);
    if (rows > 0) LAUNCH(k_layernorm_bwd_dx, (size_t)rows, t, dx, dy, x, w, mean, rstd, C, dx_add, (size_t)rows);
}

extern "C" void cuda_lm_gelu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    if (n) LAUNCH(k_gelu_fwd, n, t, y, x, n);
}

extern "C" void cuda_lm_gelu_bwd(hfl_precision t, void *dx, const void *dy, const void *x,
                                 size_t n) {
    if (n) LAUNCH(k_gelu_bwd, n, t, dx, dy, x, n);
}

extern "C" void cuda_lm_heads_gather(hfl_precision t, void *heads, const void *rows, int n, int T,
                                     int H, int hs, int ld) {
    size_t count = (size_t)n * T * H * hs;
    if (count) LAUNCH(k_heads_gather, count, t, heads, rows, T, H, hs, ld, count);
}

extern "C" void cuda_lm_heads_scatter(hfl_precision t, void *rows, const void *heads, int n, int T,
                                      int H, int hs, int ld) {
    size_t count = (size_t)n * T * H * hs;
    if (count) LAUNCH(k_heads_scatter, count, t, rows, heads, T, H, hs, ld, count);
}

extern "C" void cuda_lm_causal_softmax(hfl_precision t, void *p, const void *z, size_t n_rows,
                                       int T, float scale) {
    if (n_rows) LAUNCH(k_causal_softmax, n_rows, t, p, z, T, scale, n_rows);
}

extern "C" void cuda_lm_causal_softmax_bwd(hfl_precision t, void *dz, const void *dp,
                                           const void *p, size_t n_rows, int T, float scale) {
    if (n_rows) LAUNCH(k_causal_softmax_bwd, n_rows, t, dz, dp, p, T, scale, n_rows);
}
