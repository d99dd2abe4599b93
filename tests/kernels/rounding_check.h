/* rounding_check.h: the tests' judge of a backend's GEMM outputs against the
 * exact value, telling a legal reordering of the sums from an extra rounding
 * (shared by tests/kernels/test_rounding_check.c, which proves on the CPU that
 * it can tell them apart, and the GPU tests of tests/gpu/, which apply it).
 *
 * kernels/backend.h promises that a 2-byte gemm sums in fp32 and rounds a 2-byte C
 * once, after the bias. Two correct backends then differ only by the order of
 * their fp32 sums. For an output with exact value x (computed here in double
 * from the same operands) and S = |alpha| sum_p |a_p b_p| + |beta c| + |bias|,
 * any fp32 evaluation y of it satisfies |y - x| <= gamma_n S (Higham,
 * "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 3.1),
 * n = k + 4 operations deep (k products summed by k - 1 additions, alpha's
 * and beta's products, and the two additions of beta C and the bias). The
 * unit is 2^-23, not fp32's 2^-24: NVIDIA tensor cores align and normalise
 * with truncation rather than round to nearest (Fasi, Higham, Mikaitis and
 * Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ Comput. Sci.
 * 7:e330, 2021), whose error per operation is up to one ulp, 2^-23 relative.
 * The double reference adds at most gamma_k(2^-53) S, 2^-30 of that: ignored.
 *
 * Criterion 1, one rounding: a 2-byte output must be rnd(y) for some y within
 * delta = gamma_n S of x. rnd is monotone, so that is every 2-byte value from
 * rnd(x - delta) to rnd(x + delta). This can never fail a correct backend. It
 * is sharp where delta is small against the 2-byte ulp; where k and S/|x| are
 * large (fp16 at k = 784 with signed data) the set holds several values and
 * a second rounding, which moves a value by at most about one ulp, stays
 * inside it: criterion 2 then decides.
 *
 * Criterion 2, how many differ: a legal reordering changes y by about
 * sqrt(k) 2^-24 S (rounding errors of a long sum behave like a random walk:
 * Higham and Mary, "A new approach to probabilistic rounding error analysis",
 * SIAM J. Sci. Comput. 41(5), 2019), so it flips the rounding of an output
 * with probability about that gap over the 2-byte ulp at the output. The sum
 * of those probabilities is the expected number of outputs whose bits differ
 * from the reference backend's; the cap is 4 times that, plus 8 for the
 * counting noise of small shapes. A second rounding instead moves about half
 * of all outputs (the emulations in test_rounding_check.c show both bands).
 *
 * Whole step (rc_step_bound): once one output flips, everything downstream
 * moves, so a whole training step is only a smoke test; its bound is the
 * typical flip-induced error carried through the step (gpu-review.md,
 * section 4), about 3e-3 (bf16) and 2e-3 (fp16) for the mlp's gradient. */
#ifndef HFL_TESTS_KERNELS_ROUNDING_CHECK_H
#define HFL_TESTS_KERNELS_ROUNDING_CHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/ops_hd.h"

#define RC_UNIT 0x1p-23 /* fp32 accumulation, truncating tensor cores included */

/* gamma_n at RC_UNIT. */
static inline double rc_gamma(double n) {
    double nu = n * RC_UNIT;
    return nu / (1.0 - nu);
}

/* The spacing of lp's values at |v| (bf16: 8 significant bits, fp16: 11 and
 * subnormals 2^-24 apart). */
static inline double rc_ulp(hfl_precision lp, double v) {
    int e;
    frexp(fabs(v), &e); /* |v| = f 2^e, f in [0.5, 1) */
    if (lp == HFL_PREC_FP16) return ldexp(1.0, (e - 11 > -24) ? e - 11 : -24);
    return ldexp(1.0, (e - 8 > -133) ? e - 8 : -133);
}

/* fp32 view of element i of an operand stored fp32 (is_f32) or 2-byte lp. */
static inline double rc_elem(hfl_precision lp, int is_f32, const void *p, size_t i) {
    return is_f32 ? ((const float *)p)[i] : hfl_op_widen(lp, ((const uint16_t *)p)[i]);
}

