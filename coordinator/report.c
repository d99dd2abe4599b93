/* report.c: the coordinator's report, and a finished round's publication
 * (its event, its progress line, the report). The event log is events.c's.
 *
 * The report is rewritten atomically after every round, so a reader never sees
 * half a file and a killed run still leaves the rounds it finished. Keys
 * `model`, `params`, `trainable_params` (LoRA: the adapters), `codec`, `transport`, `coordinator_device` ({backend,
 * name, sum: "memory" or "disk"}; each client's backend and device are in `clients[].device` and
 * `clients[].plan`), `wall_s`, `final_test_acc` and
 * `rounds` (each `{round, test_acc, test_loss, clients, bytes_up,
 * bytes_down, wall_s}`, and test_bpb for a language model) are stable. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "plan/planner.h"
#include "util/memmeter.h"
#include "util/util.h"

char *report_render(coord *c, size_t *len) {
    const coord_config *cfg = &c->cfg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", c->spec.name);
    cJSON_AddNumberToObject(o, "params", (double)c->spec.n_params);
    cJSON_AddNumberToObject(o, "trainable_params", (double)c->spec.n_trainable); /* LoRA: the adapters */
    cJSON_AddStringToObject(o, "codec", c->codec->name);
    cJSON_AddStringToObject(o, "downlink", c->down.codec->name);
    cJSON_AddBoolToObject(o, "downlink_delta", c->down.delta);
    cJSON_AddStringToObject(o, "transport", cfg->tls.insecure ? "tcp" : "tls+tcp");
    cJSON *agg = cJSON_AddObjectToObject(o, "coordinator_device");
    cJSON_AddStringToObject(agg, "backend", c->be ? c->be->name : "cpu");
    cJSON_AddStringToObject(agg, "name", c->dev.name);
    cJSON_AddStringToObject(agg, "sum", c->agg.disk ? "disk" : "memory"); /* --sum-on-disk */
    if (c->eval) { /* the test set is evaluated in chunks of this many samples */
        cJSON_AddNumberToObject(agg, "eval_batch", hfl_trainer_plan(c->eval)->cfg.batch);
        cJSON_AddNumberToObject(agg, "eval_arena_bytes", (double)hfl_trainer_device_bytes(c->eval));
    }
    cJSON_AddNumberToObject(o, "wall_s", hfl_now() - c->started);
    cJSON_AddNumberToObject(o, "final_test_acc", c->final_acc);
    cJSON_AddStringToObject(o, "final_model_sha256", c->final_sha256);
    cJSON_AddStringToObject(o, "initial_model_sha256", c->initial_sha256);
    double eps, delta;
    if (dp_epsilon(c, &eps, &delta)) { /* spent over every round charged (dp.h) */
        cJSON_AddNumberToObject(o, "dp_epsilon", eps);
        cJSON_AddNumberToObject(o, "dp_delta", delta);
    }
    if (c->stop_reason[0]) cJSON_AddStringToObject(o, "stopped", c->stop_reason);
    if (cfg->init_model[0]) cJSON_AddStringToObject(o, "init_model", cfg->init_model);
    if (cfg->save_model[0]) cJSON_AddStringToObject(o, "model_file", cfg->save_model);
    if (cfg->clip_norm > 0) cJSON_AddStringToObject(o, "clip", cfg->clip_adaptive ? "adaptive" : "fixed");
    else cJSON_AddStringToObject(o, "clip", "off");
    cJSON_AddNumberToObject(o, "max_client_samples", (double)cfg->max_client_samples);
    cJSON_AddNumberToObject(o, "max_share", cfg->max_share);
    cJSON_AddStringToObject(o, "server_opt", cfg->server_opt);
    cJSON_AddStringToObject(o, "strategy", cfg->strategy);
    cJSON_AddBoolToObject(o, "complete", c->done);
    cJSON_AddNumberToObject(o, "restarts", c->restarts);
    cJSON_AddNumberToObject(o, "rounds_planned", cfg->rounds);
    cJSON_AddNumberToObject(o, "rounds_aggregated", c->version);
    cJSON_AddNumberToObject(o, "clients_per_round", cfg->clients_per_round);
    if (cfg->min_quorum > 0) cJSON_AddNumberToObject(o, "min_quorum", cfg->min_quorum);
    else cJSON_AddNullToObject(o, "min_quorum"); /* quorum_fraction of each round's draw */
    cJSON_AddNumberToObject(o, "quorum_fraction", cfg->quorum_fraction);
    cJSON_AddNumberToObject(o, "local_epochs", cfg->local_epochs);
    if (cfg->local_steps > 0) cJSON_AddNumberToObject(o, "local_steps", cfg->local_steps);
    else cJSON_AddNullToObject(o, "local_steps"); /* epochs (or --local-work capacity's own steps) */
    char sched[64];
    hfl_lr_schedule_name(&cfg->lr_schedule, sched, sizeof sched);
    cJSON_AddStringToObject(o, "lr_schedule", sched);
    cJSON_AddNumberToObject(o, "batch", cfg->batch);
    cJSON_AddNumberToObject(o, "lr", cfg->lr);
    cJSON_AddNumberToObject(o, "momentum", cfg->momentum);
    cJSON_AddNumberToObject(o, "weight_decay", cfg->weight_decay);
    cJSON_AddNumberToObject(o, "prox_mu", cfg->prox_mu);
    cJSON_AddBoolToObject(o, "keep_local_optimizer", cfg->keep_local_optimizer);
    cJSON_AddStringToObject(o, "optimizer", hfl_optimizer_name(cfg->optimizer));
    if (cfg->optimizer == HFL_OPTIM_ADAMW) {
        cJSON *b = cJSON_AddArrayToObject(o, "betas");
        cJSON_AddItemToArray(b, cJSON_CreateNumber(cfg->beta1));
        cJSON_AddItemToArray(b, cJSON_CreateNumber(cfg->beta2));
    }
    cJSON_AddNumberToObject(o, "over_select", cfg->over_select);
    cJSON_AddStringToObject(o, "late", cfg->async_concurrency > 0 || cfg->late_fold ? "fold" : "drop");
    cJSON_AddBoolToObject(o, "virtual_time", cfg->virtual_time);
    cJSON_AddStringToObject(o, "local_work", cfg->capacity_work ? "capacity" : "epochs");
    cJSON_AddNumberToObject(o, "async_concurrency", cfg->async_concurrency);
    cJSON_AddNumberToObject(o, "block", cfg->block);
    cJSON_AddNumberToObject(o, "seed", (double)cfg->seed);
    cJSON_AddNumberToObject(o, "rejected_messages", (double)c->rejected);
    cJSON_AddNumberToObject(o, "connections_refused", (double)__atomic_load_n(&c->conns_refused, __ATOMIC_RELAXED));
    cJSON_AddNumberToObject(o, "connections_idle_closed", (double)__atomic_load_n(&c->conns_reaped, __ATOMIC_RELAXED));
    cJSON_AddNumberToObject(o, "connections_handshake_closed",
                            (double)__atomic_load_n(&c->conns_unshaken, __ATOMIC_RELAXED));
    cJSON_AddNumberToObject(o, "challenges_issued", (double)c->challenges_issued);
    cJSON *hr = cJSON_AddObjectToObject(o, "hellos_refused"); /* by kind: coord.h */
    cJSON_AddNumberToObject(hr, "rate_limited", (double)c->hellos_refused[COORD_HELLO_RATE]);
    cJSON_AddNumberToObject(hr, "challenge_not_pending", (double)c->hellos_refused[COORD_HELLO_CHALLENGE]);
    cJSON_AddNumberToObject(hr, "registry_full", (double)c->hellos_refused[COORD_HELLO_FULL]);
    cJSON_AddNumberToObject(hr, "denied", (double)c->hellos_refused[COORD_HELLO_DENIED]);
    uint64_t rss = 0, peak = 0;
    if (hfl_mem_read(&rss, &peak, NULL) == 0) { /* the coordinator process, so far */
        cJSON_AddNumberToObject(o, "coordinator_rss_bytes", (double)rss);
        cJSON_AddNumberToObject(o, "coordinator_peak_rss_bytes", (double)peak);
    }
    cJSON_AddItemToObject(o, "rounds", round_log_json(&c->rounds));
    cJSON_AddItemToObject(o, "clients", registry_report(c));
    cJSON_AddItemToObject(o, "replans", replan_report(c)); /* replan.c: plans changed when memory shrank */
    if (c->replans_dropped) cJSON_AddNumberToObject(o, "replans_dropped", c->replans_dropped);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return NULL;
    size_t n = strlen(text);
    text[n] = '\n'; /* cJSON's terminator becomes the final newline */
    *len = n + 1;
    return text;
}

