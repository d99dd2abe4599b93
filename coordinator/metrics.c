/* metrics.c: --metrics ADDR, the coordinator watched over HTTP.
 *
 * GET /metrics answers in Prometheus's text exposition format (version
 * 0.0.4: "# HELP", "# TYPE", one sample per line, histograms as _bucket{le},
 * _sum and _count; names and units after Prometheus's naming conventions:
 * hfl_ prefix, _total for counters, base units seconds and bytes), and GET
 * /status a short JSON summary of the run. NNG's HTTP server (the library
 * the transport already links; no second dependency and no listener code of
 * our own) calls the handlers on its threads; each takes the coordinator's
 * lock while it renders, which reads counters the round engine keeps anyway
 * and the round log, O(clients + rounds). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "coordinator/coord.h"
#include "util/util.h"

struct coord_metrics {
    nng_http_server *server;
};

static const double bounds[COORD_HIST_BUCKETS] = COORD_HIST_BOUNDS;
static const char *const reject_names[COORD_REJ_KINDS] = {"malformed", "wrong_round", "not_tasked", "samples",
                                                          "codec", "payload", "late"};

typedef struct {
    char *buf;
    size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        t->cap = t->cap * 2 + (n > 0 ? (size_t)n : 0);
        t->buf = hfl_realloc(t->buf, t->cap);
    }
}

static void head(text *t, const char *name, const char *type, const char *help) {
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newline escaped, as the format asks. */
static void put_label(text *t, const char *s) {
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') put(t, "\\%c", *s);
        else if (*s == '\n') put(t, "\\n");
        else put(t, "%c", *s);
    }
}

static void hist(text *t, const char *name, const char *help, const coord_hist *h) {
    head(t, name, "histogram", help);
    for (int i = 0; i < COORD_HIST_BUCKETS; i++) put(t, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)h->le[i]);
    put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)h->count, name, h->sum,
        name, (unsigned long long)h->count);
}

static double entry_num(const cJSON *e, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* The Prometheus page; the caller holds c->lock. */
static void render_metrics(const coord *c, text *t) {
    int rounds = cJSON_GetArraySize(c->round_log), failed = 0;
    double up = 0, down = 0, loss = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, c->round_log) {
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "status"));
        failed += st && strcmp(st, "ok") != 0;
        up += entry_num(e, "bytes_up"), down += entry_num(e, "bytes_down");
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "test_loss"))) loss = entry_num(e, "test_loss");
    }
    if (c->r.open) up += (double)c->r.bytes_up, down += (double)c->r.bytes_down;
    head(t, "hfl_rounds_total", "counter", "Rounds closed, aggregated or failed.");
    put(t, "hfl_rounds_total %d\n", rounds);
    head(t, "hfl_rounds_failed_total", "counter", "Rounds closed without moving the global model.");
    put(t, "hfl_rounds_failed_total %d\n", failed);
    head(t, "hfl_rounds_planned", "gauge", "Rounds the run is to take (--rounds).");
    put(t, "hfl_rounds_planned %d\n", c->cfg.rounds);
    head(t, "hfl_round", "gauge", "The open round, or the last one.");
    put(t, "hfl_round %d\n", c->r.round);
    head(t, "hfl_model_version", "gauge", "Aggregations the global model has taken.");
    put(t, "hfl_model_version %d\n", c->version);
    head(t, "hfl_run_complete", "gauge", "1 once every round is done.");
    put(t, "hfl_run_complete %d\n", c->done ? 1 : 0);

    int planned = 0, live = 0, left = 0, revoked = 0, inflight = 0, drawn = 0;
    double now = hfl_now(), accepted = 0;
    for (int i = 0; i < c->n_clients; i++) {
        const coord_client *cl = &c->clients[i];
        planned += cl->has_plan;
        live += cl->has_plan && !cl->left[0] && now - cl->last_seen <= c->cfg.liveness_s;
        left += cl->left[0] != 0;
        revoked += cl->revoked;
        inflight += cl->late_round != 0;
        drawn += c->r.open && c->r.is_selected[i] && !c->r.received[i] && !c->r.refused[i];
        accepted += (double)cl->updates;
    }
    head(t, "hfl_clients", "gauge", "Clients by state: registered (said hello), planned, live (heard from within "
                                    "--liveness), drawn (tasked in the open round, not answered), in_flight (training "
                                    "an earlier round's task), left, revoked.");
    put(t, "hfl_clients{state=\"registered\"} %d\nhfl_clients{state=\"planned\"} %d\nhfl_clients{state=\"live\"} %d\n"
           "hfl_clients{state=\"drawn\"} %d\nhfl_clients{state=\"in_flight\"} %d\nhfl_clients{state=\"left\"} %d\n"
           "hfl_clients{state=\"revoked\"} %d\n",
        c->n_clients, planned, live, drawn, inflight, left, revoked);
    head(t, "hfl_updates_accepted_total", "counter", "Updates added to a round's aggregate.");
    put(t, "hfl_updates_accepted_total %.0f\n", accepted);
    head(t, "hfl_updates_rejected_total", "counter", "Updates refused, by reason.");
    uint64_t upd = 0;
    for (int k = 0; k < COORD_REJ_KINDS; k++) {
        put(t, "hfl_updates_rejected_total{reason=\"%s\"} %llu\n", reject_names[k], (unsigned long long)c->rejected_update[k]);
        upd += c->rejected_update[k];
    }
    head(t, "hfl_requests_rejected_total", "counter",
         "Other requests answered with an error (malformed frames, bad tokens, refused hellos).");
    put(t, "hfl_requests_rejected_total %llu\n", (unsigned long long)(c->rejected > upd ? c->rejected - upd : 0));
    head(t, "hfl_uplink_bytes_total", "counter", "Bytes of updates received.");
    put(t, "hfl_uplink_bytes_total %.0f\n", up);
    head(t, "hfl_downlink_bytes_total", "counter", "Bytes of tasks sent.");
    put(t, "hfl_downlink_bytes_total %.0f\n", down);
    hist(t, "hfl_round_duration_seconds", "Wall time from a round's open to its close.", &c->round_hist);
    hist(t, "hfl_aggregation_duration_seconds", "Wall time of an aggregation: the mean, the checks, the server step.",
         &c->agg_hist);
    hist(t, "hfl_evaluation_duration_seconds", "Wall time of evaluating a global model on the test set.", &c->eval_hist);
    head(t, "hfl_test_accuracy", "gauge", "Test accuracy of the last evaluated global model.");
    put(t, "hfl_test_accuracy %.9g\n", c->final_acc);
    head(t, "hfl_test_loss", "gauge", "Test loss of the last evaluated global model.");
    put(t, "hfl_test_loss %.9g\n", loss);
    head(t, "hfl_client_predicted_peak_bytes", "gauge", "A client's predicted peak memory for a training step.");
    for (int i = 0; i < c->n_clients; i++)
        if (c->clients[i].measured_peak > 0) {
            put(t, "hfl_client_predicted_peak_bytes{client=\"");
            put_label(t, c->clients[i].name);
            put(t, "\"} %.0f\n", c->clients[i].predicted_peak);
        }
    head(t, "hfl_client_measured_peak_bytes", "gauge", "A client's measured peak memory for a training step.");
    for (int i = 0; i < c->n_clients; i++)
        if (c->clients[i].measured_peak > 0) {
            put(t, "hfl_client_measured_peak_bytes{client=\"");
            put_label(t, c->clients[i].name);
            put(t, "\"} %.0f\n", c->clients[i].measured_peak);
        }
}

