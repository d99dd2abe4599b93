/* metrics_http.h: Prometheus metrics and a JSON status page over HTTP, for
 * hfl-coordinator --metrics and hfl-client --metrics.
 *
 * NNG's HTTP server (the library the transport already links: no second
 * dependency and no listener code of our own) answers GET /metrics and GET
 * /status on its own threads by calling the program's render function, which
 * writes Prometheus's text exposition format (version 0.0.4: "# HELP" and
 * "# TYPE" lines, one sample per line, histograms as _bucket{le}, _sum and
 * _count) or one JSON object into an hfl_text. Names follow Prometheus's
 * naming conventions: an hfl_ prefix, _total for counters, base units
 * (seconds, bytes). */
#ifndef HFL_PROTO_METRICS_HTTP_H
#define HFL_PROTO_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

/* A histogram of durations in seconds, bounds from 5 ms to 60 s. */
#define HFL_HIST_BUCKETS 12
typedef struct {
    uint64_t le[HFL_HIST_BUCKETS]; /* observations <= each bound */
    uint64_t count;
    double sum;
} hfl_hist;
void hfl_hist_observe(hfl_hist *h, double seconds);

/* A growing text buffer; put is printf-like. */
typedef struct {
    char *buf;
    size_t len, cap;
} hfl_text;
void hfl_text_put(hfl_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "# HELP name help" and "# TYPE name type". */
void hfl_prom_head(hfl_text *t, const char *name, const char *type, const char *help);
/* A label value with \, " and newline escaped, as the format asks. */
void hfl_prom_label(hfl_text *t, const char *s);
/* A whole histogram: its head, buckets, +Inf, _sum and _count. */
void hfl_prom_hist(hfl_text *t, const char *name, const char *help, const hfl_hist *h);

/* Fills t for a request: status 0 is /metrics, 1 is /status (JSON). */
typedef void (*hfl_metrics_render)(void *ctx, int status, hfl_text *t);

typedef struct hfl_metrics_server hfl_metrics_server;
/* Serves addr ([http://]HOST:PORT; port 0 picks one); url gets
 * "http://HOST:PORT/metrics". NULL with a one-line err. */
hfl_metrics_server *hfl_metrics_serve(const char *addr, hfl_metrics_render render, void *ctx, char *url,
                                      size_t url_cap, char *err);
void hfl_metrics_close(hfl_metrics_server *s);

#endif
