/* plan_cli.c: hfl-client --plan: the candidate table and the choice, offline.
 *
 * For a model (built-in name or JSON spec file) and a memory budget (given,
 * or the device's free memory) it prints every candidate configuration with
 * its predicted peak and samples/s and whether it fits, and the one chosen
 * (model/chooser.c). --verify runs one real training step per candidate in a
 * child process and adds the measured peak RSS growth and the error; the
 * measurements are appended to <state-dir>/overhead.jsonl (client/overhead.c),
 * from which the overhead outside the arena is fitted and added to later
 * predictions. --json prints the same as one JSON object. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client/client.h"
#include "kernels/philox.h"
#include "model/chooser.h"
#include "model/measure.h"
#include "util/util.h"

int client_plan_run(const client_plan_options *o, const hfl_device_info *dev, char *err) {
    hfl_model_spec spec;
    if (hfl_model_resolve(o->model, &spec, err) != 0) return -1;
    hfl_chooser_input in = {.budget = o->budget ? o->budget : dev->free_bytes, .headroom = o->headroom,
                            .momentum = 1, .max_batch = 512};
    int n_records;
    in.overhead = client_overhead_fit(o->state_dir, dev->name, &n_records);
    in.gflops = hfl_chooser_calibrate(hfl_backend_cpu());
    hfl_choice ch;
    if (hfl_choose(&spec, &in, &ch, err) != 0) return -1;

    uint64_t measured[HFL_CHOOSER_MAX_ROWS] = {0};
    if (o->verify) {
        int maxb = 0;
        for (int i = 0; i < ch.n; i++) maxb = ch.rows[i].batch > maxb ? ch.rows[i].batch : maxb;
        size_t nx = (size_t)maxb * (size_t)spec.in_dim;
        float *x = hfl_malloc(nx * sizeof(float)), *params = hfl_malloc(spec.n_params * sizeof(float));
        int32_t *y = hfl_malloc(sizeof(int32_t) * (size_t)maxb);
        for (size_t i = 0; i < nx; i++) x[i] = hfl_u01(hfl_philox_u32(9, HFL_STREAM_SHUFFLE, 0, 0, 0, i));
        for (int i = 0; i < maxb; i++) y[i] = (int32_t)(hfl_philox_u32(9, HFL_STREAM_SHUFFLE, 0, 0, 1, (uint64_t)i) % (uint32_t)spec.n_classes);
        hfl_model_init_params(&spec, params, 1);
        /* OpenBLAS's first-use buffers belong to the process, not to a step: take them here. */
        hfl_trainer *warm = hfl_trainer_create(&spec, hfl_backend_cpu(), maxb);
        hfl_trainer_set_params(warm, params);
        hfl_trainer_step(warm, x, y, maxb, 0.05f, 0.9f, 0.0f);
        hfl_trainer_free(warm);
        for (int i = 0; i < ch.n; i++) {
            const hfl_candidate *c = &ch.rows[i];
            hfl_plan *plan = hfl_malloc(sizeof *plan);
            hfl_plan_config cfg;
            hfl_candidate_config(c, 1, &cfg);
            hfl_step_measure m;
            char e[HFL_ERR_LEN];
            if (hfl_plan_make(&spec, &cfg, plan, e) == 0 && plan->arena_bytes == c->arena &&
                hfl_measure_step(&spec, plan, params, x, y, &m, e) == 0) {
                measured[i] = m.growth;
                client_overhead_record(o->state_dir, dev->name, spec.name, c->batch, hfl_ckpt_name(c->ckpt), c->arena, m.growth);
            } else if (!o->json) {
                fprintf(stderr, "hfl-client: batch %d %s not measured: %s\n", c->batch, hfl_ckpt_name(c->ckpt),
                        plan->arena_bytes != c->arena ? "plan changed" : e);
            }
            free(plan);
            if (!o->json) fprintf(stderr, "\rverified %d/%d", i + 1, ch.n);
        }
        if (!o->json) fprintf(stderr, "\n");
        free(x);
        free(params);
        free(y);
    }

    if (o->json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "model", spec.name);
        cJSON_AddStringToObject(root, "device", dev->name);
        cJSON_AddNumberToObject(root, "budget_bytes", (double)in.budget);
        cJSON_AddNumberToObject(root, "headroom", in.headroom);
        cJSON_AddNumberToObject(root, "overhead_bytes", (double)in.overhead);
        cJSON_AddNumberToObject(root, "overhead_records", n_records);
        cJSON_AddNumberToObject(root, "gemm_gflops", in.gflops);
        cJSON_AddNumberToObject(root, "min_budget_bytes", (double)ch.min_budget);
        cJSON *rows = cJSON_AddArrayToObject(root, "candidates");
        for (int i = 0; i < ch.n; i++) {
            const hfl_candidate *c = &ch.rows[i];
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "batch", c->batch);
            cJSON_AddStringToObject(r, "precision", "fp32");
            cJSON_AddStringToObject(r, "checkpoint", hfl_ckpt_name(c->ckpt));
            cJSON_AddNumberToObject(r, "arena_bytes", (double)c->arena);
            cJSON_AddNumberToObject(r, "predicted_peak_bytes", (double)c->predicted);
            cJSON_AddNumberToObject(r, "predicted_samples_per_s", c->samples_per_s);
            if (o->verify) cJSON_AddNumberToObject(r, "measured_peak_bytes", (double)measured[i]);
            else cJSON_AddNullToObject(r, "measured_peak_bytes");
            cJSON_AddBoolToObject(r, "fits", c->fits);
            cJSON_AddBoolToObject(r, "chosen", i == ch.chosen);
            cJSON_AddItemToArray(rows, r);
        }
        char *s = cJSON_Print(root);
        printf("%s\n", s);
        free(s);
        cJSON_Delete(root);
    } else {
        printf("model %s (%zu params) on %s: budget %.1f MiB, headroom %.0f%%, overhead %.2f MiB (%d records), GEMM %.1f GFLOP/s\n",
               spec.name, spec.n_params, dev->name, in.budget / 1048576.0, 100 * in.headroom, in.overhead / 1048576.0,
               n_records, in.gflops);
        printf("%6s %-9s %-8s %14s %14s %5s", "batch", "precision", "ckpt", "predicted_MiB", "samples/s", "fits");
        if (o->verify) printf(" %13s %9s", "measured_MiB", "error");
        printf("\n");
        for (int i = 0; i < ch.n; i++) {
            const hfl_candidate *c = &ch.rows[i];
            printf("%6d %-9s %-8s %14.3f %14.0f %5s", c->batch, "fp32", hfl_ckpt_name(c->ckpt), c->predicted / 1048576.0,
                   c->samples_per_s, c->fits ? "yes" : "no");
            if (o->verify && measured[i])
                printf(" %13.3f %8.2f%%", measured[i] / 1048576.0,
                       100.0 * ((double)c->predicted - (double)measured[i]) / (double)measured[i]);
            printf("%s\n", i == ch.chosen ? "  <- chosen" : "");
        }
    }
    if (ch.chosen < 0)
        return hfl_errf(err, "nothing fits in %.1f MiB (headroom %.0f%%): the smallest budget that would is %.1f MiB",
                        in.budget / 1048576.0, 100 * in.headroom, ch.min_budget / 1048576.0);
    return 0;
}
