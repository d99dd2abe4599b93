/* test_step_ops.c: a step's ops listed from its plan (plan/step_ops.h) and
 * its time summed from per-op costs (plan/op_cost.h).
 *
 * The list against the profile wrapper's count of the same step run for
 * real (kernels/profile.h), op kind by op kind, exactly: mlp, an
 * accumulated step with a short last micro-batch, the cnn recomputing
 * under sqrt, gpt-kjv, fp16 (unscale and the loss scaler) and AdamW. The
 * sum against a step costed by hand from made-up costs; the costs' JSON
 * there and back, and refused where incomplete; the calibration's costs
 * through its forked child and kept in and read back from a state dir. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/profile.h"
#include "plan/choose.h"
#include "plan/op_cost.h"
#include "plan/step_ops.h"
#include "tests/check.h"
#include "util/util.h"

static void count_op(void *ctx, const hfl_step_op *op) { ((double *)ctx)[op->kind]++; }

/* One optimizer step of `step` rows in micro-batches of `batch`, run on the
 * profile wrapper as client/trial.c runs it, against hfl_step_ops' list. */
static void check_counts(const hfl_backend *inner, const char *model, int batch, int step, hfl_ckpt_kind ckpt,
                         hfl_precision prec, unsigned opt) {
    char err[HFL_ERR_LEN], path[1200];
    if (!strchr(model, '/')) snprintf(path, sizeof path, "%s", model);
    else snprintf(path, sizeof path, "%s/%s", getenv("HFL_SOURCE_ROOT") ? getenv("HFL_SOURCE_ROOT") : ".", model);
    hfl_model_spec spec;
    if (!CHECK_MSG(hfl_model_resolve(path, &spec, err) == 0, "%s", err)) return;
    hfl_candidate c = {.batch = batch, .accum = (step + batch - 1) / batch, .step_batch = step, .ckpt = ckpt,
                       .ckpt_budget = SIZE_MAX, .precision = prec};
    const hfl_backend *be = hfl_profile_wrap(inner);
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_trainer *t = NULL;
    if (CHECK_MSG(hfl_candidate_plan(&spec, be, &c, opt, plan, err) == 0, "%s", err) &&
        CHECK_MSG((t = hfl_trainer_create_plan(&spec, be, plan, err)) != NULL, "%s", err)) {
        if (opt & HFL_OPT_ADAMW) hfl_trainer_set_adamw(t, 0.9f, 0.999f, 1e-8f);
        float *x = hfl_calloc((size_t)batch * spec.in_dim, sizeof(float));
        int32_t *y = hfl_calloc((size_t)batch * spec.label_rows, sizeof(int32_t));
        hfl_synthetic_batch(&spec, batch, x, y);
        hfl_profile_report rep;
        hfl_profile_begin();
        for (int row = 0; row < step; row += batch) {
            int n = step - row < batch ? step - row : batch;
            hfl_trainer_stage(t, x, y, n);
            hfl_trainer_grads_staged(t, row == 0, row + n >= step, step);
        }
        hfl_trainer_apply(t, 0.01f, opt & HFL_OPT_ADAMW ? 0.0f : 0.9f, 0.0f);
        hfl_profile_end(1, &rep);
        double listed[HFL_OPK_COUNT] = {0}, total = 0;
        hfl_step_ops(plan, step, 0, count_op, listed);
        for (int k = 0; k < HFL_OPK_COUNT; k++) {
            double ran = 0;
            for (int i = 0; i < rep.n_rows; i++)
                if (!strcmp(rep.rows[i].name, hfl_op_kind_name((hfl_op_kind)k))) ran = rep.rows[i].count;
            CHECK_MSG(listed[k] == ran, "%s batch %d step %d %s on %s: %s listed %.0f, ran %.0f", spec.name, batch,
                      step, hfl_precision_name(prec), inner->host_memory ? "the CPU" : "a device-like table",
                      hfl_op_kind_name((hfl_op_kind)k), listed[k], ran);
            total += listed[k];
        }
        CHECK_MSG(total == rep.ops_per_step && total > 0, "%s: listed %.0f ops, ran %.0f", spec.name, total,
                  rep.ops_per_step);
        free(x);
        free(y);
        hfl_trainer_free(t);
    }
    free(plan);
}

