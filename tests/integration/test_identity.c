/* test_identity.c: identity is a certificate, not a name (docs/architecture.md, Identity is a certificate).
 *
 * A live coordinator runs three rounds for two honest hfl-client processes
 * (client-0, client-1) with tokens that expire every 2 s, so the honest
 * clients must prove their identity again on their own. Meanwhile an
 * attacker holding a valid certificate of the same CA (client-2) tries:
 *   - a hello under another client's name: it is registered as itself;
 *   - requests with another client's id: wrong token;
 *   - replaying a signed hello: the challenge is spent;
 *   - the coordinator's certificate as a client's: wrong role;
 *   - after `hfl-pki revoke client-2` and SIGHUP: refused, hello and pull;
 *   - an expired token: told to say hello again.
 * The honest clients finish every round. Then an impostor coordinator,
 * whose certificate is named "localhost" but was issued for the client role,
 * is refused by hfl-client ("did not prove its identity"), and
 * hfl-coordinator refuses to start with a client's certificate. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/hello.h"
#include "proto/pki.h"
#include "proto/transport.h"
#include "tests/integration/harness.h"
#include "tests/integration/prove.h"
#include "util/util.h"

#define MAX_PAYLOAD ((size_t)199210 * 4 + 4096)

static nng_socket sock;

/* One request; returns the reply type and its error text in why. */
static int request(int type, cJSON *meta, const void *payload, size_t len, char *why) {
    hfl_msg rep;
    nng_msg *raw;
    char err[HFL_ERR_LEN];
    int rc = hfl_transport_request(sock, type, meta, payload, len, MAX_PAYLOAD, &rep, &raw, err);
    cJSON_Delete(meta);
    REQUIRE_MSG(rc == 0, "request failed: %s", err);
    why[0] = 0;
    hfl_meta_str(rep.meta, "error", 200, why, NULL);
    int t = rep.type;
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return t;
}

static int pull(int id, const char *token, char *why) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "client_id", id);
    cJSON_AddStringToObject(m, "token", token);
    return request(HFL_MSG_PULL, m, NULL, 0, why);
}

