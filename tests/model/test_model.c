/* test_model.c: model specs, initialisation and the trainer on the CPU backend.
 *
 * Checks the built-in mlp's shape (199,210 parameters), the unknown-name
 * error, init bounds and determinism, parameter round trips, the whole mlp's
 * gradient against central differences on a small random batch, that
 * evaluate agrees with the step's loss, and that a few hundred SGD steps fit
 * a small synthetic separable problem to > 95% training accuracy; and that
 * an evaluation trainer takes the largest batch whose arena fits its cap
 * (checked against the planner one batch up) and evaluates as a
 * full-batch trainer does. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

static float rnd(uint32_t tensor, uint64_t i) {
    return 2.0f * hfl_u01(hfl_philox_u32(5, 99, 0, 0, tensor, i)) - 1.0f;
}

static void test_specs(void) {
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_model_builtin("mlp", &s, err) == 0);
    CHECK(s.n_params == 199210);
    CHECK(s.in_dim == 784 && s.n_classes == 10 && s.n_layers == 5);
    CHECK(s.layers[0].kind == HFL_LAYER_DENSE && s.layers[0].in == 784 && s.layers[0].out == 200);
    CHECK(s.layers[1].kind == HFL_LAYER_RELU && s.layers[1].n_params == 0);
    CHECK(s.layers[2].param_off == 784 * 200 + 200);
    CHECK(s.layers[4].param_off == 784 * 200 + 200 + 200 * 200 + 200);
    CHECK(s.layers[4].out == 10 && s.layers[4].n_params == 2010);

    CHECK(hfl_model_builtin("resnet", &s, err) == -1);
    CHECK(strcmp(err, "unknown model 'resnet' (known: mlp, cnn)") == 0);

    int bad[] = {4, 0, 2};
    CHECK(hfl_model_spec_mlp(&s, "bad", bad, 3, err) == -1);
    CHECK(hfl_model_spec_mlp(&s, "bad", bad, 1, err) == -1);
    int one_layer[] = {3, 2};
    CHECK(hfl_model_spec_mlp(&s, "lin", one_layer, 2, err) == 0 && s.n_layers == 1 && s.n_params == 8);
}

static void test_init(void) {
    hfl_model_spec s;
    hfl_model_builtin("mlp", &s, NULL);
    float *a = hfl_malloc(s.n_params * sizeof(float)), *b = hfl_malloc(s.n_params * sizeof(float));
    hfl_model_init_params(&s, a, 42);
    hfl_model_init_params(&s, b, 42);
    CHECK(memcmp(a, b, s.n_params * sizeof(float)) == 0);
    hfl_model_init_params(&s, b, 43);
    size_t same = 0;
    for (size_t i = 0; i < s.n_params; i++) same += a[i] == b[i];
    CHECK(same < s.n_params / 100);

    /* Each layer within +-1/sqrt(in), spread over the range with mean ~0. */
    for (int l = 0; l < s.n_layers; l++) {
        const hfl_layer *ly = &s.layers[l];
        if (ly->kind != HFL_LAYER_DENSE) continue;
        float bound = 1.0f / sqrtf((float)ly->in), lo = 1, hi = -1;
        double sum = 0;
        for (size_t i = 0; i < ly->n_params; i++) {
            float v = a[ly->param_off + i] / bound;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            sum += v;
        }
        CHECK(lo >= -1.0f && hi <= 1.0f && lo < -0.9f && hi > 0.9f);
        CHECK(fabs(sum / ly->n_params) < 0.05);
    }
    free(a);
    free(b);
}

