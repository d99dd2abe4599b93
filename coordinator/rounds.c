/* rounds.c: the round engine.
 *
 * A round opens once enough clients are registered: K of them are drawn
 * (seeded, so a run is reproducible) and each gets the same task. Updates
 * are validated, decoded, clipped and added to the round's exact sum
 * (aggregate.h: sum += share * min(1, clip / norm) * delta, in fixed point,
 * the same bits in any arrival order); share = samples / the selected
 * clients' samples, the samples capped at the hello by --max-client-samples
 * and per update so that none outweighs --max-share of the round. The main loop closes the round
 * when every selected client has answered (with --over-select F, K (1 + F)
 * are drawn and the first K updates close it), or at the deadline if the quorum
 * is in; then the mean delta sum / sum(shares) moves the global model
 * through the server optimizer (server_opt.h; FedAvg by default, McMahan et
 * al. 2017: global += mean), the
 * test set is evaluated and the round is logged with the model's SHA-256.
 * An adaptive clip then moves toward the median update norm: C *= exp(-0.2
 * (b - 0.5)), b the fraction of the round's norms at most C (Andrew et al.
 * 2021, "Differentially private learning with adaptive clipping", with
 * eta = 0.2 and the target quantile 0.5); it is fixed for each round before
 * the round opens, so it never depends on arrival order.
 * A round that misses its quorum, or whose aggregate is not finite, leaves
 * the global model untouched. A client with nothing to do is told to come
 * back later, or held until it has something to do (server.c).
 *
 * The engine is two state machines, both driven under c->lock: the round's,
 * by rounds_tick (coordinator/main.c's loop: every 5 ms, or sooner when a
 * handler signals c->tick), and each client's slot in it (coord_slot), by
 * the request handlers.
 *
 *   The round (coord_round.open, c->done):
 *
 *     CLOSED --round_open--> OPEN --round_aggregate--> PUBLISHING --> CLOSED
 *       |  (rounds_tick: enough live    |  (all answered, K in, or the       (evaluate.c,
 *       |   planned clients; --async:   |   deadline with the quorum; secure  report_publish_round;
 *       |   at once)                    |   aggregation: its unmasking done)  the next round may
 *       |                               |                                     open meanwhile)
 *       |                               +--round_finish(reason)--> CLOSED (model kept: no
 *       |                                  quorum, nobody to draw, aggregate not finite,
 *       |                                  secure aggregation failed)
 *       +--(DP budget spent, or the last round published)--> DONE: pulls get bye
 *
 *   Invariants. OPEN: the task (r->task) is fixed, every drawn slot's id
 *   is in r->selected, and the n_received received slots' updates are in
 *   the sum, each exactly once. CLOSED: the slots and the counts describe
 *   the round just closed (the report reads them) until round_open zeroes
 *   them and resets the sum. A round closes only after the previous one is
 *   published (eval_busy).
 *
 *   A client's slot in the open round:
 *
 *     IDLE --round_select / async_draw--> DRAWN --round_pull--> TASKED
 *     TASKED --rounds_update (accepted)--> RECEIVED
 *     TASKED --rounds_update (refused: reject)--> REFUSED (told skip_round)
 *     TASKED --round_decline--> DECLINED
 *     TASKED --round_missed (--virtual-time)--> MISSED
 *     DRAWN or TASKED --secagg's phases (sa_drop)--> DROPPED
 *
 *   On an aggregator (--upstream, upstream.c) rounds_tick does nothing:
 *
 *     CLOSED --rounds_assign (the root's sync names a new open round)--> OPEN
 *     OPEN --rounds_tier_close (every drawn client final, or its deadline
 *            near: the sum and rows go to the root as a partial)--> CLOSED
 *     OPEN --(the root's sync says the round closed or moved on)--> CLOSED
 *     CLOSED --(the root's sync says done)--> DONE: pulls get bye
 *
 *   It draws nobody (the root's draw names its clients, with their caps and
 *   the root's divisor), never aggregates into a model (rounds_adopt takes
 *   the root's new model) and never evaluates; its slots move as above.
 *
 *   RECEIVED and the refused states (coord_slot.refused, SLOT_*) are final
 *   for the round: a second update is refused without touching the sum. A
 *   TASKED client may pull again: it gets the task without weights, or with
 *   them once (resend). Every final state counts toward closing the round.
 *   An update for an earlier round whose slot never closed is folded into
 *   the open round (round_fold, --late fold and --async) rather than
 *   refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "proto/secagg.h"
#include "model/safetensors.h"
#include "kernels/philox.h"
#include "util/util.h"


/* The global model's SHA-256 (its float bytes as stored) in hex. */
static void model_sha256(const coord *c, char hex[65]) {
    hfl_sha256_hex(c->global, c->spec.n_params * sizeof(float), hex);
}

/* Clients a synchronous round draws: K (1 + --over-select), fewer when fewer are live. */
static int round_draw_size(const coord *c) {
    return c->cfg.clients_per_round + (int)ceil(c->cfg.clients_per_round * c->cfg.over_select);
}

int rounds_init(coord *c, char *err) {
    memset(&c->r, 0, sizeof c->r);
    /* Updates, their sum and the server optimizer's state cover the model's
     * trainable part (model.h: all of it, or LoRA's adapters). */
    size_t nt = c->spec.n_trainable;
    c->clip = c->cfg.clip_norm;
    /* the sum, the held rows, the mean and the server step live where the
     * coordinator evaluates (--device): the GPU's memory, or the host's */
    if (hfl_sopt_parse(c->cfg.server_opt, &c->sopt, err) != 0 || hfl_sopt_init(&c->sopt, nt, err) != 0 ||
        hfl_rule_parse(c->cfg.strategy, &c->rule, err) != 0 || hfl_agg_init_on(&c->agg, c->be, nt, 1, err) != 0 ||
        dp_init(c, round_draw_size(c), err) != 0)
        return -1;
    /* a robust rule holds every update of a round, decoded, a row for each
     * client drawn (over-selected too: round_select's draw): planned here, once */
    char why[HFL_ERR_LEN];
    if (c->rule.kind != HFL_RULE_FEDAVG && hfl_agg_hold(&c->agg, round_draw_size(c), c->cfg.robust_memory, why) != 0)
        return hfl_errf(err, "--strategy %s: %s", c->cfg.strategy, why);
    if (c->cfg.secure_agg && secagg_check_settings(c, err) != 0) return -1;
    model_sha256(c, c->final_sha256); /* before any round: the initial model's */
    memcpy(c->initial_sha256, c->final_sha256, sizeof c->initial_sha256);
    return 0;
}

void coord_parse_clip(const char *s, coord_config *cfg, char *err) {
    double d;
    if (!strcmp(s, "off")) {
        cfg->clip_norm = 0, cfg->clip_adaptive = 0;
    } else if (!strncmp(s, "adaptive", 8) && (s[8] == 0 || s[8] == ':')) {
        cfg->clip_adaptive = 1;
        cfg->clip_norm = COORD_CLIP_DEFAULT;
        if (s[8] == ':' && hfl_parse_double(s + 9, 1e-6, 1e6, &d, err) == 0) cfg->clip_norm = d;
    } else if (hfl_parse_double(s, 1e-6, 1e6, &d, err) == 0) {
        cfg->clip_norm = d, cfg->clip_adaptive = 0;
    } else {
        snprintf(err, HFL_ERR_LEN, "'%s' is not off, adaptive[:C0] or a norm in [1e-6, 1e6]", s);
    }
}