static void test_counts_match_profile(void) {
    const hfl_backend *cpu = hfl_backend_cpu();
    check_counts(cpu, "mlp", 8, 8, HFL_CKPT_NONE, HFL_PREC_FP32, HFL_OPT_MOMENTUM);
    check_counts(cpu, "mlp", 4, 10, HFL_CKPT_NONE, HFL_PREC_FP32, HFL_OPT_MOMENTUM); /* 4 + 4 + 2 */
    check_counts(cpu, "mlp", 8, 8, HFL_CKPT_NONE, HFL_PREC_FP16, HFL_OPT_MOMENTUM);
    check_counts(cpu, "mlp", 8, 8, HFL_CKPT_NONE, HFL_PREC_BF16, HFL_OPT_ADAMW);
    check_counts(cpu, "cnn", 3, 3, HFL_CKPT_SQRT, HFL_PREC_FP32, HFL_OPT_MOMENTUM); /* recomputation */
    check_counts(cpu, "scenarios/models/gpt-kjv.json", 2, 2, HFL_CKPT_NONE, HFL_PREC_FP32, HFL_OPT_MOMENTUM);
    /* the plan a GPU trains with (kernels/backend.h: device memory, so each
     * micro-batch is staged by two prefetches; whole-batch conv chunks) */
    static hfl_backend gpu_like;
    gpu_like = *cpu;
    gpu_like.host_memory = 0;
    gpu_like.conv_chunk = HFL_CONV_CHUNK_MAX;
    check_counts(&gpu_like, "cnn", 8, 16, HFL_CKPT_NONE, HFL_PREC_FP32, HFL_OPT_MOMENTUM);
    gpu_like.conv_chunk = 3; /* chunks of 3, 3 and 2 */
    check_counts(&gpu_like, "cnn", 8, 8, HFL_CKPT_NONE, HFL_PREC_FP32, HFL_OPT_MOMENTUM);
}

/* The work recorded for the cnn's window ops at batch 1, by hand from its
 * layers (model/model.c): conv1 unfolds 1 channel of 28 x 28 by 5 x 5 taps
 * at 28 x 28 outputs (25 x 784 = 19,600), conv2 32 channels of 14 x 14 at
 * 14 x 14 (800 x 196 = 156,800); the pools read 2 x 2 windows of 32 x 14 x
 * 14 and 64 x 7 x 7 outputs (25,088 and 12,544). */
typedef struct {
    double im2col[4], pool[4];
    int n_im2col, n_pool, other;
} window_work;

static void take_window_work(void *ctx, const hfl_step_op *op) {
    window_work *w = ctx;
    double *set = op->kind == HFL_OPK_IM2COL ? w->im2col : op->kind == HFL_OPK_MAXPOOL_FWD ? w->pool : NULL;
    int *n = op->kind == HFL_OPK_IM2COL ? &w->n_im2col : &w->n_pool;
    if (!set) return;
    for (int i = 0; i < *n; i++)
        if (set[i] == op->work) return;
    if (*n < 4) set[(*n)++] = op->work;
    else w->other++;
}

static void test_window_work(void) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    if (!CHECK_MSG(hfl_model_resolve("cnn", &spec, err) == 0, "%s", err)) return;
    hfl_candidate c = {.batch = 1, .accum = 1, .step_batch = 1, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX};
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    if (CHECK_MSG(hfl_candidate_plan(&spec, hfl_backend_cpu(), &c, HFL_OPT_MOMENTUM, plan, err) == 0, "%s", err)) {
        window_work w = {0};
        hfl_step_ops(plan, 1, 0, take_window_work, &w);
        CHECK_MSG(w.n_im2col == 2 && w.other == 0 && ((w.im2col[0] == 19600 && w.im2col[1] == 156800) ||
                                                      (w.im2col[0] == 156800 && w.im2col[1] == 19600)),
                  "im2col work %g, %g (%d kinds)", w.im2col[0], w.im2col[1], w.n_im2col);
        CHECK_MSG(w.n_pool == 2 && w.pool[0] == 25088 && w.pool[1] == 12544, "max-pool work %g, %g (%d kinds)",
                  w.pool[0], w.pool[1], w.n_pool);
    }
    free(plan);
}

/* Made-up costs: a GEMM 1 us plus 1 ps per FLOP; every other op 2 us plus
 * 1 ns per element of work. */
