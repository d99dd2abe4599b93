/* test_adamw.c: AdamW as the trainer's optimizer (model/model.h, OPTIMIZERS)
 * and its moments in the planner and the chooser.
 *
 * Oracles, none of them the trainer's own code run twice:
 *   - the algorithm written here in double from Loshchilov & Hutter 2019
 *     (Algorithm 2, decoupled weight decay) in torch.optim.AdamW's form
 *     (w *= 1 - lr wd; m, v moving averages; bias-corrected m / (sqrt(v) +
 *     eps)), fed each step the gradients the trainer computed (read back
 *     after a forward and backward pass, themselves checked elsewhere against finite
 *     differences and PyTorch): four steps of the trainer's fp32 (master)
 *     weights must follow it within fp32 rounding, in fp32, bf16 and fp16.
 *     The kernel's single step is checked against torch.optim.AdamW in
 *     kernels_lm_torch; this checks the trainer's step count, bias
 *     corrections, lr and decay wiring and the moments' persistence;
 *   - reset_optimizer starts over: a step after it equals a new trainer's
 *     first step, bit for bit (moments and step count both reset), and
 *     without set_adamw after it the step is plain SGD's, bit for bit;
 *   - fp16: a step skipped for overflowing gradients is not counted, as
 *     GradScaler skips optimizer.step(): skip-then-two-steps equals the same
 *     two steps alone, bit for bit (the bias corrections would differ);
 *   - the moments are 2 n_params fp32 values alive over the whole step: a
 *     plan with them has exactly that many more bytes live at its peak, and
 *     the chooser's candidates grow by at least as much. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/philox.h"
#include "plan/chooser.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

#define ROWS 16
#define STEPS 4
static const float LR = 2e-3f, B1 = 0.9f, B2 = 0.95f, EPS = 1e-8f, WD = 0.1f;

static hfl_trainer *make(const hfl_model_spec *spec, hfl_precision p, int adamw, hfl_plan *plan) {
    hfl_plan_config cfg = {.batch = ROWS, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .adamw = adamw, .precision = p};
    char err[HFL_ERR_LEN];
    hfl_trainer *t = NULL;
    if (hfl_plan_make(spec, &cfg, plan, err) == 0)
        t = hfl_trainer_create_plan(spec, hfl_backend_cpu(), plan, err);
    if (!t) fprintf(stderr, "test_adamw: %s\n", err);
    if (t && adamw) hfl_trainer_set_adamw(t, B1, B2, EPS);
    if (t && p == HFL_PREC_FP16) hfl_trainer_set_loss_scale(t, 1024.0f);
    return t;
}

/* Batch k of the test: inputs in [0, 1), labels 0..9. */
static void batch(const hfl_model_spec *s, int k, float *x, int32_t *y) {
    for (size_t i = 0; i < (size_t)ROWS * s->in_dim; i++)
        x[i] = hfl_u01(hfl_philox_u32(5, (uint64_t)k, 0, 0, 0, i));
    for (int i = 0; i < ROWS; i++) y[i] = (int32_t)(hfl_philox_u32(5, (uint64_t)k, 0, 0, 1, (uint64_t)i) % 10);
}

