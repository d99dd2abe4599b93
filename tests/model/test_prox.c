/* test_prox.c: FedProx's proximal term in the trainer (model/model.h,
 * hfl_trainer_set_prox) and its anchor in the planner and the chooser.
 *
 * Oracles, none of them the code's own formula run twice:
 *   - with a zero anchor the proximal gradient mu * w is exactly L2 weight
 *     decay mu (tested by hand in test_backend_cpu), so a step with prox mu
 *     and no decay must equal, bit for bit, a step with decay mu and no prox;
 *   - with a random anchor a, one step without momentum from w0 must move the
 *     fp32 (master) weights to w0 - lr * (g + mu * (w0 - a)), g the step's
 *     gradient read back from a forward and backward pass (itself checked against finite
 *     differences in test_layers and test_cnn), computed here in double;
 *   - mu = 0 after a nonzero mu is the plain step again;
 *   - the anchor is n_params fp32 values alive over the whole step: a plan
 *     with it has exactly that many more bytes live at its peak, and the
 *     chooser's candidates grow by at least as much;
 *   - a measured step (plan/measure.h, what a client verifies its plan with)
 *     pays for the anchor's pages: at least 90% of its bytes more than the
 *     same step without it (an anchor only written when a round starts would
 *     be missed, and a tight client would breach its budget in round 1).
 * For mlp in fp32, bf16 and fp16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/philox.h"
#include "plan/chooser.h"
#include "plan/measure.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

#define ROWS 16

static hfl_trainer *make(const hfl_model_spec *spec, hfl_precision p, int anchor, hfl_plan *plan) {
    hfl_plan_config cfg = {.batch = ROWS, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = 1, .anchor = anchor, .precision = p};
    char err[HFL_ERR_LEN];
    hfl_trainer *t = NULL;
    if (hfl_plan_make(spec, &cfg, plan, err) == 0)
        t = hfl_trainer_create_plan(spec, hfl_backend_cpu(), plan, err);
    if (!t) fprintf(stderr, "test_prox: %s\n", err);
    return t;
}

static void step(hfl_trainer *t, const float *w0, const float *anchor, float mu, float wd,
                 const float *x, const int32_t *y, float *out) {
    if (anchor) {
        hfl_trainer_set_params(t, anchor);
        hfl_trainer_set_prox(t, mu);
    }
    hfl_trainer_set_params(t, w0);
    hfl_trainer_reset_optimizer(t);
    hfl_trainer_step(t, x, y, ROWS, 0.05f, 0.0f, wd);
    hfl_trainer_get_params(t, out);
}

static void run(hfl_precision p) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin("mlp", &spec, err) == 0);
    size_t n = spec.n_params;
    float *w0 = hfl_malloc(sizeof(float) * n), *a = hfl_malloc(sizeof(float) * n);
    float *zero = hfl_calloc(n, sizeof(float)), *x = hfl_malloc(sizeof(float) * ROWS * spec.in_dim);
    float *got = hfl_malloc(sizeof(float) * n), *want = hfl_malloc(sizeof(float) * n);
    float *g = hfl_malloc(sizeof(float) * n);
    int32_t y[ROWS];
    hfl_model_init_params(&spec, w0, 3);
    hfl_model_init_params(&spec, a, 4);
    for (size_t i = 0; i < (size_t)ROWS * spec.in_dim; i++) x[i] = hfl_u01(hfl_philox_u32(5, 0, 0, 0, 0, i));
    for (int i = 0; i < ROWS; i++) y[i] = (int32_t)(hfl_philox_u32(5, 0, 0, 0, 1, (uint64_t)i) % 10);
    hfl_plan *plan = hfl_malloc(sizeof *plan), *bare = hfl_malloc(sizeof *bare);
    hfl_trainer *t = make(&spec, p, 1, plan), *u = make(&spec, p, 0, bare);
    CHECK(t && u);
    if (!t || !u) return;
    const char *pn = hfl_precision_name(p);
    const float mu = 0.3f;

    /* The anchor in the plan: n_params fp32 values, live at every op. */
    CHECK(plan->anchor >= 0 && bare->anchor == -1);
    CHECK(plan->buffers[plan->anchor].bytes == n * sizeof(float));
    CHECK(plan->buffers[plan->anchor].category == HFL_BUF_OPTIMIZER);
    CHECK(plan->buffers[plan->anchor].first_op == 0 &&
          plan->buffers[plan->anchor].last_op == plan->n_ops - 1);
    CHECK(plan->live_peak == bare->live_peak + n * sizeof(float));
    CHECK(plan->arena_bytes >= bare->arena_bytes + n * sizeof(float));

    /* A zero anchor: prox mu is weight decay mu. */
    step(t, w0, zero, mu, 0.0f, x, y, got);
    step(u, w0, NULL, 0.0f, mu, x, y, want);
    CHECK(memcmp(got, want, sizeof(float) * n) == 0);

    /* A random anchor: w0 - lr * (g + mu * (w0 - a)) on the fp32 weights. */
    hfl_trainer_set_params(u, w0);
    hfl_trainer_accumulate(u, x, y, ROWS, ROWS);
    hfl_trainer_get_grads(u, g);
    hfl_trainer_get_params(u, want); /* w0 as the trainer holds it (exact: set writes fp32) */
    step(t, w0, a, mu, 0.0f, x, y, got);
    double worst = 0, moved = 0, pull = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)want[i] - 0.05 * ((double)g[i] + (double)mu * ((double)want[i] - a[i]));
        double d = fabs(e - got[i]);
        if (d > worst) worst = d;
        if (fabs((double)got[i] - want[i]) > moved) moved = fabs((double)got[i] - want[i]);
        pull += fabs(0.05 * mu * ((double)want[i] - a[i]));
    }
    printf("test_prox: mlp %s: one step with a random anchor within %.2e of the formula (moved up to %.2e; "
           "proximal pull %.3g summed)\n", pn, worst, moved, pull);
    CHECK(moved > 0 && pull > 1.0);
    CHECK(worst <= 1e-6 * (moved > 1 ? moved : 1));

    /* mu = 0 turns it off: the plain step. */
    hfl_trainer_set_prox(t, 0.0f);
    step(t, w0, NULL, 0.0f, 0.0f, x, y, got);
    step(u, w0, NULL, 0.0f, 0.0f, x, y, want);
    CHECK(memcmp(got, want, sizeof(float) * n) == 0);

    /* The chooser plans the anchor when asked: every candidate grows by it. */
    hfl_chooser_input in = {.budget = UINT64_MAX / 4, .gflops = {100, 100, 100},
                            .precisions = 1u << p, .opt_state = HFL_OPT_MOMENTUM, .max_batch = 32};
    hfl_choice *c0 = hfl_malloc(sizeof *c0), *c1 = hfl_malloc(sizeof *c1);
    CHECK(hfl_choose(&spec, &in, c0, err) == 0);
    in.opt_state |= HFL_OPT_ANCHOR;
    CHECK(hfl_choose(&spec, &in, c1, err) == 0);
    CHECK(c0->n == c1->n && c0->n > 0);
    for (int i = 0; i < c0->n && i < c1->n; i++)
        CHECK(c1->rows[i].arena >= c0->rows[i].arena + n * sizeof(float));
    hfl_plan_config cc;
    hfl_candidate_config(&c1->rows[0], HFL_OPT_ANCHOR, &cc);
    CHECK(cc.anchor == 1 && cc.momentum == 0);
    hfl_candidate_config(&c1->rows[0], HFL_OPT_MOMENTUM, &cc);
    CHECK(cc.anchor == 0 && cc.momentum == 1);
    free(c0), free(c1);

    hfl_trainer_free(t), hfl_trainer_free(u);
    free(plan), free(bare), free(w0), free(a), free(zero), free(x), free(got), free(want), free(g);
}

