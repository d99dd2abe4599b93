/* test_insider.c: what one valid certificate and a script cannot do to a
 * coordinator's report and uplink (an insider cannot deny service).
 *
 * A coordinator runs 2 rounds of K = 2 (fp32 updates, defaults otherwise)
 * for two clients this test plays itself, plus one more:
 *   - client-2 offers a `device` object nested 600 deep in its signed
 *     hello: refused in one line (metadata nests at most 16 deep), and never
 *     in the report;
 *   - client-0, once tasked in round 1, pulls 100 times more in the round:
 *     50 plain pulls (answered without weights), then 50 asking for a
 *     re-download (the first is sent, the second is told to skip the round,
 *     and the rest find it skipped). Over the round it downloads the model
 *     at most twice: counted here from the bytes received and in the
 *     report's bytes_down and downloads for it. Before a repeat pull went without the weights, every pull
 *     brought the whole model again (101 copies);
 *   - client-1 holds round 1 open meanwhile, then answers; the round, one
 *     update of its two (client-0 skipped), is aggregated (--quorum-fraction
 *     0.5 by default), and round 2 takes both.
 * report.json then parses, and its nesting is at most 64 (counted by a
 * scanner written here, not proto/msg.c's). The coordinator is watched
 * throughout: the test stops as soon as it exits. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/codec.h"
#include "proto/msg.h"
#include "proto/pki.h"
#include "proto/transport.h"
#include "tests/integration/harness.h"
#include "tests/integration/prove.h"
#include "util/util.h"

#define N_PARAMS 199210 /* mlp */
#define MAX_PAYLOAD ((size_t)N_PARAMS * 4 + 4096)
#define FULL_PAYLOAD ((size_t)N_PARAMS * 4 + 12) /* fp32 downlink: 12-byte header, then the weights */

static pid_t coord;
static const char *ca;

typedef struct {
    nng_socket sock;
    int id;
    char token[64];
} peer;

static void coordinator_alive(void) {
    int st = harness_poll(coord);
    REQUIRE_MSG(st == -2, "the coordinator exited with %d", st);
}

/* One request as p; returns the reply's type, its payload size in *payload, its meta (to free) in *meta. */
static int request(peer *p, int type, cJSON *meta, const void *payload, size_t len, size_t *got, cJSON **out) {
    hfl_msg rep;
    nng_msg *raw;
    char err[HFL_ERR_LEN];
    int rc = hfl_transport_request(p->sock, type, meta, payload, len, MAX_PAYLOAD, &rep, &raw, err);
    cJSON_Delete(meta);
    coordinator_alive();
    REQUIRE_MSG(rc == 0, "request failed: %s", err);
    if (got) *got = rep.payload_len;
    if (out) *out = cJSON_Duplicate(rep.meta, 1);
    int t = rep.type;
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return t;
}

static cJSON *with_id(const peer *p) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "client_id", p->id);
    cJSON_AddStringToObject(m, "token", p->token);
    return m;
}

static void dial(peer *p, const char *url, const char *pem) {
    char err[HFL_ERR_LEN];
    hfl_tls_opts tls = {0, ca, pem, "localhost"};
    REQUIRE_MSG(hfl_transport_dial(&p->sock, url, &tls, MAX_PAYLOAD + 65536, 20000, err) == 0, "%s", err);
}

static void join(peer *p, const char *url, const char *pem) {
    char why[256];
    dial(p, url, pem);
    cJSON *hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 100);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(hello, "plan"), "batch", 32);
    REQUIRE_MSG(prove_hello(p->sock, pem, ca, hello, MAX_PAYLOAD, &p->id, p->token, why) == HFL_MSG_WELCOME,
                "hello refused: %s", why);
}

/* Pulls until a task arrives; returns its round, its payload size in *got. */
static int pull_task(peer *p, size_t *got) {
    for (int tries = 0; tries < 600; tries++) {
        cJSON *meta = NULL;
        int t = request(p, HFL_MSG_PULL, with_id(p), NULL, 0, got, &meta);
        /* only a task carries "round": a wait's NaN must not reach the int */
        int round = t == HFL_MSG_TASK ? cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(meta, "round")) : -1;
        cJSON_Delete(meta);
        if (t == HFL_MSG_TASK) return round;
        REQUIRE_MSG(t == HFL_MSG_WAIT, "pull answered with %s", hfl_msg_type_name(t));
        hfl_sleep_ms(50);
    }
    REQUIRE_MSG(0, "no task in 30 s");
    return -1;
}

