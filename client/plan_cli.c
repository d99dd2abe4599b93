/* plan_cli.c: hfl-client --plan: the candidate table and the choice, offline.
 *
 * For a model (built-in name or JSON spec file) and a memory budget (given,
 * or the device's free memory) it prints every candidate configuration with
 * its predicted peak and samples/s and whether it fits, and the one chosen
 * (plan/chooser.c) for the backend --device picked. --verify runs one real
 * training step per candidate (plan/verify.c: in a child process on the
 * CPU, in-process on a GPU; once for candidates whose plans run the same
 * step) and adds the measured peak growth and the error; the
 * measurements are appended to <state-dir>/overhead.jsonl (plan/overhead_log.c),
 * from which the overhead outside the arena is fitted (plan/overhead.h) and
 * added to later predictions (on a GPU, what the process holds beyond its
 * per-process cost, plan/device_cost.h, where NVML can say). --batch N plans for a run whose batch is N: every
 * candidate then steps over N rows, as micro-batches accumulated where N
 * itself does not fit (the accum column; --allow-smaller-batch: smaller real
 * batches instead). --json prints the same as one JSON object, with the backend,
 * the device, why --device auto fell back to the CPU (null when it did not)
 * and the device's memory figures (hfl_device_memory_json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client/client.h"
#include "util/util.h"

/* For each candidate, the first earlier one of the same batch, accumulation
 * and precision whose plan runs the same step (hfl_plan_same_step: e.g.
 * `optimal` storing everything is `none`), else -1. */
static void plan_twins(const hfl_model_spec *spec, const hfl_backend *be, const hfl_choice *ch,
                       unsigned opt_state, int *twin) {
    hfl_plan *a = hfl_malloc(sizeof *a), *b = hfl_malloc(sizeof *b);
    for (int i = 0; i < ch->n; i++) {
        const hfl_candidate *c = &ch->rows[i];
        twin[i] = -1;
        if (hfl_candidate_plan(spec, be, c, opt_state, a, NULL) != 0) continue;
        for (int j = 0; j < i && twin[i] < 0; j++) {
            const hfl_candidate *d = &ch->rows[j];
            if (twin[j] < 0 && d->batch == c->batch && d->accum == c->accum && d->step_batch == c->step_batch &&
                d->precision == c->precision && hfl_candidate_plan(spec, be, d, opt_state, b, NULL) == 0 &&
                hfl_plan_same_step(a, b))
                twin[i] = j;
        }
    }
    free(a);
    free(b);
}

/* --verify: every candidate's measured peak into measured[] (left 0 when
 * not measured), each recorded in the state dir. A candidate whose plan runs the
 * same step as an earlier one's takes that measurement, which a second run
 * would repeat to the byte (plan/verify.c). 1 with record_err when a record
 * could not be written. */