/* Updates a round closed at its deadline needs: --min-quorum, else
 * --quorum-fraction of `drawn` (at least one). */
static int round_quorum(const coord *c, int drawn) {
    if (c->cfg.min_quorum > 0) return c->cfg.min_quorum;
    int q = (int)ceil(c->cfg.quorum_fraction * drawn - 1e-9);
    return q < 1 ? 1 : q;
}

/* Draws K of the registered clients: a partial Fisher-Yates shuffle from philox
 * over the clients in name order, so the draw does not depend on who said
 * hello first. A client not heard from for --liveness (a waiting client asks
 * every WAIT_MS) is presumed dead or busy and not drawn, so a killed client
 * no longer costs every later round its deadline. */
/* A client's declared speed: its plan's capacity_samples_per_s (hfl-sim: its
 * profile's), else its measured predicted_samples_per_s; 0 when unknown. */
static double client_speed(const coord_client *cl) {
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(cl->hello, "plan");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(plan, "capacity_samples_per_s");
    if (!cJSON_IsNumber(v)) v = cJSON_GetObjectItemCaseSensitive(plan, "predicted_samples_per_s");
    return cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
}

/* --local-work capacity: the drawn clients' fixed-epoch times t = epochs x
 * samples / speed; the round gets the median T, and each client
 * ceil(T x speed / batch) optimizer steps (at least 1), so the round's clients
 * finish together: a slow client trains less than its epochs, a fast one
 * more. A round with a client of unknown speed keeps the epochs. */
static int capacity_steps(const coord *c, int id) {
    double v = client_speed(&c->clients[id]);
    /* --async: a round that drew nobody at its open keeps the last target */
    double target = c->r.work_target > 0 ? c->r.work_target : c->work_target;
    if (target <= 0 || v <= 0) return 0; /* unknown: its epochs */
    double steps = ceil(target * v / c->cfg.batch);
    return steps < 1 ? 1 : steps > 1e8 ? 100000000 : (int)steps;
}

static void round_capacity(coord *c) {
    coord_round *r = &c->r;
    if (!c->cfg.capacity_work || r->n_selected == 0) return;
    double *t = hfl_malloc(sizeof(double) * (size_t)r->n_selected);
    int known = 1;
    for (int i = 0; i < r->n_selected && known; i++) {
        double v = client_speed(&c->clients[r->selected[i]]);
        known = v > 0;
        t[i] = known ? c->cfg.local_epochs * (double)r->slot[r->selected[i]].samples_at_select / v : 0;
    }
    if (known) {
        r->work_target = c->work_target = hfl_median(t, (size_t)r->n_selected);
        for (int i = 0; i < r->n_selected; i++) r->slot[r->selected[i]].local_steps = capacity_steps(c, r->selected[i]);
    }
    free(t);
}

static int by_name(const void *a, const void *b, void *ctx) {
    const coord *c = ctx;
    return strcmp(c->clients[*(const int *)a].name, c->clients[*(const int *)b].name);
}

/* --async: tasks of earlier rounds still out. One older than the staleness
 * bound, or held by a client that left, is given up on. */
static void async_count_inflight(coord *c) {
    c->n_inflight = 0;
    for (int i = 0; i < c->n_clients; i++) {
        coord_client *cl = &c->clients[i];
        if (cl->late_round && (c->r.round - cl->late_round > COORD_ASYNC_MAX_STALENESS || cl->left[0]))
            cl->late_round = 0;
        c->n_inflight += cl->late_round != 0;
    }
}

