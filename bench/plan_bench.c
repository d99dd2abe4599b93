/* plan_bench.c: the memory planner's predictions against what one real
 * training step takes, and the planner's own speed (docs/benchmarks.md,
 * "Memory planner").
 *
 * For mlp and cnn at batches 1, 8, 32, 128, 512 under each checkpoint
 * schedule (none, sqrt, optimal with a budget halfway between the least peak
 * and none's, full; SGD with momentum, fp32) it plans the step, then in a
 * forked child (so every measurement starts from the same process state:
 * glibc keeps freed memory and raises its mmap threshold after a free, which
 * would leak one measurement into the next) resets the peak RSS
 * (util/memmeter), creates a trainer from the plan, runs one step and reads
 * the peak. It prints the predicted arena_bytes, the RSS growth, the
 * backend's live-bytes peak, and the share of the arena some buffer covers
 * (a full-batch step writes every buffer whole, so that share is what the
 * step touches). OpenBLAS is warmed up in the parent before the forks, and
 * its first-use growth is measured separately (a child forked before the
 * warm-up) and printed. The planner is timed over the whole 40-plan table.
 *
 *   bench-plan [--json] [--threads N] [--reps N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/blas.h"
#include "kernels/philox.h"
#include "plan/measure.h"
#include "model/model.h"
#include "plan/planner.h"
#include "util/memmeter.h"
#include "util/util.h"

#define N_MODELS 2
#define N_BATCHES 5
#define N_KINDS 4
#define MAX_BATCH 512

static const char *const model_names[N_MODELS] = {"mlp", "cnn"};
static const int batches[N_BATCHES] = {1, 8, 32, 128, 512};
static const hfl_ckpt_kind kinds[N_KINDS] = {HFL_CKPT_NONE, HFL_CKPT_SQRT, HFL_CKPT_OPTIMAL,
                                             HFL_CKPT_FULL};

typedef struct {
    int ok;
    uint64_t growth, backend_peak;
    char err[HFL_ERR_LEN];
} measurement;

/* Plans (model, batch, kind); `none_plan` is that batch's none plan (for the optimal budget). */
static int plan_one(const hfl_model_spec *s, int batch, hfl_ckpt_kind kind,
                    const hfl_plan *none_plan, hfl_plan *p, char *err) {
    hfl_plan_config cfg = {.batch = batch, .ckpt = kind, .ckpt_budget = SIZE_MAX, .momentum = 1,
                           .act_elem_bytes = sizeof(float)};
    if (kind == HFL_CKPT_OPTIMAL)
        cfg.ckpt_budget = none_plan->ckpt.min_peak +
                          (none_plan->ckpt.peak - none_plan->ckpt.min_peak) / 2;
    return hfl_plan_make(s, &cfg, p, err);
}

/* Plans the whole table into plans[m][b][k]. */
static int plan_table(const hfl_model_spec *specs, hfl_plan (*plans)[N_BATCHES][N_KINDS], char *err) {
    for (int m = 0; m < N_MODELS; m++)
        for (int b = 0; b < N_BATCHES; b++)
            for (int k = 0; k < N_KINDS; k++)
                if (plan_one(&specs[m], batches[b], kinds[k], &plans[m][b][0], &plans[m][b][k],
                             err) != 0)
                    return -1;
    return 0;
}

/* Bytes of the arena inside some buffer: the union of [offset, offset + bytes),
 * merged in offset order. */
static size_t covered_bytes(const hfl_plan *p) {
    size_t lo[HFL_PLAN_MAX_BUFFERS], hi[HFL_PLAN_MAX_BUFFERS];
    for (int i = 0; i < p->n_buffers; i++) {
        size_t a = p->buffers[i].offset, b = a + p->buffers[i].bytes;
        int j = i;
        for (; j > 0 && lo[j - 1] > a; j--) lo[j] = lo[j - 1], hi[j] = hi[j - 1];
        lo[j] = a, hi[j] = b;
    }
    size_t covered = 0, end = 0;
    for (int i = 0; i < p->n_buffers; i++) {
        size_t start = lo[i] > end ? lo[i] : end;
        if (hi[i] > start) covered += hi[i] - start;
        if (hi[i] > end) end = hi[i];
    }
    return covered;
}

/* One measured step (plan/measure.c), in this bench's row format. */
static measurement measure(const hfl_model_spec *s, const hfl_plan *p, const float *params,
                           const float *x, const int32_t *y) {
    measurement r = {0};
    hfl_step_measure m;
    if (hfl_measure_step_on(hfl_backend_cpu(), s, p, params, x, y, NULL, 0, &m, r.err) == 0) {
        r.ok = 1;
        r.growth = m.growth;
        r.backend_peak = m.backend_peak;
    }
    return r;
}

