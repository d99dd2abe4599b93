/* test_cuda_ops.c: every op of the CUDA backend against the CPU backend on
 * the same inputs (suite gpu; skips with exit 77 where there is no GPU).
 *
 * Bit for bit (memcmp; for a NaN made by arithmetic, any NaN: the GPU's is
 * canonical, x86's keeps the operand's sign and payload): fill, copies, bias
 * grad, ReLU, convert, SGD (and its skipped fp16 step), unscale and its
 * finite flag, scaler_update, channel bias grad, im2col, col2im, max pooling
 * forward and backward, each in fp32, bf16 and fp16. These are the thread bodies that
 * tests/kernels/test_thread_bodies.c runs on the CPU; here they run as
 * kernels built with -fmad=false.
 *
 * GEMMs (gemm and gemm_strided, fp32 and 2-byte) at hfl's training shapes
 * (tests/kernels/gemm_shapes.h) and at odd ones (transposes, padding, beta,
 * both bias axes), judged by tests/kernels/rounding_check.h, whose criteria
 * tests/kernels/test_rounding_check.c proves on the CPU: every output a
 * rounding of a value within gamma_{k+4}(2^-23) S of the exact one (one
 * rounding; for fp32 outputs, within that of the exact value), and for 2-byte
 * outputs no more differing from the CPU's bits than 4x the flips a legal
 * reordering is expected to make, plus 8. Each prints a "roundonce" line.
 * Run with HFL_CUBLAS_REDUCED_REDUCTION=1 (cuBLAS's default math mode, which
 * lets split-K reduce in the 2-byte output type) the 2-byte cases may fail:
 * that is the A/B scripts/gpu-check runs. HFL_TF32=1 would break the fp32
 * bounds: unset it.
 * Softmax within tolerances (the device's expf/logf are not glibc's):
 * loss_sum relative 1e-6, correct and rows exact, dlogits within 8 fp32 ulp
 * or 8 * 2^-24 * scale absolute (one 2-byte ulp more for the 2-byte form).
 * The input pipeline (host_alloc, stage_wait, prefetch, await_prefetch,
 * release_input) must move every byte, and the allocator must honour the
 * budget and report a cudaMalloc the card cannot hold. One line per check. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/budget.h"
#include "kernels/device.h"
#include "kernels/geom.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "kernels/select.h"
#include "tests/check.h"
#include "util/util.h"

static const hfl_backend *G; /* the CUDA backend */
static const hfl_backend *C; /* the CPU backend, the reference */
static int cc;                /* the GPU's compute capability, 10 * major + minor */

/* One line per check, passed or not; a failed one counts in tests/check.h. */
static void report(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!ok) check_failures++;
}

#define TEST_INPUT_SEED 29
#define TEST_INPUT_STREAM 3
#include "tests/kernels/inputs.h"
#include "tests/kernels/gemm_shapes.h"
#include "tests/kernels/gemm_emu.h"
#include "tests/kernels/rounding_check.h"

/* A device copy of host bytes, and a host copy of device bytes. */
static void *to_dev(const void *host, size_t bytes) {
    void *d = G->alloc(bytes);
    G->upload(d, host, bytes);
    return d;
}

static void *to_host(const void *dev, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    G->download(h, dev, bytes);
    return h;
}

/* The device buffer's bytes equal want's; frees nothing. */
static void check_dev(const char *what, const void *dev, const void *want, size_t bytes) {
    void *got = to_host(dev, bytes);
    size_t first = bytes;
    for (size_t i = 0; i < bytes && first == bytes; i++)
        if (((const uint8_t *)got)[i] != ((const uint8_t *)want)[i]) first = i;
    if (first == bytes)
        report(1, "%s: bit-identical (%zu bytes)", what, bytes);
    else
        report(0, "%s: differs from the CPU backend from byte %zu of %zu", what, first, bytes);
    free(got);
}

/* ---- memory, copies, budget ---- */

static void test_memory(void) {
    uint64_t live0 = hfl_budget_live_bytes();
    static const size_t sizes[] = {0, 1, 63, 64, 65, 4096 + 3, (size_t)3 << 20};
    int aligned = 1;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = G->alloc(sizes[i]);
        aligned &= p != NULL && (uintptr_t)p % 256 == 0;
        G->free(p);
    }
    report(aligned && hfl_budget_live_bytes() == live0, "alloc/free: 256-byte aligned, budget back to %llu live bytes",
           (unsigned long long)live0);

    char err[HFL_ERR_LEN] = "";
    hfl_budget_set(live0 + ((uint64_t)1 << 20));
    void *p = G->try_alloc((size_t)2 << 20, err);
    report(!p && strstr(err, "cuda backend: allocating") && strstr(err, "memory budget") &&
               hfl_budget_live_bytes() == live0,
           "try_alloc over the budget refused: %s", err);
    hfl_budget_set(0);
    if (p) G->free(p);

    err[0] = 0;
    p = G->try_alloc((size_t)1 << 50, err); /* 1 PiB */
    report(!p && strstr(err, "cudaMalloc of 1125899906842624 bytes failed: out of memory (free ") &&
               hfl_budget_live_bytes() == live0,
           "try_alloc beyond the card refused: %s", err);
    if (p) G->free(p);

    uint64_t f = 0, t = 0;
    report(G->mem_info(&f, &t) == 0 && f > 0 && f <= t, "mem_info: %.2f of %.2f GiB free",
           f / 1073741824.0, t / 1073741824.0);

    enum { N = 12345 };
    float *host = inputs(1, N, WITH_NAN | WITH_INF);
    float *a = to_dev(host, sizeof(float) * N), *b = G->alloc(sizeof(float) * N);
    G->copy(b, a, sizeof(float) * N);
    check_dev("upload, copy, download", b, host, sizeof(float) * N);
    float *pinned = G->host_alloc(sizeof(float) * N);
    memcpy(pinned, host, sizeof(float) * N);
    G->upload(a, pinned, sizeof(float) * N);
    memset(pinned, 0xFF, sizeof(float) * N); /* upload from pinned memory must be done */
    check_dev("upload from pinned memory", a, host, sizeof(float) * N);
    G->host_free(pinned);
    float *want = malloc(sizeof(float) * N);
    C->fill(want, -0.0f, N);
    G->fill(b, -0.0f, N);
    check_dev("fill", b, want, sizeof(float) * N);
    G->free(a);
    G->free(b);
    free(host);
    free(want);
}