/* For each output [i * n + j] of C = alpha op(A) op(B) + beta C0 + bias
 * (row-major, gemm's arguments; lp is ignored for fp32 operands, c0 may
 * be NULL when beta is 0, bias NULL with HFL_BIAS_NONE): its exact value,
 * S, and T = sqrt(sum of the squared partial sums) of the sum in index order,
 * the scale of a legal reordering's typical error (criterion 2). */
static inline void rc_gemm_ref(hfl_precision lp, unsigned mask, int ta, int tb, int m, int n, int k,
                               float alpha, const void *a, int lda, const void *b, int ldb,
                               float beta, const void *c0, int ldc, const void *bias, int axis,
                               double *exact, double *s, double *t) {
    int a32 = (mask & HFL_GEMM_A_F32) != 0, b32 = (mask & HFL_GEMM_B_F32) != 0;
    int c32 = (mask & HFL_GEMM_C_F32) != 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double x = 0.0, sa = 0.0, t2 = 0.0;
            for (int p = 0; p < k; p++) {
                double av = rc_elem(lp, a32, a, ta ? (size_t)p * lda + i : (size_t)i * lda + p);
                double bv = rc_elem(lp, b32, b, tb ? (size_t)j * ldb + p : (size_t)p * ldb + j);
                x += av * bv;
                sa += fabs(av * bv);
                t2 += x * x;
            }
            x *= alpha;
            sa *= fabs(alpha);
            t2 *= (double)alpha * alpha;
            double extra[2] = {
                beta != 0.0f ? beta * rc_elem(lp, c32, c0, (size_t)i * ldc + j) : 0.0,
                axis != HFL_BIAS_NONE ? hfl_ld(lp, bias, axis == HFL_BIAS_ROW ? i : j) : 0.0};
            for (int e = 0; e < 2; e++) {
                x += extra[e];
                sa += fabs(extra[e]);
                t2 += x * x;
            }
            exact[(size_t)i * n + j] = x;
            s[(size_t)i * n + j] = sa;
            t[(size_t)i * n + j] = sqrt(t2);
        }
}

/* What the judge found over the outputs it was given (rc_judge_*, added up
 * over calls, e.g. the GEMMs of a strided batch); rc_finish sets cap. */
typedef struct {
    size_t count;    /* outputs judged */
    size_t outside;  /* criterion 1: not a rounding of any value within delta of exact */
    size_t differ;   /* outputs whose bits differ from the reference backend's */
    double expected; /* criterion 2: outputs a legal reordering is expected to flip */
    double cap;      /* most differing outputs allowed: 4 expected + 8 */
    double worst;    /* largest |got - exact| / delta (fp32) or / ulp (2-byte) */
} rc_stats;

/* Criterion 1 and the counts for an m x n block of 2-byte outputs (row r at
 * got + r * ldg, the reference's at ref + r * ldr), k products deep. */
static inline void rc_judge_lp(rc_stats *st, hfl_precision lp, int k, const double *exact,
                        const double *s, const double *t, const uint16_t *got, size_t ldg,
                        const uint16_t *ref, size_t ldr, int m, int n) {
    double g = rc_gamma((double)k + 4.0);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            size_t at = (size_t)i * n + j;
            double x = exact[at], delta = g * s[at];
            uint16_t gv = got[(size_t)i * ldg + j], rv = ref[(size_t)i * ldr + j];
            double lo = hfl_op_widen(lp, hfl_op_narrow(lp, (float)(x - delta)));
            double hi = hfl_op_widen(lp, hfl_op_narrow(lp, (float)(x + delta)));
            double v = hfl_op_widen(lp, gv), ulp = rc_ulp(lp, hfl_op_widen(lp, rv));
            st->outside += !(v >= lo && v <= hi); /* a NaN is outside */
            st->differ += gv != rv;
            st->expected += fmin(1.0, 0x1p-24 * t[at] / ulp);
            if (fabs(v - x) / ulp > st->worst) st->worst = fabs(v - x) / ulp;
            st->count++;
        }
}

/* The same for fp32 outputs: criterion 1 is |got - exact| <= delta; any
 * fp32 output may differ from the reference's in its last bits, so each
 * counts as expected to (criterion 2 does not apply). */