/* What each schedule costs in time: ms per step of cnn at batch 128 and mlp at
 * batch 512 (3 steps after one warm-up), next to the memory it saves. */
static void time_schedules(const hfl_model_spec *specs, hfl_plan (*plans)[N_BATCHES][N_KINDS], float *params,
                           const float *x, const int32_t *y, int json) {
    const int at[N_MODELS] = {4, 3}; /* mlp: batch 512; cnn: batch 128 */
    if (json) printf(", \"schedule_time\": [");
    else printf("\n%-4s %5s %-8s %12s %10s %10s %9s\n", "model", "batch", "schedule", "arena", "recompute", "ms/step", "vs none");
    int first = 1;
    for (int m = 0; m < N_MODELS; m++) {
        hfl_model_init_params(&specs[m], params, 1);
        double none_ms = 0;
        for (int k = 0; k < N_KINDS; k++) {
            const hfl_plan *p = &plans[m][at[m]][k];
            char err[HFL_ERR_LEN];
            hfl_trainer *t = hfl_trainer_create_plan(&specs[m], hfl_backend_cpu(), p, err);
            if (!t) continue;
            hfl_trainer_set_params(t, params);
            hfl_trainer_step(t, x, y, p->cfg.batch, 0.05f, 0.9f, 0.0f);
            double t0 = hfl_now();
            for (int r = 0; r < 3; r++) hfl_trainer_step(t, x, y, p->cfg.batch, 0.05f, 0.9f, 0.0f);
            double ms = (hfl_now() - t0) / 3 * 1e3;
            hfl_trainer_free(t);
            if (k == 0) none_ms = ms;
            double recompute = p->ckpt.forward > 0 ? p->ckpt.recompute / p->ckpt.forward : 0;
            if (json)
                printf("%s{\"model\": \"%s\", \"batch\": %d, \"schedule\": \"%s\", \"arena_bytes\": %zu, "
                       "\"recompute_forwards\": %.4f, \"ms_per_step\": %.3f}",
                       first ? "" : ", ", model_names[m], batches[at[m]], hfl_ckpt_name(kinds[k]), p->arena_bytes,
                       recompute, ms);
            else
                printf("%-4s %5d %-8s %12zu %10.3f %10.2f %8.3fx\n", model_names[m], batches[at[m]],
                       hfl_ckpt_name(kinds[k]), p->arena_bytes, recompute, ms, ms / none_ms);
            first = 0;
        }
    }
    if (json) printf("]");
}

