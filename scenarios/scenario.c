/* scenario.c: reading and checking a scenario file (see scenario.h). */
#include "scenarios/scenario.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/util.h"

static const char *const known_keys[] = {
    "name", "model", "clients", "clients_per_round", "min_quorum", "rounds", "local_epochs", "batch",
    "lr", "momentum", "weight_decay", "deadline_s", "partition", "codec", "block", "seed", "description", "prepare", "downlink", "downlink_delta", "chunk_bytes", "client_codecs", "client_memory", "memory_budget_at", "precision", "clip_norm", "max_client_samples", "max_share", "server_opt", "strategy", "client_attacks", "over_selection", "late", "local_work", "prox_mu", "async_concurrency", "pace", "optimizer", "betas", "local_steps", "lr_schedule", "sum_on_disk", "keep_local_optimizer",
    "device", "client_devices", "profiles", "profile_library", "memory_scale", "crashes", "dropout", "slow", "compute_scale", "virtual_time", "aggregators",
    "secure_agg", "client_clip", "fixed_bits", "dp_noise", "dp_epsilon", "dp_delta", NULL};

static int get_str(const cJSON *o, const char *key, int required, char *out, size_t cap, char *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return required ? hfl_errf(err, "missing \"%s\"", key) : 0;
    if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= cap)
        return hfl_errf(err, "\"%s\" must be a non-empty string of at most %zu bytes", key, cap - 1);
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return 0;
}

static int get_num(const cJSON *o, const char *key, int required, int integral, double lo, double hi,
                   double *out, char *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return required ? hfl_errf(err, "missing \"%s\"", key) : 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return hfl_errf(err, "\"%s\" must be a number", key);
    double d = v->valuedouble;
    if (integral && d != floor(d)) return hfl_errf(err, "\"%s\" must be an integer", key);
    if (d < lo || d > hi) return hfl_errf(err, "\"%s\" = %g is outside [%g, %g]", key, d, lo, hi);
    *out = d;
    return 0;
}

/* "<key>": {"client-<i>": "<value>", ...} into out[i]; values are checked by the caller. */
static int get_per_client(const cJSON *o, const char *key, int clients, char (*out)[32], char *err) {
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cc) return 0;
    if (!cJSON_IsObject(cc)) return hfl_errf(err, "\"%s\" must be an object of client name to string", key);
    for (const cJSON *it = cc->child; it; it = it->next) {
        /* exactly client-<digits>, no sign, no leading zero, each client once */
        const char *d = strncmp(it->string, "client-", 7) == 0 ? it->string + 7 : "";
        char *end;
        long idx = *d >= '0' && *d <= '9' && (d[0] != '0' || d[1] == 0) ? strtol(d, &end, 10) : -1;
        if (idx < 0 || *end || idx >= clients)
            return hfl_errf(err, "\"%s\": no client named \"%s\" (names are client-0 .. client-%d)", key,
                            it->string, clients - 1);
        if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) >= sizeof out[0])
            return hfl_errf(err, "\"%s\": \"%s\" must be a short non-empty string", key, it->string);
        if (out[idx][0]) return hfl_errf(err, "\"%s\": \"%s\" appears twice", key, it->string);
        memcpy(out[idx], it->valuestring, strlen(it->valuestring) + 1);
    }
    return 0;
}

/* "profiles": {"<profile>": <count>, ...} into client_profile, in client
 * order; the counts must add up to the clients. */
static int get_profiles(const cJSON *o, hfl_scenario *sc, char *err) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "profiles");
    if (!pr) return 0;
    if (!cJSON_IsObject(pr)) return hfl_errf(err, "\"profiles\" must be an object of profile name to client count");
    int next = 0;
    for (const cJSON *it = pr->child; it; it = it->next) {
        if (!it->string[0] || strlen(it->string) >= sizeof sc->client_profile[0])
            return hfl_errf(err, "\"profiles\": a profile name must be 1..31 bytes");
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 1 ||
            it->valuedouble > sc->clients - next)
            return hfl_errf(err, "\"profiles\": \"%s\" must count 1..%d clients", it->string, sc->clients - next);
        for (int k = 0; k < (int)it->valuedouble; k++) snprintf(sc->client_profile[next++], 32, "%s", it->string);
    }
    if (next != sc->clients)
        return hfl_errf(err, "\"profiles\" count %d clients, the scenario has %d", next, sc->clients);
    return 0;
}

