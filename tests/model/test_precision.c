/* test_precision.c: training in fp32, bf16 and fp16 (model/model.h,
 * plan/planner.h PRECISION, the ops of kernels/backend.h in a 2-byte type) on the CPU
 * backend.
 *
 * Checks that
 *   - precision names parse and print, and plans whose activation size does
 *     not suit their precision are refused (planner and trainer);
 *   - bf16 and fp16 forward losses on mlp and a small CNN are close to fp32's
 *     (within a bound derived from the format's unit roundoff) and NOT
 *     bit-identical to it, so storage really rounds;
 *   - bf16 gradients, and fp16 gradients under the initial loss scale 2^16,
 *     are close to fp32's (relative L2 error), and come back unscaled;
 *   - an fp16 overflow (a huge loss scale, or a huge input) skips the step:
 *     master weights unchanged bit for bit, scale halved, the skip counted;
 *     2000 clean steps double the scale, 1999 do not;
 *   - for cnn at batch 128, every activation, gradient and input buffer of the
 *     bf16 plan is exactly half its fp32 twin, the activation category at the
 *     peak halves, weights are 2 bytes beside fp32 master weights, and the
 *     arena shrinks; the trainer's one allocation is arena_bytes and a step
 *     runs under a budget of exactly that;
 *   - the planner test matrix at bf16 and fp16: every placement valid, and
 *     losses and gradients bit-identical across the none, sqrt, optimal and
 *     full schedules within a precision;
 *   - a small task trains to high accuracy in bf16 and in fp16;
 *   - the CPU max-pool backward's scatter shortcut (windows that do not
 *     overlap) gives the gather-form body's bits, ties and -0 included. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/budget.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#define PLAN_TEST_ODD_OVERLAPPING_POOL /* odd gets overlapping pool windows */
#include "tests/plan/plan_test.h"
#include "util/util.h"

static const hfl_precision precs[3] = {HFL_PREC_FP32, HFL_PREC_BF16, HFL_PREC_FP16};

static hfl_trainer *make_trainer(const hfl_model_spec *s, int batch, hfl_ckpt_kind kind,
                                 hfl_precision prec) {
    hfl_plan *p = hfl_malloc(sizeof *p);
    char err[HFL_ERR_LEN] = "";
    make_plan(s, batch, kind, 1, prec, p);
    hfl_trainer *t = hfl_trainer_create_plan(s, hfl_backend_cpu(), p, err);
    if (!t) fprintf(stderr, "trainer: %s\n", err);
    CHECK(t != NULL);
    free(p);
    return t;
}

/* Everything a placement must satisfy (plan_test.h's common checks, and the
 * live peak), with the weights and master weights each precision plans. */
static void check_placement(const hfl_plan *p) {
    check_placement_common(p);
    size_t max_live = 0;
    for (int o = 0; o < p->n_ops; o++) {
        size_t live = hfl_plan_live_bytes(p, o);
        if (live > max_live) max_live = live;
    }
    CHECK(max_live == p->live_peak && p->arena_bytes >= max_live);
    size_t n = p->spec.n_params;
    if (p->cfg.precision == HFL_PREC_FP32) {
        CHECK(p->master < 0 && p->breakdown[HFL_BUF_MASTER] == 0);
        CHECK(p->breakdown[HFL_BUF_WEIGHTS] == n * 4);
    } else {
        CHECK(p->master >= 0 && p->breakdown[HFL_BUF_MASTER] == n * 4);
        CHECK(p->breakdown[HFL_BUF_WEIGHTS] == n * 2 && p->buffers[p->params].elem_bytes == 2);
        CHECK(p->breakdown[HFL_BUF_GRADS] == n * 4);
        CHECK(p->buffers[p->input].elem_bytes == 2 && p->ops[p->loss_op].ws >= 0);
    }
}

