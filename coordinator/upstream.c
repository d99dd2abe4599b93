/* upstream.c: an aggregator's link to its root (hfl-coordinator --upstream).
 *
 * An aggregator serves its own clients as any coordinator does (hello,
 * tasks, updates validated, clipped and summed exactly), but it draws
 * nobody, aggregates nothing into a model and evaluates nothing: its root
 * does (tier.c). This thread dials the root, says hello as `aggregator`
 * (with TLS proving the --upstream-cert identity, of the aggregator role;
 * under --insecure named by --upstream-name), checks that the root runs the
 * aggregator's model and settings (its welcome: model, codec, batch,
 * momentum, optimizer, and the initial model's SHA-256 while the root is at
 * version 0), then every ~50 ms, under c->lock, builds a sync (its clients,
 * the version it holds), sends it without the lock, and applies the reply
 * under the lock: a new global model is adopted (rounds_adopt), a new open
 * round is opened from the assignment (rounds_assign: the root's task,
 * clip, scale, divisor and drawn clients), and once the root is done its
 * clients get bye. When every drawn client of the open round is final, or
 * its deadline is near (rounds_tier_ready), the round is closed to updates
 * and its sum and rows go to the root as a partial instead of a sync. A root
 * that cannot be reached is dialled again; a refused hello or a root of
 * other settings ends the aggregator's run, in one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "proto/hello.h"
#include "util/util.h"

#define UPSTREAM_EVERY_MS 50
#define UPSTREAM_FLOOR_BPS 10e6 /* a link to the root slower than 10 MB/s times out whole-model messages */

struct coord_upstream {
    coord *c;
    pthread_t th;
    volatile int stop;
    nng_socket sock;
    int connected;
    hfl_session_msg session;
    hfl_identity *self;  /* --upstream-cert: our aggregator identity to the root (NULL: --insecure) */
    hfl_tls_opts tls;    /* how we dial the root */
};

/* The root's reply to one request: 0 with reply and raw set, or -1 with err
 * (the connection is then dropped, to be dialled again). */
static int upstream_send(coord_upstream *u, cJSON *meta, const void *payload, size_t n, hfl_msg *reply,
                         nng_msg **raw, char *err) {
    size_t most = u->c->spec.n_params * sizeof(float) + 4096;
    int rc = meta && hfl_wire_encode_into(&hfl_wire_session, &u->session, meta) == 0
                 ? hfl_transport_request(u->sock, HFL_MSG_TIER, meta, payload, n, most, reply, raw, err)
                 : hfl_errf(err, "out of memory");
    cJSON_Delete(meta);
    if (rc != 0 && u->connected) nng_close(u->sock), u->connected = 0;
    return rc;
}

/* Our settings against the root's welcome: -1 with err naming the first that differs. */
static int upstream_compare(const coord *c, const hfl_welcome_msg *w, char *err) {
    if (strcmp(w->model, c->spec.name) != 0) return hfl_errf(err, "model '%s', ours '%s'", w->model, c->spec.name);
    if (strcmp(w->codec, c->codec->name) != 0) return hfl_errf(err, "codec %s, ours %s", w->codec, c->codec->name);
    if (w->batch != c->cfg.batch) return hfl_errf(err, "batch %lld, ours %d", (long long)w->batch, c->cfg.batch);
    if (w->has_momentum && w->momentum != c->cfg.momentum)
        return hfl_errf(err, "momentum %g, ours %g", w->momentum, c->cfg.momentum);
    if (w->has_optimizer && strcmp(w->optimizer, hfl_optimizer_name(c->cfg.optimizer)) != 0)
        return hfl_errf(err, "optimizer %s, ours %s", w->optimizer, hfl_optimizer_name(c->cfg.optimizer));
    if (w->has_model_version && w->model_version == 0 && w->has_model_sha256 &&
        strcmp(w->model_sha256, c->initial_sha256) != 0)
        return hfl_errf(err, "initial model %.16s..., ours %.16s... (--seed or --model differ)", w->model_sha256,
                        c->initial_sha256);
    return 0;
}

/* Dials the root and says hello: 0, -1 with err (try again later), -2 with
 * err (refused: the aggregator's run ends). */