/* A zero fp32 update for round. */
static int update(peer *p, int round) {
    const hfl_codec *fp32 = hfl_codec_find("fp32", NULL);
    size_t ub = hfl_codec_max_bytes(fp32, N_PARAMS, 0);
    float *delta = hfl_calloc(N_PARAMS, sizeof(float));
    uint8_t *upd = hfl_malloc(ub);
    hfl_rng_key key = {1, 1, 0, 0};
    hfl_codec_encode(fp32, delta, NULL, N_PARAMS, 0, &key, 1, upd);
    cJSON *m = with_id(p);
    cJSON_AddNumberToObject(m, "round", round);
    cJSON_AddNumberToObject(m, "samples", 100);
    cJSON_AddNumberToObject(m, "loss", 0.5);
    cJSON_AddStringToObject(m, "codec", "fp32");
    int t = request(p, HFL_MSG_UPDATE, m, upd, ub, NULL, NULL);
    free(delta);
    free(upd);
    return t;
}

/* The nesting depth of JSON text: brackets outside strings (the test's own count). */
static int depth_of(const char *s) {
    int d = 0, most = 0, quoted = 0;
    for (; *s; s++) {
        if (quoted) {
            if (*s == '\\' && s[1]) s++;
            else if (*s == '"') quoted = 0;
        } else if (*s == '"') {
            quoted = 1;
        } else if (*s == '{' || *s == '[') {
            most = ++d > most ? d : most;
        } else if (*s == '}' || *s == ']') {
            d--;
        }
    }
    return most;
}

/* client-2's hello with a device nested 600 deep: refused in one line. */
static void deep_hello(const char *url, const char *pem) {
    peer p = {0};
    char why[256];
    dial(&p, url, pem);
    cJSON *hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 100);
    cJSON *o = cJSON_AddObjectToObject(hello, "device");
    for (int i = 1; i < 600; i++) o = cJSON_AddObjectToObject(o, "a");
    int t = prove_hello(p.sock, pem, ca, hello, MAX_PAYLOAD, &p.id, p.token, why);
    coordinator_alive();
    CHECK_MSG(t == HFL_MSG_ERROR && strstr(why, "deeper than 16") && !strchr(why, '\n'),
              "a 600-deep device: reply %s, '%s'", hfl_msg_type_name(t), why);
    printf("600-deep device: %s\n", why);
    nng_close(p.sock);
}

/* client-0's storm: 100 pulls in the round it is tasked in. Returns the
 * weights' bytes it received over the round, the first task's included. */
static size_t storm(peer *p, int round, size_t first) {
    size_t total = first, got;
    int skipped = 0;
    for (int i = 0; i < 100; i++) {
        cJSON *m = with_id(p), *meta = NULL;
        cJSON_AddNumberToObject(m, "have_version", -1); /* holds nothing, it says */
        if (i >= 50) cJSON_AddBoolToObject(m, "resend", 1);
        int t = request(p, HFL_MSG_PULL, m, NULL, 0, &got, &meta);
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(meta, "round");
        CHECK_MSG(t != HFL_MSG_TASK || (cJSON_IsNumber(r) && r->valueint == round), "pull %d: a task of round %d", i,
                  r ? r->valueint : -1);
        skipped |= t == HFL_MSG_ERROR && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "skip_round"));
        CHECK_MSG(t == HFL_MSG_TASK || t == HFL_MSG_WAIT || (t == HFL_MSG_ERROR && skipped), "pull %d answered with %s",
                  i, hfl_msg_type_name(t));
        total += got;
        cJSON_Delete(meta);
    }
    CHECK_MSG(skipped, "asking for the task again and again was never refused");
    return total;
}

static const cJSON *participant(const cJSON *round, int id) {
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(round, "participants"))
        if ((int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(p, "client")) == id) return p;
    return NULL;
}

