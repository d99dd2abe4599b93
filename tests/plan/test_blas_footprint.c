/* test_blas_footprint.c: plan/blas_footprint.h against what is really
 * called and what OpenBLAS's blocking gives by hand.
 *
 * 1. The blocking rule on shapes worked out here from level3.c's rules
 *    (row-major m x n x k is OpenBLAS's M = n, N = m): each branch of min_l,
 *    min_i and the B region's slot rule, for Haswell's blocking and for
 *    SkylakeX's and Cooperlake's, with their small-matrix path's limits.
 *    (The figures agree with the resident growth of single calls measured
 *    on a Xeon with each kernel set forced, docs/benchmarks.md.)
 * 2. The calls: for mlp, cnn, a GPT and a GPT with LoRA, at batches 1, 3
 *    and 8, in fp32 and bf16, the set of GEMM calls (transposes and shape)
 *    hfl_step_gemms lists
 *    equals the set the CPU backend really calls over one training step
 *    (its observer sees every sgemm, a 2-byte gemm's tiles included). A layer's
 *    GEMM left out of the list, or one listed that the step never calls,
 *    fails it. */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/philox.h"
#include "plan/blas_footprint.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

#define MAX_SHAPES 256

typedef struct {
    int n;
    int s[MAX_SHAPES][5]; /* ta, tb, m, n, k */
} shape_set;

static void add_shape(void *ctx, int ta, int tb, int m, int n, int k) {
    shape_set *set = ctx;
    int c[5] = {ta, tb, m, n, k};
    for (int i = 0; i < set->n; i++)
        if (!memcmp(set->s[i], c, sizeof c)) return;
    REQUIRE(set->n < MAX_SHAPES);
    memcpy(set->s[set->n++], c, sizeof c);
}

static int has(const shape_set *set, const int *s) {
    for (int i = 0; i < set->n; i++)
        if (!memcmp(set->s[i], s, sizeof set->s[i])) return 1;
    return 0;
}

/* One call; ta = tb = 0 unless the case is about the small-matrix path. */
static uint64_t one_t(const hfl_blas_blocking *b, int ta, int tb, int m, int n, int k) {
    hfl_blas_footprint f = {b, 0, 0};
    hfl_blas_footprint_gemm(&f, ta, tb, m, n, k);
    return hfl_blas_footprint_bytes(&f);
}
static uint64_t one(const hfl_blas_blocking *b, int m, int n, int k) { return one_t(b, 0, 0, m, n, k); }