static int upstream_connect(coord_upstream *u, char *err) {
    coord *c = u->c;
    size_t most = c->spec.n_params * sizeof(float) + 4096;
    /* each request's limit: 2 s, and the largest message (a partial sum of 8
     * bytes a trainable value, or the model) at UPSTREAM_FLOOR_BPS */
    double big = (double)(c->spec.n_trainable * sizeof(int64_t) > most ? c->spec.n_trainable * sizeof(int64_t) : most);
    int ms = 2000 + (int)(big / UPSTREAM_FLOOR_BPS * 1000);
    if (hfl_transport_dial(&u->sock, c->cfg.upstream, &u->tls, HFL_MSG_HEADER_BYTES + HFL_MSG_MAX_META + most,
                           ms, err) != 0)
        return -1;
    u->connected = 1;
    hfl_hello_auth auth = {.self = u->self, .trust = c->trust, .server_name = u->tls.server_name};
    cJSON *f = cJSON_CreateObject();
    if (c->cfg.upstream_name[0]) cJSON_AddStringToObject(f, "name", c->cfg.upstream_name);
    cJSON_AddNumberToObject(f, "samples", 1);
    cJSON_AddBoolToObject(f, "aggregator", 1);
    hfl_msg rep;
    nng_msg *raw = NULL;
    int rc = hfl_hello(u->sock, &auth, f, most, &rep, &raw, err);
    cJSON_Delete(f);
    if (rc != 0) {
        nng_close(u->sock), u->connected = 0;
        return rc == -2 ? -2 : -1;
    }
    hfl_welcome_msg w = {0};
    char why[HFL_ERR_LEN];
    if (rep.type != HFL_MSG_WELCOME) {
        hfl_error_msg e = {0};
        hfl_wire_decode(&hfl_wire_error, rep.meta, &e, why);
        hfl_errf(err, "the root refused our hello: %s", e.error);
        rc = e.reauth ? -1 : -2;
    } else if (hfl_wire_decode(&hfl_wire_welcome, rep.meta, &w, why) != 0) {
        hfl_errf(err, "the root's welcome: %s", why);
        rc = -2;
    } else {
        pthread_mutex_lock(&c->lock);
        rc = upstream_compare(c, &w, why);
        pthread_mutex_unlock(&c->lock);
        if (rc != 0) {
            hfl_errf(err, "the root runs other settings than this aggregator: %s", why);
            rc = -2;
        }
        u->session.client_id = w.client_id;
        snprintf(u->session.token, sizeof u->session.token, "%s", w.token);
    }
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    if (rc != 0) nng_close(u->sock), u->connected = 0;
    return rc;
}

/* The sync's metadata (with c->lock): our clients, as each said hello. */
static cJSON *upstream_sync_meta(const coord *c) {
    hfl_tier_client *v = hfl_calloc((size_t)c->n_clients + 1, sizeof *v);
    cJSON **hellos = hfl_calloc((size_t)c->n_clients + 1, sizeof *hellos);
    int n = 0;
    double now = hfl_now();
    for (int i = 0; i < c->n_clients && n < HFL_TIER_MAX_CLIENTS; i++) {
        const coord_client *cl = &c->clients[i];
        if (!cl->token[0] || cl->left[0] || !cl->hello) continue;
        cJSON *h = cJSON_Duplicate(cl->hello, 1);
        cJSON_AddNumberToObject(h, "samples", (double)cl->declared);
        if (cl->codec != c->codec) cJSON_AddStringToObject(h, "codec", cl->codec->name);
        snprintf(v[n].name, sizeof v[n].name, "%s", cl->name);
        v[n].hello = hellos[n] = h;
        double seen = (now - cl->last_seen) * 1000.0;
        v[n].seen_ms = seen > 0 ? (int64_t)seen : 0;
        n++;
    }
    hfl_tier_sync_msg s = {.have_version = c->version, .clients = {v, n}};
    snprintf(s.op, sizeof s.op, "sync");
    cJSON *meta = hfl_wire_encode(&hfl_wire_tier_sync, &s);
    for (int i = 0; i < n; i++) cJSON_Delete(hellos[i]);
    free(hellos);
    free(v);
    return meta;
}

/* Applies a sync's reply (with c->lock). */
static void upstream_apply(coord *c, const hfl_msg *rep) {
    char err[HFL_ERR_LEN];
    coord_round *r = &c->r;
    hfl_tier_sync_reply_msg a = {0};
    if (hfl_wire_decode(&hfl_wire_tier_sync_reply, rep->meta, &a, err) != 0) {
        fprintf(stderr, "hfl-coordinator: the root's sync reply: %s\n", err);
    } else {
        if (rep->payload_len == c->spec.n_params * sizeof(float) && a.version != c->version)
            rounds_adopt(c, rep->payload, (int)a.version);
        if (r->open && (!a.open || a.round != r->round)) r->open = 0; /* the root closed it without us */
        if (a.open && a.has_task && !r->open && a.round > r->round && a.version == c->version &&
            rounds_assign(c, &a, err) != 0)
            fprintf(stderr, "hfl-coordinator: round %lld: %s\n", (long long)a.round, err);
        if (a.done && !r->open && !c->done) c->done = 1; /* our clients get bye */
    }
    hfl_wire_free(&hfl_wire_tier_sync_reply, &a);
}