static void test_names_and_refusals(void) {
    char err[HFL_ERR_LEN] = "";
    hfl_precision p = HFL_PREC_FP32;
    CHECK(hfl_precision_parse("bf16", &p, err) == 0 && p == HFL_PREC_BF16);
    CHECK(hfl_precision_parse("fp16", &p, err) == 0 && p == HFL_PREC_FP16);
    CHECK(hfl_precision_parse("fp32", &p, err) == 0 && p == HFL_PREC_FP32);
    CHECK(hfl_precision_parse("FP16", &p, err) == -1 && strstr(err, "FP16") != NULL);
    CHECK(strcmp(hfl_precision_name(HFL_PREC_BF16), "bf16") == 0);
    CHECK(strcmp(hfl_precision_name((hfl_precision)7), "?") == 0);

    hfl_model_spec s;
    load_spec("mlp", &s);
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_plan_config cfg = {.batch = 4, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .precision = HFL_PREC_BF16, .act_elem_bytes = 4};
    CHECK(hfl_plan_make(&s, &cfg, plan, err) == -1 &&
          strcmp(err, "planner: bf16 activations are 2 bytes an element, not 4") == 0);
    cfg.precision = (hfl_precision)3;
    CHECK(hfl_plan_make(&s, &cfg, plan, err) == -1 && strcmp(err, "planner: unknown precision 3") == 0);
    /* fp32 with 2-byte activations: a plan, but not one the trainer runs. */
    cfg.precision = HFL_PREC_FP32;
    cfg.act_elem_bytes = 2;
    CHECK(hfl_plan_make(&s, &cfg, plan, err) == 0);
    CHECK(hfl_trainer_create_plan(&s, hfl_backend_cpu(), plan, err) == NULL &&
          strcmp(err, "trainer: a fp32 plan with 2-byte activations does not run") == 0);
    free(plan);
}

/* Loss of a forward and backward pass and the gradients, for each precision. */
static void run_all(const hfl_model_spec *s, int n, const float *params, const float *x,
                    const int32_t *y, float loss[3], float *g[3]) {
    for (int q = 0; q < 3; q++) {
        hfl_trainer *t = make_trainer(s, n, HFL_CKPT_NONE, precs[q]);
        if (!t) return;
        hfl_trainer_set_params(t, params);
        loss[q] = hfl_trainer_accumulate(t, x, y, n, n);
        hfl_trainer_get_grads(t, g[q]);
        /* get_params returns the fp32 masters exactly as set. */
        float *back = hfl_malloc(s->n_params * sizeof(float));
        hfl_trainer_get_params(t, back);
        CHECK(memcmp(back, params, s->n_params * sizeof(float)) == 0);
        free(back);
        hfl_trainer_free(t);
    }
}

static double rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / den);
}

/* Relative L2 error of gradient block [off, off + n). */
static double block_err(float *const g[3], int q, size_t off, size_t n) {
    return rel_l2(g[q] + off, g[0] + off, n);
}

/* Forward losses and gradients against fp32. u is the unit roundoff (2^-8
 * for bf16's 8-bit significand, 2^-11 for fp16's 11 bits). The loss averages
 * many rounded values: within 2u. The last layer's gradient (dlogits times
 * its rounded input, no kink below the loss) is within 4u. The whole
 * gradient also passes ReLU and max-pool kinks: a unit whose pre-activation
 * lies within rounding distance of zero (or a window whose top two values
 * tie after rounding) flips and moves a whole row of dW, so the error is
 * ruled by the few flips, about sqrt(fraction flipped) ~ sqrt(u): within
 * 3 sqrt(u) (bf16 0.19, fp16 0.066), still far below a wrong formula's. */
static void test_close_to_fp32(const char *name, int n) {
    hfl_model_spec s;
    load_spec(name, &s);
    float *x = hfl_malloc((size_t)n * s.in_dim * sizeof(float));
    float *params = hfl_malloc(s.n_params * sizeof(float));
    int32_t *y = hfl_malloc((size_t)n * sizeof(int32_t));
    random_batch(&s, n, x, y, 11);
    hfl_model_init_params(&s, params, 13);
    float loss[3];
    float *g[3];
    for (int q = 0; q < 3; q++) g[q] = hfl_malloc(s.n_params * sizeof(float));
    run_all(&s, n, params, x, y, loss, g);
    const double u[3] = {0.0, 1.0 / 256, 1.0 / 2048};
    const hfl_layer *last = &s.layers[s.n_layers - 1];
    for (int q = 1; q < 3; q++) {
        double dl = fabs((double)loss[q] - loss[0]) / loss[0];
        double dg = rel_l2(g[q], g[0], s.n_params);
        double dlast = block_err(g, q, last->param_off, last->n_params);
        printf("%s batch %d %s: loss %.6f (fp32 %.6f, rel %.2e = %.3f u), last layer grad %.2e "
               "(%.2f u), all grads %.2e (%.2f sqrt(u))\n",
               name, n, hfl_precision_name(precs[q]), loss[q], loss[0], dl, dl / u[q], dlast,
               dlast / u[q], dg, dg / sqrt(u[q]));
        CHECK(memcmp(&loss[q], &loss[0], sizeof loss[0]) != 0); /* storage really rounds */
        CHECK(memcmp(g[q], g[0], s.n_params * sizeof(float)) != 0);
        CHECK(dl <= 2 * u[q]);
        CHECK(dlast <= 4 * u[q]);
        CHECK(dg <= 3 * sqrt(u[q]));
    }
    /* fp16 resolves more than bf16 (11 vs 8 significand bits). */
    CHECK(block_err(g, 2, last->param_off, last->n_params) <
          block_err(g, 1, last->param_off, last->n_params));
    for (int q = 0; q < 3; q++) free(g[q]);
    free(x);
    free(y);
    free(params);
}