/* ---- elementwise ---- */

static size_t nbytes(hfl_precision t, size_t n) { return n * hfl_precision_bytes(t); }

/* Odd N, then even: a 2-byte type's kernels take the one-element path,
 * then PAIRS (two elements a thread, kernels/thread_hd.h). */
static void test_elementwise(void) {
    for (size_t N = 129 * 37; N >= 129 * 37 - 1; N--)
    for (hfl_precision t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
        char what[64];
        size_t bytes = nbytes(t, N);
        void *hx = inputs_of(t, 13, N, WITH_NAN | WITH_INF), *hg = inputs_of(t, 14, N, WITH_NAN);
        void *hw = malloc(bytes), *hdx = malloc(bytes);
        void *d_x = to_dev(hx, bytes), *d_y = G->alloc(bytes), *d_g = to_dev(hg, bytes);
        C->relu_fwd(t, hw, hx, N);
        G->relu_fwd(t, d_y, d_x, N);
        snprintf(what, sizeof what, "relu_fwd %s n %zu", lp_name(t), N);
        check_dev(what, d_y, hw, bytes);
        C->relu_bwd(t, hg, hg, hw, N); /* in place, as the layers do */
        G->relu_bwd(t, d_g, d_g, d_y, N);
        snprintf(what, sizeof what, "relu_bwd %s (in place) n %zu", lp_name(t), N);
        check_dev(what, d_g, hg, bytes);
        float *src = inputs(15, N, WITH_NAN | WITH_INF);
        for (size_t i = 0; i < N; i += 5) src[i] *= i % 2 ? 1e-6f : 7e4f; /* subnormal, overflow */
        float *d_src = to_dev(src, sizeof(float) * N);
        C->convert(t, hw, src, N);
        G->convert(t, d_y, d_src, N);
        snprintf(what, sizeof what, "convert %s n %zu", lp_name(t), N);
        check_dev(what, d_y, hw, bytes);
        free(hx), free(hg), free(hw), free(hdx), free(src);
        G->free(d_x), G->free(d_y), G->free(d_g), G->free(d_src);
    }
    /* views one element in: an even n, but only 2-byte aligned, so the
     * one-element kernels (hfl_cuda_pairs refuses the pairs) */
    for (hfl_precision t = HFL_PREC_BF16; t <= HFL_PREC_FP16; t++) {
        enum { M = 64 };
        char what[64];
        size_t bytes = nbytes(t, M + 1);
        void *hx = inputs_of(t, 16, M + 1, WITH_NAN), *hw = calloc(1, bytes);
        char *d_x = to_dev(hx, bytes), *d_y = to_dev(hw, bytes);
        C->relu_fwd(t, (char *)hw + 2, (char *)hx + 2, M);
        G->relu_fwd(t, d_y + 2, d_x + 2, M);
        snprintf(what, sizeof what, "relu_fwd %s on a view at an odd element", lp_name(t));
        check_dev(what, d_y, hw, bytes);
        free(hx), free(hw);
        G->free(d_x), G->free(d_y);
    }
}

/* ---- bias gradients ---- */

static void test_bias_grads(void) {
    static const int shapes[][2] = {{1, 1}, {128, 10}, {33, 65}, {7, 300}};
    for (int si = 0; si < 4; si++) {
        int rows = shapes[si][0], cols = shapes[si][1], cn = rows % 4 + 1, hw = 49 + 150 * si;
        size_t n = (size_t)rows * cols, cnum = (size_t)cn * cols * hw;
        float *db = inputs(21, cols, PLAIN), *d_db = to_dev(db, sizeof(float) * cols);
        for (hfl_precision t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
            char what[96];
            void *h = inputs_of(t, 23, n, PLAIN), *ch = inputs_of(t, 24, cnum, PLAIN);
            void *d_h = to_dev(h, nbytes(t, n)), *d_ch = to_dev(ch, nbytes(t, cnum));
            int acc = (int)t % 2 ^ si % 2; /* overwriting and accumulating both met, in every type */
            C->bias_grad(t, db, h, rows, cols, acc);
            G->bias_grad(t, d_db, d_h, rows, cols, acc);
            snprintf(what, sizeof what, "bias_grad %s %dx%d acc %d", lp_name(t), rows, cols, acc);
            check_dev(what, d_db, db, sizeof(float) * cols);
            C->channel_bias_grad(t, db, ch, cn, cols, hw, !acc);
            G->channel_bias_grad(t, d_db, d_ch, cn, cols, hw, !acc);
            snprintf(what, sizeof what, "channel_bias_grad %s n %d c %d hw %d acc %d", lp_name(t), cn,
                     cols, hw, !acc);
            check_dev(what, d_db, db, sizeof(float) * cols);
            free(h), free(ch);
            G->free(d_h), G->free(d_ch);
        }
        free(db);
        G->free(d_db);
    }
}

/* ---- SGD, unscale, the loss scaler ---- */