static uint64_t pages(uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

static void test_blocking(void) {
    hfl_blas_blocking b;
    CHECK(hfl_blas_blocking_for("Prescott", &b) == -1 && b.p == 0);
    CHECK(hfl_blas_blocking_for(NULL, &b) == -1);
    REQUIRE(hfl_blas_blocking_for("Haswell", &b) == 0);
    CHECK(b.p == 320 && b.q == 320 && b.b_offset == 409600);
    /* mlp's first layer forward at batch 1: M 200 <= P (whole), K 784 >= 2Q
     * (Q deep), N 1 (one column of B, in the shared slot) */
    CHECK(one(&b, 1, 200, 784) == pages(200 * 320 * 4) + pages(320 * 1 * 4));
    /* its dW at batch 512: M 784 >= 2P (P rows), K 512 in (Q, 2Q): half,
     * rounded up to UM; M > P so each of N's 200 columns has a slot */
    CHECK(one(&b, 200, 784, 512) == pages(320 * 256 * 4) + pages(256 * 200 * 4));
    /* M 500 in (P, 2P): half rounded up to 8 (256); K 100 whole */
    CHECK(one(&b, 40, 500, 100) == pages(256 * 100 * 4) + pages(100 * 40 * 4));
    /* the min_jj rule with M <= P: N >= 12 -> 12, 4 < N < 12 -> 4, else N */
    CHECK(one(&b, 64, 64, 64) == pages(64 * 64 * 4) + pages(64 * 12 * 4));
    CHECK(one(&b, 7, 64, 64) == pages(64 * 64 * 4) + pages(64 * 4 * 4));
    CHECK(one(&b, 3, 64, 64) == pages(64 * 64 * 4) + pages(64 * 3 * 4));
    /* a step is the largest A plus the largest B, not the largest call */
    /* Haswell has no small-matrix path: 64^3 NN packs like any call */
    CHECK(one_t(&b, 1, 0, 64, 64, 64) == pages(64 * 64 * 4) + pages(64 * 12 * 4));
    hfl_blas_footprint f = {&b, 0, 0};
    hfl_blas_footprint_gemm(&f, 0, 0, 1, 200, 784);  /* A 200 x 320, B 320 x 1 */
    hfl_blas_footprint_gemm(&f, 0, 0, 200, 784, 100); /* A 320 x 100, B 100 x 200 */
    CHECK(hfl_blas_footprint_bytes(&f) == pages(200 * 320 * 4) + pages(100 * 200 * 4));
    CHECK(hfl_blas_step_footprint(NULL, 8, HFL_PREC_FP32, NULL) == 0); /* unknown core */

    /* Cooperlake: P 640, Q 320, UM 16 */
    REQUIRE(hfl_blas_blocking_for("Cooperlake", &b) == 0);
    CHECK(b.p == 640 && b.q == 320 && b.b_offset == 819200 && b.small_matrix);
    /* 400^3: K 400 in (Q, 2Q): half rounded up to 16 (208); M 400 <= P whole */
    CHECK(one(&b, 400, 400, 400) == pages(400 * 208 * 4) + pages(208 * 12 * 4));
    /* 1000^3: K >= 2Q (320 deep); M in (P, 2P): 500 rounded up to 16 (512) */
    CHECK(one(&b, 1000, 1000, 1000) == pages(512 * 320 * 4) + pages(320 * 1000 * 4));
    /* the small-matrix path: M N K <= 100^3 takes no buffer (NN, and row-major
     * A^T B, which is the column-major call's NT) */
    CHECK(one(&b, 100, 100, 100) == 0);
    CHECK(one_t(&b, 1, 0, 64, 64, 64) == 0);
    CHECK(one(&b, 100, 100, 101) == pages(100 * 101 * 4) + pages(101 * 12 * 4));
    /* row-major A B^T is the column-major TN: only M N <= 1200 and K >= 32 */
    CHECK(one_t(&b, 0, 1, 30, 30, 64) == 0);
    CHECK(one_t(&b, 0, 1, 40, 40, 64) == pages(40 * 64 * 4) + pages(64 * 12 * 4));
    CHECK(one_t(&b, 0, 1, 30, 30, 16) == pages(30 * 16 * 4) + pages(16 * 12 * 4));
    /* row-major A^T B^T is TT: K >= 4 */
    CHECK(one_t(&b, 1, 1, 64, 64, 64) == 0);
    CHECK(one_t(&b, 1, 1, 64, 64, 3) == pages(64 * 3 * 4) + pages(3 * 12 * 4));

    /* SkylakeX: P = Q = 448, UM 16 */
    REQUIRE(hfl_blas_blocking_for("SkylakeX", &b) == 0);
    CHECK(b.p == 448 && b.q == 448 && b.b_offset == 802816 && b.small_matrix);
    CHECK(one(&b, 400, 400, 400) == pages(400 * 400 * 4) + pages(400 * 12 * 4));
    /* 1000^3: K >= 2Q; M 1000 >= 2P: P rows */
    CHECK(one(&b, 1000, 1000, 1000) == pages(448 * 448 * 4) + pages(448 * 1000 * 4));
    CHECK(one(&b, 400, 100, 400) == pages(100 * 400 * 4) + pages(400 * 12 * 4));
}

static const char *gpt_json =
    "{\"name\": \"g\", \"input\": [12], \"layers\": ["
    "{\"type\": \"embedding\", \"vocab\": 40, \"width\": 24}, {\"type\": \"gpt_block\", \"heads\": 3},"
    "{\"type\": \"gpt_block\", \"heads\": 3}, {\"type\": \"lm_head\"}]%s}";

/* One real step of spec at `batch` in precision p with the observer on. */
static void real_shapes(const hfl_model_spec *spec, int batch, hfl_precision p, shape_set *set) {
    char err[HFL_ERR_LEN] = "";
    const hfl_backend *be = hfl_backend_cpu();
    hfl_plan *plan = malloc(sizeof *plan);
    hfl_plan_config cfg = {.batch = batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = 1, .precision = p};
    hfl_plan_config_for_backend(&cfg, be);
    REQUIRE_MSG(hfl_plan_make(spec, &cfg, plan, err) == 0, "%s", err);
    hfl_trainer *t = hfl_trainer_create_plan(spec, be, plan, err);
    REQUIRE_MSG(t != NULL, "%s", err);
    float *params = malloc(sizeof(float) * spec->n_params);
    hfl_model_init_params(spec, params, 7);
    hfl_trainer_set_params(t, params);
    size_t nx = (size_t)batch * spec->in_dim, ny = (size_t)batch * spec->label_rows;
    float *x = malloc(sizeof(float) * nx);
    int32_t *y = malloc(sizeof(int32_t) * ny);
    int lm = spec->layers[0].kind == HFL_LAYER_EMBED;
    for (size_t i = 0; i < nx; i++) {
        uint32_t r = hfl_philox_u32(3, 0, 0, 0, 0, i);
        x[i] = lm ? (float)(r % (uint32_t)spec->layers[0].vocab) : hfl_u01(r);
    }
    for (size_t i = 0; i < ny; i++)
        y[i] = (int32_t)(hfl_philox_u32(3, 1, 0, 0, 0, i) % (uint32_t)spec->n_classes);
    set->n = 0;
    hfl_backend_cpu_observe_gemms(add_shape, set);
    hfl_trainer_step(t, x, y, batch, 0.01f, 0.9f, 0.0f);
    hfl_backend_cpu_observe_gemms(NULL, NULL);
    hfl_trainer_free(t);
    free(params), free(x), free(y), free(plan);
}

static void test_shapes(const char *what, const hfl_model_spec *spec) {
    static const int batches[] = {1, 3, 8};
    static const hfl_precision precs[] = {HFL_PREC_FP32, HFL_PREC_BF16};
    shape_set *real = malloc(sizeof *real), *listed = malloc(sizeof *listed);
    for (int bi = 0; bi < 3; bi++)
        for (int pi = 0; pi < 2; pi++) {
            real_shapes(spec, batches[bi], precs[pi], real);
            listed->n = 0;
            hfl_step_gemms(spec, batches[bi], precs[pi], add_shape, listed);
            int missing = 0, extra = 0;
            for (int i = 0; i < real->n; i++) missing += !has(listed, real->s[i]);
            for (int i = 0; i < listed->n; i++) extra += !has(real, listed->s[i]);
            CHECK_MSG(real->n > 0 && missing == 0 && extra == 0,
                      "%s batch %d %s: %d calls made, %d listed; %d made but not listed, "
                      "%d listed but not called", what, batches[bi], hfl_precision_name(precs[pi]),
                      real->n, listed->n, missing, extra);
        }
    free(real), free(listed);
}

static void builtin_shapes(const char *name) {
    char err[HFL_ERR_LEN] = "";
    hfl_model_spec *spec = malloc(sizeof *spec);
    REQUIRE(hfl_model_builtin(name, spec, err) == 0);
    test_shapes(name, spec);
    free(spec);
}

/* The GPT of gpt_json, with `extra` (a LoRA clause or nothing) in its spec. */
static void gpt_shapes(const char *name, const char *extra) {
    char err[HFL_ERR_LEN] = "", js[512];
    hfl_model_spec *spec = malloc(sizeof *spec);
    snprintf(js, sizeof js, gpt_json, extra);
    REQUIRE_MSG(hfl_model_spec_from_json(js, strlen(js), spec, err) == 0, "%s", err);
    test_shapes(name, spec);
    free(spec);
}

static void case_mlp(void) { builtin_shapes("mlp"); }
static void case_cnn(void) { builtin_shapes("cnn"); }
static void case_gpt(void) { gpt_shapes("gpt", ""); }
static void case_gpt_lora(void) { gpt_shapes("gpt-lora", ", \"lora\": {\"rank\": 2, \"alpha\": 4}"); }

static const check_case cases[] = {
    {"blocking", test_blocking},
    {"mlp", case_mlp},
    {"cnn", case_cnn},
    {"gpt", case_gpt},
    {"gpt_lora", case_gpt_lora},
};

int main(int argc, char **argv) {
    return check_run("test_blas_footprint", cases, CHECK_CASES(cases), argc, argv);
}