/* One exchange with the root: the open round's partial when it is over
 * here, else a sync. -1 with err when the root could not be reached. */
static int upstream_step(coord_upstream *u, char *err) {
    coord *c = u->c;
    hfl_msg rep;
    nng_msg *raw = NULL;
    pthread_mutex_lock(&c->lock);
    int partial = rounds_tier_ready(c);
    cJSON *meta;
    int64_t *sum = NULL;
    int round = c->r.round;
    if (partial) {
        hfl_tier_partial_msg p = {.round = round, .shift = c->agg.shift};
        snprintf(p.op, sizeof p.op, "partial");
        rounds_tier_close(c, &p.rows, &sum);
        meta = hfl_wire_encode(&hfl_wire_tier_partial, &p);
        free(p.rows.v);
    } else {
        meta = upstream_sync_meta(c);
    }
    pthread_mutex_unlock(&c->lock);
    int rc = upstream_send(u, meta, sum, partial ? c->spec.n_trainable * sizeof *sum : 0, &rep, &raw, err);
    free(sum);
    if (rc != 0) return -1;
    pthread_mutex_lock(&c->lock);
    hfl_error_msg e = {0};
    char why[HFL_ERR_LEN];
    if (rep.type == HFL_MSG_ERROR && hfl_wire_decode(&hfl_wire_error, rep.meta, &e, why) == 0) {
        fprintf(stderr, "hfl-coordinator: the root: %s\n", e.error);
        if (e.reauth) nng_close(u->sock), u->connected = 0; /* say hello again */
    } else if (!partial && rep.type == HFL_MSG_TIER) {
        upstream_apply(c, &rep);
    } else if (partial && !c->cfg.quiet) {
        printf("round %d: partial sum sent to the root\n", round);
    }
    pthread_cond_signal(&c->tick);
    pthread_mutex_unlock(&c->lock);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return 0;
}

static void *upstream_main(void *arg) {
    coord_upstream *u = arg;
    coord *c = u->c;
    char err[HFL_ERR_LEN], last[HFL_ERR_LEN] = "";
    while (!u->stop) {
        int rc = u->connected ? 0 : upstream_connect(u, err);
        if (rc == -2) {
            fprintf(stderr, "hfl-coordinator: %s\n", err);
            pthread_mutex_lock(&c->lock);
            snprintf(c->stop_reason, sizeof c->stop_reason, "%s", err);
            c->done = 1;
            pthread_mutex_unlock(&c->lock);
            break;
        }
        if (rc == 0 && upstream_step(u, err) == 0) {
            last[0] = 0;
            hfl_sleep_ms(UPSTREAM_EVERY_MS);
            continue;
        }
        if (strcmp(last, err) != 0 && !c->cfg.quiet) fprintf(stderr, "hfl-coordinator: upstream: %s\n", err);
        snprintf(last, sizeof last, "%s", err);
        hfl_sleep_ms(500);
    }
    if (u->connected) nng_close(u->sock);
    return NULL;
}

coord_upstream *upstream_start(coord *c, char *err) {
    coord_upstream *u = hfl_calloc(1, sizeof *u);
    u->c = c;
    u->tls = (hfl_tls_opts){.insecure = c->cfg.tls.insecure, .ca_file = c->cfg.tls.ca_file,
                            .cert_file = c->cfg.upstream_cert, .server_name = c->cfg.upstream_server};
    char why[HFL_ERR_LEN];
    if (!c->cfg.tls.insecure) {
        if (hfl_identity_load(c->cfg.upstream_cert, &u->self, why) != 0) {
            free(u);
            hfl_errf(err, "--upstream-cert: %s", why);
            return NULL;
        }
        if (strcmp(hfl_identity_role(u->self), HFL_ROLE_AGGREGATOR) != 0) {
            hfl_errf(err, "--upstream-cert: the certificate of '%s' was issued for the %s role, not aggregator",
                     hfl_identity_name(u->self), hfl_identity_role(u->self));
            hfl_identity_free(u->self);
            free(u);
            return NULL;
        }
    }
    if (pthread_create(&u->th, NULL, upstream_main, u) != 0) {
        hfl_identity_free(u->self);
        free(u);
        hfl_errf(err, "cannot start the upstream thread");
        return NULL;
    }
    return u;
}

void upstream_stop(coord_upstream *u) {
    if (!u) return;
    u->stop = 1;
    pthread_join(u->th, NULL);
    hfl_identity_free(u->self);
    free(u);
}
