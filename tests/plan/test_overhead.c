/* test_overhead.c: the overhead model (plan/overhead.h) on hand-made
 * measurements whose medians are worked out here: the prior before any
 * measurement (host and device), the fleet's estimate, one median per
 * precision class and the other class as the fallback, the exact host
 * staging term, noise below zero, the ring of the newest records, and with
 * a BLAS footprint: residuals learned, each configuration's own footprint
 * added back (another model's too), none without a blocking or over the
 * prior. */
#include <stdlib.h>
#include <string.h>

#include "plan/overhead.h"
#include "model/model.h"
#include "tests/check.h"
#include "util/util.h"

#define MiB 1048576.0

static hfl_overhead_model *m; /* the model every case starts afresh (hfl_overhead_init), made in main */

/* The staging bytes, and the priors before any measurement. */
static void test_staging_and_priors(void) {
    /* staging: batch * (in_dim + 1) floats on the host, nothing on a device */
    CHECK(hfl_overhead_staging(1, 32, 784, 1) == 32u * 785 * 4);
    CHECK(hfl_overhead_staging(1, 32, 64, 64) == 32u * 128 * 4); /* a language model: T labels */
    CHECK(hfl_overhead_staging(0, 32, 784, 1) == 0);

    hfl_overhead_init(m, 1, 784, 1, 0);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 8) == HFL_OVERHEAD_PRIOR_HOST + 8u * 785 * 4);
    CHECK(!strcmp(hfl_overhead_source(m, HFL_PREC_BF16), "prior"));
    hfl_overhead_init(m, 0, 784, 1, 0);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP16, 8) == HFL_OVERHEAD_PRIOR_DEVICE);
    hfl_overhead_init(m, 1, 784, 1, 3 * MiB); /* the fleet's figure is a whole overhead */
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 64) == (uint64_t)(3 * MiB));
    CHECK(!strcmp(hfl_overhead_source(m, HFL_PREC_FP32), "fleet"));
}

/* Measured extras: the median of a class, and a class standing in for another. */
static void test_classes(void) {
    /* fp32 extras 1, 3, 2 MiB (measured - arena - staging) at any batch and
     * arena: the fp32 median is 2 MiB, for any batch, plus that batch's staging */
    hfl_overhead_init(m, 1, 100, 1, 3 * MiB);
    hfl_overhead_add(m, HFL_PREC_FP32, 1, 10 * MiB, 404, 0, 10 * MiB + 404 + 1 * MiB);
    hfl_overhead_add(m, HFL_PREC_FP32, 512, 50 * MiB, 0, 0, 50 * MiB + 3 * MiB); /* another model's: no staging */
    hfl_overhead_add(m, HFL_PREC_FP32, 32, 20 * MiB, 1000, 0, 20 * MiB + 1000 + 2 * MiB);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 16) == 16u * 101 * 4 + (uint64_t)(2 * MiB));
    CHECK(!strcmp(hfl_overhead_source(m, HFL_PREC_FP32), "class"));
    /* no 2-byte measurement yet: fp32's median stands in */
    CHECK(hfl_overhead_predict(m, HFL_PREC_BF16, 1) == 404 + (uint64_t)(2 * MiB));
    CHECK(!strcmp(hfl_overhead_source(m, HFL_PREC_FP16), "other-class"));
    /* bf16 and fp16 are one class: extras 5 and 7 MiB, median 6 MiB */
    hfl_overhead_add(m, HFL_PREC_BF16, 8, 1 * MiB, 0, 0, 6 * MiB);
    hfl_overhead_add(m, HFL_PREC_FP16, 8, 1 * MiB, 0, 0, 8 * MiB);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP16, 1) == 404 + (uint64_t)(6 * MiB));
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 1) == 404 + (uint64_t)(2 * MiB)); /* unchanged */
}

static void test_under_arena(void) {
    /* a class whose measurements came in under the arena (noise) adds no extra */
    hfl_overhead_init(m, 0, 100, 1, 0);
    hfl_overhead_add(m, HFL_PREC_FP32, 8, 10 * MiB, 0, 0, 9 * MiB);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 8) == 0);
}