static inline void rc_judge_f32(rc_stats *st, int k, const double *exact, const double *s,
                                const float *got, size_t ldg, const float *ref, size_t ldr, int m,
                                int n) {
    double g = rc_gamma((double)k + 4.0);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            size_t at = (size_t)i * n + j;
            double d = fabs((double)got[(size_t)i * ldg + j] - exact[at]), delta = g * s[at];
            st->outside += !(d <= delta);
            st->differ += got[(size_t)i * ldg + j] != ref[(size_t)i * ldr + j];
            st->expected += 1.0;
            if (delta > 0 && d / delta > st->worst) st->worst = d / delta;
            st->count++;
        }
}

static inline void rc_finish(rc_stats *st) { st->cap = 4.0 * st->expected + 8.0; }

static inline int rc_one_rounding(const rc_stats *st) { return st->outside == 0; }
static inline int rc_few_differ(const rc_stats *st) { return (double)st->differ <= st->cap; }

/* One gemm call judged on host copies of its operands: c0 is C before the
 * call, got after it (both m rows of ldc); the CPU backend's gemm on the
 * same operands gives the reference bits. Adds to *st (rc_finish after). */
static inline void rc_judge_gemm(rc_stats *st, const hfl_backend *cpu, hfl_precision lp,
                                 unsigned mask, int ta, int tb, int m, int n, int k, float alpha,
                                 const void *a, int lda, const void *b, int ldb, float beta,
                                 const void *c0, const void *got, int ldc, const void *bias,
                                 int axis) {
    size_t ec = mask & HFL_GEMM_C_F32 ? 4 : 2, cn = (size_t)m * n;
    void *ref = malloc(ec * (size_t)m * ldc + 1),
         *ws = malloc(hfl_gemm_ws_bytes(lp, mask, m, n, k) + 1);
    double *exact = malloc(sizeof(double) * cn + 1), *s = malloc(sizeof(double) * cn + 1);
    double *t = malloc(sizeof(double) * cn + 1);
    if (!ref || !ws || !exact || !s || !t) {
        fprintf(stderr, "rc_judge_gemm: out of memory\n");
        abort();
    }
    memcpy(ref, c0, ec * (size_t)m * ldc);
    cpu->gemm(lp, mask, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, ref, ldc, bias, axis, ws);
    rc_gemm_ref(lp, mask, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, bias, axis, exact, s,
                t);
    if (ec == 2)
        rc_judge_lp(st, lp, k, exact, s, t, got, ldc, ref, ldc, m, n);
    else
        rc_judge_f32(st, k, exact, s, got, ldc, ref, ldc, m, n);
    free(ref), free(ws), free(exact), free(s), free(t);
}

/* ---- teacher forcing: every GEMM of a whole step judged on its own inputs ---- */

/* rc_forcing(inner) returns a copy of inner's table whose gemm and
 * gemm_strided run inner's (an fp32 one just that), then download the call's operands and result
 * (waiting for the device: a test-only path) and judge it with
 * rc_judge_gemm. Each call's verdict lands in rc_forced; a rejected call is
 * printed (at most RC_FORCED_SHOWN of them), naming its shape, so a failing
 * step names its op with no cascade in between. */
#define RC_FORCED_SHOWN 8
static struct {
    int calls, rejected;
} rc_forced;
static const hfl_backend *rc_forced_inner;
static hfl_backend rc_forced_backend;

static inline void *rc_fetch(const void *dev, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    if (!h) {
        fprintf(stderr, "rc_fetch: out of memory\n");
        abort();
    }
    rc_forced_inner->download(h, dev, bytes);
    return h;
}

/* The strided form as one call to the inner backend (the batched kernel a
 * GPU runs), then each of its count GEMMs judged (count 1: gemm). */
