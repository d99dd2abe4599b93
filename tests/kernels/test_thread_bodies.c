/* test_thread_bodies.c: the CUDA kernels' thread bodies (kernels/thread_hd.h)
 * run on the CPU over every index and compared, bit for bit (memcmp), with
 * the CPU backend's op on the same inputs.
 *
 * This is where the GPU's indexing is tested on machines without a GPU: a
 * CUDA kernel is its thread body called once per index, so a body that
 * agrees here computes on the device what the CPU backend computes, given
 * the build's -fmad=false (tests/gpu/test_cuda_ops.c checks that on a GPU).
 * Inputs hold the awkward values: negative zero, ties (coarse values), NaN in
 * max pooling and softmax-free ops, Inf in unscale; geometries cover padding,
 * stride > 1, odd sizes, k = 1, several channels and several samples. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/geom.h"
#include "kernels/lm.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "kernels/thread_hd.h"
#include "tests/check.h"

#define TEST_INPUT_SEED 23
#define TEST_INPUT_STREAM 5
#include "tests/kernels/inputs.h"

/* One CHECK per comparison, and a line naming what differed. */
static void same(const char *what, const void *got, const void *want, size_t bytes) {
    int equal = memcmp(got, want, bytes) == 0;
    if (!equal) fprintf(stderr, "differs from the CPU backend: %s\n", what);
    CHECK(equal);
}

/* ---- geometries ---- */

static const int geoms[][6] = {
    /* c, h, w, k, s, p */
    {2, 5, 6, 3, 1, 1}, /* 'same' 3x3 */
    {3, 7, 7, 5, 1, 2}, /* 'same' 5x5 */
    {2, 7, 6, 3, 2, 1}, /* stride 2, odd height */
    {1, 6, 8, 2, 2, 0}, /* 2x2 pooling-like */
    {2, 4, 5, 4, 3, 3}, /* padding wider than half the window (convolution only) */
    {1, 1, 1, 1, 1, 0}, /* one pixel */
    {3, 9, 5, 1, 2, 0}, /* k = 1, stride 2 */
    {4, 8, 7, 3, 3, 1}, /* stride = k, odd width */
    {2, 9, 9, 3, 1, 0}, /* overlapping windows, no padding */
};
#define N_GEOMS (int)(sizeof geoms / sizeof geoms[0])
#define N_SAMPLES 3

static hfl_window_geom geom_at(int i) {
    const int *q = geoms[i];
    return hfl_window_geom_make(q[0], q[1], q[2], q[3], q[4], q[5]);
}

/* ---- elementwise ---- */