static void render_status(const coord *c, text *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "round", c->r.round);
    cJSON_AddBoolToObject(o, "open", c->r.open);
    cJSON_AddNumberToObject(o, "rounds_planned", c->cfg.rounds);
    cJSON_AddNumberToObject(o, "rounds_closed", cJSON_GetArraySize(c->round_log));
    cJSON_AddNumberToObject(o, "model_version", c->version);
    cJSON_AddBoolToObject(o, "complete", c->done);
    cJSON_AddNumberToObject(o, "clients", c->n_clients);
    cJSON_AddNumberToObject(o, "final_test_acc", c->final_acc);
    cJSON_AddStringToObject(o, "model_sha256", c->final_sha256);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    put(t, "%s\n", s ? s : "{}");
    free(s);
}

static void answer(nng_aio *aio, int status) {
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    coord *c = nng_http_handler_get_data(h);
    text t = {hfl_malloc(4096), 0, 4096};
    pthread_mutex_lock(&c->lock);
    if (status) render_status(c, &t);
    else render_metrics(c, &t);
    pthread_mutex_unlock(&c->lock);
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc(&res);
    if (rv == 0 && (rv = nng_http_res_set_header(res, "Content-Type", status ? "application/json"
                                                                          : "text/plain; version=0.0.4")) == 0)
        rv = nng_http_res_copy_data(res, t.buf, t.len);
    free(t.buf);
    if (rv != 0) {
        if (res) nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static void on_metrics(nng_aio *aio) { answer(aio, 0); }
static void on_status(nng_aio *aio) { answer(aio, 1); }

int metrics_start(coord *c, const char *addr, char *err) {
    char url_text[300];
    snprintf(url_text, sizeof url_text, "%s%s", strncmp(addr, "http://", 7) ? "http://" : "", addr);
    nng_url *url;
    int rv = nng_url_parse(&url, url_text);
    if (rv != 0) return hfl_errf(err, "--metrics %s: not an address: %s", addr, nng_strerror(rv));
    coord_metrics *m = hfl_calloc(1, sizeof *m);
    rv = nng_http_server_hold(&m->server, url);
    nng_url_free(url);
    const char *paths[2] = {"/metrics", "/status"};
    void (*cbs[2])(nng_aio *) = {on_metrics, on_status};
    for (int i = 0; rv == 0 && i < 2; i++) {
        nng_http_handler *h;
        if ((rv = nng_http_handler_alloc(&h, paths[i], cbs[i])) != 0) break;
        if ((rv = nng_http_handler_set_data(h, c, NULL)) != 0 || (rv = nng_http_server_add_handler(m->server, h)) != 0) {
            nng_http_handler_free(h);
            break;
        }
    }
    if (rv == 0) rv = nng_http_server_start(m->server);
    if (rv != 0) {
        if (m->server) nng_http_server_release(m->server);
        free(m);
        return hfl_errf(err, "--metrics %s: cannot serve HTTP: %s", addr, nng_strerror(rv));
    }
    c->metrics = m;
    nng_sockaddr sa;
    if (!c->cfg.quiet && nng_http_server_get_addr(m->server, &sa) == 0 && sa.s_family == NNG_AF_INET) {
        const uint8_t *ip = (const uint8_t *)&sa.s_in.sa_addr;
        printf("metrics on http://%u.%u.%u.%u:%u/metrics\n", ip[0], ip[1], ip[2], ip[3],
               (unsigned)((sa.s_in.sa_port >> 8) | ((sa.s_in.sa_port & 0xff) << 8)));
    }
    return 0;
}

void metrics_stop(coord *c) {
    if (!c->metrics) return;
    nng_http_server_stop(c->metrics->server);
    nng_http_server_release(c->metrics->server);
    free(c->metrics);
    c->metrics = NULL;
}