static void test_optimizer(void) {
    enum { N = 100003 };
    float *w = inputs(30, N, PLAIN), *v = inputs(31, N, PLAIN), *g = inputs(32, N, PLAIN);
    float *d_w = to_dev(w, sizeof(float) * N), *d_v = to_dev(v, sizeof(float) * N);
    float *d_g = to_dev(g, sizeof(float) * N);
    /* fp32: the masters are the weights */
    C->sgd_step(HFL_PREC_FP32, w, NULL, g, w, N, 0.05f, 0.0f, 1e-4f, NULL);
    G->sgd_step(HFL_PREC_FP32, d_w, NULL, d_g, d_w, N, 0.05f, 0.0f, 1e-4f, NULL);
    check_dev("sgd_step fp32 without momentum", d_w, w, sizeof(float) * N);
    C->sgd_step(HFL_PREC_FP32, w, v, g, w, N, 0.05f, 0.9f, 5e-4f, NULL);
    G->sgd_step(HFL_PREC_FP32, d_w, d_v, d_g, d_w, N, 0.05f, 0.9f, 5e-4f, NULL);
    check_dev("sgd_step fp32 with momentum: w", d_w, w, sizeof(float) * N);
    check_dev("sgd_step fp32 with momentum: v", d_v, v, sizeof(float) * N);
    C->prox_grad(g, w, v, N, 0.01f); /* FedProx: v stands in for the anchor */
    G->prox_grad(d_g, d_w, d_v, N, 0.01f);
    check_dev("prox_grad", d_g, g, sizeof(float) * N);

    hfl_step_scalars sc = {.loss_scale = 1024.0f, .finite = 1};
    hfl_step_scalars *d_sc = to_dev(&sc, sizeof sc);
    for (hfl_precision lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
        char what[64];
        uint16_t *hw = malloc(sizeof(uint16_t) * N);
        uint16_t *d_hw = G->alloc(sizeof(uint16_t) * N);
        sc.finite = 1;
        G->upload(d_sc, &sc, sizeof sc);
        C->sgd_step(lp, w, v, g, hw, N, 0.05f, 0.9f, 5e-4f, &sc);
        G->sgd_step(lp, d_w, d_v, d_g, d_hw, N, 0.05f, 0.9f, 5e-4f, d_sc);
        snprintf(what, sizeof what, "sgd_step %s: master", lp_name(lp));
        check_dev(what, d_w, w, sizeof(float) * N);
        snprintf(what, sizeof what, "sgd_step %s: 2-byte weights", lp_name(lp));
        check_dev(what, d_hw, hw, sizeof(uint16_t) * N);
        /* a non-finite step is skipped: nothing moves */
        sc.finite = 0;
        G->upload(d_sc, &sc, sizeof sc);
        G->sgd_step(lp, d_w, d_v, d_g, d_hw, N, 0.05f, 0.9f, 5e-4f, d_sc);
        snprintf(what, sizeof what, "sgd_step %s skipped when not finite", lp_name(lp));
        check_dev(what, d_w, w, sizeof(float) * N);
        check_dev(what, d_v, v, sizeof(float) * N);
        free(hw);
        G->free(d_hw);
    }
    for (int with_inf = 0; with_inf < 2; with_inf++) {
        float *u = inputs(33, N, with_inf ? WITH_INF : PLAIN);
        float *d_u = to_dev(u, sizeof(float) * N);
        hfl_step_scalars a = {.loss_scale = 32768.0f, .finite = 1 - with_inf}; /* stale flag */
        G->upload(d_sc, &a, sizeof a);
        C->unscale_grads(u, N, &a);
        G->unscale_grads(d_u, N, d_sc);
        check_dev(with_inf ? "unscale_grads with Inf: values" : "unscale_grads: values", d_u, u,
                  sizeof(float) * N);
        check_dev(with_inf ? "unscale_grads with Inf: scalars (finite 0)"
                           : "unscale_grads: scalars (finite 1)",
                  d_sc, &a, sizeof a);
        free(u);
        G->free(d_u);
    }

    hfl_step_scalars s = {.loss_scale = 65536.0f, .finite = 1, .clean_steps = 0};
    G->upload(d_sc, &s, sizeof s);
    int same = 1;
    for (int step = 0; step < 20; step++) {
        s.finite = step % 7 != 6;
        hfl_step_scalars back;
        G->download(&back, d_sc, sizeof back);
        back.finite = s.finite;
        G->upload(d_sc, &back, sizeof back);
        C->scaler_update(&s, 4);
        G->scaler_update(d_sc, 4);
        G->download(&back, d_sc, sizeof back);
        same &= memcmp(&back, &s, sizeof s) == 0;
    }
    report(same, "scaler_update: 20 steps with skips, scalars bit-identical (scale %g, skipped %lld)",
           s.loss_scale, (long long)s.skipped);
    G->free(d_sc);
    free(w), free(v), free(g);
    G->free(d_w), G->free(d_v), G->free(d_g);
}

/* ---- convolution and pooling ---- */

static const int geoms[][6] = {
    /* c, h, w, k, s, p */
    {1, 28, 28, 5, 1, 2}, {32, 14, 14, 5, 1, 2}, {2, 7, 6, 3, 2, 1}, {32, 28, 28, 2, 2, 0},
    {2, 4, 5, 4, 3, 3},   {3, 9, 5, 1, 2, 0},    {2, 9, 9, 3, 1, 1},
};
#define N_GEOMS (int)(sizeof geoms / sizeof geoms[0])

