/* test_accumulate.c: gradient accumulation (model/model.h, GRADIENT
 * ACCUMULATION) against the full batch's gradients.
 *
 * The oracle is the trainer's full-batch gradient of the same rows (itself
 * checked against finite differences in test_layers/test_conv/test_cnn): a
 * trainer planned for a micro-batch m runs the 32 rows as ceil(32/m)
 * micro-batches (m = 8: even; m = 5: a short last one; m = 1: per sample)
 * and must leave the same gradient. For mlp and cnn, in fp32, bf16 and fp16:
 *   fp32: every element within 1e-6 of the largest gradient element, and a
 *         relative L2 error under 1e-6: the sums over rows are only
 *         regrouped (per micro-batch, then across); seen: up to 2e-7;
 *   bf16/fp16: the activations are rounded per element to 2 bytes in both
 *         runs, but a GEMM may round differently for a different row count
 *         and an fp16 gradient differently under a different grouping, so
 *         within 5e-4 of the largest element and in L2 (one bf16 rounding
 *         is 4e-3 relative); seen: up to 7e-5.
 * The loss of the accumulated step equals the full batch's (same rows, same
 * per-row losses summed in double). And one optimizer step (momentum 0.9,
 * weight decay) on the accumulated gradient moves the weights as the full
 * batch's step does, within the same tolerance times the learning rate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

#define ROWS 32

static hfl_trainer *make(const hfl_model_spec *spec, int batch, hfl_precision p) {
    hfl_plan_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.batch = batch;
    cfg.ckpt = HFL_CKPT_NONE;
    cfg.ckpt_budget = SIZE_MAX;
    cfg.precision = p;
    cfg.momentum = 1;
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    char err[HFL_ERR_LEN];
    hfl_trainer *t = NULL;
    if (hfl_plan_make(spec, &cfg, plan, err) == 0) t = hfl_trainer_create_plan(spec, hfl_backend_cpu(), plan, err);
    if (!t) fprintf(stderr, "test_accumulate: %s\n", err);
    free(plan);
    return t;
}

/* Largest |a_i - b_i| over the largest |a_i|, and ||a - b|| / ||a||. */
static void compare(const float *a, const float *b, size_t n, double *max_rel, double *l2_rel) {
    double amax = 0, dmax = 0, a2 = 0, d2 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (fabs(a[i]) > amax) amax = fabs(a[i]);
        if (d > dmax || isnan(d)) dmax = isnan(d) ? INFINITY : d;
        a2 += (double)a[i] * a[i];
        d2 += d * d;
    }
    *max_rel = amax > 0 ? dmax / amax : dmax;
    *l2_rel = a2 > 0 ? sqrt(d2 / a2) : sqrt(d2);
}

static void run(const char *model, hfl_precision p, int micro) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin(model, &spec, err) == 0);
    size_t n = spec.n_params;
    float *w = hfl_malloc(sizeof(float) * n), *x = hfl_malloc(sizeof(float) * ROWS * spec.in_dim);
    int32_t y[ROWS];
    hfl_model_init_params(&spec, w, 7);
    for (size_t i = 0; i < (size_t)ROWS * spec.in_dim; i++) x[i] = hfl_u01(hfl_philox_u32(11, 0, 0, 0, 0, i));
    for (int i = 0; i < ROWS; i++) y[i] = (int32_t)(hfl_philox_u32(11, 0, 0, 0, 1, (uint64_t)i) % 10);

    hfl_trainer *full = make(&spec, ROWS, p), *acc = make(&spec, micro, p);
    CHECK(full && acc);
    if (!full || !acc) return;
    float *g_full = hfl_malloc(sizeof(float) * n), *g_acc = hfl_malloc(sizeof(float) * n);
    hfl_trainer_set_params(full, w);
    hfl_trainer_set_params(acc, w);
    float l_full = hfl_trainer_accumulate(full, x, y, ROWS, ROWS);
    float l_acc = hfl_trainer_accumulate(acc, x, y, ROWS, micro);
    hfl_trainer_get_grads(full, g_full);
    hfl_trainer_get_grads(acc, g_acc);
    double max_rel, l2_rel;
    compare(g_full, g_acc, n, &max_rel, &l2_rel);
    double tol = p == HFL_PREC_FP32 ? 1e-6 : 5e-4;
    const char *pn = hfl_precision_name(p);
    printf("test_accumulate: %s %s %d x %d: loss %.7f vs %.7f, grads max %.2e l2 %.2e of the largest\n",
           model, pn, (ROWS + micro - 1) / micro, micro, (double)l_full, (double)l_acc, max_rel, l2_rel);
    CHECK(fabsf(l_full - l_acc) <= 1e-6f * fabsf(l_full));
    CHECK(max_rel <= tol);
    CHECK(l2_rel <= tol);

    /* One optimizer step on each (same lr, momentum, decay) from the same weights. */
    hfl_trainer_apply(full, 0.1f, 0.9f, 1e-4f);
    hfl_trainer_apply(acc, 0.1f, 0.9f, 1e-4f);
    float *w_full = hfl_malloc(sizeof(float) * n), *w_acc = hfl_malloc(sizeof(float) * n);
    hfl_trainer_get_params(full, w_full);
    hfl_trainer_get_params(acc, w_acc);
    double moved_max = 0, diff_max = 0;
    for (size_t i = 0; i < n; i++) {
        double moved = fabs((double)w_full[i] - w[i]), d = fabs((double)w_full[i] - w_acc[i]);
        if (moved > moved_max) moved_max = moved;
        if (d > diff_max) diff_max = d;
    }
    CHECK(moved_max > 0);
    CHECK(diff_max <= tol * moved_max + 1e-7);
    hfl_trainer_free(full);
    hfl_trainer_free(acc);
    free(w);
    free(x);
    free(g_full);
    free(g_acc);
    free(w_full);
    free(w_acc);
}

/* One model in each precision, over 8, 5 and 1 micro-batches. */
static void run_model(const char *model) {
    static const int micros[] = {8, 5, 1};
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++)
        for (int k = 0; k < 3; k++) run(model, (hfl_precision)p, micros[k]);
}

static void case_mlp(void) { run_model("mlp"); }
static void case_cnn(void) { run_model("cnn"); }

static const check_case cases[] = {
    {"mlp", case_mlp},
    {"cnn", case_cnn},
};

int main(int argc, char **argv) {
    return check_run("test_accumulate", cases, CHECK_CASES(cases), argc, argv);
}