static void round_select(coord *c) {
    coord_round *r = &c->r;
    int async = c->cfg.async_concurrency > 0;
    int *ids = hfl_malloc(sizeof(int) * (size_t)(c->n_clients + 1));
    int n = 0;
    double now = hfl_now(), fleet = 0;
    if (async) async_count_inflight(c);
    for (int i = 0; i < c->n_clients; i++) { /* live planned clients, then sorted by name */
        if (!c->clients[i].has_plan) continue;
        fleet += (double)c->clients[i].samples;
        if (c->clients[i].late_round && async) continue; /* still training an earlier round's task */
        if (overdue_benched(c, i, r->round)) { /* let a deadline pass with a task: backing off (overdue.c) */
            r->n_benched++;
            continue;
        }
        if (now - c->clients[i].last_seen > c->cfg.liveness_s) {
            r->n_silent++;
            continue;
        }
        ids[n++] = i;
    }
    qsort_r(ids, (size_t)n, sizeof *ids, by_name, c);
    r->n_eligible = n;
    /* --over-select F: K (1 + F) drawn, the first K updates close the round;
     * --async C: enough drawn that C train at once, K arrivals close it */
    int want = round_draw_size(c);
    if (async) want = c->cfg.async_concurrency > c->n_inflight ? c->cfg.async_concurrency - c->n_inflight : 0;
    int k = want < n ? want : n;
    r->n_target = c->cfg.clients_per_round < k ? c->cfg.clients_per_round : k;
    if (async) r->n_target = c->cfg.clients_per_round;
    for (int i = 0; i < k; i++) {
        uint32_t u = hfl_philox_u32(c->cfg.seed, HFL_STREAM_SHUFFLE, (uint32_t)r->round, 0xFFFFFFFFu, 0, (uint64_t)i);
        int j = i + (int)((uint64_t)u * (uint64_t)(n - i) >> 32);
        int t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    r->n_selected = k;
    r->samples_planned = 0;
    for (int i = 0; i < k; i++) {
        r->selected[i] = ids[i];
        r->slot[ids[i]].selected = 1;
        r->slot[ids[i]].samples_at_select = c->clients[ids[i]].samples;
        r->slot[ids[i]].declared = c->clients[ids[i]].declared;
        r->samples_planned += (double)c->clients[ids[i]].samples;
    }
    round_capacity(c);
    if (async) {
        /* Weights are shares of the whole fleet's samples, a fixed divisor-free
         * scale for a round whose members are not known in advance (clients
         * drawn later, earlier rounds' tasks folded in); --max-share holds at
         * the close, over the updates the round took (round_aggregate). */
        r->samples_planned = fleet;
        r->cap_total = (int64_t)fleet;
        for (int i = 0; i < k; i++) r->slot[ids[i]].share_cap = r->slot[ids[i]].samples_at_select;
        free(ids);
        return;
    }
    /* --max-share F: no update outweighs F of its round, i.e. its samples
     * count at most F / (1 - F) times the other selected clients' (a round of
     * one has no others to outweigh). Fixed here, before any update arrives. */
    double f = c->cfg.max_share;
    for (int i = 0; i < k; i++) {
        int64_t own = r->slot[ids[i]].samples_at_select;
        double others = r->samples_planned - (double)own;
        double cap = f >= 1 || others <= 0 ? (double)own : floor(f / (1 - f) * others);
        r->slot[ids[i]].share_cap = cap < 1 ? 1 : cap < (double)own ? (int64_t)cap : own;
        r->cap_total += r->slot[ids[i]].share_cap;
    }
    free(ids);
}

static void round_finish(coord *c, const char *reason);

/* This round's task settings, the same for every client (proto/messages.h);
 * the downlink adds the weights, a capacity-aware run each client's steps. */
static void round_task(coord *c) {
    coord_round *r = &c->r;
    hfl_task_msg *t = &r->task;
    t->round = r->round, t->version = c->version;
    snprintf(t->model, sizeof t->model, "%s", c->spec.name);
    t->params = (int64_t)c->spec.n_params, t->trainable = (int64_t)c->spec.n_trainable;
    t->local_epochs = c->cfg.local_epochs;
    t->local_steps = c->cfg.local_steps, t->has_local_steps = c->cfg.local_steps > 0;
    if (c->cfg.lr_schedule.cosine) { /* the run's schedule, and where this round starts on it */
        const hfl_lr_schedule *s = &c->cfg.lr_schedule;
        snprintf(t->lr_schedule, sizeof t->lr_schedule, "cosine");
        t->lr_warmup = s->warmup, t->lr_total = s->total, t->lr_min = s->min_ratio;
        t->lr_step0 = (int64_t)(r->round - 1) * c->cfg.local_steps;
        t->has_lr_schedule = t->has_lr_warmup = t->has_lr_total = t->has_lr_min = t->has_lr_step0 = 1;
    }
    t->batch = c->cfg.batch;
    t->lr = c->cfg.lr, t->momentum = c->cfg.momentum, t->weight_decay = c->cfg.weight_decay;
    t->prox_mu = c->cfg.prox_mu, t->has_prox_mu = c->cfg.prox_mu > 0;
    t->keep_optimizer = t->has_keep_optimizer = c->cfg.keep_local_optimizer;
    if (c->cfg.optimizer == HFL_OPTIM_ADAMW) {
        snprintf(t->optimizer, sizeof t->optimizer, "adamw");
        t->beta1 = c->cfg.beta1, t->beta2 = c->cfg.beta2;
        t->has_optimizer = t->has_beta1 = t->has_beta2 = 1;
    }
    snprintf(t->codec, sizeof t->codec, "%s", c->codec->name);
    t->block = c->cfg.block, t->seed = (int64_t)c->cfg.seed;
    t->deadline_ms = c->cfg.deadline_s * 1000.0;
}

static void round_open(coord *c) {
    coord_round *r = &c->r;
    int next = r->round + 1;
    downlink_reset_cache(c);
    memset(r, 0, sizeof *r);
    r->clip = c->clip;
    hfl_agg_reset(&c->agg, r->clip, COORD_VALUE_BOUND);
    r->round = next;
    r->open = 1;
    r->opened_at = hfl_now();
    if (c->cfg.async_concurrency == 0) overdue_judge(c, next);
    round_select(c);
    spool_sweep(c); /* the last round's spools, but for the late folds that wait (counted by the draw) */
    dp_round_sigma(c, &r->dp_sigma, &r->dp_sigma_count);
    if (!c->cfg.secure_agg && r->dp_sigma > 0) /* central noise: the sum's scale holds it too (dp.h) */
        hfl_agg_widen(&c->agg, r->clip + SECAGG_NOISE_TAIL * r->dp_sigma);

    round_task(c);
    char why[HFL_ERR_LEN] = "";
    if (c->cfg.secure_agg &&
        secagg_round_open(c, r->dp_sigma, r->dp_sigma_count, round_quorum(c, r->n_selected), why) == 0) {
        secagg_task(c, &r->task.secagg);
        r->task.has_secagg = 1;
    }

    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "round_open");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "silent", r->n_silent);
    cJSON_AddNumberToObject(ev, "benched", r->n_benched);
    cJSON_AddNumberToObject(ev, "eligible", r->n_eligible);
    cJSON *sel = cJSON_AddArrayToObject(ev, "selected");
    for (int i = 0; i < r->n_selected; i++) cJSON_AddItemToArray(sel, cJSON_CreateNumber(r->selected[i]));
    events_log(c, ev);
    if (why[0]) round_finish(c, why); /* the ring cannot hold this draw's sum */
}

/* --async: tasks out, of the open round and (in flight) of earlier ones; a
 * drawn client that left the run holds no slot. */
static int async_outstanding(const coord *c) {
    const coord_round *r = &c->r;
    int gone = 0;
    for (int i = 0; i < r->n_selected; i++) {
        int id = r->selected[i];
        gone += c->clients[id].left[0] && !r->slot[id].received && !r->slot[id].refused;
    }
    return r->n_selected - r->n_received - r->n_refused - r->n_declined - r->n_missed - gone + c->n_inflight;
}

/* --async: an idle client is drawn into the open round when it asks and
 * fewer than C tasks are out (FedBuff: a client that finishes gets the
 * current model at once). A client asking for work is idle: a task it still
 * held from an earlier round (a restart) is given up. */
static int async_can_draw(const coord *c, int id) {
    const coord_round *r = &c->r;
    const coord_client *cl = &c->clients[id];
    return c->cfg.async_concurrency > 0 && r->open && !r->slot[id].selected && cl->has_plan && !cl->left[0] &&
           async_outstanding(c) - (cl->late_round != 0) < c->cfg.async_concurrency;
}

static void async_draw(coord *c, int id) {
    coord_round *r = &c->r;
    coord_client *cl = &c->clients[id];
    if (cl->late_round) cl->late_round = 0, c->n_inflight--;
    r->selected[r->n_selected++] = id;
    r->slot[id].selected = 1;
    r->slot[id].mid_round = 1;
    r->slot[id].samples_at_select = cl->samples;
    r->slot[id].declared = cl->declared;
    r->slot[id].share_cap = cl->samples;
    r->slot[id].local_steps = capacity_steps(c, id);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "drawn");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "client", id);
    cJSON_AddNumberToObject(ev, "outstanding", async_outstanding(c));
    events_log(c, ev);
}

int rounds_pull_ready(const coord *c, int id) {
    const coord_round *r = &c->r;
    return c->done || (r->open && r->slot[id].selected && !r->slot[id].received && !r->slot[id].refused) ||
           async_can_draw(c, id);
}

/* A client that holds the open round's task asks for it again past
 * COORD_MAX_RESENDS re-downloads: it is told to skip the round (a pull
 * storm must not cost the coordinator a model's bytes per pull), and the
 * round stops waiting for it. */
static uint8_t *round_resend_capped(coord *c, int id, size_t *len) {
    coord_round *r = &c->r;
    r->slot[id].refused = SLOT_REFUSED;
    r->n_refused++;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "resend_capped");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "client", id);
    events_log(c, ev);
    char msg[160];
    snprintf(msg, sizeof msg, "round %d's task was sent to client %d %d times already (skip the round)", r->round, id,
             1 + COORD_MAX_RESENDS);
    return coord_skip_reply(msg, 1, len);
}

