/* test_thread_bodies.c: the CUDA kernels' thread bodies (kernels/thread_hd.h)
 * run on the CPU over every index and compared, bit for bit (memcmp), with
 * the CPU backend's op on the same inputs.
 *
 * This is where the GPU's indexing is tested on machines without a GPU: a
 * CUDA kernel is its thread body called once per index, so a body that
 * agrees here computes on the device what the CPU backend computes, given
 * the build's -fmad=false (tests/gpu/test_cuda_ops.c checks that on a GPU).
 * The loss, a warp per row, is emulated lane by lane from ops_hd.h's pieces
 * (warp_row).
 * Inputs hold the awkward values: negative zero, ties (coarse values), NaN in
 * max pooling, the elementwise ops and the loss's argmax, Inf in unscale; geometries cover padding,
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
#include "tests/kernels/adamw_make.h"
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

/* Bytes of n elements of type t. */
static size_t nbytes(hfl_precision t, size_t n) { return n * hfl_precision_bytes(t); }

static void test_elementwise(const hfl_backend *be) {
    enum { N = 13 * 37 };
    float *want = inputs(1, N, PLAIN), *got = inputs(1, N, PLAIN);
    be->fill(want, -0.0f, N);
    for (size_t i = 0; i < N; i++) hfl_thread_fill(i, got, -0.0f);
    same("fill", got, want, sizeof(float) * N);
    free(want), free(got);

    for (int t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
        char what[64];
        size_t bytes = nbytes(t, N);
        void *x = inputs_of(t, 4, N, WITH_NAN | WITH_INF), *dy = inputs_of(t, 5, N, WITH_NAN);
        void *w = malloc(bytes), *g = malloc(bytes);
        be->relu_fwd(t, w, x, N);
        for (size_t i = 0; i < N; i++) hfl_thread_relu_fwd(i, t, g, x);
        snprintf(what, sizeof what, "relu_fwd %s", lp_name(t));
        same(what, g, w, bytes);
        /* PAIRS: the 2-byte kernels' two elements a thread, over the even
         * part of N (the odd last element is the one-element kernel's) */
        size_t pairs = t == HFL_PREC_FP32 ? 0 : N / 2, pair_bytes = nbytes(t, 2 * pairs);
        memset(g, 0xA5, bytes);
        for (size_t j = 0; j < pairs; j++) hfl_pair_relu_fwd(j, t, g, x);
        snprintf(what, sizeof what, "relu_fwd pairs %s", lp_name(t));
        same(what, g, w, pair_bytes);
        void *y = dup_bytes(w, bytes);
        be->relu_bwd(t, w, dy, y, N);
        for (size_t i = 0; i < N; i++) hfl_thread_relu_bwd(i, t, g, dy, y);
        snprintf(what, sizeof what, "relu_bwd %s", lp_name(t));
        same(what, g, w, bytes);
        memset(g, 0xA5, bytes);
        for (size_t j = 0; j < pairs; j++) hfl_pair_relu_bwd(j, t, g, dy, y);
        snprintf(what, sizeof what, "relu_bwd pairs %s", lp_name(t));
        same(what, g, w, pair_bytes);
        /* dx may alias dy */
        memcpy(w, dy, bytes), memcpy(g, dy, bytes);
        be->relu_bwd(t, w, w, y, N);
        for (size_t i = 0; i < N; i++) hfl_thread_relu_bwd(i, t, g, g, y);
        snprintf(what, sizeof what, "relu_bwd in place %s", lp_name(t));
        same(what, g, w, bytes);
        memcpy(g, dy, bytes);
        for (size_t j = 0; j < pairs; j++) hfl_pair_relu_bwd(j, t, g, g, y);
        snprintf(what, sizeof what, "relu_bwd pairs in place %s", lp_name(t));
        same(what, g, w, pair_bytes);

        /* convert of values that land on ties, in the subnormals and past the
         * largest finite value, as well as the specials. */
        float *src = inputs(6, N, WITH_NAN | WITH_INF);
        for (size_t i = 0; i < N; i += 5) src[i] *= i % 2 ? 1e-6f : 7e4f;
        for (size_t i = 1; t != HFL_PREC_FP32 && i < N;
             i += 9) /* halfway between two 2-byte neighbours */
            src[i] = hfl_op_widen(t, (uint16_t)(0x3C00 + i)) +
                     (hfl_op_widen(t, (uint16_t)(0x3C01 + i)) -
                      hfl_op_widen(t, (uint16_t)(0x3C00 + i))) *
                         0.5f;
        be->convert(t, w, src, N);
        for (size_t i = 0; i < N; i++) hfl_thread_convert(i, t, g, src);
        snprintf(what, sizeof what, "convert %s", lp_name(t));
        same(what, g, w, bytes);
        memset(g, 0xA5, bytes);
        for (size_t j = 0; j < pairs; j++) hfl_pair_convert(j, t, g, src);
        snprintf(what, sizeof what, "convert pairs %s", lp_name(t));
        same(what, g, w, pair_bytes);
        CHECK(t != HFL_PREC_FP32 || memcmp(w, src, bytes) == 0); /* fp32: a copy */
        free(x), free(dy), free(w), free(g), free(y), free(src);
        if (t == HFL_PREC_FP32) continue;

        /* widen: exact, so convert of every widened pattern gives it back
         * (a NaN stays a NaN of the same sign). */
        uint16_t *all = malloc(sizeof(uint16_t) * 65536), *back = malloc(sizeof(uint16_t) * 65536);
        float *wide = malloc(sizeof(float) * 65536);
        for (size_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
        for (size_t i = 0; i < 65536; i++) hfl_thread_widen(i, t, wide, all);
        be->convert(t, back, wide, 65536);
        int bad = 0;
        for (size_t i = 0; i < 65536; i++) {
            float v = wide[i];
            bad += v == v ? back[i] != all[i] : (back[i] & 0x8000) != (all[i] & 0x8000);
            bad += v == v && memcmp(&v, &(float){hfl_ld(t, all, i)}, sizeof v) != 0;
        }
        snprintf(what, sizeof what, "widen %s round trip", lp_name(t));
        if (bad) fprintf(stderr, "%s: %d patterns differ\n", what, bad);
        CHECK(bad == 0);
        free(all), free(back), free(wide);
    }
    printf("elementwise: fill, relu fwd/bwd, convert (fp32, bf16, fp16), widen\n");
}

/* ---- SGD, unscale, scaler ---- */

/* sgd_step in each type: the master weights, momentum and working copy
 * (fp32: the masters themselves, as the trainer passes them) as the thread
 * body leaves them. */
static void test_sgd(const hfl_backend *be) {
    enum { N = 1001 };
    static const float moms[] = {0.0f, 0.9f}, wds[] = {0.0f, 5e-4f};
    for (int t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++)
        for (int mi = 0; mi < 2; mi++)
            for (int wi = 0; wi < 2; wi++) {
                float mom = moms[mi], wd = wds[wi], lr = 0.0375f;
                float *w0 = inputs(10, N, PLAIN), *g = inputs(11, N, PLAIN),
                      *v0 = inputs(12, N, PLAIN);
                float *ww = dup_bytes(w0, sizeof(float) * N),
                      *wg = dup_bytes(w0, sizeof(float) * N);
                float *vw = dup_bytes(v0, sizeof(float) * N),
                      *vg = dup_bytes(v0, sizeof(float) * N);
                uint16_t hw[N], hg[N];
                void *cw = t == HFL_PREC_FP32 ? (void *)ww : hw,
                     *cg = t == HFL_PREC_FP32 ? (void *)wg : hg;
                hfl_step_scalars sc = {.loss_scale = 1.0f, .finite = 1};
                char what[64];
                /* Without momentum v is unused and may be NULL. */
                be->sgd_step(t, ww, mom != 0.0f ? vw : NULL, g, cw, N, lr, mom, wd,
                             (mi + wi) % 2 ? &sc : NULL);
                for (size_t i = 0; i < N; i++)
                    hfl_thread_sgd_step(i, t, wg, mom != 0.0f ? vg : NULL, g, cg, lr, mom, wd);
                snprintf(what, sizeof what, "sgd_step %s momentum %g wd %g", lp_name(t), mom, wd);
                same(what, wg, ww, sizeof(float) * N);
                same(what, vg, vw, sizeof(float) * N);
                same(what, cg, cw, nbytes(t, N));
                free(w0), free(g), free(v0), free(ww), free(wg), free(vw), free(vg);
            }
    float *g = inputs(13, N, PLAIN), *w = inputs(14, N, PLAIN), *a = inputs(15, N, PLAIN);
    float *gw = dup_bytes(g, sizeof(float) * N), *gg = dup_bytes(g, sizeof(float) * N);
    be->prox_grad(gw, w, a, N, 0.01f);
    for (size_t i = 0; i < N; i++) hfl_thread_prox_grad(i, gg, w, a, 0.01f);
    same("prox_grad mu 0.01", gg, gw, sizeof(float) * N);
    free(g), free(w), free(a), free(gw), free(gg);
    printf("sgd: sgd_step (fp32, bf16, fp16), momentum 0/0.9, wd 0/5e-4; prox_grad\n");
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

/* What the CUDA backend runs for adamw_step with a.sc (cuda/elementwise.cu):
 * k_adamw_count's one thread (the count, or nothing for a skipped step),
 * then the update kernel, which returns at once for a skipped step, else
 * has thread 0 of each block turn sc's powers into the bias corrections
 * and runs the element bodies. */
static void adamw_as_kernels(hfl_precision prec, float *w, float *m, float *v, const float *g,
                             void *hw, size_t n, hfl_adamw_args a,
                             const hfl_step_scalars *skip_if_nonfinite) {
    hfl_op_adamw_count(a.sc, a.beta1, a.beta2, skip_if_nonfinite);
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return;
    hfl_op_adamw_bias(a.sc, &a);
    for (size_t i = 0; i < n; i++) hfl_thread_adamw_step(i, prec, w, m, v, g, hw, a);
}

/* Six steps in each precision (fp16's third one skipped) through the CPU
 * backend's op and through the kernels' sequence: weights, moments, working
 * copy and the whole scalars block equal after every step. The count then
 * leaves out the skipped step, and adamw_make at that count gives the
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
            /* fp32: the masters are the working weights, as the trainer passes them */
            void *w0 = prec == HFL_PREC_FP32 ? (void *)w[0] : hw[0],
                 *w1 = prec == HFL_PREC_FP32 ? (void *)w[1] : hw[1];
            a.sc = &sc[0];
            be->adamw_step(prec, w[0], m[0], v[0], g, w0, N, a, fp16 ? &sc[0] : NULL);
            a.sc = &sc[1];
            adamw_as_kernels(prec, w[1], m[1], v[1], g, w1, N, a, fp16 ? &sc[1] : NULL);
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
        hfl_adamw_args from_sc = {.lr = 1e-2f}, made = adamw_make(1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, counted);
        hfl_op_adamw_bias(&sc[0], &from_sc);
        same("adamw_make's step_size", &made.step_size, &from_sc.step_size, sizeof(float));
        same("adamw_make's bc2_sqrt", &made.bc2_sqrt, &from_sc.bc2_sqrt, sizeof(float));
        for (int k = 0; k < 2; k++) free(w[k]), free(m[k]), free(v[k]);
    }
    printf("adamw: step count and bias corrections in the step scalars (fp32, bf16, fp16 with a "
           "skipped step), as the kernels run them and as adamw_make gives them\n");
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
            hfl_op_adamw_count(&sc, b1, b2, NULL);
            hfl_adamw_args a = {.lr = lr};
            hfl_op_adamw_bias(&sc, &a);
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
        float *db0 = inputs(31, (size_t)cols, PLAIN);
        float *dw = dup_bytes(db0, sizeof(float) * cols), *dg = dup_bytes(db0, sizeof(float) * cols);
        for (int t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
            char what[64];
            float *f = inputs(30, n, COARSE);
            for (size_t i = 0; i < n; i += 3) f[i] *= 0.1f; /* unequal magnitudes: order matters */
            void *dy = malloc(nbytes(t, n));
            for (size_t i = 0; i < n; i++) hfl_st(t, dy, i, f[i]);
            /* channel form: [n = rows % 4 + 1, c = cols, hw = 7] */
            int cn = rows % 4 + 1, hw = 7;
            size_t cnum = (size_t)cn * cols * hw;
            void *cdy = inputs_of(t, 33, cnum, PLAIN);
            for (int acc = 0; acc <= 1; acc++) {
                memcpy(dw, db0, sizeof(float) * cols);
                memcpy(dg, db0, sizeof(float) * cols);
                be->bias_grad(t, dw, dy, rows, cols, acc);
                for (size_t c = 0; c < (size_t)cols; c++)
                    hfl_thread_bias_grad(c, t, dg, dy, rows, cols, acc);
                snprintf(what, sizeof what, "bias_grad %s %dx%d acc %d", lp_name(t), rows, cols, acc);
                same(what, dg, dw, sizeof(float) * cols);
                if (!acc) { /* overwriting is the old two ops: a fill with 0, then accumulate */
                    be->fill(dg, 0.0f, (size_t)cols);
                    be->bias_grad(t, dg, dy, rows, cols, 1);
                    snprintf(what, sizeof what, "bias_grad %s %dx%d = fill + acc", lp_name(t), rows, cols);
                    same(what, dg, dw, sizeof(float) * cols);
                }
                memcpy(dw, db0, sizeof(float) * cols);
                memcpy(dg, db0, sizeof(float) * cols);
                be->channel_bias_grad(t, dw, cdy, cn, cols, hw, acc);
                for (size_t ch = 0; ch < (size_t)cols; ch++)
                    hfl_block_channel_bias_grad(ch, t, dg, cdy, cn, cols, hw, acc);
                snprintf(what, sizeof what, "channel_bias_grad %s n %d c %d hw %d acc %d", lp_name(t), cn,
                         cols, hw, acc);
                same(what, dg, dw, sizeof(float) * cols);
                if (!acc) {
                    be->fill(dg, 0.0f, (size_t)cols);
                    be->channel_bias_grad(t, dg, cdy, cn, cols, hw, 1);
                    snprintf(what, sizeof what, "channel_bias_grad %s n %d = fill + acc", lp_name(t), cn);
                    same(what, dg, dw, sizeof(float) * cols);
                }
            }
            free(f), free(dy), free(cdy);
        }
        free(db0), free(dw), free(dg);
    }
    printf("bias grads: bias_grad and channel_bias_grad in fp32, bf16 and fp16, 4 shapes, accumulating "
           "and overwriting (= a fill with 0, then accumulating)\n");
}

