/* gpu_train.c: bench-gpu-train, training samples/s of a built-in model on a
 * chosen backend with the trainer's staged form (the client's loop), with
 * and without input prefetch.
 *
 * Plain SGD (lr 0.05, no momentum), random inputs and labels cycling through
 * a pool of 64 batches as bench/train_cnn_torch.py does, so
 * bench/gpu_train.sh can put PyTorch's figure on the same GPU, model, batch
 * and precision beside it. The timed loop stages each batch one step ahead
 * (two input slots, --no-prefetch: one) and syncs once at the end: step time
 * with and without prefetch is the overlap of the host's gather and copy
 * with the device's step. --profile then runs PROFILE_STEPS more steps
 * under kernels/profile.h's per-op profile (the ops' names, calls and
 * milliseconds per step, ops and host waits per step), after the timed
 * steps so the marks do not slow them (the timed steps pay only the
 * wrapper's forwarding call per op). Prints one JSON object with --json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/philox.h"
#include "kernels/profile.h"
#include "kernels/select.h"
#include "model/model.h"
#include "plan/planner.h"
#include "util/util.h"

#define POOL_BATCHES 64
#define PROFILE_STEPS 10

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench-gpu-train [--device auto|cpu|cuda] [--model NAME] [--batch N] [--steps N]\n"
            "                       [--precision fp32|bf16|fp16] [--no-prefetch] [--profile] [--json]\n"
            "  Trains a built-in model (default cnn) with SGD lr 0.05 on random data through\n"
            "  the staged trainer and prints samples/s and ms/step.\n"
            "  --device D      backend (default cuda)\n"
            "  --batch N       samples per step (default 128)\n"
            "  --steps N       timed steps (default 200, after a tenth more, at least 10, of warm-up)\n"
            "  --precision P   training precision (default fp32)\n"
            "  --no-prefetch   one input slot: each batch is copied in after the step before\n"
            "  --profile       then 10 more steps profiled: each op's calls and ms per step,\n"
            "                  ops and host waits per step\n"
            "  --json          one JSON object on stdout\n");
}

int main(int argc, char **argv) {
    long batch = 128, steps = 200;
    const char *model = "cnn", *device = "cuda", *prec_name = "fp32";
    int json = 0, prefetch = 1, profile = 0;
    char err[HFL_ERR_LEN], why[HFL_ERR_LEN];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--no-prefetch")) {
            prefetch = 0;
        } else if (!strcmp(a, "--profile")) {
            profile = 1;
        } else if (i + 1 >= argc) {
            fprintf(stderr, "bench-gpu-train: %s needs a value (or is unknown)\n", a);
            return 2;
        } else if (!strcmp(a, "--device")) {
            device = argv[++i];
        } else if (!strcmp(a, "--model")) {
            model = argv[++i];
        } else if (!strcmp(a, "--precision")) {
            prec_name = argv[++i];
        } else if (!strcmp(a, "--batch") || !strcmp(a, "--steps")) {
            long *target = !strcmp(a, "--batch") ? &batch : &steps;
            if (hfl_parse_int(argv[++i], 1, 1000000, target, err) != 0) {
                fprintf(stderr, "bench-gpu-train: %s: %s\n", a, err);
                return 2;
            }
        } else {
            fprintf(stderr, "bench-gpu-train: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    hfl_precision prec;
    hfl_model_spec spec;
    hfl_device_info info;
    if (hfl_precision_parse(prec_name, &prec, err) != 0 || hfl_model_builtin(model, &spec, err) != 0) {
        fprintf(stderr, "bench-gpu-train: %s\n", err);
        return 2;
    }
    const hfl_backend *be = hfl_backend_select(device, &info, why, err);
    if (!be) { /* like the gpu suite: no such device here is a skip (77), saying why */
        printf("SKIP: %s\n", err);
        return 77;
    }
    const char *clock = be->host_memory ? "cpu clock" : "device events";
    if (profile) be = hfl_profile_wrap(be); /* forwards only, outside hfl_profile_begin/end */
    hfl_plan_config cfg = {.batch = (int)batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .precision = prec};
    hfl_plan_config_for_backend(&cfg, be);
    if (!prefetch) cfg.prefetch = 0;
    static hfl_plan plan;
    hfl_trainer *t = NULL;
    if (hfl_plan_make(&spec, &cfg, &plan, err) != 0 ||
        !(t = hfl_trainer_create_plan(&spec, be, &plan, err))) {
        fprintf(stderr, "bench-gpu-train: %s\n", err);
        return 1;
    }
    float *params = hfl_malloc(spec.n_params * sizeof(float));
    hfl_model_init_params(&spec, params, 1);
    hfl_trainer_set_params(t, params);
    size_t pool = (size_t)POOL_BATCHES * batch;
    float *x = hfl_malloc(pool * spec.in_dim * sizeof(float));
    int32_t *y = hfl_malloc(pool * sizeof(int32_t));
    for (size_t i = 0; i < pool * spec.in_dim; i++) x[i] = hfl_u01(hfl_philox_u32(2, 99, 0, 0, 0, i));
    for (size_t i = 0; i < pool; i++) y[i] = (int32_t)(hfl_philox_u32(2, 99, 0, 0, 1, i) % spec.n_classes);

    long warmup = steps / 10 > 10 ? steps / 10 : 10, total = warmup + steps, staged = 0;
    int ahead = hfl_trainer_stage_slots(t);
    double t0 = 0.0;
    for (long k = 0; k < total; k++) {
        if (k == warmup) {
            be->sync();
            hfl_trainer_take_loss(t, NULL, NULL, NULL);
            t0 = hfl_now();
        }
        while (staged < total && staged - k < ahead) {
            size_t b = (size_t)(staged % POOL_BATCHES) * batch;
            hfl_trainer_stage(t, x + b * spec.in_dim, y + b, (int)batch);
            staged++;
        }
        hfl_trainer_step_staged(t, 0.05f, 0.0f, 0.0f);
    }
    double loss_sum;
    int64_t rows;
    hfl_trainer_take_loss(t, &loss_sum, &rows, NULL); /* syncs */
    double secs = hfl_now() - t0, sps = (double)steps * batch / secs;
    hfl_profile_report prof;
    if (profile) {
        hfl_profile_begin();
        for (long k = 0; k < PROFILE_STEPS; k++) {
            size_t b = (size_t)(k % POOL_BATCHES) * batch;
            hfl_trainer_stage(t, x + b * spec.in_dim, y + b, (int)batch);
            hfl_trainer_step_staged(t, 0.05f, 0.0f, 0.0f);
        }
        hfl_profile_end(PROFILE_STEPS, &prof);
    }
    if (json) {
        printf("{\"impl\": \"hfl\", \"backend\": \"%s\", \"device\": \"%s\", \"model\": \"%s\", "
               "\"batch\": %ld, \"precision\": \"%s\", \"prefetch\": %s, \"steps\": %ld, "
               "\"seconds\": %.6f, \"samples_per_s\": %.1f, \"ms_per_step\": %.4f, "
               "\"mean_loss\": %.5f, \"arena_bytes\": %zu",
               be->name, info.name, model, batch, prec_name, plan.input_next >= 0 ? "true" : "false",
               steps, secs, sps, 1e3 * secs / steps, rows ? loss_sum / rows : 0.0, plan.arena_bytes);
        if (profile) { /* the shape of hfl-client --trial-step --profile --json's "profile" */
            printf(", \"profile\": {\"steps\": %d, \"clock\": \"%s\", \"timed\": %s, \"ops_per_step\": %.2f, "
                   "\"syncs_per_step\": %.2f, \"ms_per_step\": %.4f, \"ops\": [",
                   prof.steps, clock, prof.timed ? "true" : "false", prof.ops_per_step, prof.syncs_per_step,
                   prof.ms_per_step);
            for (int i = 0; i < prof.n_rows; i++)
                printf("%s{\"name\": \"%s\", \"count\": %.2f, \"ms\": %.4f}", i ? ", " : "", prof.rows[i].name,
                       prof.rows[i].count, prof.rows[i].ms);
            printf("]}");
        }
        printf("}\n");
    } else {
        printf("hfl %s (%s) %s batch %ld %s%s: %.1f samples/s (%.3f ms/step), mean loss %.4f\n",
               be->name, info.name, model, batch, prec_name, plan.input_next >= 0 ? ", prefetch" : "",
               sps, 1e3 * secs / steps, rows ? loss_sum / rows : 0.0);
        if (profile) hfl_profile_print(stdout, &prof, clock);
    }
    hfl_trainer_free(t);
    free(params);
    free(x);
    free(y);
    return 0;
}
