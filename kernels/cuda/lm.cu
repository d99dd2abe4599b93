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

/* AdamW's step count in a.sc (lm_hd.h), one thread, before the update
 * kernel reads it: the same stream orders the two. */
static __global__ void k_adamw_count(hfl_step_scalars *sc, float beta1, float beta2,
                                     const hfl_step_scalars *skip_if_nonfinite) {
    hfl_lm_adamw_count(sc, beta1, beta2, skip_if_nonfinite);
}

/* a, with its bias corrections from a.sc when set: thread 0 of each block
 * runs hfl_lm_adamw_bias (a double division and square root once a block
 * rather than once an element) and shares the two floats. a.sc is the same
 * for the whole grid, so every thread of a block reaches the barrier. */
static __device__ hfl_adamw_args adamw_block_args(hfl_adamw_args a) {
    __shared__ float bias[2];
    if (!a.sc) return a;
    if (threadIdx.x == 0) {
        hfl_adamw_args b = a;
        hfl_lm_adamw_bias(a.sc, &b);
        bias[0] = b.step_size;
        bias[1] = b.bc2_sqrt;
    }
    __syncthreads();
    a.step_size = bias[0];
    a.bc2_sqrt = bias[1];
    return a;
}

static __global__ void k_adamw(float *w, float *m, float *v, const float *g, hfl_adamw_args a,
                               size_t count) {
    a = adamw_block_args(a);
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_adamw(i, w, m, v, g, a);
}

static void adamw_count(const hfl_adamw_args *a, const hfl_step_scalars *skip_if_nonfinite) {
    if (!a->sc) return;
    k_adamw_count<<<1, 1, 0, hfl_cuda_ctx.compute>>>(a->sc, a->beta1, a->beta2, skip_if_nonfinite);
    CUDA_CHECK_LAUNCH();
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
    adamw_count(&a, NULL);
    if (n) LAUNCH(k_adamw, n, w, m, v, g, a, n);
}

/* ---- 2-byte storage ---- */

static __global__ void k_embed_fwd_lp(hfl_precision lp, uint16_t *y, const uint16_t *tokens,
                                      const uint16_t *wte, const uint16_t *wpe, int T, int C, int V,
                                      size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_fwd_lp(i, lp, y, tokens, wte, wpe, T, C, V);
}

static __global__ void k_embed_bwd_wte_lp(hfl_precision lp, float *dwte, const uint16_t *dy,
                                          const uint16_t *tokens, int rows, int C, int V,
                                          int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_bwd_wte_lp(i, lp, dwte, dy, tokens, rows, C, V, accumulate);
}

static __global__ void k_embed_bwd_wpe_lp(hfl_precision lp, float *dwpe, const uint16_t *dy,
                                          int rows, int T, int C, int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_bwd_wpe_lp(i, lp, dwpe, dy, rows, T, C, accumulate);
}

static __global__ void k_layernorm_fwd_lp(hfl_precision lp, uint16_t *y, float *mean, float *rstd,
                                          const uint16_t *x, const uint16_t *w, const uint16_t *b,
                                          int C, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_fwd_lp(i, lp, y, mean, rstd, x, w, b, C);
}

static __global__ void k_layernorm_bwd_dx_lp(hfl_precision lp, uint16_t *dx, const uint16_t *dy,
                                             const uint16_t *x, const uint16_t *w,
                                             const float *mean, const float *rstd, int C, int add,
                                             size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_bwd_dx_lp(i, lp, dx, dy, x, w, mean, rstd, C, add);
}

static __global__ void k_layernorm_bwd_dw_lp(hfl_precision lp, float *dw, float *db,
                                             const uint16_t *dy, const uint16_t *x,
                                             const float *mean, const float *rstd, int rows, int C,
                                             int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_layernorm_bwd_dw_lp(i, lp, dw, db, dy, x, mean, rstd, rows, C, accumulate);
}

static __global__ void k_gelu_fwd_lp(hfl_precision lp, uint16_t *y, const uint16_t *x, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_gelu_fwd_lp(i, lp, y, x);
}

static __global__ void k_gelu_bwd_lp(hfl_precision lp, uint16_t *dx, const uint16_t *dy,
                                     const uint16_t *x, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_gelu_bwd_lp(i, lp, dx, dy, x);
}

static __global__ void k_heads_gather_lp(uint16_t *heads, const uint16_t *rows, int T, int H,
                                         int hs, int ld, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_heads_gather_lp(i, heads, rows, T, H, hs, ld);
}

static __global__ void k_heads_scatter_lp(uint16_t *rows, const uint16_t *heads, int T, int H,
                                          int hs, int ld, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_heads_scatter_lp(i, rows, heads, T, H, hs, ld);
}

static __global__ void k_causal_softmax_lp(hfl_precision lp, uint16_t *p, const uint16_t *z, int T,
                                           float scale, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_causal_softmax_lp(i, lp, p, z, T, scale);
}

