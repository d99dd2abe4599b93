/* plan_test.h: what test_planner.c and test_precision.c share: the two small
 * JSON models (tiny, odd), load_spec, make_plan in a given precision, the
 * precision-independent part of the placement check, random batches, the
 * placement matrix (for_each_plan), the across-schedules gradient check and
 * the clusters task (clusters_task, clusters_train).
 *
 * test_precision.c's odd model has an extra overlapping max-pool (size 2,
 * stride 1) after its ReLU pair; it defines PLAN_TEST_ODD_OVERLAPPING_POOL
 * before including this header to get it. */
#ifndef HFL_TESTS_MODEL_PLAN_TEST_H
#define HFL_TESTS_MODEL_PLAN_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
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
/* A pool below the first parametric layer, a ReLU after a ReLU (not in place)
 * and, with PLAN_TEST_ODD_OVERLAPPING_POOL, overlapping pool windows. */
#ifdef PLAN_TEST_ODD_OVERLAPPING_POOL
#define PLAN_TEST_ODD_POOL "{\"type\": \"maxpool2d\", \"size\": 2, \"stride\": 1},"
#else
#define PLAN_TEST_ODD_POOL ""
#endif
static const char *odd_json =
    "{\"name\": \"odd\", \"input\": [1, 8, 8], \"layers\": ["
    "{\"type\": \"maxpool2d\", \"size\": 2}, {\"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"pad\": 1},"
    "{\"type\": \"relu\"}, {\"type\": \"relu\"}, " PLAN_TEST_ODD_POOL
    "{\"type\": \"dense\", \"out\": 5}, {\"type\": \"relu\"},"
    "{\"type\": \"dense\", \"out\": 6}, {\"type\": \"relu\"}, {\"type\": \"dense\", \"out\": 3}]}";

static inline void load_spec(const char *name, hfl_model_spec *s) {
    char err[HFL_ERR_LEN] = "";
    int rc = strcmp(name, "tiny") == 0  ? hfl_model_spec_from_json(tiny_json, strlen(tiny_json), s, err)
             : strcmp(name, "odd") == 0 ? hfl_model_spec_from_json(odd_json, strlen(odd_json), s, err)
                                        : hfl_model_builtin(name, s, err);
    if (rc != 0) fprintf(stderr, "%s: %s\n", name, err);
    CHECK(rc == 0);
}

/* A plan of `kind` in `prec` (activation size left to the precision: 4 bytes
 * for fp32, 2 otherwise); optimal gets a budget halfway between the least
 * peak and the none schedule's peak, and must meet it. */
static inline void make_plan(const hfl_model_spec *s, int batch, hfl_ckpt_kind kind, int momentum,
                             hfl_precision prec, hfl_plan *p) {
    char err[HFL_ERR_LEN] = "";
    hfl_plan_config cfg = {.batch = batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = momentum, .precision = prec};
    size_t budget = SIZE_MAX;
    if (kind == HFL_CKPT_OPTIMAL) {
        CHECK(hfl_plan_make(s, &cfg, p, err) == 0);
        budget = p->ckpt.min_peak + (p->ckpt.peak - p->ckpt.min_peak) / 2;
    }
    cfg.ckpt = kind;
    cfg.ckpt_budget = budget;
    if (hfl_plan_make(s, &cfg, p, err) != 0) fprintf(stderr, "plan: %s\n", err);
    if (kind == HFL_CKPT_OPTIMAL) CHECK(p->ckpt.feasible && p->ckpt.peak <= budget);
    CHECK(p->cfg.precision == prec && p->cfg.act_elem_bytes == hfl_precision_bytes(prec));
}

/* What every placement must satisfy whatever its precision, by brute force:
 * sizes, lifetimes and alignment of each buffer, no two buffers alive at a
 * common op sharing a byte, every op's buffers alive at it, and the
 * breakdown adding up to the live peak. The live peak itself, and the
 * precision's own buffers, each test checks beside this. */
static inline void check_placement_common(const hfl_plan *p) {
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
    for (int o = 0; o < p->n_ops; o++) {
        const hfl_plan_op *op = &p->ops[o];
        int used[6] = {op->in, op->out, op->dout, op->din, op->ws, op->labels};
        for (int k = 0; k < 6; k++)
            if (used[k] >= 0)
                CHECK(p->buffers[used[k]].first_op <= o && o <= p->buffers[used[k]].last_op);
    }
    size_t sum = 0;
    for (int c = 0; c < HFL_BUF_N_CATEGORIES; c++) sum += p->breakdown[c];
    CHECK(sum == p->live_peak);
}

static inline void check_placement(const hfl_plan *p);

static inline void random_batch(const hfl_model_spec *s, int n, float *x, int32_t *y, uint32_t key) {
    for (size_t i = 0; i < (size_t)n * s->in_dim; i++)
        x[i] = 2.0f * hfl_u01(hfl_philox_u32(7, key, 0, 0, 0, i)) - 1.0f;
    for (int i = 0; i < n; i++) y[i] = (int32_t)(hfl_philox_u32(7, key, 0, 0, 1, (uint64_t)i) % s->n_classes);
}

/* The placement matrix: for each of mlp, cnn, tiny and odd (model 0..3), each
 * of the n_batches batches, each schedule and momentum off and on, a plan in
 * `prec` that passes the including test's check_placement, handed to `visit`
 * (when not NULL) with its spec and model index. */