/* A pull from id (see rounds_pull and rounds_pull_again). */
static uint8_t *round_pull(coord *c, int id, int64_t have_version, int again, size_t *len) {
    coord_round *r = &c->r;
    c->clients[id].last_seen = hfl_now();
    if (c->done) {
        if (!c->clients[id].got_bye) c->byes_sent++;
        c->clients[id].got_bye = 1;
        return coord_bye_reply("run complete", len);
    }
    if (!rounds_pull_ready(c, id)) return coord_wait_reply(COORD_WAIT_MS, len);
    if (async_can_draw(c, id)) async_draw(c, id);
    int sent = r->slot[id].tasked; /* it holds this round's task already */
    if (sent && again && r->slot[id].resent >= COORD_MAX_RESENDS) return round_resend_capped(c, id, len);
    int kind = DOWNLINK_FULL, steps = r->slot[id].local_steps;
    hfl_task_msg task = r->task;
    if (steps > 0) task.local_steps = steps, task.has_local_steps = 1; /* capacity-aware work: its own count */
    uint8_t *m = sent && !again ? downlink_sent(c, &task, len)
                                : downlink_task(c, &task, have_version, len, &kind);
    if (!m) return coord_error_reply("cannot encode the task", len);
    if (sent && !again) {
        r->tasks_short++;
    } else {
        r->tasks_delta += kind == DOWNLINK_DELTA;
        r->tasks_held += kind == DOWNLINK_HELD;
        r->slot[id].downloads += kind != DOWNLINK_HELD;
        r->slot[id].resent += sent;
        r->tasks_resent += sent;
        if (!sent) overdue_tasked(c, id);
    }
    r->slot[id].tasked = 1;
    r->bytes_down += *len;
    r->slot[id].bytes_down += (double)*len;
    return m;
}

uint8_t *rounds_pull(coord *c, int id, int64_t have_version, size_t *len) {
    return round_pull(c, id, have_version, 0, len);
}

uint8_t *rounds_pull_again(coord *c, int id, int64_t have_version, size_t *len) {
    return round_pull(c, id, have_version, 1, len);
}

/* A drawn, tasked client that sits the open round out (hfl-client --dropout):
 * the round stops waiting for it. */
static uint8_t *round_decline(coord *c, int id, int64_t round, size_t *len) {
    coord_round *r = &c->r;
    if (!r->open || round != r->round || !r->slot[id].selected || !r->slot[id].tasked || r->slot[id].received || r->slot[id].refused)
        return coord_error_reply("nothing to decline: not tasked in the open round", len);
    r->slot[id].refused = SLOT_DECLINED;
    r->n_declined++;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "declined");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "client", id);
    events_log(c, ev);
    return coord_ack_reply(r->round, 0, 0, len);
}

/* --virtual-time: a tasked client's update simulated past the round's
 * deadline. A device that slow would still be sending when the round closed,
 * so it is left out (ACKed: it was not at fault) and the round stops waiting
 * for it; its simulated time is priced as the deadline. */
static uint8_t *round_missed(coord *c, int id, double sim_s, size_t *len) {
    coord_round *r = &c->r;
    r->slot[id].refused = SLOT_MISSED;
    r->n_missed++;
    r->slot[id].sim_s = sim_s;
    c->clients[id].last_seen = hfl_now();
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "missed_deadline");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "client", id);
    cJSON_AddNumberToObject(ev, "sim_s", sim_s);
    events_log(c, ev);
    if (r->n_received + r->n_missed + r->n_refused + r->n_declined >= r->n_selected) pthread_cond_signal(&c->tick);
    return coord_ack_reply(r->round, 1, 0, len);
}

/* FedBuff's staleness weight 1/sqrt(1 + tau) (Nguyen et al. 2022, sec. 3),
 * rounded to a multiple of 2^-16 so every weight, and the divisor they sum
 * to, is exact whatever order updates arrive in. */
static int64_t staleness_q16(int tau) { return llround(65536.0 / sqrt(1.0 + tau)); }

/* An update tau rounds late, its client tasked there and that round closed
 * without it, joins the open round's sum:
 *   --late fold (tau 1): at half the weight its samples would give, capped
 *   as a fresh update's would be against this round; the divisor counts the
 *   half too;
 *   --async (tau up to COORD_ASYNC_MAX_STALENESS): weighted by its samples
 *   times FedBuff's staleness weight while the divisor counts its samples,
 *   so a stale update moves the model less (FedBuff's sum of s(tau) Delta
 *   over the buffer, here per sample); --max-share holds at the close.
 * Robust rules hold a row per drawn client: no folding there. */
static int round_fold(coord *c, int id, int tau, int64_t samples, double trained, const char *codec,
                      const uint8_t *payload, size_t plen, size_t msg_bytes, char *err) {
    coord_round *r = &c->r;
    const hfl_codec *uc = c->clients[id].codec;
    int async = c->cfg.async_concurrency > 0;
    if (c->rule.kind != HFL_RULE_FEDAVG)
        return hfl_errf(err, "late update for round %d: only fedavg folds late updates", r->round - tau);
    if (strcmp(codec, uc->name) != 0)
        return hfl_errf(err, "update uses codec '%s', client %d uses '%s'", codec, id, uc->name);
    if (r->samples_planned <= 0) return hfl_errf(err, "round %d drew nobody to weigh a late update against", r->round);
    int64_t weighed = samples < c->clients[id].samples ? samples : c->clients[id].samples;
    double f = c->cfg.max_share;
    if (f < 1 && !async) {
        double cap = floor(f / (1 - f) * r->samples_planned);
        if ((double)weighed > cap) weighed = cap < 1 ? 1 : (int64_t)cap;
    }
    double weight = async ? (double)(staleness_q16(tau) * weighed) / 65536.0 / r->samples_planned
                          : 0.5 * (double)weighed / r->samples_planned;
    hfl_agg_update info;
    if (hfl_agg_add(&c->agg, uc, payload, plen, weight, &info, err) != 0) return -1;
    c->clients[id].late_round = 0;
    if (async) {
        c->n_inflight--;
        r->weight_stale += (double)weighed;
        if (weighed > r->weight_max) r->weight_max = weighed;
    } else {
        r->weight_stale += 0.5 * (double)weighed;
    }
    r->n_clipped += info.clipped;
    r->bytes_up += msg_bytes;
    r->stale[r->n_stale].client = id, r->stale[r->n_stale].from_round = r->round - tau;
    r->stale[r->n_stale].samples = (double)samples, r->stale[r->n_stale].weight = weight;
    r->stale[r->n_stale].norm = info.norm, r->stale[r->n_stale].bytes = (double)msg_bytes;
    r->stale[r->n_stale].trained = trained;
    r->n_stale++;
    if (async && r->n_received + r->n_stale == r->n_target) pthread_cond_signal(&c->tick);
    c->clients[id].last_seen = hfl_now();
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "update_folded");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "from_round", r->round - tau);
    cJSON_AddNumberToObject(ev, "client", id);
    cJSON_AddNumberToObject(ev, "samples", (double)samples);
    cJSON_AddNumberToObject(ev, "weight", weight);
    cJSON_AddNumberToObject(ev, "norm", info.norm);
    events_log(c, ev);
    return 0;
}

