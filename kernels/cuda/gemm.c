/* gemm.c: the CUDA backend's GEMMs on cuBLAS, row-major as kernels/backend.h
 * says, enqueued on the compute stream.
 *
 * Layout: cuBLAS is column-major, and a row-major X is the column-major X^T,
 * so row-major C = op(A) op(B) is computed as column-major
 * C^T = op(B)^T op(A)^T: the operands swap places (B first), m and n swap,
 * and each keeps its own transpose flag and leading dimension.
 *
 * fp32 (t = HFL_PREC_FP32): cublasSgemm with the handle's default math mode,
 * i.e. true fp32 (no TF32), hfl's reference precision, then the bias in
 * its own kernel. HFL_TF32=1 in the environment switches fp32 GEMMs to
 * cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32 (faster on sm_80+, ~1e-3
 * relative error).
 *
 * 2-byte t: cublasGemmEx with A and B of one type (both 2-byte CUDA_R_16BF /
 * CUDA_R_16F, or both fp32; cuBLAS takes no mixed pair), C 2-byte or fp32,
 * accumulation in fp32 (CUBLAS_COMPUTE_32F), tensor cores where the GPU has
 * them. A 2-byte C with fp32 A and B is not a cuBLAS combination either; no
 * layer asks for it.
 *
 * One rounding. backend.h promises that a 2-byte C is rounded once, after
 * the bias, as the CPU's gemm does (fp32 accumulation of alpha op(A)
 * op(B) + beta C, the bias added in fp32, one rounding). Two things on a GPU
 * can round more often, and both are shut here:
 * - cuBLAS's default math mode lets a split-K GEMM reduce its partial sums
 *   in the output type (CUBLASLT_REDUCTION_SCHEME_INPLACE: "using the output
 *   buffer (and output data type)", cublasLt.h), i.e. round a 2-byte C once
 *   per partial. backend_cuda.c sets
 *   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION ("force any reductions
 *   to use the accumulator type", cublas_api.h) on the handle, unless
 *   HFL_CUBLAS_REDUCED_REDUCTION=1 asks for the default back (an A/B for a GPU
 *   run: gpu-review.md traced mlp bf16's 3.47e-2 gradient gap to it).
 * - A bias. With beta == 0, C is first filled with the broadcast bias
 *   (exact: the bias is 2-byte already) and the GEMM runs with beta = 1, so
 *   its epilogue rounds alpha acc + bias once. With beta != 0 (a GPT block's
 *   two residual projections, model/gpt.c's dense_onto) there is no such
 *   trick: C is widened into an fp32 tile in `ws` (planned for every backend:
 *   hfl_gemm_ws_bytes, whose floats the tile path fills), the GEMM runs
 *   into that tile with beta, and one kernel adds the bias and rounds. The
 *   tile is at most the whole of C; a larger C is done a block of rows (and,
 *   when a row does not fit, of columns) at a time, 3 launches a block.
 * - fp32 C: the GEMM, then bias added in fp32, the CPU's order exactly.
 * Any remaining difference from the CPU is the fp32 summation order: a legal
 * reordering, bounded by tests/kernels/rounding_check.h.
 *
 * Strided forms (conv over a chunk of samples): one cublasSgemmStridedBatched
 * / cublasGemmStridedBatchedEx over `count` GEMMs (a stride of 0 shares the
 * weights). A 2-byte C with a bias and beta 0 gets the bias filled into all
 * count Cs by one kernel first, as above, an fp32 C the bias added to all
 * count Cs by one kernel after; a 2-byte C with a bias and beta != 0 (no
 * layer asks for it) falls back to one gemm per GEMM. */
#include <stdint.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"