static void run(hfl_precision p) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin("mlp", &spec, err) == 0);
    size_t n = spec.n_params;
    const char *pn = hfl_precision_name(p);
    float *w0 = hfl_malloc(sizeof(float) * n), *got = hfl_malloc(sizeof(float) * n);
    float *want = hfl_malloc(sizeof(float) * n), *g = hfl_malloc(sizeof(float) * n);
    float *x = hfl_malloc(sizeof(float) * ROWS * spec.in_dim);
    double *w = hfl_malloc(sizeof(double) * n), *m = hfl_calloc(n, sizeof(double)),
           *v = hfl_calloc(n, sizeof(double));
    int32_t y[ROWS];
    hfl_model_init_params(&spec, w0, 3);
    hfl_plan *plan = hfl_malloc(sizeof *plan), *bare = hfl_malloc(sizeof *bare);
    hfl_trainer *t = make(&spec, p, 1, plan), *u = make(&spec, p, 0, bare);
    if (!CHECK(t && u)) return;

    /* The moments in the plan. */
    CHECK(plan->adam_m >= 0 && plan->adam_v >= 0 && bare->adam_m == -1 && bare->adam_v == -1);
    int mv[2] = {plan->adam_m, plan->adam_v};
    for (int k = 0; k < 2 && mv[0] >= 0 && mv[1] >= 0; k++) {
        const hfl_plan_buffer *b = &plan->buffers[mv[k]];
        CHECK(b->bytes == n * sizeof(float) && b->category == HFL_BUF_OPTIMIZER);
        CHECK(b->first_op == 0 && b->last_op == plan->n_ops - 1);
    }
    CHECK(plan->live_peak == bare->live_peak + 2 * n * sizeof(float));

    /* Four steps against the double-precision algorithm. */
    hfl_trainer_set_params(t, w0);
    hfl_trainer_reset_optimizer(t);
    hfl_trainer_set_adamw(t, B1, B2, EPS); /* reset goes back to SGD */
    hfl_trainer_get_params(t, got);
    for (size_t i = 0; i < n; i++) w[i] = got[i];
    double worst = 0, moved = 0;
    for (int k = 1; k <= STEPS; k++) {
        batch(&spec, k, x, y);
        hfl_trainer_accumulate(t, x, y, ROWS, ROWS);
        hfl_trainer_get_grads(t, g);
        hfl_trainer_apply(t, LR, 0.0f, WD);
        hfl_trainer_get_params(t, got);
        double bc1 = 1 - pow(B1, k), bc2 = 1 - pow(B2, k);
        for (size_t i = 0; i < n; i++) {
            w[i] *= 1 - (double)LR * WD;
            m[i] = B1 * m[i] + (1 - (double)B1) * g[i];
            v[i] = B2 * v[i] + (1 - (double)B2) * (double)g[i] * g[i];
            w[i] -= LR * (m[i] / bc1) / (sqrt(v[i] / bc2) + EPS);
            double d = fabs(w[i] - got[i]);
            if (d > worst) worst = d;
            if (fabs(w[i] - w0[i]) > moved) moved = fabs(w[i] - w0[i]);
        }
    }
    printf("test_adamw: mlp %s: %d steps within %.2e of the double-precision algorithm (moved up to %.2e)\n",
           pn, STEPS, worst, moved);
    CHECK(moved > 0.5 * STEPS * LR);
    CHECK(worst <= 2e-6 * STEPS * LR + 1e-7);

    /* reset_optimizer: a step after it is a new trainer's first step. */
    hfl_trainer *f = make(&spec, p, 1, bare);
    if (!CHECK(f != NULL)) return;
    batch(&spec, 1, x, y);
    hfl_trainer_set_params(t, w0);
    hfl_trainer_reset_optimizer(t);
    hfl_trainer_set_adamw(t, B1, B2, EPS); /* reset goes back to SGD */
    if (p == HFL_PREC_FP16) hfl_trainer_set_loss_scale(t, 1024.0f);
    hfl_trainer_step(t, x, y, ROWS, LR, 0.0f, WD);
    hfl_trainer_get_params(t, got);
    hfl_trainer_set_params(f, w0);
    hfl_trainer_step(f, x, y, ROWS, LR, 0.0f, WD);
    hfl_trainer_get_params(f, want);
    CHECK_MSG(memcmp(got, want, sizeof(float) * n) == 0, "%s: a step after reset differs from a first step", pn);

    /* fp16: a skipped step does not count. */
    if (p == HFL_PREC_FP16) {
        hfl_trainer_set_params(t, w0);
        hfl_trainer_reset_optimizer(t);
        hfl_trainer_set_adamw(t, B1, B2, EPS);
        uint64_t skipped = hfl_trainer_skipped_steps(t);
        hfl_trainer_set_loss_scale(t, 1e38f); /* gradients overflow fp16 */
        hfl_trainer_step(t, x, y, ROWS, LR, 0.0f, WD);
        CHECK(hfl_trainer_skipped_steps(t) == skipped + 1);
        hfl_trainer_get_params(t, got);
        CHECK(memcmp(got, w0, sizeof(float) * n) == 0);
        hfl_trainer_set_loss_scale(t, 1024.0f);
        hfl_trainer_set_params(f, w0);
        hfl_trainer_reset_optimizer(f);
        hfl_trainer_set_adamw(f, B1, B2, EPS);
        hfl_trainer_set_loss_scale(f, 1024.0f);
        for (int k = 1; k <= 2; k++) {
            batch(&spec, k, x, y);
            hfl_trainer_step(t, x, y, ROWS, LR, 0.0f, WD);
            hfl_trainer_step(f, x, y, ROWS, LR, 0.0f, WD);
        }
        hfl_trainer_get_params(t, got);
        hfl_trainer_get_params(f, want);
        CHECK_MSG(memcmp(got, want, sizeof(float) * n) == 0, "fp16: a skipped step changed the steps after it");
    }
    hfl_trainer_free(f);

    /* reset goes back to SGD: without set_adamw the next step is SGD's */
    hfl_trainer *tr[2] = {t, u};
    float *out[2] = {got, want};
    for (int k = 0; k < 2; k++) {
        hfl_trainer_set_params(tr[k], w0);
        hfl_trainer_reset_optimizer(tr[k]);
        hfl_trainer_set_loss_scale(tr[k], p == HFL_PREC_FP16 ? 1024.0f : 1.0f);
        hfl_trainer_step(tr[k], x, y, ROWS, LR, 0.0f, WD);
        hfl_trainer_get_params(tr[k], out[k]);
    }
    CHECK_MSG(memcmp(got, want, sizeof(float) * n) == 0, "%s: a step after reset is not SGD's", pn);

    /* The chooser plans the moments when asked. */
    hfl_chooser_input in = {.budget = UINT64_MAX / 4, .gflops = {100, 100, 100},
                            .precisions = 1u << p, .max_batch = 32};
    hfl_choice *c0 = hfl_malloc(sizeof *c0), *c1 = hfl_malloc(sizeof *c1);
    CHECK(hfl_choose(&spec, &in, c0, err) == 0);
    in.opt_state = HFL_OPT_ADAMW;
    CHECK(hfl_choose(&spec, &in, c1, err) == 0);
    CHECK(c0->n == c1->n && c0->n > 0);
    for (int i = 0; i < c0->n && i < c1->n; i++)
        CHECK(c1->rows[i].arena >= c0->rows[i].arena + 2 * n * sizeof(float));
    hfl_plan_config cc;
    hfl_candidate_config(&c1->rows[0], HFL_OPT_ADAMW, &cc);
    CHECK(cc.adamw == 1 && cc.momentum == 0 && cc.anchor == 0);
    free(c0), free(c1);

    hfl_trainer_free(t), hfl_trainer_free(u);
    free(plan), free(bare), free(w0), free(got), free(want), free(g), free(x), free(w), free(m), free(v);
}

static void case_parse(void) {
    char err[HFL_ERR_LEN];
    hfl_optimizer o;
    CHECK(hfl_optimizer_parse("adamw", &o, err) == 0 && o == HFL_OPTIM_ADAMW);
    CHECK(hfl_optimizer_parse("sgd", &o, err) == 0 && o == HFL_OPTIM_SGD);
    CHECK(hfl_optimizer_parse("adam", &o, err) != 0 && strstr(err, "adamw"));
}

static void case_fp32(void) { run(HFL_PREC_FP32); }
static void case_bf16(void) { run(HFL_PREC_BF16); }
static void case_fp16(void) { run(HFL_PREC_FP16); }

static const check_case cases[] = {
    {"parse", case_parse},
    {"fp32", case_fp32},
    {"bf16", case_bf16},
    {"fp16", case_fp16},
};

int main(int argc, char **argv) {
    return check_run("test_adamw", cases, CHECK_CASES(cases), argc, argv);
}
