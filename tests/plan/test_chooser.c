/* test_chooser.c: the chooser picks a configuration that fits, and it trains.
 *
 * cnn at batch 128 without checkpointing needs a certain arena; with a budget
 * one byte short of it (and no headroom), the chooser must not pick that
 * configuration but one that fits; when the run asks for batch 128 it must
 * keep 128 rows per optimizer step by accumulating micro-batches (with equal
 * FLOP rates that costs no recompute, so it beats checkpointing), and that
 * configuration must then train under the CPU backend's enforcing allocator
 * set to the budget; with allow_smaller it must instead fall back to a
 * smaller real batch from the ladder, without accumulation. With
 * a budget below every candidate it must choose nothing and name the
 * smallest budget that would do; with a generous one, the largest batch.
 * Predicted speeds within 5% tie: a 2-byte rate 3% above fp32's keeps fp32,
 * one 50% above it wins. On the CPU backend (2-byte emulated) fp32 is chosen
 * whenever an fp32 candidate fits, whatever the rates say, and a 2-byte one
 * only when none does. The calibration under a budget too small for its
 * GEMM measures a smaller one, and below that gives zeros without exiting.
 * On a backend with a 2 MiB allocation granularity
 * every arena, and so every prediction, is rounded up to it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/budget.h"
#include "kernels/philox.h"
#include "plan/choose.h"
#include "plan/chooser.h"
#include "tests/check.h"
#include "util/util.h"

static hfl_choice choose_opt(const hfl_model_spec *s, uint64_t budget, int max_batch, int prefer_batch,
                             int allow_smaller) {
    hfl_chooser_input in = {.budget = budget, .headroom = 0, .overhead = NULL, .gflops = {100, 100, 100}, .opt_state = HFL_OPT_MOMENTUM,
                            .max_batch = max_batch, .prefer_batch = prefer_batch, .precisions = 1u << HFL_PREC_FP32,
                            .allow_smaller = allow_smaller};
    hfl_choice ch;
    char err[HFL_ERR_LEN];
    CHECK(hfl_choose(s, &in, &ch, err) == 0);
    return ch;
}

static hfl_choice choose(const hfl_model_spec *s, uint64_t budget, int max_batch, int prefer_batch) {
    return choose_opt(s, budget, max_batch, prefer_batch, 0);
}

static uint64_t fixed_overhead(void *ctx, hfl_precision p, int batch, hfl_ckpt_kind ckpt) {
    (void)p, (void)batch, (void)ckpt;
    return *(const uint64_t *)ctx;
}

/* An off-ladder preferred batch is a candidate and wins when it fits; the
 * overhead callback and the headroom both count against the budget. */
static void test_inputs(const hfl_model_spec *s) {
    hfl_choice ch = choose(s, UINT64_MAX / 4, 64, 48);
    int seen48 = 0;
    for (int i = 0; i < ch.n; i++) seen48 += ch.rows[i].batch == 48;
    CHECK(seen48 == 4); /* one per schedule, fp32 only */
    CHECK(ch.chosen >= 0 && ch.rows[ch.chosen].batch == 48);

    uint64_t extra = 3u << 20;
    hfl_chooser_input in = {.budget = UINT64_MAX / 4, .gflops = {100, 100, 100}, .opt_state = HFL_OPT_MOMENTUM, .max_batch = 8,
                            .precisions = 1u << HFL_PREC_FP32, .overhead = fixed_overhead, .overhead_ctx = &extra};
    char err[HFL_ERR_LEN];
    CHECK(hfl_choose(s, &in, &ch, err) == 0);
    for (int i = 0; i < ch.n; i++) CHECK(ch.rows[i].predicted == ch.rows[i].arena + extra);
    /* a budget that fits the smallest prediction exactly, but not once 5% is kept free */
    in.budget = ch.min_budget;
    CHECK(hfl_choose(s, &in, &ch, err) == 0 && ch.chosen >= 0);
    in.headroom = 0.05;
    CHECK(hfl_choose(s, &in, &ch, err) == 0 && ch.chosen < 0);
    CHECK(ch.min_budget > in.budget);
    /* the arena-alone floor: the smallest arena over the kept fraction, the
     * overhead left out (what a refusal quotes beside the prediction) */
    uint64_t floor = UINT64_MAX;
    for (int i = 0; i < ch.n; i++) {
        uint64_t f = (uint64_t)ceil((double)ch.rows[i].arena / 0.95);
        floor = f < floor ? f : floor;
    }
    CHECK(ch.min_arena_budget == floor);
    CHECK(ch.min_budget - ch.min_arena_budget >= extra && ch.min_budget - ch.min_arena_budget <= extra / 0.95 + 2);
}