/* Why fp16 scales the loss: with the last layer's weights shrunk 10^4 times,
 * the hidden layers' activation gradients are ~1e-7, under fp16's smallest
 * normal (6.1e-5), so unscaled (S = 1) they lose most of their bits or
 * flush to zero; at S = 2^16 they are normal and the gradients match fp32's
 * as in test_close_to_fp32. */
static void test_scaling_rescues_small_gradients(void) {
    enum { B = 16 };
    hfl_model_spec s;
    load_spec("mlp", &s);
    float *x = hfl_malloc((size_t)B * s.in_dim * sizeof(float));
    float *params = hfl_malloc(s.n_params * sizeof(float));
    int32_t y[B];
    random_batch(&s, B, x, y, 17);
    hfl_model_init_params(&s, params, 19);
    const hfl_layer *last = &s.layers[s.n_layers - 1];
    for (size_t i = 0; i < last->n_params; i++) params[last->param_off + i] *= 1e-4f;
    float *g[3], err[2];
    for (int k = 0; k < 3; k++) g[k] = hfl_malloc(s.n_params * sizeof(float));
    const float scales[2] = {65536.0f, 1.0f};
    for (int k = 0; k < 3; k++) {
        hfl_trainer *t = make_trainer(&s, B, HFL_CKPT_NONE, k ? HFL_PREC_FP16 : HFL_PREC_FP32);
        if (!t) return;
        if (k) hfl_trainer_set_loss_scale(t, scales[k - 1]);
        hfl_trainer_set_params(t, params);
        hfl_trainer_accumulate(t, x, y, B, B);
        hfl_trainer_get_grads(t, g[k]);
        hfl_trainer_free(t);
    }
    /* The first layer's weight gradient (the hidden gradients' end point). */
    size_t n0 = (size_t)s.layers[0].out * s.layers[0].in;
    for (int k = 0; k < 2; k++) err[k] = (float)rel_l2(g[k + 1], g[0], n0);
    printf("mlp, last layer x 1e-4, fp16: first-layer grad rel L2 %.2e at S = 2^16, %.2e at S = 1\n",
           (double)err[0], (double)err[1]);
    CHECK(err[0] <= 3 * sqrt(1.0 / 2048));
    CHECK(err[1] > 10 * err[0]);
    for (int k = 0; k < 3; k++) free(g[k]);
    free(x);
    free(params);
}