int report_store(coord *c, char *text, size_t len, char *err) {
    if (!text) return hfl_errf(err, "out of memory printing the report");
    pthread_mutex_lock(&c->report_lock);
    int rc = hfl_write_file_atomic(c->cfg.report_path, text, len, err);
    pthread_mutex_unlock(&c->report_lock);
    free(text);
    return rc;
}

int report_write(coord *c, char *err) {
    if (!c->cfg.report_path[0]) return 0;
    size_t len = 0;
    char *text = report_render(c, &len);
    return report_store(c, text, len, err);
}

/* Publishes a finished entry of the round log: its event, its progress line
 * and the report; *text gets the report to store when text is given (the
 * evaluation thread writes it without the lock), else it is written here. */
void report_publish_round(coord *c, int i, char **text, size_t *len) {
    const round_record *e = &c->rounds.v[i];
    cJSON *ev = round_record_json(e);
    if (ev) {
        cJSON_AddStringToObject(ev, "event", "round");
        events_log(c, ev);
    }
    char late[32] = ""; /* --late fold, --async: updates of earlier rounds it took */
    if (e->has_late_folded && e->late_folded > 0) snprintf(late, sizeof late, " +%d late", (int)e->late_folded);
    if (!c->cfg.quiet)
        printf("round %d/%d  %-6s test_acc %.4f  test_loss %.4f  clients %d/%d%s  up %.2f MB  down %.2f MB  %.2f s\n",
               (int)e->round, c->cfg.rounds, e->status, e->has_test ? e->test_acc : NAN,
               e->has_test ? e->test_loss : NAN, (int)e->clients, (int)e->selected, late, e->bytes_up / 1e6,
               e->bytes_down / 1e6, e->wall_s);
    fflush(stdout);
    char err[HFL_ERR_LEN];
    if (text) *text = c->cfg.report_path[0] ? report_render(c, len) : NULL;
    else if (report_write(c, err) != 0) fprintf(stderr, "hfl-coordinator: %s\n", err);
}
