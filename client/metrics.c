/* metrics.c: hfl-client --metrics ADDR, a client watched over HTTP
 * (proto/metrics_http.h): Prometheus metrics on /metrics, a JSON summary on
 * /status. The training loop counts into s->m under its lock after each task
 * and update (client_metrics_*); NNG's threads render from there, so a
 * request never waits for a round. */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "client/client.h"

static void counter(hfl_text *t, const char *name, const char *help, const char *client, double v) {
    hfl_prom_head(t, name, "counter", help);
    hfl_text_put(t, "%s{client=\"", name);
    hfl_prom_label(t, client);
    hfl_text_put(t, "\"} %.0f\n", v);
}

static void gauge(hfl_text *t, const char *name, const char *help, const char *client, double v) {
    hfl_prom_head(t, name, "gauge", help);
    hfl_text_put(t, "%s{client=\"", name);
    hfl_prom_label(t, client);
    hfl_text_put(t, "\"} %.9g\n", v);
}

static void render(void *ctx, int status, hfl_text *t) {
    client_state *s = ctx;
    client_metrics *m = &s->m;
    pthread_mutex_lock(&m->lock);
    const char *n = m->name;
    if (status) { /* cJSON escapes the name and prints a non-finite loss as null */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "client", n);
        cJSON_AddNumberToObject(o, "round", m->round);
        cJSON_AddNumberToObject(o, "tasks", m->tasks);
        cJSON_AddNumberToObject(o, "updates_sent", m->updates_sent);
        cJSON_AddNumberToObject(o, "updates_refused", m->updates_refused);
        cJSON_AddNumberToObject(o, "declined", m->declined);
        cJSON_AddNumberToObject(o, "samples_trained", m->samples_trained);
        cJSON_AddNumberToObject(o, "loss", m->loss);
        cJSON_AddNumberToObject(o, "measured_peak_bytes", m->measured_peak);
        char *text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        hfl_text_put(t, "%s\n", text ? text : "{}");
        free(text);
    } else {
        counter(t, "hfl_client_tasks_total", "Tasks received from the coordinator.", n, m->tasks);
        counter(t, "hfl_client_rounds_declined_total", "Tasks declined (--dropout).", n, m->declined);
        counter(t, "hfl_client_updates_sent_total", "Updates the coordinator accepted.", n, m->updates_sent);
        counter(t, "hfl_client_updates_refused_total", "Updates the coordinator refused.", n, m->updates_refused);
        counter(t, "hfl_client_samples_trained_total", "Samples trained, over all rounds.", n, m->samples_trained);
        counter(t, "hfl_client_uplink_bytes_total", "Bytes of updates sent.", n, m->bytes_up);
        counter(t, "hfl_client_downlink_bytes_total", "Bytes of tasks received.", n, m->bytes_down);
        gauge(t, "hfl_client_round", "The round of the last task.", n, m->round);
        gauge(t, "hfl_client_train_loss", "Training loss of the last round's last epoch.", n, m->loss);
        gauge(t, "hfl_client_memory_budget_bytes", "The memory budget (0: none).", n, m->budget);
        gauge(t, "hfl_client_predicted_peak_bytes", "The plan's predicted peak memory of a step.", n, m->predicted_peak);
        gauge(t, "hfl_client_measured_peak_bytes", "The measured peak memory of a step (0: not yet).", n,
              m->measured_peak);
        hfl_prom_hist(t, "hfl_client_train_duration_seconds", "Wall time of a round's local training.", &m->train_hist);
    }
    pthread_mutex_unlock(&m->lock);
}

int client_metrics_start(const client_options *o, client_state *s, char *err) {
    snprintf(s->m.name, sizeof s->m.name, "%s", o->name);
    pthread_mutex_init(&s->m.lock, NULL);
    char url[128];
    if (!(s->metrics = hfl_metrics_serve(o->metrics, render, s, url, sizeof url, err))) return -1;
    if (!o->quiet && url[0]) printf("%s: metrics on %s\n", o->name, url);
    return 0;
}

void client_metrics_stop(client_state *s) {
    hfl_metrics_close(s->metrics);
    s->metrics = NULL;
}

void client_metrics_task(client_state *s, int round, size_t bytes) {
    pthread_mutex_lock(&s->m.lock);
    s->m.tasks++, s->m.round = round, s->m.bytes_down += (double)bytes;
    pthread_mutex_unlock(&s->m.lock);
}

void client_metrics_trained(client_state *s, double loss, double seconds) {
    pthread_mutex_lock(&s->m.lock);
    s->m.loss = loss, s->m.samples_trained += (double)s->trained;
    s->m.budget = (double)s->budget.bytes, s->m.predicted_peak = (double)s->chosen.predicted;
    s->m.measured_peak = (double)s->budget.measured_peak;
    hfl_hist_observe(&s->m.train_hist, seconds);
    pthread_mutex_unlock(&s->m.lock);
}

void client_metrics_sent(client_state *s, int accepted, size_t bytes, int declined) {
    pthread_mutex_lock(&s->m.lock);
    if (declined) s->m.declined++;
    else if (accepted) s->m.updates_sent++, s->m.bytes_up += (double)bytes;
    else s->m.updates_refused++;
    pthread_mutex_unlock(&s->m.lock);
}
