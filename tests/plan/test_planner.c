/* test_planner.c: the memory planner (plan/planner.h) and the trainer that
 * runs its plans (model/trainer.c), on the CPU backend.
 *
 * Checks that
 *   - gradients and losses after a forward and backward pass are bit-identical across
 *     the none, sqrt, optimal and full schedules (mlp, a small CNN, a model
 *     with a pool below its first parametric layer and a ReLU after a ReLU,
 *     the cnn at a small batch), also for a partial batch, and that the
 *     checkpointed plans really recompute;
 *   - every placement is valid: buffers alive at a common op never share a
 *     byte (all pairs), offsets are aligned, arena_bytes covers every buffer
 *     and the largest live sum, the breakdown adds up to that sum, and every
 *     op's buffers are alive at it;
 *   - the trainer's one allocation is arena_bytes, a step allocates nothing,
 *     a step and an evaluation run under a budget of exactly arena_bytes and
 *     creation fails one byte below it;
 *   - chain_peak (live activation, gradient and input bytes, from the op
 *     table) equals checkpoint.h's peak for every plan made here: the chain
 *     the planner hands the DP states the trainer's execution exactly;
 *     chain_peak equals the hand-derived figure for mlp and cnn under `none`;
 *   - for cnn at batch 128, activation peaks, live peaks and arenas full
 *     <= optimal (at a budget between full's and none's, and one byte below
 *     none's) <= sqrt < none, by the hand-derived 3136 floats a sample that
 *     is all any schedule can save there; every arena is its live peak up to
 *     alignment, and under the tight budget fits the budget plus the rest of
 *     the step;
 *   - mlp and cnn placements stay within 3.2% of their live peak (most meet
 *     it up to alignment);
 *   - training with a checkpointed schedule (and momentum) still fits a
 *     synthetic problem, and evaluation runs in the same arena. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/budget.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "tests/plan/plan_test.h"
#include "util/util.h"

/* Everything a placement must satisfy, by brute force: plan_test.h's common
 * checks, the live peak, fp32 weights and no master copy, the momentum
 * buffer, and the chain the planner hands the DP. */
static void check_placement(const hfl_plan *p) {
    check_placement_common(p);
    size_t max_live = 0;
    for (int o = 0; o < p->n_ops; o++) {
        size_t live = 0;
        for (int i = 0; i < p->n_buffers; i++)
            if (p->buffers[i].first_op <= o && o <= p->buffers[i].last_op) live += p->buffers[i].bytes;
        if (live > max_live) max_live = live;
    }
    CHECK(max_live == p->live_peak && p->arena_bytes >= max_live);
    CHECK(p->breakdown[HFL_BUF_MASTER] == 0);
    CHECK(p->breakdown[HFL_BUF_WEIGHTS] == p->spec.n_params * sizeof(float));
    CHECK((p->momentum >= 0) == (p->cfg.momentum != 0));
    /* The chain states the trainer's execution exactly (planner.h). */
    if (p->chain_peak != p->ckpt.peak)
        fprintf(stderr, "%s batch %d %s: chain peak %zu, checkpoint.h peak %zu\n", p->spec.name,
                p->cfg.batch, hfl_ckpt_name(p->cfg.ckpt), p->chain_peak, p->ckpt.peak);
    CHECK(p->chain_peak == p->ckpt.peak);
    CHECK(p->ops[p->loss_op].kind == HFL_OP_LOSS && p->ops[p->optimizer_op].kind == HFL_OP_OPTIMIZER);
}

/* test_placements' work on each plan: its 2-byte-activation twin, and the
 * largest (arena - live peak) / live peak of mlp and cnn so far in worst. */
struct placement_ctx {
    hfl_plan *half;
    double worst;
};

