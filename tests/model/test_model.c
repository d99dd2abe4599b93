/* test_model.c: model specs, initialisation and the trainer on the CPU backend.
 *
 * Checks the built-in mlp's shape (199,210 parameters), the unknown-name
 * error, init bounds and determinism, parameter round trips, the whole mlp's
 * gradient against central differences on a small random batch, that
 * evaluate agrees with the step's loss, and that a few hundred SGD steps fit
 * a small synthetic separable problem to > 95% training accuracy; and that
 * an evaluation trainer takes the largest batch whose training arena fits
 * its cap (checked against the planner one batch up) and evaluates as a
 * full-batch trainer does; and that its forward-only plan gives a training
 * plan's loss and accuracy bits (mlp, cnn, gpt-tiny; fp32, bf16, fp16) from
 * an arena within bounds worked from the layer tables. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/philox.h"
#include "model/layers.h"
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

/* hfl_trainer_create_eval: the batch is the largest whose `none` training
 * plan fits the cap (the planner's arena at that batch fits, one more does
 * not: the batch evaluation ran at before forward-only plans), batch 1 under
 * any cap, the plan run is forward-only and within the cap, and the loss
 * over chunks equals a one-chunk trainer's. */
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
    CHECK(t && hfl_trainer_device_bytes(t) <= cap && hfl_trainer_plan(t)->cfg.forward_only);
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

static size_t up64(size_t x) { return (x + 63) / 64 * 64; }

/* Bounds on a forward-only arena at batch B from the layer tables alone
 * (model/layers.h), not from the planner. Every forward op needs at once the
 * weights, the labels (written at LOAD, read at LOSS), its layer's input and
 * output (perhaps one buffer for a layer that may run in place: the larger
 * of the two then),
 * saved activations and workspace, so the arena is at least their sum for
 * the worst layer. Above: no op needs more than the two activations of one
 * step of the chain (a layer's input and output, a_0 included), and nothing
 * else but the weights, the labels and that layer's saved activations and
 * workspace is alive at it when activations die at their last forward reader,
 * so the weights, the labels, the two largest activations and the largest
 * saved-plus-workspace of one layer, each 64-byte aligned, bound the bytes
 * alive at any op; an arena above that would be placement gaps on a plain
 * chain of lifetimes (seen: every case here at most 140 bytes above the lower
 * bound). A plan that borrows its weights (planner.h, BORROWED WEIGHTS)
 * holds none of them. */
static void forward_bounds(const hfl_model_spec *s, hfl_precision prec, int B, int borrowed, size_t *lo, size_t *hi) {
    size_t e = hfl_precision_bytes(prec), base_lo, base_hi, weights = borrowed ? 0 : s->n_params * e;
    size_t labels = (size_t)B * s->label_rows * sizeof(int32_t);
    base_lo = weights + labels;
    base_hi = up64(weights) + up64(labels);
    if (prec != HFL_PREC_FP32) { /* the fp32 masters the trainer stages weights through */
        base_lo += s->n_trainable * sizeof(float);
        base_hi += up64(s->n_trainable * sizeof(float));
    }
    size_t worst_op = 0, worst_extra = 0, act1 = up64((size_t)B * s->in_dim * e), act2 = 0;
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer *ly = &s->layers[l];
        const hfl_layer_ops *o = hfl_layer_ops_for(ly->kind);
        size_t in = (size_t)B * ly->in * e, out = (size_t)B * ly->out * e;
        size_t saved = o->saved_bytes ? o->saved_bytes(ly, prec, B) : 0;
        size_t ws = o->fwd_workspace_bytes(ly, prec, B);
        size_t op = (o->fwd_in_place ? (in > out ? in : out) : in + out) + saved + ws;
        if (op > worst_op) worst_op = op;
        if (up64(saved) + up64(ws) > worst_extra) worst_extra = up64(saved) + up64(ws);
        size_t a = up64(out);
        if (a > act1) act2 = act1, act1 = a;
        else if (a > act2) act2 = a;
    }
    if (prec != HFL_PREC_FP32) /* LOSS: one logit row and its gradient in fp32 */
        if (up64(2 * (size_t)s->n_classes * sizeof(float)) > worst_extra)
            worst_extra = up64(2 * (size_t)s->n_classes * sizeof(float));
    *lo = base_lo + worst_op;
    *hi = base_hi + act1 + act2 + worst_extra;
}

