/* cuda_internal.h: what the files of the CUDA backend share inside the
 * module: the one backend context and the ops each file implements.
 *
 * backend_cuda.c owns the context (device, streams, events, cuBLAS handle)
 * and the hfl_backend table; gemm.c the GEMMs; elementwise.cu, conv.cu and
 * loss.cu the kernels, each exported here with the exact signature of its
 * kernels/backend.h slot so the table points at it directly. Every op
 * enqueues on ctx.compute and returns; nothing here synchronizes. */
#ifndef HFL_CUDA_INTERNAL_H
#define HFL_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/agg.h"
#include "kernels/backend.h"
#include "kernels/cuda_module.h"
#include "kernels/lm.h"

typedef struct {
    int device, cc_major, cc_minor;
    cudaStream_t compute; /* every op, copy and GEMM, in order (non-blocking) */
    cudaStream_t copy;    /* the input pipeline's H2D copies */
    /* Input slot s: copied[s] is recorded on `copy` after each prefetch into
     * it (the pinned source is free again and the data has arrived);
     * consumed[s] on `compute` at release_input (the step is done with it). */
    cudaEvent_t copied[HFL_INPUT_SLOTS], consumed[HFL_INPUT_SLOTS];
    cublasHandle_t blas;
    int tf32; /* HFL_TF32=1: fp32 GEMMs may use TF32 tensor cores */
    int reduced_reduction; /* HFL_CUBLAS_REDUCED_REDUCTION=1: cuBLAS's default math mode (split-K
                              may reduce in a 2-byte output type), for an A/B on a GPU run */
    hfl_cuda_host host;
} cuda_context;