static void place_half(const hfl_model_spec *s, int m, const hfl_plan *p, void *ctx_) {
    struct placement_ctx *ctx = ctx_;
    hfl_plan *half = ctx->half;
    hfl_plan_config cfg = p->cfg;
    cfg.act_elem_bytes = 2;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_plan_make(s, &cfg, half, err) == 0);
    check_placement(half);
    CHECK(half->live_peak < p->live_peak);
    for (int h = 0; h < 2 && m < 2; h++) {
        const hfl_plan *x = h ? half : p;
        double gap = (double)(x->arena_bytes - x->live_peak) / (double)x->live_peak;
        if (gap > ctx->worst) ctx->worst = gap;
    }
}

/* Placement over a spread of models, batches, schedules and element sizes. */
static void test_placements(void) {
    const int batches[4] = {1, 7, 32, 512};
    struct placement_ctx ctx = {.half = hfl_malloc(sizeof *ctx.half), .worst = 0.0};
    for_each_plan(batches, 4, HFL_PREC_FP32, place_half, &ctx);
    double worst = ctx.worst;
    /* planner_place.c's local search: mlp and cnn place within 3.2% of
     * their live peak (docs/benchmarks.md), the first-fit greedy alone left
     * up to 9.8%. */
    printf("placement: mlp and cnn arenas at most %.2f%% over their live peak\n", 100.0 * worst);
    CHECK(worst < 0.032);
    free(ctx.half);
}

/* Bytes per sample (floats) of planner.h's execution model under `none`,
 * derived by hand: mlp peaks at dense 200->10's backward (input 784, the two
 * ReLU outputs 200 + 200, dlogits 10, its input gradient 200); cnn at the
 * second pool's backward (input 784, conv1 25088, pool1 6272, conv2 12544,
 * dpool2 3136, dconv2 12544). checkpoint.h's peak is the same figure: the
 * chain states this execution. */
