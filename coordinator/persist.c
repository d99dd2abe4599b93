/* persist.c: the coordinator's state on disk (--state-dir), written at every
 * round's end, so a coordinator killed at any point continues its run.
 *
 * <state-dir>/coordinator.state holds everything a round depends on: the
 * global model and the server optimizer's moments (binary, fp32), the round
 * number, model version, the adaptive clip, the registry (identities,
 * sample declarations, codecs, plans, whether each left or was revoked, the
 * deadlines each let pass and its back-off: overdue.c) and
 * the report's rounds so far (JSON). Selection and every random draw are
 * functions of (seed, round, client), so no generator state is needed.
 * Session tokens are not kept: after a restart every client proves its
 * identity again. The downlink's history is not kept either: the first task
 * after a restart carries full weights.
 *
 * File: "HFLCOORD", u32 format 1, u32 0, u64 JSON length, u64 binary length,
 * SHA-256 of JSON and binary (32 bytes), the JSON, the binary. A write goes
 * to coordinator.state.new (write, fsync, rename, fsync of the directory);
 * then the current state becomes coordinator.state.prev and the new one
 * takes its name, so at every instant a complete state is on disk. A load
 * checks the checksum and falls back to .prev when the current file is
 * missing or damaged; a state from another run configuration is refused.
 *
 * Crash points for tests (hfl_test_crash, util.h): "update" (the round's
 * first accepted update, rounds.c), "aggregate" (before the model moves,
 * rounds.c), "state-write" (the new state written, not yet renamed into
 * place), "state-rename" (between the two renames). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mbedtls/sha256.h>

#include "coordinator/coord.h"
#include "util/util.h"

#define PERSIST_MAGIC "HFLCOORD"
#define PERSIST_FORMAT 1
#define PERSIST_HEADER 64

static void persist_path(const coord *c, const char *suffix, char *out, size_t n) {
    snprintf(out, n, "%s/coordinator.state%s", c->cfg.state_dir, suffix);
}

/* The settings a saved run must share with this one to continue it. */
static cJSON *persist_fingerprint(const coord *c) {
    const coord_config *cfg = &c->cfg;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "model", c->spec.name);
    cJSON_AddNumberToObject(f, "params", (double)c->spec.n_params);
    cJSON_AddStringToObject(f, "codec", c->codec->name);
    cJSON_AddNumberToObject(f, "block", cfg->block);
    cJSON_AddNumberToObject(f, "seed", (double)cfg->seed);
    cJSON_AddNumberToObject(f, "clients_per_round", cfg->clients_per_round);
    cJSON_AddStringToObject(f, "strategy", cfg->strategy);
    cJSON_AddStringToObject(f, "server_opt", cfg->server_opt);
    cJSON_AddNumberToObject(f, "batch", cfg->batch);
    cJSON_AddNumberToObject(f, "local_epochs", cfg->local_epochs);
    cJSON_AddNumberToObject(f, "lr", cfg->lr);
    /* only when set, so the state files of runs without them still resume */
    if (cfg->local_steps > 0) cJSON_AddNumberToObject(f, "local_steps", cfg->local_steps);
    if (cfg->lr_schedule.cosine) {
        char sched[64];
        hfl_lr_schedule_name(&cfg->lr_schedule, sched, sizeof sched);
        cJSON_AddStringToObject(f, "lr_schedule", sched);
    }
    if (cfg->optimizer == HFL_OPTIM_ADAMW) {
        cJSON_AddStringToObject(f, "optimizer", "adamw");
        cJSON_AddNumberToObject(f, "beta1", cfg->beta1);
        cJSON_AddNumberToObject(f, "beta2", cfg->beta2);
    }
    if (c->spec.lora_rank) {
        cJSON_AddNumberToObject(f, "trainable", (double)c->spec.n_trainable);
        cJSON_AddNumberToObject(f, "lora_alpha", c->spec.lora_alpha);
    }
    return f;
}