int main(int argc, char **argv) {
    const char *dir = harness_begin(argc, "test_insider");
    check_on_stop(harness_stop); /* this file's REQUIREs too (check.h's hook is per file) */
    char pki[300], capath[320], cpem[320], pem[3][320], report[320], url[300], err[HFL_ERR_LEN];
    snprintf(pki, sizeof pki, "%s/pki", dir);
    snprintf(capath, sizeof capath, "%s/ca.crt", pki);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", pki);
    for (int i = 0; i < 3; i++) snprintf(pem[i], sizeof pem[i], "%s/client-%d.pem", pki, i);
    snprintf(report, sizeof report, "%s/report.json", dir);
    ca = capath;
    REQUIRE_MSG(hfl_pki_create(pki, 3, "localhost", 1, err) == 0, "%s", err);
    char *extra[] = {"--listen", "tls+tcp://127.0.0.1:0", "--ca", capath, "--cert", cpem, "--codec", "fp32",
                     "--rounds", "2", "--clients-per-round", "2", "--deadline", "60", "--linger", "2",
                     "--report", report, NULL};
    coord = harness_start_coordinator(argv[1], extra, url, sizeof url);
    REQUIRE_MSG(coord > 0, "coordinator did not start");

    deep_hello(url, pem[2]);
    peer a = {0}, b = {0};
    join(&a, url, pem[0]);
    join(&b, url, pem[1]);
    size_t first;
    int round = pull_task(&a, &first);
    REQUIRE_MSG(round == 1 && first == FULL_PAYLOAD, "client-0's first task: round %d, %zu bytes of weights", round,
                first);
    size_t total = storm(&a, round, first);
    printf("client-0 pulled 100 times more in round 1: %zu bytes of weights in all, %.2f models\n", total,
           (double)total / FULL_PAYLOAD);
    CHECK_MSG(total <= 2 * FULL_PAYLOAD, "%zu bytes of weights: more than two models", total);
    size_t got;
    REQUIRE(pull_task(&b, &got) == 1);
    CHECK_MSG(update(&b, 1) == HFL_MSG_ACK, "client-1's round-1 update refused");
    REQUIRE_MSG(pull_task(&a, &got) == 2 && pull_task(&b, &got) == 2, "round 2 did not come");
    CHECK(update(&a, 2) == HFL_MSG_ACK && update(&b, 2) == HFL_MSG_ACK);
    for (int i = 0; i < 200; i++) { /* until bye */
        if (request(&a, HFL_MSG_PULL, with_id(&a), NULL, 0, NULL, NULL) == HFL_MSG_BYE) break;
        hfl_sleep_ms(50);
    }
    request(&b, HFL_MSG_PULL, with_id(&b), NULL, 0, NULL, NULL);
    nng_close(a.sock);
    nng_close(b.sock);
    int rc = harness_wait(coord, 30);
    CHECK_MSG(rc == 0, "coordinator exited with %d", rc);

    size_t len;
    char *text = hfl_read_file(report, &len, err);
    REQUIRE_MSG(text, "%s", err);
    int depth = depth_of(text);
    cJSON *r = cJSON_Parse(text);
    printf("report.json: %zu bytes, nesting %d\n", len, depth);
    CHECK_MSG(depth <= 64 && cJSON_IsObject(r), "report.json nests %d deep (parses: %d)", depth, cJSON_IsObject(r));
    CHECK_MSG(!strstr(text, "\"a\":{\"a\""), "the deep device reached the report");
    free(text);
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(r, "rounds"), *r1 = cJSON_GetArrayItem(rounds, 0);
    const cJSON *pa = participant(r1, a.id);
    const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r1, "status"));
    double bytes = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(pa, "bytes_down"));
    double downloads = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(pa, "downloads"));
    printf("round 1: %s; client-0 %s, %g downloads, %g bytes down\n", st ? st : "?",
           cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pa, "status")), downloads, bytes);
    CHECK_MSG(st && !strcmp(st, "ok"), "round 1 (one update of two, client-0 skipped) was %s", st ? st : "?");
    CHECK_MSG(downloads == 2 && bytes < 2 * FULL_PAYLOAD + 100 * 1024, "the report counts %g downloads, %g bytes",
              downloads, bytes);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r1, "tasks_resent")) == 1);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r1, "tasks_short")) == 50);
    const cJSON *r2 = cJSON_GetArrayItem(rounds, 1);
    st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r2, "status"));
    CHECK_MSG(st && !strcmp(st, "ok") && cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r2, "clients")) == 2,
              "round 2: %s", st ? st : "?");
    cJSON_Delete(r);
    harness_cleanup();
    return check_exit_code("test_insider");
}