static void test_elementwise(const hfl_backend *be) {
    enum { ROWS = 13, COLS = 37, N = ROWS * COLS };
    float *x = inputs(1, N, WITH_NAN | WITH_INF), *bias = inputs(2, COLS, PLAIN);
    float *want = dup_bytes(x, sizeof(float) * N), *got = dup_bytes(x, sizeof(float) * N);

    be->fill(want, -0.0f, N);
    for (size_t i = 0; i < N; i++) hfl_thread_fill(i, got, -0.0f);
    same("fill", got, want, sizeof(float) * N);

    memcpy(want, x, sizeof(float) * N);
    memcpy(got, x, sizeof(float) * N);
    be->bias_add(want, bias, ROWS, COLS);
    for (size_t i = 0; i < N; i++) hfl_thread_bias_add(i, got, bias, COLS);
    same("bias_add", got, want, sizeof(float) * N);

    /* [n = 3, c = 5, hw = 31]: the first 465 of the 481 elements */
    enum { CN = 3, CC = 5, CHW = 31 };
    memcpy(want, x, sizeof(float) * N);
    memcpy(got, x, sizeof(float) * N);
    be->channel_bias_add(want, bias, CN, CC, CHW);
    for (size_t i = 0; i < (size_t)CN * CC * CHW; i++)
        hfl_thread_channel_bias_add(i, got, bias, CC, CHW);
    same("channel_bias_add", got, want, sizeof(float) * N);

    be->relu_fwd(want, x, N);
    for (size_t i = 0; i < N; i++) hfl_thread_relu_fwd(i, got, x);
    same("relu_fwd", got, want, sizeof(float) * N);

    float *dy = inputs(3, N, WITH_NAN), *y = dup_bytes(want, sizeof(float) * N);
    be->relu_bwd(want, dy, y, N);
    for (size_t i = 0; i < N; i++) hfl_thread_relu_bwd(i, got, dy, y);
    same("relu_bwd", got, want, sizeof(float) * N);
    /* dx may alias dy */
    float *alias_want = dup_bytes(dy, sizeof(float) * N), *alias_got = dup_bytes(dy, sizeof(float) * N);
    be->relu_bwd(alias_want, alias_want, y, N);
    for (size_t i = 0; i < N; i++) hfl_thread_relu_bwd(i, alias_got, alias_got, y);
    same("relu_bwd in place", alias_got, alias_want, sizeof(float) * N);

    for (int lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
        char what[64];
        uint16_t *hx = inputs_lp(lp, 4, N, WITH_NAN | WITH_INF), *hdy = inputs_lp(lp, 5, N, WITH_NAN);
        uint16_t *hw = malloc(sizeof(uint16_t) * N), *hg = malloc(sizeof(uint16_t) * N);
        be->relu_fwd_lp(lp, hw, hx, N);
        for (size_t i = 0; i < N; i++) hfl_thread_relu_fwd_lp(i, lp, hg, hx);
        snprintf(what, sizeof what, "relu_fwd_lp %s", lp_name(lp));
        same(what, hg, hw, sizeof(uint16_t) * N);
        uint16_t *hy = dup_bytes(hw, sizeof(uint16_t) * N);
        be->relu_bwd_lp(lp, hw, hdy, hy, N);
        for (size_t i = 0; i < N; i++) hfl_thread_relu_bwd_lp(i, lp, hg, hdy, hy);
        snprintf(what, sizeof what, "relu_bwd_lp %s", lp_name(lp));
        same(what, hg, hw, sizeof(uint16_t) * N);

        /* round_lp of values that land on ties, in the subnormals and past the
         * largest finite value, as well as the specials. */
        float *src = inputs(6, N, WITH_NAN | WITH_INF);
        for (size_t i = 0; i < N; i += 5) src[i] *= i % 2 ? 1e-6f : 7e4f;
        for (size_t i = 1; i < N; i += 9) /* halfway between two 2-byte neighbours */
            src[i] = hfl_op_widen(lp, (uint16_t)(0x3C00 + i)) +
                     (hfl_op_widen(lp, (uint16_t)(0x3C01 + i)) - hfl_op_widen(lp, (uint16_t)(0x3C00 + i))) * 0.5f;
        be->round_lp(lp, hw, src, N);
        for (size_t i = 0; i < N; i++) hfl_thread_round_lp(i, lp, hg, src);
        snprintf(what, sizeof what, "round_lp %s", lp_name(lp));
        same(what, hg, hw, sizeof(uint16_t) * N);

        /* widen: exact, so round_lp of every widened pattern gives it back
         * (a NaN stays a NaN of the same sign). */
        uint16_t *all = malloc(sizeof(uint16_t) * 65536), *back = malloc(sizeof(uint16_t) * 65536);
        float *wide = malloc(sizeof(float) * 65536);
        for (size_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
        for (size_t i = 0; i < 65536; i++) hfl_thread_widen(i, lp, wide, all);
        be->round_lp(lp, back, wide, 65536);
        int bad = 0;
        for (size_t i = 0; i < 65536; i++) {
            float v = wide[i];
            bad += v == v ? back[i] != all[i] : (back[i] & 0x8000) != (all[i] & 0x8000);
        }
        snprintf(what, sizeof what, "widen %s round trip", lp_name(lp));
        if (bad) fprintf(stderr, "%s: %d patterns differ\n", what, bad);
        CHECK(bad == 0);
        free(all), free(back), free(wide), free(src);
        free(hx), free(hdy), free(hw), free(hg), free(hy);
    }
    free(x), free(bias), free(want), free(got), free(dy), free(y), free(alias_want), free(alias_got);
    printf("elementwise: fill, bias_add, channel_bias_add, relu fwd/bwd (fp32, bf16, fp16), round_lp, widen\n");
}

/* ---- SGD, unscale, scaler ---- */

static void test_sgd(const hfl_backend *be) {
    enum { N = 1001 };
    static const float moms[] = {0.0f, 0.9f}, wds[] = {0.0f, 5e-4f};
    for (int mi = 0; mi < 2; mi++)
        for (int wi = 0; wi < 2; wi++) {
            float mom = moms[mi], wd = wds[wi], lr = 0.0375f;
            float *w0 = inputs(10, N, PLAIN), *g = inputs(11, N, PLAIN), *v0 = inputs(12, N, PLAIN);
            float *ww = dup_bytes(w0, sizeof(float) * N), *wg = dup_bytes(w0, sizeof(float) * N);
            float *vw = dup_bytes(v0, sizeof(float) * N), *vg = dup_bytes(v0, sizeof(float) * N);
            char what[64];
            /* Without momentum v is unused and may be NULL. */
            be->sgd_step(ww, mom != 0.0f ? vw : NULL, g, N, lr, mom, wd);
            for (size_t i = 0; i < N; i++)
                hfl_thread_sgd_step(i, wg, mom != 0.0f ? vg : NULL, g, lr, mom, wd);
            snprintf(what, sizeof what, "sgd_step momentum %g wd %g", mom, wd);
            same(what, wg, ww, sizeof(float) * N);
            same(what, vg, vw, sizeof(float) * N);
            for (int lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
                uint16_t hw[N], hg[N];
                memcpy(ww, w0, sizeof(float) * N);
                memcpy(wg, w0, sizeof(float) * N);
                memcpy(vw, v0, sizeof(float) * N);
                memcpy(vg, v0, sizeof(float) * N);
                hfl_step_scalars sc = {.loss_scale = 1.0f, .finite = 1};
                be->sgd_step_lp(lp, ww, vw, g, hw, N, lr, mom, wd, (mi + wi) % 2 ? &sc : NULL);
                for (size_t i = 0; i < N; i++) hfl_thread_sgd_step_lp(i, lp, wg, vg, g, hg, lr, mom, wd);
                snprintf(what, sizeof what, "sgd_step_lp %s momentum %g wd %g", lp_name(lp), mom, wd);
                same(what, wg, ww, sizeof(float) * N);
                same(what, vg, vw, sizeof(float) * N);
                same(what, hg, hw, sizeof(uint16_t) * N);
            }
            free(w0), free(g), free(v0), free(ww), free(wg), free(vw), free(vg);
        }
    float *g = inputs(13, N, PLAIN), *w = inputs(14, N, PLAIN), *a = inputs(15, N, PLAIN);
    float *gw = dup_bytes(g, sizeof(float) * N), *gg = dup_bytes(g, sizeof(float) * N);
    be->prox_grad(gw, w, a, N, 0.01f);
    for (size_t i = 0; i < N; i++) hfl_thread_prox_grad(i, gg, w, a, 0.01f);
    same("prox_grad mu 0.01", gg, gw, sizeof(float) * N);
    free(g), free(w), free(a), free(gw), free(gg);
    printf("sgd: sgd_step and sgd_step_lp (bf16, fp16), momentum 0/0.9, wd 0/5e-4; prox_grad\n");
}

static void test_unscale(const hfl_backend *be) {
    enum { N = 777 };
    static const float scales[] = {65536.0f, 1.0f, 3.0f, 1e-30f};
    for (int with_inf = 0; with_inf < 2; with_inf++)
        for (int si = 0; si < 4; si++) {
            float *g0 = inputs(20, N, with_inf ? WITH_INF : PLAIN);
            if (si == 3) g0[N / 2] = 1e10f; /* finite input, Inf once unscaled by 1e30 */
            float *gw = dup_bytes(g0, sizeof(float) * N), *gg = dup_bytes(g0, sizeof(float) * N);
            hfl_step_scalars sc = {.loss_scale = scales[si], .finite = 7};
            be->unscale_grads(gw, N, &sc);
            float inv = 1.0f / scales[si];
            int finite = 1;
            for (size_t i = 0; i < N; i++) finite &= hfl_thread_unscale(i, gg, inv);
            char what[64];
            snprintf(what, sizeof what, "unscale_grads scale %g%s", scales[si], with_inf ? " with Inf" : "");
            same(what, gg, gw, sizeof(float) * N);
            CHECK(finite == sc.finite);
            CHECK(finite == (!with_inf && si != 3));
            free(g0), free(gw), free(gg);
        }
    /* n = 0: finite. */
    hfl_step_scalars sc = {.loss_scale = 2.0f, .finite = 0};
    be->unscale_grads(NULL, 0, &sc);
    CHECK(sc.finite == 1);
    /* scaler_update is hfl_op_scaler_update on both backends (one GPU thread). */
    hfl_step_scalars a = {.loss_scale = 1024.0f, .finite = 1, .clean_steps = 2};
    hfl_step_scalars b = a;
    for (int step = 0; step < 9; step++) {
        a.finite = b.finite = step % 4 != 3;
        be->scaler_update(&a, 3);
        hfl_op_scaler_update(&b, 3);
        CHECK(memcmp(&a, &b, sizeof a) == 0);
    }
    printf("unscale: values and finite flag (with Inf, overflow on unscaling), n = 0, scaler_update\n");
}

/* ---- AdamW's step count on the device ---- */

/* What the CUDA backend runs for adamw_step(_lp) with a.sc (cuda/lm.cu):
 * k_adamw_count's one thread (the count, or nothing for a skipped step),
 * then the update kernel, which returns at once for a skipped step, else
 * has thread 0 of each block turn sc's powers into the bias corrections
 * and runs the element bodies. */
static void adamw_as_kernels(hfl_precision prec, float *w, float *m, float *v, const float *g,
                             uint16_t *hw, size_t n, hfl_adamw_args a,
                             const hfl_step_scalars *skip_if_nonfinite) {
    hfl_lm_adamw_count(a.sc, a.beta1, a.beta2, skip_if_nonfinite);
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return;
    hfl_lm_adamw_bias(a.sc, &a);
    for (size_t i = 0; i < n; i++) {
        if (prec == HFL_PREC_FP32) hfl_lm_thread_adamw(i, w, m, v, g, a);
        else hfl_lm_thread_adamw_lp(i, prec, w, m, v, g, hw, a);
    }
}

/* Six steps in each precision (fp16's third one skipped) through the CPU
 * backend's op and through the kernels' sequence: weights, moments, working
 * copy and the whole scalars block equal after every step. The count then
 * leaves out the skipped step, and hfl_adamw_make at that count gives the
 * same bias corrections, so the op's by-value form (what test_lm_ops checks
 * against torch) and the trainer's device form agree bit for bit. */
static void test_adamw_count(const hfl_backend *be) {
    enum { N = 600, STEPS = 6 };
    for (int prec = HFL_PREC_FP32; prec <= HFL_PREC_FP16; prec++) {
        float *w[2], *m[2], *v[2];
        uint16_t hw[2][N];
        hfl_step_scalars sc[2];
        for (int k = 0; k < 2; k++) {
            w[k] = inputs(30, N, PLAIN), m[k] = inputs(31, N, PLAIN), v[k] = inputs(32, N, PLAIN);
            for (size_t i = 0; i < N; i++) v[k][i] = fabsf(v[k][i]) * 0.01f;
            memset(hw[k], 0, sizeof hw[k]);
            sc[k] = (hfl_step_scalars){.loss_scale = 1.0f, .finite = 1, .adam_steps = 0,
                                       .adam_beta1_pow = 1.0, .adam_beta2_pow = 1.0};
        }
        int fp16 = prec == HFL_PREC_FP16, counted = 0;
        for (int step = 0; step < STEPS; step++) {
            float *g = inputs(33 + (uint32_t)step, N, PLAIN);
            sc[0].finite = sc[1].finite = !(fp16 && step == 2);
            counted += sc[0].finite;
            hfl_adamw_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                .wd = 0.1f};
            a.sc = &sc[0];
            if (prec == HFL_PREC_FP32) be->lm->adamw_step(w[0], m[0], v[0], g, N, a);
            else be->lm->adamw_step_lp(prec, w[0], m[0], v[0], g, hw[0], N, a, fp16 ? &sc[0] : NULL);
            a.sc = &sc[1];
            adamw_as_kernels(prec, w[1], m[1], v[1], g, hw[1], N, a, fp16 ? &sc[1] : NULL);
            char what[64];
            snprintf(what, sizeof what, "adamw_step with device scalars, %s step %d",
                     prec == HFL_PREC_FP32 ? "fp32" : lp_name(prec), step + 1);
            same(what, w[1], w[0], sizeof(float) * N);
            same(what, m[1], m[0], sizeof(float) * N);
            same(what, v[1], v[0], sizeof(float) * N);
            same(what, hw[1], hw[0], sizeof hw[0]);
            same(what, &sc[1], &sc[0], sizeof sc[0]);
            free(g);
        }
        CHECK(sc[0].adam_steps == counted && counted == (fp16 ? STEPS - 1 : STEPS));
        hfl_adamw_args from_sc = {.lr = 1e-2f}, made = hfl_adamw_make(1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, counted);
        hfl_lm_adamw_bias(&sc[0], &from_sc);
        same("hfl_adamw_make's step_size", &made.step_size, &from_sc.step_size, sizeof(float));
        same("hfl_adamw_make's bc2_sqrt", &made.bc2_sqrt, &from_sc.bc2_sqrt, sizeof(float));
        for (int k = 0; k < 2; k++) free(w[k]), free(m[k]), free(v[k]);
    }
    printf("adamw: step count and bias corrections in the step scalars (fp32, bf16, fp16 with a "
           "skipped step), as the kernels run them and as hfl_adamw_make gives them\n");
}