/* The channel bias gradient's lane tree (kernels/ops_hd.h) on channels of
 * more values than lanes, with a nonzero dbias to add onto: the CPU backend
 * equals the block twin bit for bit, and both stay within the bound of two
 * fp32 evaluations of the same sum of the old sequential sum
 * (hfl_op_channel_sum), the op's result before the tree: |tree - exact| <=
 * gamma_(ceil(m/LANES) + LEVELS) S and |sequential - exact| <= gamma_(m-1) S,
 * S = sum |dy| over the channel's m values, exact computed in double, plus
 * one rounding of the final addition onto dbias. */
static void test_channel_tree(const hfl_backend *be) {
    static const int shapes[][3] = {{3, 5, 300}, {2, 3, 129}, {7, 2, 256}, {1, 4, 1000}};
    int differ = 0;
    for (int si = 0; si < 4; si++) {
        int n = shapes[si][0], c = shapes[si][1], hw = shapes[si][2];
        size_t m = (size_t)n * hw, num = m * c;
        for (int t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
            char what[80];
            void *dy = inputs_of(t, 70 + si, num, PLAIN);
            float db[8], dg[8];
            for (int ch = 0; ch < c; ch++) db[ch] = dg[ch] = 0.25f * (float)(ch + 1);
            be->channel_bias_grad(t, db, dy, n, c, hw, 1);
            for (int ch = 0; ch < c; ch++) hfl_block_channel_bias_grad((size_t)ch, t, dg, dy, n, c, hw, 1);
            snprintf(what, sizeof what, "channel tree %s n %d c %d hw %d", lp_name(t), n, c, hw);
            same(what, dg, db, sizeof(float) * c);
            double u = 0x1p-24, tree_n = (double)((m + HFL_CHANNEL_LANES - 1) / HFL_CHANNEL_LANES) + HFL_CHANNEL_LEVELS;
            double g_tree = tree_n * u / (1 - tree_n * u), g_seq = (double)m * u / (1 - (double)m * u);
            for (int ch = 0; ch < c; ch++) {
                double exact = 0.0, S = 0.0;
                for (int i = 0; i < n; i++)
                    for (int j = 0; j < hw; j++) {
                        double v = hfl_ld(t, dy, ((size_t)i * c + ch) * hw + j);
                        exact += v, S += fabs(v);
                    }
                float old = 0.25f * (float)(ch + 1) + hfl_op_channel_sum(t, dy, n, c, hw, ch);
                double base = 0.25 * (ch + 1), end = fabs(base + exact) * u; /* the addition onto dbias */
                CHECK_MSG(fabs(db[ch] - (base + exact)) <= g_tree * S + end &&
                              fabs(old - (base + exact)) <= g_seq * S + end,
                          "%s channel %d: tree %.9g, sequential %.9g, exact %.9g", what, ch,
                          (double)db[ch], (double)old, base + exact);
                differ += db[ch] != old;
            }
            free(dy);
        }
    }
    CHECK(differ > 0); /* the tree sums in another order: some channels must show it */
    printf("channel tree: CPU = block twin bit for bit, within the bound of the sequential sum "
           "(%d of 3 x 14 channels differ from it)\n", differ);
}