uint8_t *rounds_update(coord *c, int id, const cJSON *meta, const uint8_t *payload, size_t plen,
                       size_t msg_bytes, size_t *len) {
    coord_round *r = &c->r;
    char err[HFL_ERR_LEN], msg[HFL_ERR_LEN + 64];
    int64_t round = 0;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "declined"))) {
        hfl_decline_msg d = {0};
        if (hfl_wire_decode(&hfl_wire_decline, meta, &d, err) != 0) return coord_error_reply(err, len);
        overdue_answered(c, id, d.round);
        return round_decline(c, id, d.round, len);
    }
    int why = COORD_REJ_MALFORMED; /* the refusal's kind, for --metrics */
    if (hfl_meta_int(meta, "round", 1, 1 << 30, &round, err) != 0) goto reject;
    overdue_answered(c, id, round); /* accepted or not, it answers its task */
    hfl_update_msg u = {0}; /* the fields an update lacks read as 0 */
    if (hfl_wire_decode(&hfl_wire_update, meta, &u, err) != 0) goto reject;
    if (u.has_lr_last != u.has_lr_first) {
        hfl_errf(err, "missing field '%s'", u.has_lr_last ? "lr_first" : "lr_last");
        goto reject;
    }
    int64_t samples = u.samples;
    double loss = u.loss, peak = u.peak_bytes, train_s = u.train_s, trained = u.trained_samples, sim_s = u.sim_s;
    double lr_first = u.lr_first, lr_last = u.lr_last, predicted = u.predicted_peak_bytes;
    double measured = u.measured_peak_bytes;
    const char *codec = u.codec;
    int tau = r->round - (int)round; /* rounds late */
    if (late_fold_ok(c, id, round)) {
        why = COORD_REJ_LATE;
        if (round_fold(c, id, tau, samples, trained, codec, payload, plen, msg_bytes, err) != 0) goto reject;
        overdue_progress(c, id);
        return coord_ack_reply((int)round, 0, r->round, len);
    }
    if (!r->open || round != r->round) {
        hfl_errf(err, "update for round %lld, but round %d is %s", (long long)round, r->round,
                 r->open ? "open" : "closed");
        why = COORD_REJ_ROUND;
        goto reject;
    }
    if (r->slot[id].selected && samples > r->slot[id].declared) {
        hfl_errf(err, "update weighted by %lld samples, but client %d declared %lld when drawn", (long long)samples,
                 id, (long long)r->slot[id].declared);
        why = COORD_REJ_SAMPLES;
        goto reject;
    }
    if (!r->slot[id].selected || !r->slot[id].tasked) {
        hfl_errf(err, "client %d was given no task in round %d", id, r->round);
        why = COORD_REJ_TASK;
        goto reject;
    }
    if (r->slot[id].received) {
        hfl_errf(err, "round %d already has an update from client %d", r->round, id);
        why = COORD_REJ_TASK;
        goto reject;
    }
    if (r->slot[id].refused) {
        hfl_errf(err, "client %d was told to skip round %d", id, r->round);
        why = COORD_REJ_TASK;
        goto reject;
    }
    const hfl_codec *uc = c->clients[id].codec;
    if (!c->cfg.secure_agg && strcmp(codec, uc->name) != 0) {
        hfl_errf(err, "update uses codec '%s', client %d uses '%s'", codec, id, uc->name);
        why = COORD_REJ_CODEC;
        goto reject;
    }
    if (c->cfg.virtual_time && !(sim_s > 0)) {
        hfl_errf(err, "update carries no sim_s, but this run holds its deadline in simulated time (--virtual-time)");
        goto reject;
    }
    if (c->cfg.virtual_time && sim_s > c->cfg.deadline_s)
        return round_missed(c, id, sim_s, len);
    /* Weights are sample shares of the round, at most --max-share of it (and
     * at most 1: an update may not claim more samples than its client held
     * when drawn). */
    int64_t weighed = samples < r->slot[id].samples_at_select ? samples : r->slot[id].samples_at_select;
    if (weighed > r->slot[id].share_cap) weighed = r->slot[id].share_cap;
    double weight = (double)weighed / r->samples_planned;
    hfl_agg_update info;
    int slot = 0; /* robust rules: the update's row is its client's place in the selection */
    while (slot < r->n_selected && r->selected[slot] != id) slot++;
    if (c->cfg.secure_agg) { /* the client weighted and clipped it: the weight its setup announced */
        weighed = r->slot[id].share_cap < r->slot[id].samples_at_select ? r->slot[id].share_cap : r->slot[id].samples_at_select;
        weight = (double)weighed / r->samples_planned;
        info = (hfl_agg_update){.norm = 0, .clipped = 0};
        if (secagg_input(c, id, payload, plen, err) != 0) {
            why = COORD_REJ_PAYLOAD;
            goto reject;
        }
    } else if ((c->rule.kind == HFL_RULE_FEDAVG ? hfl_agg_add(&c->agg, uc, payload, plen, weight, &info, err)
                                                 : hfl_agg_add_row(&c->agg, uc, payload, plen, slot, &info, err)) != 0) {
        why = COORD_REJ_PAYLOAD;
        if (c->agg.disk_refused) { /* the coordinator's disk, not the update: the operator's to mend */
            why = COORD_REJ_STORE;
            fprintf(stderr, "hfl-coordinator: client %d's update: %s\n", id, err);
        }
        goto reject;
    }
    r->norms[r->n_received] = info.norm;
    r->n_clipped += info.clipped;
    r->slot[id].received = 1;
    r->n_received++;
    if (r->n_received + (c->cfg.async_concurrency > 0 ? r->n_stale : 0) == r->n_target)
        pthread_cond_signal(&c->tick); /* the main loop closes it now */
    if (r->n_received == 1) hfl_test_crash("update", r->round);
    r->weight_samples += weighed;
    r->slot[id].weighed = weighed;
    if (weighed > r->weight_max) r->weight_max = weighed;
    r->samples_sum += (double)samples;
    r->loss_sum += loss * (double)samples;
    r->bytes_up += msg_bytes;
    c->clients[id].updates++;
    overdue_progress(c, id);
    if (measured > 0) {
        c->clients[id].predicted_peak = predicted;
        c->clients[id].measured_peak = measured;
    }
    c->clients[id].last_seen = hfl_now();

    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "update");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "client", id);
    cJSON_AddNumberToObject(ev, "samples", (double)samples);
    cJSON_AddNumberToObject(ev, "weight", weight);
    cJSON_AddNumberToObject(ev, "norm", info.norm);
    cJSON_AddBoolToObject(ev, "clipped", info.clipped);
    cJSON_AddNumberToObject(ev, "loss", loss);
    cJSON_AddNumberToObject(ev, "peak_bytes", peak);
    cJSON_AddNumberToObject(ev, "train_s", train_s);
    if (measured > 0) {
        cJSON_AddNumberToObject(ev, "predicted_peak_bytes", predicted);
        cJSON_AddNumberToObject(ev, "measured_peak_bytes", measured);
    }
    cJSON_AddNumberToObject(ev, "bytes", (double)msg_bytes);
    r->slot[id].samples = (double)samples, r->slot[id].weight = weight, r->slot[id].norm = info.norm;
    r->slot[id].loss = loss, r->slot[id].train_s = train_s, r->slot[id].bytes = (double)msg_bytes;
    r->slot[id].measured_peak = measured, r->slot[id].clipped = info.clipped, r->slot[id].trained = trained;
    r->slot[id].sim_s = sim_s, r->slot[id].lr_first = lr_first, r->slot[id].lr_last = lr_last;
    events_log(c, ev);
    return coord_ack_reply(r->round, 0, 0, len);