/* Phase 1 and phase 2 of a hello by hand, as client-2, then phase 2 again. */
static void replay_hello(const char *pem) {
    hfl_identity *me;
    char err[HFL_ERR_LEN], why[256], nonce[HFL_ID_NONCE_HEX + 1], challenge[HFL_ID_NONCE_HEX + 1],
        sig[HFL_ID_SIG_B64_MAX + 1];
    REQUIRE_MSG(hfl_identity_load(pem, &me, err) == 0, "%s", err);
    REQUIRE(hfl_random_hex(nonce, err) == 0);
    cJSON *m = cJSON_CreateObject(), *m2;
    cJSON_AddStringToObject(m, "cert", hfl_identity_cert(me));
    cJSON_AddStringToObject(m, "nonce", nonce);
    hfl_msg rep;
    nng_msg *raw;
    REQUIRE_MSG(hfl_transport_request(sock, HFL_MSG_HELLO, m, NULL, 0, MAX_PAYLOAD, &rep, &raw, err) == 0, "%s", err);
    cJSON_Delete(m);
    REQUIRE_MSG(rep.type == HFL_MSG_CHALLENGE, "hello answered with %s", hfl_msg_type_name(rep.type));
    REQUIRE(hfl_meta_str(rep.meta, "challenge", HFL_ID_NONCE_HEX, challenge, err) == 0);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "samples", 10);
    cJSON_AddStringToObject(m, "cert", hfl_identity_cert(me));
    cJSON_AddStringToObject(m, "challenge", challenge);
    char *text = cJSON_PrintUnformatted(m);
    const void *parts[] = {HFL_SIG_HELLO, "localhost", text};
    const size_t lens[] = {strlen(HFL_SIG_HELLO), strlen("localhost"), strlen(text)};
    REQUIRE(hfl_identity_sign(me, parts, lens, 3, sig, err) == 0);
    cJSON_free(text);
    CHECK_MSG(request(HFL_MSG_HELLO, cJSON_Duplicate(m, 1), sig, strlen(sig), why) == HFL_MSG_WELCOME,
              "the signed hello itself was refused: %s", why);
    CHECK_MSG(request(HFL_MSG_HELLO, cJSON_Duplicate(m, 1), sig, strlen(sig), why) == HFL_MSG_ERROR &&
                  strstr(why, "unspent"),
              "a replayed hello was accepted: %s", why);
    printf("replayed hello: %s\n", why);
    /* the same signature over other fields (more samples), with a fresh challenge
     * (one spent is refused before any signature is checked) */
    m2 = cJSON_CreateObject();
    cJSON_AddStringToObject(m2, "cert", hfl_identity_cert(me));
    cJSON_AddStringToObject(m2, "nonce", nonce);
    REQUIRE_MSG(hfl_transport_request(sock, HFL_MSG_HELLO, m2, NULL, 0, MAX_PAYLOAD, &rep, &raw, err) == 0, "%s", err);
    cJSON_Delete(m2);
    REQUIRE(rep.type == HFL_MSG_CHALLENGE && hfl_meta_str(rep.meta, "challenge", HFL_ID_NONCE_HEX, challenge, err) == 0);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    cJSON_ReplaceItemInObject(m, "challenge", cJSON_CreateString(challenge));
    text = cJSON_PrintUnformatted(m);
    const size_t lens2[] = {strlen(HFL_SIG_HELLO), strlen("localhost"), strlen(text)};
    const void *parts2[] = {HFL_SIG_HELLO, "localhost", text};
    REQUIRE(hfl_identity_sign(me, parts2, lens2, 3, sig, err) == 0);
    cJSON_free(text);
    cJSON_ReplaceItemInObject(m, "samples", cJSON_CreateNumber(1000000));
    CHECK_MSG(request(HFL_MSG_HELLO, m, sig, strlen(sig), why) == HFL_MSG_ERROR && strstr(why, "does not verify"),
              "a hello with altered fields was accepted: %s", why);
    hfl_identity_free(me);
}

/* An impostor coordinator: TLS with a certificate named localhost but of the
 * client role; it answers the first hello with a challenge it signs. */
typedef struct {
    nng_socket s;
    const char *pem;
} impostor;

static void *impostor_serve(void *arg) {
    impostor *im = arg;
    hfl_identity *me;
    char err[HFL_ERR_LEN];
    if (hfl_identity_load(im->pem, &me, err) != 0) return NULL;
    nng_msg *req;
    while (nng_recvmsg(im->s, &req, 0) == 0) {
        hfl_msg m;
        char nonce[HFL_ID_NONCE_HEX + 1] = "", challenge[HFL_ID_NONCE_HEX + 1], sig[HFL_ID_SIG_B64_MAX + 1];
        if (hfl_msg_decode(nng_msg_body(req), nng_msg_len(req), 1 << 20, &m, err) == 0) {
            hfl_meta_str(m.meta, "nonce", HFL_ID_NONCE_HEX, nonce, NULL);
            hfl_msg_free(&m);
        }
        nng_msg_free(req);
        hfl_random_hex(challenge, err);
        const char *who = "client-0";
        const void *parts[] = {HFL_SIG_CHALLENGE, nonce, challenge, who};
        const size_t lens[] = {strlen(HFL_SIG_CHALLENGE), strlen(nonce), strlen(challenge), strlen(who)};
        hfl_identity_sign(me, parts, lens, 4, sig, err);
        cJSON *meta = cJSON_CreateObject();
        cJSON_AddStringToObject(meta, "challenge", challenge);
        cJSON_AddStringToObject(meta, "coordinator", "localhost");
        cJSON_AddStringToObject(meta, "cert", hfl_identity_cert(me));
        cJSON_AddStringToObject(meta, "signature", sig);
        size_t len;
        uint8_t *out = hfl_msg_encode(HFL_MSG_CHALLENGE, meta, NULL, 0, &len);
        cJSON_Delete(meta);
        nng_send(im->s, out, len, 0);
        free(out);
    }
    hfl_identity_free(me);
    return NULL;
}

