/* tier.c: the root's side of a tier of coordinators.
 *
 * An aggregator (hfl-coordinator --upstream, upstream.c) serves clients of
 * its own and says hello here as `aggregator`. Every ~50 ms it syncs: it
 * lists its clients, each registered here as its hello would register it
 * (registry_hello: the same validation, the same sample cap), marked as
 * reached `via` the aggregator, with no session of its own (no token: a
 * request in its name is refused). The root draws across the whole tier as
 * it draws its own clients, so a tiered run selects the clients a flat run
 * with the same clients and seed selects. The sync's reply carries the open
 * round's assignment for that aggregator: the task, the scale, the divisor
 * and its drawn clients with their caps (their slots then count as tasked),
 * and the global model when the aggregator holds another version.
 *
 * An aggregator's partial is its clients' updates summed in fixed point at
 * the root's scale (aggregate.h: weights are the root's sample shares, so
 * each update is rounded exactly as here), and a row per client. It is
 * checked whole before anything moves: one partial an aggregator a round,
 * the round open, the scale the root's, the sum's length, every row a client
 * drawn and tasked via this aggregator and not final, each ok row weighed as
 * the root weighs it, and the sum one its ok rows could make (tier_sum_check:
 * within their weights times the clip, or the value bound). An aggregator is
 * trusted with its clients' names and their hellos' samples as a
 * coordinator is trusted with its own clients' (the root cannot check their
 * certificates), and --max-share bounds what any one of them weighs. Then
 * the sum is added exactly (hfl_agg_add_sum) and each row does
 * what rounds_update (ok), round_decline (declined) or a refusal (refused)
 * does to the round's counts and the client's slot. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "util/util.h"

const char *tier_unsupported(const coord_config *cfg) {
    if (cfg->secure_agg) return "--secure-agg/--client-clip";
    if (cfg->dp_noise > 0 || cfg->dp_epsilon > 0) return "--dp-noise/--dp-epsilon";
    if (strcmp(cfg->strategy, "fedavg") != 0) return "--strategy other than fedavg";
    if (cfg->async_concurrency > 0) return "--async";
    if (cfg->over_select != 0) return "--over-select other than 0";
    if (cfg->late_fold) return "--late fold";
    if (cfg->virtual_time) return "--virtual-time";
    if (cfg->capacity_work) return "--local-work capacity";
    if (!strcmp(cfg->sum_on_disk, "on")) return "--sum-on-disk on";
    if (cfg->state_dir[0]) return "--state-dir";
    if (cfg->init_model[0]) return "--init-model";
    if (cfg->save_model[0]) return "--save-model";
    return NULL;
}

static uint8_t *tier_refuse(coord *c, const char *what, const char *err, size_t *len) {
    char msg[HFL_ERR_LEN + 32];
    snprintf(msg, sizeof msg, "tier %s refused: %s", what, err);
    c->rejected++;
    if (!c->cfg.quiet) fprintf(stderr, "hfl-coordinator: %s\n", msg);
    return coord_error_reply(msg, len);
}

static int tier_same_obj(const cJSON *a, const cJSON *b) { return (!a && !b) || (a && b && cJSON_Compare(a, b, 1)); }

/* Whether hello, as an aggregator lists it, is what cl holds already. */
static int tier_same(const coord_client *cl, const cJSON *hello) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(hello, "samples");
    const cJSON *codec = cJSON_GetObjectItemCaseSensitive(hello, "codec");
    return cJSON_IsNumber(s) && s->valuedouble == (double)cl->declared &&
           (cJSON_IsString(codec) ? !strcmp(codec->valuestring, cl->codec->name) : !codec) &&
           tier_same_obj(cJSON_GetObjectItemCaseSensitive(cl->hello, "device"),
                         cJSON_GetObjectItemCaseSensitive(hello, "device")) &&
           tier_same_obj(cJSON_GetObjectItemCaseSensitive(cl->hello, "plan"),
                         cJSON_GetObjectItemCaseSensitive(hello, "plan"));
}

/* Registers or renews one client the aggregator agg lists; -1 with err. A
 * client listed as before is only marked seen. A client another aggregator
 * reaches moves here only when this one heard from it later, and never
 * while it is drawn and not final in the open round: an aggregator that
 * still lists a client that left it (or one that lists another's) takes
 * nothing, and the other's partial keeps its row. */