/* ---- convolution and pooling ---- */

static void test_conv(const hfl_backend *be) {
    int n = N_SAMPLES;
    for (int gi = 0; gi < N_GEOMS; gi++) {
        hfl_window_geom g = geom_at(gi);
        size_t in_n = (size_t)n * g.c * g.h * g.w,
               col_n = (size_t)n * g.c * g.k * g.k * g.ho * g.wo;
        float *cols = inputs(60 + gi, col_n, PLAIN);
        for (int t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
            char what[96];
            void *x = inputs_of(t, 40 + gi, in_n, WITH_NAN | WITH_INF);
            void *cw = malloc(nbytes(t, col_n)), *cg = malloc(nbytes(t, col_n));
            be->im2col(t, cw, x, n, g);
            for (size_t i = 0; i < col_n; i++) hfl_thread_im2col(i, t, cg, x, g, n);
            snprintf(what, sizeof what, "im2col %s geometry %d", lp_name(t), gi);
            same(what, cg, cw, nbytes(t, col_n));
            void *dw = malloc(nbytes(t, in_n)), *dg = malloc(nbytes(t, in_n));
            be->col2im(t, dw, cols, n, g);
            for (size_t i = 0; i < in_n; i++) hfl_thread_col2im(i, t, dg, cols, g, n);
            snprintf(what, sizeof what, "col2im %s geometry %d", lp_name(t), gi);
            same(what, dg, dw, nbytes(t, in_n));
            free(x), free(cw), free(cg), free(dw), free(dg);
        }
        free(cols);
    }
    printf("conv: im2col and col2im in fp32, bf16 and fp16, %d geometries x %d samples\n", N_GEOMS,
           n);
}

