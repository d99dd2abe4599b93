/* test_planner.c: the memory planner (model/planner.h) and the trainer that
 * runs its plans (model/trainer.c), on the CPU backend.
 *
 * Checks that
 *   - gradients and losses after forward_backward are bit-identical across
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
#include "kernels/philox.h"
#include "model/model.h"
#include "model/planner.h"
#include "tests/kernels/check.h"
#include "util/util.h"

static const hfl_ckpt_kind kinds[4] = {HFL_CKPT_NONE, HFL_CKPT_SQRT, HFL_CKPT_OPTIMAL,
                                       HFL_CKPT_FULL};

/* conv, relu, pool, strided conv, relu, dense, relu, dense (as test_cnn.c). */
static const char *tiny_json =
    "{\"name\": \"tiny\", \"input\": [2, 8, 8], \"layers\": ["
    "{\"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"pad\": 1}, {\"type\": \"relu\"},"
    "{\"type\": \"maxpool2d\", \"size\": 2},"
    "{\"type\": \"conv2d\", \"out\": 6, \"kernel\": 3, \"pad\": 1, \"stride\": 2}, {\"type\": \"relu\"},"
    "{\"type\": \"dense\", \"out\": 8}, {\"type\": \"relu\"}, {\"type\": \"dense\", \"out\": 3}]}";
/* A pool below the first parametric layer, and a ReLU after a ReLU (not in place). */
static const char *odd_json =
    "{\"name\": \"odd\", \"input\": [1, 8, 8], \"layers\": ["
    "{\"type\": \"maxpool2d\", \"size\": 2}, {\"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"pad\": 1},"
    "{\"type\": \"relu\"}, {\"type\": \"relu\"}, {\"type\": \"dense\", \"out\": 5}, {\"type\": \"relu\"},"
    "{\"type\": \"dense\", \"out\": 6}, {\"type\": \"relu\"}, {\"type\": \"dense\", \"out\": 3}]}";

static void load_spec(const char *name, hfl_model_spec *s) {
    char err[HFL_ERR_LEN] = "";
    int rc = strcmp(name, "tiny") == 0  ? hfl_model_spec_from_json(tiny_json, strlen(tiny_json), s, err)
             : strcmp(name, "odd") == 0 ? hfl_model_spec_from_json(odd_json, strlen(odd_json), s, err)
                                        : hfl_model_builtin(name, s, err);
    if (rc != 0) fprintf(stderr, "%s: %s\n", name, err);
    CHECK(rc == 0);
}

/* A plan of `kind`; optimal gets a budget halfway between the least peak and
 * the none schedule's peak. */
static void make_plan(const hfl_model_spec *s, int batch, hfl_ckpt_kind kind, int momentum,
                      hfl_plan *p) {
    char err[HFL_ERR_LEN] = "";
    hfl_plan_config cfg = {.batch = batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = momentum, .act_elem_bytes = 4};
    size_t budget = SIZE_MAX;
    if (kind == HFL_CKPT_OPTIMAL) {
        CHECK(hfl_plan_make(s, &cfg, p, err) == 0);
        budget = p->ckpt.min_peak + (p->ckpt.peak - p->ckpt.min_peak) / 2;
    }
    cfg.ckpt = kind;
    cfg.ckpt_budget = budget;
    if (hfl_plan_make(s, &cfg, p, err) != 0) fprintf(stderr, "plan: %s\n", err);
    if (kind == HFL_CKPT_OPTIMAL) CHECK(p->ckpt.feasible && p->ckpt.peak <= budget);
}

/* Everything a placement must satisfy, by brute force. */
static void check_placement(const hfl_plan *p) {
    for (int i = 0; i < p->n_buffers; i++) {
        const hfl_plan_buffer *a = &p->buffers[i];
        CHECK(a->bytes > 0 && a->bytes == a->count * a->elem_bytes);
        CHECK(0 <= a->first_op && a->first_op <= a->last_op && a->last_op < p->n_ops);
        CHECK(a->offset % HFL_PLAN_ALIGN == 0 && a->offset + a->bytes <= p->arena_bytes);
        for (int j = i + 1; j < p->n_buffers; j++) {
            const hfl_plan_buffer *b = &p->buffers[j];
            int alive_together = a->first_op <= b->last_op && b->first_op <= a->last_op;
            int share_bytes = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
            if (alive_together && share_bytes)
                fprintf(stderr, "%s: %s and %s overlap\n", p->spec.name, a->name, b->name);
            CHECK(!(alive_together && share_bytes));
        }
    }
    size_t max_live = 0;
    for (int o = 0; o < p->n_ops; o++) {
        size_t live = 0;
        for (int i = 0; i < p->n_buffers; i++)
            if (p->buffers[i].first_op <= o && o <= p->buffers[i].last_op) live += p->buffers[i].bytes;
        if (live > max_live) max_live = live;
        const hfl_plan_op *op = &p->ops[o];
        int used[6] = {op->in, op->out, op->dout, op->din, op->ws, op->labels};
        for (int k = 0; k < 6; k++)
            if (used[k] >= 0)
                CHECK(p->buffers[used[k]].first_op <= o && o <= p->buffers[used[k]].last_op);
    }
    CHECK(max_live == p->live_peak && p->arena_bytes >= max_live);
    size_t sum = 0;
    for (int c = 0; c < HFL_BUF_N_CATEGORIES; c++) sum += p->breakdown[c];
    CHECK(sum == p->live_peak && p->breakdown[HFL_BUF_MASTER] == 0);
    CHECK(p->breakdown[HFL_BUF_WEIGHTS] == p->spec.n_params * sizeof(float));
    CHECK((p->momentum >= 0) == (p->cfg.momentum != 0));
    /* The chain states the trainer's execution exactly (planner.h). */
    if (p->chain_peak != p->ckpt.peak)
        fprintf(stderr, "%s batch %d %s: chain peak %zu, checkpoint.h peak %zu\n", p->spec.name,
                p->cfg.batch, hfl_ckpt_name(p->cfg.ckpt), p->chain_peak, p->ckpt.peak);
    CHECK(p->chain_peak == p->ckpt.peak);
    CHECK(p->ops[p->loss_op].kind == HFL_OP_LOSS && p->ops[p->optimizer_op].kind == HFL_OP_OPTIMIZER);
}

