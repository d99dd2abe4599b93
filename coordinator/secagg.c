/* secagg.c: a round's secure aggregation on the coordinator (secagg.h: THE
 * PROTOCOL). Members are the round's drawn clients in draw order; their
 * messages (HFL_MSG_SECAGG, and the masked input as an UPDATE) arrive
 * through server.c under c->lock, and the main loop's tick closes phases
 * whose time ran out. The masked inputs are added into one ring vector as
 * they come; unmasking subtracts the recovered masks from it, and the sum,
 * read as signed integers, becomes the aggregator's fixed-point sum
 * (hfl_agg_load_sum), from which rounds.c's FedAvg step goes on as usual. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "proto/messages.h"
#include "proto/secagg.h"
#include "proto/secagg_crypto.h"
#include "proto/shamir.h"
#include "util/util.h"

#define SA_WAIT_MS 20 /* a client asking too early polls again this soon */
#define SA_SHARE_BYTES 64 /* a sealed share: 32 bytes of s key, 32 of self-mask seed */

enum { SA_KEYS, SA_SHARES, SA_INPUT, SA_UNMASK, SA_DONE };

typedef struct {
    int id;                     /* client id */
    uint8_t c_pk[32], s_pk[32]; /* its keys (keys phase) */
    char *cert, *sig;           /* forwarded to neighbours ("" without certificates) */
    int advertised, shared, input, unmasked; /* U1, U2, U3, and it answered the unmask request */
    int *nb;                    /* its k neighbours (member indexes) */
    int *holders;               /* nb and itself, by client id: holder x = position + 1 */
    char **ct;                  /* [k]: its share sealed for nb[j] (base64), NULL: none */
    uint8_t *rev;               /* [(k + 1) * 32]: shares of its secret revealed by holder j */
    uint8_t *got;               /* [k + 1]: 1 when holder j revealed */
} sa_member;

struct coord_secagg {
    int mode, phase, round;
    int n, k, t;                /* members, degree, threshold */
    int bits, shift;
    double clip, bound, sigma, sigma_count;
    size_t len;                 /* elements: the update's and the count */
    double phase_at;            /* when the phase opened */
    double phase_s[4];          /* how long keys, shares, input and unmask took */
    sa_member *m;
    int *member_of;             /* client id -> member index, -1 */
    uint64_t *sum;              /* the inputs added mod 2^bits */
    int n_keys, n_shared, n_input, n_unmasked;
    double proto_up, proto_down; /* bytes of the steps' messages (not the inputs), both ways */
    double count;               /* the count element of the sum: norms at most the clip */
    double unmask_compute_s;    /* the recovery of the masks and their removal */
    char fail[HFL_ERR_LEN];     /* why the round failed, "" */
};

/* How long the keys, shares and unmask phases wait for the slowest member:
 * a quarter of the round's deadline (the time the run gives a round), at
 * least 2 s (a loaded host answers a poll within that). Not capped: 1,000
 * clients sharing 2 cores need over 60 s of CPU for their shares and, the
 * scheduler being fair, all finish late together (bench/secagg.sh). */
double secagg_phase_s(const coord *c) {
    double s = c->cfg.deadline_s / 4;
    return s < 2 ? 2 : s;
}

void secagg_free(coord *c) {
    coord_secagg *s = c->sa;
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        sa_member *m = &s->m[i];
        free(m->cert), free(m->sig), free(m->nb), free(m->holders), free(m->rev), free(m->got);
        if (m->ct)
            for (int j = 0; j < s->k; j++) free(m->ct[j]);
        free(m->ct);
    }
    free(s->m), free(s->member_of), free(s->sum);
    free(s);
    c->sa = NULL;
}

