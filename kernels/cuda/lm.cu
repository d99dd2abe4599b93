/* lm.cu: the CUDA backend's transformer ops (kernels/lm.h), one thread per
 * output over the thread bodies of kernels/lm_hd.h, which the CPU backend
 * runs in loops: every sum in the CPU's order, so the results are the CPU's
 * bit for bit (tests/kernels/test_lm_ops.c checks the gather bodies on the
 * CPU).
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

static __global__ void k_embed_fwd(float *y, const float *tokens, const float *wte,
                                   const float *wpe, int T, int C, int V, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_fwd(i, y, tokens, wte, wpe, T, C, V);
}

static __global__ void k_embed_bwd_wte(float *dwte, const float *dy, const float *tokens, int rows,
                                       int C, int V, int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_bwd_wte(i, dwte, dy, tokens, rows, C, V, accumulate);
}

static __global__ void k_embed_bwd_wpe(float *dwpe, const float *dy, int rows, int T, int C,
                                       int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_bwd_wpe(i, dwpe, dy, rows, T, C, accumulate);
}

static __global__ void k_layernorm_fwd(float *y, float *mean, float *rstd, const float *x,
                                       const float *w, const float *b, int C, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_fwd(i, y, mean, rstd, x, w, b, C);
}

static __global__ void k_layernorm_bwd_dx(float *dx, const float *dy, const float *x,
                                          const float *w, const float *mean, const float *rstd,
                                          int C, int add, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_bwd_dx(i, dx, dy, x, w, mean, rstd, C, add);
}

static __global__ void k_layernorm_bwd_dw(float *dw, float *db, const float *dy, const float *x,
                                          const float *mean, const float *rstd, int rows, int C,
                                          int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_bwd_dw(i, dw, db, dy, x, mean, rstd, rows, C, accumulate);
}

static __global__ void k_gelu_fwd(float *y, const float *x, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_gelu_fwd(i, y, x);
}

static __global__ void k_gelu_bwd(float *dx, const float *dy, const float *x, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_gelu_bwd(i, dx, dy, x);
}

static __global__ void k_heads_gather(float *heads, const float *rows, int T, int H, int hs, int ld,
                                      size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_heads_gather(i, heads, rows, T, H, hs, ld);
}

static __global__ void k_heads_scatter(float *rows, const float *heads, int T, int H, int hs,
                                       int ld, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_heads_scatter(i, rows, heads, T, H, hs, ld);
}

static __global__ void k_causal_softmax(float *p, const float *z, int T, float scale,
                                        size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_causal_softmax(i, p, z, T, scale);
}

static __global__ void k_causal_softmax_bwd(float *dz, const float *dp, const float *p, int T,
                                            float scale, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_causal_softmax_bwd(i, dz, dp, p, T, scale);
}

static __global__ void k_adamw(float *w, float *m, float *v, const float *g, hfl_adamw_args a,
                               size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_adamw(i, w, m, v, g, a);
}

extern "C" void cuda_lm_embed_fwd(float *y, const float *tokens, const float *wte,
                                  const float *wpe, int rows, int T, int C, int V) {
    size_t count = (size_t)rows * C;
    if (count) LAUNCH(k_embed_fwd, count, y, tokens, wte, wpe, T, C, V, count);
}

extern "C" void cuda_lm_embed_bwd(float *dwte, float *dwpe, const float *dy, const float *tokens,
                                  int rows, int T, int C, int V, int accumulate) {
    size_t te = (size_t)V * C, pe = (size_t)T * C;
    if (te) LAUNCH(k_embed_bwd_wte, te, dwte, dy, tokens, rows, C, V, accumulate, te);
    if (pe) LAUNCH(k_embed_bwd_wpe, pe, dwpe, dy, rows, T, C, accumulate, pe);
}

extern "C" void cuda_lm_layernorm_fwd(float *y, float *mean, float *rstd, const float *x,
                                      const float *w, const float *b, int rows, int C) {
    if (rows > 0) LAUNCH(k_layernorm_fwd, (size_t)rows, y, mean, rstd, x, w, b, C, (size_t)rows);
}

/* dw and db first: dx may overwrite dy. */
extern "C" void cuda_lm_layernorm_bwd(float *dx, float *dw, float *db, const float *dy,
                                      const float *x, const float *w, const float *mean,
                                      const float *rstd, int rows, int C, int accumulate,
                                      int dx_add) {
    if (C > 0) LAUNCH(k_layernorm_bwd_dw, (size_t)C, dw, db, dy, x, mean, rstd, rows, C, accumulate, (size_t)C);
    if (rows > 0) LAUNCH(k_layernorm_bwd_dx, (size_t)rows, dx, dy, x, w, mean, rstd, C, dx_add, (size_t)rows);
}

extern "C" void cuda_lm_gelu_fwd(float *y, const float *x, size_t n) {
    if (n) LAUNCH(k_gelu_fwd, n, y, x, n);
}

extern "C" void cuda_lm_gelu_bwd(float *dx, const float *dy, const float *x, size_t n) {
    if (n) LAUNCH(k_gelu_bwd, n, dx, dy, x, n);
}

extern "C" void cuda_lm_heads_gather(float *heads, const float *rows, int n, int T, int H, int hs,
                                     int ld) {
    size_t count = (size_t)n * T * H * hs;
    if (count) LAUNCH(k_heads_gather, count, heads, rows, T, H, hs, ld, count);
}

extern "C" void cuda_lm_heads_scatter(float *rows, const float *heads, int n, int T, int H, int hs,
                                      int ld) {
    size_t count = (size_t)n * T * H * hs;
    if (count) LAUNCH(k_heads_scatter, count, rows, heads, T, H, hs, ld, count);
}

extern "C" void cuda_lm_causal_softmax(float *p, const float *z, size_t n_rows, int T, float scale) {
    if (n_rows) LAUNCH(k_causal_softmax, n_rows, p, z, T, scale, n_rows);
}

extern "C" void cuda_lm_causal_softmax_bwd(float *dz, const float *dp, const float *p,
                                           size_t n_rows, int T, float scale) {
    if (n_rows) LAUNCH(k_causal_softmax_bwd, n_rows, dz, dp, p, T, scale, n_rows);
}

extern "C" void cuda_lm_adamw_step(float *w, float *m, float *v, const float *g, size_t n,
                                   hfl_adamw_args a) {
    if (n) LAUNCH(k_adamw, n, w, m, v, g, a, n);
}