static void test_conv(void) {
    enum { SAMPLES = 5 };
    for (int gi = 0; gi < N_GEOMS; gi++) {
        const int *q = geoms[gi];
        hfl_window_geom g = hfl_window_geom_make(q[0], q[1], q[2], q[3], q[4], q[5]);
        size_t in_n = (size_t)SAMPLES * g.c * g.h * g.w;
        size_t col_n = (size_t)SAMPLES * g.c * g.k * g.k * g.ho * g.wo;
        size_t out_n = (size_t)SAMPLES * g.c * g.ho * g.wo;
        int pool = 2 * g.p <= g.k;
        float *cols = inputs(50 + gi, col_n, PLAIN), *d_cols = to_dev(cols, sizeof(float) * col_n);
        for (hfl_precision t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
            char what[96];
            void *hx = inputs_of(t, 70 + gi, in_n, WITH_NAN),
                 *hdy = inputs_of(t, 80 + gi, out_n, PLAIN);
            void *hcols = malloc(nbytes(t, col_n)), *hin = malloc(nbytes(t, in_n));
            void *hout = malloc(nbytes(t, out_n));
            void *d_hx = to_dev(hx, nbytes(t, in_n)), *d_hdy = to_dev(hdy, nbytes(t, out_n));
            void *d_hcols = G->alloc(nbytes(t, col_n)), *d_hin = G->alloc(nbytes(t, in_n));
            void *d_hout = G->alloc(nbytes(t, out_n));
            C->im2col(t, hcols, hx, SAMPLES, g);
            G->im2col(t, d_hcols, d_hx, SAMPLES, g);
            snprintf(what, sizeof what, "im2col %s c%d %dx%d k%d s%d p%d", lp_name(t), g.c, g.h,
                     g.w, g.k, g.s, g.p);
            check_dev(what, d_hcols, hcols, nbytes(t, col_n));
            C->col2im(t, hin, cols, SAMPLES, g);
            G->col2im(t, d_hin, d_cols, SAMPLES, g);
            snprintf(what, sizeof what, "col2im %s c%d %dx%d k%d s%d p%d", lp_name(t), g.c, g.h,
                     g.w, g.k, g.s, g.p);
            check_dev(what, d_hin, hin, nbytes(t, in_n));
            if (pool) {
                C->maxpool_fwd(t, hout, hx, SAMPLES, g);
                G->maxpool_fwd(t, d_hout, d_hx, SAMPLES, g);
                snprintf(what, sizeof what, "maxpool_fwd %s geometry %d", lp_name(t), gi);
                check_dev(what, d_hout, hout, nbytes(t, out_n));
                C->maxpool_bwd(t, hin, hdy, hx, SAMPLES, g);
                G->maxpool_bwd(t, d_hin, d_hdy, d_hx, SAMPLES, g);
                snprintf(what, sizeof what, "maxpool_bwd %s geometry %d", lp_name(t), gi);
                check_dev(what, d_hin, hin, nbytes(t, in_n));
            }
            free(hx), free(hdy), free(hcols), free(hin), free(hout);
            G->free(d_hx), G->free(d_hdy), G->free(d_hcols), G->free(d_hin), G->free(d_hout);
        }
        free(cols);
        G->free(d_cols);
    }
}

/* ---- GEMM ---- */

static void gemm_judge(const char *name, hfl_precision lp, unsigned mask, int ta, int tb, int m,
                       int n, int k, float alpha, const void *a, int lda, const void *b, int ldb,
                       long long sb, float beta, const void *c0, int ldc, long long sc, int count,
                       const void *bias, int axis);

/* One GEMM on both backends (lp = FP32: all operands fp32), judged output by output
 * (tests/kernels/rounding_check.h: one rounding, and how many differ from the
 * CPU's bits), the ldc padding untouched. count > 1 runs the strided batched
 * form instead: A shared (stride 0), B and C strided with a gap after each,
 * every product judged the same way and the gaps untouched. Prints one
 * "roundonce" line (scripts/gpu-check reads them). */
static void gemm_case_n(const char *name, hfl_precision lp, unsigned mask, int ta, int tb, int m,
                        int n, int k, float alpha, float beta, int axis, int count) {
    int sg = lp == HFL_PREC_FP32;
    if (sg) mask = HFL_GEMM_A_F32 | HFL_GEMM_B_F32 | HFL_GEMM_C_F32;
    int pad = 3, lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    size_t an = (size_t)(ta ? k : m) * lda, bn = (size_t)(tb ? n : k) * ldb, cn = (size_t)m * ldc;
    long long sb = count > 1 ? (long long)bn + 5 : 0, sc = count > 1 ? (long long)cn + 7 : 0;
    size_t btot = count > 1 ? (size_t)sb * count : bn, ctot = count > 1 ? (size_t)sc * count : cn;
    size_t ea = mask & HFL_GEMM_A_F32 ? 4 : 2, eb = mask & HFL_GEMM_B_F32 ? 4 : 2;
    size_t ec = mask & HFL_GEMM_C_F32 ? 4 : 2;
    void *a = ea == 4 ? (void *)inputs(90, an, PLAIN) : (void *)inputs_lp(lp, 90, an, PLAIN);
    void *b = eb == 4 ? (void *)inputs(91, btot, PLAIN) : (void *)inputs_lp(lp, 91, btot, PLAIN);
    void *c0 = ec == 4 ? (void *)inputs(92, ctot, PLAIN) : (void *)inputs_lp(lp, 92, ctot, PLAIN);
    void *bias =
        axis == HFL_BIAS_NONE ? NULL : inputs_of(lp, 93, axis == HFL_BIAS_ROW ? m : n, PLAIN);
    gemm_judge(name, lp, mask, ta, tb, m, n, k, alpha, a, lda, b, ldb, sb, beta, c0, ldc, sc, count,
               bias, axis);
    free(a), free(b), free(c0), free(bias);
}

/* Runs the GEMM (host operands a, b, c0, bias) on both backends and judges
 * the GPU's result; the CPU's gemm is the reference (rc_judge_gemm). */