typedef void (*plan_visit)(const hfl_model_spec *s, int model, const hfl_plan *p, void *ctx);
static inline void for_each_plan(const int *batches, int n_batches, hfl_precision prec,
                                 plan_visit visit, void *ctx) {
    const char *names[4] = {"mlp", "cnn", "tiny", "odd"};
    hfl_plan *p = hfl_malloc(sizeof *p);
    for (int m = 0; m < 4; m++) {
        hfl_model_spec s;
        load_spec(names[m], &s);
        for (int b = 0; b < n_batches; b++)
            for (int k = 0; k < 4; k++)
                for (int mom = 0; mom < 2; mom++) {
                    make_plan(&s, batches[b], kinds[k], mom, prec, p);
                    check_placement(p);
                    if (visit) visit(&s, m, p, ctx);
                }
    }
    free(p);
}

/* Losses and gradients of a forward and backward pass on n <= batch samples, bit-identical
 * across the four schedules within precision `prec`; each plan passes the
 * including test's check_placement, and the checkpointed plans really recompute. */
static inline void test_identical_gradients(const char *name, int batch, int n, hfl_precision prec) {
    hfl_model_spec s;
    load_spec(name, &s);
    float *x = hfl_malloc((size_t)n * s.in_dim * sizeof(float));
    float *params = hfl_malloc(s.n_params * sizeof(float));
    int32_t *y = hfl_malloc((size_t)n * sizeof(int32_t));
    float *g[4];
    float loss[4];
    random_batch(&s, n, x, y, 1);
    hfl_model_init_params(&s, params, 3);
    hfl_plan *p = hfl_malloc(sizeof *p);
    int recomputing = 0;
    for (int k = 0; k < 4; k++) {
        char err[HFL_ERR_LEN] = "";
        make_plan(&s, batch, kinds[k], 0, prec, p);
        check_placement(p);
        for (int o = 0; o < p->n_ops; o++) recomputing += k > 0 && p->ops[o].recompute;
        g[k] = hfl_malloc(s.n_params * sizeof(float));
        hfl_trainer *t = hfl_trainer_create_plan(&s, hfl_backend_cpu(), p, err);
        CHECK(t != NULL);
        if (!t) return;
        hfl_trainer_set_params(t, params);
        loss[k] = hfl_trainer_accumulate(t, x, y, n, n);
        hfl_trainer_get_grads(t, g[k]);
        hfl_trainer_free(t);
    }
    CHECK(recomputing > 0); /* the checkpointed plans do drop activations */
    for (int k = 1; k < 4; k++) {
        CHECK(memcmp(&loss[k], &loss[0], sizeof loss[0]) == 0);
        if (memcmp(g[k], g[0], s.n_params * sizeof(float)) != 0)
            fprintf(stderr, "%s %s batch %d/%d: %s gradient differs from none\n", name,
                    hfl_precision_name(prec), n, batch, hfl_ckpt_name(kinds[k]));
        CHECK(memcmp(g[k], g[0], s.n_params * sizeof(float)) == 0);
    }
    for (int k = 0; k < 4; k++) free(g[k]);
    free(p);
    free(x);
    free(y);
    free(params);
}

/* The clusters task: four noisy clusters in CLUSTERS_D = 24 dimensions for a
 * 4-hidden-layer MLP (24-48-48-48-48-4); CLUSTERS_N samples, class i % 4,
 * parameters initialised with seed 5. The caller frees *x, *y and *params. */
enum { CLUSTERS_N = 256, CLUSTERS_D = 24, CLUSTERS_C = 4 };
static inline void clusters_task(hfl_model_spec *s, float **x, int32_t **y, float **params) {
    enum { N = CLUSTERS_N, D = CLUSTERS_D, C = CLUSTERS_C };
    int dims[6] = {D, 48, 48, 48, 48, C};
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_model_spec_mlp(s, "clusters", dims, 6, err) == 0);
    *x = hfl_malloc((size_t)N * D * sizeof(float));
    *params = hfl_malloc(s->n_params * sizeof(float));
    *y = hfl_malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        (*y)[i] = i % C;
        for (int d = 0; d < D; d++)
            (*x)[i * D + d] = (d % C == (*y)[i] ? 1.0f : 0.0f) +
                              0.6f * (hfl_u01(hfl_philox_u32(9, 1, 0, 0, 0, (uint64_t)i * D + d)) - 0.5f);
    }
    hfl_model_init_params(s, *params, 5);
}

/* Trains t from `params` on the clusters task: 30 epochs of batches of
 * `batch` (lr 0.05, momentum 0.9, no weight decay); the loss and accuracy
 * over all CLUSTERS_N samples before and after. */
static inline void clusters_train(hfl_trainer *t, const float *params, const float *x,
                                  const int32_t *y, int batch, float *before, float *after,
                                  float *acc0, float *acc1) {
    enum { N = CLUSTERS_N, D = CLUSTERS_D };
    hfl_trainer_set_params(t, params);
    *before = hfl_trainer_evaluate(t, x, y, N, acc0);
    for (int e = 0; e < 30; e++)
        for (int i = 0; i + batch <= N; i += batch)
            hfl_trainer_step(t, x + i * D, y + i, batch, 0.05f, 0.9f, 0.0f);
    *after = hfl_trainer_evaluate(t, x, y, N, acc1);
}

#endif