static void test_params_roundtrip(const hfl_backend *be) {
    hfl_model_spec s;
    hfl_model_builtin("mlp", &s, NULL);
    CHECK(hfl_trainer_create(&s, be, 0) == NULL);
    hfl_model_spec broken = s;
    broken.layers[2].in = 7;
    CHECK(hfl_trainer_create(&broken, be, 8) == NULL);

    hfl_trainer *t = hfl_trainer_create(&s, be, 8);
    CHECK(t != NULL);
    /* At least params, grads, momentum and the input batch. */
    CHECK(hfl_trainer_device_bytes(t) >= (3 * s.n_params + 8 * 784) * sizeof(float));
    float *p = hfl_malloc(s.n_params * sizeof(float)), *q = hfl_malloc(s.n_params * sizeof(float));
    hfl_model_init_params(&s, p, 1);
    hfl_trainer_set_params(t, p);
    hfl_trainer_get_params(t, q);
    CHECK(memcmp(p, q, s.n_params * sizeof(float)) == 0);
    hfl_trainer_free(t);
    free(p);
    free(q);
}

/* The whole mlp's gradient against central differences of evaluate's loss,
 * on a few parameters of each dense layer: the largest-|grad| ones (where a
 * wrong index or transpose shows most) and a spread of others. */
static void test_mlp_gradient(const hfl_backend *be) {
    enum { B = 4 };
    hfl_model_spec s;
    hfl_model_builtin("mlp", &s, NULL);
    hfl_trainer *t = hfl_trainer_create(&s, be, B);
    float *p = hfl_malloc(s.n_params * sizeof(float)), *g = hfl_malloc(s.n_params * sizeof(float));
    float x[B * 784];
    int32_t y[B] = {3, 7, 0, 9};
    hfl_model_init_params(&s, p, 2024);
    for (int i = 0; i < B * 784; i++) x[i] = rnd(1, i);
    hfl_trainer_set_params(t, p);
    float loss = hfl_trainer_accumulate(t, x, y, B, B);
    CHECK(isfinite(loss) && loss > 1.5f && loss < 3.5f); /* ~log(10) at init */
    hfl_trainer_get_grads(t, g);

    int checked = 0;
    for (int l = 0; l < s.n_layers; l++) {
        const hfl_layer *ly = &s.layers[l];
        if (ly->kind != HFL_LAYER_DENSE) continue;
        size_t picks[12];
        int n_picks = 0;
        /* The largest |grad| in the weights, in the bias, then 10 spread out. */
        size_t nw = (size_t)ly->out * ly->in, best = 0, bestb = nw;
        for (size_t i = 0; i < nw; i++)
            if (fabsf(g[ly->param_off + i]) > fabsf(g[ly->param_off + best])) best = i;
        for (size_t i = nw; i < ly->n_params; i++)
            if (fabsf(g[ly->param_off + i]) > fabsf(g[ly->param_off + bestb])) bestb = i;
        picks[n_picks++] = best;
        picks[n_picks++] = bestb;
        for (int k = 0; k < 10; k++) picks[n_picks++] = (size_t)(k * 7919 + 13) % ly->n_params;

        for (int k = 0; k < n_picks; k++) {
            size_t i = ly->param_off + picks[k];
            /* 3e-3: small enough that few ReLUs flip, large enough that the
             * float loss's rounding (~1e-7) stays below the tolerance. */
            const float eps = 3e-3f;
            float keep = p[i];
            p[i] = keep + eps;
            hfl_trainer_set_params(t, p);
            double lp = hfl_trainer_evaluate(t, x, y, B, NULL);
            p[i] = keep - eps;
            hfl_trainer_set_params(t, p);
            double lm = hfl_trainer_evaluate(t, x, y, B, NULL);
            p[i] = keep;
            CHECK_CLOSE(g[i], (lp - lm) / (2.0 * eps), 2e-4, 2e-2);
            checked++;
        }
    }
    CHECK(checked == 36);
    hfl_trainer_free(t);
    free(p);
    free(g);
}

/* evaluate's loss equals the step's loss on the same batch (before the
 * update), and over several batches it is the sample-weighted mean. */