static void gemm_judge(const char *name, hfl_precision lp, unsigned mask, int ta, int tb, int m,
                       int n, int k, float alpha, const void *a, int lda, const void *b, int ldb,
                       long long sb, float beta, const void *c0, int ldc, long long sc, int count,
                       const void *bias, int axis) {
    int sg = lp == HFL_PREC_FP32;
    size_t ea = mask & HFL_GEMM_A_F32 ? 4 : 2, eb = mask & HFL_GEMM_B_F32 ? 4 : 2;
    size_t ec = mask & HFL_GEMM_C_F32 ? 4 : 2;
    size_t an = (size_t)((ta ? k : m) - 1) * lda + (ta ? m : k);
    size_t bn = (size_t)((tb ? n : k) - 1) * ldb + (tb ? k : n) + (size_t)(count - 1) * sb;
    size_t cn = (size_t)m * ldc, ctot = cn + (size_t)(count - 1) * sc + (count > 1 ? (size_t)sc - cn : 0);
    void *d_a = to_dev(a, ea * an), *d_b = to_dev(b, eb * bn), *d_c = to_dev(c0, ec * ctot);
    void *d_bias =
        bias ? to_dev(bias, hfl_precision_bytes(lp) * (axis == HFL_BIAS_ROW ? m : n)) : NULL;
    /* the planned workspace a layer would pass: the tile path of a 2-byte C
     * with a bias and beta != 0 needs it (kernels/cuda/gemm.c) */
    size_t wsb = hfl_gemm_ws_bytes(lp, mask, m, n, k);
    void *d_ws = sg ? NULL : G->alloc(wsb + 1);
    if (count == 1)
        G->gemm(lp, mask, ta, tb, m, n, k, alpha, d_a, lda, d_b, ldb, beta, d_c, ldc, d_bias, axis,
                d_ws);
    else
        G->gemm_strided(lp, mask, ta, tb, m, n, k, alpha, d_a, lda, 0, d_b, ldb, sb, beta, d_c, ldc,
                        sc, count, d_bias, axis, d_ws);
    char *got = to_host(d_c, ec * ctot);
    rc_stats st = {0};
    int bad = 0;
    for (int q = 0; q < count; q++) {
        const char *bq = (const char *)b + (size_t)q * sb * eb;
        const char *c0q = (const char *)c0 + (size_t)q * sc * ec, *gq = got + (size_t)q * sc * ec;
        rc_judge_gemm(&st, C, lp, mask, ta, tb, m, n, k, alpha, a, lda, bq, ldb, beta, c0q, gq, ldc,
                      bias, axis);
        for (int i = 0; i < m; i++) /* the ldc padding */
            bad += memcmp(gq + ((size_t)i * ldc + n) * ec, c0q + ((size_t)i * ldc + n) * ec,
                          (size_t)(ldc - n) * ec) != 0;
        for (long long g = (long long)cn; count > 1 && g < sc; g++) /* the gap after C_q */
            bad += memcmp(gq + g * ec, c0q + g * ec, ec) != 0;
    }
    rc_finish(&st);
    int ok = bad == 0 && rc_one_rounding(&st) && (ec == 4 || rc_few_differ(&st));
    report(ok, "%s: %dx%dx%d ta %d tb %d alpha %g beta %g bias %d count %d: %zu outside one rounding, "
           "%zu of %zu differ (cap %.1f), worst %.3g %s, padding %d bytes touched",
           name, m, n, k, ta, tb, alpha, beta, axis, count, st.outside, st.differ, st.count, st.cap,
           st.worst, ec == 4 ? "delta" : "ulp", bad);
    printf("roundonce %s | %s | outside %zu | differ %zu | of %zu | cap %.1f | %s\n", name,
           sg ? "fp32" : ec == 4 ? "fp32 C" : lp_name(lp), st.outside, st.differ, st.count, st.cap,
           ok ? "pass" : "FAIL");
    free(got);
    G->free(d_a), G->free(d_b), G->free(d_c), G->free(d_bias), G->free(d_ws);
}

static void gemm_case(const char *name, hfl_precision lp, unsigned mask, int ta, int tb, int m,
                      int n, int k, float alpha, float beta, int axis) {
    gemm_case_n(name, lp, mask, ta, tb, m, n, k, alpha, beta, axis, 1);
}

/* The GEMMs hfl trains with (tests/kernels/gemm_shapes.h), inputs drawn as
 * training's, plus the cnn's dense layer at batch 128 on a GPU (a stand-in
 * leaves it out: 205M multiply-adds in emulation). */
static int standin;

static void test_training_gemms(hfl_precision lp) {
    gemm_shape extra = {"cnn fc1 forward b128", 0, 1, 128, 512, 3136, 0.0f, HFL_BIAS_COL, 1, 0.0f, 2.0f, 3136};
    for (size_t i = 0; i < GEMM_SHAPES + !standin; i++) {
        const gemm_shape *sh = i < GEMM_SHAPES ? &gemm_shapes[i] : &extra;
        int m = sh->m, n = sh->n, k = sh->k, count = sh->count;
        size_t bn = (size_t)k * n, cn = (size_t)m * n;
        float wb = 1.0f / sqrtf((float)sh->b_fanin);
        uint16_t *a = draw_lp(lp, 1, (size_t)m * k, sh->a_lo, sh->a_hi), *b = draw_lp(lp, 2, bn * count, -wb, wb);
        uint16_t *c0 = draw_lp(lp, 3, cn * count, -1.0f, 1.0f);
        uint16_t *bias = draw_lp(lp, 4, sh->axis == HFL_BIAS_ROW ? m : n, -wb, wb);
        char name[96];
        snprintf(name, sizeof name, "%s %s", sh->name, lp_name(lp));
        gemm_judge(name, lp, 0, sh->ta, sh->tb, m, n, k, 1.0f, a, sh->ta ? m : k, b, sh->tb ? k : n,
                   count > 1 ? (long long)bn : 0, sh->beta, c0, n, count > 1 ? (long long)cn : 0, count,
                   sh->axis == HFL_BIAS_NONE ? NULL : bias, sh->axis);
        free(a), free(b), free(c0), free(bias);
    }
}

