/* registry.c: the clients that said hello.
 *
 * A client is known by its identity: its certificate's CN, proven at hello
 * (auth.c); with --insecure, by the name in its hello. Saying hello again
 * with the same identity, after a restart or a reconnect, gives back the
 * same id, so its round state is kept; the new session replaces the old
 * one, which only a valid proof can do. Welcome hands each session a random
 * token, bound to the identity and expiring after --token-ttl, that every
 * later request must carry.
 * A client may ask for its own update codec (a slow uplink wants a smaller
 * one); its updates must then use that codec. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <stdlib.h>

#include "coordinator/coord.h"
#include "util/util.h"

/* Index of a codec name among those clients asked for so far, or -1. */
static int registry_codec_known(const coord *c, const char *name) {
    for (int i = 0; i < c->n_client_codecs; i++)
        if (!strcmp(c->client_codecs[i]->name, name)) return i;
    return -1;
}

void registry_intern_codec(coord *c, const hfl_codec *codec) {
    if (registry_codec_known(c, codec->name) < 0 && c->n_client_codecs < REGISTRY_MAX_CODECS)
        c->client_codecs[c->n_client_codecs++] = codec;
}

/* 128 random bits from the kernel, as hex. */
static int registry_token(char out[33], char *err) {
    uint8_t b[16];
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, b, sizeof b) != (ssize_t)sizeof b) {
        if (fd >= 0) close(fd);
        return hfl_errf(err, "cannot read /dev/urandom");
    }
    close(fd);
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}

/* A full registry makes room by forgetting the session idle longest, if it
 * has been idle for --session-ttl and is not drawn in the open round (invented
 * names that said hello once must not lock honest newcomers out for good).
 * Returns the freed id, or -1. */
static int registry_evictable(const coord *c) {
    double now = hfl_now();
    int victim = -1;
    for (int i = 0; i < c->n_clients; i++) {
        const coord_client *cl = &c->clients[i];
        if (now - cl->last_seen < c->cfg.session_ttl_s || (c->r.open && c->r.slot[i].selected)) continue;
        if (victim < 0 || cl->last_seen < c->clients[victim].last_seen) victim = i;
    }
    return victim;
}

static int registry_cap(const coord *c) {
    return c->cfg.max_sessions > 0 && c->cfg.max_sessions < COORD_MAX_CLIENTS ? c->cfg.max_sessions : COORD_MAX_CLIENTS;
}

int registry_find(const coord *c, const char *name) {
    for (int i = 0; i < c->n_clients; i++)
        if (!strcmp(c->clients[i].name, name)) return i;
    return -1;
}

int registry_has_room(const coord *c, const char *name) {
    if (registry_find(c, name) >= 0) return 1;
    return c->n_clients < registry_cap(c) || registry_evictable(c) >= 0;
}

static int registry_evict(coord *c) {
    double now = hfl_now();
    int victim = registry_evictable(c);
    if (victim < 0) return -1;
    coord_client *cl = &c->clients[victim];
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "session_evicted");
    cJSON_AddNumberToObject(ev, "client", victim);
    cJSON_AddStringToObject(ev, "name", cl->name);
    cJSON_AddNumberToObject(ev, "idle_s", now - cl->last_seen);
    events_log(c, ev);
    cJSON_Delete(cl->hello);
    free(cl->sa_cert);
    hfl_peer_free(cl->sa_peer);
    spool_drop(cl);
    if (cl->got_bye) c->byes_sent--; /* the slot's next owner is told bye on its own account */
    memset(cl, 0, sizeof *cl);
    return victim;
}

/* A hello holds only the fields of its table (proto/messages.c), the device
 * and the plan each an object of known scalars, so what is kept of it (the
 * device and the plan, copied into the report) is one level deep and at
 * most a few hundred bytes. */
