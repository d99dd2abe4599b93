/* metrics_http.c: Prometheus metrics and a JSON status page over HTTP (see metrics_http.h). */
#include "proto/metrics_http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "util/util.h"

static const double bounds[HFL_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60};

void hfl_hist_observe(hfl_hist *h, double seconds) {
    for (int i = 0; i < HFL_HIST_BUCKETS; i++) h->le[i] += seconds <= bounds[i];
    h->count++;
    h->sum += seconds;
}

void hfl_text_put(hfl_text *t, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        t->cap = t->cap * 2 + (n > 0 ? (size_t)n : 0) + 64;
        t->buf = hfl_realloc(t->buf, t->cap);
    }
}

void hfl_prom_head(hfl_text *t, const char *name, const char *type, const char *help) {
    hfl_text_put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void hfl_prom_label(hfl_text *t, const char *s) {
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') hfl_text_put(t, "\\%c", *s);
        else if (*s == '\n') hfl_text_put(t, "\\n");
        else hfl_text_put(t, "%c", *s);
    }
}

void hfl_prom_hist(hfl_text *t, const char *name, const char *help, const hfl_hist *h) {
    hfl_prom_head(t, name, "histogram", help);
    for (int i = 0; i < HFL_HIST_BUCKETS; i++)
        hfl_text_put(t, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)h->le[i]);
    hfl_text_put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)h->count,
                 name, h->sum, name, (unsigned long long)h->count);
}

struct hfl_metrics_server {
    nng_http_server *server;
    hfl_metrics_render render;
    void *ctx;
};

static void answer(nng_aio *aio, int status) {
    hfl_metrics_server *s = nng_http_handler_get_data(nng_aio_get_input(aio, 1));
    hfl_text t = {hfl_malloc(4096), 0, 4096};
    s->render(s->ctx, status, &t);
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc(&res);
    if (rv == 0 &&
        (rv = nng_http_res_set_header(res, "Content-Type", status ? "application/json" : "text/plain; version=0.0.4")) == 0)
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

hfl_metrics_server *hfl_metrics_serve(const char *addr, hfl_metrics_render render, void *ctx, char *url,
                                      size_t url_cap, char *err) {
    char url_text[300];
    snprintf(url_text, sizeof url_text, "%s%s", strncmp(addr, "http://", 7) ? "http://" : "", addr);
    nng_url *u;
    int rv = nng_url_parse(&u, url_text);
    if (rv != 0) return hfl_errf(err, "--metrics %s: not an address: %s", addr, nng_strerror(rv)), NULL;
    hfl_metrics_server *s = hfl_calloc(1, sizeof *s);
    s->render = render, s->ctx = ctx;
    rv = nng_http_server_hold(&s->server, u);
    nng_url_free(u);
    const char *paths[2] = {"/metrics", "/status"};
    void (*cbs[2])(nng_aio *) = {on_metrics, on_status};
    for (int i = 0; rv == 0 && i < 2; i++) {
        nng_http_handler *h;
        if ((rv = nng_http_handler_alloc(&h, paths[i], cbs[i])) != 0) break;
        if ((rv = nng_http_handler_set_data(h, s, NULL)) != 0 || (rv = nng_http_server_add_handler(s->server, h)) != 0) {
            nng_http_handler_free(h);
            break;
        }
    }
    if (rv == 0) rv = nng_http_server_start(s->server);
    if (rv != 0) {
        if (s->server) nng_http_server_release(s->server);
        free(s);
        return hfl_errf(err, "--metrics %s: cannot serve HTTP: %s", addr, nng_strerror(rv)), NULL;
    }
    nng_sockaddr sa;
    url[0] = 0;
    if (nng_http_server_get_addr(s->server, &sa) == 0 && sa.s_family == NNG_AF_INET) {
        const uint8_t *ip = (const uint8_t *)&sa.s_in.sa_addr;
        unsigned port = (sa.s_in.sa_port >> 8) | ((sa.s_in.sa_port & 0xff) << 8); /* network order */
        snprintf(url, url_cap, "http://%u.%u.%u.%u:%u/metrics", ip[0], ip[1], ip[2], ip[3], port);
    }
    return s;
}

static hfl_metrics_server *volatile retired; /* see hfl_metrics_close */

void hfl_metrics_close(hfl_metrics_server *s) {
    if (!s) return;
    nng_http_server_stop(s->server);
    nng_http_server_release(s->server);
    /* Not freed: NNG does not promise that a handler answering a request at
     * this moment has returned, and it reads s. One per process, so it is
     * kept (reachable, so leak checkers stay quiet) instead. */
    retired = s;
}
