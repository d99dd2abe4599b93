/* session.c: the client session's connection to the coordinator: the first
 * dial, every request, and the fresh dial that replaces a socket whose
 * request failed (client/main.c's state machine uses them; client.h).
 *
 * Decisions:
 * - A request that fails (no reply within the limit, a reset connection, a
 *   reply that cannot be read) marks the session lost, and the next request
 *   first closes the socket and dials a fresh one, bounded by the session's
 *   limit (hfl_transport_dial). NNG's dialer reconnects a dropped pipe by
 *   itself, but a pipe that never learns its peer is gone (a FIN lost with
 *   a crashed host or a partition, or a send stuck behind a peer that stopped
 *   reading) is never dropped, and every request on it waits out the limit:
 *   integration_diloco_resume once saw a client whose update was in flight
 *   when the coordinator died time out after --timeout, then fail its hellos
 *   ("cannot send hello request: Timed out") for another --timeout, past
 *   --retry-for, though the coordinator was back. A fresh socket depends on
 *   nothing the old one held (tests/integration/redial.sh).
 * - The limit is --timeout, less during a rejoin (client_session_limit): it
 *   bounds each dial and each request's send and reply. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client.h"
#include "kernels/philox.h"
#include "util/util.h"

void client_backoff_sleep(const client_state *s, int k) {
    double cap = 0.2 * (double)(1u << (k < 5 ? k : 5));
    if (cap > 5) cap = 5;
    uint32_t u = hfl_philox_u32((uint64_t)(hfl_now() * 1e9) ^ (uint64_t)getpid(), HFL_STREAM_SHUFFLE, s->stream,
                                0xFFFFFFFEu, 0, (uint64_t)k);
    hfl_sleep_ms((int)(cap * 1000.0 * (u / 4294967296.0)));
}

/* The model is not known until the welcome: replies from our own
 * coordinator are capped generously (max_payload) and checked against it after. */
static size_t session_recv_max(const client_session *ss) {
    return HFL_MSG_HEADER_BYTES + HFL_MSG_MAX_META + ss->max_payload;
}

/* Closes a socket on a thread of its own. nng_close waits for the socket's
 * pipes and dialer to wind down; the old socket's dialer may be redialing a
 * coordinator that is coming back, and a client once sat silent for the
 * whole test limit right after "dialing the coordinator afresh" (twice in
 * 18 runs of integration_diloco_resume, not caught in a debugger), so the
 * fresh dial never waits on the old socket. */
static void *session_close_main(void *arg) {
    nng_socket sock = {.id = (uint32_t)(uintptr_t)arg}; /* by value: nothing to free if we exit first */
    nng_close(sock);
    return NULL;
}

static void session_close_async(nng_socket sock) {
    pthread_t th;
    if (pthread_create(&th, NULL, session_close_main, (void *)(uintptr_t)sock.id) != 0) {
        nng_close(sock);
        return;
    }
    pthread_detach(th);
}

int client_session_dial(client_session *ss, char *err) {
    if (ss->open) session_close_async(ss->sock);
    ss->open = 0;
    if (hfl_transport_dial(&ss->sock, ss->o->url, &ss->o->tls, session_recv_max(ss), ss->limit_ms, err) != 0)
        return -1;
    ss->open = 1, ss->lost = 0;
    return 0;
}

int client_session_connect(client_session *ss, char *err) {
    ss->limit_ms = (int)(ss->o->timeout_s * 1000);
    /* a coordinator swamped by a fleet starting at once may drop a TLS
     * negotiation (NNG gives it 10 s): dial again, with backoff; a refused
     * connection or a refused certificate is an error at once */
    double until = hfl_now() + ss->o->retry_s;
    for (int k = 0; client_session_dial(ss, err) != 0; k++) {
        int transient = strstr(err, "shutdown") || strstr(err, "reset") || strstr(err, "handshake within") ||
                        strstr(err, "Timed out"); /* NNG's own negotiation limit */
        if (!transient || hfl_now() > until) return -1;
        if (!ss->o->quiet) printf("%s: %s; dialing again\n", ss->o->name, err);
        client_backoff_sleep(ss->s, k);
    }
    return 0;
}

void client_session_limit(client_session *ss, int ms) {
    ss->limit_ms = ms;
    if (!ss->open) return;
    /* best effort: on an open req socket these cannot fail; a socket that
     * kept the old limit still ends its wait, at --timeout */
    nng_socket_set_ms(ss->sock, NNG_OPT_RECVTIMEO, ms);
    nng_socket_set_ms(ss->sock, NNG_OPT_SENDTIMEO, ms);
}

int client_session_redial(client_session *ss, char *err) {
    if (!ss->lost) return 0;
    if (!ss->o->quiet) printf("%s: dialing the coordinator afresh\n", ss->o->name);
    return client_session_dial(ss, err);
}

int client_request(client_session *ss, int type, const cJSON *meta, const void *payload, size_t len, hfl_msg *rep,
                   nng_msg **raw, char *err) {
    if (client_session_redial(ss, err) != 0) return -1;
    if (hfl_transport_request(ss->sock, type, meta, payload, len, ss->max_payload, rep, raw, err) == 0) return 0;
    ss->lost = 1;
    return -1;
}

void client_session_close(client_session *ss) {
    if (ss->open) nng_close(ss->sock);
    ss->open = 0;
    cJSON_Delete(ss->plan);
    ss->plan = NULL;
}

void client_test_cut(client_session *ss, const char *env, int chunks, int *done) {
    const char *k = getenv(env);
    if (*done || !k || atoi(k) != chunks) return;
    *done = 1;
    fprintf(stderr, "%s: %s: connection dropped after %d chunks\n", ss->o->name, env, chunks);
    nng_close(ss->sock);
    ss->open = 0;
}