/* The bias corrections against torch's formula with libm's pow in double
 * (an oracle outside the bodies), 20000 steps for three beta pairs. The
 * powers by multiplication leave 1 - beta^t within u b / (1 - b) relative
 * (lm_hd.h: 1.1e-12 at b = 0.9999), so an fp32 result can differ from pow's
 * only where the exact value lies that close to a midpoint between two fp32
 * values (spacing 2^-23 relative): some 2e-5 of steps at b = 0.9999, none
 * seen in 200000. Allowed: one step in 1000, by one ulp. Powers kept in
 * fp32 miss at 15% of steps (beta2 0.999), by many ulps. */
static void test_adamw_bias_vs_pow(void) {
    static const float betas[][2] = {{0.9f, 0.95f}, {0.9f, 0.999f}, {0.5f, 0.9999f}};
    enum { STEPS = 20000 };
    const float lr = 3e-4f;
    for (int k = 0; k < 3; k++) {
        float b1 = betas[k][0], b2 = betas[k][1];
        hfl_step_scalars sc = {.finite = 1, .adam_beta1_pow = 1.0, .adam_beta2_pow = 1.0};
        int off = 0, far = 0;
        for (int t = 1; t <= STEPS; t++) {
            hfl_lm_adamw_count(&sc, b1, b2, NULL);
            hfl_adamw_args a = {.lr = lr};
            hfl_lm_adamw_bias(&sc, &a);
            float want[2] = {(float)(lr / (1.0 - pow(b1, t))), (float)sqrt(1.0 - pow(b2, t))};
            float got[2] = {a.step_size, a.bc2_sqrt};
            for (int j = 0; j < 2; j++) {
                off += got[j] != want[j];
                far += got[j] != want[j] && nextafterf(got[j], want[j]) != want[j];
            }
        }
        CHECK_MSG(off <= STEPS / 1000 && far == 0,
                  "beta1 %g beta2 %g: %d of %d bias corrections differ from pow's, %d by more "
                  "than one ulp", b1, b2, off, 2 * STEPS, far);
    }
    printf("adamw: bias corrections from the powers against pow(), 3 beta pairs x %d steps\n", STEPS);
}

