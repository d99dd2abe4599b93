/* gemm_emu.h: emulated GEMMs for the tests of tests/kernels/rounding_check.h:
 * plain C loops in fp32 that stand in for a GPU's 2-byte gemm, legal or not
 * (tests/kernels/test_rounding_check.c proves the judge on them; the GPU
 * tests run the legal one on the CPU to measure, in the same run, how far a
 * legal reordering moves a whole block).
 * - legal: the dot product in 8 interleaved lanes and a fixed tree (another
 *   fp32 order than OpenBLAS's), then beta C and the bias, one rounding;
 * - split-K: the dot product in emu_parts pieces whose partial results are
 *   added into the 2-byte C one at a time (cuBLAS's in-place reduction in the
 *   output type, CUBLASLT_REDUCTION_SCHEME_INPLACE), C prefilled as the old
 *   gemm.c did: the bias, or round(beta C + bias);
 * - pre-rounded bias: the bias added to an already rounded value, i.e.
 *   round(acc + round(beta C + bias)) (the old gemm.c with beta != 0) or
 *   round(round(acc) + bias) (a bias kernel after a 2-byte GEMM).
 * An fp32 C is always summed legally; the illegal kinds change only 2-byte
 * outputs with something to round twice. emu_backend(kind, parts) is the CPU
 * backend with these GEMMs. */
#ifndef HFL_TESTS_KERNELS_GEMM_EMU_H
#define HFL_TESTS_KERNELS_GEMM_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/ops_hd.h"
#include "tests/kernels/rounding_check.h"

enum { EMU_LEGAL, EMU_SPLITK, EMU_PREROUND, EMU_KINDS };
static const char *const emu_names[EMU_KINDS] = {"legal reorder", "split-K", "pre-rounded bias"};

static int emu_parts = 2; /* split-K's pieces (emu_backend sets it) */

static inline float emu_rnd(hfl_precision lp, float x) { return hfl_op_widen(lp, hfl_op_narrow(lp, x)); }

/* sum of a[p] b[p] over p in [p0, p1) in 8 interleaved fp32 lanes, then a fixed tree */
static inline float emu_dot(hfl_precision lp, unsigned mask, int ta, int tb, const void *a, int lda,
                            const void *b, int ldb, int i, int j, int p0, int p1) {
    float lane[8] = {0};
    for (int p = p0; p < p1; p++) {
        float av = (float)rc_elem(lp, mask & HFL_GEMM_A_F32, a, ta ? (size_t)p * lda + i : (size_t)i * lda + p);
        float bv = (float)rc_elem(lp, mask & HFL_GEMM_B_F32, b, tb ? (size_t)j * ldb + p : (size_t)p * ldb + j);
        lane[(p - p0) % 8] += av * bv;
    }
    for (int w = 4; w >= 1; w /= 2)
        for (int q = 0; q < w; q++) lane[q] += lane[q + w];
    return lane[0];
}

/* One 2-byte gemm (backend.h's arguments) the way `kind` computes it. */
static inline void emu_gemm(int kind, hfl_precision lp, unsigned mask, int ta, int tb, int m, int n,
                            int k, float alpha, const void *a, int lda, const void *b, int ldb,
                            float beta, void *c, int ldc, const void *bias, int axis) {
    int c32 = (mask & HFL_GEMM_C_F32) != 0, has_bias = axis != HFL_BIAS_NONE && bias;
    /* the illegal kinds apply where there is something to round twice */
    if (c32 || (kind == EMU_PREROUND && !has_bias)) kind = EMU_LEGAL;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            size_t at = (size_t)i * ldc + j;
            float cv = beta != 0.0f ? (float)rc_elem(lp, c32, c, at) : 0.0f;
            float bv = has_bias ? hfl_ld(lp, bias, axis == HFL_BIAS_ROW ? i : j) : 0.0f, y;
            if (kind == EMU_LEGAL) {
                y = alpha * emu_dot(lp, mask, ta, tb, a, lda, b, ldb, i, j, 0, k) + beta * cv + bv;
            } else if (kind == EMU_PREROUND) {
                float acc = alpha * emu_dot(lp, mask, ta, tb, a, lda, b, ldb, i, j, 0, k);
                y = beta != 0.0f ? acc + emu_rnd(lp, beta * cv + bv) : emu_rnd(lp, acc) + bv;
            } else { /* split-K in place: C prefilled, then one rounding per part */
                float out = has_bias ? emu_rnd(lp, beta * cv + bv) : cv;
                float gemm_beta = has_bias ? 1.0f : beta;
                for (int q = 0; q < emu_parts; q++) {
                    int p0 = (int)((long)k * q / emu_parts), p1 = (int)((long)k * (q + 1) / emu_parts);
                    float part = alpha * emu_dot(lp, mask, ta, tb, a, lda, b, ldb, i, j, p0, p1);
                    out = emu_rnd(lp, part + (q == 0 ? gemm_beta * out : out));
                }
                y = out;
            }
            if (c32)
                ((float *)c)[at] = y;
            else
                ((uint16_t *)c)[at] = hfl_op_narrow(lp, y);
        }
}