/* fp16 overflow skips the step and halves the scale; clean steps double it. */
static void test_loss_scaling(void) {
    enum { B = 8 };
    hfl_model_spec s;
    load_spec("tiny", &s);
    float x[B * 128], *p0 = hfl_malloc(s.n_params * sizeof(float)),
                      *p1 = hfl_malloc(s.n_params * sizeof(float));
    int32_t y[B];
    random_batch(&s, B, x, y, 21);
    hfl_model_init_params(&s, p0, 23);

    hfl_trainer *t = make_trainer(&s, B, HFL_CKPT_SQRT, HFL_PREC_FP16);
    if (!t) return;
    CHECK(hfl_trainer_precision(t) == HFL_PREC_FP16);
    CHECK(hfl_trainer_loss_scale(t) == 65536.0f && hfl_trainer_skipped_steps(t) == 0);
    hfl_trainer_set_params(t, p0);
    /* dlogits * 2^40 overflows fp16 (max 65504): the step is skipped. */
    hfl_trainer_set_loss_scale(t, 0x1p40f);
    float loss = hfl_trainer_step(t, x, y, B, 0.1f, 0.9f, 1e-4f);
    CHECK(isfinite(loss));
    hfl_trainer_get_params(t, p1);
    CHECK(memcmp(p0, p1, s.n_params * sizeof(float)) == 0);
    CHECK(hfl_trainer_loss_scale(t) == 0x1p39f && hfl_trainer_skipped_steps(t) == 1);
    /* At the initial scale the same step is taken and moves the weights. */
    hfl_trainer_set_loss_scale(t, 65536.0f);
    hfl_trainer_step(t, x, y, B, 0.1f, 0.9f, 1e-4f);
    hfl_trainer_get_params(t, p1);
    CHECK(memcmp(p0, p1, s.n_params * sizeof(float)) != 0);
    CHECK(hfl_trainer_skipped_steps(t) == 1 && hfl_trainer_loss_scale(t) == 65536.0f);

    /* A huge input is Inf in fp16 storage: skipped again, masters kept. */
    float big[B * 128];
    memcpy(big, x, sizeof big);
    big[5] = 1e6f;
    hfl_trainer_get_params(t, p0);
    hfl_trainer_step(t, big, y, B, 0.1f, 0.9f, 1e-4f);
    hfl_trainer_get_params(t, p1);
    CHECK(memcmp(p0, p1, s.n_params * sizeof(float)) == 0);
    CHECK(hfl_trainer_skipped_steps(t) == 2 && hfl_trainer_loss_scale(t) == 32768.0f);

    /* Growth: 1999 clean steps keep the scale, the 2000th doubles it. */
    hfl_trainer_set_loss_scale(t, 1024.0f);
    for (int i = 0; i < 1999; i++) hfl_trainer_step(t, x, y, 1, 1e-4f, 0.0f, 0.0f);
    CHECK(hfl_trainer_loss_scale(t) == 1024.0f);
    hfl_trainer_step(t, x, y, 1, 1e-4f, 0.0f, 0.0f);
    CHECK(hfl_trainer_loss_scale(t) == 2048.0f && hfl_trainer_skipped_steps(t) == 2);
    hfl_trainer_free(t);

    /* bf16 needs no scaling: the scale is 1 and the huge input does not skip. */
    t = make_trainer(&s, B, HFL_CKPT_NONE, HFL_PREC_BF16);
    if (!t) return;
    hfl_trainer_set_params(t, p0);
    CHECK(hfl_trainer_loss_scale(t) == 1.0f);
    hfl_trainer_step(t, big, y, B, 0.1f, 0.9f, 1e-4f);
    CHECK(hfl_trainer_skipped_steps(t) == 0);
    hfl_trainer_free(t);
    free(p0);
    free(p1);
}

/* cnn at batch 128: the activation category halves, weights are 2 bytes
 * beside fp32 master weights, the arena shrinks. */
