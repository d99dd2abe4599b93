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

double hfl_profile_samples_per_s(const hfl_profile *p, int precision, double slow, const hfl_model_spec *spec) {
    double rate = (p->tflops[precision] > 0 ? p->tflops[precision] : p->tflops[0]) * 1e12 * HFL_PROFILE_UTILISATION;
    return rate / (slow * 3.0 * (double)hfl_model_forward_flops(spec));
}

void hfl_profiles_price(cJSON *rep, const hfl_scenario *sc, const hfl_profile *p, const hfl_model_spec *spec) {
    double total = 0;
    const cJSON *round;
    cJSON_ArrayForEach(round, cJSON_GetObjectItemCaseSensitive(rep, "rounds")) {
        const cJSON *parts = cJSON_GetObjectItemCaseSensitive(round, "participants"), *pt;
        int n = cJSON_GetArraySize(parts), waited = 0, ok = 0;
        int target = cJSON_GetObjectItemCaseSensitive(round, "target") ? (int)jnum(round, "target") : n;
        double task_bytes = n > 0 ? jnum(round, "bytes_down") / n : 0, wall = 0, down = 0, train = 0, up = 0;
        const char *slowest = "";
        cJSON_ArrayForEach(pt, parts) {
            int id = (int)jnum(pt, "client"), idx = hfl_scenario_client_index(sc, cJSON_GetStringValue(
                                                   cJSON_GetObjectItemCaseSensitive(pt, "name")));
            if (idx < 0 || !p[idx].name[0]) continue;
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(pt, "status");
            if (cJSON_IsString(st) && !strcmp(st->valuestring, "late")) continue; /* closed without it */
            if (!cJSON_IsString(st) || strcmp(st->valuestring, "ok") != 0) {
                waited = 1; /* the round waited for it until its deadline (a dropout is silent) */
                continue;
            }
            ok++;
            double slow = sc->client_slow && sc->client_slow[idx][0] ? atof(sc->client_slow[idx]) : 1;
            const hfl_profile *q = &p[idx];
            int prec = client_precision(rep, id);
            double d = task_bytes / q->down_bps + q->latency_s;
            double trained = cJSON_GetObjectItemCaseSensitive(pt, "trained_samples") ? jnum(pt, "trained_samples")
                                                                                     : sc->local_epochs * jnum(pt, "samples");
            double t = trained / hfl_profile_samples_per_s(q, prec, slow, spec);
            double u = jnum(pt, "bytes_up") / q->up_bps + q->latency_s;
            if (d + t + u > wall) {
                wall = d + t + u, down = d, train = t, up = u;
                slowest = q->name;
            }
        }
        /* over-selected: a round with its target in closed at its slowest included update */
        if (ok >= target) waited = 0;
        if (waited && sc->deadline_s > wall) wall = sc->deadline_s;
        cJSON *sim = cJSON_CreateObject();
        cJSON_AddNumberToObject(sim, "wall_s", wall);
        cJSON_AddNumberToObject(sim, "download_s", down);
        cJSON_AddNumberToObject(sim, "train_s", train);
        cJSON_AddNumberToObject(sim, "upload_s", up);
        cJSON_AddStringToObject(sim, "slowest", waited ? "deadline" : slowest);
        cJSON_AddItemToObject((cJSON *)round, "simulated", sim);
        total += wall;
    }
    cJSON_AddNumberToObject(rep, "simulated_s", total);
}
