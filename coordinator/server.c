/* server.c: the coordinator's network side: one rep0 socket, many contexts.
 *
 * Each context is a small state machine driven by its aio callback (NNG's
 * async server pattern): receive -> handle -> send -> receive. Handling
 * decodes and validates the request (proto/msg.c), then takes the
 * coordinator lock for as long as the round engine needs, which is short.
 * A malformed request gets an error reply and bumps the `rejected` counter;
 * it never reaches the round engine.
 *
 * Long polls: a pull with nothing to do that says it may be held (hold_ms)
 * is parked instead of answered "wait": its context keeps the request (REQ
 * never resends, proto/transport.c) and a spare context takes its place
 * among the --max-inflight receivers, so parked pulls never block updates.
 * The main loop wakes a parked pull as soon as the client has something to do
 * (a round drew it, the run ended) or its hold ends, so a client learns of a
 * new round within a tick (~5 ms) instead of a polling period. A hold is at
 * most half of --liveness, so a parked client is never taken for dead. */
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "coordinator/coord.h"
#include "util/util.h"


#define SERVER_MAX_PARKED COORD_MAX_CLIENTS /* one parked pull per session at most */

typedef enum { WORK_IDLE, WORK_RECV, WORK_PARKED, WORK_SEND } work_state;

typedef struct coord_server coord_server;

typedef struct {
    work_state state;
    int woken; /* this send answers a parked pull: the context is spare afterwards */
    nng_aio *aio;
    nng_ctx ctx;
    coord *c;
    coord_server *s;
    /* a parked pull */
    int id;
    int64_t have;
    double until;
    char token[33];
} server_work;

/* What server_handle asks for when a pull should be parked. */
typedef struct {
    int park;
    int id;
    int64_t have, hold_ms;
    char token[33];
} server_park;

struct coord_server {
    coord *c;
    nng_socket sock;
    coord_conns *conns;
    pthread_mutex_t lock; /* the pool below (taken after c->lock, never before) */
    server_work **work;   /* every context: --max-inflight receivers plus spares, grown on demand */
    int n_work, cap_work;
    server_work **idle;   /* spare contexts */
    int n_idle;
    server_work **parked;
    int n_parked;
    int *parked_at; /* by client id: its parked pull's index in parked, or -1 (one per session) */
    int stopping; /* server_stop began: no new contexts */
};

static void server_work_cb(void *arg);

/* Counts a refused hello of `kind` and answers it: "say hello again"
 * (reauth, after retry_ms when > 0) unless the refusal is definite. */
static uint8_t *server_refuse_hello(coord *c, int kind, const char *err, int retry_ms, size_t *len) {
    pthread_mutex_lock(&c->lock);
    c->rejected++;
    c->hellos_refused[kind]++;
    pthread_mutex_unlock(&c->lock);
    if (!c->cfg.quiet && kind != COORD_HELLO_RATE) fprintf(stderr, "hfl-coordinator: hello refused: %s\n", err);
    return kind == COORD_HELLO_DENIED ? coord_error_reply(err, len) : coord_retry_reply(err, retry_ms, len);
}