/* ---- bias gradients ---- */

static void test_bias_grads(const hfl_backend *be) {
    static const int shapes[][2] = {{1, 1}, {7, 3}, {128, 10}, {33, 65}};
    for (int si = 0; si < 4; si++) {
        int rows = shapes[si][0], cols = shapes[si][1];
        size_t n = (size_t)rows * cols;
        float *dy = inputs(30, n, COARSE), *db0 = inputs(31, (size_t)cols, PLAIN);
        for (size_t i = 0; i < n; i += 3) dy[i] *= 0.1f; /* unequal magnitudes: order matters */
        float *dw = dup_bytes(db0, sizeof(float) * cols), *dg = dup_bytes(db0, sizeof(float) * cols);
        char what[64];
        be->bias_grad(dw, dy, rows, cols);
        for (size_t c = 0; c < (size_t)cols; c++) hfl_thread_bias_grad(c, dg, dy, rows, cols);
        snprintf(what, sizeof what, "bias_grad %dx%d", rows, cols);
        same(what, dg, dw, sizeof(float) * cols);
        for (int lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
            uint16_t *hdy = inputs_lp(lp, 32, n, PLAIN);
            memcpy(dw, db0, sizeof(float) * cols);
            memcpy(dg, db0, sizeof(float) * cols);
            be->bias_grad_lp(lp, dw, hdy, rows, cols);
            for (size_t c = 0; c < (size_t)cols; c++) hfl_thread_bias_grad_lp(c, lp, dg, hdy, rows, cols);
            snprintf(what, sizeof what, "bias_grad_lp %s %dx%d", lp_name(lp), rows, cols);
            same(what, dg, dw, sizeof(float) * cols);
            free(hdy);
        }
        /* channel form: [n = rows % 4 + 1, c = cols, hw = 7] */
        int cn = rows % 4 + 1, hw = 7;
        size_t cnum = (size_t)cn * cols * hw;
        float *cdy = inputs(33, cnum, PLAIN);
        memcpy(dw, db0, sizeof(float) * cols);
        memcpy(dg, db0, sizeof(float) * cols);
        be->channel_bias_grad(dw, cdy, cn, cols, hw);
        for (size_t ch = 0; ch < (size_t)cols; ch++) hfl_thread_channel_bias_grad(ch, dg, cdy, cn, cols, hw);
        snprintf(what, sizeof what, "channel_bias_grad n %d c %d hw %d", cn, cols, hw);
        same(what, dg, dw, sizeof(float) * cols);
        for (int lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
            uint16_t *hdy = inputs_lp(lp, 34, cnum, PLAIN);
            memcpy(dw, db0, sizeof(float) * cols);
            memcpy(dg, db0, sizeof(float) * cols);
            be->channel_bias_grad_lp(lp, dw, hdy, cn, cols, hw);
            for (size_t ch = 0; ch < (size_t)cols; ch++)
                hfl_thread_channel_bias_grad_lp(ch, lp, dg, hdy, cn, cols, hw);
            snprintf(what, sizeof what, "channel_bias_grad_lp %s", lp_name(lp));
            same(what, dg, dw, sizeof(float) * cols);
            free(hdy);
        }
        free(dy), free(db0), free(dw), free(dg), free(cdy);
    }
    printf("bias grads: bias_grad, channel_bias_grad and their bf16/fp16 forms, 4 shapes\n");
}