/* On a backend that takes memory in 2 MiB granules every candidate's arena
 * is the same candidate's arena on the CPU rounded up to 2 MiB, and its
 * prediction that rounded arena plus the overhead: a prediction counts the
 * granules the allocation will really take. */
static void test_granularity(const hfl_model_spec *s) {
    const size_t G = (size_t)2 << 20;
    uint64_t extra = 3u << 20;
    hfl_backend granular = *hfl_backend_cpu();
    granular.alloc_granularity = G;
    hfl_chooser_input in = {.be = hfl_backend_cpu(), .budget = UINT64_MAX / 4, .gflops = {100, 100, 100},
                            .opt_state = HFL_OPT_MOMENTUM, .max_batch = 128, .precisions = 7,
                            .overhead = fixed_overhead, .overhead_ctx = &extra};
    hfl_choice plain, ch;
    char err[HFL_ERR_LEN];
    CHECK(hfl_choose(s, &in, &plain, err) == 0);
    in.be = &granular;
    CHECK(hfl_choose(s, &in, &ch, err) == 0);
    int rounded = 0;
    for (int i = 0; CHECK(ch.n == plain.n) && i < ch.n; i++) {
        size_t want = (plain.rows[i].arena + G - 1) / G * G;
        CHECK_MSG(ch.rows[i].arena == want, "batch %d %s: arena %zu, want %zu", ch.rows[i].batch,
                  hfl_ckpt_name(ch.rows[i].ckpt), ch.rows[i].arena, want);
        CHECK(ch.rows[i].predicted == want + extra);
        rounded += want != plain.rows[i].arena;
    }
    CHECK(rounded > 0); /* the check saw real roundings, not only whole granules */
}

/* The calibration takes its buffers with try_alloc and halves its GEMM when
 * they are refused: under a budget too small for its 256^3 GEMM's 1.1 MB
 * (three 256 KiB matrices and 320 KiB of a 2-byte gemm's staging) but enough for
 * 128^3's 384 KiB it still measures a rate, where alloc would have ended its
 * child; under one too small even for 64^3's 96 KiB it gives zeros, and
 * this process carries on. */
static void test_calibrate_short(void) {
    double g[3];
    uint64_t live = hfl_budget_live_bytes();
    hfl_budget_set(live + (600u << 10));
    hfl_chooser_calibrate(hfl_backend_cpu(), 1u << HFL_PREC_FP32 | 1u << HFL_PREC_BF16, g);
    printf("calibration under %u KiB: fp32 %.2f bf16 %.2f GFLOP/s\n", 600u, g[0], g[1]);
    CHECK(g[HFL_PREC_FP32] > 0 && g[HFL_PREC_BF16] > 0 && g[HFL_PREC_FP16] == 0);
    hfl_budget_set(live + (50u << 10));
    hfl_chooser_calibrate(hfl_backend_cpu(), 1u << HFL_PREC_FP32, g);
    CHECK(g[0] == 0 && g[1] == 0 && g[2] == 0);
    hfl_budget_set(0);
}

/* Speeds within 5% tie and the wider precision wins: a 2-byte GEMM rate 3%
 * above fp32's (noise) keeps fp32; one 50% above (tensor cores) wins. */
static void test_tie(const hfl_model_spec *s) {
    hfl_chooser_input in = {.budget = UINT64_MAX / 4, .gflops = {100, 103, 103}, .opt_state = HFL_OPT_MOMENTUM, .max_batch = 32,
                            .prefer_batch = 32, .precisions = 7};
    hfl_choice ch;
    char err[HFL_ERR_LEN];
    CHECK(hfl_choose(s, &in, &ch, err) == 0 && ch.chosen >= 0);
    CHECK(ch.rows[ch.chosen].precision == HFL_PREC_FP32 && ch.rows[ch.chosen].ckpt == HFL_CKPT_NONE);
    in.gflops[1] = in.gflops[2] = 150;
    CHECK(hfl_choose(s, &in, &ch, err) == 0 && ch.chosen >= 0);
    CHECK(ch.rows[ch.chosen].precision == HFL_PREC_BF16 && ch.rows[ch.chosen].ckpt == HFL_CKPT_NONE);
}