static inline void rc_forced_gemm_strided(hfl_precision lp, unsigned mask, int ta, int tb, int m,
                                          int n, int k, float alpha, const void *a, int lda,
                                          long long sa, const void *b, int ldb, long long sb,
                                          float beta, void *c, int ldc, long long sc, int count,
                                          const void *bias, int axis, void *ws) {
    const hfl_backend *in = rc_forced_inner;
    size_t ea = mask & HFL_GEMM_A_F32 ? 4 : 2, eb = mask & HFL_GEMM_B_F32 ? 4 : 2;
    size_t ec = mask & HFL_GEMM_C_F32 ? 4 : 2;
    if (lp == HFL_PREC_FP32 || m <= 0 || n <= 0 || k <= 0 || count <= 0) {
        in->gemm_strided(lp, mask, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                         count, bias, axis, ws);
        return;
    }
    /* elements each operand spans: one matrix, plus the strides of the rest */
    size_t an = (size_t)((ta ? k : m) - 1) * lda + (ta ? m : k) + (size_t)(count - 1) * sa;
    size_t bn = (size_t)((tb ? n : k) - 1) * ldb + (tb ? k : n) + (size_t)(count - 1) * sb;
    size_t cn = (size_t)(m - 1) * ldc + n + (size_t)(count - 1) * sc;
    void *ha = rc_fetch(a, ea * an), *hb = rc_fetch(b, eb * bn), *hc0 = rc_fetch(c, ec * cn);
    int has_bias = axis != HFL_BIAS_NONE && bias;
    void *hbias = has_bias ? rc_fetch(bias, 2 * (size_t)(axis == HFL_BIAS_ROW ? m : n)) : NULL;
    if (count == 1)
        in->gemm(lp, mask, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, axis, ws);
    else
        in->gemm_strided(lp, mask, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                         count, bias, axis, ws);
    void *hc = rc_fetch(c, ec * cn);
    rc_stats st = {0};
    for (int q = 0; q < count; q++)
        rc_judge_gemm(&st, hfl_backend_cpu(), lp, mask, ta, tb, m, n, k, alpha,
                      (char *)ha + q * sa * (long long)ea, lda, (char *)hb + q * sb * (long long)eb,
                      ldb, beta, (char *)hc0 + q * sc * (long long)ec, (char *)hc + q * sc * (long long)ec,
                      ldc, has_bias ? hbias : NULL, has_bias ? axis : HFL_BIAS_NONE);
    rc_finish(&st);
    int bad = !rc_one_rounding(&st) || !(ec == 4 || rc_few_differ(&st));
    rc_forced.calls++;
    if (bad && rc_forced.rejected++ < RC_FORCED_SHOWN)
        printf("  gemm call %d REJECTED: %s %dx%dx%d ta %d tb %d mask %u beta %g bias %d count %d: "
               "outside %zu, differ %zu of %zu (cap %.1f)\n",
               rc_forced.calls, lp == HFL_PREC_FP16 ? "fp16" : "bf16", m, n, k, ta, tb, mask,
               (double)beta, axis, count, st.outside, st.differ, st.count, st.cap);
    free(ha), free(hb), free(hc0), free(hc), free(hbias);
}

static inline void rc_forced_gemm(hfl_precision lp, unsigned mask, int ta, int tb, int m, int n,
                                  int k, float alpha, const void *a, int lda, const void *b,
                                  int ldb, float beta, void *c, int ldc, const void *bias, int axis,
                                  void *ws) {
    rc_forced_gemm_strided(lp, mask, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0,
                           1, bias, axis, ws);
}

static inline const hfl_backend *rc_forcing(const hfl_backend *inner) {
    rc_forced_inner = inner;
    rc_forced_backend = *inner;
    rc_forced_backend.gemm = rc_forced_gemm;
    rc_forced_backend.gemm_strided = rc_forced_gemm_strided;
    memset(&rc_forced, 0, sizeof rc_forced);
    return &rc_forced_backend;
}


/* The whole-step bound on the relative L2 gap between two backends' 2-byte
 * gradients (gpu-review.md, section 4, "Principled bounds" 3). One legal flip
 * at an output moves it by one ulp, 2 u_lp relative; outputs flip with
 * probability about sqrt(k) u32 rho / u_lp (rho = S / |y|, the first layer's
 * cancellation), so the stored values move by about
 * sqrt(2 sqrt(k) u32 u_lp rho) RMS; the step carries a relative perturbation
 * of its stored values into the gradient with the gain the backend's own
 * 2-byte error shows, kappa = e / u_lp (e: the reference's 2-byte gradient
 * against its fp32 one). For the mlp (k = 784, rho = 3) that is about 3e-3 in
 * bf16 and 2e-3 in fp16; a legal reordering stays far below it (the
 * emulations: at most 2e-4). */
static inline double rc_step_bound(hfl_precision lp, double e, int k, double rho) {
    double u_lp = lp == HFL_PREC_FP16 ? 0x1p-11 : 0x1p-8;
    return e / u_lp * sqrt(2.0 * sqrt((double)k) * 0x1p-24 * u_lp * rho);
}

#endif
