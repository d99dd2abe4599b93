/* test_rounds.c: the round engine (coordinator/rounds.c) with exact expected
 * values, driven in-process: clients registered through registry_hello,
 * tasks pulled, fp32 updates of constant values sent, rounds closed by
 * rounds_tick. Clipping is off, the share cap is 1, so the arithmetic is
 * FedAvg's (binary-exact values: every comparison is ==).
 *
 * 1. Unequal samples: 100 and 300 samples, updates of 1.0 and 3.0 in every
 *    weight: the model moves by (100 + 900) / 400 = 2.5 (uniform weights
 *    would give 2.0).
 * 2. A partial round at the deadline with the quorum in: K = 3, quorum 2,
 *    two updates (100 x 1.0, 100 x 2.0): moves by 1.5, the round "ok" with
 *    2 of 3 clients.
 * 3. A round that misses its quorum (one update of 3, quorum 2): failed,
 *    model unchanged, version unchanged.
 * 4. FedAvgM (lr 1, beta 0.5) over two rounds of mean deltas 2 and 1:
 *    v = 2, then 0.5 * 2 + 1 = 2; the model moves by 4 in all.
 * 5. The share cap: 100 and 300 samples with --max-share 0.5 cap the 300
 *    at 100 (F / (1 - F) x the other's 100): 1.0 and 3.0 move it by 2.0.
 * 7. A client told to skip the round cannot send again in it, and the
 *    round still waits for the clients that have not answered.
 * 8. --max-share holds over the updates that came: K = 5, F = 0.2, one
 *    client claiming 100,000 samples (capped at 0.25 x the others' 400) and
 *    one of 100 answer with 10.0 and 0.0 before the deadline; the divisor is
 *    at least the largest weight / F = 500, so the model moves by 2.0, not 5.
 * 9. Liveness: of three planned clients, one silent for longer than
 *    --liveness is not drawn; the round opens with the two that asked.
 * 6. A registry flooded with 1,024 invented names refuses the next hello
 *    while every session is fresh; once they are idle past --session-ttl a
 *    newcomer takes the slot of the one idle longest, never of a session
 *    still active. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "kernels/backend.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

static coord c; /* large */

static void setup(int k, int quorum, double deadline, const char *sopt, double max_share) {
    char err[HFL_ERR_LEN];
    memset(&c, 0, sizeof c);
    coord_config *cfg = &c.cfg;
    snprintf(cfg->model, sizeof cfg->model, "mlp");
    snprintf(cfg->codec, sizeof cfg->codec, "fp32");
    snprintf(cfg->downlink, sizeof cfg->downlink, "fp32");
    snprintf(cfg->server_opt, sizeof cfg->server_opt, "%s", sopt);
    snprintf(cfg->strategy, sizeof cfg->strategy, "fedavg");
    cfg->block = 256, cfg->rounds = 5, cfg->clients_per_round = k, cfg->min_quorum = quorum;
    cfg->deadline_s = deadline, cfg->local_epochs = 1, cfg->batch = 32, cfg->lr = 0.05, cfg->seed = 1;
    cfg->clip_norm = 0, cfg->clip_adaptive = 0, cfg->max_share = max_share, cfg->quiet = 1;
    cfg->liveness_s = 60, cfg->session_ttl_s = 600;
    CHECK(hfl_model_builtin("mlp", &c.spec, err) == 0);
    c.codec = hfl_codec_find("fp32", err);
    c.global = hfl_calloc(c.spec.n_params, sizeof(float));
    c.be = hfl_backend_cpu();
    c.eval = hfl_trainer_create(&c.spec, c.be, 16);
    c.test.n = 16, c.test.dim = c.spec.in_dim, c.test.n_classes = 10;
    c.test.x = hfl_calloc((size_t)16 * c.spec.in_dim, sizeof(float));
    c.test.y = hfl_calloc(16, sizeof(int32_t));
    pthread_mutex_init(&c.lock, NULL);
    CHECK(downlink_init(&c, "fp32", 0, 0, err) == 0);
    CHECK(rounds_init(&c, err) == 0);
}

static int hello(const char *name, int samples) {
    char err[HFL_ERR_LEN];
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", name);
    cJSON_AddNumberToObject(m, "samples", samples);
    cJSON_AddObjectToObject(m, "plan");
    int id = registry_hello(&c, name, m, err);
    cJSON_Delete(m);
    CHECK(id >= 0);
    return id;
}

/* Sends an update of `value` in every weight for the open round and checks
 * the reply's type. */
