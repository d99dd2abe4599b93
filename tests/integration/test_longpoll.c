/* test_longpoll.c: a pull that may be held is answered when there is work,
 * not on a polling period (round turnaround: coordinator/server.c's held pulls).
 *
 * A coordinator with --max-inflight 1 waits for two clients (K = 2). Client
 * A says hello; a pull without hold_ms is answered "wait" (200 ms) at once,
 * as old clients expect. A's pull with hold_ms 20000 is held: after a
 * second it still has no answer. Client B's hello is served meanwhile (the
 * only receiving context was handed on, so a parked pull blocks nobody), the
 * round opens, and A's held pull is answered with its task well before its
 * hold would end (an unwoken pull would get "wait" only after 20 s, past the
 * socket's 10 s receive limit). A's earlier held pulls, each abandoned by its
 * REQ socket for the next, are not kept beside it: the round sends A one
 * task, so its bytes_down is A's task and B's, once each. */
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

#define MAX_PAYLOAD ((size_t)199210 * 4 + 4096)

typedef struct {
    nng_socket sock;
    int id;
    char token[64];
} peer;

static cJSON *pull_meta(const peer *p, int hold_ms) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "client_id", p->id);
    cJSON_AddStringToObject(m, "token", p->token);
    if (hold_ms) cJSON_AddNumberToObject(m, "hold_ms", hold_ms);
    return m;
}

/* Sends a pull without waiting for its answer. */
static void send_pull(const peer *p, int hold_ms) {
    cJSON *m = pull_meta(p, hold_ms);
    size_t len;
    uint8_t *buf = hfl_msg_encode(HFL_MSG_PULL, m, NULL, 0, &len);
    cJSON_Delete(m);
    REQUIRE(buf && nng_send(p->sock, buf, len, 0) == 0);
    free(buf);
}

static size_t last_len; /* the last reply's size */

/* The answer's type (-1: none yet with nonblock, or a receive error); its "ms" into *ms. */
static int recv_reply(const peer *p, int flags, double *ms) {
    void *buf;
    size_t len;
    if (nng_recv(p->sock, &buf, &len, NNG_FLAG_ALLOC | flags) != 0) return -1;
    last_len = len;
    hfl_msg m;
    char err[HFL_ERR_LEN];
    int t = hfl_msg_decode(buf, len, MAX_PAYLOAD, &m, err) == 0 ? m.type : -1;
    if (t >= 0 && ms) *ms = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m.meta, "ms"));
    if (t >= 0) hfl_msg_free(&m);
    nng_free(buf, len);
    return t;
}

static void join(peer *p, const char *url, const char *ca, const char *pem) {
    char err[HFL_ERR_LEN], why[256];
    hfl_tls_opts tls = {0, ca, pem, "localhost"};
    REQUIRE_MSG(hfl_transport_dial(&p->sock, url, &tls, MAX_PAYLOAD + 65536, 10000, err) == 0, "%s", err);
    cJSON *hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 100);
    cJSON_AddObjectToObject(hello, "plan");
    REQUIRE_MSG(prove_hello(p->sock, pem, ca, hello, MAX_PAYLOAD, &p->id, p->token, why) == HFL_MSG_WELCOME,
                "hello refused: %s", why);
}