static uint8_t *server_handle_hello(coord_server *s, coord *c, const hfl_msg *m, nng_pipe pipe, size_t *len) {
    char err[HFL_ERR_LEN], name[HFL_ID_NAME_MAX + 1];
    double wait_s;
    if (auth_wants_challenge(c, m) && !conns_hello_allowed(s->conns, pipe, &wait_s)) {
        int ms = (int)(wait_s * 1000) + 1;
        snprintf(err, sizeof err, "too many hellos from this connection or address (--hello-rate): say hello again in %d ms", ms);
        return server_refuse_hello(c, COORD_HELLO_RATE, err, ms, len);
    }
    uint8_t *challenge;
    int proven = auth_hello(c, m, (uint32_t)nng_pipe_id(pipe), conns_address(pipe), name, &challenge, len,
                            err); /* crypto, without the lock */
    if (proven == 0) return challenge;
    if (proven < 0) return server_refuse_hello(c, proven == -2 ? COORD_HELLO_CHALLENGE : COORD_HELLO_DENIED, err, 0, len);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m->meta, "aggregator")) && !c->cfg.tier) {
        snprintf(err, sizeof err, "this coordinator leads no tier (start it with --tier): aggregator '%s' refused", name);
        return server_refuse_hello(c, COORD_HELLO_DENIED, err, 0, len);
    }
    pthread_mutex_lock(&c->lock);
    int id = registry_hello(c, name, m->meta, err);
    if (id < 0) {
        int full = !registry_has_room(c, name);
        pthread_mutex_unlock(&c->lock);
        return server_refuse_hello(c, full ? COORD_HELLO_FULL : COORD_HELLO_DENIED, err, full ? 1000 : 0, len);
    }
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m->meta, "device"), "name");
    double est = cJSON_IsString(dev) ? registry_overhead_estimate(c, dev->valuestring) : -1;
    cJSON *spec = cJSON_Parse(c->spec_json);
    hfl_welcome_msg w = {
        .client_id = id, .token_ttl_s = c->cfg.token_ttl_s, .model_spec = spec, .params = (int64_t)c->spec.n_params,
        .block = c->cfg.block, .rounds = c->cfg.rounds, .batch = c->cfg.batch,
        .momentum = c->cfg.momentum, .has_momentum = 1, /* planned only when non-zero */
        .prox_mu = c->cfg.prox_mu, .has_prox_mu = 1,    /* the anchor, likewise */
        .has_optimizer = 1,                             /* AdamW's moments */
        .overhead_estimate = est >= 0 ? llround(est) : 0, .has_overhead_estimate = est >= 0,
        .seed = (int64_t)c->cfg.seed, .has_seed = 1,
        /* the global model now: a client holding these bits (its --init-model) need not download them */
        .model_version = c->version, .has_model_version = 1, .has_model_sha256 = 1,
        /* updates longer than this come by put (uplink.c) */
        .chunk_bytes = (int64_t)c->cfg.chunk_bytes, .has_chunk_bytes = c->cfg.chunk_bytes > 0};
    snprintf(w.token, sizeof w.token, "%s", c->clients[id].token);
    snprintf(w.name, sizeof w.name, "%s", c->clients[id].name);
    snprintf(w.instance, sizeof w.instance, "%.*s", HFL_WIRE_INSTANCE_MAX, c->instance);
    snprintf(w.model, sizeof w.model, "%s", c->spec.name);
    snprintf(w.codec, sizeof w.codec, "%s", c->clients[id].codec->name);
    snprintf(w.optimizer, sizeof w.optimizer, "%s", hfl_optimizer_name(c->cfg.optimizer));
    snprintf(w.model_sha256, sizeof w.model_sha256, "%s", c->final_sha256);
    uint8_t *out = hfl_wire_message(&hfl_wire_welcome, &w, NULL, 0, len);
    cJSON_Delete(spec);
    if (!c->cfg.quiet) printf("client %d (%s) said hello\n", id, c->clients[id].name);
    pthread_mutex_unlock(&c->lock);
    return out;
}

/* The longest payload a request may carry: an update's, or, on a tier's
 * root (--tier), an aggregator's partial sum (tier.c: 8 bytes a trainable value). */
static size_t server_max_payload(const coord *c) {
    size_t most = coord_max_payload(c), tier = c->spec.n_trainable * sizeof(int64_t);
    return c->cfg.tier && tier > most ? tier : most;
}

/* Decodes one request and returns the encoded reply (malloc'd), or NULL with
 * *park filled for a pull to hold. */