reject:
    c->rejected++;
    c->rejected_update[why]++;
    /* A client tasked in this round whose update is refused would retrain the
     * same task into the same update: it is told to skip the round instead,
     * and the round stops waiting for it. */
    int skip = r->open && round == r->round && r->slot[id].selected && r->slot[id].tasked && !r->slot[id].received &&
               !r->slot[id].refused;
    if (skip) {
        r->slot[id].refused = SLOT_REFUSED;
        r->n_refused++;
    }
    snprintf(msg, sizeof msg, "update rejected%s: %s", skip ? " (skip the round)" : "", err);
    if (!c->cfg.quiet) fprintf(stderr, "hfl-coordinator: client %d: %s\n", id, msg);
    return coord_skip_reply(msg, skip, len);
}

static double median_norm(const coord_round *r) {
    double *v = hfl_malloc(sizeof(double) * (size_t)(r->n_received ? r->n_received : 1));
    memcpy(v, r->norms, sizeof(double) * (size_t)r->n_received);
    double m = hfl_median(v, (size_t)r->n_received);
    free(v);
    return m;
}

/* Each drawn client's part in the round, in draw order: its status (ok,
 * refused: told to skip; declined; missed_deadline: --virtual-time, simulated
 * past the deadline; left: quit the run; late: over-selected,
 * the round closed with its target before it answered; missing: no update by
 * the close) and, for an accepted update, what it weighed and carried. */
static void round_participants(const coord *c, hfl_wire_list *out) {
    const coord_round *r = &c->r;
    round_participant *v = hfl_calloc(r->n_selected ? (size_t)r->n_selected : 1, sizeof *v);
    /* over-selected or --async: closed without the rest, who are late */
    int full = r->n_received + (c->cfg.async_concurrency > 0 ? r->n_stale : 0) >= r->n_target;
    for (int i = 0; i < r->n_selected; i++) {
        int id = r->selected[i];
        const coord_slot *s = &r->slot[id];
        round_participant *p = &v[i];
        p->client = id;
        snprintf(p->name, sizeof p->name, "%s", c->clients[id].name);
        snprintf(p->status, sizeof p->status, "%s",
                 s->received ? "ok" : s->refused == SLOT_DECLINED ? "declined"
                 : s->refused == SLOT_MISSED ? "missed_deadline" : s->refused == SLOT_DROPPED ? "dropped"
                 : s->refused ? "refused" : c->clients[id].left[0] ? "left" : full ? "late" : "missing");
        p->ok = s->received;
        p->samples = s->samples, p->weight = s->weight, p->loss = s->loss, p->train_s = s->train_s;
        p->bytes_up = s->bytes;
        p->has_norm = s->received && !c->cfg.secure_agg; /* under secure aggregation no one sees its norm */
        p->norm = s->norm, p->clipped = s->clipped;
        p->has_measured_peak_bytes = s->received && s->measured_peak > 0, p->measured_peak_bytes = s->measured_peak;
        p->has_trained_samples = s->received && s->trained > 0, p->trained_samples = s->trained;
        p->has_lr = s->received && s->lr_last > 0, p->lr_first = s->lr_first, p->lr_last = s->lr_last;
        p->has_sim_s = (s->received || s->refused == SLOT_MISSED) && s->sim_s > 0, p->sim_s = s->sim_s;
        /* what the round's tasks cost on the downlink for this client */
        p->bytes_down = s->bytes_down, p->downloads = s->downloads;
        p->has_resent = s->resent != 0, p->resent = s->resent;
        p->has_local_steps = s->local_steps > 0, p->local_steps = s->local_steps;
        p->has_mid_round = p->mid_round = s->mid_round != 0;
    }
    *out = (hfl_wire_list){v, r->n_selected};
}

/* The late updates folded into the round (--late fold, --async). */
static void round_folded_rows(const coord *c, hfl_wire_list *out) {
    const coord_round *r = &c->r;
    round_folded *v = hfl_calloc(r->n_stale ? (size_t)r->n_stale : 1, sizeof *v);
    for (int i = 0; i < r->n_stale; i++) {
        round_folded *x = &v[i];
        x->client = r->stale[i].client;
        snprintf(x->name, sizeof x->name, "%s", c->clients[r->stale[i].client].name);
        x->from_round = r->stale[i].from_round, x->samples = r->stale[i].samples, x->weight = r->stale[i].weight;
        x->norm = r->stale[i].norm, x->bytes_up = r->stale[i].bytes;
        x->has_trained_samples = r->stale[i].trained > 0, x->trained_samples = r->stale[i].trained;
    }
    *out = (hfl_wire_list){v, r->n_stale};
}