/* ---- convolution and pooling ---- */

static void test_conv(const hfl_backend *be) {
    int n = N_SAMPLES;
    for (int gi = 0; gi < N_GEOMS; gi++) {
        hfl_window_geom g = geom_at(gi);
        size_t in_n = (size_t)n * g.c * g.h * g.w, col_n = (size_t)n * g.c * g.k * g.k * g.ho * g.wo;
        char what[96];
        float *x = inputs(40 + gi, in_n, WITH_NAN | WITH_INF);
        float *cw = malloc(sizeof(float) * col_n), *cg = malloc(sizeof(float) * col_n);
        be->im2col(cw, x, n, g);
        for (size_t i = 0; i < col_n; i++) hfl_thread_im2col(i, cg, x, g);
        snprintf(what, sizeof what, "im2col geometry %d", gi);
        same(what, cg, cw, sizeof(float) * col_n);

        float *cols = inputs(60 + gi, col_n, PLAIN);
        float *dw = malloc(sizeof(float) * in_n), *dg = malloc(sizeof(float) * in_n);
        be->col2im(dw, cols, n, g);
        for (size_t i = 0; i < in_n; i++) hfl_thread_col2im(i, dg, cols, g);
        snprintf(what, sizeof what, "col2im geometry %d", gi);
        same(what, dg, dw, sizeof(float) * in_n);

        for (int lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
            uint16_t *hx = inputs_lp(lp, 80 + gi, in_n, WITH_NAN | WITH_INF);
            uint16_t *hcw = malloc(sizeof(uint16_t) * col_n), *hcg = malloc(sizeof(uint16_t) * col_n);
            be->im2col_lp(lp, hcw, hx, n, g);
            for (size_t i = 0; i < col_n; i++) hfl_thread_im2col_lp(i, hcg, hx, g);
            snprintf(what, sizeof what, "im2col_lp %s geometry %d", lp_name(lp), gi);
            same(what, hcg, hcw, sizeof(uint16_t) * col_n);
            uint16_t *hdw = malloc(sizeof(uint16_t) * in_n), *hdg = malloc(sizeof(uint16_t) * in_n);
            be->col2im_lp(lp, hdw, cols, n, g);
            for (size_t i = 0; i < in_n; i++) hfl_thread_col2im_lp(i, lp, hdg, cols, g);
            snprintf(what, sizeof what, "col2im_lp %s geometry %d", lp_name(lp), gi);
            same(what, hdg, hdw, sizeof(uint16_t) * in_n);
            free(hx), free(hcw), free(hcg), free(hdw), free(hdg);
        }
        free(x), free(cw), free(cg), free(cols), free(dw), free(dg);
    }
    printf("conv: im2col, col2im and their bf16/fp16 forms, %d geometries x %d samples\n", N_GEOMS, n);
}