static uint8_t *server_handle(coord_server *s, coord *c, const uint8_t *buf, size_t n, nng_pipe pipe, size_t *len,
                              server_park *park) {
    char err[HFL_ERR_LEN], msg[HFL_ERR_LEN + 32];
    hfl_msg m;
    if (hfl_msg_decode(buf, n, server_max_payload(c), &m, err) != 0) {
        pthread_mutex_lock(&c->lock);
        c->rejected++;
        pthread_mutex_unlock(&c->lock);
        snprintf(msg, sizeof msg, "bad message: %s", err);
        return coord_error_reply(msg, len);
    }
    uint8_t *out = NULL;
    int64_t id = -1;
    if (m.type == HFL_MSG_HELLO) { /* takes the lock itself, after the crypto */
        out = server_handle_hello(s, c, &m, pipe, len);
        hfl_msg_free(&m);
        return out;
    }
    int reauth = 0;
    pthread_mutex_lock(&c->lock);
    switch (m.type) {
    case HFL_MSG_PULL:
    case HFL_MSG_UPDATE:
    case HFL_MSG_BYE:
    case HFL_MSG_SECAGG:
    case HFL_MSG_FETCH:
    case HFL_MSG_PUT:
    case HFL_MSG_TIER:
        if ((id = registry_check(c, m.meta, &reauth, err)) < 0) {
            c->rejected++;
            out = reauth ? coord_reauth_reply(err, len) : coord_error_reply(err, len);
        } else if (m.type == HFL_MSG_TIER) {
            out = tier_request(c, (int)id, &m, len);
        } else if (m.type == HFL_MSG_FETCH) {
            out = downlink_fetch(c, (int)id, m.meta, len);
        } else if (m.type == HFL_MSG_PUT) {
            out = uplink_put(c, (int)id, m.meta, m.payload, m.payload_len, n, len);
        } else if (m.type == HFL_MSG_SECAGG) {
            out = secagg_request(c, (int)id, m.meta, n, len);
        } else if (m.type == HFL_MSG_PULL) {
            hfl_pull_msg p = {0}; /* absent: it holds no version, and will not wait */
            int rc = hfl_wire_decode(&hfl_wire_pull, m.meta, &p, err);
            int64_t have = p.has_have_version ? p.have_version : -1, hold = p.hold_ms;
            if (rc == 0 && p.has_plan) replan_take(c, (int)id, p.plan, p.has_plan_round ? p.plan_round : 0);
            if (rc != 0) {
                c->rejected++;
                out = coord_error_reply(err, len);
            } else if (p.resend) {
                out = rounds_pull_again(c, (int)id, have, len);
            } else if (hold > 0 && !rounds_pull_ready(c, (int)id)) {
                c->clients[id].last_seen = hfl_now();
                *park = (server_park){.park = 1, .id = (int)id, .have = have, .hold_ms = hold};
                memcpy(park->token, c->clients[id].token, sizeof park->token);
            } else {
                out = rounds_pull(c, (int)id, have, len);
            }
        } else if (m.type == HFL_MSG_UPDATE) {
            out = uplink_update(c, (int)id, &m, n, len);
        } else if (registry_leave(c, (int)id, m.meta, err) != 0) {
            c->rejected++;
            out = coord_error_reply(err, len);
        } else {
            out = coord_bye_reply(NULL, len);
        }
        break;
    default:
        c->rejected++;
        snprintf(msg, sizeof msg, "unexpected message type '%s' from a client", hfl_msg_type_name(m.type));
        out = coord_error_reply(msg, len);
    }
    pthread_mutex_unlock(&c->lock);
    hfl_msg_free(&m);
    return out;
}

/* Sends out (malloc'd, encoded) on w's context; a reply NNG cannot take
 * (cannot happen for our own) leaves the request unanswered. */
static int server_send(server_work *w, uint8_t *out, size_t len) {
    nng_msg *rep;
    if (!out || nng_msg_alloc(&rep, len) != 0) {
        free(out);
        return -1;
    }
    memcpy(nng_msg_body(rep), out, len);
    free(out);
    nng_aio_set_msg(w->aio, rep);
    w->state = WORK_SEND;
    nng_ctx_send(w->ctx, w->aio);
    return 0;
}

/* A context for the pool (not yet receiving); NULL when NNG has none. */
static server_work *server_work_new(coord_server *s) {
    if (s->n_work == s->cap_work || s->stopping) return NULL;
    server_work *w = hfl_calloc(1, sizeof *w);
    w->c = s->c;
    w->s = s;
    if (nng_aio_alloc(&w->aio, server_work_cb, w) != 0 || nng_ctx_open(&w->ctx, s->sock) != 0) {
        if (w->aio) nng_aio_free(w->aio);
        free(w);
        return NULL;
    }
    s->work[s->n_work++] = w;
    return w;
}