/* Equal calibrated rates (what a 2048^3 GEMM on the CPU reports for its
 * emulated bf16) and a budget where bf16 holds the run's batch of 32 whole
 * but fp32 needs micro-batches: speed alone ties, and the larger batch (bf16)
 * wins; on the CPU backend fp32 must. Below every fp32 candidate, bf16 is
 * still chosen there: memory decides. */
static void test_emulated(void) {
    static const char js[] = "{\"name\": \"gpt-t128\", \"input\": [128], \"layers\": ["
                             "{\"type\": \"embedding\", \"vocab\": 64, \"width\": 32},"
                             "{\"type\": \"gpt_block\", \"heads\": 2}, {\"type\": \"gpt_block\", \"heads\": 2},"
                             "{\"type\": \"lm_head\"}]}";
    hfl_model_spec gpt, *s = &gpt;
    char err[HFL_ERR_LEN];
    REQUIRE_MSG(hfl_model_spec_from_json(js, strlen(js), s, err) == 0, "%s", err);
    hfl_chooser_input in = {.budget = UINT64_MAX / 4, .gflops = {100, 100, 100}, .opt_state = HFL_OPT_MOMENTUM,
                            .max_batch = 32, .prefer_batch = 32, .precisions = 7};
    hfl_choice ch;
    CHECK(hfl_choose(s, &in, &ch, err) == 0);
    size_t bf16_32 = 0, fp32_min = SIZE_MAX, bf16_min = SIZE_MAX;
    for (int i = 0; i < ch.n; i++) {
        const hfl_candidate *c = &ch.rows[i];
        if (c->precision == HFL_PREC_BF16 && c->batch == 32 && c->ckpt == HFL_CKPT_NONE) bf16_32 = c->arena;
        if (c->precision == HFL_PREC_FP32 && c->arena < fp32_min) fp32_min = c->arena;
        if (c->precision == HFL_PREC_BF16 && c->arena < bf16_min) bf16_min = c->arena;
    }
    CHECK(bf16_32 > 0 && bf16_min < fp32_min);
    in.budget = bf16_32;
    CHECK(hfl_choose(s, &in, &ch, err) == 0 && ch.chosen >= 0);
    CHECK(ch.rows[ch.chosen].precision != HFL_PREC_FP32 && ch.rows[ch.chosen].batch == 32);
    in.be = hfl_backend_cpu();
    CHECK(hfl_choose(s, &in, &ch, err) == 0 && ch.chosen >= 0);
    printf("emulated bf16, budget %zu: chose %d x %d %s %s\n", bf16_32, ch.rows[ch.chosen].accum,
           ch.rows[ch.chosen].batch, hfl_precision_name(ch.rows[ch.chosen].precision),
           hfl_ckpt_name(ch.rows[ch.chosen].ckpt));
    CHECK(ch.rows[ch.chosen].precision == HFL_PREC_FP32 && ch.rows[ch.chosen].step_batch == 32);
    in.budget = fp32_min - 1;
    CHECK(hfl_choose(s, &in, &ch, err) == 0 && ch.chosen >= 0);
    CHECK(ch.rows[ch.chosen].precision != HFL_PREC_FP32);
}

/* Learned overhead that says `none` costs 1 MiB more than other schedules
 * (as noisy first measurements can). */
static uint64_t none_dearer(void *ctx, hfl_precision p, int batch, hfl_ckpt_kind ckpt) {
    (void)ctx, (void)p, (void)batch;
    return ckpt == HFL_CKPT_NONE ? 2u << 20 : 1u << 20;
}

/* mlp's optimal schedule with room drops nothing: the same work as none.
 * Such a tie goes to the plainer schedule whatever the learned overhead
 * says, so two runs never differ on its noise (they once chose none and
 * optimal for one client). */