static void test_cnn_arena(void) {
    hfl_model_spec s;
    load_spec("cnn", &s);
    hfl_plan *p[3];
    for (int q = 0; q < 3; q++) {
        p[q] = hfl_malloc(sizeof *p[q]);
        make_plan(&s, 128, HFL_CKPT_NONE, 1, precs[q], p[q]);
        check_placement(p[q]);
        const hfl_plan *x = p[q];
        printf("cnn batch 128 %s: arena %zu, live peak %zu at op %d (%s):", hfl_precision_name(precs[q]),
               x->arena_bytes, x->live_peak, x->peak_op, hfl_plan_op_name(x->ops[x->peak_op].kind));
        for (int c = 0; c < HFL_BUF_N_CATEGORIES; c++)
            printf(" %s %zu", hfl_plan_category_name((hfl_buf_category)c), x->breakdown[c]);
        printf("\n");
    }
    for (int q = 1; q < 3; q++) {
        const hfl_plan *a = p[0], *b = p[q];
        /* Same activation buffers in the same order, each exactly half. */
        int ka = 0, kb = 0, pairs = 0;
        for (;; ka++, kb++) {
            while (ka < a->n_buffers && a->buffers[ka].category != HFL_BUF_ACTIVATIONS &&
                   ka != a->input)
                ka++;
            while (kb < b->n_buffers && b->buffers[kb].category != HFL_BUF_ACTIVATIONS &&
                   kb != b->input)
                kb++;
            if (ka >= a->n_buffers || kb >= b->n_buffers) break;
            CHECK(strcmp(a->buffers[ka].name, b->buffers[kb].name) == 0);
            CHECK(b->buffers[kb].bytes * 2 == a->buffers[ka].bytes);
            pairs++;
        }
        CHECK(ka >= a->n_buffers && kb >= b->n_buffers && pairs > 10);
        CHECK(b->chain_peak * 2 == a->chain_peak);
        CHECK(b->peak_op == a->peak_op);
        CHECK(b->breakdown[HFL_BUF_ACTIVATIONS] * 2 == a->breakdown[HFL_BUF_ACTIVATIONS]);
        CHECK(b->breakdown[HFL_BUF_INPUT] < a->breakdown[HFL_BUF_INPUT]);
        /* weights 4 -> 2 + 4 bytes a parameter: +2n; activations save more. */
        CHECK(b->arena_bytes < a->arena_bytes);
        size_t saved = a->breakdown[HFL_BUF_ACTIVATIONS] / 2;
        size_t extra = 2 * s.n_params + b->breakdown[HFL_BUF_WORKSPACE];
        CHECK(a->arena_bytes - b->arena_bytes + extra >= saved - 64 * (size_t)b->n_buffers);
    }
    /* The bf16 trainer: one allocation of arena_bytes; a step and an
     * evaluation under a budget of exactly that. */
    enum { B = 16 };
    hfl_plan *q = p[1];
    make_plan(&s, B, HFL_CKPT_SQRT, 1, HFL_PREC_BF16, q);
    float *x = hfl_malloc((size_t)B * s.in_dim * sizeof(float));
    int32_t y[B];
    random_batch(&s, B, x, y, 2);
    char err[HFL_ERR_LEN] = "";
    uint64_t live0 = hfl_budget_live_bytes();
    hfl_budget_set(live0 + q->arena_bytes);
    hfl_trainer *t = hfl_trainer_create_plan(&s, hfl_backend_cpu(), q, err);
    CHECK(t != NULL);
    if (t) {
        CHECK(hfl_budget_live_bytes() - live0 == q->arena_bytes);
        hfl_budget_reset_peak();
        float acc = -1.0f, loss = hfl_trainer_step(t, x, y, B, 0.01f, 0.9f, 1e-4f);
        hfl_trainer_evaluate(t, x, y, B, &acc);
        CHECK(loss > 0.0f && acc >= 0.0f);
        CHECK(hfl_budget_peak_bytes() == live0 + q->arena_bytes);
        hfl_trainer_free(t);
    }
    hfl_budget_set(0);
    free(x);
    for (int k = 0; k < 3; k++) free(p[k]);
}

/* Placement over models, batches, schedules and momentum in bf16 and fp16;
 * each arena below the fp32 one's live peak where activations dominate. */
static void test_placements(hfl_precision prec) {
    const int batches[3] = {1, 7, 512};
    for_each_plan(batches, 3, prec, NULL, NULL);
}

/* Four noisy clusters in 24 dimensions (test_planner.c's task) under the
 * sqrt schedule with momentum, and a small CNN's translated-pattern task. */
