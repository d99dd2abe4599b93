/* rounds_harness.h: the round engine (coordinator/rounds.c) driven
 * in-process, as test_rounds_mut.c and test_async.c drive it: one static
 * coord over mlp (all weights zero) with its event log in a temporary file,
 * hellos, pulls, fp32 updates of one constant value, refusals checked by
 * their message, and the logged events read back. Each test file includes it
 * once. */
#ifndef HFL_TESTS_COORDINATOR_ROUNDS_HARNESS_H
#define HFL_TESTS_COORDINATOR_ROUNDS_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "kernels/backend.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

#define NP 199210 /* mlp's weights: 784*200+200 + 200*200+200 + 200*10+10 */

static coord c; /* large */
static cJSON *rendered_logs; /* log_as_json()'s renderings */

/* The run's settings (setup_full's arguments), before setup_start: a test
 * may change more of c.cfg in between. */
static inline void setup_config(int k, int quorum, double deadline, double max_share, const char *strategy,
                                double clip, int adaptive) {
    memset(&c, 0, sizeof c);
    coord_config *cfg = &c.cfg;
    snprintf(cfg->model, sizeof cfg->model, "mlp");
    snprintf(cfg->codec, sizeof cfg->codec, "fp32");
    snprintf(cfg->downlink, sizeof cfg->downlink, "fp32");
    snprintf(cfg->server_opt, sizeof cfg->server_opt, "fedavg");
    snprintf(cfg->strategy, sizeof cfg->strategy, "%s", strategy);
    cfg->block = 256, cfg->rounds = 2, cfg->clients_per_round = k, cfg->min_quorum = quorum;
    cfg->deadline_s = deadline, cfg->local_epochs = 3, cfg->batch = 16, cfg->lr = 0.25, cfg->seed = 7;
    cfg->momentum = 0.5, cfg->weight_decay = 0.125;
    cfg->clip_norm = clip, cfg->clip_adaptive = adaptive, cfg->max_share = max_share, cfg->quiet = 1;
    cfg->liveness_s = 60, cfg->session_ttl_s = 600, cfg->token_ttl_s = 3600, cfg->robust_memory = 1u << 30;
}

/* The model, the test set, the log and the round engine, from c.cfg. */
static inline void setup_start(void) {
    char err[HFL_ERR_LEN];
    CHECK(hfl_model_builtin("mlp", &c.spec, err) == 0);
    CHECK(c.spec.n_params == NP);
    c.codec = hfl_codec_find("fp32", err);
    c.global = hfl_calloc(c.spec.n_params, sizeof(float));
    c.be = hfl_backend_cpu();
    c.eval = hfl_trainer_create(&c.spec, c.be, 16);
    c.test.n = 16, c.test.dim = c.spec.in_dim, c.test.n_classes = 10;
    c.test.x = hfl_calloc((size_t)16 * c.spec.in_dim, sizeof(float));
    c.test.y = hfl_calloc(16, sizeof(int32_t));
    c.log = tmpfile();
    pthread_mutex_init(&c.lock, NULL);
    CHECK(downlink_init(&c, "fp32", 0, 0, err) == 0);
    CHECK_MSG(rounds_init(&c, err) == 0, "%s", err);
}

static inline void setup_full(int k, int quorum, double deadline, double max_share, const char *strategy,
                              double clip, int adaptive) {
    setup_config(k, quorum, deadline, max_share, strategy, clip, adaptive);
    setup_start();
}

static inline void setup(int k, int quorum, double deadline, double max_share) {
    setup_full(k, quorum, deadline, max_share, "fedavg", 0, 0);
}

static inline void teardown(void) {
    hfl_trainer_free(c.eval);
    downlink_free(&c);
    round_log_free(&c.rounds);
    cJSON_Delete(rendered_logs);
    rendered_logs = NULL;
    hfl_agg_free(&c.agg);
    hfl_sopt_free(&c.sopt);
    for (int i = 0; i < c.n_clients; i++) cJSON_Delete(c.clients[i].hello), spool_drop(&c.clients[i]);
    if (c.log) fclose(c.log);
    free(c.global);
    free(c.test.x);
    free(c.test.y);
}

/* The events logged so far whose "event" is `name`, as a new array. */
static inline cJSON *events(const char *name) {
    cJSON *arr = cJSON_CreateArray();
    fflush(c.log);
    rewind(c.log);
    char line[65536];
    while (fgets(line, sizeof line, c.log)) {
        cJSON *e = cJSON_Parse(line);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "event"));
        if (ev && !strcmp(ev, name)) cJSON_AddItemToArray(arr, e);
        else cJSON_Delete(e);
    }
    fseek(c.log, 0, SEEK_END);
    return arr;
}