static void test_gemm(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) gemm_case("sgemm", HFL_PREC_FP32, 0, ta, tb, 37, 29, 300, 0.75f, 0.5f, HFL_BIAS_NONE);
    gemm_case("sgemm", HFL_PREC_FP32, 0, 0, 1, 128, 10, 3136, 1.0f, 0.0f, HFL_BIAS_NONE);
    gemm_case("sgemm dense fwd with bias", HFL_PREC_FP32, 0, 0, 1, 128, 100, 784, 1.0f, 0.0f,
              HFL_BIAS_COL);
    gemm_case("sgemm residual with bias", HFL_PREC_FP32, 0, 0, 1, 64, 96, 128, 1.0f, 1.0f,
              HFL_BIAS_COL);
    /* conv's chunked forms (model/conv.c): forward and dcols over 5 samples */
    gemm_case_n("sgemm strided conv fwd", HFL_PREC_FP32, 0, 0, 0, 32, 784, 25, 1.0f, 0.0f,
                HFL_BIAS_ROW, 5);
    gemm_case_n("sgemm strided conv dcols", HFL_PREC_FP32, 0, 1, 0, 800, 196, 64, 1.0f, 0.0f, HFL_BIAS_NONE, 5);
    gemm_case_n("sgemm strided beta", HFL_PREC_FP32, 0, 1, 1, 37, 29, 300, 0.75f, 0.5f, HFL_BIAS_NONE, 3);
    for (hfl_precision lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
        char name[64];
        if (lp == HFL_PREC_BF16 && cc < 80) { /* the chooser offers bf16 from cc 8.0 */
            printf("skip bf16 GEMMs: cc %d.%d has no bf16 tensor cores\n", cc / 10, cc % 10);
            continue;
        }
        test_training_gemms(lp);
        snprintf(name, sizeof name, "gemm %s dense fwd", lp_name(lp));
        gemm_case(name, lp, 0, 0, 1, 128, 100, 784, 1.0f, 0.0f, HFL_BIAS_COL);
        snprintf(name, sizeof name, "gemm %s dense dW", lp_name(lp));
        gemm_case(name, lp, HFL_GEMM_C_F32, 1, 0, 100, 784, 128, 1.0f, 0.0f, HFL_BIAS_NONE);
        snprintf(name, sizeof name, "gemm %s dense dx", lp_name(lp));
        gemm_case(name, lp, 0, 0, 0, 128, 784, 100, 1.0f, 0.0f, HFL_BIAS_NONE);
        snprintf(name, sizeof name, "gemm %s conv fwd", lp_name(lp));
        gemm_case(name, lp, 0, 0, 0, 32, 784, 25, 1.0f, 0.0f, HFL_BIAS_ROW);
        snprintf(name, sizeof name, "gemm %s conv dW", lp_name(lp));
        gemm_case(name, lp, HFL_GEMM_C_F32, 0, 1, 64, 800, 196, 1.0f, 1.0f, HFL_BIAS_NONE);
        snprintf(name, sizeof name, "gemm %s conv dcols", lp_name(lp));
        gemm_case(name, lp, HFL_GEMM_C_F32, 1, 0, 800, 196, 64, 1.0f, 0.0f, HFL_BIAS_NONE);
        snprintf(name, sizeof name, "gemm strided %s conv fwd", lp_name(lp));
        gemm_case_n(name, lp, 0, 0, 0, 32, 784, 25, 1.0f, 0.0f, HFL_BIAS_ROW, 5);
        snprintf(name, sizeof name, "gemm strided %s conv dcols", lp_name(lp));
        gemm_case_n(name, lp, HFL_GEMM_C_F32, 1, 0, 800, 196, 64, 1.0f, 0.0f, HFL_BIAS_NONE, 5);
        snprintf(name, sizeof name, "gemm strided %s beta and bias (one at a time)", lp_name(lp));
        gemm_case_n(name, lp, 0, 1, 1, 37, 29, 300, 0.75f, 0.5f, HFL_BIAS_COL, 3);
        snprintf(name, sizeof name, "gemm %s beta and bias", lp_name(lp));
        gemm_case(name, lp, 0, 1, 1, 37, 29, 300, 0.75f, 0.5f, HFL_BIAS_COL);
        snprintf(name, sizeof name, "gemm %s fp32 C with bias", lp_name(lp));
        gemm_case(name, lp, HFL_GEMM_C_F32, 0, 0, 37, 29, 300, 1.0f, 0.25f, HFL_BIAS_ROW);
        snprintf(name, sizeof name, "gemm %s fp32 operands", lp_name(lp));
        gemm_case(name, lp, HFL_GEMM_A_F32 | HFL_GEMM_B_F32 | HFL_GEMM_C_F32, 0, 0, 37, 29, 300, 1.0f,
                  0.0f, HFL_BIAS_COL);
    }
    /* A planned workspace at a 64-byte (not 256-byte) offset, then cuBLAS's own again. */
    char *ws = G->alloc(G->blas_ws_bytes + 64);
    G->set_blas_workspace(ws + 64, G->blas_ws_bytes);
    gemm_case("sgemm in a planned workspace", HFL_PREC_FP32, 0, 0, 0, 64, 64, 512, 1.0f, 0.0f, HFL_BIAS_NONE);
    gemm_case("gemm fp16 in a planned workspace", HFL_PREC_FP16, 0, 0, 1, 64, 64, 512, 1.0f, 0.0f,
              HFL_BIAS_COL);
    G->set_blas_workspace(NULL, 0);
    G->free(ws);
    gemm_case("sgemm back on cuBLAS's workspace", HFL_PREC_FP32, 0, 1, 0, 64, 64, 512, 1.0f, 0.0f,
              HFL_BIAS_NONE);
}

/* ---- softmax cross-entropy ---- */

/* Distance in fp32 ulps (0 for equal values, huge across signs). */
static uint32_t ulps(float a, float b) {
    int32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    if (x < 0) x = (int32_t)0x80000000 - x;
    if (y < 0) y = (int32_t)0x80000000 - y;
    return x > y ? (uint32_t)(x - y) : (uint32_t)(y - x);
}