static void round_finish(coord *c, const char *reason) {
    coord_round *r = &c->r;
    double wall = hfl_now() - r->opened_at;
    hfl_hist_observe(&c->round_hist, wall);
    int async = c->cfg.async_concurrency > 0;
    round_record o = {.round = r->round, .has_reason = reason != NULL};
    snprintf(o.status, sizeof o.status, "%s", reason ? "failed" : "ok");
    snprintf(o.reason, sizeof o.reason, "%s", reason ? reason : "");
    /* a failed round keeps the last accuracy; an aggregated one is evaluated (evaluate.c) */
    o.has_test = reason != NULL, o.test_acc = c->final_acc, o.test_loss = 0;
    o.train_loss = r->samples_sum > 0 ? r->loss_sum / r->samples_sum : 0;
    o.clients = r->n_received;
    o.has_late_folded = c->cfg.late_fold || async, o.late_folded = r->n_stale;
    o.selected = r->n_selected, o.target = r->n_target, o.eligible = r->n_eligible;
    o.quorum = round_quorum(c, async ? r->n_target : r->n_selected);
    o.samples = r->samples_sum, o.bytes_up = (double)r->bytes_up, o.bytes_down = (double)r->bytes_down;
    o.tasks_delta = r->tasks_delta, o.tasks_held = r->tasks_held, o.tasks_resent = r->tasks_resent;
    o.tasks_short = r->tasks_short, o.benched = r->n_benched, o.wall_s = wall, o.version = c->version;
    o.has_clip_norm = r->clip > 0, o.clip_norm = r->clip;
    o.clipped = r->n_clipped, o.refused = r->n_refused, o.declined = r->n_declined;
    o.has_missed_deadline = c->cfg.virtual_time, o.missed_deadline = r->n_missed;
    o.has_rule_kept = c->rule.kind != HFL_RULE_FEDAVG, o.rule_kept = r->n_rule_kept;
    if (c->cfg.secure_agg) {
        o.has_secure_agg = secagg_report(c, &o.secure_agg);
    } else {
        o.has_norms = 1, o.update_norm_median = median_norm(r);
        for (int i = 0; i < r->n_received; i++) o.update_norm_max = fmax(o.update_norm_max, r->norms[i]);
    }
    if (r->n_selected > 0) o.has_dp = dp_charge(c, &o.dp); /* its clients were tasked: charged, aggregated or not */
    char *sha = o.model_sha256;
    model_sha256(c, sha);
    round_participants(c, &o.participants);
    if (c->cfg.late_fold || async) {
        o.has_folded = 1;
        round_folded_rows(c, &o.folded);
        /* who was tasked and did not answer may still fold its update into a later round */
        for (int i = 0; i < r->n_selected; i++) {
            int id = r->selected[i];
            int out = r->slot[id].tasked && !r->slot[id].received && !r->slot[id].refused && !c->clients[id].left[0];
            c->clients[id].late_round = out ? r->round : 0;
            c->n_inflight += async && out;
        }
    }
    snprintf(c->final_sha256, sizeof c->final_sha256, "%s", sha);
    round_log_add(&c->rounds, &o);
    r->open = 0;
    if (r->round >= c->cfg.rounds) c->done_pending = 1;
    /* The state is durable before the next round opens (its evaluation may
     * still be running: a continued run evaluates the saved model again). */
    char err[HFL_ERR_LEN];
    if (persist_save(c, err) != 0) fprintf(stderr, "hfl-coordinator: cannot save the run's state: %s\n", err);
    if (c->cfg.save_model[0] && hfl_safetensors_save(c->cfg.save_model, &c->spec, c->global, err) != 0)
        fprintf(stderr, "hfl-coordinator: cannot save the model: %s\n", err);
    if (reason && c->sa) /* secure aggregation's failures say why, in one line */
        fprintf(stderr, "hfl-coordinator: round %d failed: %s\n", r->round, reason);
    if (reason) {
        report_publish_round(c, c->rounds.n - 1, NULL, NULL);
        c->done = c->done_pending;
    } else {
        eval_round(c, c->rounds.n - 1); /* publishes, and sets done after the last round */
    }
}

/* The adaptive clip after a round with updates (see the header). */
static void clip_adapt(coord *c) {
    coord_round *r = &c->r;
    if (!c->cfg.clip_adaptive || r->clip <= 0 || r->n_received == 0) return;
    double below = 0;
    if (c->cfg.secure_agg) below = secagg_count(c); /* the clients' own count, summed under the masks */
    else
        for (int i = 0; i < r->n_received; i++) below += r->norms[i] <= r->clip;
    below = dp_noised_count(c, below); /* under DP the count is noised too (dp.h) */
    c->clip = r->clip * exp(-0.2 * (below / r->n_received - 0.5));
}

/* A robust rule over the round's held rows, in selection order, into the
 * aggregator's mean; a round the rule cannot judge (too few updates for
 * Krum) fails, the global model kept. */
static int robust_mean(coord *c, int *finite) {
    coord_round *r = &c->r;
    char err[HFL_ERR_LEN], why[HFL_ERR_LEN + 32];
    if (hfl_agg_rule(&c->agg, &c->rule, NULL, &r->n_rule_kept, finite, err) != 0) {
        clip_adapt(c);
        snprintf(why, sizeof why, "%s, global model kept", err);
        round_finish(c, why);
        return -1;
    }
    return 0;
}

static void round_aggregate(coord *c) {
    coord_round *r = &c->r;
    if (eval_busy(c)) return; /* the evaluation thread reads c->global, which the step below writes */
    double t0 = hfl_now();
    hfl_test_crash("aggregate", r->round);
    int finite;
    if (c->cfg.secure_agg) { /* the sum comes from secure aggregation, once unmasked */
        char why[HFL_ERR_LEN];
        int deadline = r->n_received < r->n_target && r->n_received < r->n_selected;
        int ready = secagg_ready(c, deadline ? round_quorum(c, r->n_selected) : 1, why, sizeof why);
        if (ready == 0) return;
        if (ready < 0) {
            round_finish(c, why);
            return;
        }
        r->n_clipped = r->n_received - (int)lround(secagg_count(c)); /* noised under DP */
    }
    if (c->rule.kind == HFL_RULE_FEDAVG) {
        /* --max-share holds over the updates that came: when some of the round
         * are missing, the divisor grows (up to the whole round's capped
         * weight, the missing counting as zero) until the largest update
         * weighs at most F of it. A complete round is plain FedAvg. */
        double divisor = (double)r->weight_samples + r->weight_stale, f = c->cfg.max_share;
        double need = f < 1 ? (double)r->weight_max / f : 0;
        if (need > (double)r->cap_total) need = (double)r->cap_total;
        if (need > divisor) divisor = need;
        char err[HFL_ERR_LEN], why[HFL_ERR_LEN + 32];
        if (!c->cfg.secure_agg && r->dp_sigma > 0 && dp_add_central(c, r->dp_sigma, err) != 0) {
            snprintf(why, sizeof why, "%s, global model kept", err);
            round_finish(c, why);
            return;
        }
        finite = hfl_agg_mean(&c->agg, divisor / r->samples_planned);
        if (finite < 0) { /* the sum on disk could not be read back */
            clip_adapt(c); /* as any round whose aggregate is refused */
            snprintf(why, sizeof why, "%s, global model kept", c->agg.disk_err);
            round_finish(c, why);
            return;
        }
    } else if (robust_mean(c, &finite) != 0) {
        return;
    }
    clip_adapt(c);
    if (!finite) {
        round_finish(c, "aggregate not finite, global model kept");
        return;
    }
    char err[HFL_ERR_LEN], why[HFL_ERR_LEN + 32];
    if (hfl_agg_step(&c->agg, &c->sopt, c->global + c->spec.train_off, err) != 0) {
        snprintf(why, sizeof why, "%s, global model kept", err);
        round_finish(c, why);
        return;
    }
    hfl_hist_observe(&c->agg_hist, hfl_now() - t0);
    c->version++;
    downlink_record(c);
    round_finish(c, NULL);
}

