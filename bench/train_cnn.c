/* train_cnn.c: bench-train-cnn, training throughput (samples/s) of the
 * built-in cnn (FedAvg's CNN, 1,663,370 parameters) on the CPU backend, and
 * the resident memory one training step really takes.
 *
 * Plain SGD (lr 0.05, no momentum or weight decay) on random 1x28x28 inputs
 * and labels, cycling through a fixed pool of batches, exactly as
 * train_cnn_torch.py does for PyTorch; train_cnn.sh runs both at one thread
 * count and batch and prints the ratio. The number of OpenBLAS threads is set
 * with hfl_blas_set_threads before anything is timed.
 *
 * Before timing it measures, with util/memmeter.h (reset the peak RSS, read
 * its growth), four windows in this fresh process: creating the trainer (the
 * fill of params, grads and momentum is all that touches the arena), the
 * first step (activations and workspace touched for the first time, plus
 * whatever OpenBLAS takes on its first GEMM), a second step (steady state),
 * and, after the timed run, freeing the trainer and creating a new one plus
 * one step inside one window (libraries warm). They go to stderr with the
 * arena's size and the backend's high-water mark of live bytes; --json adds
 * them to the object. --model runs any other built-in (e.g. mlp) the same way.
 * A window whose peak cannot be reset (no /proc/self/clear_refs) is reported
 * as unavailable, with the reason, and the throughput run goes on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/blas.h"
#include "kernels/budget.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "util/memmeter.h"
#include "util/util.h"

#define POOL_BATCHES 64
#define N_WINDOWS 4

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench-train-cnn [--batch N] [--steps N] [--threads N] [--model NAME] [--json]\n"
            "  Trains the cnn (conv5x5x32-pool-conv5x5x64-pool-512-10) with SGD lr 0.05 on\n"
            "  random data and prints training samples/s, after measuring the resident\n"
            "  memory (peak RSS growth) of creating the trainer and of single steps.\n"
            "  --batch N    samples per step (default 32)\n"
            "  --steps N    timed steps (default 200; a tenth more, at least 10, run first as warm-up)\n"
            "  --threads N  OpenBLAS threads (default 1)\n"
            "  --model NAME a built-in model (default cnn; mlp also works)\n"
            "  --json       print one JSON object instead of text\n");
}

/* One measured window: peak RSS growth over the RSS at its start. */
typedef struct {
    const char *name;
    int ok;
    uint64_t growth;
    char err[HFL_ERR_LEN];
} mem_window;

static void window_open(mem_window *w, const char *name, uint64_t *rss0) {
    w->name = name;
    w->ok = hfl_mem_reset_peak(w->err) == 0 && hfl_mem_read(rss0, NULL, w->err) == 0;
}

static void window_close(mem_window *w, uint64_t rss0) {
    uint64_t peak = 0;
    if (w->ok && hfl_mem_read(NULL, &peak, w->err) != 0) w->ok = 0;
    w->growth = w->ok && peak > rss0 ? peak - rss0 : 0;
}