static void test_against_checkpoint_model(void) {
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_model_spec s;
    load_spec("mlp", &s);
    make_plan(&s, 8, HFL_CKPT_NONE, 1, HFL_PREC_FP32, p);
    CHECK(p->chain_peak == 1394u * 4 * 8 && p->ckpt.peak == p->chain_peak);
    load_spec("cnn", &s);
    make_plan(&s, 8, HFL_CKPT_NONE, 1, HFL_PREC_FP32, p);
    CHECK(p->chain_peak == 60368u * 4 * 8 && p->ckpt.peak == p->chain_peak);
    CHECK(p->n_stages == 6);

    /* cnn at batch 128. Every schedule's activation peak is what the step
     * really reaches (check_placement: chain_peak == ckpt.peak). The least
     * any schedule reaches is pool1's backward: input 784, conv1's output
     * 25088 (pool1 reads it), dpool1 6272, dconv1 25088 = 57232 floats a
     * sample; `none` peaks 3136 above it (pool2's backward, 60368), so that is
     * all checkpointing can take off this model's step. */
    enum { NONE, SQRT, OPT, FULL, OPT_TIGHT, N_CASES };
    static const char *names[N_CASES] = {"none", "sqrt", "optimal", "full", "optimal"};
    size_t arena[N_CASES], peak[N_CASES], live[N_CASES], budget[N_CASES], other = 0;
    /* none, full, sqrt; then optimal halfway between full's peak and none's,
     * and one byte below none's peak. */
    const int order[N_CASES] = {NONE, FULL, SQRT, OPT, OPT_TIGHT};
    for (int t = 0; t < N_CASES; t++) {
        int k = order[t];
        char err[HFL_ERR_LEN] = "";
        budget[k] = k == OPT         ? peak[FULL] + (peak[NONE] - peak[FULL]) / 2
                    : k == OPT_TIGHT ? peak[NONE] - 1
                                     : SIZE_MAX;
        hfl_plan_config cfg = {.batch = 128, .ckpt = k == OPT_TIGHT ? HFL_CKPT_OPTIMAL : kinds[k],
                               .ckpt_budget = budget[k], .momentum = 1, .act_elem_bytes = 4};
        CHECK(hfl_plan_make(&s, &cfg, p, err) == 0);
        check_placement(p);
        CHECK(p->ckpt.feasible && p->ckpt.peak <= budget[k]);
        arena[k] = p->arena_bytes;
        peak[k] = p->ckpt.peak;
        live[k] = p->live_peak;
        if (k == OPT_TIGHT) /* the rest of the step (parameters, gradients, momentum,
                               labels, workspaces) at the op where it peaks */
            for (int o = 0; o < p->n_ops; o++) {
                size_t rest = hfl_plan_live_bytes(p, o);
                for (int i = 0; i < p->n_buffers; i++) {
                    const hfl_plan_buffer *x = &p->buffers[i];
                    if (x->first_op <= o && o <= x->last_op &&
                        (x->category == HFL_BUF_ACTIVATIONS || i == p->input))
                        rest -= x->bytes;
                }
                if (rest > other) other = rest;
            }
        if (budget[k] == SIZE_MAX)
            printf("cnn batch 128 %-7s: arena %zu, live peak %zu, activation peak %zu, "
                   "recompute %.3f forwards\n", names[k], arena[k], live[k], peak[k],
                   p->ckpt.recompute / p->ckpt.forward);
        else
            printf("cnn batch 128 %-7s at %zu: arena %zu, live peak %zu, activation peak %zu, "
                   "recompute %.3f forwards\n", names[k], budget[k], arena[k], live[k], peak[k],
                   p->ckpt.recompute / p->ckpt.forward);
    }
    CHECK(peak[NONE] == 60368u * 4 * 128 && peak[FULL] == 57232u * 4 * 128);
    CHECK(peak[FULL] <= peak[OPT] && peak[OPT] <= peak[SQRT] && peak[SQRT] < peak[NONE]);
    CHECK(peak[FULL] <= peak[OPT_TIGHT] && peak[OPT_TIGHT] < peak[NONE]);
    /* The live peak (what a placement without gaps needs) follows the
     * activation peak byte for byte: the rest of the step at its peak op is
     * the same under every schedule. */
    CHECK(live[FULL] <= live[OPT] && live[OPT] <= live[SQRT] && live[SQRT] < live[NONE]);
    CHECK(live[NONE] - live[FULL] == peak[NONE] - peak[FULL]);
    CHECK(live[OPT_TIGHT] <= budget[OPT_TIGHT] + other);
    /* The arena follows: the placement (planner_place.c) reaches every live
     * peak here up to the 64-byte alignment of the buffers (72 bytes), so
     * the arenas order as the live peaks do, and under the tight budget the
     * arena fits that budget plus the rest of the step. */
    CHECK(arena[FULL] <= arena[OPT] && arena[OPT] <= arena[SQRT] && arena[SQRT] < arena[NONE]);
    CHECK(arena[FULL] <= arena[OPT_TIGHT] && arena[OPT_TIGHT] < arena[NONE]);
    CHECK(arena[OPT_TIGHT] <= budget[OPT_TIGHT] + other);
    for (int k = 0; k < N_CASES; k++)
        CHECK(arena[k] - live[k] < (size_t)HFL_PLAN_ALIGN * (size_t)p->n_buffers);
    CHECK(arena[NONE] - arena[FULL] == live[NONE] - live[FULL]);
    free(p);
}

/* One allocation of exactly arena_bytes, nothing during a step, and a step
 * under a budget of exactly that. */
