/* server.c: the coordinator's network side: one rep0 socket, many contexts.
 *
 * Each context is a small state machine driven by its aio callback (NNG's
 * async server pattern): receive -> handle -> send -> receive. Handling
 * decodes and validates the request (proto/msg.c), then takes the
 * coordinator lock for as long as the round engine needs, which is short:
 * replies are never held back for a round to end, since REQ resends after
 * its timeout. A malformed request gets an error reply and bumps the
 * `rejected` counter; it never reaches the round engine. */
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "coordinator/coord.h"
#include "util/util.h"


typedef enum { WORK_RECV, WORK_SEND } work_state;

typedef struct {
    work_state state;
    nng_aio *aio;
    nng_ctx ctx;
    coord *c;
    coord_conns *conns;
} server_work;

struct coord_server {
    nng_socket sock;
    coord_conns *conns;
    server_work *work; /* --max-inflight contexts: requests handled at once */
    int n_work;
};

static uint8_t *server_handle_hello(coord *c, const hfl_msg *m, size_t *len) {
    char err[HFL_ERR_LEN], name[HFL_ID_NAME_MAX + 1];
    uint8_t *challenge;
    int proven = auth_hello(c, m, name, &challenge, len, err); /* crypto, without the lock */
    if (proven == 0) return challenge;
    pthread_mutex_lock(&c->lock);
    int id = proven < 0 ? -1 : registry_hello(c, name, m->meta, err);
    if (id < 0) {
        c->rejected++;
        pthread_mutex_unlock(&c->lock);
        if (!c->cfg.quiet) fprintf(stderr, "hfl-coordinator: hello refused: %s\n", err);
        return coord_error_reply(err, len);
    }
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "client_id", id);
    cJSON_AddStringToObject(meta, "token", c->clients[id].token);
    cJSON_AddStringToObject(meta, "name", c->clients[id].name);
    cJSON_AddStringToObject(meta, "instance", c->instance);
    cJSON_AddNumberToObject(meta, "token_ttl_s", c->cfg.token_ttl_s);
    cJSON_AddStringToObject(meta, "model", c->spec.name);
    cJSON_AddItemToObject(meta, "model_spec", cJSON_Parse(c->spec_json));
    cJSON_AddNumberToObject(meta, "params", (double)c->spec.n_params);
    cJSON_AddStringToObject(meta, "codec", c->clients[id].codec->name);
    cJSON_AddNumberToObject(meta, "block", c->cfg.block);
    cJSON_AddNumberToObject(meta, "rounds", c->cfg.rounds);
    cJSON_AddNumberToObject(meta, "batch", c->cfg.batch);
    cJSON_AddNumberToObject(meta, "momentum", c->cfg.momentum); /* planned only when non-zero */
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m->meta, "device"), "name");
    double est = cJSON_IsString(dev) ? registry_overhead_estimate(c, dev->valuestring) : -1;
    if (est >= 0) cJSON_AddNumberToObject(meta, "overhead_estimate", est);
    cJSON_AddNumberToObject(meta, "seed", (double)c->cfg.seed);
    uint8_t *out = hfl_msg_encode(HFL_MSG_WELCOME, meta, NULL, 0, len);
    cJSON_Delete(meta);
    if (!c->cfg.quiet) printf("client %d (%s) said hello\n", id, c->clients[id].name);
    pthread_mutex_unlock(&c->lock);
    return out;
}