static void random_batch(const hfl_model_spec *s, int n, float *x, int32_t *y, uint32_t key) {
    for (size_t i = 0; i < (size_t)n * s->in_dim; i++)
        x[i] = 2.0f * hfl_u01(hfl_philox_u32(7, key, 0, 0, 0, i)) - 1.0f;
    for (int i = 0; i < n; i++) y[i] = (int32_t)(hfl_philox_u32(7, key, 0, 0, 1, (uint64_t)i) % s->n_classes);
}

/* Gradients and loss of forward_backward on n <= batch samples under each schedule. */
static void test_identical_gradients(const char *name, int batch, int n) {
    const hfl_backend *be = hfl_backend_cpu();
    hfl_model_spec s;
    load_spec(name, &s);
    float *x = hfl_malloc((size_t)n * s.in_dim * sizeof(float)), *params = hfl_malloc(s.n_params * sizeof(float));
    int32_t *y = hfl_malloc((size_t)n * sizeof(int32_t));
    float *g[4];
    float loss[4];
    random_batch(&s, n, x, y, 1);
    hfl_model_init_params(&s, params, 3);
    hfl_plan *p = hfl_malloc(sizeof *p);
    int recomputing = 0;
    for (int k = 0; k < 4; k++) {
        char err[HFL_ERR_LEN] = "";
        make_plan(&s, batch, kinds[k], 0, p);
        check_placement(p);
        for (int o = 0; o < p->n_ops; o++) recomputing += k > 0 && p->ops[o].recompute;
        hfl_trainer *t = hfl_trainer_create_plan(&s, be, p, err);
        CHECK(t != NULL);
        if (!t) return;
        g[k] = hfl_malloc(s.n_params * sizeof(float));
        hfl_trainer_set_params(t, params);
        loss[k] = hfl_trainer_forward_backward(t, x, y, n);
        hfl_trainer_get_grads(t, g[k]);
        hfl_trainer_free(t);
    }
    CHECK(recomputing > 0); /* the checkpointed plans do drop activations */
    for (int k = 1; k < 4; k++) {
        CHECK(memcmp(&loss[k], &loss[0], sizeof loss[0]) == 0);
        if (memcmp(g[k], g[0], s.n_params * sizeof(float)) != 0)
            fprintf(stderr, "%s batch %d/%d: %s gradient differs from none\n", name, n, batch,
                    hfl_ckpt_name(kinds[k]));
        CHECK(memcmp(g[k], g[0], s.n_params * sizeof(float)) == 0);
    }
    for (int k = 0; k < 4; k++) free(g[k]);
    free(p);
    free(x);
    free(y);
    free(params);
}