static void test_pool(const hfl_backend *be) {
    int n = N_SAMPLES, tested = 0;
    for (int gi = 0; gi < N_GEOMS; gi++) {
        hfl_window_geom g = geom_at(gi);
        if (2 * g.p > g.k) continue; /* pooling keeps p <= k/2 */
        tested++;
        size_t in_n = (size_t)n * g.c * g.h * g.w, out_n = (size_t)n * g.c * g.ho * g.wo;
        char what[96];
        for (int coarse = 0; coarse < 2; coarse++) {
            float *x = inputs(100 + gi, in_n, WITH_NAN | (coarse ? COARSE : 0));
            float *dy = inputs(120 + gi, out_n, PLAIN);
            float *yw = malloc(sizeof(float) * out_n), *yg = malloc(sizeof(float) * out_n);
            be->maxpool_fwd(yw, x, n, g);
            for (size_t i = 0; i < out_n; i++) hfl_thread_maxpool_fwd(i, yg, x, g);
            snprintf(what, sizeof what, "maxpool_fwd geometry %d%s", gi, coarse ? " with ties" : "");
            same(what, yg, yw, sizeof(float) * out_n);
            float *dw = malloc(sizeof(float) * in_n), *dg = malloc(sizeof(float) * in_n);
            be->maxpool_bwd(dw, dy, x, n, g);
            for (size_t i = 0; i < in_n; i++) hfl_thread_maxpool_bwd(i, dg, dy, x, g);
            snprintf(what, sizeof what, "maxpool_bwd geometry %d%s", gi, coarse ? " with ties" : "");
            same(what, dg, dw, sizeof(float) * in_n);
            for (int lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
                uint16_t *hx = inputs_lp(lp, 140 + gi, in_n, WITH_NAN | (coarse ? COARSE : 0));
                uint16_t *hdy = inputs_lp(lp, 160 + gi, out_n, PLAIN);
                uint16_t *hyw = malloc(sizeof(uint16_t) * out_n), *hyg = malloc(sizeof(uint16_t) * out_n);
                be->maxpool_fwd_lp(lp, hyw, hx, n, g);
                for (size_t i = 0; i < out_n; i++) hfl_thread_maxpool_fwd_lp(i, lp, hyg, hx, g);
                snprintf(what, sizeof what, "maxpool_fwd_lp %s geometry %d", lp_name(lp), gi);
                same(what, hyg, hyw, sizeof(uint16_t) * out_n);
                uint16_t *hdw = malloc(sizeof(uint16_t) * in_n), *hdg = malloc(sizeof(uint16_t) * in_n);
                be->maxpool_bwd_lp(lp, hdw, hdy, hx, n, g);
                for (size_t i = 0; i < in_n; i++) hfl_thread_maxpool_bwd_lp(i, lp, hdg, hdy, hx, g);
                snprintf(what, sizeof what, "maxpool_bwd_lp %s geometry %d", lp_name(lp), gi);
                same(what, hdg, hdw, sizeof(uint16_t) * in_n);
                free(hx), free(hdy), free(hyw), free(hyg), free(hdw), free(hdg);
            }
            free(x), free(dy), free(yw), free(yg), free(dw), free(dg);
        }
    }
    printf("pool: maxpool fwd/bwd and their bf16/fp16 forms, %d geometries, NaN and ties\n", tested);
}

/* ---- softmax cross-entropy ---- */

/* What the CUDA loss kernel computes, with its block reduction replaced by
 * the CPU's row order (the one place GPU and CPU differ by design; the gpu
 * suite checks that within a tolerance). */
static void softmax_rows(hfl_precision lp, const void *logits, const int32_t *labels,
                         void *dlogits, int rows, int cols, hfl_step_scalars *sc) {
    double total = 0.0;
    int64_t correct = 0;
    for (size_t r = 0; r < (size_t)rows; r++) {
        int ok;
        if (lp == HFL_PREC_FP32)
            total += hfl_thread_softmax_xent(r, logits, labels, dlogits, cols, 1.0f / (float)rows, &ok);
        else
            total += hfl_thread_softmax_xent_lp(r, lp, logits, labels, dlogits, cols,
                                                sc->loss_scale / (float)rows, &ok);
        correct += ok;
    }
    sc->loss_sum += total;
    sc->correct += correct;
    sc->rows += rows;
}

