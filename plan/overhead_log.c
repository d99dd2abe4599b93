/* overhead.c: the client's measurements of real step peaks, kept in the
 * state directory, and the overhead model (plan/overhead.h) fitted on them.
 *
 * Every measured step (hfl-client --plan --verify, the verification of a
 * chosen configuration before the first round, and a client's first real
 * step) appends {device, backend, model, batch, precision, checkpoint,
 * conv_chunk (conv models), arena, staging, blas, measured,
 * process_device_bytes, context_bytes} as a line of
 * <state-dir>/overhead.jsonl, blas being the configuration's OpenBLAS
 * footprint (plan/blas_footprint.h; 0 where the core's blocking is not
 * modelled, and in lines written before it was). process_device_bytes is
 * what NVML said the whole process held on the GPU then, context included
 * (null on the CPU, or where NVML cannot say); context_bytes the GPU's
 * per-process cost (plan/device_cost.h) when `measured` is that figure
 * less it (hfl_held_bytes), null when `measured` is RSS growth or the
 * fall of free device memory. The two kinds of measurement are not mixed:
 * loading keeps the lines of this device, backend and kind (any model: the
 * model is fitted across models), the newest HFL_OVERHEAD_MAX of them; a
 * damaged or hand-edited line is skipped, never trusted.
 *
 * A configuration measured itself is not predicted: the chooser's callback
 * gives it the largest overhead it was measured with (measured - arena), so
 * a configuration found too big stays too big, and every other one gets the
 * model's prediction. Verification counts a configuration as measured only
 * at the conv chunk it was measured at (a line without one, written before
 * chunks were kept, verifies no conv model's candidate). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "plan/choose.h"
#include "kernels/blas.h"
#include "kernels/select.h"
#include "util/util.h"

/* The slot of one configuration of this model, or -1; chunk < 0: at any conv
 * chunk, the one with the largest overhead. */
static int exact_find(const hfl_overhead_log *ov, hfl_precision p, int batch, hfl_ckpt_kind ckpt, int chunk) {
    int best = -1;
    for (int i = 0; i < ov->n_exact; i++)
        if (ov->exact[i].precision == p && ov->exact[i].batch == batch && ov->exact[i].ckpt == ckpt &&
            (chunk < 0 || ov->exact[i].conv_chunk == chunk) &&
            (best < 0 || ov->exact[i].overhead > ov->exact[best].overhead))
            best = i;
    return best;
}

/* Keeps the largest overhead measured for one configuration of this model. */
static void exact_add(hfl_overhead_log *ov, hfl_precision p, int batch, hfl_ckpt_kind ckpt, int chunk,
                      double overhead) {
    int i = exact_find(ov, p, batch, ckpt, chunk);
    if (i >= 0) {
        if (overhead > ov->exact[i].overhead) ov->exact[i].overhead = overhead;
        return;
    }
    /* full: the oldest gives way, so a configuration just measured is always known */
    int slot = ov->n_exact < HFL_EXACT_MAX ? ov->n_exact++ : ov->exact_next++ % HFL_EXACT_MAX;
    ov->exact[slot].precision = p;
    ov->exact[slot].batch = batch;
    ov->exact[slot].ckpt = ckpt;
    ov->exact[slot].conv_chunk = chunk;
    ov->exact[slot].overhead = overhead;
}

const hfl_blas_blocking *hfl_blas_blocking_running(const hfl_backend *be) {
    static hfl_blas_blocking b;
    if (!be->host_memory || hfl_blas_threads() != 1) return NULL;
    return hfl_blas_blocking_for(hfl_blas_core_name(), &b) == 0 ? &b : NULL;
}

void hfl_overhead_log_add(hfl_overhead_log *ov, const hfl_candidate *c, uint64_t staging,
                          uint64_t measured) {
    hfl_overhead_add(&ov->model, c->precision, c->batch, (double)c->arena, (double)staging,
                     (double)hfl_overhead_footprint(&ov->model, c->precision, c->batch),
                     (double)measured);
    exact_add(ov, c->precision, c->batch, c->ckpt, c->conv_chunk, (double)measured - (double)c->arena);
}