void rounds_tick(coord *c) {
    coord_round *r = &c->r;
    if (c->done || c->done_pending || c->cfg.upstream[0]) return; /* an aggregator's rounds are its root's */
    if (!r->open && !dp_budget_left(c, c->stop_reason, sizeof c->stop_reason)) {
        if (eval_busy(c)) return; /* the last round is published first */
        fprintf(stderr, "hfl-coordinator: %s\n", c->stop_reason); /* the run ends here, in one line */
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "event", "stopped");
        cJSON_AddStringToObject(ev, "reason", c->stop_reason);
        events_log(c, ev);
        c->done = 1;
        char err[HFL_ERR_LEN];
        if (report_write(c, err) != 0) fprintf(stderr, "hfl-coordinator: %s\n", err);
        return;
    }
    if (!r->open) {
        int planned = 0, left = 0, live = 0;
        double now = hfl_now();
        for (int i = 0; i < c->n_clients; i++) {
            planned += c->clients[i].has_plan;
            left += c->clients[i].left[0] != 0;
            live += c->clients[i].has_plan && now - c->clients[i].last_seen <= c->cfg.liveness_s;
        }
        /* --min-clients: the first round waits for the fleet (or its deadline),
         * so its draw does not depend on who said hello first */
        if (r->round == 0 && planned + left < c->cfg.min_clients && now - c->started < c->cfg.deadline_s) return;
        /* --async: rounds follow each other; clients still training count as live */
        if (c->cfg.async_concurrency > 0 && r->round > 0 && live + c->n_inflight > 0) {
            round_open(c);
            return;
        }
        /* clients that left or fell silent are not waited for: a round draws from the rest */
        if (live >= c->cfg.clients_per_round ||
            (live >= round_quorum(c, c->cfg.clients_per_round) && live > 0 && planned + left >= c->cfg.clients_per_round))
            round_open(c);
        return;
    }
    if (eval_busy(c)) return; /* the previous round is published before this one may close */
    if (c->cfg.secure_agg) {
        char why[HFL_ERR_LEN];
        secagg_tick(c);
        if (secagg_failed(c, why, sizeof why)) {
            round_finish(c, why);
            return;
        }
        if (secagg_unmasking(c)) {
            round_aggregate(c);
            return;
        }
    }
    if (c->cfg.async_concurrency > 0) { /* FedBuff: K arrivals, fresh or folded, close the round */
        int got = r->n_received + r->n_stale;
        if (got >= r->n_target)
            round_aggregate(c);
        else if (hfl_now() - r->opened_at > c->cfg.deadline_s)
            got >= round_quorum(c, r->n_target) && got > 0 ? round_aggregate(c)
                                                           : round_finish(c, "quorum not reached, global model kept");
        return;
    }
    int gone = 0; /* selected clients that left the run (registry_leave) or were told to skip it */
    for (int i = 0; i < r->n_selected; i++) {
        int s = r->selected[i];
        gone += !r->slot[s].received && (c->clients[s].left[0] != 0 || r->slot[s].refused);
    }
    if (r->n_selected == 0) {
        round_finish(c, "no live client to draw, global model kept");
    } else if (r->n_received == r->n_selected || r->n_received >= r->n_target) {
        round_aggregate(c);
    } else if (hfl_now() - r->opened_at > c->cfg.deadline_s ||
               (gone && r->n_received + gone >= r->n_selected)) {
        if ((r->n_received >= round_quorum(c, r->n_selected) && r->n_received > 0) || c->cfg.secure_agg)
            round_aggregate(c); /* secure aggregation says itself why too few is too few */
        else
            round_finish(c, "quorum not reached, global model kept");
    }
}

void rounds_adopt(coord *c, const void *global, int version) {
    memcpy(c->global, global, c->spec.n_params * sizeof(float));
    c->version = version;
    model_sha256(c, c->final_sha256);
    downlink_record(c);
}

int rounds_assign(coord *c, const hfl_tier_sync_reply_msg *a, char *err) {
    coord_round *r = &c->r;
    const hfl_task_msg *t = &a->task;
    if (t->version != c->version) return hfl_errf(err, "round %lld's task is for version %lld, we hold %d",
                                                  (long long)a->round, (long long)t->version, c->version);
    if (t->batch != c->cfg.batch || t->lr != c->cfg.lr || t->local_epochs != c->cfg.local_epochs ||
        strcmp(t->codec, c->codec->name) != 0)
        return hfl_errf(err, "round %lld's task (batch %lld, lr %g, %lld epochs, codec %s) is not this aggregator's "
                        "run settings: start it with the root's", (long long)a->round, (long long)t->batch, t->lr,
                        (long long)t->local_epochs, t->codec);
    downlink_reset_cache(c);
    memset(r, 0, sizeof *r);
    hfl_agg_reset(&c->agg, a->clip, COORD_VALUE_BOUND);
    if (c->agg.shift != a->shift) return hfl_errf(err, "the root's scale 2^%lld is not ours 2^%d for clip %g",
                                                  (long long)a->shift, c->agg.shift, a->clip);
    r->round = (int)a->round;
    r->open = 1;
    r->opened_at = hfl_now();
    r->clip = a->clip;
    r->samples_planned = a->samples_planned;
    r->task = *t;
    r->task.chunk_sha256 = (hfl_wire_list){0}, r->task.has_chunk_sha256 = 0; /* the downlink's own */
    const hfl_tier_selected *sel = a->selected.v;
    for (int i = 0; i < a->selected.n; i++) {
        int id = registry_find(c, sel[i].name);
        if (id < 0 || r->slot[id].selected) continue; /* not ours (any more): the root's deadline closes it */
        r->selected[r->n_selected++] = id;
        r->slot[id].selected = 1;
        r->slot[id].samples_at_select = sel[i].samples_at_select;
        r->slot[id].declared = sel[i].declared;
        r->slot[id].share_cap = sel[i].share_cap;
        r->cap_total += sel[i].share_cap;
    }
    r->n_target = r->n_eligible = r->n_selected;
    spool_sweep(c);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "round_assigned");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON *ids = cJSON_AddArrayToObject(ev, "selected");
    for (int i = 0; i < r->n_selected; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(r->selected[i]));
    events_log(c, ev);
    return 0;
}

int rounds_tier_ready(const coord *c) {
    const coord_round *r = &c->r;
    if (!r->open) return 0;
    int final = 0;
    for (int i = 0; i < r->n_selected; i++) final += r->slot[r->selected[i]].received || r->slot[r->selected[i]].refused;
    /* a tenth of the deadline left for the partial to reach the root before its own deadline */
    return final == r->n_selected || hfl_now() - r->opened_at > 0.9 * r->task.deadline_ms / 1000.0;
}

void rounds_tier_close(coord *c, hfl_wire_list *rows, int64_t **sum) {
    coord_round *r = &c->r;
    hfl_tier_row *v = hfl_calloc((size_t)r->n_selected + 1, sizeof *v);
    int n = 0;
    for (int i = 0; i < r->n_selected; i++) {
        const coord_slot *s = &r->slot[r->selected[i]];
        if (!s->received && !s->refused) continue; /* no answer: the root's deadline decides */
        hfl_tier_row *w = &v[n++];
        snprintf(w->name, sizeof w->name, "%s", c->clients[r->selected[i]].name);
        snprintf(w->status, sizeof w->status, "%s",
                 s->received ? "ok" : s->refused == SLOT_DECLINED ? "declined" : "refused");
        if (!s->received) continue;
        w->samples = (int64_t)s->samples, w->weighed = s->weighed, w->norm = s->norm, w->clipped = s->clipped;
        w->loss = s->loss, w->train_s = s->train_s, w->bytes = s->bytes, w->measured_peak = s->measured_peak;
        w->predicted_peak = c->clients[r->selected[i]].predicted_peak, w->trained = s->trained;
    }
    *rows = (hfl_wire_list){v, n};
    *sum = hfl_malloc(c->spec.n_trainable * sizeof **sum + 1);
    hfl_agg_read_sum(&c->agg, *sum);
    r->open = 0;
}