static void test_pool(const hfl_backend *be) {
    int n = N_SAMPLES, tested = 0;
    for (int gi = 0; gi < N_GEOMS; gi++) {
        hfl_window_geom g = geom_at(gi);
        if (2 * g.p > g.k) continue; /* pooling keeps p <= k/2 */
        tested++;
        size_t in_n = (size_t)n * g.c * g.h * g.w, out_n = (size_t)n * g.c * g.ho * g.wo;
        for (int coarse = 0; coarse < 2; coarse++)
            for (int t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
                char what[96];
                void *x = inputs_of(t, 100 + gi, in_n, WITH_NAN | (coarse ? COARSE : 0));
                void *dy = inputs_of(t, 120 + gi, out_n, PLAIN);
                void *yw = malloc(nbytes(t, out_n)), *yg = malloc(nbytes(t, out_n));
                be->maxpool_fwd(t, yw, x, n, g);
                for (size_t i = 0; i < out_n; i++) hfl_thread_maxpool_fwd(i, t, yg, x, g);
                snprintf(what, sizeof what, "maxpool_fwd %s geometry %d%s", lp_name(t), gi,
                         coarse ? " with ties" : "");
                same(what, yg, yw, nbytes(t, out_n));
                void *dw = malloc(nbytes(t, in_n)), *dg = malloc(nbytes(t, in_n));
                be->maxpool_bwd(t, dw, dy, x, n, g);
                for (size_t i = 0; i < in_n; i++) hfl_thread_maxpool_bwd(i, t, dg, dy, x, g);
                snprintf(what, sizeof what, "maxpool_bwd %s geometry %d%s", lp_name(t), gi,
                         coarse ? " with ties" : "");
                same(what, dg, dw, nbytes(t, in_n));
                free(x), free(dy), free(yw), free(yg), free(dw), free(dg);
            }
    }
    printf("pool: maxpool fwd/bwd in fp32, bf16 and fp16, %d geometries, NaN and ties\n", tested);
}

