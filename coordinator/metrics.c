/* metrics.c: --metrics ADDR, the coordinator watched over HTTP
 * (proto/metrics_http.h): Prometheus metrics on /metrics and a short JSON
 * summary of the run on /status. Each request renders under the
 * coordinator's lock from counters the round engine keeps anyway and the
 * round log, O(clients + rounds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "util/util.h"

static const char *const reject_names[COORD_REJ_KINDS] = {"malformed", "wrong_round", "not_tasked", "samples",
                                                          "codec", "payload", "late", "store"};

/* The Prometheus page; the caller holds c->lock. */
static void render_metrics(const coord *c, hfl_text *t) {
    int rounds = c->rounds.n, failed = 0;
    double up = 0, down = 0, loss = 0;
    for (int i = 0; i < rounds; i++) {
        const round_record *e = &c->rounds.v[i];
        failed += strcmp(e->status, "ok") != 0;
        up += e->bytes_up, down += e->bytes_down;
        if (e->has_test) loss = e->test_loss;
    }
    if (c->r.open) up += (double)c->r.bytes_up, down += (double)c->r.bytes_down;
    hfl_prom_head(t, "hfl_rounds_total", "counter", "Rounds closed, aggregated or failed.");
    hfl_text_put(t, "hfl_rounds_total %d\n", rounds);
    hfl_prom_head(t, "hfl_rounds_failed_total", "counter", "Rounds closed without moving the global model.");
    hfl_text_put(t, "hfl_rounds_failed_total %d\n", failed);
    hfl_prom_head(t, "hfl_rounds_planned", "gauge", "Rounds the run is to take (--rounds).");
    hfl_text_put(t, "hfl_rounds_planned %d\n", c->cfg.rounds);
    hfl_prom_head(t, "hfl_round", "gauge", "The open round, or the last one.");
    hfl_text_put(t, "hfl_round %d\n", c->r.round);
    hfl_prom_head(t, "hfl_model_version", "gauge", "Aggregations the global model has taken.");
    hfl_text_put(t, "hfl_model_version %d\n", c->version);
    hfl_prom_head(t, "hfl_run_complete", "gauge", "1 once every round is done.");
    hfl_text_put(t, "hfl_run_complete %d\n", c->done ? 1 : 0);
    double eps, delta;
    if (dp_epsilon(c, &eps, &delta)) {
        hfl_prom_head(t, "hfl_dp_epsilon", "gauge", "Differential privacy spent so far: epsilon at hfl_dp_delta (RDP accountant).");
        hfl_text_put(t, "hfl_dp_epsilon %.17g\n", eps);
        hfl_prom_head(t, "hfl_dp_delta", "gauge", "The delta hfl_dp_epsilon holds at.");
        hfl_text_put(t, "hfl_dp_delta %.17g\n", delta);
    }

    int planned = 0, live = 0, left = 0, revoked = 0, inflight = 0, drawn = 0, benched = 0;
    double now = hfl_now(), accepted = 0, overdue = 0;
    for (int i = 0; i < c->n_clients; i++) {
        const coord_client *cl = &c->clients[i];
        benched += cl->has_plan && cl->benched_until > c->r.round;
        overdue += cl->overdue;
        planned += cl->has_plan;
        live += cl->has_plan && !cl->left[0] && now - cl->last_seen <= c->cfg.liveness_s;
        left += cl->left[0] != 0;
        revoked += cl->revoked;
        inflight += cl->late_round != 0;
        drawn += c->r.open && c->r.slot[i].selected && !c->r.slot[i].received && !c->r.slot[i].refused;
        accepted += (double)cl->updates;
    }
    hfl_prom_head(t, "hfl_clients", "gauge", "Clients by state: registered (said hello), planned, live (heard from within "
                                    "--liveness), drawn (tasked in the open round, not answered), in_flight (training "
                                    "an earlier round's task), left, revoked, benched (let a deadline pass with a task: "
                                    "not drawn for a while).");
    hfl_text_put(t, "hfl_clients{state=\"registered\"} %d\nhfl_clients{state=\"planned\"} %d\nhfl_clients{state=\"live\"} %d\n"
           "hfl_clients{state=\"drawn\"} %d\nhfl_clients{state=\"in_flight\"} %d\nhfl_clients{state=\"left\"} %d\n"
           "hfl_clients{state=\"revoked\"} %d\nhfl_clients{state=\"benched\"} %d\n",
        c->n_clients, planned, live, drawn, inflight, left, revoked, benched);
    hfl_prom_head(t, "hfl_tasks_overdue_total", "counter",
                  "Tasks whose deadline passed in their client's hands without an update or a decline.");
    hfl_text_put(t, "hfl_tasks_overdue_total %.0f\n", overdue);
    hfl_prom_head(t, "hfl_client_tasks_overdue", "gauge", "A client's tasks that went overdue (clients with any).");
    for (int i = 0; i < c->n_clients; i++)
        if (c->clients[i].overdue > 0) {
            hfl_text_put(t, "hfl_client_tasks_overdue{client=\"");
            hfl_prom_label(t, c->clients[i].name);
            hfl_text_put(t, "\"} %d\n", c->clients[i].overdue);
        }
    hfl_prom_head(t, "hfl_updates_accepted_total", "counter", "Updates added to a round's aggregate.");
    hfl_text_put(t, "hfl_updates_accepted_total %.0f\n", accepted);
    hfl_prom_head(t, "hfl_updates_rejected_total", "counter", "Updates refused, by reason.");
    uint64_t upd = 0;
    for (int k = 0; k < COORD_REJ_KINDS; k++) {
        hfl_text_put(t, "hfl_updates_rejected_total{reason=\"%s\"} %llu\n", reject_names[k], (unsigned long long)c->rejected_update[k]);
        upd += c->rejected_update[k];
    }
    hfl_prom_head(t, "hfl_requests_rejected_total", "counter",
         "Other requests answered with an error (malformed frames, bad tokens, refused hellos).");
    hfl_text_put(t, "hfl_requests_rejected_total %llu\n", (unsigned long long)(c->rejected > upd ? c->rejected - upd : 0));
    hfl_prom_head(t, "hfl_challenges_issued_total", "counter", "Hello challenges signed and sent.");
    hfl_text_put(t, "hfl_challenges_issued_total %llu\n", (unsigned long long)c->challenges_issued);
    hfl_prom_head(t, "hfl_hellos_refused_total", "counter",
         "Hellos refused, by reason: rate_limited (--hello-rate), challenge_not_pending (spent, expired or "
         "displaced: the client says hello again), registry_full, denied (revoked, another CA, wrong role, bad fields).");
    static const char *const hello_kinds[COORD_HELLO_REFUSED_KINDS] = {"rate_limited", "challenge_not_pending",
                                                                        "registry_full", "denied"};
    for (int k = 0; k < COORD_HELLO_REFUSED_KINDS; k++)
        hfl_text_put(t, "hfl_hellos_refused_total{reason=\"%s\"} %llu\n", hello_kinds[k],
                     (unsigned long long)c->hellos_refused[k]);
    hfl_prom_head(t, "hfl_uplink_bytes_total", "counter", "Bytes of updates received.");
    hfl_text_put(t, "hfl_uplink_bytes_total %.0f\n", up);
    hfl_prom_head(t, "hfl_downlink_bytes_total", "counter", "Bytes of tasks sent.");
    hfl_text_put(t, "hfl_downlink_bytes_total %.0f\n", down);
    hfl_prom_hist(t, "hfl_round_duration_seconds", "Wall time from a round's open to its close.", &c->round_hist);
    hfl_prom_hist(t, "hfl_aggregation_duration_seconds", "Wall time of an aggregation: the mean, the checks, the server step.",
         &c->agg_hist);
    hfl_prom_hist(t, "hfl_evaluation_duration_seconds", "Wall time of evaluating a global model on the test set.", &c->eval_hist);
    hfl_prom_head(t, "hfl_test_accuracy", "gauge", "Test accuracy of the last evaluated global model.");
    hfl_text_put(t, "hfl_test_accuracy %.9g\n", c->final_acc);
    hfl_prom_head(t, "hfl_test_loss", "gauge", "Test loss of the last evaluated global model.");
    hfl_text_put(t, "hfl_test_loss %.9g\n", loss);
    hfl_prom_head(t, "hfl_client_predicted_peak_bytes", "gauge", "A client's predicted peak memory for a training step.");
    for (int i = 0; i < c->n_clients; i++)
        if (c->clients[i].measured_peak > 0) {
            hfl_text_put(t, "hfl_client_predicted_peak_bytes{client=\"");
            hfl_prom_label(t, c->clients[i].name);
            hfl_text_put(t, "\"} %.0f\n", c->clients[i].predicted_peak);
        }
    hfl_prom_head(t, "hfl_client_measured_peak_bytes", "gauge", "A client's measured peak memory for a training step.");
    for (int i = 0; i < c->n_clients; i++)
        if (c->clients[i].measured_peak > 0) {
            hfl_text_put(t, "hfl_client_measured_peak_bytes{client=\"");
            hfl_prom_label(t, c->clients[i].name);
            hfl_text_put(t, "\"} %.0f\n", c->clients[i].measured_peak);
        }
}

