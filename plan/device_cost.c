/* device_cost.c: a GPU's per-process cost, measured once and kept in the
 * state directory (see device_cost.h). */
#include "plan/device_cost.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/budget.h"
#include "kernels/select.h"

#define DEVICE_COST_FILE "device_cost.jsonl"

int hfl_device_cost_load(const char *state_dir, const char *device, const char *backend, uint64_t *bytes) {
    if (!state_dir || !state_dir[0]) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", state_dir, DEVICE_COST_FILE);
    char *text = hfl_read_file(path, NULL, NULL);
    if (!text) return 0;
    int found = 0;
    for (char *line = strtok(text, "\n"); line && !found; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "device");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "backend");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "context_bytes");
        if (cJSON_IsString(d) && cJSON_IsString(b) && !strcmp(d->valuestring, device) &&
            !strcmp(b->valuestring, backend) && cJSON_IsNumber(v) && v->valuedouble > 0 &&
            v->valuedouble < 0x1p50) {
            *bytes = (uint64_t)v->valuedouble;
            found = 1;
        }
        cJSON_Delete(o);
    }
    free(text);
    return found;
}

int hfl_device_cost_store(const char *state_dir, const char *device, const char *backend, uint64_t bytes,
                          char *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", state_dir, DEVICE_COST_FILE);
    FILE *f = fopen(path, "a");
    if (!f) return hfl_errf(err, "cannot keep the device's per-process cost in %s: %s", path, strerror(errno));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddStringToObject(o, "backend", backend);
    cJSON_AddNumberToObject(o, "context_bytes", (double)bytes);
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int bad = fprintf(f, "%s\n", line) < 0; /* one short append: concurrent processes do not interleave */
    free(line);
    if (fclose(f) != 0 || bad) return hfl_errf(err, "cannot keep the device's per-process cost in %s", path);
    return 0;
}

int hfl_device_cost_get(const char *state_dir, const char *device, const hfl_backend *be, hfl_device_cost *c) {
    memset(c, 0, sizeof *c);
    if (be->host_memory) {
        c->source = "none";
        return -1;
    }
    uint64_t now;
    /* NVML must describe this process now, or a kept figure could not be used */
    if (hfl_backend_process_bytes(be, &now, c->why) != 0) {
        c->source = "unavailable";
        return -1;
    }
    if (hfl_device_cost_load(state_dir, device, be->name, &c->bytes)) {
        c->source = "state-dir";
        c->known = 1;
        return 0;
    }
    uint64_t live = hfl_budget_live_bytes();
    c->bytes = now > live ? now - live : 0;
    c->source = "measured";
    c->known = 1;
    char err[HFL_ERR_LEN];
    if (state_dir && state_dir[0] && hfl_device_cost_store(state_dir, device, be->name, c->bytes, err) != 0)
        fprintf(stderr, "hfl: %s\n", err);
    return 0;
}
