/* train_mlp.c: bench-train-mlp, training throughput (samples/s) of the
 * built-in mlp (784-200-200-10) on the CPU backend.
 *
 * Plain SGD (lr 0.05, no momentum or weight decay) on random inputs and
 * labels, cycling through a fixed pool of batches (--pool), exactly as
 * train_mlp_torch.py does for PyTorch; train_mlp.sh runs both at one thread
 * count and prints the ratio. The number of OpenBLAS threads is set with
 * hfl_blas_set_threads before anything is timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/blas.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "util/util.h"

#define POOL_BATCHES 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench-train-mlp [--batch N] [--steps N] [--threads N] [--pool N] [--staged] [--json]\n"
            "  Trains the mlp (784-200-200-10) with SGD lr 0.05 on random data and\n"
            "  prints training samples/s.\n"
            "  --batch N    samples per step (default 32)\n"
            "  --steps N    timed steps (default 3000; a tenth more are run first as warm-up)\n"
            "  --threads N  OpenBLAS threads (default 1)\n"
            "  --pool N     distinct batches cycled through (default 64: they stay in cache; a\n"
            "               client's share of a dataset does not)\n"
            "  --staged     stage each batch and step as hfl-client does (hfl_trainer_stage,\n"
            "               hfl_trainer_step_staged: no loss read per step)\n"
            "  --json       print one JSON object instead of text\n");
}

int main(int argc, char **argv) {
    long batch = 32, steps = 3000, threads = 1, pool_batches = POOL_BATCHES;
    int json = 0, staged = 0;
    char err[HFL_ERR_LEN];
    for (int i = 1; i < argc; i++) {
        long *target = NULL, hi = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
            continue;
        } else if (strcmp(argv[i], "--staged") == 0) {
            staged = 1;
            continue;
        } else if (strcmp(argv[i], "--batch") == 0) {
            target = &batch, hi = 65536;
        } else if (strcmp(argv[i], "--steps") == 0) {
            target = &steps, hi = 100000000;
        } else if (strcmp(argv[i], "--threads") == 0) {
            target = &threads, hi = 1024;
        } else if (strcmp(argv[i], "--pool") == 0) {
            target = &pool_batches, hi = 1000000;
        } else {
            fprintf(stderr, "bench-train-mlp: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-train-mlp: %s needs a value\n", argv[i]);
            return 2;
        }
        if (hfl_parse_int(argv[++i], 1, hi, target, err) != 0) {
            fprintf(stderr, "bench-train-mlp: %s: %s\n", argv[i - 1], err);
            return 2;
        }
    }
    hfl_blas_set_threads((int)threads);

    hfl_model_spec spec;
    if (hfl_model_builtin("mlp", &spec, err) != 0) {
        fprintf(stderr, "bench-train-mlp: %s\n", err);
        return 1;
    }
    const hfl_backend *be = hfl_backend_cpu();
    hfl_trainer *t = hfl_trainer_create(&spec, be, (int)batch);
    if (!t) {
        fprintf(stderr, "bench-train-mlp: cannot create a trainer for batch %ld\n", batch);
        return 1;
    }
    float *params = hfl_malloc(spec.n_params * sizeof(float));
    hfl_model_init_params(&spec, params, 1);
    hfl_trainer_set_params(t, params);

    size_t pool = (size_t)pool_batches * batch;
    float *x = hfl_malloc(pool * spec.in_dim * sizeof(float));
    int32_t *y = hfl_malloc(pool * sizeof(int32_t));
    for (size_t i = 0; i < pool * spec.in_dim; i++) x[i] = hfl_u01(hfl_philox_u32(2, 99, 0, 0, 0, i));
    for (size_t i = 0; i < pool; i++) y[i] = (int32_t)(hfl_philox_u32(2, 99, 0, 0, 1, i) % 10);
    if (!json)
        printf("bench-train-mlp: mlp %zu params, batch %ld, %ld steps, %ld OpenBLAS thread(s), "
               "arena %.2f MiB\n",
               spec.n_params, batch, steps, threads, hfl_trainer_device_bytes(t) / 1048576.0);

    long warmup = steps / 10 > 10 ? steps / 10 : 10;
    float loss = 0.0f;
    double t0 = 0.0;
    for (long k = 0; k < warmup + steps; k++) {
        if (k == warmup) t0 = hfl_now();
        size_t b = (size_t)(k % pool_batches) * batch;
        if (staged) {
            hfl_trainer_stage(t, x + b * spec.in_dim, y + b, (int)batch);
            hfl_trainer_step_staged(t, 0.05f, 0.0f, 0.0f);
        } else {
            loss = hfl_trainer_step(t, x + b * spec.in_dim, y + b, (int)batch, 0.05f, 0.0f, 0.0f);
        }
    }
    double secs = hfl_now() - t0;
    double sps = (double)steps * batch / secs;
    if (staged) { /* the loss of the last step, read once at the end */
        double sum = 0;
        int64_t rows = 0;
        hfl_trainer_take_loss(t, NULL, NULL, NULL);
        size_t b = (size_t)((warmup + steps) % pool_batches) * batch;
        hfl_trainer_stage(t, x + b * spec.in_dim, y + b, (int)batch);
        hfl_trainer_step_staged(t, 0.05f, 0.0f, 0.0f);
        hfl_trainer_take_loss(t, &sum, &rows, NULL);
        loss = rows ? (float)(sum / (double)rows) : 0.0f;
    }
    if (json)
        printf("{\"impl\": \"hfl\", \"model\": \"mlp\", \"batch\": %ld, \"threads\": %ld, "
               "\"steps\": %ld, \"seconds\": %.6f, \"samples_per_s\": %.1f, \"final_loss\": %.5f}\n",
               batch, threads, steps, secs, sps, loss);
    else
        printf("hfl: %.1f samples/s (%.1f us/step), final loss %.4f\n", sps, 1e6 * secs / steps,
               loss);

    free(params);
    free(x);
    free(y);
    hfl_trainer_free(t);
    return 0;
}