static void test_allocation(void) {
    const hfl_backend *be = hfl_backend_cpu();
    enum { B = 16 };
    hfl_model_spec s;
    load_spec("cnn", &s);
    hfl_plan *p = hfl_malloc(sizeof *p);
    make_plan(&s, B, HFL_CKPT_SQRT, 1, HFL_PREC_FP32, p);
    float *x = hfl_malloc((size_t)B * s.in_dim * sizeof(float));
    int32_t *y = hfl_malloc(B * sizeof(int32_t));
    random_batch(&s, B, x, y, 2);
    char err[HFL_ERR_LEN] = "";

    uint64_t live0 = hfl_budget_live_bytes();
    hfl_budget_set(live0 + p->arena_bytes);
    hfl_trainer *t = hfl_trainer_create_plan(&s, be, p, err);
    CHECK(t != NULL);
    if (!t) return;
    CHECK(hfl_budget_live_bytes() - live0 == p->arena_bytes);
    CHECK(hfl_trainer_device_bytes(t) == p->arena_bytes);
    hfl_budget_reset_peak();
    float loss = hfl_trainer_step(t, x, y, B, 0.01f, 0.9f, 1e-4f);
    float acc = -1.0f;
    hfl_trainer_evaluate(t, x, y, B, &acc);
    CHECK(loss > 0.0f && acc >= 0.0f);
    CHECK(hfl_budget_peak_bytes() == live0 + p->arena_bytes);
    hfl_trainer_free(t);

    hfl_budget_set(live0 + p->arena_bytes - 1);
    CHECK(hfl_trainer_create_plan(&s, be, p, err) == NULL);
    CHECK(strstr(err, "budget") != NULL);
    hfl_budget_set(0);

    /* Plans the trainer must refuse: another model's, and 2-byte activations. */
    hfl_model_spec other;
    load_spec("mlp", &other);
    CHECK(hfl_trainer_create_plan(&other, be, p, err) == NULL);
    CHECK(strcmp(err, "trainer: the plan was made for model cnn, not mlp") == 0);
    p->cfg.act_elem_bytes = 2;
    CHECK(hfl_trainer_create_plan(&s, be, p, err) == NULL);
    hfl_plan_config bad = {.batch = 0, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .act_elem_bytes = 4};
    CHECK(hfl_plan_make(&s, &bad, p, err) == -1 && strcmp(err, "planner: batch 0 must be >= 1") == 0);
    bad.batch = 1;
    bad.act_elem_bytes = 3;
    CHECK(hfl_plan_make(&s, &bad, p, err) == -1);
    free(p);
    free(x);
    free(y);
}

/* Four noisy clusters in 24 dimensions, learnt by a 4-hidden-layer MLP under
 * the sqrt schedule (two segments) with momentum. */
static void test_checkpointed_training(void) {
    enum { B = 32 };
    const hfl_backend *be = hfl_backend_cpu();
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    float *x, *params;
    int32_t *y;
    clusters_task(&s, &x, &y, &params);
    hfl_plan *p = hfl_malloc(sizeof *p);
    make_plan(&s, B, HFL_CKPT_SQRT, 1, HFL_PREC_FP32, p);
    CHECK(p->ckpt.n_segments < p->n_stages);
    hfl_trainer *t = hfl_trainer_create_plan(&s, be, p, err);
    CHECK(t != NULL);
    if (!t) return;
    float acc0 = 0.0f, acc1 = 0.0f, before, after;
    clusters_train(t, params, x, y, B, &before, &after, &acc0, &acc1);
    printf("clusters under sqrt: loss %.4f -> %.4f, accuracy %.3f -> %.3f\n", before, after, acc0, acc1);
    CHECK(after < 0.25f * before && acc1 > 0.95f);
    hfl_trainer_free(t);
    free(p);
    free(x);
    free(y);
    free(params);
}

static void case_identical_gradients(void) {
    test_identical_gradients("mlp", 8, 8, HFL_PREC_FP32);
    test_identical_gradients("mlp", 8, 5, HFL_PREC_FP32); /* a partial batch */
    test_identical_gradients("tiny", 3, 3, HFL_PREC_FP32);
    test_identical_gradients("odd", 4, 4, HFL_PREC_FP32);
    test_identical_gradients("cnn", 2, 2, HFL_PREC_FP32);
}

static const check_case cases[] = {
    {"identical_gradients", case_identical_gradients},
    {"placements", test_placements},
    {"against_checkpoint_model", test_against_checkpoint_model},
    {"allocation", test_allocation},
    {"checkpointed_training", test_checkpointed_training},
};

int main(int argc, char **argv) {
    return check_run("test_planner", cases, CHECK_CASES(cases), argc, argv);
}