static void softmax_case(hfl_precision lp, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    int32_t *labels = malloc(sizeof(int32_t) * rows);
    for (int r = 0; r < rows; r++) labels[r] = (int32_t)(hfl_philox_u32(1, 2, 3, 4, 5, r) % cols);
    float *z = inputs(100, n, PLAIN);
    for (size_t i = 0; i < n; i += 4) z[i] *= 6.0f;
    hfl_step_scalars a = {.loss_sum = 10.5, .correct = 7, .rows = 9, .loss_scale = lp == HFL_PREC_FP16 ? 4096.0f : 1.0f};
    hfl_step_scalars *d_sc = to_dev(&a, sizeof a);
    int32_t *d_labels = to_dev(labels, sizeof(int32_t) * rows);
    float scale = a.loss_scale / rows;
    size_t bad = 0, bytes = nbytes(lp, n);
    void *hz = malloc(bytes), *want = malloc(bytes), *d_d = G->alloc(bytes);
    for (size_t i = 0; i < n; i++) hfl_st(lp, hz, i, z[i]);
    void *d_z = to_dev(hz, bytes);
    float *ws = malloc(sizeof(float) * 2 * cols);
    C->softmax_xent(lp, hz, labels, want, rows, cols, rows, &a, lp == HFL_PREC_FP32 ? NULL : ws);
    G->softmax_xent(lp, d_z, d_labels, d_d, rows, cols, rows, d_sc, NULL);
    void *got = to_host(d_d, bytes);
    double eps = lp == HFL_PREC_FP16 ? 1.0 / 1024 : 1.0 / 128;
    for (size_t i = 0; i < n; i++) {
        float gv = hfl_ld(lp, got, i), cv = hfl_ld(lp, want, i);
        if (lp == HFL_PREC_FP32)
            bad += !(ulps(gv, cv) <= 8 || fabsf(gv - cv) <= 8.0f * scale / 16777216.0f);
        else
            bad += !(fabs((double)gv - cv) <=
                     eps * fabs(cv) + 8.0 * scale / 16777216.0 + 1.0 / 16777216);
    }
    free(hz), free(want), free(ws);
    G->free(d_z), G->free(d_d);
    hfl_step_scalars b;
    G->download(&b, d_sc, sizeof b);
    int ok = bad == 0 && b.correct == a.correct && b.rows == a.rows &&
             fabs(b.loss_sum - a.loss_sum) <= 1e-6 * fabs(a.loss_sum);
    report(
        ok,
        "softmax_xent %s %dx%d: loss_sum %.9g vs %.9g, correct %lld vs %lld, %zu dlogits outside",
        lp_name(lp), rows, cols, b.loss_sum, a.loss_sum, (long long)b.correct, (long long)a.correct,
        bad);
    free(got), free(z), free(labels);
    G->free(d_sc), G->free(d_labels);
}

/* The warp's argmax on the device, on rows made to split it (NaN only in
 * column 0, where the CPU's scan keeps it; later NaNs skipped; -0 against
 * +0; ties within a lane and across lanes; the maximum in the last lane or
 * past column 32; a row of -inf): the hits must be the CPU's exactly, and
 * each row alone (one row a call, so a NaN row's loss cannot hide the
 * others') its loss within the device's exp/log. */
static void test_softmax_argmax(void) {
    enum { COLS = 70, ROWS = 9 };
    static const struct {
        int n, at[3];
        float v[3];
        int32_t label;
    } made[ROWS] = {
        {1, {0}, {NAN}, 0},          {2, {1, 33}, {NAN, 2.0f}, 33},  {3, {5, 37, 69}, {9.0f, 9.0f, 9.0f}, 5},
        {2, {37, 5}, {9.0f, 9.0f}, 5}, {2, {0, 32}, {-0.0f, 0.0f}, 0}, {2, {32, 1}, {0.0f, -0.0f}, 1},
        {1, {32}, {5.0f}, 32},       {2, {31, 63}, {7.0f, 7.5f}, 63}, {0, {0}, {0}, 0},
    };
    float *z = malloc(sizeof(float) * COLS), *d_z = G->alloc(sizeof(float) * COLS);
    int32_t *d_label = G->alloc(sizeof(int32_t));
    hfl_step_scalars *d_sc = G->alloc(sizeof(hfl_step_scalars));
    for (int k = 0; k < ROWS; k++) {
        for (int c = 0; c < COLS; c++) z[c] = k == ROWS - 1 ? -INFINITY : -1.0f - 0.01f * (float)(c % 17);
        for (int j = 0; j < made[k].n; j++) z[made[k].at[j]] = made[k].v[j];
        for (int32_t label = made[k].label; label <= made[k].label + 1; label++) { /* a hit and a miss */
            hfl_step_scalars a = {.loss_scale = 1.0f}, b;
            G->upload(d_z, z, sizeof(float) * COLS);
            G->upload(d_label, &label, sizeof label);
            G->upload(d_sc, &a, sizeof a);
            C->softmax_xent(HFL_PREC_FP32, z, &label, NULL, 1, COLS, 1, &a, NULL);
            G->softmax_xent(HFL_PREC_FP32, d_z, d_label, NULL, 1, COLS, 1, d_sc, NULL);
            G->download(&b, d_sc, sizeof b);
            int same_loss = isnan(a.loss_sum) ? isnan(b.loss_sum) : fabs(b.loss_sum - a.loss_sum) <= 1e-6 * fabs(a.loss_sum) + 1e-6;
            report(b.correct == a.correct && b.rows == 1 && same_loss,
                   "softmax_xent made row %d label %d: hit %lld vs the CPU's %lld, loss %.9g vs %.9g", k, label,
                   (long long)b.correct, (long long)a.correct, b.loss_sum, a.loss_sum);
        }
    }
    free(z);
    G->free(d_z), G->free(d_label), G->free(d_sc);
}

