/* test_bad_client.c: a live coordinator facing a misbehaving client.
 *
 * Over real mutual TLS, one connection sends garbage, unknown ids, updates
 * full of NaN, of the wrong length, for the wrong round and with the wrong
 * codec. Each must get an error reply, the coordinator must keep serving,
 * and the global model must be untouched: after a valid zero update, every
 * later round's weights are byte-identical to round 1's. A refused update
 * for the open round tells the client to skip it ("skip the round"; its
 * pulls then get wait, never that round's task again; the round fails without it), since retraining the
 * same task would send the same update; one for another round does not. Then hfl-client with a
 * certificate from a foreign CA must be refused and exit non-zero. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compress/codec.h"
#include "proto/pki.h"
#include "proto/transport.h"
#include "tests/integration/harness.h"
#include "tests/integration/prove.h"
#include "util/util.h"

#define N_PARAMS 199210
#define MAX_PAYLOAD ((size_t)N_PARAMS * 4 + 4096)

static nng_socket sock;
static char token[64] = "none"; /* from welcome */
static int last_task_round = -1; /* the round of the last task received */

/* Sends one request; returns the reply type, and copies the reply's payload when asked.
 * A welcome's token is kept for the requests after it. */
static int request(int type, cJSON *meta, const void *payload, size_t len, uint8_t **copy, char *why) {
    hfl_msg rep;
    nng_msg *raw;
    char err[HFL_ERR_LEN];
    int rc = hfl_transport_request(sock, type, meta, payload, len, MAX_PAYLOAD, &rep, &raw, err);
    cJSON_Delete(meta);
    REQUIRE_MSG(rc == 0, "request failed: %s", err);
    if (why) {
        why[0] = 0;
        hfl_meta_str(rep.meta, "error", 200, why, NULL);
    }
    if (copy) {
        *copy = hfl_malloc(rep.payload_len + 1);
        memcpy(*copy, rep.payload, rep.payload_len);
    }
    int t = rep.type;
    int64_t r = -1;
    last_task_round = t == HFL_MSG_TASK && hfl_meta_int(rep.meta, "round", 1, 1 << 30, &r, NULL) == 0 ? (int)r : -1;
    if (t == HFL_MSG_WELCOME) hfl_meta_str(rep.meta, "token", sizeof token - 1, token, NULL);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return t;
}

static cJSON *with_id(int id) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "client_id", id);
    cJSON_AddStringToObject(m, "token", token);
    return m;
}

static int samples = 100; /* what the update claims; hello said 100 */

static cJSON *update_meta(int id, int round, const char *codec) {
    cJSON *m = with_id(id);
    cJSON_AddNumberToObject(m, "round", round);
    cJSON_AddNumberToObject(m, "samples", samples);
    cJSON_AddNumberToObject(m, "loss", 0.5);
    cJSON_AddStringToObject(m, "codec", codec);
    return m;
}