static cJSON *persist_registry(const coord *c) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < c->n_clients; i++) {
        const coord_client *cl = &c->clients[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", cl->name);
        cJSON_AddNumberToObject(o, "samples", (double)cl->samples);
        cJSON_AddNumberToObject(o, "declared", (double)cl->declared);
        cJSON_AddStringToObject(o, "codec", cl->codec ? cl->codec->name : c->codec->name);
        cJSON_AddBoolToObject(o, "has_plan", cl->has_plan);
        cJSON_AddBoolToObject(o, "revoked", cl->revoked);
        cJSON_AddNumberToObject(o, "updates", (double)cl->updates);
        cJSON_AddNumberToObject(o, "predicted_peak", cl->predicted_peak);
        cJSON_AddNumberToObject(o, "measured_peak", cl->measured_peak);
        cJSON_AddStringToObject(o, "left", cl->left);
        cJSON_AddNumberToObject(o, "strikes", cl->strikes);
        cJSON_AddNumberToObject(o, "overdue", cl->overdue);
        cJSON_AddNumberToObject(o, "benched_until", cl->benched_until);
        cJSON_AddItemToObject(o, "hello", cl->hello ? cJSON_Duplicate(cl->hello, 1) : cJSON_CreateObject());
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

int persist_save(coord *c, char *err) {
    if (!c->cfg.state_dir[0]) return 0;
    size_t fl = c->spec.n_params * sizeof(float), sl = c->spec.n_trainable * sizeof(float);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "run", persist_fingerprint(c));
    cJSON_AddNumberToObject(o, "round", c->r.round);
    cJSON_AddNumberToObject(o, "version", c->version);
    cJSON_AddBoolToObject(o, "done", c->done || c->done_pending); /* the last round closed */
    cJSON_AddNumberToObject(o, "clip", c->clip);
    cJSON_AddNumberToObject(o, "final_acc", c->final_acc);
    cJSON_AddStringToObject(o, "final_sha256", c->final_sha256);
    cJSON_AddNumberToObject(o, "rejected", (double)c->rejected);
    cJSON_AddNumberToObject(o, "restarts", c->restarts);
    if (c->dp) cJSON_AddNumberToObject(o, "dp_rounds", dp_rounds_charged(c)); /* the privacy spent goes on */
    cJSON_AddNumberToObject(o, "sopt_steps", c->sopt.steps);
    cJSON_AddBoolToObject(o, "sopt_m", c->sopt.m != NULL);
    cJSON_AddBoolToObject(o, "sopt_v", c->sopt.v != NULL);
    cJSON_AddItemToObject(o, "registry", persist_registry(c));
    cJSON_AddItemToObject(o, "round_log", round_log_json(&c->rounds));
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!json) return hfl_errf(err, "out of memory printing the coordinator state");
    size_t jl = strlen(json), bl = fl + sl * ((c->sopt.m != NULL) + (c->sopt.v != NULL));
    /* written in parts from where they lie (at gpt2-small's 344 MB a copy
     * of the model per round is not free); the digest covers all but the
     * header */
    uint8_t head[PERSIST_HEADER];
    hfl_part parts[5] = {{head, PERSIST_HEADER}, {json, jl}, {c->global, fl}};
    int np = 3;
    if (c->sopt.m) parts[np++] = (hfl_part){c->sopt.m, sl};
    if (c->sopt.v) parts[np++] = (hfl_part){c->sopt.v, sl};
    uint32_t fmt[2] = {PERSIST_FORMAT, 0};
    uint64_t lens[2] = {jl, bl};
    memcpy(head, PERSIST_MAGIC, 8);
    memcpy(head + 8, fmt, 8);
    memcpy(head + 16, lens, 16);
    mbedtls_sha256_context h;
    mbedtls_sha256_init(&h);
    mbedtls_sha256_starts_ret(&h, 0);
    for (int i = 1; i < np; i++) mbedtls_sha256_update_ret(&h, parts[i].data, parts[i].len);
    mbedtls_sha256_finish_ret(&h, head + 32);
    mbedtls_sha256_free(&h);
    char cur[1200], prev[1200], next[1200];
    persist_path(c, "", cur, sizeof cur);
    persist_path(c, ".prev", prev, sizeof prev);
    persist_path(c, ".new", next, sizeof next);
    int rc = hfl_write_parts_atomic(next, parts, np, err);
    free(json);
    if (rc != 0) return -1;
    hfl_test_crash("state-write", c->r.round);
    if (rename(cur, prev) != 0 && errno != ENOENT)
        return hfl_errf(err, "cannot keep the previous state as %s: %s", prev, strerror(errno));
    hfl_test_crash("state-rename", c->r.round);
    if (rename(next, cur) != 0) return hfl_errf(err, "cannot rename %s to %s: %s", next, cur, strerror(errno));
    return hfl_fsync_dir_of(cur, err);
}