static int tier_register(coord *c, int agg, const hfl_tier_client *tc, char *err) {
    int id = registry_find(c, tc->name);
    if (id >= 0 && (c->clients[id].aggregator || (c->clients[id].via < 0 && c->clients[id].token[0])))
        return hfl_errf(err, "'%s' talks to the root directly", tc->name);
    double seen = hfl_now() - (double)tc->seen_ms / 1000.0;
    if (id >= 0 && c->clients[id].via >= 0 && c->clients[id].via != agg) {
        const coord_slot *s = &c->r.slot[id];
        if (c->r.open && s->selected && !s->received && !s->refused)
            return hfl_errf(err, "'%s' is drawn via aggregator %d in round %d", tc->name, c->clients[id].via, c->r.round);
        if (seen <= c->clients[id].last_seen) return 0; /* the other heard from it later */
    }
    int same = id >= 0 && c->clients[id].via == agg && !c->clients[id].revoked &&
               (c->clients[id].codec == c->codec || cJSON_GetObjectItemCaseSensitive(tc->hello, "codec")) &&
               tier_same(&c->clients[id], tc->hello);
    if (!same && (id = registry_hello(c, tc->name, tc->hello, err)) < 0) return -1;
    coord_client *cl = &c->clients[id];
    cl->token[0] = 0; /* no session: it talks to its aggregator */
    cl->via = agg;
    cl->last_seen = seen;
    return 0;
}

static uint8_t *tier_sync(coord *c, int agg, const cJSON *meta, size_t *len) {
    coord_round *r = &c->r;
    char err[HFL_ERR_LEN];
    hfl_tier_sync_msg s = {0};
    if (hfl_wire_decode(&hfl_wire_tier_sync, meta, &s, err) != 0) {
        hfl_wire_free(&hfl_wire_tier_sync, &s);
        return tier_refuse(c, "sync", err, len);
    }
    const hfl_tier_client *tc = s.clients.v;
    /* one bad client does not cost the others; every sync lists it again, so
     * the refusals are said when this sync's set of them is not the last's */
    char (*said)[HFL_ERR_LEN + 80] = NULL;
    int n_said = 0;
    uint32_t set = 0;
    for (int i = 0; i < s.clients.n; i++)
        if (tier_register(c, agg, &tc[i], err) != 0) {
            if (!said) said = hfl_malloc(sizeof *said * (size_t)s.clients.n);
            snprintf(said[n_said], sizeof said[n_said], "client '%s' of aggregator %d: %s", tc[i].name, agg, err);
            set = set * 31 + hfl_hash32(said[n_said++]);
        }
    for (int i = 0; i < n_said && set != c->clients[agg].tier_said && !c->cfg.quiet; i++)
        fprintf(stderr, "hfl-coordinator: %s\n", said[i]);
    c->clients[agg].tier_said = set;
    free(said);
    c->clients[agg].last_seen = hfl_now();
    for (int i = 0; c->done && i < c->n_clients; i++) /* told done: it and its clients are told bye there */
        if ((i == agg || c->clients[i].via == agg) && !c->clients[i].got_bye) c->clients[i].got_bye = 1, c->byes_sent++;
    hfl_tier_sync_reply_msg rep = {.version = c->version, .round = r->round, .open = r->open, .done = c->done,
                                   .clip = r->clip, .samples_planned = r->samples_planned, .shift = c->agg.shift};
    snprintf(rep.model_sha256, sizeof rep.model_sha256, "%s", c->final_sha256);
    hfl_tier_selected *sel = hfl_calloc((size_t)r->n_selected + 1, sizeof *sel);
    int n = 0;
    if (r->open) {
        rep.task = r->task, rep.has_task = 1;
        /* the weights come in this reply (or are held): "sent", as to a client holding the task */
        snprintf(rep.task.weights, sizeof rep.task.weights, "sent");
        snprintf(rep.task.downlink, sizeof rep.task.downlink, "%s", c->down.codec->name);
        rep.task.base_version = rep.task.version;
        for (int i = 0; i < r->n_selected; i++) {
            int id = r->selected[i];
            if (c->clients[id].via != agg) continue;
            snprintf(sel[n].name, sizeof sel[n].name, "%s", c->clients[id].name);
            sel[n].samples_at_select = r->slot[id].samples_at_select;
            sel[n].declared = r->slot[id].declared, sel[n].share_cap = r->slot[id].share_cap;
            n++;
            if (!r->slot[id].tasked) overdue_tasked(c, id); /* held to the deadline as a client pulling it is */
            r->slot[id].tasked = 1; /* its aggregator hands it the task */
        }
    }
    rep.selected = (hfl_wire_list){sel, n};
    int send_model = s.have_version != c->version;
    uint8_t *out = hfl_wire_message(&hfl_wire_tier_sync_reply, &rep, send_model ? c->global : NULL,
                                    send_model ? c->spec.n_params * sizeof(float) : 0, len);
    free(sel);
    hfl_wire_free(&hfl_wire_tier_sync, &s);
    return out ? out : coord_error_reply("cannot encode the tier sync reply", len);
}