static int by_id(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int secagg_round_open(coord *c, double sigma, double sigma_count, int quorum, char *err) {
    secagg_free(c);
    coord_round *r = &c->r;
    coord_secagg *s = c->sa = hfl_calloc(1, sizeof *s);
    s->mode = c->cfg.secure_agg, s->round = r->round, s->n = r->n_selected;
    s->k = s->mode == SECAGG_MASKED ? secagg_degree(s->n) : 0;
    s->t = s->mode == SECAGG_MASKED ? (s->k + 1) / 2 + 1 : 1;
    s->clip = r->clip;
    /* each client's share: any m of them add the whole variance (dp.h) */
    double m = s->t > quorum ? s->t : quorum > 1 ? quorum : 1;
    s->sigma = sigma / sqrt(m), s->sigma_count = sigma_count / sqrt(m);
    s->shift = secagg_shift(r->clip, c->cfg.fixed_bits);
    s->len = c->spec.n_trainable + 1;
    s->phase = s->mode == SECAGG_MASKED ? SA_KEYS : SA_INPUT;
    s->phase_at = hfl_now();
    s->m = hfl_calloc((size_t)(s->n ? s->n : 1), sizeof *s->m);
    s->member_of = hfl_malloc(sizeof(int) * COORD_MAX_CLIENTS);
    for (int i = 0; i < COORD_MAX_CLIENTS; i++) s->member_of[i] = -1;
    double w_total = 0;
    for (int i = 0; i < s->n; i++) {
        sa_member *m = &s->m[i];
        m->id = r->selected[i];
        s->member_of[m->id] = i;
        w_total += (double)r->slot[m->id].share_cap / r->samples_planned;
        if (s->mode != SECAGG_MASKED) continue;
        m->nb = hfl_malloc(sizeof(int) * (size_t)(s->k ? s->k : 1));
        secagg_neighbours(c->cfg.seed, r->round, s->n, i, m->nb);
        m->holders = hfl_malloc(sizeof(int) * (size_t)(s->k + 1));
        for (int j = 0; j < s->k; j++) m->holders[j] = r->selected[m->nb[j]];
        m->holders[s->k] = m->id;
        qsort(m->holders, (size_t)s->k + 1, sizeof(int), by_id);
        m->ct = hfl_calloc((size_t)(s->k ? s->k : 1), sizeof(char *));
        m->rev = hfl_calloc((size_t)(s->k + 1), 32);
        m->got = hfl_calloc((size_t)(s->k + 1), 1);
    }
    if (secagg_ring_bits(s->clip, s->shift, w_total, s->n, s->sigma, s->sigma_count, &s->bits, &s->bound, err) != 0)
        return -1;
    s->sum = hfl_calloc(s->len, sizeof *s->sum);
    return 0;
}

int secagg_check_settings(const coord *c, char *err) {
    int n = c->cfg.clients_per_round + (int)ceil(c->cfg.clients_per_round * c->cfg.over_select), bits;
    double sigma, sigma_count, bound, w_max = c->cfg.max_share < 1 ? c->cfg.max_share : 1;
    sigma = sigma_count = 0;
    if (c->dp) { /* the whole noise on one client: the most any share can be */
        sigma = dp_multiplier(c) * w_max * c->cfg.clip_norm;
        sigma_count = dp_count_sigma(c);
    }
    char why[HFL_ERR_LEN];
    if (secagg_ring_bits(c->cfg.clip_norm, secagg_shift(c->cfg.clip_norm, c->cfg.fixed_bits), 1.0, n, sigma,
                         sigma_count, &bits, &bound, why) != 0)
        return hfl_errf(err, "--secure-agg: %s", why);
    return 0;
}

/* The task's announcement, the same for every client. */
void secagg_task(const coord *c, hfl_task_secagg *out) {
    const coord_secagg *s = c->sa;
    snprintf(out->mode, sizeof out->mode, "%s", s->mode == SECAGG_MASKED ? "masked" : "clear");
    out->clip = s->clip, out->shift = s->shift, out->bits = s->bits;
}

/* Marks a member that missed a phase: the round waits for it no more. */
static void sa_drop(coord *c, sa_member *m) {
    coord_round *r = &c->r;
    if (!r->slot[m->id].received && !r->slot[m->id].refused) r->slot[m->id].refused = SLOT_DROPPED;
}

/* Member index of holder client `id` in owner o's holder list, or -1. */
static int sa_holder_pos(const coord_secagg *s, const sa_member *o, int id) {
    for (int j = 0; j <= s->k; j++)
        if (o->holders[j] == id) return j;
    return -1;
}

/* Members the open phase waits for that are out of the round (declined,
 * refused, left): not waited for. */
static int sa_gone(const coord *c) {
    const coord_secagg *s = c->sa;
    int gone = 0;
    for (int i = 0; i < s->n; i++) {
        const sa_member *m = &s->m[i];
        int waited = s->phase == SA_KEYS ? !m->advertised : m->advertised && !m->shared;
        gone += waited && (c->r.slot[m->id].refused || c->clients[m->id].left[0]);
    }
    return gone;
}

/* Closes the keys or shares phase (all in, or time up); fewer than t fail the round. */
static void sa_advance(coord *c) {
    coord_secagg *s = c->sa;
    double now = hfl_now();
    int late = now - s->phase_at > secagg_phase_s(c);
    if (s->phase == SA_KEYS && (s->n_keys + sa_gone(c) >= s->n || late)) {
        for (int i = 0; i < s->n; i++)
            if (!s->m[i].advertised) sa_drop(c, &s->m[i]);
        if (s->n_keys < s->t)
            snprintf(s->fail, sizeof s->fail, "secure aggregation: only %d of %d clients sent keys (threshold %d), "
                     "global model kept", s->n_keys, s->n, s->t);
        s->phase_s[SA_KEYS] = now - s->phase_at;
        s->phase = SA_SHARES, s->phase_at = now;
    } else if (s->phase == SA_SHARES && (s->n_shared + sa_gone(c) >= s->n_keys || late)) {
        for (int i = 0; i < s->n; i++)
            if (!s->m[i].shared) sa_drop(c, &s->m[i]);
        if (s->n_shared < s->t && !s->fail[0])
            snprintf(s->fail, sizeof s->fail, "secure aggregation: only %d of %d clients shared their keys "
                     "(threshold %d), global model kept", s->n_shared, s->n, s->t);
        s->phase_s[SA_SHARES] = now - s->phase_at;
        s->phase = SA_INPUT, s->phase_at = now;
    }
}

int secagg_failed(coord *c, char *why, size_t cap) {
    coord_secagg *s = c->sa;
    if (!s) return 0;
    if (s->phase < SA_INPUT) sa_advance(c);
    if (!s->fail[0]) return 0;
    snprintf(why, cap, "%s", s->fail);
    return 1;
}

static uint8_t *sa_skip(coord *c, sa_member *m, const char *why, size_t *len) {
    sa_drop(c, m);
    return coord_skip_reply(why, 1, len);
}

static uint8_t *sa_ack(size_t *len) {
    cJSON *meta = cJSON_CreateObject();
    uint8_t *m = meta ? hfl_msg_encode(HFL_MSG_SECAGG, meta, NULL, 0, len) : NULL;
    cJSON_Delete(meta);
    return m;
}

/* A step's fields from meta (their table's one-line error, as an error reply). */
static int sa_read(const hfl_wire_msg *d, const cJSON *meta, void *msg, uint8_t **reply, size_t *len) {
    char err[HFL_ERR_LEN], why[HFL_ERR_LEN + 64];
    if (hfl_wire_decode(d, meta, msg, err) == 0) return 0;
    hfl_wire_free(d, msg);
    snprintf(why, sizeof why, "secure aggregation: %s: %s", d->name, err);
    *reply = coord_error_reply(why, len);
    return -1;
}

/* keys, read: checked against the sender's certificate (when there are
 * certificates) and kept for its neighbours' setup. */
static uint8_t *sa_keys_take(coord *c, sa_member *m, const hfl_secagg_keys_msg *k, size_t *len) {
    coord_secagg *s = c->sa;
    char err[HFL_ERR_LEN];
    const char *cert = k->has_cert ? k->cert : NULL, *sig = k->has_sig ? k->sig : NULL;
    if (hfl_b64_decode(k->c_pk, m->c_pk, 32) != 32 || hfl_b64_decode(k->s_pk, m->s_pk, 32) != 32)
        return coord_error_reply("secure aggregation: keys c_pk and s_pk must be 32 bytes in base64", len);
    if (c->trust) { /* checked here too, so a bad one fails its sender, not its neighbours */
        coord_client *cl = &c->clients[m->id];
        const char *name = cl->name;
        char round[16];
        snprintf(round, sizeof round, "%d", s->round);
        const void *parts[] = {"hfl-secagg-keys-v1", c->instance, round, name, m->c_pk, m->s_pk};
        size_t lens[] = {18, strlen(c->instance), strlen(round), strlen(name), 32, 32};
        if (!cert || !sig)
            return coord_error_reply("secure aggregation: keys need the sender's certificate and signature", len);
        /* the certificate checked once a run per client (revocation refuses its session at once anyway) */
        if (!cl->sa_peer || strcmp(cl->sa_cert, cert) != 0) {
            hfl_peer *p;
            if (hfl_trust_check(c->trust, cert, HFL_ROLE_CLIENT, name, &p, err) != 0)
                return coord_error_reply("secure aggregation: keys need the sender's own valid certificate", len);
            hfl_peer_free(cl->sa_peer);
            free(cl->sa_cert);
            cl->sa_peer = p, cl->sa_cert = hfl_strdup(cert);
        }
        if (hfl_peer_verify(cl->sa_peer, parts, lens, 6, sig, err) != 0)
            return coord_error_reply("secure aggregation: the keys' signature does not verify", len);
    }
    m->cert = hfl_strdup(cert ? cert : "");
    m->sig = hfl_strdup(sig ? sig : "");
    m->advertised = 1;
    s->n_keys++;
    sa_advance(c);
    return sa_ack(len);
}

/* keys: {c_pk, s_pk (base64), cert, sig}. */
static uint8_t *sa_keys(coord *c, sa_member *m, const cJSON *meta, size_t *len) {
    coord_secagg *s = c->sa;
    uint8_t *reply;
    /* A second set of keys (a client that gave up on this round and took its
     * task again) or keys after the phase closed cannot join the round: the
     * member is dropped and told to skip it, so it does not ask again and
     * again until the round ends (seen with 1,000 clients, bench/secagg.sh). */
    if (s->phase != SA_KEYS || m->advertised)
        return sa_skip(c, m, "secure aggregation: keys already taken or their phase closed (skip the round)", len);
    hfl_secagg_keys_msg *k = hfl_calloc(1, sizeof *k);
    if (sa_read(&hfl_wire_secagg_keys, meta, k, &reply, len) == 0) reply = sa_keys_take(c, m, k, len);
    free(k);
    return reply;
}

/* setup: the client's weight and ring, and its neighbours' keys (masked). */
static uint8_t *sa_setup(coord *c, sa_member *m, size_t *len) {
    coord_secagg *s = c->sa;
    coord_round *r = &c->r;
    if (s->mode == SECAGG_MASKED && s->phase == SA_KEYS) return coord_wait_reply(SA_WAIT_MS, len);
    if (s->mode == SECAGG_MASKED && !m->advertised)
        return sa_skip(c, m, "secure aggregation: its keys came after the keys phase closed (skip the round)", len);
    int64_t weighed = r->slot[m->id].share_cap < r->slot[m->id].samples_at_select ? r->slot[m->id].share_cap
                                                                          : r->slot[m->id].samples_at_select;
    hfl_secagg_setup_msg o = {.round = s->round, .weight = (double)weighed / r->samples_planned, .bits = s->bits,
                              .shift = s->shift, .clip = s->clip, .sigma = s->sigma, .sigma_count = s->sigma_count,
                              .threshold = s->t};
    int n = s->mode == SECAGG_MASKED ? s->k + 1 : 0;
    hfl_secagg_holder *hs = hfl_calloc(n ? (size_t)n : 1, sizeof *hs); /* NNG threads: certificates are big for a stack */
    for (int j = 0; j < n; j++) {
        const sa_member *v = &s->m[s->member_of[m->holders[j]]];
        if (!v->advertised) continue;
        hfl_secagg_holder *h = &hs[o.holders.n++];
        h->id = v->id, h->x = j + 1;
        snprintf(h->name, sizeof h->name, "%s", c->clients[v->id].name);
        hfl_b64_encode(v->c_pk, 32, h->c_pk, sizeof h->c_pk);
        hfl_b64_encode(v->s_pk, 32, h->s_pk, sizeof h->s_pk);
        h->has_cert = v->cert[0] != 0, h->has_sig = v->sig[0] != 0; /* "": --insecure */
        snprintf(h->cert, sizeof h->cert, "%s", v->cert);
        snprintf(h->sig, sizeof h->sig, "%s", v->sig);
    }
    o.holders.v = hs;
    uint8_t *out = hfl_wire_message(&hfl_wire_secagg_setup, &o, NULL, 0, len);
    free(hs);
    return out;
}

/* shares: [{to, ct}] for its advertised neighbours. */
static uint8_t *sa_shares(coord *c, sa_member *m, const cJSON *meta, size_t *len) {
    coord_secagg *s = c->sa;
    if (s->phase != SA_SHARES || !m->advertised || m->shared)
        return coord_error_reply("secure aggregation: not taking shares now", len);
    hfl_secagg_shares_msg in = {0};
    uint8_t *reply = NULL;
    if (sa_read(&hfl_wire_secagg_shares, meta, &in, &reply, len) != 0) return reply;
    int want = 0;
    for (int j = 0; j < s->k; j++) want += s->m[m->nb[j]].advertised;
    for (int i = 0; i < in.shares.n && !reply; i++) {
        const hfl_secagg_sealed_to *e = (const hfl_secagg_sealed_to *)in.shares.v + i;
        int j = 0;
        while (j < s->k && s->m[m->nb[j]].id != e->to) j++;
        uint8_t tmp[SA_SHARE_BYTES + HFL_SEAL_OVERHEAD + 4];
        if (j == s->k || !s->m[m->nb[j]].advertised || m->ct[j] ||
            hfl_b64_decode(e->ct, tmp, sizeof tmp) != SA_SHARE_BYTES + HFL_SEAL_OVERHEAD)
            reply = coord_error_reply("secure aggregation: a share is not for an advertised neighbour, repeated, "
                                      "or not a sealed share", len);
        else m->ct[j] = hfl_strdup(e->ct);
    }
    if (!reply && in.shares.n != want)
        reply = coord_error_reply("secure aggregation: shares must go to every advertised neighbour", len);
    hfl_wire_free(&hfl_wire_secagg_shares, &in);
    if (reply) {
        for (int j = 0; j < s->k; j++) free(m->ct[j]), m->ct[j] = NULL;
        return reply;
    }
    m->shared = 1;
    s->n_shared++;
    sa_advance(c);
    return sa_ack(len);
}

/* inbox: the shares sealed for it by neighbours that shared. */
static uint8_t *sa_inbox(coord *c, sa_member *m, size_t *len) {
    coord_secagg *s = c->sa;
    if (s->phase < SA_INPUT) return coord_wait_reply(SA_WAIT_MS, len);
    if (!m->shared) return sa_skip(c, m, "secure aggregation: its shares came after the phase closed (skip the round)", len);
    hfl_secagg_sealed_from sh[HFL_SECAGG_MAX_HOLDERS];
    hfl_secagg_inbox_msg o = {.round = s->round, .shares = {sh, 0}};
    for (int j = 0; j < s->k; j++) {
        const sa_member *v = &s->m[m->nb[j]];
        if (!v->shared) continue;
        int back = 0; /* v's slot for m */
        while (back < s->k && v->nb[back] != s->member_of[m->id]) back++;
        sh[o.shares.n].from = v->id;
        snprintf(sh[o.shares.n++].ct, sizeof sh[0].ct, "%s", v->ct[back]);
    }
    return hfl_wire_message(&hfl_wire_secagg_inbox, &o, NULL, 0, len);
}

/* unmask_list: which of its holders' owners sent input (after the input phase). */
static uint8_t *sa_unmask_list(coord *c, sa_member *m, size_t *len) {
    coord_secagg *s = c->sa;
    if (s->phase < SA_UNMASK) return coord_wait_reply(SA_WAIT_MS, len);
    if (!m->input || s->phase != SA_UNMASK)
        return sa_skip(c, m, "secure aggregation: not among the clients whose input arrived (skip the round)", len);
    int64_t alive[HFL_SECAGG_MAX_HOLDERS], dropped[HFL_SECAGG_MAX_HOLDERS];
    hfl_secagg_unmask_list_msg o = {.round = s->round, .alive = {alive, 0}, .dropped = {dropped, 0}};
    for (int j = 0; j < s->k; j++) {
        const sa_member *v = &s->m[m->nb[j]];
        if (!v->shared) continue;
        hfl_wire_list *l = v->input ? &o.alive : &o.dropped;
        ((int64_t *)l->v)[l->n++] = v->id;
    }
    alive[o.alive.n++] = m->id;
    return hfl_wire_message(&hfl_wire_secagg_unmask_list, &o, NULL, 0, len);
}

/* unmask: [{of, share}]: a seed share for an owner that sent input, a key share for one that did not. */
static uint8_t *sa_unmask(coord *c, sa_member *m, const cJSON *meta, size_t *len) {
    coord_secagg *s = c->sa;
    if (s->phase != SA_UNMASK || !m->input || m->unmasked)
        return coord_error_reply("secure aggregation: not taking unmask shares now", len);
    hfl_secagg_unmask_msg in = {0};
    uint8_t *reply = NULL;
    if (sa_read(&hfl_wire_secagg_unmask, meta, &in, &reply, len) != 0) return reply;
    for (int i = 0; i < in.shares.n && !reply; i++) {
        const hfl_secagg_reveal *e = (const hfl_secagg_reveal *)in.shares.v + i;
        int o = s->member_of[e->of]; /* e->of < HFL_WIRE_MAX_CLIENTS: its table's range */
        sa_member *v = o >= 0 ? &s->m[o] : NULL;
        int x = v ? sa_holder_pos(s, v, m->id) : -1;
        uint8_t buf[33];
        if (x < 0 || !v->shared || v->got[x] || hfl_b64_decode(e->share, buf, sizeof buf) != 32)
            reply = coord_error_reply("secure aggregation: an unmask share is for no owner it holds, repeated, "
                                      "or not 32 bytes", len);
        else memcpy(v->rev + (size_t)x * 32, buf, 32), v->got[x] = 1;
    }
    hfl_wire_free(&hfl_wire_secagg_unmask, &in);
    if (reply) return reply;
    m->unmasked = 1;
    s->n_unmasked++;
    return sa_ack(len);
}

static uint8_t *sa_request(coord *c, int id, const cJSON *meta, size_t *len);

uint8_t *secagg_request(coord *c, int id, const cJSON *meta, size_t msg_bytes, size_t *len) {
    uint8_t *out = sa_request(c, id, meta, len);
    if (c->sa) c->sa->proto_up += (double)msg_bytes, c->sa->proto_down += out ? (double)*len : 0;
    return out;
}

static uint8_t *sa_request(coord *c, int id, const cJSON *meta, size_t *len) {
    coord_secagg *s = c->sa;
    coord_round *r = &c->r;
    hfl_secagg_step_msg hd = {0};
    uint8_t *reply;
    c->clients[id].last_seen = hfl_now();
    if (sa_read(&hfl_wire_secagg_step, meta, &hd, &reply, len) != 0) return reply;
    const char *step = hd.step;
    if (!s || !r->open || hd.round != r->round || s->member_of[id] < 0)
        return coord_skip_reply("secure aggregation: not a member of the open round (skip the round)", 1, len);
    sa_member *m = &s->m[s->member_of[id]];
    if (r->slot[id].refused) return sa_skip(c, m, "secure aggregation: left out of this round (skip the round)", len);
    if (!strcmp(step, "setup")) return sa_setup(c, m, len);
    if (s->mode != SECAGG_MASKED) return coord_error_reply("secure aggregation: this round runs in the clear", len);
    if (!strcmp(step, "keys")) return sa_keys(c, m, meta, len);
    if (!strcmp(step, "shares")) return sa_shares(c, m, meta, len);
    if (!strcmp(step, "inbox")) return sa_inbox(c, m, len);
    if (!strcmp(step, "unmask_list")) return sa_unmask_list(c, m, len);
    if (!strcmp(step, "unmask")) return sa_unmask(c, m, meta, len);
    return coord_error_reply("secure aggregation: unknown step", len);
}

/* HFL_TEST_SECAGG_RECORD=DIR: each input as received, DIR/r<round>-c<id>.bin
 * (tests/integration/secagg.sh's test of what the coordinator sees). */
static void sa_test_record(int round, int id, const uint8_t *payload, size_t plen) {
    const char *dir = getenv("HFL_TEST_SECAGG_RECORD");
    if (!dir || !dir[0]) return;
    char path[1024], err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/r%d-c%d.bin", dir, round, id);
    if (hfl_write_file_atomic(path, payload, plen, err) != 0) fprintf(stderr, "hfl-coordinator: %s\n", err);
}

int secagg_input(coord *c, int id, const uint8_t *payload, size_t plen, char *err) {
    coord_secagg *s = c->sa;
    int i = s ? s->member_of[id] : -1;
    if (i < 0) return hfl_errf(err, "secure aggregation: client %d is not a member of the round", id);
    sa_member *m = &s->m[i];
    if (s->phase != SA_INPUT || (s->mode == SECAGG_MASKED && !m->shared))
        return hfl_errf(err, "secure aggregation: client %d's input comes outside its input phase", id);
    size_t want = hfl_ring_bytes(s->len, s->bits);
    if (plen != want)
        return hfl_errf(err, "secure aggregation: input of %zu bytes, the ring of %zu elements at %d bits takes %zu",
                        plen, s->len, s->bits, want);
    hfl_ring_unpack_add(payload, s->len, s->bits, s->sum);
    sa_test_record(s->round, id, payload, plen);
    m->input = 1;
    s->n_input++;
    return 0;
}

/* Removes the masks of the masked round from s->sum, or fails it. */
static int sa_unmask_sum(coord *c, char *why, size_t cap) {
    coord_secagg *s = c->sa;
    char err[HFL_ERR_LEN];
    uint32_t ctx[3];
    for (int i = 0; i < s->n; i++) {
        sa_member *v = &s->m[i];
        if (!v->shared) continue;
        const uint8_t *rows[HFL_SHAMIR_MAX_HOLDERS];
        uint8_t xs[HFL_SHAMIR_MAX_HOLDERS], secret[32];
        int have = 0;
        for (int j = 0; j <= s->k && have < s->t; j++)
            if (v->got[j]) rows[have] = v->rev + (size_t)j * 32, xs[have++] = (uint8_t)(j + 1);
        if (have < s->t) {
            snprintf(why, cap, "secure aggregation: only %d shares of client %d's %s (threshold %d), global model kept",
                     have, v->id, v->input ? "self mask" : "mask key", s->t);
            return -1;
        }
        if (hfl_shamir_combine(rows, xs, s->t, 32, secret, err) != 0) {
            snprintf(why, cap, "secure aggregation: %s, global model kept", err);
            return -1;
        }
        if (v->input) { /* its self mask: + PRG(b_v) in its input */
            uint8_t key[32];
            ctx[0] = (uint32_t)s->round, ctx[1] = (uint32_t)v->id;
            hfl_secagg_kdf(secret, 32, "hfl secagg self mask", ctx, 2, key);
            hfl_mask_apply(key, s->bits, -1, s->sum, s->len);
            continue;
        }
        /* dropped after sharing: its s key, checked against its public key,
         * gives the pairwise masks its neighbours that sent input hold */
        uint8_t pk[32];
        if (hfl_x25519_public(secret, pk, err) != 0 || memcmp(pk, v->s_pk, 32) != 0) {
            snprintf(why, cap, "secure aggregation: the shares of client %d's mask key give another key, global "
                     "model kept", v->id);
            return -1;
        }
        for (int j = 0; j < s->k; j++) {
            const sa_member *u = &s->m[v->nb[j]];
            if (!u->input) continue;
            uint8_t z[32], key[32];
            if (hfl_x25519_shared(secret, u->s_pk, z, err) != 0) {
                snprintf(why, cap, "secure aggregation: %s, global model kept", err);
                return -1;
            }
            int lo = u->id < v->id ? u->id : v->id, hi = u->id < v->id ? v->id : u->id;
            ctx[0] = (uint32_t)s->round, ctx[1] = (uint32_t)lo, ctx[2] = (uint32_t)hi;
            hfl_secagg_kdf(z, 32, "hfl secagg pair mask", ctx, 3, key);
            /* u added + mask when its id is the lower, - when the higher: undo it */
            hfl_mask_apply(key, s->bits, u->id < v->id ? -1 : +1, s->sum, s->len);
        }
    }
    return 0;
}

/* The unmasked sum into the aggregator (and the count). */
static void sa_load(coord *c) {
    coord_secagg *s = c->sa;
    size_t d = s->len - 1;
    int64_t *v = hfl_malloc(sizeof(int64_t) * (d ? d : 1));
    for (size_t i = 0; i < d; i++) v[i] = hfl_ring_signed(s->sum[i], s->bits);
    hfl_agg_load_sum(&c->agg, v, s->shift);
    s->count = ldexp((double)hfl_ring_signed(s->sum[d], s->bits), -SECAGG_COUNT_SHIFT);
    free(v);
}

int secagg_ready(coord *c, int quorum, char *why, size_t cap) {
    coord_secagg *s = c->sa;
    if (!s) { /* a round continued from a state dir has no keys or shares: it cannot be unmasked */
        snprintf(why, cap, "secure aggregation: the round has no protocol state (the coordinator restarted), global "
                 "model kept");
        return -1;
    }
    int need = s->t > quorum ? s->t : quorum;
    if (s->phase < SA_INPUT) s->phase = SA_INPUT; /* the deadline came first */
    if (s->phase == SA_INPUT) {
        for (int i = 0; i < s->n; i++)
            if (!s->m[i].input) sa_drop(c, &s->m[i]);
        if (s->n_input < need) {
            snprintf(why, cap, "secure aggregation: only %d inputs arrived (threshold %d, quorum %d), global model kept",
                     s->n_input, s->t, quorum);
            s->phase = SA_DONE;
            return -1;
        }
        if (s->mode != SECAGG_MASKED) {
            sa_load(c);
            s->phase = SA_DONE;
            return 1;
        }
        s->phase_s[SA_INPUT] = hfl_now() - s->phase_at;
        s->phase = SA_UNMASK, s->phase_at = hfl_now();
        return 0;
    }
    if (s->phase != SA_UNMASK) return hfl_errf(why, "secure aggregation: the round has no sum to give");
    if (s->n_unmasked < s->n_input && hfl_now() - s->phase_at <= secagg_phase_s(c)) return 0;
    double t0 = hfl_now();
    s->phase_s[SA_UNMASK] = t0 - s->phase_at;
    s->phase = SA_DONE;
    if (s->n_unmasked < s->t) {
        snprintf(why, cap, "secure aggregation: only %d of %d clients answered the unmask request (threshold %d), "
                 "global model kept", s->n_unmasked, s->n_input, s->t);
        return -1;
    }
    if (sa_unmask_sum(c, why, cap) != 0) return -1;
    sa_load(c);
    s->unmask_compute_s = hfl_now() - t0;
    return 1;
}

int secagg_unmasking(const coord *c) { return c->sa && c->sa->phase == SA_UNMASK; }

double secagg_count(const coord *c) { return c->sa ? c->sa->count : 0; }

int secagg_report(const coord *c, round_secagg *x) {
    const coord_secagg *s = c->sa;
    if (!s) return 0;
    int masked = s->mode == SECAGG_MASKED;
    *x = (round_secagg){.bits = s->bits, .word_bits = s->bits > 32 ? 64 : 32, .shift = s->shift, .bound = s->bound,
                        .elements = (double)s->len, .input_bytes = (double)hfl_ring_bytes(s->len, s->bits),
                        .members = s->n, .protocol_bytes_up = s->proto_up, .protocol_bytes_down = s->proto_down,
                        .masked = masked, .degree = s->k, .threshold = s->t, .keys = s->n_keys,
                        .shared = s->n_shared, .unmasked = s->n_unmasked, .inputs = s->n_input,
                        .phase_s = {masked, s->phase_s[0], s->phase_s[1], s->phase_s[2], s->phase_s[3]},
                        .unmask_compute_s = s->unmask_compute_s};
    snprintf(x->mode, sizeof x->mode, "%s", masked ? "masked" : "clear");
    int64_t *dropped = hfl_calloc((size_t)s->n + 1, sizeof *dropped); /* shared (masked) or drawn (clear), sent no input */
    for (int i = 0; i < s->n; i++)
        if (!s->m[i].input && (!masked || s->m[i].shared)) dropped[x->dropped.n++] = s->m[i].id;
    x->dropped.v = dropped;
    return 1;
}

void secagg_tick(coord *c) {
    if (c->sa && c->sa->phase < SA_INPUT) sa_advance(c);
}