static void send_update(int id, int samples, float value, int want) {
    size_t n = c.spec.n_params, len;
    float *d = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) d[i] = value;
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(c.codec, n, 256));
    hfl_rng_key key = {1, 1, 0, 0};
    size_t plen = hfl_codec_encode(c.codec, d, NULL, n, 256, &key, 1, buf);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "round", c.r.round);
    cJSON_AddNumberToObject(m, "samples", samples);
    cJSON_AddNumberToObject(m, "loss", 0.5);
    cJSON_AddStringToObject(m, "codec", "fp32");
    uint8_t *rep = rounds_update(&c, id, m, buf, plen, plen, &len);
    hfl_msg msg;
    char err[HFL_ERR_LEN];
    CHECK(hfl_msg_decode(rep, len, 0, &msg, err) == 0 && msg.type == want);
    hfl_msg_free(&msg);
    free(rep);
    cJSON_Delete(m);
    free(d);
    free(buf);
}

/* Pulls the client's task and sends an update of `value` in every weight. */
static void update(int id, int samples, float value) {
    size_t len;
    free(rounds_pull(&c, id, -1, &len));
    CHECK(c.r.slot[id].tasked);
    send_update(id, samples, value, HFL_MSG_ACK);
}

/* Every weight moved by exactly `by` from zero (the model started at 0). */
static int moved_by(double by) {
    for (size_t i = 0; i < c.spec.n_params; i++)
        if (c.global[i] != (float)by) {
            printf("test_rounds: weight %zu is %.9g, expected %.9g\n", i, (double)c.global[i], by);
            return 0;
        }
    return 1;
}

static const char *last_status(void) { return c.rounds.n ? c.rounds.v[c.rounds.n - 1].status : NULL; }

/* The last closed round's record of the client called name: its status,
 * and its weight in *weight (-1 without an accepted update); NULL when absent. */
static const char *participant(const char *name, double *weight) {
    const hfl_wire_list *ps = c.rounds.n ? &c.rounds.v[c.rounds.n - 1].participants : &(hfl_wire_list){0};
    for (int i = 0; i < ps->n; i++) {
        const round_participant *p = (const round_participant *)ps->v + i;
        if (strcmp(p->name, name) != 0) continue;
        *weight = p->ok ? p->weight : -1;
        return p->status;
    }
    return NULL;
}

static void teardown(void) {
    hfl_trainer_free(c.eval);
    downlink_free(&c);
    round_log_free(&c.rounds);
    hfl_agg_free(&c.agg);
    hfl_sopt_free(&c.sopt);
    for (int i = 0; i < c.n_clients; i++) cJSON_Delete(c.clients[i].hello);
    free(c.global);
    free(c.test.x);
    free(c.test.y);
}

/* 1: unequal samples */
static void test_unequal_samples(void) {
    setup(2, 2, 60, "fedavg", 1);
    int a = hello("a", 100), b = hello("b", 300);
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 2);
    update(a, 100, 1.0f);
    update(b, 300, 3.0f);
    rounds_tick(&c);
    CHECK(!c.r.open && c.version == 1 && moved_by(2.5));
    teardown();
}

/* 2 and 3: the deadline, with and without the quorum */
static void test_deadline(void) {
    setup(3, 2, 0.2, "fedavg", 1);
    int x = hello("x", 100), y = hello("y", 100), z = hello("z", 100);
    (void)z;
    rounds_tick(&c);
    update(x, 100, 1.0f);
    update(y, 100, 2.0f);
    rounds_tick(&c);
    CHECK(c.r.open); /* the third may still answer */
    hfl_sleep_ms(300);
    rounds_tick(&c);
    CHECK(!c.r.open && c.version == 1 && moved_by(1.5) && !strcmp(last_status(), "ok"));
    double wx, wy, wz; /* the round's record: x and y weighed 100 of the 300 samples drawn; z missing */
    const char *sx = participant("x", &wx), *sy = participant("y", &wy), *sz = participant("z", &wz);
    CHECK(sx && !strcmp(sx, "ok") && fabs(wx - 1.0 / 3) < 1e-12);
    CHECK(sy && !strcmp(sy, "ok") && fabs(wy - 1.0 / 3) < 1e-12);
    CHECK(sz && !strcmp(sz, "missing") && wz == -1);
    rounds_tick(&c); /* round 2 */
    CHECK(c.r.open && c.r.round == 2);
    update(x, 100, 3.0f);
    hfl_sleep_ms(300);
    rounds_tick(&c);
    CHECK(!c.r.open && c.version == 1 && moved_by(1.5) && !strcmp(last_status(), "failed"));
    teardown();
}

/* 4: FedAvgM over two rounds */
static void test_fedavgm(void) {
    setup(1, 1, 60, "fedavgm:1:0.5", 1);
    int s = hello("s", 50);
    rounds_tick(&c);
    update(s, 50, 2.0f);
    rounds_tick(&c);
    CHECK(moved_by(2.0));
    rounds_tick(&c);
    update(s, 50, 1.0f);
    rounds_tick(&c);
    CHECK(c.version == 2 && moved_by(4.0));
    teardown();
}