/* ---- softmax cross-entropy ---- */

/* One row as the CUDA loss kernel's warp computes it (cuda/loss.cu): every
 * lane's argmax candidate, the shuffle tree's levels (lane l takes lane l +
 * off's value from before the level; a partner past the warp is itself),
 * the exponentials summed in column order, then the dlogits and the loss. */
static float warp_row(hfl_precision t, const void *z, int32_t label, void *drow, int cols,
                      float scale, int *is_correct) {
    hfl_xent_max lane[HFL_XENT_LANES];
    for (int l = 0; l < HFL_XENT_LANES; l++) lane[l] = hfl_op_xent_lane_max(t, z, cols, l);
    for (int off = HFL_XENT_LANES / 2; off > 0; off /= 2)
        for (int l = 0; l < HFL_XENT_LANES; l++)
            lane[l] = hfl_op_xent_pick(lane[l], l + off < HFL_XENT_LANES ? lane[l + off] : lane[l]);
    hfl_xent_max a = hfl_op_xent_argmax_done(t, z, lane[0]);
    float sum = 0.0f;
    for (int c = 0; c < cols; c++) sum += hfl_op_xent_exp(t, z, c, a.m);
    if (drow)
        for (int c = 0; c < cols; c++) hfl_op_xent_dlogit(t, drow, z, c, label, a.m, 1.0f / sum, scale);
    *is_correct = a.c == label;
    return hfl_op_xent_loss(t, z, label, a.m, sum);
}

/* What the CUDA loss kernel computes, with its block reduction replaced by
 * the CPU's row order (the one place GPU and CPU differ by design; the gpu
 * suite checks that within a tolerance). */
static void softmax_rows(hfl_precision t, const void *logits, const int32_t *labels, void *dlogits,
                         int rows, int cols, hfl_step_scalars *sc) {
    double total = 0.0;
    int64_t correct = 0;
    for (size_t r = 0; r < (size_t)rows; r++) {
        int ok;
        total += warp_row(t, hfl_at(t, logits, r * (size_t)cols), labels[r],
                          dlogits ? hfl_at(t, dlogits, r * (size_t)cols) : NULL, cols,
                          sc->loss_scale / (float)rows, &ok);
        correct += ok;
    }
    sc->loss_sum += total;
    sc->correct += correct;
    sc->rows += rows;
}

/* The warp's argmax against a scan written here (the first column of the
 * largest value; a NaN in column 0 wins, later NaNs are skipped) on rows
 * made to split it: NaNs first in a lane or in column 0, rows of NaN or
 * -inf, -0 against +0, ties within and across lanes, the maximum in the last
 * lane or past the first 32 columns. The dlogits, loss and hit must be the
 * CPU body's bits. */