static uint64_t exact_overhead(const hfl_overhead_log *ov, int i) {
    return ov->exact[i].overhead > 0 ? (uint64_t)ov->exact[i].overhead : 0;
}

int hfl_overhead_log_exact(const hfl_overhead_log *ov, const hfl_candidate *c, uint64_t *overhead) {
    int i = exact_find(ov, c->precision, c->batch, c->ckpt, c->conv_chunk);
    if (i >= 0) *overhead = exact_overhead(ov, i);
    return i >= 0;
}

uint64_t hfl_overhead_log_fn(void *ctx, hfl_precision p, int batch, hfl_ckpt_kind ckpt) {
    const hfl_overhead_log *ov = ctx;
    int i = exact_find(ov, p, batch, ckpt, -1);
    return i >= 0 ? exact_overhead(ov, i) : hfl_overhead_predict(&ov->model, p, batch);
}

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

int hfl_held_bytes(const hfl_backend *be, const hfl_device_cost *cost, uint64_t *held, uint64_t *process) {
    uint64_t now;
    if (!cost || !cost->known || hfl_backend_process_bytes(be, &now, NULL) != 0) return -1;
    *held = now > cost->bytes ? now - cost->bytes : 0;
    if (process) *process = now;
    return 0;
}

void hfl_overhead_log_load(const char *state_dir, const char *device, const hfl_backend *be,
                           const hfl_model_spec *spec, double fleet_estimate, int held_basis,
                           hfl_overhead_log *ov) {
    hfl_overhead_model *m = &ov->model;
    const char *model = spec->name;
    hfl_overhead_init(m, be->host_memory, (size_t)spec->in_dim, spec->label_rows, fleet_estimate);
    hfl_overhead_set_footprint(m, spec, hfl_blas_blocking_running(be));
    ov->n_exact = 0;
    ov->exact_next = 0;
    if (!state_dir || !state_dir[0]) return;
    char path[1200], err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state_dir);
    char *text = hfl_read_file(path, NULL, err);
    if (!text) return;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *dev = item(o, "device"), *bk = item(o, "backend"), *prec = item(o, "precision");
        const cJSON *b = item(o, "batch"), *a = item(o, "arena"), *ms = item(o, "measured");
        const cJSON *st = item(o, "staging"), *mod = item(o, "model"), *ck = item(o, "checkpoint");
        const cJSON *bl = item(o, "blas"), *ctx = item(o, "context_bytes"), *cc = item(o, "conv_chunk");
        int chunk = cJSON_IsNumber(cc) && cc->valuedouble >= 1 && cc->valuedouble <= HFL_CONV_CHUNK_MAX
                        ? (int)cc->valuedouble : 0;
        double blas = cJSON_IsNumber(bl) && bl->valuedouble > 0 && bl->valuedouble < 0x1p40 ? bl->valuedouble : 0;
        hfl_precision p;
        hfl_ckpt_kind kind;
        int ok = cJSON_IsString(dev) && !strcmp(dev->valuestring, device) && cJSON_IsString(bk) &&
                 !strcmp(bk->valuestring, be->name) && cJSON_IsString(prec) &&
                 hfl_precision_parse(prec->valuestring, &p, NULL) == 0 && cJSON_IsNumber(b) &&
                 cJSON_IsNumber(a) && cJSON_IsNumber(ms) && cJSON_IsNumber(st) &&
                 b->valuedouble >= 1 && b->valuedouble <= 65536 && a->valuedouble >= 0 &&
                 a->valuedouble < 0x1p50 && ms->valuedouble > 0 && ms->valuedouble < 0x1p50 &&
                 st->valuedouble >= 0 && st->valuedouble < 0x1p40 && cJSON_IsNumber(ctx) == held_basis;
        if (ok)
            hfl_overhead_add(m, p, (int)b->valuedouble, a->valuedouble, st->valuedouble, blas,
                             ms->valuedouble);
        if (ok && cJSON_IsString(mod) && !strcmp(mod->valuestring, model) && cJSON_IsString(ck) &&
            hfl_ckpt_parse(ck->valuestring, &kind, NULL) == 0)
            exact_add(ov, p, (int)b->valuedouble, kind, chunk, ms->valuedouble - a->valuedouble);
        cJSON_Delete(o);
    }
    free(text);
}

