/* test_verify.c: plan/verify.c's measurement of a candidate and its plan
 * comparison.
 *
 * median: hfl_probe_measure's figure is the median of three measurements,
 * and the third is not taken when the first two agree (they are the median
 * whatever it would say).
 * The backend is the CPU's with host_memory 0 and a scripted mem_info, so a
 * measurement runs in-process as on a GPU (plan/measure.c): its figure is
 * free memory before the step minus free memory after, and the script sets
 * that fall for each measurement. The expected figures are worked by hand
 * from the script; the number of measurements is the number of mem_info
 * calls over two.
 *
 * same_step: hfl_plan_same_step tells plans apart by anything a step runs
 * (each buffer field, each op field, each buffer role, the arena), and finds
 * `optimal` with an unbounded budget the same as `none` (it stores every
 * activation, checkpoint.h) and `full` not (it recomputes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/choose.h"
#include "tests/check.h"
#include "util/util.h"

#define FREE_BEFORE (64ull << 30)

static uint64_t falls[3]; /* the fall of free memory each measurement reads */
static int calls;          /* mem_info calls so far: two per measurement */

static int scripted_mem_info(uint64_t *free_bytes, uint64_t *total_bytes) {
    int k = calls / 2;
    *free_bytes = calls % 2 == 0 || k >= 3 ? FREE_BEFORE : FREE_BEFORE - falls[k];
    *total_bytes = 2 * FREE_BEFORE;
    calls++;
    return 0;
}

/* The measured figure of one probe of a small mlp candidate under script f. */
static uint64_t probe_with(const uint64_t f[3], int *measurements) {
    hfl_backend be = *hfl_backend_cpu();
    be.host_memory = 0;
    be.mem_info = scripted_mem_info;
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    REQUIRE_MSG(hfl_model_resolve("mlp", &spec, err) == 0, "%s", err);
    hfl_candidate c = {.batch = 4, .accum = 1, .step_batch = 4, .precision = HFL_PREC_FP32, .ckpt = HFL_CKPT_NONE};
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    REQUIRE_MSG(hfl_candidate_plan(&spec, &be, &c, HFL_OPT_MOMENTUM, plan, err) == 0, "%s", err);
    c.arena = plan->arena_bytes;
    free(plan);
    memcpy(falls, f, sizeof falls);
    calls = 0;
    hfl_probe *p = hfl_probe_new(&spec, 4, 0);
    uint64_t measured = 0, process = 1;
    int held = -1;
    int rc = hfl_probe_measure(p, &be, &c, HFL_OPT_MOMENTUM, NULL, &measured, &held, &process, err);
    hfl_probe_free(p);
    CHECK_MSG(rc == 0, "%s", err);
    CHECK_MSG(held == 0 && process == 0, "held %d, process %llu without a cost or NVML", held,
              (unsigned long long)process);
    CHECK_MSG(calls % 2 == 0, "%d mem_info calls: not two per measurement", calls);
    *measurements = calls / 2;
    return measured;
}

static void test_median(void) {
    static const struct {
        uint64_t falls[3], median;
        int measurements;
    } scripts[] = {
        {{700, 700, 1}, 700, 2},   /* the first two agree: the third is not taken */
        {{700, 900, 800}, 800, 3}, /* all differ: the middle one */
        {{900, 700, 900}, 900, 3}, /* the third agrees with the first */
        {{700, 900, 100}, 700, 3}, /* the third below both: the lower of the two */
        {{700, 900, 5000}, 900, 3},
    };
    for (size_t i = 0; i < sizeof scripts / sizeof *scripts; i++) {
        int n = 0;
        uint64_t got = probe_with(scripts[i].falls, &n);
        CHECK_MSG(got == scripts[i].median && n == scripts[i].measurements,
                  "falls %llu %llu %llu: figure %llu from %d measurements, expected %llu from %d",
                  (unsigned long long)scripts[i].falls[0], (unsigned long long)scripts[i].falls[1],
                  (unsigned long long)scripts[i].falls[2], (unsigned long long)got, n,
                  (unsigned long long)scripts[i].median, scripts[i].measurements);
    }
}