static void test_softmax(const hfl_backend *be) {
    static const int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {128, 10}, {5, 1000}};
    for (int si = 0; si < 5; si++) {
        int rows = shapes[si][0], cols = shapes[si][1];
        size_t n = (size_t)rows * cols;
        int32_t *labels = malloc(sizeof(int32_t) * rows);
        for (int r = 0; r < rows; r++) labels[r] = (int32_t)(hfl_philox_u32(1, 2, 3, 4, 5, r) % cols);
        char what[96];
        for (int coarse = 0; coarse < 2; coarse++) {
            float *z = inputs(200 + si, n, coarse ? COARSE : PLAIN);
            for (size_t i = 0; i < n; i += 4) z[i] *= 8.0f; /* some large logits */
            float *dw = malloc(sizeof(float) * n), *dg = malloc(sizeof(float) * n);
            hfl_step_scalars a = {.loss_sum = 1.25, .correct = 3, .rows = 4, .loss_scale = 1.0f};
            hfl_step_scalars b = a;
            be->softmax_xent(z, labels, dw, rows, cols, rows, &a);
            softmax_rows(HFL_PREC_FP32, z, labels, dg, rows, cols, &b);
            snprintf(what, sizeof what, "softmax_xent %dx%d%s", rows, cols, coarse ? " ties" : "");
            same(what, dg, dw, sizeof(float) * n);
            same(what, &b, &a, sizeof a);
            be->softmax_xent(z, labels, NULL, rows, cols, rows, &a); /* no gradient asked */
            softmax_rows(HFL_PREC_FP32, z, labels, NULL, rows, cols, &b);
            same(what, &b, &a, sizeof a);
            for (int lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
                uint16_t *hz = inputs_lp(lp, 220 + si, n, coarse ? COARSE : PLAIN);
                uint16_t *hdw = malloc(sizeof(uint16_t) * n), *hdg = malloc(sizeof(uint16_t) * n);
                float *ws = malloc(sizeof(float) * 2 * cols);
                hfl_step_scalars c = {.loss_scale = lp == HFL_PREC_FP16 ? 32768.0f : 1.0f};
                hfl_step_scalars d = c;
                be->softmax_xent_lp(lp, hz, labels, hdw, rows, cols, rows, &c, ws);
                softmax_rows(lp, hz, labels, hdg, rows, cols, &d);
                snprintf(what, sizeof what, "softmax_xent_lp %s %dx%d%s", lp_name(lp), rows, cols,
                         coarse ? " ties" : "");
                same(what, hdg, hdw, sizeof(uint16_t) * n);
                same(what, &d, &c, sizeof c);
                free(hz), free(hdw), free(hdg), free(ws);
            }
            free(z), free(dw), free(dg);
        }
        free(labels);
    }
    printf("softmax: softmax_xent and its bf16/fp16 forms, 5 shapes, ties, loss scale\n");
}

/* ---- GEMM bias (the CUDA gemm_lp's prefill, fp32 tile path and fp32 add) ---- */

/* The CUDA gemm_lp's tile path for a 2-byte C with a bias and beta != 0,
 * run on the CPU: t = widen(C) by its body, t = alpha op(A) op(B) + beta t
 * by an fp32 sgemm of the widened operands (the GEMM cuBLAS runs into t),
 * then C = round(t + bias) by its body. */
static void tile_path(const hfl_backend *be, hfl_precision lp, int m, int n, int k, float alpha,
                      const uint16_t *a, const uint16_t *b, float beta, uint16_t *c, int ldc,
                      const uint16_t *bias, int axis) {
    float *t = malloc(sizeof(float) * (size_t)m * n + 1), *fa = malloc(sizeof(float) * (size_t)m * k + 1);
    float *fb = malloc(sizeof(float) * (size_t)k * n + 1);
    for (size_t i = 0; i < (size_t)m * k; i++) fa[i] = hfl_op_widen(lp, a[i]);
    for (size_t i = 0; i < (size_t)k * n; i++) fb[i] = hfl_op_widen(lp, b[i]);
    for (size_t i = 0; i < (size_t)m * n; i++) hfl_thread_widen_tile_lp(i, lp, t, n, c, ldc, n);
    be->sgemm(0, 0, m, n, k, alpha, fa, k, fb, n, beta, t, n);
    for (size_t i = 0; i < (size_t)m * n; i++) hfl_thread_bias_round_lp(i, lp, c, ldc, t, n, n, bias, axis);
    free(t), free(fa), free(fb);
}

/* With k = 0 the CPU's gemm_lp is C = beta C + bias rounded once; with k <=
 * HFL_GEMM_TILE_K and m, n <= HFL_GEMM_TILE it is one fp32 sgemm of the
 * widened tiles into widened C, then the bias and one rounding: the tile
 * path must give the same bits in both. */