static int plan_verify(const client_options *o, const hfl_backend *be, const hfl_device_info *dev,
                       const hfl_model_spec *spec, const hfl_choice *ch, unsigned opt_state,
                       const hfl_device_cost *cost, uint64_t *measured, char *record_err) {
    int maxb = 0, record_failed = 0;
    for (int i = 0; i < ch->n; i++) maxb = ch->rows[i].batch > maxb ? ch->rows[i].batch : maxb;
    int twin[HFL_CHOOSER_MAX_ROWS], held[HFL_CHOOSER_MAX_ROWS], ok[HFL_CHOOSER_MAX_ROWS];
    uint64_t process[HFL_CHOOSER_MAX_ROWS];
    plan_twins(spec, be, ch, opt_state, twin);
    hfl_probe *probe = hfl_probe_new(spec, maxb, 0);
    /* This process has not used BLAS (calibration ran in a child), so every
     * measured step pays BLAS's first-use buffers, as a fresh client does.
     * The first child forked from this process measures differently from
     * the rest (seen: 270 KiB more for cnn at batch 1), so one measurement
     * of the smallest candidate is taken and thrown away first. */
    uint64_t ignored, ignored_process;
    int ignored_held;
    if (ch->n > 0)
        hfl_probe_measure(probe, be, &ch->rows[0], opt_state, cost, &ignored, &ignored_held, &ignored_process, NULL);
    for (int i = 0; i < ch->n; i++) {
        const hfl_candidate *c = &ch->rows[i];
        char e[HFL_ERR_LEN] = "";
        int t = twin[i];
        if (t >= 0) {
            ok[i] = ok[t], measured[i] = measured[t], held[i] = held[t], process[i] = process[t];
            if (!ok[i]) hfl_errf(e, "the same step as row %d, which was not measured", t + 1);
        } else {
            ok[i] = hfl_probe_measure(probe, be, c, opt_state, cost, &measured[i], &held[i], &process[i], e) == 0;
        }
        if (ok[i]) {
            uint64_t staging = hfl_overhead_staging(be->host_memory, c->batch, spec->in_dim, spec->label_rows);
            if (!record_failed &&
                hfl_overhead_log_record(o->state_dir, dev->name, be, spec, c, staging, measured[i], process[i],
                                        held[i] ? cost : NULL, record_err) != 0)
                record_failed = 1;
        } else if (!o->json) {
            fprintf(stderr, "hfl-client: batch %d %s %s not measured: %s\n", c->batch,
                    hfl_precision_name(c->precision), hfl_ckpt_name(c->ckpt), e);
        }
        if (!o->json) fprintf(stderr, "\rverified %d/%d", i + 1, ch->n);
    }
    if (!o->json) fprintf(stderr, "\n");
    hfl_probe_free(probe);
    return record_failed;
}