int main(int argc, char **argv) {
    const char *dir = harness_begin(argc, "test_longpoll");
    check_on_stop(harness_stop); /* this file's REQUIREs too (check.h's hook is per file) */
    char pki[300], ca[320], cpem[320], pa[320], pb[320], err[HFL_ERR_LEN];
    snprintf(pki, sizeof pki, "%s/pki", dir);
    REQUIRE_MSG(hfl_pki_create(pki, 2, "localhost", 1, err) == 0, "%s", err);
    snprintf(ca, sizeof ca, "%s/ca.crt", pki);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", pki);
    snprintf(pa, sizeof pa, "%s/client-0.pem", pki);
    snprintf(pb, sizeof pb, "%s/client-1.pem", pki);
    char report_path[400];
    snprintf(report_path, sizeof report_path, "%s/report.json", dir);
    char *extra[] = {"--listen", "tls+tcp://127.0.0.1:0", "--ca", ca, "--cert", cpem, "--codec", "fp32",
                     "--rounds", "1", "--clients-per-round", "2", "--min-clients", "2", "--deadline", "60",
                     "--liveness", "60", "--max-inflight", "1", "--linger", "1", "--quiet", "--report", report_path,
                     NULL};
    char url[300];
    REQUIRE_MSG(harness_start_coordinator(argv[1], extra, url, sizeof url) > 0, "coordinator did not start");

    peer a = {0}, b = {0};
    join(&a, url, ca, pa);
    double ms = -1;
    send_pull(&a, 0);
    CHECK_MSG(recv_reply(&a, 0, &ms) == HFL_MSG_WAIT && ms == 200, "a pull without hold_ms: not wait 200 (%g)", ms);

    for (int i = 0; i < 3; i++) { /* each new request abandons the one before (REQ) */
        send_pull(&a, 20000);
        hfl_sleep_ms(50);
    }
    hfl_sleep_ms(1000);
    CHECK_MSG(recv_reply(&a, NNG_FLAG_NONBLOCK, NULL) == -1, "a pull with hold_ms was answered while nothing happened");

    double t0 = hfl_now();
    join(&b, url, ca, pb); /* served although A's pull sits in the only context */
    int t = recv_reply(&a, 0, NULL);
    double waited = hfl_now() - t0;
    CHECK_MSG(t == HFL_MSG_TASK, "the held pull got %s, not its task", t < 0 ? "nothing" : hfl_msg_type_name(t));
    printf("held pull answered with its task %.3f s after the second hello began\n", waited);
    size_t task_bytes = last_len;

    send_pull(&b, 20000); /* work waits for B: answered at once, not held */
    CHECK_MSG(recv_reply(&b, 0, NULL) == HFL_MSG_TASK, "B's pull with work waiting did not get its task");
    task_bytes += last_len;
    /* both send a zero update; the run (one round) ends */
    const hfl_codec *fp32 = hfl_codec_find("fp32", err);
    size_t n = 199210, ub = hfl_codec_max_bytes(fp32, n, 256);
    float *zero = hfl_calloc(n, sizeof(float));
    uint8_t *upd = hfl_malloc(ub);
    hfl_rng_key key = {1, 1, 0, 0};
    size_t ulen = hfl_codec_encode(fp32, zero, NULL, n, 256, &key, 1, upd);
    peer *both[2] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        cJSON *m = pull_meta(both[i], 0);
        cJSON_AddNumberToObject(m, "round", 1);
        cJSON_AddNumberToObject(m, "samples", 100);
        cJSON_AddNumberToObject(m, "loss", 1.0);
        cJSON_AddStringToObject(m, "codec", "fp32");
        size_t len;
        uint8_t *buf = hfl_msg_encode(HFL_MSG_UPDATE, m, upd, ulen, &len);
        cJSON_Delete(m);
        REQUIRE(buf && nng_send(both[i]->sock, buf, len, 0) == 0);
        free(buf);
        CHECK_MSG(recv_reply(both[i], 0, NULL) == HFL_MSG_ACK, "update %d not acknowledged", i);
    }
    free(zero);
    free(upd);
    send_pull(&a, 20000);
    CHECK_MSG(recv_reply(&a, 0, NULL) == HFL_MSG_BYE, "no bye after the only round");
    char report[400];
    snprintf(report, sizeof report, "%s/report.json", dir);
    cJSON *rep = NULL;
    for (int i = 0; i < 100 && !rep; i++) { /* written once the round is published */
        size_t len;
        char *text = hfl_read_file(report, &len, err);
        cJSON *r = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "complete"))) rep = r;
        else cJSON_Delete(r), hfl_sleep_ms(50);
    }
    REQUIRE_MSG(rep, "no complete report in %s", report);
    double down = cJSON_GetNumberValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rep, "rounds"), 0), "bytes_down"));
    CHECK_MSG(down == (double)task_bytes, "round 1 sent %.0f bytes of tasks, expected %zu (one task each)", down, task_bytes);
    cJSON_Delete(rep);
    nng_close(a.sock);
    nng_close(b.sock);
    harness_cleanup();
    return check_exit_code("test_longpoll");
}