static void fake_costs(hfl_op_costs *c) {
    memset(c, 0, sizeof *c);
    c->precisions = 1u << HFL_PREC_FP32;
    c->p[HFL_PREC_FP32].gemm[0] = 1e-6;
    c->p[HFL_PREC_FP32].gemm[1] = 1e-12;
    for (int k = 0; k < HFL_OPK_COUNT; k++) {
        if (k == HFL_OPK_GEMM || k == HFL_OPK_GEMM_STRIDED) continue; /* costed by gemm[] */
        c->p[HFL_PREC_FP32].fixed[k] = 2e-6;
        c->p[HFL_PREC_FP32].per_unit[k] = 1e-9;
    }
}

/* The mlp (784-200-200-10, SGD with momentum) at batch 8, costed by hand:
 *   8 GEMMs: forward and dW of each of 3 dense layers, dx of the last 2
 *     calls 8 x 1 us                                               8.0000 us
 *     FLOPs 2 x 8 x (784x200 + 200x200 + 200x10) twice (forward, dW)
 *           = 6,361,600, + 2 x 8 x (200x200 + 200x10) = 672,000 (dx)
 *           = 7,033,600 x 1 ps                                     7.0336 us
 *   9 other ops x 2 us: bias_grad x3, relu_fwd x2, relu_bwd x2,
 *     softmax_xent, sgd_step                                      18.0000 us
 *   their work x 1 ns: bias_grad 8x200 + 8x200 + 8x10 = 3,280;
 *     relu 2 x 8x200 = 3,200 each way; softmax_xent 8x10 = 80;
 *     sgd the 199,210 parameters (784x200+200 + 200x200+200 + 200x10+10)
 *     = 208,970                                                  208.9700 us
 *   total                                                        242.0036 us
 * Two micro-batches of 8 accumulated into one step of 16 pay everything but
 * the SGD step (2 us + 199.21 us) twice: 2 x 40.7936 + 201.21 = 282.7972 us. */
static void test_cost_sum_by_hand(void) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    if (!CHECK_MSG(hfl_model_resolve("mlp", &spec, err) == 0, "%s", err)) return;
    hfl_op_costs costs;
    fake_costs(&costs);
    hfl_candidate c = {.batch = 8, .accum = 1, .step_batch = 8, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX};
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    if (CHECK_MSG(hfl_candidate_plan(&spec, hfl_backend_cpu(), &c, HFL_OPT_MOMENTUM, plan, err) == 0, "%s", err)) {
        /* sums of a few hundred terms of a few us: far inside 1e-12 relative */
        CHECK_CLOSE(hfl_step_time_s(&costs, plan, 8, 0), 242.0036e-6, 0, 1e-12);
        CHECK_CLOSE(hfl_step_time_s(&costs, plan, 16, 0), 282.7972e-6, 0, 1e-12);
        /* FedProx adds one prox_grad over the parameters: 2 us + 199.21 us */
        CHECK_CLOSE(hfl_step_time_s(&costs, plan, 8, 1), 443.2136e-6, 0, 1e-12);
    }
    c.precision = HFL_PREC_BF16; /* no bf16 costs: 0, the chooser's cue for its FLOP model */
    if (CHECK_MSG(hfl_candidate_plan(&spec, hfl_backend_cpu(), &c, HFL_OPT_MOMENTUM, plan, err) == 0, "%s", err))
        CHECK(hfl_step_time_s(&costs, plan, 8, 0) == 0);
    free(plan);
    /* one strided call of 5 GEMMs 2 x 3 x 4 at g = (1 us, 1 ns a FLOP, 10 ns an
     * operand element): 5 x (1 + 0.048 + 0.26) us = 6.54 us */
    hfl_op_cost_table g = {.gemm = {1e-6, 1e-9, 1e-8}};
    hfl_step_op op = {.kind = HFL_OPK_GEMM_STRIDED, .m = 2, .n = 3, .k = 4, .count = 5};
    CHECK_CLOSE(hfl_op_cost_s(&g, &op), 6.54e-6, 0, 1e-12);
}

/* a and b alike to 1e-15 relative: cJSON prints 15 digits where they read
 * back within its own epsilon, so a figure may come back one ulp off. */