/* gemm_strided: count independent emu_gemms. */
static inline void emu_gemm_strided(int kind, hfl_precision lp, unsigned mask, int ta, int tb,
                                    int m, int n, int k, float alpha, const void *a, int lda,
                                    long long sa, const void *b, int ldb, long long sb, float beta,
                                    void *c, int ldc, long long sc, int count, const void *bias,
                                    int axis) {
    size_t ea = mask & HFL_GEMM_A_F32 ? 4 : 2, eb = mask & HFL_GEMM_B_F32 ? 4 : 2;
    size_t ec = mask & HFL_GEMM_C_F32 ? 4 : 2;
    for (int s = 0; s < count; s++)
        emu_gemm(kind, lp, mask, ta, tb, m, n, k, alpha, (const char *)a + s * sa * (long long)ea, lda,
                 (const char *)b + s * sb * (long long)eb, ldb, beta, (char *)c + s * sc * (long long)ec,
                 ldc, bias, axis);
}

/* The backend table's slots, one pair per kind (a slot has no context to
 * carry the kind, so two emulated backends can run side by side). An fp32
 * gemm is the CPU backend's. */
static inline void emu_strided(int kind, hfl_precision t, unsigned mask, int ta, int tb, int m,
                               int n, int k, float alpha, const void *a, int lda, long long sa,
                               const void *b, int ldb, long long sb, float beta, void *c, int ldc,
                               long long sc, int count, const void *bias, int axis, void *ws) {
    if (t == HFL_PREC_FP32)
        hfl_backend_cpu()->gemm_strided(t, mask, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb,
                                        beta, c, ldc, sc, count, bias, axis, ws);
    else
        emu_gemm_strided(kind, t, mask, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c,
                         ldc, sc, count, bias, axis);
}
static void emu_legal_strided(hfl_precision t, unsigned mask, int ta, int tb, int m, int n, int k,
                              float alpha, const void *a, int lda, long long sa, const void *b,
                              int ldb, long long sb, float beta, void *c, int ldc, long long sc,
                              int count, const void *bias, int axis, void *ws) {
    emu_strided(EMU_LEGAL, t, mask, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                sc, count, bias, axis, ws);
}
static void emu_legal(hfl_precision t, unsigned mask, int ta, int tb, int m, int n, int k,
                      float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                      void *c, int ldc, const void *bias, int axis, void *ws) {
    emu_strided(EMU_LEGAL, t, mask, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0,
                1, bias, axis, ws);
}
static void emu_splitk_strided(hfl_precision t, unsigned mask, int ta, int tb, int m, int n, int k,
                               float alpha, const void *a, int lda, long long sa, const void *b,
                               int ldb, long long sb, float beta, void *c, int ldc, long long sc,
                               int count, const void *bias, int axis, void *ws) {
    emu_strided(EMU_SPLITK, t, mask, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                sc, count, bias, axis, ws);
}
static void emu_splitk(hfl_precision t, unsigned mask, int ta, int tb, int m, int n, int k,
                       float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                       void *c, int ldc, const void *bias, int axis, void *ws) {
    emu_strided(EMU_SPLITK, t, mask, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0,
                1, bias, axis, ws);
}
static void emu_preround_strided(hfl_precision t, unsigned mask, int ta, int tb, int m, int n,
                                 int k, float alpha, const void *a, int lda, long long sa,
                                 const void *b, int ldb, long long sb, float beta, void *c, int ldc,
                                 long long sc, int count, const void *bias, int axis, void *ws) {
    emu_strided(EMU_PREROUND, t, mask, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                sc, count, bias, axis, ws);
}
static void emu_preround(hfl_precision t, unsigned mask, int ta, int tb, int m, int n, int k,
                         float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                         void *c, int ldc, const void *bias, int axis, void *ws) {
    emu_strided(EMU_PREROUND, t, mask, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc,
                0, 1, bias, axis, ws);
}

static hfl_backend emu_tables[EMU_KINDS];

/* The CPU backend with the emulated GEMMs of this kind (parts: split-K's,
 * shared by every split-K table; ignored for the other kinds). */
static inline const hfl_backend *emu_backend(int kind, int parts) {
    hfl_backend *t = &emu_tables[kind];
    if (kind == EMU_SPLITK) emu_parts = parts;
    *t = *hfl_backend_cpu();
    t->gemm = kind == EMU_LEGAL ? emu_legal : kind == EMU_SPLITK ? emu_splitk : emu_preround;
    t->gemm_strided = kind == EMU_LEGAL    ? emu_legal_strided
                      : kind == EMU_SPLITK ? emu_splitk_strided
                                           : emu_preround_strided;
    return t;
}

#endif