/* Parks w's pull and returns the spare context to receive in its place, or
 * NULL (nothing parked) when the pool is exhausted. A session's earlier
 * parked pull (its client gave up on it: a reset, a resend) is replaced and
 * returned in *old, to be answered. Called with s->lock. */
static server_work *server_park_work(coord_server *s, server_work *w, const server_park *p, server_work **old) {
    *old = NULL;
    int at = s->parked_at[p->id];
    if (at < 0 && s->n_parked == SERVER_MAX_PARKED) return NULL;
    server_work *r = s->n_idle ? s->idle[--s->n_idle] : server_work_new(s);
    if (!r) return NULL;
    double hold = (double)p->hold_ms / 1000.0, most = w->c->cfg.liveness_s / 2;
    w->state = WORK_PARKED;
    w->id = p->id;
    w->have = p->have;
    w->until = hfl_now() + (hold < most ? hold : most);
    memcpy(w->token, p->token, sizeof w->token);
    if (at >= 0) {
        *old = s->parked[at];
        s->parked[at] = w;
    } else {
        s->parked_at[p->id] = s->n_parked;
        s->parked[s->n_parked++] = w;
    }
    r->state = WORK_RECV;
    return r;
}

/* Frees the reply w's aio still holds (a send that failed or never started). */
static void server_drop_msg(server_work *w) {
    nng_msg *m = nng_aio_get_msg(w->aio);
    nng_aio_set_msg(w->aio, NULL);
    if (m) nng_msg_free(m);
}

static void server_work_cb(void *arg) {
    server_work *w = arg;
    coord_server *s = w->s;
    int rv = nng_aio_result(w->aio);
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) { /* stopping: a send not made still owns its message */
        if (w->state == WORK_SEND) server_drop_msg(w);
        return;
    }
    if (w->state == WORK_RECV) {
        if (rv != 0) {
            nng_ctx_recv(w->ctx, w->aio);
            return;
        }
        nng_msg *req = nng_aio_get_msg(w->aio);
        nng_aio_set_msg(w->aio, NULL); /* ours now: the aio holds only a reply not yet sent (server_stop) */
        conns_seen(s->conns, nng_msg_get_pipe(req));
        size_t len = 0;
        server_park park = {0};
        uint8_t *out = server_handle(s, w->c, nng_msg_body(req), nng_msg_len(req), nng_msg_get_pipe(req), &len, &park);
        nng_msg_free(req);
        if (park.park) {
            server_work *old;
            pthread_mutex_lock(&s->lock);
            server_work *r = server_park_work(s, w, &park, &old);
            pthread_mutex_unlock(&s->lock);
            if (old) { /* superseded: its context becomes a spare once the answer is out */
                size_t olen = 0;
                old->woken = 1;
                if (server_send(old, coord_wait_reply(0, &olen), olen) != 0) {
                    old->woken = 0;
                    pthread_mutex_lock(&s->lock);
                    old->state = WORK_IDLE;
                    s->idle[s->n_idle++] = old;
                    pthread_mutex_unlock(&s->lock);
                }
            }
            if (r) {
                nng_ctx_recv(r->ctx, r->aio);
                return;
            }
            out = coord_wait_reply(COORD_WAIT_MS, &len); /* no spare context: answer at once */
        }
        if (server_send(w, out, len) != 0) nng_ctx_recv(w->ctx, w->aio);
        return;
    }
    /* WORK_SEND done: a failed send still owns its message. */
    if (rv != 0) server_drop_msg(w);
    if (w->woken) { /* a spare again: a parked pull's place among the receivers was taken */
        w->woken = 0;
        pthread_mutex_lock(&s->lock);
        w->state = WORK_IDLE;
        s->idle[s->n_idle++] = w;
        pthread_mutex_unlock(&s->lock);
        return;
    }
    w->state = WORK_RECV;
    nng_ctx_recv(w->ctx, w->aio);
}