/* Checks one partial row against the round; its client's id, or -1 with err. */
static int tier_row_check(const coord *c, int agg, const hfl_tier_row *w, char *err) {
    const coord_round *r = &c->r;
    int id = registry_find(c, w->name);
    if (id < 0 || c->clients[id].via != agg || !r->slot[id].selected)
        return hfl_errf(err, "'%s' was not drawn via this aggregator in round %d", w->name, r->round);
    const coord_slot *s = &r->slot[id];
    if (s->received || s->refused) return hfl_errf(err, "'%s' is final in round %d already", w->name, r->round);
    if (strcmp(w->status, "ok") && strcmp(w->status, "declined") && strcmp(w->status, "refused"))
        return hfl_errf(err, "'%s': status '%s' is not ok, declined or refused", w->name, w->status);
    if (!s->tasked) return hfl_errf(err, "'%s' was given no task in round %d", w->name, r->round);
    if (!strcmp(w->status, "ok")) {
        /* as rounds_update weighs it: its samples, at most those it was drawn with and its cap */
        int64_t want = w->samples < s->samples_at_select ? w->samples : s->samples_at_select;
        if (want > s->share_cap) want = s->share_cap;
        if (w->samples < 1 || w->samples > s->declared || w->weighed != want)
            return hfl_errf(err, "'%s': %lld samples weighed as %lld, not as it was drawn (%lld)", w->name,
                            (long long)w->samples, (long long)w->weighed, (long long)want);
    }
    return id;
}

/* An ok row: what rounds_update does once its update is in the sum. */
static void tier_row_ok(coord *c, int agg, int id, const hfl_tier_row *w) {
    coord_round *r = &c->r;
    coord_slot *s = &r->slot[id];
    double weight = (double)w->weighed / r->samples_planned;
    r->norms[r->n_received] = w->norm;
    r->n_clipped += w->clipped;
    s->received = 1;
    r->n_received++;
    r->weight_samples += w->weighed;
    if (w->weighed > r->weight_max) r->weight_max = w->weighed;
    r->samples_sum += (double)w->samples;
    r->loss_sum += w->loss * (double)w->samples;
    r->bytes_up += (uint64_t)w->bytes;
    c->clients[id].updates++;
    if (w->measured_peak > 0) {
        c->clients[id].predicted_peak = w->predicted_peak;
        c->clients[id].measured_peak = w->measured_peak;
    }
    s->samples = (double)w->samples, s->weight = weight, s->norm = w->norm, s->loss = w->loss;
    s->train_s = w->train_s, s->bytes = w->bytes, s->measured_peak = w->measured_peak;
    s->clipped = w->clipped, s->trained = w->trained;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "update");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "client", id);
    cJSON_AddNumberToObject(ev, "via", agg);
    cJSON_AddNumberToObject(ev, "samples", (double)w->samples);
    cJSON_AddNumberToObject(ev, "weight", weight);
    cJSON_AddNumberToObject(ev, "norm", w->norm);
    cJSON_AddBoolToObject(ev, "clipped", w->clipped);
    cJSON_AddNumberToObject(ev, "loss", w->loss);
    cJSON_AddNumberToObject(ev, "train_s", w->train_s);
    cJSON_AddNumberToObject(ev, "bytes", w->bytes);
    events_log(c, ev);
}

/* A declined or refused row: the slot closed as round_decline or a refusal closes it. */
static void tier_row_closed(coord *c, int agg, int id, const hfl_tier_row *w) {
    coord_round *r = &c->r;
    int declined = !strcmp(w->status, "declined");
    r->slot[id].refused = declined ? SLOT_DECLINED : SLOT_REFUSED;
    if (declined) r->n_declined++;
    else r->n_refused++;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", declined ? "declined" : "refused");
    cJSON_AddNumberToObject(ev, "round", r->round);
    cJSON_AddNumberToObject(ev, "client", id);
    cJSON_AddNumberToObject(ev, "via", agg);
    events_log(c, ev);
}

/* Whether the sum can be the ok rows' clipped, weighted updates: each adds
 * weight x a vector of norm at most the clip (aggregate.h), rounded to the
 * integer per element, so the sum's norm is at most sum(weights) x clip x
 * 2^S plus half a unit per element and update; without a clip each element
 * of an update is at most COORD_VALUE_BOUND, so each of the sum at most
 * sum(weights) x that x 2^S plus the roundings. No ok row: the sum is zero.
 * (1e-9: the double arithmetic of the check itself.) 0, or -1 with err. */
