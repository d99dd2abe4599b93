/* profile.c: device profiles and simulated time (see profile.h). */
#include "scenarios/profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static double pnum(const cJSON *o, const char *k, double lo, double hi, int *ok) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) *ok = 0;
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* One library entry into p; -1 with err naming what is wrong. */
static int profile_read(const cJSON *e, const char *name, hfl_profile *p, char *err) {
    int ok = cJSON_IsObject(e);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(e, "memory");
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(e, "tflops");
    char e2[HFL_ERR_LEN];
    if (!ok || !cJSON_IsString(mem) || hfl_parse_size(mem->valuestring, &p->memory, e2) != 0 || !cJSON_IsObject(tf))
        return hfl_errf(err, "profile \"%s\" needs \"memory\" (a size) and \"tflops\" {fp32, bf16, fp16}", name);
    static const char *const prec[3] = {"fp32", "bf16", "fp16"};
    for (int k = 0; k < 3; k++) p->tflops[k] = pnum(tf, prec[k], 0, 1e5, &ok);
    p->up_bps = pnum(e, "uplink_mbit", 1e-3, 1e6, &ok) * 1e6 / 8;
    p->down_bps = pnum(e, "downlink_mbit", 1e-3, 1e6, &ok) * 1e6 / 8;
    p->latency_s = pnum(e, "latency_ms", 0, 1e5, &ok) / 1000;
    if (!ok || p->tflops[0] <= 0)
        return hfl_errf(err, "profile \"%s\": tflops (fp32 > 0), uplink_mbit, downlink_mbit and latency_ms must be "
                        "numbers in range", name);
    snprintf(p->name, sizeof p->name, "%s", name);
    return 0;
}

int hfl_profiles_resolve(const char *path, const hfl_scenario *sc, hfl_profile *out, char *err) {
    memset(out, 0, sizeof *out * (size_t)sc->clients);
    int any = 0;
    for (int i = 0; i < sc->clients; i++) any |= sc->client_profile[i][0] != 0;
    if (!any) return 0;
    size_t len;
    char e[HFL_ERR_LEN];
    char *text = hfl_read_file(path, &len, e);
    if (!text) return hfl_errf(err, "profile library: %s", e);
    cJSON *lib = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(lib)) {
        cJSON_Delete(lib);
        return hfl_errf(err, "profile library %s is not a JSON object", path);
    }
    int rc = 0;
    for (int i = 0; rc == 0 && i < sc->clients; i++) {
        if (!sc->client_profile[i][0]) continue;
        const cJSON *entry = cJSON_GetObjectItemCaseSensitive(lib, sc->client_profile[i]);
        if (!entry) rc = hfl_errf(err, "profile \"%s\" is not in %s", sc->client_profile[i], path);
        else if (profile_read(entry, sc->client_profile[i], &out[i], e) != 0) rc = hfl_errf(err, "%s: %s", path, e);
    }
    cJSON_Delete(lib);
    return rc;
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* The precision client `id` trained in, from its plan in the report. */
static int client_precision(const cJSON *rep, int id) {
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(rep, "clients")) {
        if ((int)jnum(cl, "id") != id) continue;
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cl, "plan"), "precision");
        const char *s = cJSON_IsString(pr) ? pr->valuestring : "fp32";
        return !strcmp(s, "bf16") ? HFL_PREC_BF16 : !strcmp(s, "fp16") ? HFL_PREC_FP16 : HFL_PREC_FP32;
    }
    return HFL_PREC_FP32;
}

double hfl_profile_slowdown(const hfl_scenario *sc, int i) {
    double slow = sc->client_slow && sc->client_slow[i][0] ? atof(sc->client_slow[i]) : 1;
    return slow * (sc->compute_scale > 0 ? sc->compute_scale : 1);
}

double hfl_profile_samples_per_s(const hfl_profile *p, int precision, double slow, const hfl_model_spec *spec) {
    double rate = (p->tflops[precision] > 0 ? p->tflops[precision] : p->tflops[0]) * 1e12 * HFL_PROFILE_UTILISATION;
    return rate / (slow * 3.0 * (double)hfl_model_forward_flops(spec));
}

/* One task's simulated download, training and upload (see profile.h). */
typedef struct {
    double down, train, up;
} sim_task;

static sim_task price_task(const cJSON *rep, const hfl_scenario *sc, const hfl_profile *p, const hfl_model_spec *spec,
                           const cJSON *entry, int idx, double task_bytes) {
    double slow = hfl_profile_slowdown(sc, idx);
    const hfl_profile *q = &p[idx];
    int prec = client_precision(rep, (int)jnum(entry, "client"));
    double trained = cJSON_GetObjectItemCaseSensitive(entry, "trained_samples") ? jnum(entry, "trained_samples")
                                                                                : sc->local_epochs * jnum(entry, "samples");
    return (sim_task){task_bytes / q->down_bps + q->latency_s,
                      trained / hfl_profile_samples_per_s(q, prec, slow, spec),
                      jnum(entry, "bytes_up") / q->up_bps + q->latency_s};
}

