/* overhead.c: what a training step takes outside the planned arena, learned.
 *
 * The arena is the planner's to predict; around it a process also holds BLAS
 * buffers (whose touched part grows with the GEMM shapes, so with the batch),
 * allocator slack and stack, which vary by device and library. Every measured
 * step (hfl-client --plan --verify, and a client's first real step) appends
 * {device, model, batch, precision, checkpoint, arena, measured} as a line of
 * <state-dir>/overhead.jsonl. The overhead for (precision, batch) is a
 * least-squares line in the batch over this device's and model's records in
 * that precision when they span two or more batches, else the median of
 * measured - arena over the device's records in that precision (any model),
 * else the fleet's estimate from the coordinator, else 0. */
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

void client_overhead_load(const char *state_dir, const char *device, const char *model, double fleet_estimate,
                          client_overhead *m) {
    memset(m, 0, sizeof *m);
    m->fleet = fleet_estimate;
    if (!state_dir || !state_dir[0]) return;
    char path[1200], err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state_dir);
    char *text = hfl_read_file(path, NULL, err);
    if (!text) return;
    for (char *line = strtok(text, "\n"); line && m->n < CLIENT_OVERHEAD_MAX; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *dev = cJSON_GetObjectItemCaseSensitive(o, "device"), *mod = cJSON_GetObjectItemCaseSensitive(o, "model");
        const cJSON *prec = cJSON_GetObjectItemCaseSensitive(o, "precision"), *b = cJSON_GetObjectItemCaseSensitive(o, "batch");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arena"), *ms = cJSON_GetObjectItemCaseSensitive(o, "measured");
        hfl_precision p;
        if (cJSON_IsString(dev) && !strcmp(dev->valuestring, device) && cJSON_IsString(prec) &&
            hfl_precision_parse(prec->valuestring, &p, NULL) == 0 && cJSON_IsNumber(b) && cJSON_IsNumber(a) &&
            cJSON_IsNumber(ms)) {
            m->rec[m->n].precision = p;
            m->rec[m->n].same_model = cJSON_IsString(mod) && !strcmp(mod->valuestring, model);
            m->rec[m->n].batch = b->valuedouble;
            m->rec[m->n].extra = ms->valuedouble - a->valuedouble;
            m->n++;
        }
        cJSON_Delete(o);
    }
    free(text);
}

uint64_t client_overhead_at(const client_overhead *m, hfl_precision p, int batch) {
    /* the line over this model's records, when they span two batches or more */
    double sb = 0, sy = 0, sbb = 0, sby = 0, bmin = 1e30, bmax = -1e30;
    int n = 0;
    double *all = hfl_malloc(sizeof(double) * (size_t)(m->n + 1));
    int n_all = 0;
    for (int i = 0; i < m->n; i++) {
        if (m->rec[i].precision != p) continue;
        all[n_all++] = m->rec[i].extra;
        if (!m->rec[i].same_model) continue;
        double x = m->rec[i].batch, y = m->rec[i].extra;
        sb += x, sy += y, sbb += x * x, sby += x * y, n++;
        bmin = x < bmin ? x : bmin, bmax = x > bmax ? x : bmax;
    }
    double v = m->fleet > 0 ? m->fleet : 0;
    if (n >= 2 && bmax > bmin) {
        double slope = (n * sby - sb * sy) / (n * sbb - sb * sb);
        v = (sy - slope * sb) / n + slope * batch;
    } else if (n_all > 0) {
        qsort(all, (size_t)n_all, sizeof *all, cmp_double);
        v = all[n_all / 2];
    }
    free(all);
    return v > 0 ? (uint64_t)v : 0;
}

int client_overhead_records(const client_overhead *m) { return m->n; }

void client_overhead_record(const char *state_dir, const char *device, const char *model, int batch,
                            const char *precision, const char *ckpt, size_t arena, uint64_t measured) {
    if (!state_dir || !state_dir[0]) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state_dir);
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f,
            "{\"device\": \"%s\", \"model\": \"%s\", \"batch\": %d, \"precision\": \"%s\", \"checkpoint\": \"%s\", "
            "\"arena\": %zu, \"measured\": %llu}\n",
            device, model, batch, precision, ckpt, arena, (unsigned long long)measured);
    fclose(f);
}

uint64_t client_overhead_fn(void *ctx, hfl_precision p, int batch) {
    return client_overhead_at((const client_overhead *)ctx, p, batch);
}