static void test_newest_count(void) {
    /* the newest HFL_OVERHEAD_MAX records count: an old outlier ages out */
    hfl_overhead_init(m, 0, 100, 1, 0);
    hfl_overhead_add(m, HFL_PREC_FP32, 8, 0, 0, 0, 100 * MiB);
    for (int i = 0; i < HFL_OVERHEAD_MAX; i++) hfl_overhead_add(m, HFL_PREC_FP32, 8, 0, 0, 0, (i % 2 ? 1 : 3) * MiB);
    CHECK(m->n == HFL_OVERHEAD_MAX && m->rec[0].extra == 3 * MiB);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 8) == (uint64_t)(2 * MiB)); /* even count: mean of 1 and 3 */
}

static void test_footprint(void) {
    /* with a footprint: each record's residual (extra - its footprint) is
     * what is learned, and a prediction adds its own configuration's
     * footprint. Records of mlp at batches 1 and 512 whose residual is 40
     * KiB predict mlp's batch 128, and a GPT's batch 1, at 40 KiB over their
     * own footprints (plan/blas_footprint.h, tested in test_blas_footprint). */
    hfl_model_spec *mlp = malloc(sizeof *mlp), *gpt = malloc(sizeof *gpt);
    char err[HFL_ERR_LEN];
    static const char gj[] = "{\"name\": \"g\", \"input\": [16], \"layers\": ["
                             "{\"type\": \"embedding\", \"vocab\": 64, \"width\": 32},"
                             "{\"type\": \"gpt_block\", \"heads\": 2}, {\"type\": \"lm_head\"}]}";
    REQUIRE(hfl_model_builtin("mlp", mlp, err) == 0);
    REQUIRE(hfl_model_spec_from_json(gj, strlen(gj), gpt, err) == 0);
    hfl_blas_blocking hw;
    REQUIRE(hfl_blas_blocking_for("Haswell", &hw) == 0);
    hfl_overhead_init(m, 1, 784, 1, 0);
    hfl_overhead_set_footprint(m, mlp, &hw);
    uint64_t f1 = hfl_overhead_footprint(m, HFL_PREC_FP32, 1), f512 = hfl_overhead_footprint(m, HFL_PREC_FP32, 512);
    uint64_t f128 = hfl_overhead_footprint(m, HFL_PREC_FP32, 128);
    CHECK(f1 == hfl_blas_step_footprint(mlp, 1, HFL_PREC_FP32, &hw) && f512 > f128 && f128 > f1);
    hfl_overhead_add(m, HFL_PREC_FP32, 1, 1 * MiB, 3140, (double)f1, 1 * MiB + 3140 + f1 + 40960);
    hfl_overhead_add(m, HFL_PREC_FP32, 512, 9 * MiB, 512 * 3140, (double)f512, 9 * MiB + 512 * 3140 + f512 + 40960);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 128) == 128u * 3140 + f128 + 40960);
    hfl_overhead_set_footprint(m, gpt, &hw); /* in_dim 784 kept: staging as before */
    uint64_t g1 = hfl_blas_step_footprint(gpt, 1, HFL_PREC_FP32, &hw);
    CHECK(g1 > 0 && g1 < f1 && hfl_overhead_predict(m, HFL_PREC_FP32, 1) == 3140 + g1 + 40960);
    hfl_overhead_set_footprint(m, gpt, NULL); /* unknown core: the records count whole */
    CHECK(hfl_overhead_footprint(m, HFL_PREC_FP32, 1) == 0);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 1) == 3140 + (uint64_t)(40960 + (f1 + f512) / 2.0));
    hfl_overhead_init(m, 1, 784, 1, 0); /* the prior bounds the whole extra: no footprint added */
    hfl_overhead_set_footprint(m, mlp, &hw);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 512) == HFL_OVERHEAD_PRIOR_HOST + 512u * 3140);
    free(mlp), free(gpt);
}

static const check_case cases[] = {
    {"staging_and_priors", test_staging_and_priors},
    {"classes", test_classes},
    {"under_arena", test_under_arena},
    {"newest_count", test_newest_count},
    {"footprint", test_footprint},
};

int main(int argc, char **argv) {
    m = malloc(sizeof *m);
    int rc = check_run("test_overhead", cases, CHECK_CASES(cases), argc, argv);
    free(m);
    return rc;
}
