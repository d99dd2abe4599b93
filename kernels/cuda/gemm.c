/* gemm.c: the CUDA backend's GEMMs on cuBLAS, row-major as kernels/backend.h
 * says, enqueued on the compute stream.
 *
 * Layout: cuBLAS is column-major, and a row-major X is the column-major X^T,
 * so row-major C = op(A) op(B) is computed as column-major
 * C^T = op(B)^T op(A)^T: the operands swap places (B first), m and n swap,
 * and each keeps its own transpose flag and leading dimension.
 *
 * sgemm: cublasSgemm with the handle's default math mode, i.e. true fp32
 * (no TF32), hfl's reference precision. HFL_TF32=1 in the environment
 * switches fp32 GEMMs to cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32
 * (faster on sm_80+, ~1e-3 relative error).
 *
 * gemm_lp: cublasGemmEx with A and B of one type (both 2-byte CUDA_R_16BF /
 * CUDA_R_16F, or both fp32; cuBLAS takes no mixed pair), C 2-byte or fp32,
 * accumulation in fp32 (CUBLAS_COMPUTE_32F), tensor cores where the GPU has
 * them. A 2-byte C with fp32 A and B is not a cuBLAS combination either; no
 * layer asks for it. `ws` (the CPU backend's fp32 staging) is ignored: cuBLAS
 * uses the workspace given to set_blas_workspace.
 *
 * Bias. The CPU computes acc = alpha op(A) op(B) + beta C in fp32, adds the
 * bias in fp32, and rounds a 2-byte C once. Here:
 * - 2-byte C, beta == 0: C is first filled with the broadcast bias (exact:
 *   the bias is 2-byte already) and the GEMM runs with beta = 1, so cuBLAS's
 *   epilogue rounds alpha acc + bias once, as the CPU does. The bias enters
 *   after the whole dot product in both, so the only difference is the
 *   GEMM's own summation order: a tolerance matter, as for any GEMM.
 * - 2-byte C, beta != 0 (no layer does this): C := round(beta C + bias)
 *   first, then the GEMM with beta = 1; one extra rounding of beta C + bias.
 * - fp32 C: the GEMM, then bias added in fp32, the CPU's order exactly.
 *
 * Strided forms (conv over a chunk of samples): one cublasSgemmStridedBatched
 * / cublasGemmStridedBatchedEx over `count` GEMMs (a stride of 0 shares the
 * weights). A 2-byte C with a bias and beta 0 gets the bias filled into all
 * count Cs by one kernel first, as above; the rare other bias cases fall
 * back to one gemm_lp per GEMM. */
#include <stdint.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"