static int same_tables(const hfl_op_cost_table *a, const hfl_op_cost_table *b) {
    int ok = 1;
    for (int i = 0; i < 3; i++) ok &= CHECK_CLOSE(b->gemm[i], a->gemm[i], 0, 1e-15);
    for (int k = 0; k < HFL_OPK_COUNT; k++) {
        ok &= CHECK_CLOSE(b->fixed[k], a->fixed[k], 0, 1e-15);
        ok &= CHECK_CLOSE(b->per_unit[k], a->per_unit[k], 0, 1e-15);
    }
    return ok;
}

/* The chooser takes its samples/s from the costs, for a run batch of 16:
 * 8 x 2 accumulated costs 282.7972 us as above; 16 x 1 pays the same 8
 * GEMM calls (8 us) and 9 other calls (18 us), twice the FLOPs
 * (14.0672 us), and the work of 16 rows plus the parameters once:
 * 2 x (3,280 + 2 x 3,200 + 80) + 199,210 = 218,730 (218.73 us), 258.7972
 * us in all. Without costs its FLOP model, and it says which. */
static void test_chooser_uses_costs(void) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    if (!CHECK_MSG(hfl_model_resolve("mlp", &spec, err) == 0, "%s", err)) return;
    hfl_op_costs costs;
    fake_costs(&costs);
    hfl_chooser_input in = {.be = hfl_backend_cpu(), .budget = UINT64_MAX / 4, .gflops = {100, 100, 100},
                            .op_costs = &costs, .precisions = 1u << HFL_PREC_FP32,
                            .opt_state = HFL_OPT_MOMENTUM, .max_batch = 512, .prefer_batch = 16};
    hfl_choice *ch = hfl_malloc(sizeof *ch);
    if (CHECK_MSG(hfl_choose(&spec, &in, ch, err) == 0, "%s", err)) {
        CHECK(!strcmp(hfl_choice_speed_model(ch), "per-op"));
        int seen = 0;
        for (int i = 0; i < ch->n; i++) {
            const hfl_candidate *c = &ch->rows[i];
            if (c->ckpt != HFL_CKPT_NONE || (c->batch != 8 && c->batch != 16)) continue;
            CHECK(c->per_op == 1 && c->step_batch == 16);
            CHECK_CLOSE(c->samples_per_s, 16 / (c->batch == 8 ? 282.7972e-6 : 258.7972e-6), 0, 1e-12);
            seen++;
        }
        CHECK(seen == 2);
        CHECK(ch->chosen >= 0 && ch->rows[ch->chosen].batch == 16); /* the faster */
    }
    in.op_costs = NULL;
    if (CHECK_MSG(hfl_choose(&spec, &in, ch, err) == 0, "%s", err)) {
        CHECK(!strcmp(hfl_choice_speed_model(ch), "flops"));
        CHECK(ch->n > 0 && ch->rows[0].per_op == 0);
    }
    free(ch);
}

/* The fits on timings made from known coefficients: the GEMM fit recovers
 * them (exact timings; the normal equations lose a few digits to the
 * spread of the features, far from 1e-6); a term that would fit negative
 * is dropped, the others refitted to the timings' own; the line through two
 * timings by hand. */
