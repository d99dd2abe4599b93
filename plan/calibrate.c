/* calibrate.c: the GEMM rates the chooser predicts speed from, decided once
 * per device and kept.
 *
 * One 50 ms timing per precision varies 2-4x under load, so two clients on
 * one machine, or two runs of one seed, chose different precisions. Here the
 * timing (hfl_chooser_calibrate) is repeated until the per-precision medians
 * settle: at least CAL_MIN_RUNS runs, then until a run moves no median by
 * more than CAL_SETTLED (relative), at most CAL_MAX_RUNS. The medians are
 * appended to <state-dir>/calibration.jsonl as {device, backend, runs, fp32,
 * bf16, fp16}, and the first line for this device and backend that covers
 * the precisions asked for is used from then on, by every client sharing the
 * state dir: the same device and state give the same rates, and so the same
 * choice. Without a state dir the rates are measured every time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "plan/choose.h"
#include "util/util.h"

#define CAL_MIN_RUNS 3
#define CAL_MAX_RUNS 9
#define CAL_SETTLED 0.02

/* The first stored line for device and backend with a rate for every
 * precision in `precisions`; 1 when found. */
static int cal_load(const char *path, const char *device, const char *backend, unsigned precisions,
                    double gflops[3]) {
    char *text = hfl_read_file(path, NULL, NULL);
    if (!text) return 0;
    int found = 0;
    for (char *line = strtok(text, "\n"); line && !found; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "device");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "backend");
        if (cJSON_IsString(d) && cJSON_IsString(b) && !strcmp(d->valuestring, device) &&
            !strcmp(b->valuestring, backend)) {
            double g[3] = {0, 0, 0};
            int ok = 1;
            for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, hfl_precision_name((hfl_precision)p));
                if (cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e9) g[p] = v->valuedouble;
                if ((precisions & (1u << p)) && g[p] <= 0) ok = 0;
            }
            if (ok) {
                memcpy(gflops, g, sizeof g);
                found = 1;
            }
        }
        cJSON_Delete(o);
    }
    free(text);
    return found;
}

static void cal_store(const char *path, const char *device, const char *backend, int runs,
                      const double gflops[3]) {
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "hfl-client: cannot keep the calibration in %s: %s\n", path, strerror(errno));
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddStringToObject(o, "backend", backend);
    cJSON_AddNumberToObject(o, "runs", runs);
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++)
        cJSON_AddNumberToObject(o, hfl_precision_name((hfl_precision)p), gflops[p]);
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    fprintf(f, "%s\n", line); /* one short append: concurrent clients do not interleave */
    free(line);
    fclose(f);
}

int hfl_calibrate(const char *state_dir, const char *device, const hfl_backend *be, unsigned precisions,
                  double gflops[3]) {
    char path[1200] = "";
    if (state_dir && state_dir[0]) {
        snprintf(path, sizeof path, "%s/calibration.jsonl", state_dir);
        if (cal_load(path, device, be->name, precisions, gflops)) return 0;
    }
    double runs[3][CAL_MAX_RUNS], last[3] = {0, 0, 0};
    int n = 0;
    while (n < CAL_MAX_RUNS) {
        double g[3];
        hfl_chooser_calibrate(be, precisions, g);
        int moved = 0;
        for (int p = 0; p < 3; p++) {
            runs[p][n] = g[p];
            double tmp[CAL_MAX_RUNS];
            memcpy(tmp, runs[p], sizeof(double) * (size_t)(n + 1));
            double m = hfl_median(tmp, (size_t)n + 1);
            if (n > 0 && (m > last[p] * (1 + CAL_SETTLED) || m < last[p] * (1 - CAL_SETTLED))) moved = 1;
            gflops[p] = last[p] = m;
        }
        n++;
        if (n >= CAL_MIN_RUNS && !moved) break;
    }
    if (path[0]) cal_store(path, device, be->name, n, gflops);
    return n;
}