static inline double num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static inline const char *str(const cJSON *o, const char *k) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static inline int hello_full(const char *name, int samples, int with_plan, const char *codec, char *err) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "samples", samples);
    if (with_plan) cJSON_AddObjectToObject(m, "plan");
    if (codec) cJSON_AddStringToObject(m, "codec", codec);
    int id = registry_hello(&c, name, m, err);
    cJSON_Delete(m);
    return id;
}

static inline int hello(const char *name, int samples) {
    char err[HFL_ERR_LEN] = "";
    int id = hello_full(name, samples, 1, NULL, err);
    CHECK_MSG(id >= 0, "hello %s: %s", name, err);
    return id;
}

/* Decodes a reply, checks its type, returns its meta (to free) or NULL. */
static inline cJSON *reply_meta(uint8_t *rep, size_t len, int type) {
    hfl_msg m;
    char err[HFL_ERR_LEN] = "";
    cJSON *meta = NULL;
    if (CHECK_MSG(rep && hfl_msg_decode(rep, len, (size_t)1 << 30, &m, err) == 0, "%s", err)) {
        CHECK_MSG(m.type == type, "reply %s, expected %s", hfl_msg_type_name(m.type), hfl_msg_type_name(type));
        meta = cJSON_Duplicate(m.meta, 1);
        hfl_msg_free(&m);
    }
    free(rep);
    return meta;
}

static inline size_t pull(int id, int type) {
    size_t len = 0;
    uint8_t *rep = rounds_pull(&c, id, -1, &len);
    cJSON_Delete(reply_meta(rep, len, type));
    return len;
}

/* An update of v in every weight with the given meta additions; returns the
 * reply's meta (to free). */
static inline cJSON *send(int id, int round, int samples, double loss, float v, const char *codec, const char *extra,
                   size_t msg_bytes, int want) {
    size_t n = c.spec.n_params, len;
    float *d = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) d[i] = v;
    const hfl_codec *fp32 = hfl_codec_find("fp32", NULL);
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(fp32, n, 256));
    hfl_rng_key key = {1, 1, 0, 0};
    size_t plen = hfl_codec_encode(fp32, d, NULL, n, 256, &key, 1, buf);
    cJSON *m = extra ? cJSON_Parse(extra) : cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "round", round);
    cJSON_AddNumberToObject(m, "samples", samples);
    cJSON_AddNumberToObject(m, "loss", loss);
    cJSON_AddStringToObject(m, "codec", codec);
    uint8_t *rep = rounds_update(&c, id, m, buf, plen, msg_bytes, &len);
    cJSON_Delete(m);
    free(d);
    free(buf);
    return reply_meta(rep, len, want);
}

static inline void accept(int id, int samples, double loss, float v) {
    cJSON_Delete(send(id, c.r.round, samples, loss, v, "fp32", NULL, 1000, HFL_MSG_ACK));
}

/* A refusal whose error contains `want` and whose skip_round is `skip`. */
static inline void refuse(int id, int round, int samples, double loss, const char *codec, const char *extra, const char *want,
                   int skip) {
    cJSON *m = send(id, round, samples, loss, 1.0f, codec, extra, 1000, HFL_MSG_ERROR);
    const char *e = str(m, "error");
    CHECK_MSG(e && strstr(e, want) && !strncmp(e, skip ? "update rejected (skip the round): " : "update rejected: ", skip ? 34 : 17),
              "error '%s', expected '%s' (skip %d)", e ? e : "(none)", want, skip);
    CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "skip_round")) == skip, "skip_round for '%s'", want);
    cJSON_Delete(m);
}

static inline int all_weights(float v) {
    for (size_t i = 0; i < c.spec.n_params; i++)
        if (c.global[i] != v) {
            printf("weight %zu is %.9g, expected %.9g\n", i, (double)c.global[i], (double)v);
            return 0;
        }
    return 1;
}

/* The round log as the report and the state dir render it (each rendering
 * kept until teardown, so a test may hold several). */
static inline const cJSON *log_as_json(void) {
    cJSON *l = round_log_json(&c.rounds);
    if (!rendered_logs) rendered_logs = cJSON_CreateArray();
    cJSON_AddItemToArray(rendered_logs, l);
    return l;
}

static inline const cJSON *last_round(void) {
    const cJSON *l = log_as_json();
    return cJSON_GetArrayItem(l, cJSON_GetArraySize(l) - 1);
}

#endif