/* Reads and checks one state file: its JSON (parsed) and binary part. */
static int persist_read(const char *path, cJSON **json, uint8_t **bin, size_t *bin_len, char *err) {
    size_t len;
    uint8_t *buf = (uint8_t *)hfl_read_file(path, &len, err);
    if (!buf) return -1;
    uint64_t lens[2];
    uint32_t fmt[2];
    unsigned char sum[32];
    int rc = -1;
    if (len < PERSIST_HEADER || memcmp(buf, PERSIST_MAGIC, 8) != 0) {
        hfl_errf(err, "%s is not a coordinator state", path);
        goto out;
    }
    memcpy(fmt, buf + 8, 8);
    memcpy(lens, buf + 16, 16);
    if (fmt[0] != PERSIST_FORMAT || lens[0] > len || lens[1] > len || PERSIST_HEADER + lens[0] + lens[1] != len) {
        hfl_errf(err, "%s: format %u or lengths do not match its %zu bytes", path, (unsigned)fmt[0], len);
        goto out;
    }
    mbedtls_sha256_ret(buf + PERSIST_HEADER, len - PERSIST_HEADER, sum, 0);
    if (memcmp(sum, buf + 32, 32) != 0) {
        hfl_errf(err, "%s is damaged (checksum)", path);
        goto out;
    }
    *json = cJSON_ParseWithLength((const char *)buf + PERSIST_HEADER, lens[0]);
    if (!cJSON_IsObject(*json)) {
        cJSON_Delete(*json);
        hfl_errf(err, "%s: state JSON does not parse", path);
        goto out;
    }
    *bin_len = lens[1];
    *bin = hfl_malloc(lens[1]);
    memcpy(*bin, buf + PERSIST_HEADER + lens[0], lens[1]);
    rc = 0;
out:
    free(buf);
    return rc;
}

static double persist_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *persist_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static int persist_restore_registry(coord *c, const cJSON *reg, char *err) {
    int n = cJSON_GetArraySize(reg);
    if (!cJSON_IsArray(reg) || n > COORD_MAX_CLIENTS) return hfl_errf(err, "state registry is malformed");
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(reg, i);
        coord_client *cl = &c->clients[i];
        const char *name = persist_str(o, "name");
        if (!name[0] || strlen(name) >= sizeof cl->name) return hfl_errf(err, "state registry entry %d has no name", i);
        const hfl_codec *codec = hfl_codec_find(persist_str(o, "codec"), err);
        if (!codec) return -1;
        if (codec != c->codec) registry_intern_codec(c, codec);
        snprintf(cl->name, sizeof cl->name, "%s", name);
        cl->samples = (int64_t)persist_num(o, "samples");
        cl->declared = (int64_t)persist_num(o, "declared");
        cl->codec = codec;
        cl->has_plan = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "has_plan"));
        cl->revoked = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "revoked"));
        cl->updates = (int64_t)persist_num(o, "updates");
        cl->predicted_peak = persist_num(o, "predicted_peak");
        cl->measured_peak = persist_num(o, "measured_peak");
        snprintf(cl->left, sizeof cl->left, "%s", persist_str(o, "left"));
        cl->strikes = (int)persist_num(o, "strikes"); /* a task out before the restart is void: none due */
        cl->overdue = (int)persist_num(o, "overdue");
        cl->benched_until = (int)persist_num(o, "benched_until");
        cl->hello = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(o, "hello"), 1);
        cl->last_seen = hfl_now(); /* live until it proves otherwise */
        cl->token[0] = 0;          /* every client proves its identity again */
    }
    c->n_clients = n;
    return 0;
}

/* Appends "key A there, B here" for a setting where the saved run (have)
 * and this one (want) differ; an absent side reads "none". */
static void persist_difference(const char *key, const cJSON *have, const cJSON *want, char *out, size_t n) {
    if (cJSON_Compare(have, want, 1)) return;
    char *h = have ? cJSON_PrintUnformatted(have) : NULL, *w = want ? cJSON_PrintUnformatted(want) : NULL;
    size_t used = strlen(out);
    snprintf(out + used, n - used, "%s%s %s there, %s here", used ? "; " : "", key, h ? h : "none", w ? w : "none");
    cJSON_free(h);
    cJSON_free(w);
}