static void test_evaluate_matches_step(const hfl_backend *be) {
    enum { B = 8, N = 20 };
    hfl_model_spec s;
    int dims[] = {6, 5, 3};
    hfl_model_spec_mlp(&s, "tiny", dims, 3, NULL);
    hfl_trainer *t = hfl_trainer_create(&s, be, B);
    float p[53], x[N * 6];
    int32_t y[N];
    CHECK(s.n_params == 53);
    hfl_model_init_params(&s, p, 3);
    for (int i = 0; i < N * 6; i++) x[i] = rnd(2, i);
    for (int i = 0; i < N; i++) y[i] = i % 3;
    hfl_trainer_set_params(t, p);

    float acc;
    float ev = hfl_trainer_evaluate(t, x, y, B, &acc);
    float st = hfl_trainer_step(t, x, y, B, 0.1f, 0.9f, 1e-4f);
    CHECK_CLOSE(ev, st, 1e-6, 1e-6);
    CHECK(acc >= 0.0f && acc <= 1.0f);
    float after = hfl_trainer_evaluate(t, x, y, B, NULL);
    CHECK(after < st); /* one step on this very batch lowers its loss */

    /* Batches 8 + 8 + 4 against three separate evaluations. */
    float a1, a2, a3, all_acc;
    double want = (8.0 * hfl_trainer_evaluate(t, x, y, 8, &a1) +
                   8.0 * hfl_trainer_evaluate(t, x + 8 * 6, y + 8, 8, &a2) +
                   4.0 * hfl_trainer_evaluate(t, x + 16 * 6, y + 16, 4, &a3)) / N;
    CHECK_CLOSE(hfl_trainer_evaluate(t, x, y, N, &all_acc), want, 1e-6, 1e-6);
    CHECK_CLOSE(all_acc, (8.0 * a1 + 8.0 * a2 + 4.0 * a3) / N, 1e-6, 0);
    CHECK(hfl_trainer_evaluate(t, x, y, 0, &acc) == 0.0f && acc == 0.0f);

    /* reset_optimizer zeroes momentum: a step after reset equals a step from
     * a fresh trainer at the same parameters. */
    hfl_trainer *fresh = hfl_trainer_create(&s, be, B);
    float cur[53], a[53], b[53];
    hfl_trainer_get_params(t, cur);
    hfl_trainer_set_params(fresh, cur);
    hfl_trainer_reset_optimizer(t);
    hfl_trainer_step(t, x, y, B, 0.1f, 0.9f, 1e-4f);
    hfl_trainer_step(fresh, x, y, B, 0.1f, 0.9f, 1e-4f);
    hfl_trainer_get_params(t, a);
    hfl_trainer_get_params(fresh, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    hfl_trainer_free(fresh);
    hfl_trainer_free(t);
}

/* Ten classes, each a fixed random +-1 prototype in 784 dimensions plus
 * uniform noise of the same size: separable, but not at initialisation. */
static void test_mlp_learns(const hfl_backend *be) {
    enum { N = 512, B = 32, STEPS = 300, D = 784 };
    hfl_model_spec s;
    hfl_model_builtin("mlp", &s, NULL);
    hfl_trainer *t = hfl_trainer_create(&s, be, B);
    float *p = hfl_malloc(s.n_params * sizeof(float)), *x = hfl_malloc((size_t)N * D * sizeof(float));
    int32_t *y = hfl_malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        y[i] = (int32_t)(hfl_philox_u32(9, 98, 0, 0, 0, i) % 10);
        for (int j = 0; j < D; j++) {
            float proto = rnd(10 + y[i], j) > 0 ? 1.0f : -1.0f;
            x[(size_t)i * D + j] = 0.5f * proto + rnd(3, (size_t)i * D + j);
        }
    }
    hfl_model_init_params(&s, p, 7);
    hfl_trainer_set_params(t, p);
    float acc0, acc;
    hfl_trainer_evaluate(t, x, y, N, &acc0);
    for (int k = 0; k < STEPS; k++) {
        int off = (k * B) % N;
        hfl_trainer_step(t, x + (size_t)off * D, y + off, B, 0.01f, 0.9f, 5e-4f);
    }
    float loss = hfl_trainer_evaluate(t, x, y, N, &acc);
    printf("synthetic: accuracy %.3f -> %.3f, loss %.4f\n", acc0, acc, loss);
    CHECK(acc0 < 0.5f);
    CHECK(acc > 0.95f);
    hfl_trainer_free(t);
    free(p);
    free(x);
    free(y);
}

