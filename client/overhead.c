/* overhead.c: what a training step takes outside the planned arena, learned.
 *
 * The arena is the planner's to predict; around it a process also holds BLAS
 * buffers, allocator slack and stack, which vary by device and library. Every
 * measured step (hfl-client --plan --verify, and a client's first real step)
 * appends {device, model, batch, checkpoint, arena, measured} as a line of
 * <state-dir>/overhead.jsonl; the overhead is the median of measured - arena
 * over this device's records, which is robust to the odd noisy measurement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client/client.h"
#include "util/util.h"

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Median of measured - arena over this device's records; 0 without any. */
uint64_t client_overhead_fit(const char *state_dir, const char *device, int *n_records) {
    *n_records = 0;
    if (!state_dir || !state_dir[0]) return 0;
    char path[1200], err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state_dir);
    char *text = hfl_read_file(path, NULL, err);
    if (!text) return 0;
    int cap = 0;
    for (char *p = text; *p; p++) cap += *p == '\n';
    int64_t *d = hfl_malloc(sizeof(int64_t) * (size_t)(cap + 1));
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *dev = cJSON_GetObjectItemCaseSensitive(o, "device");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arena"), *m = cJSON_GetObjectItemCaseSensitive(o, "measured");
        if (cJSON_IsString(dev) && !strcmp(dev->valuestring, device) && cJSON_IsNumber(a) && cJSON_IsNumber(m) &&
            *n_records < cap)
            d[(*n_records)++] = (int64_t)(m->valuedouble - a->valuedouble);
        cJSON_Delete(o);
    }
    free(text);
    uint64_t fit = 0;
    if (*n_records > 0) {
        qsort(d, (size_t)*n_records, sizeof *d, cmp_i64);
        int64_t med = d[*n_records / 2];
        fit = med > 0 ? (uint64_t)med : 0;
    }
    free(d);
    return fit;
}

void client_overhead_record(const char *state_dir, const char *device, const char *model, int batch,
                            const char *ckpt, size_t arena, uint64_t measured) {
    if (!state_dir || !state_dir[0]) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state_dir);
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "{\"device\": \"%s\", \"model\": \"%s\", \"batch\": %d, \"checkpoint\": \"%s\", \"arena\": %zu, \"measured\": %llu}\n",
            device, model, batch, ckpt, arena, (unsigned long long)measured);
    fclose(f);
}