/* Restores c from one parsed state; -1 with err when it is not this run's
 * (naming the settings that differ: the whole fingerprints would not fit). */
static int persist_restore(coord *c, const cJSON *o, const uint8_t *bin, size_t bin_len, char *err) {
    cJSON *want = persist_fingerprint(c);
    const cJSON *have = cJSON_GetObjectItemCaseSensitive(o, "run"), *item;
    int same = cJSON_Compare(want, have, 1);
    if (!cJSON_IsObject(have)) have = NULL;
    if (!same) {
        char diff[HFL_ERR_LEN] = "";
        cJSON_ArrayForEach(item, want)
            persist_difference(item->string, cJSON_GetObjectItemCaseSensitive(have, item->string), item, diff, sizeof diff);
        cJSON_ArrayForEach(item, have)
            if (!cJSON_GetObjectItemCaseSensitive(want, item->string))
                persist_difference(item->string, item, NULL, diff, sizeof diff);
        hfl_errf(err, "it holds another run (%s): use another --state-dir", diff); /* some setting differs */
    }
    cJSON_Delete(want);
    if (!same) return -1;
    int has_m = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "sopt_m"));
    int has_v = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "sopt_v"));
    size_t fl = c->spec.n_params * sizeof(float), sl = c->spec.n_trainable * sizeof(float);
    if (has_m != (c->sopt.m != NULL) || has_v != (c->sopt.v != NULL) || bin_len != fl + sl * (size_t)(has_m + has_v))
        return hfl_errf(err, "its binary part (%zu bytes) does not fit this model and server optimizer", bin_len);
    round_log log = {0};
    if (round_log_read(cJSON_GetObjectItemCaseSensitive(o, "round_log"), &log, err) != 0) return -1;
    if (persist_restore_registry(c, cJSON_GetObjectItemCaseSensitive(o, "registry"), err) != 0) {
        round_log_free(&log);
        return -1;
    }
    memcpy(c->global, bin, fl);
    if (c->sopt.m) memcpy(c->sopt.m, bin + fl, sl);
    if (c->sopt.v) memcpy(c->sopt.v, bin + fl + sl * (size_t)has_m, sl);
    c->sopt.steps = (int)persist_num(o, "sopt_steps");
    c->r.round = (int)persist_num(o, "round");
    c->r.open = 0;
    c->version = (int)persist_num(o, "version");
    c->done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "done"));
    c->clip = persist_num(o, "clip");
    c->final_acc = persist_num(o, "final_acc");
    snprintf(c->final_sha256, sizeof c->final_sha256, "%s", persist_str(o, "final_sha256"));
    c->rejected = (uint64_t)persist_num(o, "rejected");
    c->restarts = (int)persist_num(o, "restarts") + 1;
    dp_restore(c, (int)persist_num(o, "dp_rounds"));
    round_log_free(&c->rounds);
    c->rounds = log;
    downlink_record(c);
    return 0;
}

int persist_load(coord *c, int *resumed, char *err) {
    *resumed = 0;
    if (!c->cfg.state_dir[0]) return 0;
    if (hfl_mkdirs(c->cfg.state_dir, err) != 0) return -1;
    const char *suffix[2] = {"", ".prev"};
    char path[1200], why[2][HFL_ERR_LEN];
    int missing = 0;
    for (int k = 0; k < 2; k++) {
        persist_path(c, suffix[k], path, sizeof path);
        if (access(path, F_OK) != 0) {
            missing++;
            hfl_errf(why[k], "no %s", path);
            continue;
        }
        cJSON *json = NULL;
        uint8_t *bin = NULL;
        size_t bin_len = 0;
        if (persist_read(path, &json, &bin, &bin_len, why[k]) != 0) continue;
        char e[HFL_ERR_LEN];
        int rc = persist_restore(c, json, bin, bin_len, e);
        cJSON_Delete(json);
        free(bin);
        if (rc != 0) return hfl_errf(err, "--state-dir %s: %s", c->cfg.state_dir, e);
        if (k == 1) fprintf(stderr, "hfl-coordinator: %s; continuing from the previous state\n", why[0]);
        *resumed = 1;
        return 0;
    }
    if (missing == 2) return 0; /* a fresh run */
    return hfl_errf(err, "--state-dir %s: no usable state: %s; %s", c->cfg.state_dir, why[0], why[1]);
}