static void test_schedule_tie(void) {
    hfl_model_spec m;
    CHECK(hfl_model_builtin("mlp", &m, NULL) == 0);
    hfl_chooser_input in = {.budget = UINT64_MAX / 4, .gflops = {100, 100, 100}, .opt_state = HFL_OPT_MOMENTUM,
                            .max_batch = 256, .prefer_batch = 256, .precisions = 1u << HFL_PREC_FP32,
                            .overhead = none_dearer};
    hfl_choice ch;
    char err[HFL_ERR_LEN];
    CHECK(hfl_choose(&m, &in, &ch, err) == 0 && ch.chosen >= 0);
    int optimal_ties = 0;
    for (int i = 0; i < ch.n; i++)
        optimal_ties += ch.rows[i].ckpt == HFL_CKPT_OPTIMAL && ch.rows[i].batch == 256 &&
                        ch.rows[i].samples_per_s == ch.rows[ch.chosen].samples_per_s;
    CHECK_MSG(optimal_ties == 1, "mlp's optimal schedule at 256 does not tie with none (%d)", optimal_ties);
    CHECK_MSG(ch.rows[ch.chosen].ckpt == HFL_CKPT_NONE && ch.rows[ch.chosen].batch == 256, "chose %s at %d",
              hfl_ckpt_name(ch.rows[ch.chosen].ckpt), ch.rows[ch.chosen].batch);
}

static hfl_model_spec cnn; /* the builtin cnn, read in main */

static void test_granularity_cnn(void) { test_granularity(&cnn); }
static void test_inputs_cnn(void) { test_inputs(&cnn); }
static void test_tie_cnn(void) { test_tie(&cnn); }

/* Budgets just below the batch-128 arenas: what the chooser picks, with and
 * without a batch asked for, and a trainer that runs in the chosen arena. */
static void test_budgets(void) {
    hfl_model_spec s = cnn; /* a copy, as main once held it */
    hfl_choice all = choose(&s, UINT64_MAX / 4, 128, 0);
    size_t none128 = 0;
    for (int i = 0; i < all.n; i++)
        if (all.rows[i].batch == 128 && all.rows[i].ckpt == HFL_CKPT_NONE) none128 = all.rows[i].arena;
    CHECK(none128 > 0);
    CHECK(all.chosen >= 0 && all.rows[all.chosen].batch == 128);

    uint64_t budget = none128 - 1;
    hfl_choice free_batch = choose(&s, budget, 128, 0);
    CHECK(free_batch.chosen >= 0);
    const hfl_candidate *c = &free_batch.rows[free_batch.chosen];
    printf("budget %llu, any batch: chose batch %d %s, arena %zu\n", (unsigned long long)budget, c->batch,
           hfl_ckpt_name(c->ckpt), c->arena);
    CHECK(c->fits && c->arena <= budget && !(c->batch == 128 && c->ckpt == HFL_CKPT_NONE));

    /* The run asks for batch 128: every candidate steps over 128 rows. One
     * byte short of 128 without checkpointing, 128 with a schedule whose
     * recompute is within the chooser's 5% tie keeps the larger batch. */
    hfl_choice ch = choose(&s, budget, 128, 128);
    CHECK(ch.chosen >= 0);
    c = &ch.rows[ch.chosen];
    printf("budget %llu, batch 128 asked: chose %d x %d %s, arena %zu (none at 128: %zu)\n",
           (unsigned long long)budget, c->accum, c->batch, hfl_ckpt_name(c->ckpt), c->arena, none128);
    CHECK(c->fits && c->arena <= budget && c->step_batch == 128);
    size_t least128 = SIZE_MAX;
    for (int i = 0; i < ch.n; i++) {
        CHECK(ch.rows[i].step_batch == 128);
        if (ch.rows[i].batch == 128 && ch.rows[i].arena < least128) least128 = ch.rows[i].arena;
    }

    /* Below what any schedule needs at 128: micro-batches accumulating to 128. */
    budget = least128 - 1;
    ch = choose(&s, budget, 128, 128);
    CHECK(ch.chosen >= 0);
    c = &ch.rows[ch.chosen];
    printf("budget %llu, batch 128 asked: chose %d x %d %s, arena %zu\n", (unsigned long long)budget, c->accum,
           c->batch, hfl_ckpt_name(c->ckpt), c->arena);
    CHECK(c->fits && c->arena <= budget);
    CHECK(c->step_batch == 128 && c->batch < 128 && c->accum == (128 + c->batch - 1) / c->batch);
    CHECK(c->batch == 64 && c->ckpt == HFL_CKPT_NONE); /* the largest micro-batch, nothing recomputed */

    /* Allowed a smaller real batch instead: a ladder batch, no accumulation. */
    hfl_choice smaller = choose_opt(&s, budget, 128, 128, 1);
    CHECK(smaller.chosen >= 0);
    const hfl_candidate *sc = &smaller.rows[smaller.chosen];
    for (int i = 0; i < smaller.n; i++) CHECK(smaller.rows[i].accum == 1);
    printf("budget %llu, batch 128 asked, smaller allowed: chose batch %d %s\n", (unsigned long long)budget,
           sc->batch, hfl_ckpt_name(sc->ckpt));
    CHECK(sc->batch == 32 && sc->step_batch == 32 && sc->ckpt == HFL_CKPT_NONE);

    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_plan_config cfg;
    hfl_candidate_config(c, HFL_OPT_MOMENTUM, &cfg);
    char err[HFL_ERR_LEN];
    CHECK(hfl_plan_make(&s, &cfg, plan, err) == 0 && plan->arena_bytes == c->arena);
    hfl_budget_set(budget);
    hfl_trainer *t = hfl_trainer_create_plan(&s, hfl_backend_cpu(), plan, err);
    CHECK(t != NULL);
    float *params = hfl_malloc(s.n_params * sizeof(float));
    hfl_model_init_params(&s, params, 3);
    hfl_trainer_set_params(t, params);
    size_t nx = (size_t)c->step_batch * (size_t)s.in_dim;
    float *x = hfl_malloc(nx * sizeof(float));
    int32_t *y = hfl_malloc(sizeof(int32_t) * (size_t)c->step_batch);
    for (size_t i = 0; i < nx; i++) x[i] = hfl_u01(hfl_philox_u32(5, 1, 0, 0, 0, i));
    for (int i = 0; i < c->step_batch; i++) y[i] = (int32_t)(hfl_philox_u32(5, 1, 0, 0, 1, (uint64_t)i) % 10);
    float l0 = 0, l1 = 0;
    for (int k = 0; k < 4; k++) {
        l1 = hfl_trainer_accumulate(t, x, y, c->step_batch, c->batch);
        hfl_trainer_apply(t, 0.05f, 0.9f, 0.0f);
        if (k == 0) l0 = l1;
    }
    printf("trained under the budget: loss %.4f -> %.4f, backend peak %llu\n", l0, l1,
           (unsigned long long)hfl_budget_peak_bytes());
    CHECK(hfl_budget_peak_bytes() == c->arena); /* the arena and nothing else */
    CHECK(l1 < l0);
    hfl_trainer_free(t);
    hfl_budget_set(0);
    free(plan);
    free(params);
    free(x);
    free(y);
}