static __global__ void k_causal_softmax_bwd_lp(hfl_precision lp, uint16_t *dz, const uint16_t *dp,
                                               const uint16_t *p, int T, float scale,
                                               size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_causal_softmax_bwd_lp(i, lp, dz, dp, p, T, scale);
}

static __global__ void k_adamw_lp(hfl_precision lp, float *master, float *m, float *v,
                                  const float *g, uint16_t *w, hfl_adamw_args a,
                                  const hfl_step_scalars *skip_if_nonfinite, size_t count) {
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return; /* the whole grid */
    a = adamw_block_args(a);
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_adamw_lp(i, lp, master, m, v, g, w, a);
}

extern "C" void cuda_lm_embed_fwd_lp(hfl_precision lp, uint16_t *y, const uint16_t *tokens,
                                     const uint16_t *wte, const uint16_t *wpe, int rows, int T,
                                     int C, int V) {
    size_t count = (size_t)rows * C;
    if (count) LAUNCH(k_embed_fwd_lp, count, lp, y, tokens, wte, wpe, T, C, V, count);
}

extern "C" void cuda_lm_embed_bwd_lp(hfl_precision lp, float *dwte, float *dwpe,
                                     const uint16_t *dy, const uint16_t *tokens, int rows, int T,
                                     int C, int V, int accumulate) {
    size_t te = (size_t)V * C, pe = (size_t)T * C;
    if (te) LAUNCH(k_embed_bwd_wte_lp, te, lp, dwte, dy, tokens, rows, C, V, accumulate, te);
    if (pe) LAUNCH(k_embed_bwd_wpe_lp, pe, lp, dwpe, dy, rows, T, C, accumulate, pe);
}

extern "C" void cuda_lm_layernorm_fwd_lp(hfl_precision lp, uint16_t *y, float *mean, float *rstd,
                                         const uint16_t *x, const uint16_t *w, const uint16_t *b,
                                         int rows, int C) {
    if (rows > 0) LAUNCH(k_layernorm_fwd_lp, (size_t)rows, lp, y, mean, rstd, x, w, b, C, (size_t)rows);
}

extern "C" void cuda_lm_layernorm_bwd_lp(hfl_precision lp, uint16_t *dx, float *dw, float *db,
                                         const uint16_t *dy, const uint16_t *x, const uint16_t *w,
                                         const float *mean, const float *rstd, int rows, int C,
                                         int accumulate, int dx_add) {
    if (C > 0) LAUNCH(k_layernorm_bwd_dw_lp, (size_t)C, lp, dw, db, dy, x, mean, rstd, rows, C, accumulate, (size_t)C);
    if (rows > 0) LAUNCH(k_layernorm_bwd_dx_lp, (size_t)rows, lp, dx, dy, x, w, mean, rstd, C, dx_add, (size_t)rows);
}

extern "C" void cuda_lm_gelu_fwd_lp(hfl_precision lp, uint16_t *y, const uint16_t *x, size_t n) {
    if (n) LAUNCH(k_gelu_fwd_lp, n, lp, y, x, n);
}

extern "C" void cuda_lm_gelu_bwd_lp(hfl_precision lp, uint16_t *dx, const uint16_t *dy,
                                    const uint16_t *x, size_t n) {
    if (n) LAUNCH(k_gelu_bwd_lp, n, lp, dx, dy, x, n);
}

extern "C" void cuda_lm_heads_gather_lp(uint16_t *heads, const uint16_t *rows, int n, int T, int H,
                                        int hs, int ld) {
    size_t count = (size_t)n * T * H * hs;
    if (count) LAUNCH(k_heads_gather_lp, count, heads, rows, T, H, hs, ld, count);
}

extern "C" void cuda_lm_heads_scatter_lp(uint16_t *rows, const uint16_t *heads, int n, int T, int H,
                                         int hs, int ld) {
    size_t count = (size_t)n * T * H * hs;
    if (count) LAUNCH(k_heads_scatter_lp, count, rows, heads, T, H, hs, ld, count);
}

extern "C" void cuda_lm_causal_softmax_lp(hfl_precision lp, uint16_t *p, const uint16_t *z,
                                          size_t n_rows, int T, float scale) {
    if (n_rows) LAUNCH(k_causal_softmax_lp, n_rows, lp, p, z, T, scale, n_rows);
}

extern "C" void cuda_lm_causal_softmax_bwd_lp(hfl_precision lp, uint16_t *dz, const uint16_t *dp,
                                              const uint16_t *p, size_t n_rows, int T,
                                              float scale) {
    if (n_rows) LAUNCH(k_causal_softmax_bwd_lp, n_rows, lp, dz, dp, p, T, scale, n_rows);
}

extern "C" void cuda_lm_adamw_step_lp(hfl_precision lp, float *master, float *m, float *v,
                                      const float *g, uint16_t *w, size_t n, hfl_adamw_args a,
                                      const hfl_step_scalars *skip_if_nonfinite) {
    adamw_count(&a, skip_if_nonfinite);
    if (n) LAUNCH(k_adamw_lp, n, lp, master, m, v, g, w, a, skip_if_nonfinite, n);
}