static int tier_sum_check(const coord *c, const hfl_tier_row *w, int rows, const int64_t *sum, char *err) {
    const coord_round *r = &c->r;
    size_t n = c->spec.n_trainable;
    double weights = 0, k = 0, scale = ldexp(1.0, c->agg.shift);
    for (int i = 0; i < rows; i++)
        if (!strcmp(w[i].status, "ok")) weights += (double)w[i].weighed / r->samples_planned, k++;
    if (r->clip > 0) {
        double most = (weights * r->clip * scale + k * 0.5 * sqrt((double)n)) * (1 + 1e-9) + (k > 0), sq = 0;
        for (size_t i = 0; i < n; i++) sq += (double)sum[i] * (double)sum[i];
        if (sqrt(sq) > most)
            return hfl_errf(err, "partial sum of norm %.6g, more than its %d updates clipped to %g can make (%.6g)",
                            sqrt(sq) / scale, (int)k, r->clip, most / scale);
        return 0;
    }
    double most = (weights * COORD_VALUE_BOUND * scale + k * 0.5) * (1 + 1e-9) + (k > 0);
    for (size_t i = 0; i < n; i++)
        if (fabs((double)sum[i]) > most)
            return hfl_errf(err, "partial sum's value %zu is %.6g, more than its %d updates can make (%.6g)", i,
                            (double)sum[i] / scale, (int)k, most / scale);
    return 0;
}

static uint8_t *tier_partial(coord *c, int agg, const hfl_msg *m, size_t *len) {
    coord_round *r = &c->r;
    char err[HFL_ERR_LEN];
    hfl_tier_partial_msg p = {0};
    uint8_t *out = NULL;
    int *ids = NULL;
    int64_t *sum = NULL;
    size_t n = c->spec.n_trainable;
    if (hfl_wire_decode(&hfl_wire_tier_partial, m->meta, &p, err) != 0) goto refuse;
    if (!r->open || p.round != r->round) {
        hfl_errf(err, "partial for round %lld, but round %d is %s", (long long)p.round, r->round,
                 r->open ? "open" : "closed");
        goto refuse;
    }
    if (c->clients[agg].partial_round == r->round) {
        hfl_errf(err, "a partial for round %d came from this aggregator already", r->round);
        goto refuse;
    }
    if (p.shift != c->agg.shift) {
        hfl_errf(err, "partial at scale 2^%lld, the round's is 2^%d", (long long)p.shift, c->agg.shift);
        goto refuse;
    }
    if (m->payload_len != n * sizeof(int64_t)) {
        hfl_errf(err, "partial sum of %zu bytes, not %zu (%zu int64 values)", m->payload_len, n * sizeof(int64_t), n);
        goto refuse;
    }
    const hfl_tier_row *w = p.rows.v;
    ids = hfl_calloc((size_t)p.rows.n + 1, sizeof *ids);
    for (int i = 0; i < p.rows.n; i++) {
        if ((ids[i] = tier_row_check(c, agg, &w[i], err)) < 0) goto refuse;
        for (int j = 0; j < i; j++)
            if (ids[j] == ids[i]) {
                hfl_errf(err, "'%s' has two rows", w[i].name);
                goto refuse;
            }
    }
    sum = hfl_malloc(n * sizeof *sum + 1);
    memcpy(sum, m->payload, n * sizeof *sum); /* little-endian, as the host's */
    if (tier_sum_check(c, w, p.rows.n, sum, err) != 0 || hfl_agg_add_sum(&c->agg, sum, (int)p.shift, err) != 0)
        goto refuse;
    c->clients[agg].partial_round = r->round;
    for (int i = 0; i < p.rows.n; i++) {
        overdue_answered(c, ids[i], r->round);
        if (!strcmp(w[i].status, "ok")) tier_row_ok(c, agg, ids[i], &w[i]), overdue_progress(c, ids[i]);
        else tier_row_closed(c, agg, ids[i], &w[i]);
        c->clients[ids[i]].last_seen = hfl_now();
    }
    c->clients[agg].last_seen = hfl_now();
    if (r->n_received >= r->n_target || r->n_received + r->n_refused + r->n_declined >= r->n_selected)
        pthread_cond_signal(&c->tick); /* the main loop closes it now */
    out = coord_ack_reply(r->round, 0, 0, len);
    goto done;
refuse:
    out = tier_refuse(c, "partial", err, len);
done:
    free(ids);
    free(sum);
    hfl_wire_free(&hfl_wire_tier_partial, &p);
    return out;
}

uint8_t *tier_request(coord *c, int id, const hfl_msg *m, size_t *len) {
    char op[16], err[HFL_ERR_LEN];
    if (!c->clients[id].aggregator) {
        snprintf(err, sizeof err, "client %d is not an aggregator (its hello did not say so)", id);
        return tier_refuse(c, "request", err, len);
    }
    if (hfl_meta_str(m->meta, "op", sizeof op - 1, op, err) != 0) return tier_refuse(c, "request", err, len);
    if (!strcmp(op, "sync")) return tier_sync(c, id, m->meta, len);
    if (!strcmp(op, "partial")) return tier_partial(c, id, m, len);
    snprintf(err, sizeof err, "op '%s' is not sync or partial", op);
    return tier_refuse(c, "request", err, len);
}