/* Evaluation with a forward-only plan gives a training plan's bits: the
 * same loss and accuracy, to the bit, over n samples in batches of B (the
 * last one short) with the same weights, from an arena that is smaller and
 * within forward_bounds. fp32 through hfl_trainer_create_eval, which on the
 * CPU borrows the weights (no copy of them in its arena), bf16/fp16 through
 * hfl_plan_make's forward_only. A forward-only trainer refuses to train and
 * is left as it was. */
static void eval_forward_only(const hfl_model_spec *s, hfl_precision prec, int B, int n) {
    const hfl_backend *be = hfl_backend_cpu();
    char err[HFL_ERR_LEN] = "";
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = {.batch = B, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .precision = prec};
    hfl_plan_config_for_backend(&cfg, be);
    REQUIRE_MSG(hfl_plan_make(s, &cfg, p, err) == 0, "%s", err);
    hfl_trainer *old = hfl_trainer_create_plan(s, be, p, err), *fwd = NULL;
    if (prec == HFL_PREC_FP32) {
        fwd = hfl_trainer_create_eval(s, be, B, SIZE_MAX, err);
    } else {
        cfg.forward_only = 1;
        REQUIRE_MSG(hfl_plan_make(s, &cfg, p, err) == 0, "%s", err);
        fwd = hfl_trainer_create_plan(s, be, p, err);
    }
    REQUIRE_MSG(old && fwd, "%s", err);
    const hfl_plan *fp = hfl_trainer_plan(fwd);
    CHECK(fp->cfg.forward_only && fp->cfg.batch == B);
    CHECK(fp->grads == -1 && fp->optimizer_op == -1 && fp->n_ops == fp->loss_op + 1);
    CHECK(fp->ops[fp->loss_op].out == -1);
    for (int i = 0; i < fp->n_buffers; i++)
        CHECK(fp->buffers[i].category != HFL_BUF_GRADS && fp->buffers[i].category != HFL_BUF_OPTIMIZER);
    int borrowed = prec == HFL_PREC_FP32; /* create_eval on the CPU */
    CHECK(borrowed ? fp->params == -1 && fp->cfg.borrow_params : fp->params >= 0);
    size_t lo, hi;
    forward_bounds(s, prec, B, borrowed, &lo, &hi);
    size_t fa = hfl_trainer_device_bytes(fwd), oa = hfl_trainer_device_bytes(old);
    printf("%s %s batch %d: forward-only arena %zu bytes (bounds %zu..%zu), training plan's %zu "
           "(%.2fx, %zu fewer; gradients alone %zu)\n", s->name, hfl_precision_name(prec), B, fa, lo,
           hi, oa, (double)oa / (double)fa, oa - fa, s->n_trainable * sizeof(float));
    CHECK(lo <= fa && fa <= hi);
    /* Smaller by the gradients at least (and the weights when borrowed):
     * whole-step buffers of the training plan and nothing of this one. */
    CHECK(fa + s->n_trainable * sizeof(float) + (borrowed ? s->n_params * sizeof(float) : 0) <= oa);

    size_t D = (size_t)s->in_dim, R = (size_t)s->label_rows;
    float *w = hfl_malloc(s->n_params * sizeof(float)), *x = hfl_malloc((size_t)n * D * sizeof(float));
    float *back = hfl_malloc(s->n_params * sizeof(float));
    int32_t *y = hfl_malloc((size_t)n * R * sizeof(int32_t));
    int vocab = s->layers[0].kind == HFL_LAYER_EMBED ? s->layers[0].vocab : 0;
    hfl_model_init_params(s, w, 11);
    for (size_t i = 0; i < (size_t)n * D; i++)
        x[i] = vocab ? (float)(hfl_philox_u32(5, 99, 0, 0, 7, i) % (uint32_t)vocab) : rnd(7, i);
    for (size_t i = 0; i < (size_t)n * R; i++)
        y[i] = (int32_t)(hfl_philox_u32(5, 99, 0, 0, 8, i) % (uint32_t)s->n_classes);
    hfl_trainer_set_params(old, w);
    hfl_trainer_set_params(fwd, w);
    float acc_o = -1, acc_f = -2;
    float loss_o = hfl_trainer_evaluate(old, x, y, n, &acc_o);
    float loss_f = hfl_trainer_evaluate(fwd, x, y, n, &acc_f);
    printf("  loss %.9g / %.9g, accuracy %.9g / %.9g (training plan / forward-only)\n", (double)loss_o,
           (double)loss_f, (double)acc_o, (double)acc_f);
    CHECK(isfinite(loss_o) && loss_o > 0.0f);
    CHECK(memcmp(&loss_o, &loss_f, sizeof loss_o) == 0);
    CHECK(memcmp(&acc_o, &acc_f, sizeof acc_o) == 0);

    /* Asked to train, it refuses and nothing moves. */
    CHECK(isnan(hfl_trainer_step(fwd, x, y, 1, 0.1f, 0.0f, 0.0f)));
    CHECK(isnan(hfl_trainer_accumulate(fwd, x, y, 2, 1)));
    hfl_trainer_stage(fwd, x, y, 1);
    CHECK(hfl_trainer_grads_staged(fwd, 1, 1, 1) == -1);
    CHECK(hfl_trainer_step_staged(fwd, 0.1f, 0.0f, 0.0f) == -1);
    CHECK(hfl_trainer_apply(fwd, 0.1f, 0.0f, 0.0f) == -1);
    CHECK(hfl_trainer_get_grads(fwd, back) == -1);
    double sum = 0;
    hfl_trainer_take_loss(fwd, &sum, NULL, NULL); /* the staged batch never ran */
    CHECK(sum == 0.0);
    hfl_trainer_get_params(fwd, back);
    hfl_trainer_get_params(old, w);
    CHECK(memcmp(w, back, s->n_params * sizeof(float)) == 0);
    hfl_trainer_free(old), hfl_trainer_free(fwd);
    free(w), free(back), free(x), free(y), free(p);
}

