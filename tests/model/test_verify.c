/* test_probe_median.c: hfl_probe_measure's figure (plan/verify.c) is the
 * median of three measurements, and the third is not taken when the first
 * two agree (they are the median whatever it would say).
 *
 * The backend is the CPU's with host_memory 0 and a scripted mem_info, so a
 * measurement runs in-process as on a GPU (plan/measure.c): its figure is
 * free memory before the step minus free memory after, and the script sets
 * that fall for each measurement. The expected figures are worked by hand
 * from the script; the number of measurements is the number of mem_info
 * calls over two. */
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
    hfl_plan_config cfg;
    hfl_candidate_config(&c, HFL_OPT_MOMENTUM, &cfg);
    hfl_plan_config_for_backend(&cfg, &be);
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    REQUIRE_MSG(hfl_plan_make(&spec, &cfg, plan, err) == 0, "%s", err);
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

int main(void) {
    static const struct {
        uint64_t falls[3], median;
        int measurements;
    } cases[] = {
        {{700, 700, 1}, 700, 2},   /* the first two agree: the third is not taken */
        {{700, 900, 800}, 800, 3}, /* all differ: the middle one */
        {{900, 700, 900}, 900, 3}, /* the third agrees with the first */
        {{700, 900, 100}, 700, 3}, /* the third below both: the lower of the two */
        {{700, 900, 5000}, 900, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = 0;
        uint64_t got = probe_with(cases[i].falls, &n);
        CHECK_MSG(got == cases[i].median && n == cases[i].measurements,
                  "falls %llu %llu %llu: figure %llu from %d measurements, expected %llu from %d",
                  (unsigned long long)cases[i].falls[0], (unsigned long long)cases[i].falls[1],
                  (unsigned long long)cases[i].falls[2], (unsigned long long)got, n,
                  (unsigned long long)cases[i].median, cases[i].measurements);
    }
    return check_exit_code("test_probe_median");
}