static void render_status(const coord *c, hfl_text *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "round", c->r.round);
    cJSON_AddBoolToObject(o, "open", c->r.open);
    cJSON_AddNumberToObject(o, "rounds_planned", c->cfg.rounds);
    cJSON_AddNumberToObject(o, "rounds_closed", c->rounds.n);
    cJSON_AddNumberToObject(o, "model_version", c->version);
    cJSON_AddBoolToObject(o, "complete", c->done);
    cJSON_AddNumberToObject(o, "clients", c->n_clients);
    cJSON_AddNumberToObject(o, "final_test_acc", c->final_acc);
    cJSON_AddStringToObject(o, "model_sha256", c->final_sha256);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    hfl_text_put(t, "%s\n", s ? s : "{}");
    free(s);
}

static void render(void *ctx, int status, hfl_text *t) {
    coord *c = ctx;
    pthread_mutex_lock(&c->lock);
    if (status) render_status(c, t);
    else render_metrics(c, t);
    pthread_mutex_unlock(&c->lock);
}

int metrics_start(coord *c, const char *addr, char *err) {
    char url[128];
    if (!(c->metrics = hfl_metrics_serve(addr, render, c, url, sizeof url, err))) return -1;
    if (!c->cfg.quiet && url[0]) printf("metrics on %s\n", url);
    return 0;
}

void metrics_stop(coord *c) {
    hfl_metrics_close(c->metrics);
    c->metrics = NULL;
}