static void measured(void) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin("mlp", &spec, err) == 0);
    float *w = hfl_malloc(sizeof(float) * spec.n_params), *x = hfl_calloc((size_t)ROWS * spec.in_dim, sizeof(float));
    int32_t y[ROWS] = {0};
    hfl_model_init_params(&spec, w, 3);
    uint64_t growth[2];
    for (int anchor = 0; anchor <= 1; anchor++) {
        hfl_plan *plan = hfl_malloc(sizeof *plan);
        hfl_plan_config cfg = {.batch = ROWS, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .momentum = 1,
                               .anchor = anchor};
        CHECK(hfl_plan_make(&spec, &cfg, plan, err) == 0);
        hfl_step_measure m;
        CHECK_MSG(hfl_measure_step_on(hfl_backend_cpu(), &spec, plan, w, x, y, NULL, 0, &m, err) == 0, "%s", err);
        growth[anchor] = m.growth;
        free(plan);
    }
    double extra = (double)growth[1] - (double)growth[0], bytes = 4.0 * (double)spec.n_params;
    printf("test_prox: a measured step grows %.0f bytes more with the anchor (%.0f bytes)\n", extra, bytes);
    CHECK(extra >= 0.9 * bytes);
    free(w), free(x);
}

static void case_fp32(void) { run(HFL_PREC_FP32); }
static void case_bf16(void) { run(HFL_PREC_BF16); }
static void case_fp16(void) { run(HFL_PREC_FP16); }

static const check_case cases[] = {
    {"fp32", case_fp32},
    {"bf16", case_bf16},
    {"fp16", case_fp16},
    {"measured", measured},
};

int main(int argc, char **argv) {
    return check_run("test_prox", cases, CHECK_CASES(cases), argc, argv);
}