/* Placement over a spread of models, batches, schedules and element sizes. */
static void test_placements(void) {
    const char *names[4] = {"mlp", "cnn", "tiny", "odd"};
    const int batches[4] = {1, 7, 32, 512};
    hfl_plan *p = hfl_malloc(sizeof *p), *half = hfl_malloc(sizeof *half);
    double worst = 0.0; /* the largest (arena - live peak) / live peak of mlp and cnn */
    for (int m = 0; m < 4; m++) {
        hfl_model_spec s;
        load_spec(names[m], &s);
        for (int b = 0; b < 4; b++)
            for (int k = 0; k < 4; k++)
                for (int mom = 0; mom < 2; mom++) {
                    make_plan(&s, batches[b], kinds[k], mom, p);
                    check_placement(p);
                    hfl_plan_config cfg = p->cfg;
                    cfg.act_elem_bytes = 2;
                    char err[HFL_ERR_LEN] = "";
                    CHECK(hfl_plan_make(&s, &cfg, half, err) == 0);
                    check_placement(half);
                    CHECK(half->live_peak < p->live_peak);
                    for (int h = 0; h < 2 && m < 2; h++) {
                        const hfl_plan *x = h ? half : p;
                        double gap = (double)(x->arena_bytes - x->live_peak) / (double)x->live_peak;
                        if (gap > worst) worst = gap;
                    }
                }
    }
    /* planner_place.c's local search: mlp and cnn place within 3.2% of
     * their live peak (docs/benchmarks.md), the first-fit greedy alone left
     * up to 9.8%. */
    printf("placement: mlp and cnn arenas at most %.2f%% over their live peak\n", 100.0 * worst);
    CHECK(worst < 0.032);
    free(p);
    free(half);
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
    make_plan(&s, 8, HFL_CKPT_NONE, 1, p);
    CHECK(p->chain_peak == 1394u * 4 * 8 && p->ckpt.peak == p->chain_peak);
    load_spec("cnn", &s);
    make_plan(&s, 8, HFL_CKPT_NONE, 1, p);
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
    make_plan(&s, B, HFL_CKPT_SQRT, 1, p);
    float *x = hfl_malloc((size_t)B * s.in_dim * sizeof(float));
    int32_t *y = hfl_malloc(B * sizeof(int32_t));
    random_batch(&s, B, x, y, 2);
    char err[HFL_ERR_LEN] = "";

    uint64_t live0 = hfl_backend_cpu_live_bytes();
    hfl_backend_cpu_set_budget(live0 + p->arena_bytes);
    hfl_trainer *t = hfl_trainer_create_plan(&s, be, p, err);
    CHECK(t != NULL);
    if (!t) return;
    CHECK(hfl_backend_cpu_live_bytes() - live0 == p->arena_bytes);
    CHECK(hfl_trainer_device_bytes(t) == p->arena_bytes);
    hfl_backend_cpu_reset_peak();
    float loss = hfl_trainer_step(t, x, y, B, 0.01f, 0.9f, 1e-4f);
    float acc = -1.0f;
    hfl_trainer_evaluate(t, x, y, B, &acc);
    CHECK(loss > 0.0f && acc >= 0.0f);
    CHECK(hfl_backend_cpu_peak_bytes() == live0 + p->arena_bytes);
    hfl_trainer_free(t);

    hfl_backend_cpu_set_budget(live0 + p->arena_bytes - 1);
    CHECK(hfl_trainer_create_plan(&s, be, p, err) == NULL);
    CHECK(strstr(err, "budget") != NULL);
    hfl_backend_cpu_set_budget(0);

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
    enum { N = 256, D = 24, C = 4, B = 32 };
    const hfl_backend *be = hfl_backend_cpu();
    int dims[6] = {D, 48, 48, 48, 48, C};
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_model_spec_mlp(&s, "clusters", dims, 6, err) == 0);
    float *x = hfl_malloc((size_t)N * D * sizeof(float)), *params = hfl_malloc(s.n_params * sizeof(float));
    int32_t *y = hfl_malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        y[i] = i % C;
        for (int d = 0; d < D; d++)
            x[i * D + d] = (d % C == y[i] ? 1.0f : 0.0f) +
                           0.6f * (hfl_u01(hfl_philox_u32(9, 1, 0, 0, 0, (uint64_t)i * D + d)) - 0.5f);
    }
    hfl_model_init_params(&s, params, 5);
    hfl_plan *p = hfl_malloc(sizeof *p);
    make_plan(&s, B, HFL_CKPT_SQRT, 1, p);
    CHECK(p->ckpt.n_segments < p->n_stages);
    hfl_trainer *t = hfl_trainer_create_plan(&s, be, p, err);
    CHECK(t != NULL);
    if (!t) return;
    hfl_trainer_set_params(t, params);
    float acc0 = 0.0f, acc1 = 0.0f;
    float before = hfl_trainer_evaluate(t, x, y, N, &acc0);
    for (int e = 0; e < 30; e++)
        for (int i = 0; i + B <= N; i += B) hfl_trainer_step(t, x + i * D, y + i, B, 0.05f, 0.9f, 0.0f);
    float after = hfl_trainer_evaluate(t, x, y, N, &acc1);
    printf("clusters under sqrt: loss %.4f -> %.4f, accuracy %.3f -> %.3f\n", before, after, acc0, acc1);
    CHECK(after < 0.25f * before && acc1 > 0.95f);
    hfl_trainer_free(t);
    free(p);
    free(x);
    free(y);
    free(params);
}

int main(void) {
    test_identical_gradients("mlp", 8, 8);
    test_identical_gradients("mlp", 8, 5); /* a partial batch */
    test_identical_gradients("tiny", 3, 3);
    test_identical_gradients("odd", 4, 4);
    test_identical_gradients("cnn", 2, 2);
    test_placements();
    test_against_checkpoint_model();
    test_allocation();
    test_checkpointed_training();
    return check_exit_code("test_planner");
}