static void test_fits(void) {
    static const int shapes[][3] = {{8, 8, 8}, {32, 32, 32}, {128, 128, 128}, {8, 512, 512},
                                    {512, 8, 512}, {512, 512, 8}, {2048, 32, 32}, {32, 32, 2048}};
    const int n = (int)(sizeof shapes / sizeof *shapes);
    double feat[8][3], secs[8], g[3];
    const double g0 = 2e-7, g1 = 1.0 / 50e9, g2 = 3e-10; /* 0.2 us a call, 50 GFLOP/s, 0.3 ns an element */
    for (int i = 0; i < n; i++) {
        double m = shapes[i][0], nn = shapes[i][1], k = shapes[i][2];
        feat[i][0] = 1, feat[i][1] = 2 * m * nn * k, feat[i][2] = m * k + k * nn + m * nn;
        secs[i] = g0 + g1 * feat[i][1] + g2 * feat[i][2];
    }
    hfl_op_cost_fit_gemm((const double(*)[3])feat, secs, n, g);
    CHECK_CLOSE(g[0], g0, 0, 1e-6);
    CHECK_CLOSE(g[1], g1, 0, 1e-6);
    CHECK_CLOSE(g[2], g2, 0, 1e-6);
    /* timings that shrink with the operands: g2 would be negative; dropped,
     * and the calls and FLOPs of timings made from them alone recovered */
    for (int i = 0; i < n; i++) secs[i] = g0 + g1 * feat[i][1];
    secs[3] *= 0.5, secs[4] *= 0.5; /* the two most element-heavy per FLOP made faster */
    hfl_op_cost_fit_gemm((const double(*)[3])feat, secs, n, g);
    CHECK_MSG(g[0] >= 0 && g[1] > 0 && g[2] == 0, "g = %g %g %g", g[0], g[1], g[2]);
    double fixed, per_unit;
    hfl_op_cost_fit_line(4096, 10e-6, 262144, 500e-6, &fixed, &per_unit);
    CHECK_CLOSE(per_unit, 490e-6 / 258048, 0, 1e-12);
    CHECK_CLOSE(fixed, 10e-6 - 4096 * 490e-6 / 258048, 0, 1e-12);
    hfl_op_cost_fit_line(4096, 10e-6, 262144, 9e-6, &fixed, &per_unit); /* not slower: no slope */
    CHECK(per_unit == 0 && fixed == 10e-6);
    hfl_op_cost_fit_line(4096, 1e-6, 262144, 500e-6, &fixed, &per_unit); /* the line's intercept < 0 */
    CHECK(fixed == 0 && per_unit > 0);
}

static void test_json(void) {
    hfl_op_costs a, b;
    char err[HFL_ERR_LEN];
    fake_costs(&a);
    a.p[HFL_PREC_FP32].per_unit[HFL_OPK_GELU_FWD] = 4.6e-9;
    cJSON *j = hfl_op_costs_json(&a);
    CHECK(hfl_op_costs_parse(j, 1u << HFL_PREC_FP32, &b, err) == 0);
    CHECK(b.precisions == a.precisions && same_tables(&a.p[0], &b.p[0]));
    /* every op kind but the two GEMMs (their costs are "gemm") */
    const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "fp32"), "ops");
    CHECK_MSG(cJSON_GetArraySize(kinds) == HFL_OPK_COUNT - 2, "%d op kinds kept", cJSON_GetArraySize(kinds));
    CHECK(!cJSON_GetObjectItemCaseSensitive(kinds, "gemm") && cJSON_GetObjectItemCaseSensitive(kinds, "im2col"));
    err[0] = 0; /* bf16 asked, none there */
    CHECK(hfl_op_costs_parse(j, 1u << HFL_PREC_BF16, &b, err) == -1 && strstr(err, "bf16") && !strchr(err, '\n'));
    cJSON *ops = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "fp32"), "ops");
    cJSON_DeleteItemFromObjectCaseSensitive(ops, "lm.gelu_bwd");
    CHECK(hfl_op_costs_parse(j, 1u << HFL_PREC_FP32, &b, err) == -1 && strstr(err, "lm.gelu_bwd"));
    double bad[2] = {1e-6, -1e-9};
    cJSON_AddItemToObject(ops, "lm.gelu_bwd", cJSON_CreateDoubleArray(bad, 2));
    CHECK(hfl_op_costs_parse(j, 1u << HFL_PREC_FP32, &b, err) == -1 && strstr(err, "lm.gelu_bwd"));
    cJSON_Delete(j);
}

/* Measured in the forked child and kept in a state dir whose line predates
 * op costs: the kept rates stay, the costs are measured once, appended and
 * read back unchanged. */