static void test_training(hfl_precision prec) {
    enum { B = 32 };
    hfl_model_spec s;
    float *x, *params;
    int32_t *y;
    clusters_task(&s, &x, &y, &params);
    hfl_trainer *t = make_trainer(&s, B, HFL_CKPT_SQRT, prec);
    if (!t) return;
    float acc0 = 0.0f, acc1 = 0.0f, before, after;
    clusters_train(t, params, x, y, B, &before, &after, &acc0, &acc1);
    printf("clusters in %s: loss %.4f -> %.4f, accuracy %.3f -> %.3f, skipped %llu, scale %g\n",
           hfl_precision_name(prec), before, after, acc0, acc1,
           (unsigned long long)hfl_trainer_skipped_steps(t), (double)hfl_trainer_loss_scale(t));
    CHECK(after < 0.25f * before && acc1 > 0.95f);
    hfl_trainer_free(t);
    free(x);
    free(y);
    free(params);

    /* tiny CNN: class = which quadrant of channel 0 holds a bright 2x2 patch. */
    enum { M = 192 };
    load_spec("tiny", &s);
    x = hfl_malloc((size_t)M * s.in_dim * sizeof(float));
    y = hfl_malloc(M * sizeof(int32_t));
    params = hfl_malloc(s.n_params * sizeof(float));
    for (int i = 0; i < M; i++) {
        float *xi = x + (size_t)i * s.in_dim;
        for (int k = 0; k < s.in_dim; k++)
            xi[k] = 0.3f * (hfl_u01(hfl_philox_u32(4, 2, 0, 0, 0, (uint64_t)i * s.in_dim + k)) - 0.5f);
        y[i] = i % 3;
        int oy = (int)(hfl_philox_u32(4, 3, 0, 0, 0, (uint64_t)i) % 3);
        int ox = y[i] * 3 + (int)(hfl_philox_u32(4, 3, 0, 0, 1, (uint64_t)i) % 2);
        for (int dy = 0; dy < 2; dy++)
            for (int dx = 0; dx < 2; dx++) xi[(oy + 2 + dy) * 8 + ox + dx] += 1.0f;
    }
    hfl_model_init_params(&s, params, 8);
    t = make_trainer(&s, B, HFL_CKPT_FULL, prec);
    if (!t) return;
    hfl_trainer_set_params(t, params);
    before = hfl_trainer_evaluate(t, x, y, M, &acc0);
    for (int e = 0; e < 40; e++)
        for (int i = 0; i + B <= M; i += B)
            hfl_trainer_step(t, x + (size_t)i * s.in_dim, y + i, B, 0.05f, 0.9f, 0.0f);
    after = hfl_trainer_evaluate(t, x, y, M, &acc1);
    printf("tiny cnn in %s: loss %.4f -> %.4f, accuracy %.3f -> %.3f\n", hfl_precision_name(prec),
           before, after, acc0, acc1);
    CHECK(acc1 > 0.95f && after < 0.25f * before);
    hfl_trainer_free(t);
    free(x);
    free(y);
    free(params);
}

static void test_maxpool_scatter_matches_gather(void) {
    hfl_window_geom g = hfl_window_geom_make(3, 6, 6, 2, 2, 0);
    enum { N = 2, IN = 2 * 3 * 36, OUT = 2 * 3 * 9 };
    uint16_t x[IN], dy[OUT], dx[IN];
    for (int q = 1; q < 3; q++) {
        hfl_precision lp = precs[q];
        for (int i = 0; i < IN; i++) /* few distinct values: many ties */
            x[i] = hfl_op_narrow(lp, (float)(hfl_philox_u32(5, 1, 0, 0, 0, (uint64_t)i) % 4) - 1.5f);
        for (int i = 0; i < OUT; i++)
            dy[i] = hfl_op_narrow(lp, i % 5 ? 0.37f * (float)(i - 20) : -0.0f);
        hfl_backend_cpu()->maxpool_bwd(lp, dx, dy, x, N, g);
        int same = 1;
        for (int pl = 0; pl < N * 3; pl++)
            for (int iy = 0; iy < 6; iy++)
                for (int ix = 0; ix < 6; ix++) {
                    float v = hfl_op_maxpool_bwd(lp, x + pl * 36, dy + pl * 9, &g, iy, ix);
                    same &= dx[pl * 36 + iy * 6 + ix] == hfl_op_narrow(lp, v);
                }
        CHECK(same);
    }
}

static void case_close_to_fp32(void) {
    test_close_to_fp32("mlp", 16);
    test_close_to_fp32("tiny", 8);
    test_close_to_fp32("cnn", 4);
}

/* Gradients identical across placements and batch splits, and training, in precs[q]. */
static void same_in(int q) {
    test_identical_gradients("mlp", 8, 8, precs[q]);
    test_identical_gradients("mlp", 8, 5, precs[q]);
    test_identical_gradients("tiny", 3, 3, precs[q]);
    test_identical_gradients("odd", 4, 4, precs[q]);
    test_identical_gradients("cnn", 2, 2, precs[q]);
    test_placements(precs[q]);
    test_training(precs[q]);
}

static void case_bf16(void) { same_in(1); }
static void case_fp16(void) { same_in(2); }

static const check_case cases[] = {
    {"maxpool_scatter_matches_gather", test_maxpool_scatter_matches_gather},
    {"names_and_refusals", test_names_and_refusals},
    {"close_to_fp32", case_close_to_fp32},
    {"scaling_rescues_small_gradients", test_scaling_rescues_small_gradients},
    {"loss_scaling", test_loss_scaling},
    {"cnn_arena", test_cnn_arena},
    {"bf16", case_bf16},
    {"fp16", case_fp16},
};

int main(int argc, char **argv) {
    return check_run("test_precision", cases, CHECK_CASES(cases), argc, argv);
}