static void test_gemm_bias(const hfl_backend *be) {
    enum { M = 5, N = 7, LDC = 9, K = 37 };
    for (int lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++)
        for (int axis = HFL_BIAS_COL; axis <= HFL_BIAS_ROW; axis++) {
            char what[96];
            uint16_t *bias = inputs_lp(lp, 300, axis == HFL_BIAS_ROW ? M : N, PLAIN);
            uint16_t *c0 = inputs_lp(lp, 301, M * LDC, PLAIN);
            uint16_t *a = inputs_lp(lp, 304, M * K, PLAIN), *b = inputs_lp(lp, 305, K * N, PLAIN);
            uint16_t *cw = dup_bytes(c0, sizeof(uint16_t) * M * LDC), *cg = dup_bytes(c0, sizeof(uint16_t) * M * LDC);
            float ws[3 * M * N + M * K + K * N];
            be->gemm_lp(lp, 0, 0, 0, M, N, 0, 1.0f, NULL, 1, NULL, N, 0.75f, cw, LDC, bias, axis, ws);
            tile_path(be, lp, M, N, 0, 1.0f, a, b, 0.75f, cg, LDC, bias, axis);
            snprintf(what, sizeof what, "gemm tile path k 0 %s axis %d", lp_name(lp), axis);
            same(what, cg, cw, sizeof(uint16_t) * M * LDC);
            memcpy(cw, c0, sizeof(uint16_t) * M * LDC), memcpy(cg, c0, sizeof(uint16_t) * M * LDC);
            be->gemm_lp(lp, 0, 0, 0, M, N, K, 0.5f, a, K, b, N, 1.0f, cw, LDC, bias, axis, ws);
            tile_path(be, lp, M, N, K, 0.5f, a, b, 1.0f, cg, LDC, bias, axis);
            snprintf(what, sizeof what, "gemm tile path k %d %s axis %d", K, lp_name(lp), axis);
            same(what, cg, cw, sizeof(uint16_t) * M * LDC);
            free(a), free(b);

            float *f0 = inputs(302, M * LDC, WITH_INF);
            float *fw = dup_bytes(f0, sizeof(float) * M * LDC), *fg = dup_bytes(f0, sizeof(float) * M * LDC);
            be->gemm_lp(lp, HFL_GEMM_C_F32, 0, 0, M, N, 0, 1.0f, NULL, 1, NULL, N, 1.0f, fw, LDC, bias, axis, ws);
            for (size_t i = 0; i < M * N; i++) hfl_thread_bias_add_f32(i, lp, fg, LDC, N, bias, axis);
            snprintf(what, sizeof what, "gemm bias add fp32 C %s axis %d", lp_name(lp), axis);
            same(what, fg, fw, sizeof(float) * M * LDC);

            /* the prefill: every C[r, c] is its bias, the ldc padding untouched */
            memcpy(cg, c0, sizeof(uint16_t) * M * LDC);
            for (size_t i = 0; i < M * N; i++) hfl_thread_bias_fill_lp(i, cg, LDC, N, bias, axis);
            int bad = 0;
            for (int r = 0; r < M; r++)
                for (int q = 0; q < LDC; q++)
                    bad += cg[r * LDC + q] != (q >= N ? c0[r * LDC + q] : bias[axis == HFL_BIAS_ROW ? r : q]);
            CHECK(bad == 0);

            /* the strided prefill: 3 GEMMs whose Cs are STRIDE apart (a gap
             * between them): each C[r, c] is its bias, the padding and the
             * gaps untouched */
            enum { COUNT = 3, STRIDE = M * LDC + 4 };
            uint16_t *s0 = inputs_lp(lp, 303, COUNT * STRIDE, PLAIN);
            uint16_t *sg = dup_bytes(s0, sizeof(uint16_t) * COUNT * STRIDE);
            for (size_t i = 0; i < COUNT * M * N; i++)
                hfl_thread_bias_fill_lp_strided(i, sg, LDC, M, N, STRIDE, bias, axis);
            bad = 0;
            for (int g = 0; g < COUNT; g++)
                for (int q = 0; q < STRIDE; q++) {
                    int r = q / LDC, col = q % LDC;
                    uint16_t want = r >= M || col >= N ? s0[g * STRIDE + q]
                                                       : bias[axis == HFL_BIAS_ROW ? r : col];
                    bad += sg[g * STRIDE + q] != want;
                }
            CHECK(bad == 0);
            free(s0), free(sg);
            free(bias), free(c0), free(cw), free(cg), free(f0), free(fw), free(fg);
        }
    printf("gemm bias: prefill (single and strided), fp32 tile path (beta != 0) and fp32 add, bf16/fp16, "
           "row and column bias\n");
}

int main(void) {
    const hfl_backend *be = hfl_backend_cpu();
    test_elementwise(be);
    test_sgd(be);
    test_unscale(be);
    test_adamw_count(be);
    test_adamw_bias_vs_pow();
    test_bias_grads(be);
    test_conv(be);
    test_pool(be);
    test_softmax(be);
    test_gemm_bias(be);
    return check_exit_code("test_thread_bodies");
}