static cublasOperation_t gemm_op(int trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

static cudaDataType gemm_type(hfl_precision lp, int is_f32) {
    if (is_f32) return CUDA_R_32F;
    return lp == HFL_PREC_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

void cuda_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                const float *b, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return;
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

void cuda_gemm_lp(hfl_precision lp, unsigned f32_mask, int trans_a, int trans_b, int m, int n,
                  int k, float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                  void *c, int ldc, const uint16_t *bias, int bias_axis, void *ws) {
    (void)ws;
    int a32 = (f32_mask & HFL_GEMM_A_F32) != 0, b32 = (f32_mask & HFL_GEMM_B_F32) != 0;
    int c32 = (f32_mask & HFL_GEMM_C_F32) != 0;
    CUDA_REQUIRE(a32 == b32, "gemm_lp: A and B must be of one type (both fp32 or both 2-byte)");
    CUDA_REQUIRE(c32 || !a32, "gemm_lp: a 2-byte C needs 2-byte A and B (cuBLAS has no such GEMM)");
    CUDA_REQUIRE(lp == HFL_PREC_BF16 || lp == HFL_PREC_FP16, "gemm_lp: lp must be bf16 or fp16");
    if (m <= 0 || n <= 0) return;
    int with_bias = bias_axis != HFL_BIAS_NONE && bias;
    float gemm_beta = beta;
    if (with_bias && !c32) {
        if (beta == 0.0f)
            cuda_gemm_bias_fill_lp(c, ldc, m, n, bias, bias_axis);
        else
            cuda_gemm_bias_combine_lp(lp, c, ldc, m, n, beta, bias, bias_axis);
        gemm_beta = 1.0f;
    }
    cudaDataType ab = gemm_type(lp, a32), ct = gemm_type(lp, c32);
    CUBLAS_CHECK(cublasGemmEx(hfl_cuda_ctx.blas, gemm_op(trans_b), gemm_op(trans_a), n, m, k,
                              &alpha, b, ab, ldb, a, ab, lda, &gemm_beta, c, ct, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (with_bias && c32) cuda_gemm_bias_add_f32(lp, c, ldc, m, n, bias, bias_axis);
}

void cuda_sgemm_strided(int trans_a, int trans_b, int m, int n, int k, float alpha,
                        const float *a, int lda, long long stride_a, const float *b, int ldb,
                        long long stride_b, float beta, float *c, int ldc, long long stride_c,
                        int count) {
    if (m <= 0 || n <= 0 || count <= 0) return;
    cublasHandle_t h = hfl_cuda_ctx.blas;
    if (hfl_cuda_ctx.tf32) {
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            h, gemm_op(trans_b), gemm_op(trans_a), n, m, k, &alpha, b, CUDA_R_32F, ldb, stride_b,
            a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, count,
            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
        return;
    }
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, gemm_op(trans_b), gemm_op(trans_a), n, m, k, &alpha,
                                           b, ldb, stride_b, a, lda, stride_a, &beta, c, ldc,
                                           stride_c, count));
}

void cuda_gemm_lp_strided(hfl_precision lp, unsigned f32_mask, int trans_a, int trans_b, int m,
                          int n, int k, float alpha, const void *a, int lda, long long stride_a,
                          const void *b, int ldb, long long stride_b, float beta, void *c,
                          int ldc, long long stride_c, int count, const uint16_t *bias,
                          int bias_axis, void *ws) {
    int a32 = (f32_mask & HFL_GEMM_A_F32) != 0, b32 = (f32_mask & HFL_GEMM_B_F32) != 0;
    int c32 = (f32_mask & HFL_GEMM_C_F32) != 0;
    int with_bias = bias_axis != HFL_BIAS_NONE && bias;
    if (m <= 0 || n <= 0 || count <= 0) return;
    if (with_bias && (c32 || beta != 0.0f)) { /* no layer asks for these: one GEMM at a time */
        size_t ea = a32 ? 4 : 2, eb = b32 ? 4 : 2, ec = c32 ? 4 : 2;
        for (int s = 0; s < count; s++)
            cuda_gemm_lp(lp, f32_mask, trans_a, trans_b, m, n, k, alpha,
                         (const char *)a + s * stride_a * (long long)ea, lda,
                         (const char *)b + s * stride_b * (long long)eb, ldb, beta,
                         (char *)c + s * stride_c * (long long)ec, ldc, bias, bias_axis, ws);
        return;
    }
    CUDA_REQUIRE(a32 == b32, "gemm_lp: A and B must be of one type (both fp32 or both 2-byte)");
    CUDA_REQUIRE(c32 || !a32, "gemm_lp: a 2-byte C needs 2-byte A and B (cuBLAS has no such GEMM)");
    CUDA_REQUIRE(lp == HFL_PREC_BF16 || lp == HFL_PREC_FP16, "gemm_lp: lp must be bf16 or fp16");
    float gemm_beta = beta;
    if (with_bias) { /* 2-byte C, beta 0: the bias first, then C = round(acc + bias) */
        cuda_gemm_bias_fill_lp_strided(c, ldc, m, n, stride_c, count, bias, bias_axis);
        gemm_beta = 1.0f;
    }
    cudaDataType ab = gemm_type(lp, a32), ct = gemm_type(lp, c32);
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        hfl_cuda_ctx.blas, gemm_op(trans_b), gemm_op(trans_a), n, m, k, &alpha, b, ab, ldb,
        stride_b, a, ab, lda, stride_a, &gemm_beta, c, ct, ldc, stride_c, count,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