static void test_softmax_argmax(void) {
    enum { COLS = 70 };
    const float nan = NAN, inf = INFINITY;
    static const struct {
        int cols, n;
        int at[6];
        float v[6];
    } rows[] = {
        {3, 1, {0}, {NAN}},
        {70, 2, {1, 33}, {NAN, 2.0f}},
        {70, 3, {5, 37, 69}, {9.0f, 9.0f, 9.0f}},
        {70, 2, {37, 5}, {9.0f, 9.0f}},
        {40, 2, {0, 32}, {-0.0f, 0.0f}},
        {40, 2, {32, 1}, {0.0f, -0.0f}},
        {33, 1, {32}, {5.0f}},
        {64, 2, {31, 63}, {7.0f, 7.5f}},
        {1, 0, {0}, {0}},
        {35, 3, {0, 3, 34}, {-1.0f, NAN, 4.0f}},
    };
    int n_rows = (int)(sizeof rows / sizeof *rows);
    for (int k = 0; k < n_rows + 2; k++) {
        float z[COLS], d1[COLS], d2[COLS];
        int cols = k < n_rows ? rows[k].cols : 50;
        for (int c = 0; c < cols; c++)
            z[c] = k < n_rows ? -1.0f - 0.01f * (float)(c % 17) : (k == n_rows ? nan : -inf);
        for (int j = 0; k < n_rows && j < rows[k].n; j++) z[rows[k].at[j]] = rows[k].v[j];
        int want = 0; /* the scan, written out */
        for (int c = 1; c < cols; c++)
            if (!isnan(z[0]) && !isnan(z[c]) && z[c] > z[want]) want = c;
        for (int32_t label = 0; label < cols; label += cols > 3 ? cols / 3 : 1) {
            int ok1, ok2;
            float l1 = hfl_op_softmax_xent_row(HFL_PREC_FP32, z, label, d1, cols, 0.5f, &ok1);
            float l2 = warp_row(HFL_PREC_FP32, z, label, d2, cols, 0.5f, &ok2);
            CHECK_MSG(ok2 == (want == label) && ok1 == ok2, "softmax argmax row %d label %d: hit %d, scan says %d",
                      k, label, ok2, want == label);
            CHECK_MSG(memcmp(&l1, &l2, sizeof l1) == 0 && memcmp(d1, d2, sizeof(float) * cols) == 0,
                      "softmax row %d label %d: the warp's loss or dlogits differ from the CPU body's", k, label);
        }
    }
    printf("softmax: the warp's argmax on %d made rows\n", n_rows + 2);
}

static void test_softmax(const hfl_backend *be) {
    static const int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {128, 10}, {5, 1000}};
    for (int si = 0; si < 5; si++) {
        int rows = shapes[si][0], cols = shapes[si][1];
        size_t n = (size_t)rows * cols;
        int32_t *labels = malloc(sizeof(int32_t) * rows);
        for (int r = 0; r < rows; r++) labels[r] = (int32_t)(hfl_philox_u32(1, 2, 3, 4, 5, r) % cols);
        for (int coarse = 0; coarse < 2; coarse++)
            for (int t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++) {
                char what[96];
                float *f = inputs(200 + si, n, coarse ? COARSE : PLAIN);
                for (size_t i = 0; i < n; i += 4) f[i] *= 8.0f; /* some large logits */
                void *z = malloc(nbytes(t, n)), *dw = malloc(nbytes(t, n)),
                     *dg = malloc(nbytes(t, n));
                for (size_t i = 0; i < n; i++) hfl_st(t, z, i, f[i]);
                float *ws = t == HFL_PREC_FP32 ? NULL : malloc(sizeof(float) * 2 * cols);
                hfl_step_scalars a = {.loss_sum = 1.25,
                                      .correct = 3,
                                      .rows = 4,
                                      .loss_scale = t == HFL_PREC_FP16 ? 32768.0f : 1.0f};
                hfl_step_scalars b = a;
                be->softmax_xent(t, z, labels, dw, rows, cols, rows, &a, ws);
                softmax_rows(t, z, labels, dg, rows, cols, &b);
                snprintf(what, sizeof what, "softmax_xent %s %dx%d%s", lp_name(t), rows, cols,
                         coarse ? " ties" : "");
                same(what, dg, dw, nbytes(t, n));
                same(what, &b, &a, sizeof a);
                be->softmax_xent(t, z, labels, NULL, rows, cols, rows, &a,
                                 ws); /* no gradient asked */
                softmax_rows(t, z, labels, NULL, rows, cols, &b);
                same(what, &b, &a, sizeof a);
                free(f), free(z), free(dw), free(dg), free(ws);
            }
        free(labels);
    }
    printf("softmax: softmax_xent in fp32, bf16 and fp16, 5 shapes, ties, loss scale\n");
}

/* ---- GEMM bias (the CUDA gemm's prefill, fp32 tile path and fp32 add) ---- */