static int registry_hello_read(coord *c, const char *name, const cJSON *meta, hfl_hello_msg *h, char *err) {
    if (hfl_wire_decode(&hfl_wire_hello, meta, h, err) != 0) return -1;
    int64_t samples = h->samples;
    const cJSON *device = h->has_device ? h->device : NULL, *plan = h->has_plan ? h->plan : NULL;
    const hfl_codec *codec = c->codec;
    if (h->has_codec) {
        if (!(codec = hfl_codec_find(h->codec, err)) ||
            hfl_codec_check(codec, c->spec.n_trainable, c->cfg.block, err) != 0)
            return -1;
        /* A run serves a bounded number of distinct codecs, counted by canonical
         * name (topk:0.50 is topk:0.5), so hellos cannot grow the table. */
        if (registry_codec_known(c, codec->name) < 0 && c->n_client_codecs >= REGISTRY_MAX_CODECS)
            return hfl_errf(err, "this run already serves %d client codecs; use one of them", REGISTRY_MAX_CODECS);
        registry_intern_codec(c, codec);
    }

    int id = registry_find(c, name); /* names are unique: a hello again renews its entry */
    if (id >= 0 && c->clients[id].revoked) return hfl_errf(err, "certificate of '%s' is revoked", name);
    int cap = registry_cap(c);
    if (id < 0 && c->n_clients < cap) id = c->n_clients++;
    if (id < 0 && (id = registry_evict(c)) < 0)
        return hfl_errf(err, "registry full: %d sessions, none idle for %.0f s (--session-ttl)", cap,
                        c->cfg.session_ttl_s);
    coord_client *cl = &c->clients[id];
    if (registry_token(cl->token, err) != 0) return -1;
    cl->token_expires = hfl_now() + c->cfg.token_ttl_s;
    snprintf(cl->name, sizeof cl->name, "%s", name);
    cJSON_Delete(cl->hello);
    cl->hello = cJSON_CreateObject();
    if (device) cJSON_AddItemToObject(cl->hello, "device", cJSON_Duplicate(device, 1));
    if (plan) cJSON_AddItemToObject(cl->hello, "plan", cJSON_Duplicate(plan, 1));
    /* a claim is capped by the run's policy (--max-client-samples) */
    cl->declared = samples;
    cl->left[0] = 0; /* a client that left and says hello again takes part again */
    if (cl->got_bye && !c->done) { /* and is owed a bye of its own at the end */
        cl->got_bye = 0;
        c->byes_sent--;
    }
    cl->samples = c->cfg.max_client_samples > 0 && samples > c->cfg.max_client_samples ? c->cfg.max_client_samples
                                                                                         : samples;
    cl->has_plan = plan != NULL && !h->aggregator; /* an aggregator is never drawn */
    cl->aggregator = h->aggregator;
    cl->via = -1; /* direct; tier.c sets it for a client an aggregator reaches */
    cl->codec = codec;
    cl->last_seen = hfl_now();
    return id;
}

int registry_hello(coord *c, const char *name, const cJSON *meta, char *err) {
    hfl_hello_msg *h = hfl_malloc(sizeof *h); /* NNG threads: a certificate is big for a stack */
    memset(h, 0, sizeof *h);
    int rc = registry_hello_read(c, name, meta, h, err);
    free(h);
    return rc;
}

int registry_check(const coord *c, const cJSON *meta, int *reauth, char *err) {
    hfl_session_msg sess = {0};
    *reauth = 0;
    if (hfl_wire_decode(&hfl_wire_session, meta, &sess, err) != 0) return -1;
    int64_t id = sess.client_id;
    const char *token = sess.token;
    const coord_client *cl = &c->clients[id];
    if (id < c->n_clients && cl->revoked) return hfl_errf(err, "certificate of '%s' is revoked", cl->name);
    *reauth = 1;
    if (id >= c->n_clients || !cl->token[0])
        return hfl_errf(err, "unknown session for client %lld: say hello", (long long)id);
    if (!auth_equal(token, cl->token)) return hfl_errf(err, "wrong token for client %lld: say hello", (long long)id);
    if (hfl_now() > cl->token_expires)
        return hfl_errf(err, "token of client %lld expired: say hello", (long long)id);
    *reauth = 0;
    return (int)id;
}

static const char *registry_device_name(const coord_client *cl) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cl->hello, "device"), "name");
    return cJSON_IsString(d) ? d->valuestring : "";
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double registry_overhead_estimate(const coord *c, const char *device) {
    double *v = hfl_malloc(sizeof *v * (size_t)(c->n_clients ? c->n_clients : 1)); /* NNG threads: no big stack arrays */
    int n = 0;
    for (int i = 0; i < c->n_clients; i++) {
        const cJSON *plan = cJSON_GetObjectItemCaseSensitive(c->clients[i].hello, "plan");
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(plan, "overhead_bytes");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(plan, "overhead_records");
        if (!strcmp(registry_device_name(&c->clients[i]), device) && cJSON_IsNumber(o) && cJSON_IsNumber(r) &&
            r->valuedouble > 0 && o->valuedouble >= 0)
            v[n++] = o->valuedouble;
    }
    double est = -1;
    if (n > 0) {
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        est = v[n / 2];
    }
    free(v);
    return est;
}

int registry_leave(coord *c, int id, const cJSON *meta, char *err) {
    coord_client *cl = &c->clients[id];
    hfl_leave_msg l = {0};
    if (hfl_wire_decode(&hfl_wire_leave, meta, &l, err) != 0) return -1;
    if (!l.has_error) return 0; /* a plain goodbye */
    const char *why = l.error;
    double measured = l.measured_peak_bytes, budget = l.budget_bytes, predicted = l.predicted_peak_bytes;
    snprintf(cl->left, sizeof cl->left, "%s", why);
    cl->has_plan = 0; /* drawn no more */
    if (measured > 0) cl->measured_peak = measured, cl->predicted_peak = predicted;
    if (!cl->got_bye) c->byes_sent++;
    cl->got_bye = 1;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "event", "client_left");
    cJSON_AddNumberToObject(ev, "client", id);
    cJSON_AddStringToObject(ev, "name", cl->name);
    cJSON_AddStringToObject(ev, "reason", why);
    if (measured > 0) cJSON_AddNumberToObject(ev, "measured_peak_bytes", measured);
    if (budget > 0) cJSON_AddNumberToObject(ev, "budget_bytes", budget);
    events_log(c, ev);
    if (!c->cfg.quiet) printf("coordinator: %s left: %s\n", cl->name, why);
    return 0;
}