static int parse_args(int argc, char **argv, int *json, long *threads, long *reps) {
    char err[HFL_ERR_LEN];
    for (int i = 1; i < argc; i++) {
        long *target = NULL;
        if (strcmp(argv[i], "--json") == 0) {
            *json = 1;
            continue;
        }
        if (strcmp(argv[i], "--threads") == 0) target = threads;
        if (strcmp(argv[i], "--reps") == 0) target = reps;
        if (!target || i + 1 >= argc) {
            fprintf(stderr, "usage: bench-plan [--json] [--threads N] [--reps N]\n");
            return -1;
        }
        if (hfl_parse_int(argv[++i], 1, 100000, target, err) != 0) {
            fprintf(stderr, "bench-plan: %s: %s\n", argv[i - 1], err);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int json = 0;
    long threads = 1, reps = 200;
    if (parse_args(argc, argv, &json, &threads, &reps) != 0) return 2;
    hfl_blas_set_threads((int)threads);
    char err[HFL_ERR_LEN];
    hfl_model_spec specs[N_MODELS];
    for (int m = 0; m < N_MODELS; m++) hfl_model_builtin(model_names[m], &specs[m], NULL);
    hfl_plan(*plans)[N_BATCHES][N_KINDS] = hfl_malloc(sizeof(hfl_plan) * N_MODELS * N_BATCHES * N_KINDS);

    /* Planner speed: the whole table, reps times. */
    double best = 1e9, total = 0.0;
    for (long r = 0; r < reps; r++) {
        double t0 = hfl_now();
        if (plan_table(specs, plans, err) != 0) {
            fprintf(stderr, "bench-plan: %s\n", err);
            return 1;
        }
        double dt = hfl_now() - t0;
        total += dt;
        if (dt < best) best = dt;
    }

    /* Host data for the largest batch, and parameters, before any fork. */
    size_t max_params = specs[1].n_params > specs[0].n_params ? specs[1].n_params : specs[0].n_params;
    float *params = hfl_malloc(max_params * sizeof(float));
    float *x = hfl_malloc((size_t)MAX_BATCH * 784 * sizeof(float));
    int32_t *y = hfl_malloc(MAX_BATCH * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)MAX_BATCH * 784; i++) x[i] = hfl_u01(hfl_philox_u32(4, 1, 0, 0, 0, i));
    for (int i = 0; i < MAX_BATCH; i++) y[i] = (int32_t)(hfl_philox_u32(4, 1, 0, 0, 1, (uint64_t)i) % 10);

    /* OpenBLAS's first use (cold), then warm it up in this process. */
    hfl_model_init_params(&specs[1], params, 1);
    measurement cold = measure(&specs[1], &plans[1][0][0], params, x, y);
    for (int m = 0; m < N_MODELS; m++) {
        hfl_model_init_params(&specs[m], params, 1);
        hfl_trainer *t = hfl_trainer_create_plan(&specs[m], hfl_backend_cpu(), &plans[m][0][0], err);
        hfl_trainer_set_params(t, params);
        hfl_trainer_step(t, x, y, 1, 0.05f, 0.9f, 0.0f);
        hfl_trainer_free(t);
    }

    if (json)
        printf("{\"threads\": %ld, \"planner_table_ms\": {\"plans\": %d, \"best\": %.4f, \"mean\": %.4f}, "
               "\"openblas_first_use_growth\": %lld, \"rows\": [",
               threads, N_MODELS * N_BATCHES * N_KINDS, best * 1e3, total / reps * 1e3,
               cold.ok ? (long long)cold.growth - (long long)plans[1][0][0].arena_bytes : -1LL);
    else
        printf("bench-plan: %d plans in %.3f ms (best of %ld; mean %.3f ms); OpenBLAS %ld thread(s)\n"
               "cnn batch 1 cold (first OpenBLAS use): RSS growth %.2f MiB for a %.2f MiB arena\n"
               "%-4s %5s %-8s %12s %12s %12s %12s %8s %7s\n",
               N_MODELS * N_BATCHES * N_KINDS, best * 1e3, reps, total / reps * 1e3, threads,
               cold.growth / 1048576.0, plans[1][0][0].arena_bytes / 1048576.0, "model", "batch",
               "schedule", "arena", "live_peak", "rss_growth", "backend_pk", "covered", "ratio");
    int first = 1;
    for (int m = 0; m < N_MODELS; m++) {
        hfl_model_init_params(&specs[m], params, 1);
        for (int b = 0; b < N_BATCHES; b++)
            for (int k = 0; k < N_KINDS; k++) {
                const hfl_plan *p = &plans[m][b][k];
                measurement r = measure(&specs[m], p, params, x, y);
                double cov = (double)covered_bytes(p) / (double)p->arena_bytes;
                double ratio = r.ok ? (double)r.growth / (double)p->arena_bytes : 0.0;
                if (json) {
                    printf("%s{\"model\": \"%s\", \"batch\": %d, \"schedule\": \"%s\", "
                           "\"arena_bytes\": %zu, \"live_peak\": %zu, \"ckpt_peak\": %zu, "
                           "\"rss_growth\": %llu, \"backend_peak\": %llu, \"covered\": %.4f}",
                           first ? "" : ", ", model_names[m], batches[b], hfl_ckpt_name(kinds[k]),
                           p->arena_bytes, p->live_peak, p->ckpt.peak,
                           (unsigned long long)r.growth, (unsigned long long)r.backend_peak, cov);
                } else if (r.ok) {
                    printf("%-4s %5d %-8s %12zu %12zu %12llu %12llu %7.1f%% %7.3f\n",
                           model_names[m], batches[b], hfl_ckpt_name(kinds[k]), p->arena_bytes,
                           p->live_peak, (unsigned long long)r.growth,
                           (unsigned long long)r.backend_peak, 100.0 * cov, ratio);
                } else {
                    printf("%-4s %5d %-8s %12zu unmeasured: %s\n", model_names[m], batches[b],
                           hfl_ckpt_name(kinds[k]), p->arena_bytes, r.err);
                }
                first = 0;
            }
    }
    if (json) printf("]");
    time_schedules(specs, plans, params, x, y, json);
    if (json) printf("}\n");
    free(plans);
    free(params);
    free(x);
    free(y);
    return 0;
}