static void test_softmax(void) {
    for (hfl_precision lp = HFL_PREC_FP32; lp <= HFL_PREC_FP16; lp++) {
        softmax_case(lp, 1, 10);
        softmax_case(lp, 128, 10);
        softmax_case(lp, 1000, 10);
        softmax_case(lp, 3, 1000);
        softmax_case(lp, 1100, 300); /* a warp per row, 512 warps in 64 blocks: each warp
                                      * takes two or three rows, and each row stages its
                                      * exponentials in two chunks */
    }
    /* evaluation: dlogits NULL */
    enum { ROWS = 500, COLS = 10 };
    float *z = inputs(101, ROWS * COLS, PLAIN);
    int32_t labels[ROWS];
    for (int r = 0; r < ROWS; r++) labels[r] = r % COLS;
    hfl_step_scalars a = {.loss_scale = 1.0f};
    hfl_step_scalars *d_sc = to_dev(&a, sizeof a);
    float *d_z = to_dev(z, sizeof(float) * ROWS * COLS);
    int32_t *d_labels = to_dev(labels, sizeof labels);
    C->softmax_xent(HFL_PREC_FP32, z, labels, NULL, ROWS, COLS, ROWS, &a, NULL);
    G->softmax_xent(HFL_PREC_FP32, d_z, d_labels, NULL, ROWS, COLS, ROWS, d_sc, NULL);
    hfl_step_scalars b;
    G->download(&b, d_sc, sizeof b);
    report(b.correct == a.correct && b.rows == a.rows && fabs(b.loss_sum - a.loss_sum) <= 1e-6 * fabs(a.loss_sum),
           "softmax_xent without dlogits %dx%d: loss_sum %.9g vs %.9g", ROWS, COLS, b.loss_sum, a.loss_sum);
    free(z);
    G->free(d_sc), G->free(d_z), G->free(d_labels);
}

/* ---- the input pipeline ---- */

static void test_pipeline(void) {
    enum { STEPS = 9, XB = (1 << 20) + 12, YB = 512 };
    uint8_t *pinned[HFL_INPUT_SLOTS], *d_x[HFL_INPUT_SLOTS], *d_y[HFL_INPUT_SLOTS];
    for (int s = 0; s < HFL_INPUT_SLOTS; s++) {
        pinned[s] = G->host_alloc(XB + YB);
        d_x[s] = G->alloc(XB);
        d_y[s] = G->alloc(YB);
    }
    uint8_t *d_out = G->alloc((size_t)STEPS * (XB + YB));
    for (int step = 0; step < STEPS; step++) {
        int s = step % HFL_INPUT_SLOTS;
        G->stage_wait(s); /* the slot's previous copy has left pinned[s] */
        for (size_t i = 0; i < XB + YB; i++) pinned[s][i] = (uint8_t)(step * 131 + i * 7 + (i >> 9));
        G->prefetch(d_x[s], pinned[s], XB, s);
        G->prefetch(d_y[s], pinned[s] + XB, YB, s);
        G->await_prefetch(s);
        /* the "step": reads the slot's device buffers on the compute stream */
        G->copy(d_out + (size_t)step * (XB + YB), d_x[s], XB);
        G->copy(d_out + (size_t)step * (XB + YB) + XB, d_y[s], YB);
        G->release_input(s);
    }
    G->sync();
    uint8_t *got = to_host(d_out, (size_t)STEPS * (XB + YB));
    size_t bad = 0;
    for (int step = 0; step < STEPS; step++)
        for (size_t i = 0; i < XB + YB; i++)
            bad += got[(size_t)step * (XB + YB) + i] != (uint8_t)(step * 131 + i * 7 + (i >> 9));
    report(bad == 0, "input pipeline: %d steps over %d slots, %zu bytes each: %zu bytes wrong", STEPS,
           HFL_INPUT_SLOTS, (size_t)(XB + YB), bad);
    free(got);
    G->free(d_out);
    for (int s = 0; s < HFL_INPUT_SLOTS; s++) {
        G->host_free(pinned[s]);
        G->free(d_x[s]);
        G->free(d_y[s]);
    }
}

/* HFL_GPU_STANDIN=legal, split-k or pre-round: no GPU is asked; the GEMM
 * checks alone run with G the CPU backend whose 2-byte gemm is
 * tests/kernels/gemm_emu.h's emulation of that kind, so every CI build runs
 * this file's GEMM harness: with "legal" it must pass, with the other two it
 * must fail (tests/gpu/meson.build). */
static int run_standin(const char *kind) {
    int k = strcmp(kind, "legal") == 0 ? EMU_LEGAL : strcmp(kind, "split-k") == 0 ? EMU_SPLITK
            : strcmp(kind, "pre-round") == 0 ? EMU_PREROUND : -1;
    REQUIRE_MSG(k >= 0, "HFL_GPU_STANDIN=%s: expected legal, split-k or pre-round", kind);
    G = emu_backend(k, 2);
    C = hfl_backend_cpu();
    standin = 1;
    cc = 90;
    printf("stand-in: the CPU backend with the %s GEMM emulation\n", emu_names[k]);
    test_gemm();
    return check_exit_code("test_cuda_ops (stand-in)");
}

static const check_case cases[] = {
    {"memory", test_memory},
    {"elementwise", test_elementwise},
    {"bias_grads", test_bias_grads},
    {"optimizer", test_optimizer},
    {"conv", test_conv},
    {"gemm", test_gemm},
    {"softmax", test_softmax},
    {"softmax_argmax", test_softmax_argmax},
    {"pipeline", test_pipeline},
};

int main(int argc, char **argv) {
    hfl_device_info info;
    char reason[HFL_ERR_LEN] = "", err[HFL_ERR_LEN] = "";
    memset(&info, 0, sizeof info);
    const char *standin_kind = getenv("HFL_GPU_STANDIN");
    if (standin_kind) return run_standin(standin_kind);
    if (hfl_cuda_probe(&info, reason, sizeof reason) != 0) {
        printf("SKIP: %s\n", reason);
        return 77;
    }
    const char *tf32 = getenv("HFL_TF32");
    if (tf32 && strcmp(tf32, "1") == 0) {
        printf("SKIP: HFL_TF32=1 (the fp32 GEMM tolerances assume true fp32)\n");
        return 77;
    }
    G = hfl_backend_select("cuda", &info, NULL, err);
    REQUIRE_MSG(G != NULL, "a GPU is present (%s) but the CUDA backend is not: %s", info.name, err);
    C = hfl_backend_cpu();
    cc = 10 * info.cc_major + info.cc_minor;
    printf("GPU: %s, cc %d.%d; cuBLAS workspace %zu bytes\n", info.name, info.cc_major, info.cc_minor,
           G->blas_ws_bytes);
    int rc = check_run("test_cuda_ops", cases, CHECK_CASES(cases), argc, argv);
    G->sync();
    return rc;
}