/* Each client's record over the rounds so far, from the round log's
 * participants (so it survives a restart with the log). */
typedef struct {
    int joined, failures, declined, late;
    double samples, train_s, bytes_up;
} registry_record;

static void registry_records(const coord *c, registry_record *rec) {
    memset(rec, 0, sizeof *rec * (size_t)c->n_clients);
    for (int i = 0; i < c->rounds.n; i++) {
        const hfl_wire_list *ps = &c->rounds.v[i].participants;
        for (int j = 0; j < ps->n; j++) {
            const round_participant *p = (const round_participant *)ps->v + j;
            int id = (int)p->client;
            if (id < 0 || id >= c->n_clients) continue;
            registry_record *r = &rec[id];
            r->joined++;
            if (!strcmp(p->status, "ok")) {
                r->samples += p->samples, r->train_s += p->train_s, r->bytes_up += p->bytes_up;
            } else if (!strcmp(p->status, "declined")) {
                r->declined++;
            } else if (!strcmp(p->status, "late") || !strcmp(p->status, "missed_deadline")) {
                r->late++; /* over-selected: the round closed with enough before it answered; or simulated too slow */
            } else {
                r->failures++; /* refused, missing or left */
            }
        }
    }
}

cJSON *registry_report(const coord *c) {
    cJSON *arr = cJSON_CreateArray();
    registry_record *rec = hfl_malloc(sizeof *rec * (size_t)(c->n_clients ? c->n_clients : 1));
    registry_records(c, rec);
    for (int i = 0; i < c->n_clients; i++) {
        const coord_client *cl = &c->clients[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddStringToObject(o, "name", cl->name);
        cJSON_AddNumberToObject(o, "samples", (double)cl->samples);
        cJSON_AddStringToObject(o, "codec", cl->codec->name);
        cJSON_AddNumberToObject(o, "updates", (double)cl->updates);
        cJSON_AddNumberToObject(o, "rounds_joined", rec[i].joined);
        cJSON_AddNumberToObject(o, "failures", rec[i].failures);
        cJSON_AddNumberToObject(o, "declined", rec[i].declined);
        cJSON_AddNumberToObject(o, "late", rec[i].late);
        cJSON_AddNumberToObject(o, "bytes_up", rec[i].bytes_up);
        /* deadlines it let pass with a task in hand (overdue.c), and its back-off */
        cJSON_AddNumberToObject(o, "tasks_overdue", cl->overdue);
        if (cl->benched_until > c->r.round) cJSON_AddNumberToObject(o, "benched_until_round", cl->benched_until);
        if (rec[i].train_s > 0) cJSON_AddNumberToObject(o, "samples_per_s", rec[i].samples / rec[i].train_s);
        if (cl->measured_peak > 0) {
            cJSON_AddNumberToObject(o, "predicted_peak_bytes", cl->predicted_peak);
            cJSON_AddNumberToObject(o, "measured_peak_bytes", cl->measured_peak);
        }
        if (cl->left[0]) cJSON_AddStringToObject(o, "left", cl->left);
        if (cl->hello) {
            cJSON *dev = cJSON_GetObjectItemCaseSensitive(cl->hello, "device");
            cJSON *plan = cJSON_GetObjectItemCaseSensitive(cl->hello, "plan");
            if (dev) cJSON_AddItemToObject(o, "device", cJSON_Duplicate(dev, 1));
            if (plan) {
                cJSON *pl = cJSON_Duplicate(plan, 1);
                /* the rows of each forward/backward: the plan's batch (its step_batch
                 * is the optimizer step's rows, micro-batches accumulated) */
                const cJSON *micro = cJSON_GetObjectItemCaseSensitive(plan, "batch");
                const cJSON *budget = cJSON_GetObjectItemCaseSensitive(plan, "budget_bytes");
                if (cJSON_IsNumber(micro)) cJSON_AddNumberToObject(pl, "micro_batch", micro->valuedouble);
                if (cJSON_IsNumber(budget)) cJSON_AddNumberToObject(o, "budget_bytes", budget->valuedouble);
                cJSON_AddItemToObject(o, "plan", pl);
            }
        }
        cJSON_AddItemToArray(arr, o);
    }
    free(rec);
    return arr;
}