#ifdef __cplusplus
extern "C" {
#endif

extern cuda_context hfl_cuda_ctx;

/* gemm.c */
void cuda_gemm(hfl_precision t, unsigned f32_mask, int trans_a, int trans_b, int m, int n, int k,
               float alpha, const void *a, int lda, const void *b, int ldb, float beta, void *c,
               int ldc, const void *bias, int bias_axis, void *ws);
void cuda_gemm_strided(hfl_precision t, unsigned f32_mask, int trans_a, int trans_b, int m, int n,
                       int k, float alpha, const void *a, int lda, long long stride_a,
                       const void *b, int ldb, long long stride_b, float beta, void *c, int ldc,
                       long long stride_c, int count, const void *bias, int bias_axis, void *ws);

/* elementwise.cu */
/* cudaSuccess when this module holds code the device can run (an image for
 * its architecture, or PTX it can compile); else the error a launch would
 * give (e.g. cudaErrorNoKernelImageForDevice on a GPU older than the build's
 * oldest architecture). Launches nothing. */
cudaError_t cuda_kernels_runnable(void);
void cuda_fill(float *p, float value, size_t n);
void cuda_bias_grad(hfl_precision t, float *dbias, const void *dy, int rows, int cols, int accumulate);
void cuda_relu_fwd(hfl_precision t, void *y, const void *x, size_t n);
void cuda_relu_bwd(hfl_precision t, void *dx, const void *dy, const void *y, size_t n);
void cuda_convert(hfl_precision t, void *dst, const float *src, size_t n);
void cuda_sgd_step(hfl_precision t, float *master, float *v, const float *g, void *w, size_t n,
                   float lr, float momentum, float wd, const hfl_step_scalars *skip_if_nonfinite);
void cuda_adamw_step(hfl_precision t, float *master, float *m, float *v, const float *g, void *w,
                     size_t n, hfl_adamw_args a, const hfl_step_scalars *skip_if_nonfinite);
void cuda_prox_grad(float *g, const float *w, const float *anchor, size_t n, float mu);
void cuda_unscale_grads(float *g, size_t n, hfl_step_scalars *sc);
void cuda_scaler_update(hfl_step_scalars *sc, int interval);
/* gemm's bias (thread_hd.h's hfl_thread_bias_*) over count m x n blocks of
 * C, stride_c elements apart (count 1: one GEMM) */
void cuda_gemm_bias_fill(hfl_precision t, void *c, int ldc, int m, int n, long long stride_c,
                         int count, const void *bias, int bias_axis);
void cuda_gemm_bias_add_f32(hfl_precision t, float *c, int ldc, int m, int n, long long stride_c,
                            int count, const void *bias, int bias_axis);
/* the fp32 tile path of a 2-byte C with a bias and beta != 0 (gemm.c) */
void cuda_gemm_widen_tile(hfl_precision t, float *w, int ldw, const void *c, int ldc, int m, int n);
void cuda_gemm_bias_round(hfl_precision t, void *c, int ldc, const float *w, int ldw, int m, int n,
                          const void *bias, int bias_axis);

/* conv.cu */
void cuda_im2col(hfl_precision t, void *cols, const void *x, int n, hfl_window_geom g);
void cuda_col2im(hfl_precision t, void *dx, const float *cols, int n, hfl_window_geom g);
void cuda_maxpool_fwd(hfl_precision t, void *y, const void *x, int n, hfl_window_geom g);
void cuda_maxpool_bwd(hfl_precision t, void *dx, const void *dy, const void *x, int n,
                      hfl_window_geom g);
void cuda_channel_bias_grad(hfl_precision t, float *dbias, const void *dy, int n, int c, int hw,
                            int accumulate);

/* loss.cu */
void cuda_softmax_xent(hfl_precision t, const void *logits, const int32_t *labels, void *dlogits,
                       int rows, int cols, int mean_rows, hfl_step_scalars *sc, float *ws);

/* agg.cu (kernels/agg.h's table, assembled in backend_cuda.c; prepare sets
 * its max_rule_rows from the device) */
extern hfl_agg_ops hfl_cuda_agg_ops;
int cuda_agg_prepare(char *err);
void cuda_agg_stage(void *dst, const void *src, size_t bytes);
void cuda_agg_download(void *dst, const void *src, size_t bytes);
void cuda_agg_zero(void *p, size_t bytes);
void cuda_agg_copy(void *dst, const void *src, size_t bytes);
void cuda_agg_topk_scatter(float *dense, size_t n, const uint8_t *vals, const uint32_t *idx, size_t k);
void cuda_agg_norm(const hfl_payload *p, size_t n, double *partials, hfl_agg_norm *out);
void cuda_agg_add_fixed(const hfl_payload *p, const double *f, int count, size_t n, int64_t *acc);
void cuda_agg_store_row(const hfl_payload *p, size_t n, double factor, float *row);
int cuda_agg_finish(const int64_t *acc, size_t n, double inv, float *out);
int cuda_agg_all_finite(const float *v, size_t n);
void cuda_agg_sopt_step(const hfl_agg_sopt *o, float *x, float *m, float *v, const float *d, size_t n);
void cuda_agg_coordinatewise(const float *rows, int k, size_t n, int median, int trim, float *out);
void cuda_agg_distances(const float *rows, int k, size_t n, double *partials, double *d);
void cuda_agg_pick_mean(const float *rows, int k, size_t n, const int *pick, int m, float *out);

/* lm.cu (kernels/lm.h's table, assembled in backend_cuda.c) */
void cuda_lm_embed_fwd(hfl_precision t, void *y, const void *tokens, const void *wte,
                       const void *wpe, int rows, int T, int C, int V);
void cuda_lm_embed_bwd(hfl_precision t, float *dwte, float *dwpe, const void *dy,
                       const void *tokens, int rows, int T, int C, int V, int accumulate);
void cuda_lm_layernorm_fwd(hfl_precision t, void *y, float *mean, float *rstd, const void *x,
                           const void *w, const void *b, int rows, int C);
void cuda_lm_layernorm_bwd(hfl_precision t, void *dx, float *dw, float *db, const void *dy,
                           const void *x, const void *w, const float *mean, const float *rstd,
                           int rows, int C, int accumulate, int dx_add);
void cuda_lm_gelu_fwd(hfl_precision t, void *y, const void *x, size_t n);
void cuda_lm_gelu_bwd(hfl_precision t, void *dx, const void *dy, const void *x, size_t n);
void cuda_lm_heads_gather(hfl_precision t, void *heads, const void *rows, int n, int T, int H,
                          int hs, int ld);
void cuda_lm_heads_scatter(hfl_precision t, void *rows, const void *heads, int n, int T, int H,
                           int hs, int ld);
void cuda_lm_causal_softmax(hfl_precision t, void *p, const void *z, size_t n_rows, int T,
                            float scale);
void cuda_lm_causal_softmax_bwd(hfl_precision t, void *dz, const void *dp, const void *p,
                                size_t n_rows, int T, float scale);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include "kernels/cuda/check.h"

/* Kernels run one thread per output in blocks of HFL_CUDA_BLOCK; a grid
 * covers count outputs (count > 0, and < 2^31 blocks: 5e11 outputs). */
#define HFL_CUDA_BLOCK 256
static inline unsigned hfl_cuda_grid(size_t count) {
    size_t blocks = (count + HFL_CUDA_BLOCK - 1) / HFL_CUDA_BLOCK;
    if (blocks > 0x7FFFFFFFu) {
        fprintf(stderr, "hfl: cuda backend: %zu elements in one launch\n", count);
        abort();
    }
    return (unsigned)blocks;
}
/* Enqueues kernel<<<grid for count, HFL_CUDA_BLOCK>>>(args...) on the
 * compute stream and checks the launch. */
#define HFL_CUDA_LAUNCH(kernel, count, ...)                                                    \
    do {                                                                                       \
        kernel<<<hfl_cuda_grid(count), HFL_CUDA_BLOCK, 0, hfl_cuda_ctx.compute>>>(__VA_ARGS__); \
        CUDA_CHECK(cudaGetLastError());                                                        \
    } while (0)
/* PAIRS (kernels/thread_hd.h): an elementwise op over a 2-byte type runs
 * a thread per two elements, with 4-byte loads and stores, when n is even
 * and every tensor is 4-byte aligned (views into the arena can start at any
 * element); otherwise a thread per element. The bits are the same. */
static inline int hfl_cuda_pairs(hfl_precision t, size_t n, const void *a, const void *b,
                                 const void *c) {
    return t != HFL_PREC_FP32 && n % 2 == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 3) == 0;
}
/* The flat index of this thread. */
static __device__ inline size_t hfl_cuda_index(void) {
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
#endif

#endif
