/* overhead.c: what a training step takes outside the planned arena, learned.
 *
 * The arena is the planner's to predict; around it a process also holds BLAS
 * buffers (whose touched part grows with the GEMM shapes, so with the batch),
 * allocator slack and stack, which vary by device and library. Every measured
 * step (hfl-client --plan --verify, and a client's first real step) appends
 * {device, model, batch, precision, checkpoint, arena, measured} as a line of
 * <state-dir>/overhead.jsonl (the newest CLIENT_OVERHEAD_MAX valid lines
 * count). The overhead for (model, precision, batch, checkpoint) is, in this
 * order: the median of measured - arena over records of exactly that
 * configuration; a
 * least-squares line in the batch over the model's records in that precision
 * when they span two batches or more (never sloping down, never below the
 * least measured); the median over the device's records in that precision;
 * the fleet's estimate from the coordinator; 0. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client/client.h"
#include "util/util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

void client_overhead_load(const char *state_dir, const char *device, const char *model, double fleet_estimate,
                          client_overhead *m) {
    memset(m, 0, sizeof *m);
    m->fleet = fleet_estimate;
    if (!state_dir || !state_dir[0]) return;
    char path[1200], err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state_dir);
    char *text = hfl_read_file(path, NULL, err);
    if (!text) return;
    int seen = 0; /* the newest CLIENT_OVERHEAD_MAX records win: a ring */
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *dev = cJSON_GetObjectItemCaseSensitive(o, "device"), *mod = cJSON_GetObjectItemCaseSensitive(o, "model");
        const cJSON *prec = cJSON_GetObjectItemCaseSensitive(o, "precision"), *b = cJSON_GetObjectItemCaseSensitive(o, "batch");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arena"), *ms = cJSON_GetObjectItemCaseSensitive(o, "measured");
        const cJSON *ck = cJSON_GetObjectItemCaseSensitive(o, "checkpoint");
        hfl_precision p;
        hfl_ckpt_kind kind;
        /* a damaged or hand-edited line is skipped, never trusted */
        int ok = cJSON_IsString(dev) && !strcmp(dev->valuestring, device) && cJSON_IsString(prec) &&
                 hfl_precision_parse(prec->valuestring, &p, NULL) == 0 && cJSON_IsString(ck) &&
                 hfl_ckpt_parse(ck->valuestring, &kind, NULL) == 0 && cJSON_IsNumber(b) && cJSON_IsNumber(a) &&
                 cJSON_IsNumber(ms) && b->valuedouble >= 1 && b->valuedouble <= 65536 && a->valuedouble >= 0 &&
                 a->valuedouble < 0x1p50 && ms->valuedouble >= 0 && ms->valuedouble < 0x1p50;
        if (ok) {
            int k = seen++ % CLIENT_OVERHEAD_MAX;
            m->rec[k].precision = p;
            m->rec[k].ckpt = kind;
            m->rec[k].same_model = cJSON_IsString(mod) && !strcmp(mod->valuestring, model);
            m->rec[k].batch = b->valuedouble;
            m->rec[k].extra = ms->valuedouble - a->valuedouble;
        }
        cJSON_Delete(o);
    }
    m->n = seen < CLIENT_OVERHEAD_MAX ? seen : CLIENT_OVERHEAD_MAX;
    free(text);
}

uint64_t client_overhead_at(const client_overhead *m, hfl_precision p, int batch, hfl_ckpt_kind ckpt) {
    double *exact = hfl_malloc(sizeof(double) * (size_t)(m->n + 1)), *all = hfl_malloc(sizeof(double) * (size_t)(m->n + 1));
    int n_exact = 0, n_all = 0, n = 0;
    double sb = 0, sy = 0, sbb = 0, sby = 0, bmin = 1e30, bmax = -1e30, ymin = 1e30;
    for (int i = 0; i < m->n; i++) {
        if (m->rec[i].precision != p) continue;
        all[n_all++] = m->rec[i].extra;
        if (!m->rec[i].same_model) continue;
        double x = m->rec[i].batch, y = m->rec[i].extra;
        if (x == batch && m->rec[i].ckpt == ckpt) exact[n_exact++] = y;
        sb += x, sy += y, sbb += x * x, sby += x * y, n++;
        bmin = x < bmin ? x : bmin, bmax = x > bmax ? x : bmax, ymin = y < ymin ? y : ymin;
    }
    double v = m->fleet > 0 ? m->fleet : 0;
    if (n_exact > 0) {
        v = median(exact, n_exact); /* this very configuration was measured */
    } else if (n >= 2 && bmax > bmin) {
        /* a line in the batch, never sloping down and never below what was measured */
        double slope = (n * sby - sb * sy) / (n * sbb - sb * sb);
        if (!(slope > 0)) slope = 0;
        double x = batch < bmin ? bmin : batch;
        v = (sy - slope * sb) / n + slope * x;
        if (v < ymin) v = ymin;
    } else if (n_all > 0) {
        v = median(all, n_all);
    }
    free(exact);
    free(all);
    return v > 0 && v < 0x1p50 ? (uint64_t)v : 0;
}

int client_overhead_records(const client_overhead *m) { return m->n; }

int client_overhead_record(const char *state_dir, const char *device, const char *model, int batch,
                           const char *precision, const char *ckpt, size_t arena, uint64_t measured, char *err) {
    if (!state_dir || !state_dir[0]) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state_dir);
    FILE *f = fopen(path, "a");
    if (!f) return hfl_errf(err, "cannot record a measurement in %s: %s", path, strerror(errno));
    fprintf(f,
            "{\"device\": \"%s\", \"model\": \"%s\", \"batch\": %d, \"precision\": \"%s\", \"checkpoint\": \"%s\", "
            "\"arena\": %zu, \"measured\": %llu}\n",
            device, model, batch, precision, ckpt, arena, (unsigned long long)measured);
    if (fclose(f) != 0) return hfl_errf(err, "cannot record a measurement in %s", path);
    return 0;
}

uint64_t client_overhead_fn(void *ctx, hfl_precision p, int batch, hfl_ckpt_kind ckpt) {
    return client_overhead_at((const client_overhead *)ctx, p, batch, ckpt);
}