int client_plan_run(const client_options *o, const hfl_backend *be, const hfl_device_info *dev, const char *why,
                    char *err) {
    hfl_model_spec spec;
    if (hfl_model_resolve(o->model, &spec, err) != 0) return -1;
    hfl_plan_request rq = {.spec = &spec, .be = be, .device = dev->name, .state_dir = o->state_dir,
                           .opt_state = o->optimizer == HFL_OPTIM_ADAMW ? HFL_OPT_ADAMW : HFL_OPT_MOMENTUM,
                           .max_batch = 512, .prefer_batch = o->batch, .allow_smaller = o->allow_smaller,
                           .conv_chunk = o->conv_chunk};
    hfl_mem_budget_init(&rq.budget, o->budget, dev->free_bytes, o->headroom);
    if (client_precisions(o, dev, &rq.precisions, err) != 0) return -1;
    hfl_plan_choice *pc = hfl_malloc(sizeof *pc);
    int chose = hfl_plan_choose(&rq, pc, err);
    const hfl_choice ch = pc->table;
    hfl_device_cost cost = pc->cost;
    const char *source = pc->overhead_source;
    int n_records = pc->overhead_records;
    double gflops[3] = {pc->gflops[0], pc->gflops[1], pc->gflops[2]};
    free(pc);
    if (chose != 0) return -1;

    uint64_t measured[HFL_CHOOSER_MAX_ROWS] = {0};
    int record_failed = 0;
    char record_err[HFL_ERR_LEN] = "";
    if (o->verify)
        record_failed = plan_verify(o, be, dev, &spec, &ch, rq.opt_state, &cost, measured, record_err);

    if (o->json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "model", spec.name);
        cJSON_AddStringToObject(root, "device", dev->name);
        cJSON_AddStringToObject(root, "backend", be->name);
        if (why[0]) cJSON_AddStringToObject(root, "fallback_reason", why);
        else cJSON_AddNullToObject(root, "fallback_reason");
        cJSON_AddNumberToObject(root, "budget_bytes", (double)rq.budget.planned);
        cJSON_AddNumberToObject(root, "headroom", rq.budget.headroom);

        cJSON_AddNumberToObject(root, "overhead_records", n_records);
        cJSON_AddStringToObject(root, "overhead_source", source);
        cJSON *g = cJSON_AddObjectToObject(root, "gemm_gflops");
        for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++) cJSON_AddNumberToObject(g, hfl_precision_name((hfl_precision)p), gflops[p]);
        /* which speed model predicted the candidates' samples/s (plan/chooser.h) */
        cJSON_AddStringToObject(root, "speed_model", hfl_choice_speed_model(&ch));
        cJSON_AddNumberToObject(root, "min_budget_bytes", (double)ch.min_budget);
        hfl_device_memory_json(root, be, &cost);
        cJSON *rows = cJSON_AddArrayToObject(root, "candidates");
        for (int i = 0; i < ch.n; i++) {
            const hfl_candidate *c = &ch.rows[i];
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "batch", c->batch);
            cJSON_AddNumberToObject(r, "accumulation_steps", c->accum);
            cJSON_AddNumberToObject(r, "step_batch", c->step_batch);
            cJSON_AddStringToObject(r, "precision", hfl_precision_name(c->precision));
            cJSON_AddStringToObject(r, "checkpoint", hfl_ckpt_name(c->ckpt));
            if (c->conv_chunk) cJSON_AddNumberToObject(r, "conv_chunk", c->conv_chunk);
            cJSON_AddNumberToObject(r, "arena_bytes", (double)c->arena);
            cJSON_AddNumberToObject(r, "overhead_bytes", (double)(c->predicted - c->arena));
            cJSON_AddNumberToObject(r, "staging_bytes",
                                    (double)hfl_overhead_staging(be->host_memory, c->batch, spec.in_dim, spec.label_rows));
            cJSON_AddNumberToObject(r, "predicted_peak_bytes", (double)c->predicted);
            cJSON_AddNumberToObject(r, "predicted_samples_per_s", c->samples_per_s);
            cJSON_AddStringToObject(r, "speed_model", c->per_op ? "per-op" : "flops");
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
        printf("model %s (%zu params) on %s (%s backend): budget %.1f MiB, headroom %.0f%%, %d overhead records, "
               "GEMM GFLOP/s fp32 %.1f bf16 %.1f fp16 %.1f, speed model %s\n",
               spec.name, spec.n_params, dev->name, be->name, rq.budget.planned / 1048576.0, 100 * rq.budget.headroom, n_records, gflops[HFL_PREC_FP32], gflops[HFL_PREC_BF16], gflops[HFL_PREC_FP16],
               hfl_choice_speed_model(&ch));
        hfl_device_memory_say("hfl-client", be, &cost);
        if (o->batch)
            printf("run batch %d: %s\n", o->batch,
                   o->allow_smaller ? "smaller real batches where it does not fit"
                                    : "micro-batches accumulate to it where it does not fit");
        printf("%6s %5s %-9s %-8s %14s %14s %5s", "batch", "accum", "precision", "ckpt", "predicted_MiB",
               "samples/s", "fits");
        if (o->verify) printf(" %13s %9s", "measured_MiB", "error");
        printf("\n");
        for (int i = 0; i < ch.n; i++) {
            const hfl_candidate *c = &ch.rows[i];
            /* a model of 86M parameters trains under one sample a second here: decimals, not a 0 */
            printf("%6d %5d %-9s %-8s %14.3f %14.*f %5s", c->batch, c->accum, hfl_precision_name(c->precision),
                   hfl_ckpt_name(c->ckpt), c->predicted / 1048576.0, c->samples_per_s < 100 ? 3 : 0,
                   c->samples_per_s, c->fits ? "yes" : "no");
            if (o->verify && measured[i])
                printf(" %13.3f %8.2f%%", measured[i] / 1048576.0,
                       100.0 * ((double)c->predicted - (double)measured[i]) / (double)measured[i]);
            printf("%s\n", i == ch.chosen ? "  <- chosen" : "");
        }
    }
    if (record_failed) return hfl_errf(err, "%s", record_err);
    if (ch.chosen < 0)
        return hfl_errf(err,
                        "nothing fits in %.2f MiB (headroom %.0f%%): the smallest budget that would is %.2f MiB "
                        "as predicted (overhead: %s%s), at least %.2f MiB for the arena alone",
                        rq.budget.planned / 1048576.0, 100 * rq.budget.headroom, hfl_mib_up(ch.min_budget), source,
                        strcmp(source, "prior") ? "" : ", unmeasured: --verify and --trial-step measure",
                        hfl_mib_down(ch.min_arena_budget));
    return 0;
}