/* mlp's plan at batch `batch` with schedule `kind` (unbounded budget). */
static void mlp_plan(int batch, hfl_ckpt_kind kind, hfl_plan *plan) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    REQUIRE_MSG(hfl_model_resolve("mlp", &spec, err) == 0, "%s", err);
    hfl_candidate c = {.batch = batch, .accum = 1, .step_batch = batch, .precision = HFL_PREC_FP32, .ckpt = kind,
                       .ckpt_budget = SIZE_MAX};
    REQUIRE_MSG(hfl_candidate_plan(&spec, hfl_backend_cpu(), &c, HFL_OPT_MOMENTUM, plan, err) == 0, "%s", err);
}

static void test_same_step(void) {
    hfl_plan *a = hfl_malloc(sizeof *a), *b = hfl_malloc(sizeof *b);
    mlp_plan(8, HFL_CKPT_NONE, a);
    mlp_plan(8, HFL_CKPT_OPTIMAL, b);
    CHECK_MSG(hfl_plan_same_step(a, b), "optimal with no budget bound is not none's step");
    mlp_plan(8, HFL_CKPT_FULL, b);
    CHECK_MSG(!hfl_plan_same_step(a, b), "full, which recomputes, is none's step");
    mlp_plan(16, HFL_CKPT_NONE, b);
    CHECK_MSG(!hfl_plan_same_step(a, b), "batch 16 is batch 8's step");
    /* one field changed at a time in a copy */
    const int last = a->n_buffers - 1, op = a->n_ops / 2;
    static const char *const what[] = {"arena", "a buffer's name", "a buffer's category", "a buffer's layer",
                                       "a buffer's count", "a buffer's element size", "a buffer's bytes",
                                       "a buffer's first op", "a buffer's last op", "a buffer's offset",
                                       "an op's kind", "an op's layer", "an op's recompute", "an op's in",
                                       "an op's out", "an op's dout", "an op's din", "an op's ws",
                                       "an op's labels", "an op's saved", "the momentum role", "the loss op",
                                       "the optimizer op", "the number of ops"};
    for (int k = 0; k < (int)(sizeof what / sizeof *what); k++) {
        *b = *a;
        CHECK(hfl_plan_same_step(a, b));
        hfl_plan_buffer *x = &b->buffers[last];
        hfl_plan_op *o = &b->ops[op];
        switch (k) {
        case 0: b->arena_bytes += 64; break;
        case 1: x->name[0] ^= 1; break;
        case 2: x->category = x->category == HFL_BUF_INPUT ? HFL_BUF_WORKSPACE : HFL_BUF_INPUT; break;
        case 3: x->layer++; break;
        case 4: x->count++; break;
        case 5: x->elem_bytes ^= 6; break; /* 4 <-> 2 */
        case 6: x->bytes++; break;
        case 7: x->first_op++; break;
        case 8: x->last_op++; break;
        case 9: x->offset += 64; break;
        case 10: o->kind = o->kind == HFL_OP_FORWARD ? HFL_OP_BACKWARD : HFL_OP_FORWARD; break;
        case 11: o->layer++; break;
        case 12: o->recompute ^= 1; break;
        case 13: o->in++; break;
        case 14: o->out++; break;
        case 15: o->dout++; break;
        case 16: o->din++; break;
        case 17: o->ws++; break;
        case 18: o->labels++; break;
        case 19: o->saved++; break;
        case 20: b->momentum = -1; break;
        case 21: b->loss_op++; break;
        case 22: b->optimizer_op--; break;
        default: b->n_ops--; break;
        }
        CHECK_MSG(!hfl_plan_same_step(a, b), "plans that differ in %s are the same step", what[k]);
    }
    free(a);
    free(b);
}

static const check_case cases[] = {{"median", test_median}, {"same_step", test_same_step}};

int main(int argc, char **argv) { return check_run("test_verify", cases, CHECK_CASES(cases), argc, argv); }