/* Decodes one request and returns the encoded reply (malloc'd). */
static uint8_t *server_handle(coord *c, const uint8_t *buf, size_t n, size_t *len) {
    char err[HFL_ERR_LEN], msg[HFL_ERR_LEN + 32];
    hfl_msg m;
    size_t max_payload = c->spec.n_params * sizeof(float) + 4096;
    if (hfl_msg_decode(buf, n, max_payload, &m, err) != 0) {
        pthread_mutex_lock(&c->lock);
        c->rejected++;
        pthread_mutex_unlock(&c->lock);
        snprintf(msg, sizeof msg, "bad message: %s", err);
        return coord_error_reply(msg, len);
    }
    uint8_t *out = NULL;
    int64_t id = -1;
    if (m.type == HFL_MSG_HELLO) { /* takes the lock itself, after the crypto */
        out = server_handle_hello(c, &m, len);
        hfl_msg_free(&m);
        return out;
    }
    int reauth = 0;
    pthread_mutex_lock(&c->lock);
    switch (m.type) {
    case HFL_MSG_PULL:
    case HFL_MSG_UPDATE:
    case HFL_MSG_BYE:
        if ((id = registry_check(c, m.meta, &reauth, err)) < 0) {
            c->rejected++;
            out = reauth ? coord_reauth_reply(err, len) : coord_error_reply(err, len);
        } else if (m.type == HFL_MSG_PULL) {
            int64_t have = -1; /* optional: the model version the client holds */
            if (cJSON_GetObjectItemCaseSensitive(m.meta, "have_version") &&
                hfl_meta_int(m.meta, "have_version", -1, INT32_MAX, &have, err) != 0) {
                c->rejected++;
                out = coord_error_reply(err, len);
            } else {
                out = rounds_pull(c, (int)id, have, len);
            }
        } else if (m.type == HFL_MSG_UPDATE) {
            out = rounds_update(c, (int)id, m.meta, m.payload, m.payload_len, n, len);
        } else if (registry_leave(c, (int)id, m.meta, err) != 0) {
            c->rejected++;
            out = coord_error_reply(err, len);
        } else {
            cJSON *meta = cJSON_CreateObject();
            out = hfl_msg_encode(HFL_MSG_BYE, meta, NULL, 0, len);
            cJSON_Delete(meta);
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

static void server_work_cb(void *arg) {
    server_work *w = arg;
    int rv = nng_aio_result(w->aio);
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) return;
    if (w->state == WORK_RECV) {
        if (rv != 0) {
            nng_ctx_recv(w->ctx, w->aio);
            return;
        }
        nng_msg *req = nng_aio_get_msg(w->aio);
        conns_seen(w->conns, nng_msg_get_pipe(req));
        size_t len = 0;
        uint8_t *out = server_handle(w->c, nng_msg_body(req), nng_msg_len(req), &len);
        nng_msg_free(req);
        nng_msg *rep;
        if (!out || nng_msg_alloc(&rep, len) != 0) { /* cannot happen for our own replies */
            free(out);
            nng_ctx_recv(w->ctx, w->aio);
            return;
        }
        memcpy(nng_msg_body(rep), out, len);
        free(out);
        nng_aio_set_msg(w->aio, rep);
        w->state = WORK_SEND;
        nng_ctx_send(w->ctx, w->aio);
        return;
    }
    /* WORK_SEND done: a failed send still owns its message. */
    if (rv != 0) nng_msg_free(nng_aio_get_msg(w->aio));
    w->state = WORK_RECV;
    nng_ctx_recv(w->ctx, w->aio);
}

coord_server *server_start(coord *c, int *port, char *err) {
    coord_server *s = hfl_calloc(1, sizeof *s);
    size_t recv_max = HFL_MSG_HEADER_BYTES + HFL_MSG_MAX_META + c->spec.n_params * sizeof(float) + 4096;
    if (hfl_transport_listen(&s->sock, c->cfg.listen_url, &c->cfg.tls, recv_max, port, err) != 0) {
        free(s);
        return NULL;
    }
    if (!(s->conns = conns_start(c, s->sock, err))) {
        nng_close(s->sock);
        free(s);
        return NULL;
    }
    s->work = hfl_calloc((size_t)c->cfg.max_inflight, sizeof *s->work);
    for (int i = 0; i < c->cfg.max_inflight; i++) {
        server_work *w = &s->work[i];
        w->c = c;
        w->conns = s->conns;
        w->state = WORK_RECV;
        int rv = nng_aio_alloc(&w->aio, server_work_cb, w);
        if (rv == 0) rv = nng_ctx_open(&w->ctx, s->sock);
        if (rv != 0) {
            hfl_errf(err, "cannot open server context: %s", nng_strerror(rv));
            s->n_work = i + (w->aio != NULL);
            server_stop(s);
            return NULL;
        }
        s->n_work = i + 1;
    }
    for (int i = 0; i < s->n_work; i++) nng_ctx_recv(s->work[i].ctx, s->work[i].aio);
    return s;
}

void server_stop(coord_server *s) {
    if (!s) return;
    for (int i = 0; i < s->n_work; i++)
        if (s->work[i].aio) nng_aio_stop(s->work[i].aio);
    for (int i = 0; i < s->n_work; i++) {
        nng_ctx_close(s->work[i].ctx);
        if (s->work[i].aio) nng_aio_free(s->work[i].aio);
    }
    nng_close(s->sock);
    conns_stop(s->conns);
    free(s->work);
    free(s);
}

void server_reap(coord_server *s) { conns_reap(s->conns); }