/* The CUDA gemm's tile path for a 2-byte C with a bias and beta != 0,
 * run on the CPU: w = widen(C) by its body, w = alpha op(A) op(B) + beta w
 * by an fp32 gemm of the widened operands (the GEMM cuBLAS runs into w),
 * then C = round(w + bias) by its body. */
static void tile_path(const hfl_backend *be, hfl_precision lp, int m, int n, int k, float alpha,
                      const uint16_t *a, const uint16_t *b, float beta, uint16_t *c, int ldc,
                      const uint16_t *bias, int axis) {
    float *w = malloc(sizeof(float) * (size_t)m * n + 1),
          *fa = malloc(sizeof(float) * (size_t)m * k + 1);
    float *fb = malloc(sizeof(float) * (size_t)k * n + 1);
    for (size_t i = 0; i < (size_t)m * k; i++) fa[i] = hfl_op_widen(lp, a[i]);
    for (size_t i = 0; i < (size_t)k * n; i++) fb[i] = hfl_op_widen(lp, b[i]);
    for (size_t i = 0; i < (size_t)m * n; i++) hfl_thread_widen_tile(i, lp, w, n, c, ldc, n);
    if (k > 0)
        be->gemm(HFL_PREC_FP32, 0, 0, 0, m, n, k, alpha, fa, k, fb, n, beta, w, n, NULL, HFL_BIAS_NONE,
                 NULL);
    else /* BLAS's C = beta C, written out as the reference BLAS runs it:
          * OpenBLAS 0.3.21's Cooperlake kernel (chosen on an AMD EPYC with
          * AVX-512 BF16) turns beta x -0 into +0 at k = 0, where the kernel
          * of the machine CI ran on keeps -0, so the oracle was the machine's */
        for (size_t i = 0; i < (size_t)m * n; i++) w[i] = beta == 0.0f ? 0.0f : w[i] * beta;
    for (size_t i = 0; i < (size_t)m * n; i++)
        hfl_thread_bias_round(i, lp, c, ldc, w, n, n, bias, axis);
    free(w), free(fa), free(fb);
}

/* With k = 0 the CPU's 2-byte gemm is C = beta C + bias rounded once; with
 * k <= HFL_GEMM_TILE_K and m, n <= HFL_GEMM_TILE it is one fp32 sgemm of the
 * widened tiles into widened C, then the bias and one rounding: the tile
 * path must give the same bits in both. An fp32 C (of an fp32 or a 2-byte
 * gemm) gets the bias added after the GEMM by its body, one GEMM or a
 * strided batch. The prefill puts each C element's bias in place. */