/* Pulls until a task for `round` arrives; returns its weights. */
static uint8_t *pull_task(int id, int round) {
    for (int tries = 0; tries < 300; tries++) {
        uint8_t *w;
        char why[256];
        cJSON *m = with_id(id);
        cJSON_AddBoolToObject(m, "resend", 1); /* a repeat pull gets the weights once more (rounds.c, round_pull) */
        int t = request(HFL_MSG_PULL, m, NULL, 0, &w, why);
        if (t == HFL_MSG_TASK) return w;
        free(w);
        REQUIRE_MSG(t == HFL_MSG_WAIT, "pull answered with %s: %s", hfl_msg_type_name(t), why);
        hfl_sleep_ms(50);
    }
    REQUIRE_MSG(0, "no task for round %d", round);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_bad_client HFL_COORDINATOR HFL_CLIENT\n");
        return 2;
    }
    if (access("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: Fashion-MNIST not installed\n");
        return 77;
    }
    check_on_stop(harness_stop);
    const char *dir = harness_tmpdir();
    char pki[300], foreign[300], ca[320], cpem[320], c0[320], fpem[320], report[300], why[256], err[HFL_ERR_LEN];
    snprintf(pki, sizeof pki, "%s/pki", dir);
    snprintf(foreign, sizeof foreign, "%s/foreign", dir);
    REQUIRE_MSG(hfl_pki_create(pki, 1, "localhost", 1, err) == 0, "%s", err);
    REQUIRE_MSG(hfl_pki_create(foreign, 1, "localhost", 1, err) == 0, "%s", err);
    snprintf(ca, sizeof ca, "%s/ca.crt", pki);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", pki);
    snprintf(c0, sizeof c0, "%s/client-0.pem", pki);
    snprintf(fpem, sizeof fpem, "%s/client-0.pem", foreign);
    snprintf(report, sizeof report, "%s/report.json", dir);
    char *extra[] = {"--listen", "tls+tcp://127.0.0.1:0", "--ca", ca, "--cert", cpem, "--codec", "fp32",
                     "--rounds", "8", "--clients-per-round", "1", "--deadline", "60", "--linger", "2",
                     "--report", report, NULL};
    char url[300];
    pid_t coord = harness_start_coordinator(argv[1], extra, url, sizeof url);
    REQUIRE_MSG(coord > 0, "coordinator did not start");

    hfl_tls_opts tls = {0, ca, c0, "localhost"};
    REQUIRE_MSG(hfl_transport_dial(&sock, url, &tls, MAX_PAYLOAD + 65536, 10000, err) == 0, "%s", err);

    /* Garbage that is not an hfl message at all. */
    REQUIRE_MSG(nng_send(sock, "hello?", 6, 0) == 0, "send");
    void *buf;
    size_t len;
    REQUIRE_MSG(nng_recv(sock, &buf, &len, NNG_FLAG_ALLOC) == 0, "no reply to garbage");
    hfl_msg m;
    CHECK_MSG(hfl_msg_decode(buf, len, 0, &m, err) == 0 && m.type == HFL_MSG_ERROR, "garbage not answered with an error");
    hfl_msg_free(&m);
    nng_free(buf, len);

    CHECK_MSG(request(HFL_MSG_PULL, with_id(5), NULL, 0, NULL, why) == HFL_MSG_ERROR, "unknown id accepted");
    int id = -1;
    cJSON *hello = cJSON_CreateObject();
    cJSON_AddStringToObject(hello, "name", "client-0");
    cJSON_AddNumberToObject(hello, "samples", 100);
    CHECK_MSG(request(HFL_MSG_HELLO, hello, NULL, 0, NULL, why) == HFL_MSG_ERROR && strstr(why, "certificate"),
              "a hello without proof of identity accepted: %s", why);
    hello = cJSON_CreateObject();
    CHECK_MSG(prove_hello(sock, c0, ca, hello, MAX_PAYLOAD, &id, token, why) == HFL_MSG_ERROR, "hello without samples accepted");
    hello = cJSON_CreateObject();
    cJSON_AddStringToObject(hello, "codec", "evil\ncodec");
    cJSON_AddNumberToObject(hello, "samples", 100);
    CHECK_MSG(prove_hello(sock, c0, ca, hello, MAX_PAYLOAD, &id, token, why) == HFL_MSG_ERROR, "a codec with a newline accepted");
    CHECK_MSG(!strchr(why, '\n'), "error reply spans lines: %s", why);
    hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 100);
    cJSON_AddObjectToObject(hello, "plan"); /* clients without a plan are never drawn */
    REQUIRE_MSG(prove_hello(sock, c0, ca, hello, MAX_PAYLOAD, &id, token, why) == HFL_MSG_WELCOME, "hello refused: %s", why);
    REQUIRE_MSG(id == 0, "the first client got id %d", id);
    CHECK_MSG(request(HFL_MSG_TASK, with_id(0), NULL, 0, NULL, why) == HFL_MSG_ERROR, "a task sent by a client accepted");

    uint8_t *w1 = pull_task(0, 1);
    cJSON *forged = with_id(0);
    cJSON_ReplaceItemInObject(forged, "token", cJSON_CreateString("0123456789abcdef0123456789abcdef"));
    CHECK_MSG(request(HFL_MSG_PULL, forged, NULL, 0, NULL, why) == HFL_MSG_ERROR, "pull with a forged token accepted");
    printf("forged token: %s\n", why);
    const hfl_codec *fp32 = hfl_codec_find("fp32", err);
    size_t ub = hfl_codec_max_bytes(fp32, N_PARAMS, 0);
    float *delta = hfl_calloc(N_PARAMS, sizeof(float));
    uint8_t *upd = hfl_malloc(ub);
    hfl_rng_key key = {1, 1, 0, 0};

    /* Round 1: an update for another round and a duplicate are refused without
     * costing the round; the valid zero update is taken. */
    for (size_t i = 0; i < N_PARAMS; i++) delta[i] = 0.5f;
    hfl_codec_encode(fp32, delta, NULL, N_PARAMS, 0, &key, 1, upd);
    CHECK_MSG(request(HFL_MSG_UPDATE, update_meta(0, 2, "fp32"), upd, ub, NULL, why) == HFL_MSG_ERROR, "wrong round accepted");
    CHECK_MSG(!strstr(why, "skip"), "an update for another round cost the client its round: %s", why);
    memset(delta, 0, N_PARAMS * sizeof(float));
    hfl_codec_encode(fp32, delta, NULL, N_PARAMS, 0, &key, 1, upd);
    CHECK_MSG(request(HFL_MSG_UPDATE, update_meta(0, 1, "fp32"), upd, ub, NULL, why) == HFL_MSG_ACK, "valid update refused: %s", why);
    CHECK_MSG(request(HFL_MSG_UPDATE, update_meta(0, 1, "fp32"), upd, ub, NULL, why) == HFL_MSG_ERROR, "duplicate update accepted");

    /* Rounds 2-7: one bad update each, every one carrying a large non-zero
     * delta (had any reached the sum, the next round's weights would differ).
     * Each is refused with "skip the round", the round stops waiting for the
     * client (it fails: K = 1), and its pulls get no task until the next. */
    uint8_t *w2 = NULL;
    for (int round = 2; round <= 7; round++) {
        free(w2);
        w2 = pull_task(0, round);
        CHECK_MSG(memcmp(w1, w2, (size_t)N_PARAMS * 4) == 0, "round %d: the global model changed", round);
        for (size_t i = 0; i < N_PARAMS; i++) delta[i] = 0.5f;
        size_t len = ub;
        cJSON *m = update_meta(0, round, "fp32");
        if (round == 2) delta[12345] = NAN;
        if (round == 3) delta[12345] = INFINITY;
        if (round == 4) len = ub - 4;
        if (round == 5) cJSON_ReplaceItemInObject(m, "codec", cJSON_CreateString("int8"));
        if (round == 6) cJSON_ReplaceItemInObject(m, "loss", cJSON_CreateString("low"));
        if (round == 7) cJSON_ReplaceItemInObject(m, "samples", cJSON_CreateNumber(1000000));
        hfl_codec_encode(fp32, delta, NULL, N_PARAMS, 0, &key, 1, upd);
        CHECK_MSG(request(HFL_MSG_UPDATE, m, upd, len, NULL, why) == HFL_MSG_ERROR, "round %d: bad update accepted", round);
        printf("round %d: %s\n", round, why);
        CHECK_MSG(strstr(why, "(skip the round)"), "round %d: not told to skip: %s", round, why);
        /* wait while the round is open; once it closed (it cannot succeed
         * without us) the next round's task may already be there, never this one's */
        int t = request(HFL_MSG_PULL, with_id(0), NULL, 0, NULL, why);
        CHECK_MSG(t == HFL_MSG_WAIT || (t == HFL_MSG_TASK && last_task_round > round),
                  "round %d: pull after a refused update answered with %s (round %d)", round, hfl_msg_type_name(t),
                  last_task_round);
    }
    free(w2);
    w2 = pull_task(0, 8);
    CHECK_MSG(memcmp(w1, w2, (size_t)N_PARAMS * 4) == 0, "global model changed although only a zero update was accepted");
    size_t not_finite = 0;
    for (size_t i = 0; i < N_PARAMS; i++) {
        float v;
        memcpy(&v, w2 + 4 * i, 4);
        not_finite += !isfinite(v);
    }
    CHECK_MSG(not_finite == 0, "%zu weights not finite", not_finite);
    memset(delta, 0, N_PARAMS * sizeof(float));
    hfl_codec_encode(fp32, delta, NULL, N_PARAMS, 0, &key, 1, upd);

    /* A client whose certificate comes from another CA is refused. */
    char flog[300];
    snprintf(flog, sizeof flog, "%s/foreign.log", dir);
    char *fargv[] = {argv[2], "--coordinator", url, "--ca", ca, "--cert", fpem, "--name", "intruder",
                     "--timeout", "5", NULL};
    int frc = harness_wait(harness_spawn(fargv, flog), 60);
    char *ftext = hfl_read_file(flog, NULL, err);
    printf("foreign client exited %d: %s", frc, ftext ? ftext : "");
    CHECK_MSG(frc == 1, "foreign client exited with %d, expected 1", frc);
    CHECK_MSG(ftext && strstr(ftext, "hfl-client: "), "foreign client gave no error line");
    free(ftext);

    /* The coordinator is still serving: finish the run. */
    CHECK_MSG(request(HFL_MSG_UPDATE, update_meta(0, 8, "fp32"), upd, ub, NULL, why) == HFL_MSG_ACK, "round 8 update refused: %s", why);
    for (int i = 0; i < 100; i++) {
        int t = request(HFL_MSG_PULL, with_id(0), NULL, 0, NULL, why);
        if (t == HFL_MSG_BYE) break;
        if (!CHECK_MSG(t == HFL_MSG_WAIT, "pull after the last round answered with %s", hfl_msg_type_name(t))) break;
        hfl_sleep_ms(50);
    }
    nng_close(sock);
    int rc = harness_wait(coord, 30);
    CHECK_MSG(rc == 0, "coordinator exited with %d", rc);
    char *text = hfl_read_file(report, &len, err);
    REQUIRE_MSG(text, "%s", err);
    cJSON *r = cJSON_Parse(text);
    free(text);
    double rejected = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "rejected_messages"));
    CHECK_MSG(rejected >= 10, "coordinator counted %g rejected messages, expected at least 10", rejected);
    for (int i = 0; i < 8; i++) {
        const cJSON *rd = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "rounds"), i);
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rd, "status"));
        double refused = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(rd, "refused"));
        int bad = i >= 1 && i <= 6;
        CHECK_MSG(st && !strcmp(st, bad ? "failed" : "ok") && refused == bad, "round %d: %s with %g refused", i + 1,
                  st ? st : "?", refused);
    }
    cJSON_Delete(r);
    free(w1);
    free(w2);
    free(delta);
    free(upd);
    harness_cleanup();
    return check_exit_code("test_bad_client");
}