void hfl_profiles_price(cJSON *rep, const hfl_scenario *sc, const hfl_profile *p, const hfl_model_spec *spec) {
    /* A virtual clock: round r starts at S_r, the sum of the walls before it.
     * Per client, the start and task bytes of a task it has not answered
     * (late: it may fold into a later round) and the end of its last task. */
    int async = jnum(rep, "async_concurrency") > 0;
    double *late_start = hfl_calloc((size_t)sc->clients, sizeof(double));
    double *late_bytes = hfl_calloc((size_t)sc->clients, sizeof(double));
    double *last_end = hfl_calloc((size_t)sc->clients, sizeof(double));
    double total = 0; /* S_r */
    const cJSON *round;
    cJSON_ArrayForEach(round, cJSON_GetObjectItemCaseSensitive(rep, "rounds")) {
        const cJSON *parts = cJSON_GetObjectItemCaseSensitive(round, "participants"), *pt;
        int n = cJSON_GetArraySize(parts), waited = 0, ok = 0;
        int target = cJSON_GetObjectItemCaseSensitive(round, "target") ? (int)jnum(round, "target") : n;
        double task_bytes = n > 0 ? jnum(round, "bytes_down") / n : 0, end = 0;
        sim_task slowest_task = {0, 0, 0};
        const char *slowest = "";
        /* a member ending at `e` (absolute simulated time) */
#define MEMBER(e, tk, name)                          \
    do {                                             \
        if ((e) - total > end) {                     \
            end = (e) - total, slowest_task = (tk); \
            slowest = (name);                        \
        }                                            \
    } while (0)
        /* late updates folded in (first: a client that folds may then be drawn
         * mid-round, its new task starting when the folded one ended); their
         * tasks began in an earlier round */
        cJSON_ArrayForEach(pt, cJSON_GetObjectItemCaseSensitive(round, "folded")) {
            int idx = hfl_scenario_client_index(sc, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pt, "name")));
            if (idx < 0 || !p[idx].name[0]) continue;
            ok += async; /* --async counts them toward its target; --late fold does not */
            sim_task tk = price_task(rep, sc, p, spec, pt, idx, late_bytes[idx]);
            last_end[idx] = late_start[idx] + tk.down + tk.train + tk.up;
            MEMBER(last_end[idx], tk, p[idx].name);
        }
        cJSON_ArrayForEach(pt, parts) {
            int idx = hfl_scenario_client_index(sc, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pt, "name")));
            if (idx < 0 || !p[idx].name[0]) continue;
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(pt, "status");
            /* --async draws a client that asks mid-round: it asked when its last task ended */
            double start = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pt, "mid_round")) && last_end[idx] > total
                               ? last_end[idx] : total;
            int late = cJSON_IsString(st) && !strcmp(st->valuestring, "late");
            int missing = cJSON_IsString(st) && !strcmp(st->valuestring, "missing");
            if (late || missing) late_start[idx] = start, late_bytes[idx] = task_bytes; /* it may fold later */
            if (late) continue; /* closed without it */
            if (!cJSON_IsString(st) || strcmp(st->valuestring, "ok") != 0) {
                /* the round waited for it until its deadline (a dropout is
                 * silent; missed_deadline: simulated past it) */
                waited = 1;
                continue;
            }
            ok++;
            sim_task tk = price_task(rep, sc, p, spec, pt, idx, task_bytes);
            last_end[idx] = start + tk.down + tk.train + tk.up;
            MEMBER(last_end[idx], tk, p[idx].name);
        }
#undef MEMBER
        /* over-selected or --async: a round with its target in closed at its slowest included update */
        if (ok >= target) waited = 0;
        if (waited && sc->deadline_s > end) end = sc->deadline_s;
        cJSON *sim = cJSON_CreateObject();
        cJSON_AddNumberToObject(sim, "wall_s", end);
        cJSON_AddNumberToObject(sim, "download_s", slowest_task.down);
        cJSON_AddNumberToObject(sim, "train_s", slowest_task.train);
        cJSON_AddNumberToObject(sim, "upload_s", slowest_task.up);
        cJSON_AddStringToObject(sim, "slowest", waited ? "deadline" : slowest);
        cJSON_AddItemToObject((cJSON *)round, "simulated", sim);
        total += end;
    }
    free(late_start), free(late_bytes), free(last_end);
    cJSON_AddNumberToObject(rep, "simulated_s", total);
}