/* A budget below every candidate: none chosen, and the least it would take. */
static void test_below_every(void) {
    hfl_model_spec s = cnn; /* a copy, as main once held it */
    hfl_choice none = choose(&s, 1 << 20, 512, 0); /* 1 MiB: below every candidate */
    CHECK(none.chosen < 0);
    CHECK(none.min_budget > (1 << 20));
    size_t smallest = SIZE_MAX;
    for (int i = 0; i < none.n; i++) smallest = none.rows[i].arena < smallest ? none.rows[i].arena : smallest;
    CHECK(none.min_budget == smallest);
    CHECK(none.min_arena_budget == smallest); /* no overhead, no headroom */
}

/* The row of c that steps `batch` rows at once in fp32 without checkpoints. */
static const hfl_candidate *row_at(const hfl_choice *c, int batch) {
    for (int i = 0; i < c->n; i++)
        if (c->rows[i].batch == batch && c->rows[i].accum == 1 && c->rows[i].precision == HFL_PREC_FP32 &&
            c->rows[i].ckpt == HFL_CKPT_NONE)
            return &c->rows[i];
    return NULL;
}

/* CONV CHUNK (plan/chooser.h): a candidate plans the largest chunk allowed
 * (the input's, else the backend's, at most its batch) and halves it while it
 * does not fit. The oracle is the planner itself, given each chunk directly:
 * the row at batch 64 must carry the largest of 64, 32, ..., 1 whose arena
 * fits (or 1 when none does), with that chunk's arena; the plan the trainer
 * and verification make from the row (hfl_candidate_plan) must be that plan,
 * not the backend's chunk; a model without conv layers carries none. */