int main(int argc, char **argv) {
    const char *dir = harness_begin(argc, "test_identity");
    check_on_stop(harness_stop); /* this file's REQUIREs too (check.h's hook is per file) */
    char pki[300], ca[320], cpem[320], mpem[320], fake[320], revoked[320], report[320], why[256], err[HFL_ERR_LEN],
        url[300];
    snprintf(pki, sizeof pki, "%s/pki", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", pki);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", pki);
    snprintf(mpem, sizeof mpem, "%s/client-2.pem", pki);
    snprintf(fake, sizeof fake, "%s/localhost.pem", pki);
    snprintf(revoked, sizeof revoked, "%s/revoked.txt", pki);
    snprintf(report, sizeof report, "%s/report.json", dir);
    REQUIRE_MSG(hfl_pki_create(pki, 3, "localhost", 1, err) == 0, "%s", err);
    REQUIRE_MSG(hfl_pki_issue(pki, "localhost", HFL_ROLE_CLIENT, 1, err) == 0, "%s", err);

    char *extra[] = {"--listen", "tls+tcp://127.0.0.1:0", "--ca", ca, "--cert", cpem, "--rounds", "3",
                     "--clients-per-round", "2", "--deadline", "120", "--linger", "3", "--report", report,
                     "--token-ttl", "2", NULL};
    pid_t coord = harness_start_coordinator(argv[1], extra, url, sizeof url);
    REQUIRE_MSG(coord > 0, "coordinator did not start");
    pid_t clients[2];
    for (int i = 0; i < 2; i++) {
        char pem[320], log[320], idx[8];
        snprintf(pem, sizeof pem, "%s/client-%d.pem", pki, i);
        snprintf(log, sizeof log, "%s/client-%d.log", dir, i);
        snprintf(idx, sizeof idx, "%d", i);
        char *cargv[] = {argv[2], "--coordinator", url, "--ca", ca, "--cert", pem, "--client-index", idx,
                         "--num-clients", "20", NULL};
        clients[i] = harness_spawn(cargv, log);
    }

    hfl_tls_opts tls = {0, ca, mpem, "localhost"};
    REQUIRE_MSG(hfl_transport_dial(&sock, url, &tls, MAX_PAYLOAD + 65536, 10000, err) == 0, "%s", err);
    /* a hello under client-0's name is client-2's own */
    int id = -1;
    char token[64];
    cJSON *hello = cJSON_CreateObject();
    cJSON_AddStringToObject(hello, "name", "client-0");
    cJSON_AddNumberToObject(hello, "samples", 10);
    REQUIRE_MSG(prove_hello(sock, mpem, ca, hello, MAX_PAYLOAD, &id, token, why) == HFL_MSG_WELCOME, "hello refused: %s", why);
    /* every other id refuses our token */
    for (int other = 0; other < 4; other++) {
        if (other == id) continue;
        CHECK_MSG(pull(other, token, why) == HFL_MSG_ERROR, "client %d's session answered client-2's token", other);
    }
    CHECK_MSG(pull(id, token, why) == HFL_MSG_WAIT, "our own session refused us: %s", why);
    replay_hello(mpem);
    hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 10);
    CHECK_MSG(prove_hello(sock, cpem, ca, hello, MAX_PAYLOAD, &id, token, why) == HFL_MSG_ERROR &&
                  strstr(why, "coordinator role"),
              "the coordinator's certificate was taken for a client's: %s", why);
    printf("coordinator certificate as a client: %s\n", why);

    /* tokens expire */
    hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 10);
    REQUIRE_MSG(prove_hello(sock, mpem, ca, hello, MAX_PAYLOAD, &id, token, why) == HFL_MSG_WELCOME, "hello refused: %s", why);
    hfl_sleep_ms(2500);
    CHECK_MSG(pull(id, token, why) == HFL_MSG_ERROR && strstr(why, "expired"), "an expired token was accepted: %s", why);

    /* revoked, then SIGHUP: refused */
    hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 10);
    REQUIRE_MSG(prove_hello(sock, mpem, ca, hello, MAX_PAYLOAD, &id, token, why) == HFL_MSG_WELCOME, "hello refused: %s", why);
    REQUIRE_MSG(hfl_revoke_name(revoked, "client-2", err) == 0, "%s", err);
    kill(coord, SIGHUP);
    hfl_sleep_ms(300);
    CHECK_MSG(pull(id, token, why) == HFL_MSG_ERROR && strstr(why, "revoked"), "a revoked session pulled: %s", why);
    hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 10);
    CHECK_MSG(prove_hello(sock, mpem, ca, hello, MAX_PAYLOAD, &id, token, why) == HFL_MSG_ERROR && strstr(why, "revoked"),
              "a revoked certificate said hello: %s", why);
    printf("revoked: %s\n", why);
    nng_close(sock);

    for (int i = 0; i < 2; i++) CHECK_MSG(harness_wait(clients[i], 180) == 0, "honest client-%d failed", i);
    CHECK_MSG(harness_wait(coord, 60) == 0, "coordinator failed");
    size_t len;
    char *rep = hfl_read_file(report, &len, err);
    REQUIRE_MSG(rep, "%s", err);
    cJSON *r = cJSON_Parse(rep);
    free(rep);
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(r, "rounds");
    int ok = 0;
    for (int i = 0; i < cJSON_GetArraySize(rounds); i++) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rounds, i), "status");
        ok += cJSON_IsString(st) && !strcmp(st->valuestring, "ok");
    }
    CHECK_MSG(ok == 3, "%d of 3 rounds ok with the attacker about", ok);
    cJSON_Delete(r);

    /* an impostor coordinator, named localhost but of the client role */
    impostor im = {.pem = fake};
    hfl_tls_opts itls = {0, ca, fake, NULL};
    int port = 0;
    REQUIRE_MSG(hfl_transport_listen(&im.s, "tls+tcp://127.0.0.1:0", &itls, 1 << 20, &port, err) == 0, "%s", err);
    pthread_t th;
    pthread_create(&th, NULL, impostor_serve, &im);
    char iurl[64], c0[320], log[320];
    snprintf(iurl, sizeof iurl, "tls+tcp://127.0.0.1:%d", port);
    snprintf(c0, sizeof c0, "%s/client-0.pem", pki);
    snprintf(log, sizeof log, "%s/impostor-client.log", dir);
    char *cargv[] = {argv[2], "--coordinator", iurl, "--ca", ca, "--cert", c0, "--timeout", "10", NULL};
    CHECK_MSG(harness_wait(harness_spawn(cargv, log), 60) == 1, "hfl-client did not refuse an impostor coordinator");
    char *out = hfl_read_file(log, &len, err);
    CHECK_MSG(out && strstr(out, "did not prove its identity") && strstr(out, "client role"), "client said: %s",
              out ? out : err);
    free(out);
    nng_close(im.s);
    pthread_join(th, NULL);

    /* hfl-coordinator will not serve with a client's certificate */
    snprintf(log, sizeof log, "%s/impostor-coordinator.log", dir);
    char *xargv[] = {argv[1], "--listen", "tls+tcp://127.0.0.1:0", "--ca", ca, "--cert", fake, "--quiet", NULL};
    CHECK_MSG(harness_wait(harness_spawn(xargv, log), 60) == 1, "hfl-coordinator started with a client's certificate");
    out = hfl_read_file(log, &len, err);
    CHECK_MSG(out && strstr(out, "client role"), "coordinator said: %s", out ? out : err);
    free(out);
    harness_cleanup();
    return check_exit_code("test_identity");
}