/* A --device value: auto, cpu or cuda. */
static int check_device(const char *what, const char *d, char *err) {
    if (!strcmp(d, "auto") || !strcmp(d, "cpu") || !strcmp(d, "cuda")) return 0;
    return hfl_errf(err, "%s: unknown device '%s' (auto, cpu, cuda)", what, d);
}

void hfl_scenario_free(hfl_scenario *sc) {
    free(sc->client_codec);
    free(sc->client_memory);
    free(sc->client_memory_at);
    sc->client_memory_at = NULL;
    free(sc->client_profile);
    sc->client_profile = NULL;
    free(sc->client_crash);
    sc->client_crash = NULL;
    free(sc->client_slow);
    sc->client_slow = NULL;
    free(sc->client_device);
    free(sc->client_attack);
    sc->client_attack = NULL;
    sc->client_codec = NULL;
    sc->client_memory = NULL;
    sc->client_device = NULL;
}

int hfl_scenario_parse(const char *text, size_t len, hfl_scenario *sc, char *err) {
    memset(sc, 0, sizeof *sc);
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!o) {
        size_t at = end ? (size_t)(end - text) : 0;
        return hfl_errf(err, "not valid JSON (near byte %zu)", at);
    }
    int rc = -1;
    if (!cJSON_IsObject(o)) {
        hfl_errf(err, "a scenario must be a JSON object");
        goto out;
    }
    for (const cJSON *it = o->child; it; it = it->next) {
        int ok = 0;
        for (int i = 0; known_keys[i]; i++) ok |= !strcmp(it->string, known_keys[i]);
        if (!ok) {
            hfl_errf(err, "unknown key \"%s\"", it->string);
            goto out;
        }
    }
    double clients = 0, k = -1, q = -1, rounds = 0, epochs = 1, batch = 32, block = 256, seed = 1;
    sc->lr = 0.05, sc->deadline_s = 300;
    snprintf(sc->downlink, sizeof sc->downlink, "fp32");
    snprintf(sc->precision, sizeof sc->precision, "auto");
    snprintf(sc->device, sizeof sc->device, "auto");
    if (get_str(o, "name", 1, sc->name, sizeof sc->name, err) || get_str(o, "model", 1, sc->model, sizeof sc->model, err) ||
        get_str(o, "partition", 1, sc->partition, sizeof sc->partition, err) ||
        get_str(o, "prepare", 0, sc->prepare, sizeof sc->prepare, err) ||
        get_str(o, "codec", 1, sc->codec, sizeof sc->codec, err) ||
        get_num(o, "clients", 1, 1, 1, 1000, &clients, err) || get_num(o, "rounds", 1, 1, 1, 1e6, &rounds, err) ||
        get_num(o, "clients_per_round", 0, 1, 1, 1000, &k, err) || get_num(o, "min_quorum", 0, 1, 1, 1000, &q, err) ||
        get_num(o, "local_epochs", 0, 1, 1, 10000, &epochs, err) || get_num(o, "batch", 0, 1, 1, 65536, &batch, err) ||
        get_num(o, "block", 0, 1, 1, 65536, &block, err) || get_num(o, "seed", 0, 1, 0, 2147483647.0, &seed, err) ||
        get_num(o, "lr", 0, 0, 0, 100, &sc->lr, err) || get_num(o, "momentum", 0, 0, 0, 0.9999, &sc->momentum, err) ||
        get_num(o, "weight_decay", 0, 0, 0, 1, &sc->weight_decay, err) ||
        get_num(o, "deadline_s", 0, 0, 0.1, 1e7, &sc->deadline_s, err) ||
        get_str(o, "downlink", 0, sc->downlink, sizeof sc->downlink, err) ||
        get_num(o, "chunk_bytes", 0, 1, 4096, 1 << 30, &sc->chunk_bytes, err) ||
        get_num(o, "max_client_samples", 0, 1, 0, 100000000, &sc->max_client_samples, err) ||
        get_num(o, "max_share", 0, 0, 0.01, 1, &sc->max_share, err) ||
        get_num(o, "over_selection", 0, 0, 0, 4, &sc->over_selection, err) ||
        get_num(o, "aggregators", 0, 1, 0, HFL_SIM_MAX_AGGREGATORS, &sc->aggregators, err) ||
        get_num(o, "prox_mu", 0, 0, 0, 100, &sc->prox_mu, err) ||
        get_num(o, "fixed_bits", 0, 1, 4, 50, &sc->fixed_bits, err) ||
        get_num(o, "dp_noise", 0, 0, 0.01, 1e4, &sc->dp_noise, err) ||
        get_num(o, "dp_epsilon", 0, 0, 1e-3, 1e3, &sc->dp_epsilon, err) ||
        get_num(o, "dp_delta", 0, 0, 1e-15, 0.1, &sc->dp_delta, err) ||
        get_num(o, "async_concurrency", 0, 1, 0, 1000, &sc->async_concurrency, err) ||
        get_num(o, "pace", 0, 0, 0, 100, &sc->pace, err) ||
        get_num(o, "local_steps", 0, 1, 0, 100000000, &sc->local_steps, err) ||
        get_str(o, "lr_schedule", 0, sc->lr_schedule, sizeof sc->lr_schedule, err) ||
        get_str(o, "late", 0, sc->late, sizeof sc->late, err) ||
        get_str(o, "local_work", 0, sc->local_work, sizeof sc->local_work, err) ||
        get_str(o, "server_opt", 0, sc->server_opt, sizeof sc->server_opt, err) ||
        get_str(o, "optimizer", 0, sc->optimizer, sizeof sc->optimizer, err) ||
        get_str(o, "betas", 0, sc->betas, sizeof sc->betas, err) ||
        get_str(o, "strategy", 0, sc->strategy, sizeof sc->strategy, err) ||
        get_str(o, "sum_on_disk", 0, sc->sum_on_disk, sizeof sc->sum_on_disk, err))
        goto out;
    if (sc->local_work[0] && strcmp(sc->local_work, "epochs") && strcmp(sc->local_work, "capacity")) {
        hfl_errf(err, "\"local_work\" must be \"epochs\" or \"capacity\", not \"%s\"", sc->local_work);
        goto out;
    }
    if (sc->optimizer[0] && strcmp(sc->optimizer, "sgd") && strcmp(sc->optimizer, "adamw")) {
        hfl_errf(err, "\"optimizer\" must be \"sgd\" or \"adamw\", not \"%s\"", sc->optimizer);
        goto out;
    }
    if (sc->late[0] && strcmp(sc->late, "drop") && strcmp(sc->late, "fold")) {
        hfl_errf(err, "\"late\" must be \"drop\" or \"fold\", not \"%s\"", sc->late);
        goto out;
    }
    const cJSON *clip = cJSON_GetObjectItemCaseSensitive(o, "clip_norm");
    if (cJSON_IsNumber(clip) && clip->valuedouble >= 1e-6 && clip->valuedouble <= 1e6) {
        snprintf(sc->clip_norm, sizeof sc->clip_norm, "%.17g", clip->valuedouble);
    } else if (clip && get_str(o, "clip_norm", 0, sc->clip_norm, sizeof sc->clip_norm, err) != 0) {
        hfl_errf(err, "\"clip_norm\" must be \"off\", \"adaptive[:C0]\" or a norm in [1e-6, 1e6]");
        goto out;
    }
    const cJSON *dd = cJSON_GetObjectItemCaseSensitive(o, "downlink_delta");
    if (dd && !cJSON_IsBool(dd)) {
        hfl_errf(err, "\"downlink_delta\" must be true or false");
        goto out;
    }
    sc->downlink_delta = cJSON_IsTrue(dd);
    const cJSON *ko = cJSON_GetObjectItemCaseSensitive(o, "keep_local_optimizer");
    if (ko && !cJSON_IsBool(ko)) {
        hfl_errf(err, "\"keep_local_optimizer\" must be true or false");
        goto out;
    }
    sc->keep_local_optimizer = cJSON_IsTrue(ko);
    sc->clients = (int)clients, sc->rounds = (int)rounds, sc->local_epochs = (int)epochs;
    sc->batch = (int)batch, sc->block = (int)block, sc->seed = (uint64_t)seed;
    sc->clients_per_round = k > 0 ? (int)k : sc->clients;
    sc->min_quorum = q > 0 ? (int)q : sc->clients_per_round;
    if (sc->clients_per_round > sc->clients) {
        hfl_errf(err, "\"clients_per_round\" (%d) exceeds \"clients\" (%d)", sc->clients_per_round, sc->clients);
        goto out;
    }
    if (sc->min_quorum > sc->clients_per_round) {
        hfl_errf(err, "\"min_quorum\" (%d) exceeds \"clients_per_round\" (%d)", sc->min_quorum, sc->clients_per_round);
        goto out;
    }
    sc->client_codec = calloc((size_t)sc->clients, sizeof *sc->client_codec);
    sc->client_memory = calloc((size_t)sc->clients, sizeof *sc->client_memory);
    sc->client_memory_at = calloc((size_t)sc->clients, sizeof *sc->client_memory_at);
    sc->client_device = calloc((size_t)sc->clients, sizeof *sc->client_device);
    sc->client_attack = calloc((size_t)sc->clients, sizeof *sc->client_attack);
    sc->client_profile = calloc((size_t)sc->clients, sizeof *sc->client_profile);
    sc->client_crash = calloc((size_t)sc->clients, sizeof *sc->client_crash);
    sc->client_slow = calloc((size_t)sc->clients, sizeof *sc->client_slow);
    if (!sc->client_codec || !sc->client_memory || !sc->client_memory_at || !sc->client_device || !sc->client_attack || !sc->client_profile ||
        !sc->client_crash || !sc->client_slow) {
        hfl_errf(err, "out of memory");
        goto out;
    }
    if (get_per_client(o, "client_codecs", sc->clients, sc->client_codec, err) != 0 ||
        get_per_client(o, "client_memory", sc->clients, sc->client_memory, err) != 0 ||
        get_per_client(o, "memory_budget_at", sc->clients, sc->client_memory_at, err) != 0 ||
        get_str(o, "precision", 0, sc->precision, sizeof sc->precision, err) != 0 ||
        get_per_client(o, "client_devices", sc->clients, sc->client_device, err) != 0 ||
        get_per_client(o, "client_attacks", sc->clients, sc->client_attack, err) != 0 ||
        get_per_client(o, "crashes", sc->clients, sc->client_crash, err) != 0 ||
        get_per_client(o, "slow", sc->clients, sc->client_slow, err) != 0 ||
        get_num(o, "dropout", 0, 0, 0, 0.95, &sc->dropout, err) != 0 ||
        get_str(o, "device", 0, sc->device, sizeof sc->device, err) != 0 ||
        check_device("\"device\"", sc->device, err) != 0)
        goto out;
    for (int i = 0; i < sc->clients; i++) {
        char what[64];
        snprintf(what, sizeof what, "\"client_devices\": \"client-%d\"", i);
        if (sc->client_device[i][0] && check_device(what, sc->client_device[i], err) != 0) goto out;
        int round;
        double after;
        double slow;
        if (sc->client_slow[i][0] && hfl_parse_double(sc->client_slow[i], 1, 1e6, &slow, NULL) != 0) {
            hfl_errf(err, "\"slow\": \"client-%d\": \"%s\" is not a factor in [1, 1e6]", i, sc->client_slow[i]);
            goto out;
        }
        if (sc->client_crash[i][0] && hfl_scenario_crash(sc, i, &round, &after) != 0) {
            hfl_errf(err, "\"crashes\": \"client-%d\": \"%s\" is not R or R:S (a round from 1, seconds from 0)", i,
                     sc->client_crash[i]);
            goto out;
        }
    }
    sc->memory_scale = 1, sc->compute_scale = 1;
    if (get_str(o, "profile_library", 0, sc->profile_library, sizeof sc->profile_library, err) != 0 ||
        get_num(o, "memory_scale", 0, 0, 1e-9, 1, &sc->memory_scale, err) != 0 ||
        get_num(o, "compute_scale", 0, 0, 1, 1e6, &sc->compute_scale, err) != 0 || get_profiles(o, sc, err) != 0)
        goto out;
    const cJSON *vt = cJSON_GetObjectItemCaseSensitive(o, "virtual_time");
    if (vt && !cJSON_IsBool(vt)) {
        hfl_errf(err, "\"virtual_time\" must be true or false");
        goto out;
    }
    sc->virtual_time = cJSON_IsTrue(vt);
    for (int i = 0; i < sc->clients; i++) {
        int round;
        uint64_t bytes;
        char e[HFL_ERR_LEN];
        if (!sc->client_memory_at[i][0]) continue;
        if (hfl_parse_round_size(sc->client_memory_at[i], &round, &bytes, e) != 0) {
            hfl_errf(err, "\"memory_budget_at\": \"client-%d\": %s", i, e);
            goto out;
        }
        if (!sc->client_memory[i][0] && !sc->client_profile[i][0]) {
            hfl_errf(err, "\"memory_budget_at\": \"client-%d\" changes a budget it does not have: give it one "
                          "in \"client_memory\" or a profile", i);
            goto out;
        }
    }
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(o, "secure_agg"), *cc = cJSON_GetObjectItemCaseSensitive(o, "client_clip");
    if ((sa && !cJSON_IsBool(sa)) || (cc && !cJSON_IsBool(cc))) {
        hfl_errf(err, "\"secure_agg\" and \"client_clip\" must be true or false");
        goto out;
    }
    sc->secure_agg = cJSON_IsTrue(sa), sc->client_clip = cJSON_IsTrue(cc);
    for (int i = 0; sc->virtual_time && i < sc->clients; i++)
        if (!sc->client_profile[i][0]) {
            hfl_errf(err, "\"virtual_time\" needs a profile for every client; client-%d has none", i);
            goto out;
        }
    if (sc->virtual_time && (sc->over_selection > 0 || sc->async_concurrency > 0 || !strcmp(sc->late, "fold"))) {
        hfl_errf(err, "\"virtual_time\" orders synchronous deadline rounds only: not with \"over_selection\", "
                      "\"async_concurrency\" or \"late\": \"fold\" (use \"pace\" for those)");
        goto out;
    }
    rc = 0;