int hfl_overhead_log_record(const char *state_dir, const char *device, const hfl_backend *be,
                            const hfl_model_spec *spec, const hfl_candidate *c, uint64_t staging,
                            uint64_t measured, uint64_t process_bytes, const hfl_device_cost *held_cost,
                            char *err) {
    if (!state_dir || !state_dir[0]) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state_dir);
    FILE *f = fopen(path, "a");
    if (!f) return hfl_errf(err, "cannot record a measurement in %s: %s", path, strerror(errno));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddStringToObject(o, "backend", be->name);
    cJSON_AddStringToObject(o, "model", spec->name);
    cJSON_AddNumberToObject(o, "batch", c->batch);
    cJSON_AddStringToObject(o, "precision", hfl_precision_name(c->precision));
    cJSON_AddStringToObject(o, "checkpoint", hfl_ckpt_name(c->ckpt));
    if (c->conv_chunk) cJSON_AddNumberToObject(o, "conv_chunk", c->conv_chunk);
    cJSON_AddNumberToObject(o, "arena", (double)c->arena);
    cJSON_AddNumberToObject(o, "staging", (double)staging);
    cJSON_AddNumberToObject(o, "blas", (double)hfl_blas_step_footprint(spec, c->batch, c->precision,
                                                                      hfl_blas_blocking_running(be)));
    cJSON_AddNumberToObject(o, "measured", (double)measured);
    if (process_bytes) cJSON_AddNumberToObject(o, "process_device_bytes", (double)process_bytes);
    else cJSON_AddNullToObject(o, "process_device_bytes");
    if (held_cost) cJSON_AddNumberToObject(o, "context_bytes", (double)held_cost->bytes);
    else cJSON_AddNullToObject(o, "context_bytes");
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int bad = fprintf(f, "%s\n", line) < 0;
    free(line);
    if (fclose(f) != 0 || bad) return hfl_errf(err, "cannot record a measurement in %s", path);
    return 0;
}

void hfl_device_memory_json(cJSON *o, const hfl_backend *be, const hfl_device_cost *cost) {
    uint64_t now;
    if (cost->known) cJSON_AddNumberToObject(o, "context_bytes", (double)cost->bytes);
    else cJSON_AddNullToObject(o, "context_bytes");
    cJSON_AddStringToObject(o, "context_source", cost->source ? cost->source : "none");
    if (hfl_backend_process_bytes(be, &now, NULL) == 0) cJSON_AddNumberToObject(o, "process_device_bytes", (double)now);
    else cJSON_AddNullToObject(o, "process_device_bytes");
    cJSON_AddNumberToObject(o, "alloc_granularity", (double)(be->alloc_granularity > 1 ? be->alloc_granularity : 1));
}

void hfl_device_memory_say(const char *who, const hfl_backend *be, const hfl_device_cost *cost) {
    uint64_t now;
    if (be->host_memory) return;
    if (cost->known && hfl_backend_process_bytes(be, &now, NULL) == 0)
        printf("%s: device memory: this process holds %.1f MiB, %.1f MiB of it its context and libraries (%s); "
               "the budget covers the rest\n",
               who, now / 1048576.0, cost->bytes / 1048576.0, cost->source);
    else
        printf("%s: device memory: no per-process figure (%s): the budget is checked against free memory and "
               "hfl's own allocations\n",
               who, cost->why[0] ? cost->why : "NVML cannot say");
}