static void test_calibration_kept(void) {
    char dir[] = "/tmp/hfl-test-step-ops-XXXXXX", path[64];
    if (!CHECK(mkdtemp(dir) != NULL)) return;
    snprintf(path, sizeof path, "%s/calibration.jsonl", dir);
    FILE *f = fopen(path, "w");
    if (!CHECK(f != NULL)) return;
    fprintf(f, "{\"device\":\"d\",\"backend\":\"cpu\",\"runs\":3,\"fp32\":42.5,\"bf16\":0,\"fp16\":0}\n");
    fclose(f);
    double g[3];
    hfl_op_costs *a = hfl_malloc(sizeof *a), *b = hfl_malloc(sizeof *b);
    CHECK(hfl_calibrate(dir, "d", hfl_backend_cpu(), 1u << HFL_PREC_FP32, g, a) == 0);
    CHECK(g[HFL_PREC_FP32] == 42.5);
    CHECK(a->precisions == 1u << HFL_PREC_FP32);
    const hfl_op_cost_table *t = &a->p[HFL_PREC_FP32];
    CHECK(t->gemm[0] + t->gemm[1] + t->gemm[2] > 0);
    for (int k = 0; k < HFL_OPK_COUNT; k++)
        CHECK_MSG(t->fixed[k] + t->per_unit[k] > 0 || k == HFL_OPK_GEMM || k == HFL_OPK_GEMM_STRIDED,
                  "%s: no cost", hfl_op_kind_name((hfl_op_kind)k));
    CHECK(hfl_calibrate(dir, "d", hfl_backend_cpu(), 1u << HFL_PREC_FP32, g, b) == 0);
    CHECK(b->precisions == a->precisions && same_tables(&a->p[0], &b->p[0]));
    char *text = hfl_read_file(path, NULL, NULL);
    int lines = 0;
    for (char *p = text; p && *p; p++) lines += *p == '\n';
    CHECK_MSG(lines == 2, "%d lines", lines); /* the old one and one with the costs, not one per call */
    free(text);
    free(a);
    free(b);
    unlink(path);
    snprintf(path, sizeof path, "%s/calibration.lock", dir);
    unlink(path);
    rmdir(dir);
}

/* Three processes calibrating one fresh state dir at once (hfl-sim's
 * clients start together) take turns under its lock: one line is kept, not
 * three, and all three use its rates and costs, to the bit. Each child
 * writes its fp32 GEMM rate and one op cost down a pipe. */
static void test_calibration_shared(void) {
    char dir[] = "/tmp/hfl-test-step-ops-XXXXXX", path[80];
    if (!CHECK(mkdtemp(dir) != NULL)) return;
    enum { KIDS = 3 };
    int fd[2];
    REQUIRE(pipe(fd) == 0);
    for (int i = 0; i < KIDS; i++) {
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(fd[0]);
            double g[3], got[2];
            hfl_op_costs *c = hfl_malloc(sizeof *c);
            hfl_calibrate(dir, "d", hfl_backend_cpu(), 1u << HFL_PREC_FP32, g, c);
            got[0] = g[HFL_PREC_FP32], got[1] = c->p[HFL_PREC_FP32].per_unit[HFL_OPK_RELU_FWD];
            _exit(write(fd[1], got, sizeof got) == (ssize_t)sizeof got ? 0 : 1);
        }
    }
    close(fd[1]);
    double got[KIDS][2];
    size_t have = 0;
    ssize_t r;
    while (have < sizeof got && (r = read(fd[0], (char *)got + have, sizeof got - have)) > 0) have += (size_t)r;
    close(fd[0]);
    for (int i = 0; i < KIDS; i++) {
        int status = 0;
        wait(&status);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(have == sizeof got);
    for (int i = 1; i < KIDS && have == sizeof got; i++)
        CHECK_MSG(got[i][0] == got[0][0] && got[i][1] == got[0][1] && got[0][0] > 0,
                  "process %d: %.17g GFLOP/s, relu %.17g; process 0: %.17g, %.17g", i, got[i][0], got[i][1],
                  got[0][0], got[0][1]);
    snprintf(path, sizeof path, "%s/calibration.jsonl", dir);
    char *text = hfl_read_file(path, NULL, NULL);
    int lines = 0;
    for (char *p = text; p && *p; p++) lines += *p == '\n';
    CHECK_MSG(lines == 1, "%d lines kept by %d processes", lines, KIDS);
    free(text);
    unlink(path);
    snprintf(path, sizeof path, "%s/calibration.lock", dir);
    unlink(path);
    rmdir(dir);
}

static const check_case cases[] = {
    {"counts_match_profile", test_counts_match_profile},
    {"window_work", test_window_work},
    {"cost_sum_by_hand", test_cost_sum_by_hand},
    {"chooser_uses_costs", test_chooser_uses_costs},
    {"fits", test_fits},
    {"json", test_json},
    {"calibration_kept", test_calibration_kept},
    {"calibration_shared", test_calibration_shared},
};

int main(int argc, char **argv) { return check_run("test_step_ops", cases, CHECK_CASES(cases), argc, argv); }
