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
 * choice. Without a state dir the rates are measured every time. Clients
 * that start at once on one state dir (hfl-sim's fleet) take turns under
 * <state-dir>/calibration.lock (flock): the first measures and keeps its
 * line, the others find it, so they calibrate once, not each at the same
 * moment on the same cores (which measured rates 5x apart between the
 * quickstart's clients and cost every one of them a second of CPU).
 *
 * The per-op costs (plan/op_cost.h) are kept the same way, as "op_costs"
 * in a line: measured once, in the same child as the first GEMM timing,
 * and the first line for this device and backend whose costs cover the
 * precisions asked for is used from then on. A state dir whose lines
 * predate them gets one more line, with the rates it already uses and the
 * costs measured now. A measurement that failed is not kept (the chooser
 * uses its FLOP model, and the next process measures again). Without a
 * state dir the costs are not measured at all: some 0.7 s for three
 * precisions at every start, with nowhere to keep them, so such a client
 * (a test's, a one-off --plan) predicts from FLOPs as before. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "plan/choose.h"
#include "util/util.h"

#define CAL_MIN_RUNS 3
#define CAL_MAX_RUNS 9
#define CAL_SETTLED 0.02

/* Calls take on each stored line of device and backend, in order, until
 * it returns 1 (then 1); 0 when none did. Damaged lines are skipped. */
static int cal_scan(const char *path, const char *device, const char *backend,
                    int (*take)(const cJSON *line, void *ctx), void *ctx) {
    char *text = hfl_read_file(path, NULL, NULL);
    if (!text) return 0;
    int found = 0;
    for (char *line = strtok(text, "\n"); line && !found; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "device");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "backend");
        if (cJSON_IsString(d) && cJSON_IsString(b) && !strcmp(d->valuestring, device) &&
            !strcmp(b->valuestring, backend))
            found = take(o, ctx);
        cJSON_Delete(o);
    }
    free(text);
    return found;
}

typedef struct {
    unsigned precisions;
    double *gflops;
    hfl_op_costs *ops;
} cal_want;

/* A line with a rate for every precision wanted. */
static int take_rates(const cJSON *o, void *ctx) {
    const cal_want *w = ctx;
    double g[3] = {0, 0, 0};
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, hfl_precision_name((hfl_precision)p));
        if (cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e9) g[p] = v->valuedouble;
        if ((w->precisions & (1u << p)) && g[p] <= 0) return 0;
    }
    memcpy(w->gflops, g, sizeof g);
    return 1;
}

/* A line with complete per-op costs for every precision wanted. */
static int take_ops(const cJSON *o, void *ctx) {
    const cal_want *w = ctx;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "op_costs");
    char err[HFL_ERR_LEN];
    return cJSON_IsObject(c) && hfl_op_costs_parse(c, w->precisions, w->ops, err) == 0;
}

static void cal_store(const char *path, const char *device, const char *backend, int runs,
                      const double gflops[3], const hfl_op_costs *ops) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddStringToObject(o, "backend", backend);
    cJSON_AddNumberToObject(o, "runs", runs);
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++)
        cJSON_AddNumberToObject(o, hfl_precision_name((hfl_precision)p), gflops[p]);
    if (ops && ops->precisions) cJSON_AddItemToObject(o, "op_costs", hfl_op_costs_json(ops));
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char err[HFL_ERR_LEN];
    /* one write: concurrent clients do not interleave (the line is some 4.8 KB with its op costs) */
    if (!line || hfl_append_line(path, line, err) != 0)
        fprintf(stderr, "hfl-client: cannot keep the calibration: %s\n", line ? err : "out of memory");
    free(line);
}

/* The GEMM rates timed until their medians settle (the header comment);
 * with ops, the per-op costs measured in the first run's child. */
static int cal_measure_rates(const hfl_backend *be, unsigned precisions, double gflops[3], hfl_op_costs *ops) {
    double runs[3][CAL_MAX_RUNS], last[3] = {0, 0, 0};
    int n = 0;
    while (n < CAL_MAX_RUNS) {
        double g[3];
        hfl_chooser_calibrate_ops(be, precisions, g, n == 0 ? ops : NULL);
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
    return n;
}

/* v as a line of the state dir gives it back: cJSON prints 15 digits where
 * they read back within its epsilon, not to the bit. */
static double cal_as_kept(double v) {
    cJSON *n = cJSON_CreateNumber(v);
    char *text = n ? cJSON_PrintUnformatted(n) : NULL;
    double kept = text ? strtod(text, NULL) : v;
    cJSON_Delete(n);
    free(text);
    return kept;
}

/* hfl_calibrate under the state dir's lock (the header). */
static int calibrate_locked(const char *state_dir, const char *device, const hfl_backend *be, unsigned precisions,
                            double gflops[3], hfl_op_costs *ops) {
    char path[1200] = "";
    int have_rates = 0, have_ops = 0;
    if (ops) memset(ops, 0, sizeof *ops);
    if (!state_dir || !state_dir[0]) ops = NULL; /* nowhere to keep them (the header) */
    if (state_dir && state_dir[0]) {
        snprintf(path, sizeof path, "%s/calibration.jsonl", state_dir);
        cal_want want = {precisions, gflops, ops};
        have_rates = cal_scan(path, device, be->name, take_rates, &want);
        have_ops = !ops || cal_scan(path, device, be->name, take_ops, &want);
        if (have_rates && have_ops) return 0;
    }
    hfl_op_costs *measure_ops = have_ops ? NULL : ops;
    int n = 0;
    if (!have_rates) {
        n = cal_measure_rates(be, precisions, gflops, measure_ops);
        if (path[0]) /* as kept, like the op costs below */
            for (int p = 0; p < 3; p++) gflops[p] = cal_as_kept(gflops[p]);
    } else {
        double unused[3]; /* the kept rates stand: the state dir's clients all use them */
        hfl_chooser_calibrate_ops(be, precisions, unused, measure_ops);
    }
    int ops_new = measure_ops && (measure_ops->precisions & precisions) == precisions;
    if (measure_ops && !ops_new) memset(measure_ops, 0, sizeof *measure_ops);
    if (ops_new) { /* as kept, to the bit (cJSON prints 15 digits where they read back within its
                      epsilon): this process predicts what every later one sharing the state dir will */
        char err[HFL_ERR_LEN];
        cJSON *costs = hfl_op_costs_json(measure_ops);
        char *text = cJSON_PrintUnformatted(costs);
        cJSON *kept = text ? cJSON_Parse(text) : NULL;
        if (kept) hfl_op_costs_parse(kept, precisions, measure_ops, err);
        cJSON_Delete(kept);
        cJSON_Delete(costs);
        free(text);
    }
    if (path[0] && (!have_rates || ops_new)) cal_store(path, device, be->name, n, gflops, ops_new ? measure_ops : NULL);
    return n;
}

/* The state dir's calibration lock, held until the fd is closed (a forked
 * calibration child's copy goes when it exits); -1 when it cannot be had,
 * and the client calibrates without it, as before. */
static int cal_lock(const char *state_dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/calibration.lock", state_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    while (fd >= 0 && flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) close(fd), fd = -1;
    return fd;
}

int hfl_calibrate(const char *state_dir, const char *device, const hfl_backend *be, unsigned precisions,
                  double gflops[3], hfl_op_costs *ops) {
    int lock = state_dir && state_dir[0] ? cal_lock(state_dir) : -1;
    int n = calibrate_locked(state_dir, device, be, precisions, gflops, ops);
    if (lock >= 0) close(lock);
    return n;
}