void server_wake(coord_server *s) {
    coord *c = s->c;
    double now = hfl_now();
    server_work *go[SERVER_MAX_PARKED];
    int n_go = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = s->n_parked - 1; i >= 0; i--) {
        server_work *w = s->parked[i];
        if (now < w->until && !strcmp(c->clients[w->id].token, w->token) && !c->clients[w->id].revoked &&
            !rounds_pull_ready(c, w->id))
            continue;
        s->parked_at[w->id] = -1;
        s->parked[i] = s->parked[--s->n_parked];
        if (i < s->n_parked) s->parked_at[s->parked[i]->id] = i;
        go[n_go++] = w;
    }
    /* a parked pull was not a receiver: once answered, its context is a spare */
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < n_go; i++) {
        server_work *w = go[i];
        size_t len = 0;
        uint8_t *out;
        if (strcmp(c->clients[w->id].token, w->token) != 0) { /* the session changed while it waited */
            out = coord_reauth_reply("session replaced while waiting: say hello", &len);
        } else if (c->clients[w->id].revoked) {
            out = coord_error_reply("certificate revoked", &len);
        } else if (rounds_pull_ready(c, w->id)) {
            out = rounds_pull(c, w->id, w->have, &len);
        } else { /* not seen: a client that died while parked must not look alive */
            out = coord_wait_reply(0, &len);
        }
        w->woken = 1;
        if (server_send(w, out, len) != 0) { /* unanswered: its client times out and dials again */
            w->woken = 0;
            pthread_mutex_lock(&s->lock);
            w->state = WORK_IDLE;
            s->idle[s->n_idle++] = w;
            pthread_mutex_unlock(&s->lock);
        }
    }
}

coord_server *server_start(coord *c, int *port, char *err) {
    coord_server *s = hfl_calloc(1, sizeof *s);
    s->c = c;
    /* every request's payload is at most an update's, and with --chunk-bytes
     * an update longer than a chunk comes by put: a peer stalled mid-message
     * then pins one chunk (uplink.c) */
    size_t most = coord_max_payload(c);
    if (c->cfg.chunk_bytes && c->cfg.chunk_bytes < most) most = c->cfg.chunk_bytes;
    if (server_max_payload(c) > coord_max_payload(c)) most = server_max_payload(c); /* a tier's partial sums */
    size_t recv_max = HFL_MSG_HEADER_BYTES + HFL_MSG_MAX_META + most;
    if (hfl_transport_listen(&s->sock, c->cfg.listen_url, &c->cfg.tls, recv_max, port, err) != 0) {
        free(s);
        return NULL;
    }
    if (!(s->conns = conns_start(c, s->sock, *port, err))) {
        nng_close(s->sock);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->cap_work = c->cfg.max_inflight + SERVER_MAX_PARKED;
    s->work = hfl_calloc((size_t)s->cap_work, sizeof *s->work);
    s->idle = hfl_calloc((size_t)s->cap_work, sizeof *s->idle);
    s->parked = hfl_calloc(SERVER_MAX_PARKED, sizeof *s->parked);
    s->parked_at = hfl_malloc(sizeof *s->parked_at * COORD_MAX_CLIENTS);
    for (int i = 0; i < COORD_MAX_CLIENTS; i++) s->parked_at[i] = -1;
    for (int i = 0; i < c->cfg.max_inflight; i++) {
        server_work *w = server_work_new(s);
        if (!w) {
            hfl_errf(err, "cannot open server context %d of %d", i + 1, c->cfg.max_inflight);
            server_stop(s);
            return NULL;
        }
        w->state = WORK_RECV;
    }
    for (int i = 0; i < s->n_work; i++) nng_ctx_recv(s->work[i]->ctx, s->work[i]->aio);
    return s;
}

void server_stop(coord_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < s->n_work; i++) nng_aio_stop(s->work[i]->aio);
    for (int i = 0; i < s->n_work; i++) {
        /* a reply handed to an aio that was stopped meanwhile (a request
         * handled while we stop) was never sent and never called back */
        server_drop_msg(s->work[i]);
        nng_ctx_close(s->work[i]->ctx);
        nng_aio_free(s->work[i]->aio);
        free(s->work[i]);
    }
    nng_close(s->sock);
    conns_stop(s->conns);
    pthread_mutex_destroy(&s->lock);
    free(s->work);
    free(s->idle);
    free(s->parked);
    free(s->parked_at);
    free(s);
}

void server_reap(coord_server *s) { conns_reap(s->conns); }