int main(int argc, char **argv) {
    long batch = 32, steps = 200, threads = 1;
    const char *model = "cnn";
    int json = 0;
    char err[HFL_ERR_LEN];
    for (int i = 1; i < argc; i++) {
        long *target = NULL, hi = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
            continue;
        } else if (strcmp(argv[i], "--model") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "bench-train-cnn: --model needs a value\n");
                return 2;
            }
            model = argv[++i];
            continue;
        } else if (strcmp(argv[i], "--batch") == 0) {
            target = &batch, hi = 65536;
        } else if (strcmp(argv[i], "--steps") == 0) {
            target = &steps, hi = 100000000;
        } else if (strcmp(argv[i], "--threads") == 0) {
            target = &threads, hi = 1024;
        } else {
            fprintf(stderr, "bench-train-cnn: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-train-cnn: %s needs a value\n", argv[i]);
            return 2;
        }
        if (hfl_parse_int(argv[++i], 1, hi, target, err) != 0) {
            fprintf(stderr, "bench-train-cnn: %s: %s\n", argv[i - 1], err);
            return 2;
        }
    }
    hfl_blas_set_threads((int)threads);

    hfl_model_spec spec;
    if (hfl_model_builtin(model, &spec, err) != 0) {
        fprintf(stderr, "bench-train-cnn: %s\n", err);
        return 1;
    }
    const hfl_backend *be = hfl_backend_cpu();
    float *params = hfl_malloc(spec.n_params * sizeof(float));
    hfl_model_init_params(&spec, params, 1);
    size_t pool = (size_t)POOL_BATCHES * batch;
    float *x = hfl_malloc(pool * spec.in_dim * sizeof(float));
    int32_t *y = hfl_malloc(pool * sizeof(int32_t));
    for (size_t i = 0; i < pool * spec.in_dim; i++) x[i] = hfl_u01(hfl_philox_u32(2, 99, 0, 0, 0, i));
    for (size_t i = 0; i < pool; i++) y[i] = (int32_t)(hfl_philox_u32(2, 99, 0, 0, 1, i) % 10);

    /* Memory windows 0-2: create, first step, second step. */
    mem_window win[N_WINDOWS];
    uint64_t rss0 = 0;
    window_open(&win[0], "create", &rss0);
    hfl_trainer *t = hfl_trainer_create(&spec, be, (int)batch);
    if (!t) {
        fprintf(stderr, "bench-train-cnn: cannot create a trainer for batch %ld\n", batch);
        return 1;
    }
    hfl_trainer_set_params(t, params);
    window_close(&win[0], rss0);
    window_open(&win[1], "first_step", &rss0);
    hfl_trainer_step(t, x, y, (int)batch, 0.05f, 0.0f, 0.0f);
    window_close(&win[1], rss0);
    window_open(&win[2], "second_step", &rss0);
    hfl_trainer_step(t, x + (size_t)batch * spec.in_dim, y + batch, (int)batch, 0.05f, 0.0f, 0.0f);
    window_close(&win[2], rss0);
    hfl_trainer_set_params(t, params); /* the timed run starts from the initial weights */
    size_t arena = hfl_trainer_device_bytes(t);

    if (!json)
        printf("bench-train-cnn: %s %zu params, batch %ld, %ld steps, %ld OpenBLAS thread(s), "
               "arena %.2f MiB\n",
               model, spec.n_params, batch, steps, threads, arena / 1048576.0);

    long warmup = steps / 10 > 10 ? steps / 10 : 10;
    float loss = 0.0f;
    double t0 = 0.0;
    for (long k = 0; k < warmup + steps; k++) {
        if (k == warmup) t0 = hfl_now();
        size_t b = (size_t)(k % POOL_BATCHES) * batch;
        loss = hfl_trainer_step(t, x + b * spec.in_dim, y + b, (int)batch, 0.05f, 0.0f, 0.0f);
    }
    double secs = hfl_now() - t0;
    double sps = (double)steps * batch / secs;

    /* Window 3: a new trainer and one step, allocated inside the window. */
    hfl_trainer_free(t);
    hfl_budget_reset_peak();
    window_open(&win[3], "create_and_step", &rss0);
    t = hfl_trainer_create(&spec, be, (int)batch);
    if (!t) {
        fprintf(stderr, "bench-train-cnn: cannot create a trainer for batch %ld\n", batch);
        return 1;
    }
    hfl_trainer_set_params(t, params);
    hfl_trainer_step(t, x, y, (int)batch, 0.05f, 0.0f, 0.0f);
    window_close(&win[3], rss0);
    uint64_t live_peak = hfl_budget_peak_bytes();

    if (json) {
        printf("{\"impl\": \"hfl\", \"model\": \"%s\", \"batch\": %ld, \"threads\": %ld, "
               "\"steps\": %ld, \"seconds\": %.6f, \"samples_per_s\": %.1f, \"final_loss\": %.5f, "
               "\"arena_bytes\": %zu, \"backend_peak_bytes\": %llu, \"rss_growth_bytes\": {",
               model, batch, threads, steps, secs, sps, loss, arena,
               (unsigned long long)live_peak);
        for (int i = 0; i < N_WINDOWS; i++) {
            printf("%s\"%s\": ", i ? ", " : "", win[i].name);
            if (win[i].ok)
                printf("%llu", (unsigned long long)win[i].growth);
            else
                printf("null");
        }
        printf("}}\n");
    } else {
        printf("hfl: %.1f samples/s (%.1f ms/step), final loss %.4f\n", sps, 1e3 * secs / steps,
               loss);
    }
    /* Memory figures on stderr, so --json's stdout stays one object. */
    fprintf(stderr, "bench-train-cnn: memory: arena %.2f MiB, backend live-bytes peak %.2f MiB\n",
            arena / 1048576.0, live_peak / 1048576.0);
    for (int i = 0; i < N_WINDOWS; i++) {
        if (win[i].ok)
            fprintf(stderr, "bench-train-cnn: memory: peak RSS growth over %-15s %8.2f MiB\n",
                    win[i].name, win[i].growth / 1048576.0);
        else
            fprintf(stderr, "bench-train-cnn: memory: %s unavailable: %s\n", win[i].name,
                    win[i].err);
    }

    free(params);
    free(x);
    free(y);
    hfl_trainer_free(t);
    return 0;
}