/* scenarios/models/gpt-tiny.json: two blocks at T = 32, C = 32, 2 heads. */
static const char gpt_tiny[] =
    "{\"name\": \"gpt-tiny\", \"input\": [32], \"layers\": [{\"type\": \"embedding\", \"vocab\": 256, "
    "\"width\": 32}, {\"type\": \"gpt_block\", \"heads\": 2}, {\"type\": \"gpt_block\", \"heads\": 2}, "
    "{\"type\": \"lm_head\"}]}";

static void test_eval_forward_only(void) {
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    REQUIRE(hfl_model_builtin("mlp", &s, err) == 0);
    eval_forward_only(&s, HFL_PREC_FP32, 6, 37);
    eval_forward_only(&s, HFL_PREC_BF16, 6, 37);
    REQUIRE(hfl_model_builtin("cnn", &s, err) == 0);
    eval_forward_only(&s, HFL_PREC_FP32, 4, 11);
    REQUIRE_MSG(hfl_model_spec_from_json(gpt_tiny, strlen(gpt_tiny), &s, err) == 0, "%s", err);
    eval_forward_only(&s, HFL_PREC_FP32, 3, 7);
    eval_forward_only(&s, HFL_PREC_FP16, 3, 7);
    /* What a forward-only plan cannot be. */
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = {.batch = 2, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .forward_only = 1, .momentum = 1};
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1);
    CHECK(strcmp(err, "planner: a forward-only plan keeps no optimizer state (momentum, anchor or "
                      "AdamW asked)") == 0);
    cfg.momentum = 0, cfg.ckpt = HFL_CKPT_SQRT;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1);
    CHECK(strcmp(err, "planner: a forward-only plan stores nothing for a backward (checkpoint kind "
                      "sqrt asked)") == 0);
    free(p);
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
    {"eval_forward_only", test_eval_forward_only},
};

int main(int argc, char **argv) {
    return check_run("test_model", cases, CHECK_CASES(cases), argc, argv);
}