/* hfl_trainer_create_eval: the batch is the largest whose `none` plan fits
 * the cap (the planner's arena at that batch fits, one more does not), batch
 * 1 under any cap, and the loss over chunks equals a one-chunk trainer's. */
static void test_eval_trainer(const hfl_backend *be) {
    enum { N = 37 };
    hfl_model_spec s;
    hfl_model_builtin("mlp", &s, NULL);
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_trainer_create_eval(&s, be, 0, SIZE_MAX, err) == NULL && err[0]);
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = {.ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .act_elem_bytes = sizeof(float)};
    hfl_plan_config_for_backend(&cfg, be);
    cfg.batch = 6;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == 0);
    size_t cap = p->arena_bytes + 100; /* batch 6 fits, 7 (another 784-float input) does not */
    hfl_trainer *t = hfl_trainer_create_eval(&s, be, 500, cap, err);
    CHECK(t != NULL);
    int b = t ? hfl_trainer_plan(t)->cfg.batch : 0;
    CHECK(b == 6);
    CHECK(t && hfl_trainer_device_bytes(t) <= cap);
    cfg.batch = b + 1;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == 0 && p->arena_bytes > cap);
    hfl_trainer *one = hfl_trainer_create_eval(&s, be, 500, 0, err), *all = hfl_trainer_create(&s, be, N);
    CHECK(one && hfl_trainer_plan(one)->cfg.batch == 1);
    hfl_trainer *big = hfl_trainer_create_eval(&s, be, 3, SIZE_MAX, err);
    CHECK(big && hfl_trainer_plan(big)->cfg.batch == 3);
    float *w = hfl_malloc(s.n_params * sizeof(float)), *x = hfl_malloc((size_t)N * 784 * sizeof(float));
    int32_t y[N];
    hfl_model_init_params(&s, w, 5);
    for (int i = 0; i < N * 784; i++) x[i] = rnd(3, i);
    for (int i = 0; i < N; i++) y[i] = i % 10;
    float acc_t = 0, acc_all = 0;
    if (t && one && all) {
        hfl_trainer_set_params(t, w), hfl_trainer_set_params(all, w), hfl_trainer_set_params(one, w);
        float lt = hfl_trainer_evaluate(t, x, y, N, &acc_t), la = hfl_trainer_evaluate(all, x, y, N, &acc_all);
        float l1 = hfl_trainer_evaluate(one, x, y, N, NULL);
        CHECK(isfinite(la) && la > 1.0f);
        CHECK_CLOSE(lt, la, 1e-6, 1e-6);
        CHECK_CLOSE(l1, la, 1e-6, 1e-6);
        CHECK(acc_t == acc_all);
    }
    hfl_trainer_free(t), hfl_trainer_free(one), hfl_trainer_free(all), hfl_trainer_free(big);
    free(w), free(x), free(p);
}

static void case_params_roundtrip(void) { test_params_roundtrip(hfl_backend_cpu()); }
static void case_mlp_gradient(void) { test_mlp_gradient(hfl_backend_cpu()); }
static void case_evaluate_matches_step(void) { test_evaluate_matches_step(hfl_backend_cpu()); }
static void case_mlp_learns(void) { test_mlp_learns(hfl_backend_cpu()); }
static void case_eval_trainer(void) { test_eval_trainer(hfl_backend_cpu()); }

static const check_case cases[] = {
    {"specs", test_specs},
    {"init", test_init},
    {"params_roundtrip", case_params_roundtrip},
    {"mlp_gradient", case_mlp_gradient},
    {"evaluate_matches_step", case_evaluate_matches_step},
    {"mlp_learns", case_mlp_learns},
    {"eval_trainer", case_eval_trainer},
};

int main(int argc, char **argv) {
    return check_run("test_model", cases, CHECK_CASES(cases), argc, argv);
}