/* 5: the share cap */
static void test_share_cap(void) {
    setup(2, 2, 60, "fedavg", 0.5);
    int a = hello("a", 100), b = hello("b", 300);
    rounds_tick(&c);
    update(a, 100, 1.0f);
    update(b, 300, 3.0f);
    rounds_tick(&c);
    CHECK(c.version == 1 && moved_by(2.0));
    teardown();
}

/* 7: a refused client stays refused */
static void test_refused_stays(void) {
    setup(3, 3, 60, "fedavg", 1);
    int p = hello("p", 100), q = hello("q", 100);
    hello("r", 100);
    rounds_tick(&c);
    size_t len0;
    free(rounds_pull(&c, p, -1, &len0));
    {
        const hfl_codec *i8 = hfl_codec_find("int8", NULL);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddNumberToObject(m, "round", 1);
        cJSON_AddNumberToObject(m, "samples", 100);
        cJSON_AddNumberToObject(m, "loss", 0.5);
        cJSON_AddStringToObject(m, "codec", i8->name); /* the run's codec is fp32: refused */
        uint8_t junk[64] = {0};
        free(rounds_update(&c, p, m, junk, sizeof junk, sizeof junk, &len0));
        cJSON_Delete(m);
    }
    CHECK(c.r.slot[p].refused);
    send_update(p, 100, 0.0f, HFL_MSG_ERROR); /* told to skip: refused again */
    update(q, 100, 1.0f);
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_received == 1); /* r has not answered */
    teardown();
}

/* 8: the share cap with updates missing */
static void test_share_cap_missing(void) {
    setup(5, 2, 0.2, "fedavg", 0.2);
    int big = hello("big", 100000), h1 = hello("h1", 100);
    hello("h2", 100), hello("h3", 100), hello("h4", 100);
    rounds_tick(&c);
    update(big, 100000, 10.0f);
    update(h1, 100, 0.0f);
    hfl_sleep_ms(300);
    rounds_tick(&c);
    CHECK(c.version == 1 && moved_by(2.0));
    teardown();
}

/* 9: a silent client is not drawn */
static void test_silent_not_drawn(void) {
    setup(3, 2, 60, "fedavg", 1);
    c.cfg.liveness_s = 0.2;
    size_t len0;
    int l1 = hello("l1", 100), l2 = hello("l2", 100), dead = hello("dead", 100);
    hfl_sleep_ms(300);
    free(rounds_pull(&c, l1, -1, &len0)); /* l1 and l2 ask for work; dead is silent */
    free(rounds_pull(&c, l2, -1, &len0));
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 2 && c.r.n_silent == 1 && !c.r.slot[dead].selected);
    update(l1, 100, 1.0f);
    update(l2, 100, 3.0f);
    rounds_tick(&c);
    CHECK(c.version == 1 && moved_by(2.0));
    teardown();
}

/* 6: flooding */
static void test_flooding(void) {
    setup(1, 1, 60, "fedavg", 1);
    c.cfg.session_ttl_s = 1e6; /* none expires while the registry fills */
    char name[32], err[HFL_ERR_LEN];
    for (int i = 0; i < COORD_MAX_CLIENTS; i++) {
        snprintf(name, sizeof name, "flood-%d", i);
        hello(name, 10);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", "honest");
    cJSON_AddNumberToObject(m, "samples", 100);
    CHECK(registry_hello(&c, "honest", m, err) < 0 && strstr(err, "registry full"));
    c.cfg.session_ttl_s = 0.2;
    hfl_sleep_ms(300);
    size_t len;
    free(rounds_pull(&c, 0, -1, &len)); /* flood-0 is still active */
    int honest = registry_hello(&c, "honest", m, err);
    CHECK(honest == 1 && !strcmp(c.clients[honest].name, "honest")); /* flood-1: idle longest */
    CHECK(!strcmp(c.clients[0].name, "flood-0"));
    cJSON_Delete(m);
    teardown();
}

static const check_case cases[] = {
    {"unequal_samples", test_unequal_samples},
    {"deadline", test_deadline},
    {"fedavgm", test_fedavgm},
    {"share_cap", test_share_cap},
    {"refused_stays", test_refused_stays},
    {"share_cap_missing", test_share_cap_missing},
    {"silent_not_drawn", test_silent_not_drawn},
    {"flooding", test_flooding},
};

int main(int argc, char **argv) {
    return check_run("test_rounds", cases, CHECK_CASES(cases), argc, argv);
}