static cublasOperation_t gemm_op(int trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

static cudaDataType gemm_type(hfl_precision t, int is_f32) {
    if (is_f32 || t == HFL_PREC_FP32) return CUDA_R_32F;
    return t == HFL_PREC_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

static void cuda_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    cublasHandle_t h = hfl_cuda_ctx.blas;
    if (hfl_cuda_ctx.tf32) {
        CUBLAS_CHECK(cublasGemmEx(h, gemm_op(trans_b), gemm_op(trans_a), n, m, k, &alpha, b,
                                  CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                                  CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
        return;
    }
    CUBLAS_CHECK(cublasSgemm(h, gemm_op(trans_b), gemm_op(trans_a), n, m, k, &alpha, b, ldb, a, lda,
                             &beta, c, ldc));
}

static void cuda_sgemm_strided(int trans_a, int trans_b, int m, int n, int k, float alpha,
                               const float *a, int lda, long long stride_a, const float *b, int ldb,
                               long long stride_b, float beta, float *c, int ldc,
                               long long stride_c, int count) {
    cublasHandle_t h = hfl_cuda_ctx.blas;
    if (hfl_cuda_ctx.tf32) {
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            h, gemm_op(trans_b), gemm_op(trans_a), n, m, k, &alpha, b, CUDA_R_32F, ldb, stride_b, a,
            CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, count,
            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
        return;
    }
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, gemm_op(trans_b), gemm_op(trans_a), n, m, k, &alpha,
                                           b, ldb, stride_b, a, lda, stride_a, &beta, c, ldc,
                                           stride_c, count));
}

/* Row-major C[m, n] = alpha op(A) op(B) + beta C (2-byte A, B and C) into
 * C's fp32 tile path (header comment): blocks of mi x nj outputs, each
 * widened into ws, summed into it by one GEMM with beta, then biased and
 * rounded once into C. ws holds hfl_gemm_ws_bytes(t, 0, m, n, k) bytes. */
static void gemm_via_tile(hfl_precision t, int trans_a, int trans_b, int m, int n, int k,
                          float alpha, const uint16_t *a, int lda, const uint16_t *b, int ldb,
                          float beta, uint16_t *c, int ldc, const uint16_t *bias, int bias_axis,
                          float *ws) {
    size_t floats = hfl_gemm_ws_bytes(t, 0, m, n, k) / sizeof(float);
    int nj = (size_t)n < floats ? n : (int)floats;
    int mi = (size_t)m * nj <= floats ? m : (int)(floats / (size_t)nj);
    cudaDataType ab = gemm_type(t, 0);
    for (int i0 = 0; i0 < m; i0 += mi) {
        int rows = m - i0 < mi ? m - i0 : mi;
        /* row i0 of op(A): A + i0 rows down, or i0 columns across when transposed */
        const uint16_t *ai = a + (trans_a ? (size_t)i0 : (size_t)i0 * lda);
        for (int j0 = 0; j0 < n; j0 += nj) {
            int cols = n - j0 < nj ? n - j0 : nj;
            const uint16_t *bj = b + (trans_b ? (size_t)j0 * ldb : (size_t)j0);
            uint16_t *cij = c + (size_t)i0 * ldc + j0;
            cuda_gemm_widen_tile(t, ws, cols, cij, ldc, rows, cols);
            CUBLAS_CHECK(cublasGemmEx(hfl_cuda_ctx.blas, gemm_op(trans_b), gemm_op(trans_a), cols,
                                      rows, k, &alpha, bj, ab, ldb, ai, ab, lda, &beta, ws,
                                      CUDA_R_32F, cols, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            cuda_gemm_bias_round(t, cij, ldc, ws, cols, rows, cols,
                                 bias + (bias_axis == HFL_BIAS_ROW ? i0 : j0), bias_axis);
        }
    }
}

/* A 2-byte gemm's operand types, checked. */
static void gemm_check(hfl_precision t, unsigned f32_mask) {
    int a32 = (f32_mask & HFL_GEMM_A_F32) != 0, b32 = (f32_mask & HFL_GEMM_B_F32) != 0;
    CUDA_REQUIRE(a32 == b32, "gemm: A and B must be of one type (both fp32 or both 2-byte)");
    CUDA_REQUIRE((f32_mask & HFL_GEMM_C_F32) || !a32,
                 "gemm: a 2-byte C needs 2-byte A and B (cuBLAS has no such GEMM)");
    CUDA_REQUIRE(t == HFL_PREC_BF16 || t == HFL_PREC_FP16, "gemm: unknown storage type");
}

void cuda_gemm(hfl_precision t, unsigned f32_mask, int trans_a, int trans_b, int m, int n, int k,
               float alpha, const void *a, int lda, const void *b, int ldb, float beta, void *c,
               int ldc, const void *bias, int bias_axis, void *ws) {
    if (m <= 0 || n <= 0) return;
    int with_bias = bias_axis != HFL_BIAS_NONE && bias;
    if (t == HFL_PREC_FP32) {
        cuda_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        if (with_bias) cuda_gemm_bias_add_f32(t, c, ldc, m, n, 0, 1, bias, bias_axis);
        return;
    }
    gemm_check(t, f32_mask);
    int a32 = (f32_mask & HFL_GEMM_A_F32) != 0, c32 = (f32_mask & HFL_GEMM_C_F32) != 0;
    if (with_bias && !c32 && beta != 0.0f) {
        CUDA_REQUIRE(ws != NULL, "gemm: a 2-byte C with a bias and beta != 0 needs its workspace");
        gemm_via_tile(t, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias,
                      bias_axis, ws);
        return;
    }
    float gemm_beta = beta;
    if (with_bias && !c32) { /* beta 0: C = round(alpha acc + bias), one rounding */
        cuda_gemm_bias_fill(t, c, ldc, m, n, 0, 1, bias, bias_axis);
        gemm_beta = 1.0f;
    }
    cudaDataType ab = gemm_type(t, a32), ct = gemm_type(t, c32);
    CUBLAS_CHECK(cublasGemmEx(hfl_cuda_ctx.blas, gemm_op(trans_b), gemm_op(trans_a), n, m, k,
                              &alpha, b, ab, ldb, a, ab, lda, &gemm_beta, c, ct, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (with_bias && c32) cuda_gemm_bias_add_f32(t, c, ldc, m, n, 0, 1, bias, bias_axis);
}

void cuda_gemm_strided(hfl_precision t, unsigned f32_mask, int trans_a, int trans_b, int m, int n,
                       int k, float alpha, const void *a, int lda, long long stride_a,
                       const void *b, int ldb, long long stride_b, float beta, void *c, int ldc,
                       long long stride_c, int count, const void *bias, int bias_axis, void *ws) {
    if (m <= 0 || n <= 0 || count <= 0) return;
    int with_bias = bias_axis != HFL_BIAS_NONE && bias;
    if (t == HFL_PREC_FP32) {
        cuda_sgemm_strided(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                           beta, c, ldc, stride_c, count);
        if (with_bias) cuda_gemm_bias_add_f32(t, c, ldc, m, n, stride_c, count, bias, bias_axis);
        return;
    }
    int a32 = (f32_mask & HFL_GEMM_A_F32) != 0, b32 = (f32_mask & HFL_GEMM_B_F32) != 0;
    int c32 = (f32_mask & HFL_GEMM_C_F32) != 0;
    if (with_bias && !c32 && beta != 0.0f) { /* no layer asks for this: one GEMM at a time */
        size_t ea = a32 ? 4 : 2, eb = b32 ? 4 : 2, ec = c32 ? 4 : 2;
        for (int s = 0; s < count; s++)
            cuda_gemm(t, f32_mask, trans_a, trans_b, m, n, k, alpha,
                      (const char *)a + s * stride_a * (long long)ea, lda,
                      (const char *)b + s * stride_b * (long long)eb, ldb, beta,
                      (char *)c + s * stride_c * (long long)ec, ldc, bias, bias_axis, ws);
        return;
    }
    gemm_check(t, f32_mask);
    float gemm_beta = beta;
    if (with_bias && !c32) { /* 2-byte C, beta 0: the bias first, then C = round(acc + bias) */
        cuda_gemm_bias_fill(t, c, ldc, m, n, stride_c, count, bias, bias_axis);
        gemm_beta = 1.0f;
    }
    cudaDataType ab = gemm_type(t, a32), ct = gemm_type(t, c32);
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        hfl_cuda_ctx.blas, gemm_op(trans_b), gemm_op(trans_a), n, m, k, &alpha, b, ab, ldb,
        stride_b, a, ab, lda, stride_a, &gemm_beta, c, ct, ldc, stride_c, count,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (with_bias && c32) cuda_gemm_bias_add_f32(t, c, ldc, m, n, stride_c, count, bias, bias_axis);
}