static void test_conv_chunk(void) {
    hfl_backend wide = *hfl_backend_cpu();
    wide.conv_chunk = HFL_CONV_CHUNK_MAX; /* CUDA's: the whole batch */
    enum { B = 64, N = 7 };               /* chunks 64, 32, ..., 1 */
    size_t arena[N];
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    char err[HFL_ERR_LEN];
    for (int k = 0; k < N; k++) {
        hfl_plan_config cfg = {.batch = B, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .momentum = 1,
                               .conv_chunk = B >> k};
        REQUIRE_MSG(hfl_plan_make(&cnn, &cfg, plan, err) == 0, "%s", err);
        arena[k] = plan->arena_bytes;
        if (k) CHECK_MSG(arena[k] <= arena[k - 1], "chunk %d: arena %zu above chunk %d's %zu", B >> k, arena[k],
                         B >> (k - 1), arena[k - 1]);
    }
    CHECK(arena[0] > 2 * arena[N - 1]); /* the whole batch's columns dominate the cnn's arena */
    hfl_chooser_input in = {.be = &wide, .gflops = {100, 100, 100}, .opt_state = HFL_OPT_MOMENTUM, .max_batch = B,
                            .prefer_batch = B, .precisions = 1u << HFL_PREC_FP32};
    hfl_choice *ch = hfl_malloc(sizeof *ch);
    const hfl_candidate *r;
    for (int k = 0; k < N; k++) { /* a budget between chunk B>>k's arena and the next larger one's */
        in.budget = arena[k] + (k ? (arena[k - 1] - arena[k]) / 2 : 0);
        int want = 0; /* the largest chunk that fits (two chunks may plan the same arena) */
        while (arena[want] > in.budget) want++;
        REQUIRE(hfl_choose(&cnn, &in, ch, err) == 0);
        if (CHECK_MSG((r = row_at(ch, B)) != NULL, "no batch %d row", B)) {
            CHECK_MSG(r->conv_chunk == B >> want && r->arena == arena[want] && r->fits,
                      "budget %llu: chunk %d, arena %zu, fits %d; want chunk %d, arena %zu",
                      (unsigned long long)in.budget, r->conv_chunk, r->arena, r->fits, B >> want, arena[want]);
            CHECK(hfl_candidate_plan(&cnn, &wide, r, HFL_OPT_MOMENTUM, plan, err) == 0 &&
                  plan->arena_bytes == r->arena);
        }
    }
    in.budget = arena[N - 1] - 1; /* not even one sample at a time */
    REQUIRE(hfl_choose(&cnn, &in, ch, err) == 0);
    if (CHECK((r = row_at(ch, B)) != NULL)) CHECK(r->conv_chunk == 1 && !r->fits && r->arena == arena[N - 1]);
    CHECK(ch->min_arena_budget <= arena[N - 1]); /* the refusal names the one-sample figure */

    in.budget = UINT64_MAX / 4;
    in.conv_chunk = 8; /* the input's bound caps the backend's */
    REQUIRE(hfl_choose(&cnn, &in, ch, err) == 0);
    if (CHECK((r = row_at(ch, B)) != NULL)) CHECK(r->conv_chunk == 8 && r->arena == arena[3]);
    in.be = hfl_backend_cpu(); /* one sample at a time, unless the input asks for more */
    in.conv_chunk = 0;
    REQUIRE(hfl_choose(&cnn, &in, ch, err) == 0);
    if (CHECK((r = row_at(ch, B)) != NULL)) CHECK(r->conv_chunk == 1 && r->arena == arena[N - 1]);
    in.conv_chunk = HFL_CONV_CHUNK_MAX; /* at most the batch */
    REQUIRE(hfl_choose(&cnn, &in, ch, err) == 0);
    if (CHECK((r = row_at(ch, B)) != NULL)) CHECK(r->conv_chunk == B && r->arena == arena[0]);
    for (int i = 0; i < ch->n; i++) /* every micro-batch's chunk is its own batch */
        CHECK(ch->rows[i].conv_chunk == ch->rows[i].batch);

    hfl_model_spec mlp;
    REQUIRE(hfl_model_builtin("mlp", &mlp, NULL) == 0);
    REQUIRE(hfl_choose(&mlp, &in, ch, err) == 0);
    for (int i = 0; i < ch->n; i++) CHECK(ch->rows[i].conv_chunk == 0);
    free(ch);
    free(plan);
}

static const check_case cases[] = {
    {"conv_chunk", test_conv_chunk},
    {"calibrate_short", test_calibrate_short},
    {"schedule_tie", test_schedule_tie},
    {"emulated", test_emulated},
    {"granularity", test_granularity_cnn},
    {"budgets", test_budgets},
    {"inputs", test_inputs_cnn},
    {"tie", test_tie_cnn},
    {"below_every", test_below_every},
};

int main(int argc, char **argv) {
    CHECK(hfl_model_builtin("cnn", &cnn, NULL) == 0);
    return check_run("plan_chooser", cases, CHECK_CASES(cases), argc, argv);
}