static void test_gemm_bias(const hfl_backend *be) {
    enum { M = 5, N = 7, LDC = 9, K = 37, COUNT = 3, STRIDE = M * LDC + 4 };
    for (int t = HFL_PREC_FP32; t <= HFL_PREC_FP16; t++)
        for (int axis = HFL_BIAS_COL; axis <= HFL_BIAS_ROW; axis++) {
            char what[96];
            int bn = axis == HFL_BIAS_ROW ? M : N;
            void *bias = inputs_of(t, 300, bn, PLAIN);
            void *a = inputs_of(t, 304, M * K, PLAIN), *b = inputs_of(t, 305, K * N, PLAIN);
            float ws[3 * M * N + M * K + K * N];
            if (t != HFL_PREC_FP32) {
                uint16_t *c0 = inputs_lp(t, 301, M * LDC, PLAIN);
                uint16_t *cw = dup_bytes(c0, sizeof(uint16_t) * M * LDC),
                         *cg = dup_bytes(c0, sizeof(uint16_t) * M * LDC);
                be->gemm(t, 0, 0, 0, M, N, 0, 1.0f, NULL, 1, NULL, N, 0.75f, cw, LDC, bias, axis,
                         ws);
                tile_path(be, t, M, N, 0, 1.0f, a, b, 0.75f, cg, LDC, bias, axis);
                snprintf(what, sizeof what, "gemm tile path k 0 %s axis %d", lp_name(t), axis);
                same(what, cg, cw, sizeof(uint16_t) * M * LDC);
                memcpy(cw, c0, sizeof(uint16_t) * M * LDC),
                    memcpy(cg, c0, sizeof(uint16_t) * M * LDC);
                be->gemm(t, 0, 0, 0, M, N, K, 0.5f, a, K, b, N, 1.0f, cw, LDC, bias, axis, ws);
                tile_path(be, t, M, N, K, 0.5f, a, b, 1.0f, cg, LDC, bias, axis);
                snprintf(what, sizeof what, "gemm tile path k %d %s axis %d", K, lp_name(t), axis);
                same(what, cg, cw, sizeof(uint16_t) * M * LDC);
                free(c0), free(cw), free(cg);
            }

            /* fp32 C: the gemm with its bias against the gemm without, then
             * the body; one GEMM and a strided batch of COUNT (shared A) */
            unsigned mask = t == HFL_PREC_FP32 ? 0 : HFL_GEMM_C_F32;
            float *f0 = inputs(302, COUNT * STRIDE, WITH_INF);
            float *fw = dup_bytes(f0, sizeof(float) * COUNT * STRIDE),
                  *fg = dup_bytes(f0, sizeof(float) * COUNT * STRIDE);
            be->gemm(t, mask, 0, 0, M, N, K, 0.5f, a, K, b, N, 1.0f, fw, LDC, bias, axis, ws);
            be->gemm(t, mask, 0, 0, M, N, K, 0.5f, a, K, b, N, 1.0f, fg, LDC, NULL, HFL_BIAS_NONE,
                     ws);
            for (size_t i = 0; i < M * N; i++)
                hfl_thread_bias_add_f32(i, t, fg, LDC, M, N, 0, bias, axis);
            snprintf(what, sizeof what, "gemm bias add fp32 C %s axis %d", lp_name(t), axis);
            same(what, fg, fw, sizeof(float) * COUNT * STRIDE);
            memcpy(fw, f0, sizeof(float) * COUNT * STRIDE),
                memcpy(fg, f0, sizeof(float) * COUNT * STRIDE);
            be->gemm_strided(t, mask, 0, 0, M, N, K, 0.5f, a, K, 0, b, N, 0, 1.0f, fw, LDC, STRIDE,
                             COUNT, bias, axis, ws);
            be->gemm_strided(t, mask, 0, 0, M, N, K, 0.5f, a, K, 0, b, N, 0, 1.0f, fg, LDC, STRIDE,
                             COUNT, NULL, HFL_BIAS_NONE, ws);
            for (size_t i = 0; i < COUNT * M * N; i++)
                hfl_thread_bias_add_f32(i, t, fg, LDC, M, N, STRIDE, bias, axis);
            snprintf(what, sizeof what, "strided gemm bias add fp32 C %s axis %d", lp_name(t),
                     axis);
            same(what, fg, fw, sizeof(float) * COUNT * STRIDE);
            free(f0), free(fw), free(fg);

            /* the prefill of COUNT Cs that are STRIDE apart (a gap between
             * them): each C[r, c] is its bias, the padding and the gaps
             * untouched */
            void *s0 = inputs_of(t, 303, COUNT * STRIDE, PLAIN);
            void *sg = dup_bytes(s0, nbytes(t, COUNT * STRIDE));
            for (size_t i = 0; i < COUNT * M * N; i++)
                hfl_thread_bias_fill(i, t, sg, LDC, M, N, STRIDE, bias, axis);
            int bad = 0;
            for (int gm = 0; gm < COUNT; gm++)
                for (int q = 0; q < STRIDE; q++) {
                    int r = q / LDC, col = q % LDC;
                    size_t at = (size_t)gm * STRIDE + q;
                    const void *want = r >= M || col >= N
                                           ? hfl_at(t, s0, at)
                                           : hfl_at(t, bias, axis == HFL_BIAS_ROW ? r : col);
                    bad += memcmp(hfl_at(t, sg, at), want, hfl_precision_bytes(t)) != 0;
                }
            CHECK(bad == 0);
            free(s0), free(sg), free(bias), free(a), free(b);
        }
    printf("gemm bias: prefill (strided), fp32 tile path (beta != 0) and fp32 C add (one and "
           "strided), fp32/bf16/fp16, row and column bias\n");
}

static void case_elementwise(void) { test_elementwise(hfl_backend_cpu()); }
static void case_sgd(void) { test_sgd(hfl_backend_cpu()); }
static void case_unscale(void) { test_unscale(hfl_backend_cpu()); }
static void case_adamw_count(void) { test_adamw_count(hfl_backend_cpu()); }
static void case_bias_grads(void) { test_bias_grads(hfl_backend_cpu()); }
static void case_channel_tree(void) { test_channel_tree(hfl_backend_cpu()); }
static void case_conv(void) { test_conv(hfl_backend_cpu()); }
static void case_pool(void) { test_pool(hfl_backend_cpu()); }
static void case_softmax(void) { test_softmax(hfl_backend_cpu()); }
static void case_gemm_bias(void) { test_gemm_bias(hfl_backend_cpu()); }

static const check_case cases[] = {
    {"elementwise", case_elementwise},
    {"sgd", case_sgd},
    {"unscale", case_unscale},
    {"adamw_count", case_adamw_count},
    {"adamw_bias_vs_pow", test_adamw_bias_vs_pow},
    {"bias_grads", case_bias_grads},
    {"channel_tree", case_channel_tree},
    {"conv", case_conv},
    {"pool", case_pool},
    {"softmax", case_softmax},
    {"softmax_argmax", test_softmax_argmax},
    {"gemm_bias", case_gemm_bias},
};

int main(int argc, char **argv) {
    return check_run("test_thread_bodies", cases, CHECK_CASES(cases), argc, argv);
}