out:
    if (rc != 0) hfl_scenario_free(sc);
    cJSON_Delete(o);
    return rc;
}

int hfl_scenario_load(const char *path, hfl_scenario *sc, char *err) {
    size_t len;
    char e[HFL_ERR_LEN];
    char *text = hfl_read_file(path, &len, e);
    if (!text) return hfl_errf(err, "%s", e);
    int rc = hfl_scenario_parse(text, len, sc, e);
    free(text);
    if (rc != 0) return hfl_errf(err, "%s: %s", path, e);
    return 0;
}

int hfl_scenario_client_index(const hfl_scenario *sc, const char *name) {
    if (!name || strncmp(name, "client-", 7) != 0) return -1;
    char *end;
    long i = strtol(name + 7, &end, 10);
    return *end || end == name + 7 || i < 0 || i >= sc->clients ? -1 : (int)i;
}

int hfl_scenario_crash(const hfl_scenario *sc, int i, int *round, double *restart_s) {
    *round = 0, *restart_s = -1;
    if (!sc->client_crash || !sc->client_crash[i][0]) return 0;
    char r[32], *colon;
    snprintf(r, sizeof r, "%s", sc->client_crash[i]);
    long v;
    if ((colon = strchr(r, ':'))) {
        *colon = 0;
        if (hfl_parse_double(colon + 1, 0, 1e6, restart_s, NULL) != 0) return -1;
    }
    if (hfl_parse_int(r, 1, 1000000, &v, NULL) != 0) return -1;
    *round = (int)v;
    return 0;
}
