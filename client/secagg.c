/* secagg.c: the client's side of secure aggregation (proto/secagg.h:
 * THE RING, THE PROTOCOL).
 *
 * client_secagg_begin runs before training: fresh X25519 keys signed with
 * our certificate's key (keys), the round's weight, ring and neighbours,
 * each neighbour's certificate and signature checked (setup), and our mask
 * key and self-mask seed Shamir-shared among them and us, each share sealed
 * for its holder (shares). client_secagg_send runs after it: the shares
 * sealed for us (inbox), our update clipped, weighted and rounded with the
 * aggregator's own bodies (kernels/agg_hd.h through the CPU backend's
 * aggregation ops, so the integers are the ones the coordinator would have
 * made), our DP noise share, the masks, packed and sent as an UPDATE; then
 * the shares the coordinator asks for (unmask): a neighbour's seed share if
 * its input arrived, its key share if not, never both. A step the
 * coordinator answers with "skip_round" ends our part in the round; the
 * next pull brings the next one.
 *
 * HFL_TEST_SECAGG_KILL=STEP:ROUND:NAME[,NAME...] kills the named clients
 * (SIGKILL) right after STEP of ROUND: "keys", "shares" (in the clear:
 * after setup, the same point before any input) or "input": the dropout
 * tests. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "proto/messages.h"
#include "proto/secagg.h"
#include "kernels/agg.h"
#include "kernels/backend.h"
#include "proto/secagg_crypto.h"
#include "proto/shamir.h"
#include "util/util.h"

typedef struct {
    int id, x;
    char name[64];
    uint8_t c_pk[32], s_pk[32];
    uint8_t s_share[32], b_share[32]; /* its secrets' shares sealed for us (inbox) */
    int inbox;                        /* its shares came: we mask with it */
    uint8_t seal[32];                 /* the sealing key agreed with it (shares), for the inbox */
    int have_seal;
} sa_holder;

struct client_secagg {
    int masked, round;
    hfl_csprng *g;
    uint8_t c_sk[32], c_pk[32], s_sk[32], s_pk[32], seed[32];
    double weight, clip, sigma, sigma_count;
    int bits, shift, t;
    int n_h, self; /* holders (us among them at index self) */
    sa_holder h[HFL_SECAGG_MAX_HOLDERS];
};

static void sa_test_kill(const char *step, int round, const char *name) {
    const char *spec = getenv("HFL_TEST_SECAGG_KILL");
    char want[64];
    snprintf(want, sizeof want, "%s:%d:", step, round);
    if (!spec || strncmp(spec, want, strlen(want)) != 0) return;
    const char *p = spec + strlen(want);
    size_t n = strlen(name);
    while (*p) {
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0)) {
            fprintf(stderr, "HFL_TEST_SECAGG_KILL: %s killed after %s in round %d\n", name, step, round);
            fflush(NULL);
            raise(SIGKILL);
        }
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
}

/* One step: its fields (body by table d; none when d is NULL) sent until
 * the coordinator answers more than "wait"; 0 with *rep (a SECAGG reply;
 * the caller frees it and raw), 1 when told to skip the round (why set),
 * -1 with err. */
static int sa_step(client_session *ss, const char *step, int round, const hfl_wire_msg *d, const void *body,
                   double until, hfl_msg *rep, nng_msg **raw, char *why, char *err) {
    hfl_secagg_step_msg hd = {.round = round};
    snprintf(hd.step, sizeof hd.step, "%s", step);
    cJSON *meta = client_request_meta(ss->s, d ? d : &hfl_wire_secagg_step, d ? body : &hd);
    if (meta && d && hfl_wire_encode_into(&hfl_wire_secagg_step, &hd, meta) != 0) cJSON_Delete(meta), meta = NULL;
    if (!meta) return hfl_errf(err, "secure aggregation %s: out of memory", step);
    int rc = -1;
    double backoff = 1; /* waits grow 1.5x from the coordinator's, to 0.25 s: a fleet polls less the longer it waits */
    for (;;) {
        if (client_request(ss, HFL_MSG_SECAGG, meta, NULL, 0, rep, raw, err) != 0) break;
        if (rep->type == HFL_MSG_WAIT && hfl_now() < until) {
            hfl_wait_msg w = {.ms = 20};
            hfl_wire_decode(&hfl_wire_wait, rep->meta, &w, NULL);
            double ms = (double)w.ms;
            hfl_msg_free(rep);
            nng_msg_free(*raw);
            double wait = ms * backoff;
            hfl_sleep_ms((int)(wait < 250 ? wait : 250));
            backoff *= 1.5;
            continue;
        }
        if (rep->type == HFL_MSG_SECAGG) {
            rc = 0;
            break;
        }
        hfl_error_msg e = client_reply_error(rep, "no reason given");
        rc = e.skip_round ? 1 : -1;
        if (rc == 1) snprintf(why, HFL_ERR_LEN, "%s", e.error);
        else hfl_errf(err, "secure aggregation %s: %s", step, rep->type == HFL_MSG_WAIT ? "the round's deadline passed" : e.error);
        hfl_msg_free(rep);
        nng_msg_free(*raw);
        break;
    }
    cJSON_Delete(meta);
    return rc;
}

/* A step whose reply is only an acknowledgement. */
static int sa_post(client_session *ss, const char *step, int round, const hfl_wire_msg *d, const void *body,
                   double until, char *why, char *err) {
    hfl_msg rep;
    nng_msg *raw;
    int rc = sa_step(ss, step, round, d, body, until, &rep, &raw, why, err);
    if (rc == 0) hfl_msg_free(&rep), nng_msg_free(raw);
    return rc;
}

static int sa_keys(client_session *ss, client_secagg *sa, double until, char *why, char *err) {
    client_state *s = ss->s;
    if (hfl_x25519_keypair(sa->g, sa->c_sk, sa->c_pk, err) != 0 || hfl_x25519_keypair(sa->g, sa->s_sk, sa->s_pk, err) != 0 ||
        hfl_csprng_bytes(sa->g, sa->seed, 32, err) != 0)
        return -1;
    hfl_secagg_keys_msg *k = hfl_calloc(1, sizeof *k); /* a certificate is big for a stack */
    hfl_b64_encode(sa->c_pk, 32, k->c_pk, sizeof k->c_pk);
    hfl_b64_encode(sa->s_pk, 32, k->s_pk, sizeof k->s_pk);
    int rc = 0;
    if (s->auth.self) { /* bound to our certificate: no one else's keys can stand in for ours */
        char round[16];
        const char *name = hfl_identity_name(s->auth.self);
        snprintf(round, sizeof round, "%d", sa->round);
        const void *parts[] = {"hfl-secagg-keys-v1", s->instance, round, name, sa->c_pk, sa->s_pk};
        size_t lens[] = {18, strlen(s->instance), strlen(round), strlen(name), 32, 32};
        rc = hfl_identity_sign(s->auth.self, parts, lens, 6, k->sig, err);
        k->has_sig = 1, k->has_cert = 1;
        snprintf(k->cert, sizeof k->cert, "%s", hfl_identity_cert(s->auth.self));
    }
    if (rc == 0) rc = sa_post(ss, "keys", sa->round, &hfl_wire_secagg_keys, k, until, why, err);
    free(k);
    if (rc == 0) sa_test_kill("keys", sa->round, s->auth.self ? hfl_identity_name(s->auth.self) : "");
    return rc;
}

/* Certificates checked against the CA, kept by name for the run: a
 * neighbour seen again costs one signature check, not two. Filled in
 * order, the oldest replaced when full. */
#define SA_PEER_CACHE 256
static struct {
    char name[64];
    char *cert;
    hfl_peer *peer;
} sa_peers[SA_PEER_CACHE];
static int sa_peers_next;

static hfl_peer *sa_peer_checked(const client_state *s, const char *cert, const char *name, char *err) {
    for (int i = 0; i < SA_PEER_CACHE; i++)
        if (sa_peers[i].peer && !strcmp(sa_peers[i].name, name) && !strcmp(sa_peers[i].cert, cert))
            return sa_peers[i].peer;
    hfl_peer *p;
    if (hfl_trust_check(s->auth.trust, cert, HFL_ROLE_CLIENT, name, &p, err) != 0) return NULL;
    int i = sa_peers_next;
    sa_peers_next = (sa_peers_next + 1) % SA_PEER_CACHE;
    hfl_peer_free(sa_peers[i].peer);
    free(sa_peers[i].cert);
    snprintf(sa_peers[i].name, sizeof sa_peers[i].name, "%s", name);
    sa_peers[i].cert = hfl_strdup(cert);
    sa_peers[i].peer = p;
    return p;
}

/* A holder from the setup reply, its keys checked against its certificate. */
static int sa_holder_read(const client_state *s, const client_secagg *sa, const hfl_secagg_holder *o, sa_holder *h,
                          char *err) {
    h->id = (int)o->id, h->x = (int)o->x;
    snprintf(h->name, sizeof h->name, "%s", o->name);
    if (hfl_b64_decode(o->c_pk, h->c_pk, 32) != 32 || hfl_b64_decode(o->s_pk, h->s_pk, 32) != 32)
        return hfl_errf(err, "holder %d's keys are not 32 bytes in base64", h->id);
    if (!s->auth.trust) return 0; /* --insecure: taken on trust */
    const char *cert = o->has_cert ? o->cert : NULL, *sig = o->has_sig ? o->sig : NULL;
    char round[16];
    snprintf(round, sizeof round, "%d", sa->round);
    hfl_peer *p = cert && sig ? sa_peer_checked(s, cert, h->name, err) : NULL;
    if (!p) return hfl_errf(err, "holder %s's keys come without a valid certificate", h->name);
    const void *parts[] = {"hfl-secagg-keys-v1", s->instance, round, h->name, h->c_pk, h->s_pk};
    size_t lens[] = {18, strlen(s->instance), strlen(round), strlen(h->name), 32, 32};
    int rc = hfl_peer_verify(p, parts, lens, 6, sig, err);
    return rc == 0 ? 0 : hfl_errf(err, "holder %s's keys are not signed by its certificate", h->name);
}

static int sa_setup(client_session *ss, client_secagg *sa, double until, char *why, char *err) {
    client_state *s = ss->s;
    hfl_msg rep;
    nng_msg *raw;
    int rc = sa_step(ss, "setup", sa->round, NULL, NULL, until, &rep, &raw, why, err);
    if (rc != 0) return rc;
    hfl_secagg_setup_msg o = {0};
    char e[HFL_ERR_LEN];
    if (hfl_wire_decode(&hfl_wire_secagg_setup, rep.meta, &o, e) != 0) rc = hfl_errf(err, "secure aggregation setup: %s", e);
    sa->weight = o.weight, sa->clip = o.clip, sa->sigma = o.sigma, sa->sigma_count = o.sigma_count;
    sa->bits = (int)o.bits, sa->shift = (int)o.shift, sa->t = (int)o.threshold, sa->n_h = 0, sa->self = -1;
    for (int i = 0; i < o.holders.n && rc == 0; i++) { /* at most HFL_SECAGG_MAX_HOLDERS: the table's cap */
        if (sa_holder_read(s, sa, (const hfl_secagg_holder *)o.holders.v + i, &sa->h[sa->n_h], err) != 0) rc = -1;
        else if (sa->h[sa->n_h].id == s->client_id) sa->self = sa->n_h++;
        else sa->n_h++;
    }
    if (rc == 0 && sa->masked && (sa->self < 0 || memcmp(sa->h[sa->self].s_pk, sa->s_pk, 32) != 0))
        rc = hfl_errf(err, "setup does not carry our own keys");
    hfl_wire_free(&hfl_wire_secagg_setup, &o);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return rc;
}

/* The sealing key and aad between us and holder h (the same on both sides),
 * agreed once a round and kept for the inbox. */
static int sa_seal_key(const client_state *s, const client_secagg *sa, sa_holder *h, int from, int to,
                       uint8_t key[32], uint32_t aad[3], char *err) {
    if (!h->have_seal) {
        uint8_t z[32];
        if (hfl_x25519_shared(sa->c_sk, h->c_pk, z, err) != 0) return -1;
        uint32_t lo = (uint32_t)(s->client_id < h->id ? s->client_id : h->id);
        uint32_t hi = (uint32_t)(s->client_id < h->id ? h->id : s->client_id);
        uint32_t ctx[3] = {(uint32_t)sa->round, lo, hi};
        hfl_secagg_kdf(z, 32, "hfl secagg share key", ctx, 3, h->seal);
        h->have_seal = 1;
    }
    memcpy(key, h->seal, 32);
    aad[0] = (uint32_t)sa->round, aad[1] = (uint32_t)from, aad[2] = (uint32_t)to;
    return 0;
}

static int sa_shares(client_session *ss, client_secagg *sa, double until, char *why, char *err) {
    client_state *s = ss->s;
    int n = 0;
    for (int j = 0; j < sa->n_h; j++) n = sa->h[j].x > n ? sa->h[j].x : n;
    uint8_t *ks = hfl_malloc((size_t)n * 32), *bs = hfl_malloc((size_t)n * 32);
    int rc = hfl_shamir_split(sa->g, sa->s_sk, 32, sa->t, n, ks, err) != 0 ||
                     hfl_shamir_split(sa->g, sa->seed, 32, sa->t, n, bs, err) != 0
                 ? -1
                 : 0;
    hfl_secagg_sealed_to sealed[HFL_SECAGG_MAX_HOLDERS];
    hfl_secagg_shares_msg out = {.shares = {sealed, 0}};
    for (int j = 0; j < sa->n_h && rc == 0; j++) {
        sa_holder *h = &sa->h[j];
        uint8_t pt[64], ct[64 + HFL_SEAL_OVERHEAD], key[32];
        uint32_t aad[3];
        memcpy(pt, ks + (size_t)(h->x - 1) * 32, 32);
        memcpy(pt + 32, bs + (size_t)(h->x - 1) * 32, 32);
        if (j == sa->self) { /* our own share stays here */
            memcpy(h->s_share, pt, 32), memcpy(h->b_share, pt + 32, 32);
            continue;
        }
        if (sa_seal_key(s, sa, h, s->client_id, h->id, key, aad, err) != 0 ||
            hfl_seal(sa->g, key, aad, sizeof aad, pt, 64, ct, err) != 0) {
            rc = -1;
            break;
        }
        hfl_secagg_sealed_to *e = &sealed[out.shares.n++];
        e->to = h->id;
        hfl_b64_encode(ct, sizeof ct, e->ct, sizeof e->ct);
    }
    memset(ks, 0, (size_t)n * 32), memset(bs, 0, (size_t)n * 32);
    free(ks), free(bs);
    if (rc != 0) return -1;
    rc = sa_post(ss, "shares", sa->round, &hfl_wire_secagg_shares, &out, until, why, err);
    if (rc == 0) sa_test_kill("shares", sa->round, s->auth.self ? hfl_identity_name(s->auth.self) : "");
    return rc;
}

int client_secagg_begin(client_session *ss, const client_task *task, client_secagg **out, char *why, char *err) {
    const client_state *s = ss->s;
    client_secagg *sa = hfl_calloc(1, sizeof *sa);
    sa->masked = task->secagg == SECAGG_MASKED, sa->round = task->round;
    double until = task->received_at + task->deadline_s;
    int rc = 0;
    if (!(sa->g = hfl_csprng_new("hfl secagg client", err))) rc = -1;
    if (rc == 0 && sa->masked) rc = sa_keys(ss, sa, until, why, err);
    if (rc == 0) rc = sa_setup(ss, sa, until, why, err);
    if (rc == 0 && (sa->bits != task->secagg_bits || sa->shift != task->secagg_shift))
        rc = hfl_errf(err, "secure aggregation setup's ring (%d bits, 2^%d) differs from the task's", sa->bits, sa->shift);
    if (rc == 0 && sa->masked) rc = sa_shares(ss, sa, until, why, err);
    else if (rc == 0) sa_test_kill("shares", sa->round, s->auth.self ? hfl_identity_name(s->auth.self) : "");
    if (rc != 0) {
        client_secagg_free(sa);
        return rc;
    }
    *out = sa;
    return 0;
}

void client_secagg_free(client_secagg *sa) {
    if (!sa) return;
    hfl_csprng_free(sa->g);
    memset(sa, 0, sizeof *sa);
    free(sa);
}

static int sa_inbox(client_session *ss, client_secagg *sa, double until, char *why, char *err) {
    client_state *s = ss->s;
    hfl_msg rep;
    nng_msg *raw;
    int rc = sa_step(ss, "inbox", sa->round, NULL, NULL, until, &rep, &raw, why, err);
    if (rc != 0) return rc;
    hfl_secagg_inbox_msg in = {0};
    char e[HFL_ERR_LEN];
    if (hfl_wire_decode(&hfl_wire_secagg_inbox, rep.meta, &in, e) != 0) rc = hfl_errf(err, "secure aggregation inbox: %s", e);
    int got = 0;
    for (int i = 0; i < in.shares.n && rc == 0; i++) {
        const hfl_secagg_sealed_from *sh = (const hfl_secagg_sealed_from *)in.shares.v + i;
        int64_t from = sh->from;
        uint8_t ct[64 + HFL_SEAL_OVERHEAD + 4], pt[64], key[32];
        uint32_t aad[3];
        int j = 0;
        while (j < sa->n_h && sa->h[j].id != from) j++;
        if (j == sa->n_h || j == sa->self || sa->h[j].inbox)
            rc = hfl_errf(err, "inbox holds a share from %lld, not a neighbour of ours or repeated", (long long)from);
        if (rc == 0 &&
            (hfl_b64_decode(sh->ct, ct, sizeof ct) != 64 + HFL_SEAL_OVERHEAD ||
             sa_seal_key(s, sa, &sa->h[j], (int)from, s->client_id, key, aad, err) != 0 ||
             hfl_open(key, aad, sizeof aad, ct, 64 + HFL_SEAL_OVERHEAD, pt, err) != 0))
            rc = hfl_errf(err, "the share from %s does not open", sa->h[j].name);
        if (rc != 0) break;
        memcpy(sa->h[j].s_share, pt, 32), memcpy(sa->h[j].b_share, pt + 32, 32);
        sa->h[j].inbox = 1;
        got++;
    }
    hfl_wire_free(&hfl_wire_secagg_inbox, &in);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    /* fewer holders than the threshold: our masks could not be removed if we dropped (Bonawitz et al.'s |U2| >= t) */
    if (rc == 0 && got + 1 < sa->t)
        rc = hfl_errf(err, "only %d neighbours shared their keys with us (threshold %d)", got, sa->t);
    return rc;
}

/* Our ring vector: the update clipped, weighted and rounded exactly as the
 * aggregator would (aggregate.c's agg_load_clip and add), our noise share,
 * and the count element. */
static void sa_fixed(client_secagg *sa, const float *delta, size_t n, uint64_t *x) {
    const hfl_agg_ops *ops = hfl_backend_cpu()->agg;
    hfl_payload p = {.kind = HFL_PAYLOAD_FP32, .block = 0, .body = (const uint8_t *)delta};
    hfl_agg_norm nm;
    double *partials = hfl_malloc(sizeof(double) * (hfl_agg_chunks(n) ? hfl_agg_chunks(n) : 1));
    ops->norm(&p, n, partials, &nm);
    free(partials);
    double norm = sqrt(nm.sumsq), factor = norm > sa->clip ? sa->clip / norm : 1.0;
    double f = ldexp(sa->weight * factor, sa->shift);
    int64_t *acc = hfl_calloc(n ? n : 1, sizeof *acc);
    ops->add_fixed(&p, &f, 1, n, acc);
    const uint64_t m = ((uint64_t)1 << sa->bits) - 1; /* bits <= SECAGG_MAX_BITS < 64 */
    for (size_t i = 0; i < n; i++) {
        int64_t v = acc[i];
        if (sa->sigma > 0) v += hfl_agg_round_fixed(ldexp(sa->sigma * hfl_csprng_gauss_within(sa->g, SECAGG_NOISE_TAIL), sa->shift));
        x[i] = (uint64_t)v & m;
    }
    double count = norm <= sa->clip ? 1.0 : 0.0;
    if (sa->sigma_count > 0) count += sa->sigma_count * hfl_csprng_gauss_within(sa->g, SECAGG_NOISE_TAIL);
    x[n] = (uint64_t)hfl_agg_round_fixed(ldexp(count, SECAGG_COUNT_SHIFT)) & m;
    free(acc);
}

/* Adds our masks to x: the self mask, and per neighbour that shared with us
 * the pairwise mask (+ when our id is the lower). */
static int sa_mask(const client_state *s, client_secagg *sa, uint64_t *x, size_t len, char *err) {
    uint8_t key[32], z[32];
    uint32_t ctx[3] = {(uint32_t)sa->round, (uint32_t)s->client_id, 0};
    hfl_secagg_kdf(sa->seed, 32, "hfl secagg self mask", ctx, 2, key);
    hfl_mask_apply(key, sa->bits, +1, x, len);
    for (int j = 0; j < sa->n_h; j++) {
        const sa_holder *h = &sa->h[j];
        if (j == sa->self || !h->inbox) continue;
        if (hfl_x25519_shared(sa->s_sk, h->s_pk, z, err) != 0) return -1;
        ctx[1] = (uint32_t)(s->client_id < h->id ? s->client_id : h->id);
        ctx[2] = (uint32_t)(s->client_id < h->id ? h->id : s->client_id);
        hfl_secagg_kdf(z, 32, "hfl secagg pair mask", ctx, 3, key);
        hfl_mask_apply(key, sa->bits, s->client_id < h->id ? +1 : -1, x, len);
    }
    return 0;
}

static int sa_unmask(client_session *ss, client_secagg *sa, double until, char *why, char *err) {
    hfl_msg rep;
    nng_msg *raw;
    int rc = sa_step(ss, "unmask_list", sa->round, NULL, NULL, until, &rep, &raw, why, err);
    if (rc != 0) return rc;
    hfl_secagg_unmask_list_msg in = {0};
    char e[HFL_ERR_LEN];
    if (hfl_wire_decode(&hfl_wire_secagg_unmask_list, rep.meta, &in, e) != 0)
        rc = hfl_errf(err, "secure aggregation unmask_list: %s", e);
    hfl_secagg_reveal shares[HFL_SECAGG_MAX_HOLDERS];
    hfl_secagg_unmask_msg out = {.shares = {shares, 0}};
    int said[HFL_SECAGG_MAX_HOLDERS] = {0}; /* 1: seed share revealed, 2: key share: never both */
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        const hfl_wire_list *l = pass ? &in.dropped : &in.alive;
        for (int i = 0; i < l->n && rc == 0; i++) {
            int64_t id = ((const int64_t *)l->v)[i];
            int j = 0;
            while (j < sa->n_h && sa->h[j].id != id) j++;
            if (j == sa->n_h || (j != sa->self && !sa->h[j].inbox) || said[j] || (pass && j == sa->self)) {
                rc = hfl_errf(err, "the unmask request names a client we hold nothing of, twice, or ourselves as dropped");
                break;
            }
            said[j] = 1 + pass;
            hfl_secagg_reveal *r = &shares[out.shares.n++]; /* one per holder: said[] */
            r->of = sa->h[j].id;
            hfl_b64_encode(pass ? sa->h[j].s_share : sa->h[j].b_share, 32, r->share, sizeof r->share);
        }
    }
    hfl_wire_free(&hfl_wire_secagg_unmask_list, &in);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    if (rc == 0) rc = sa_post(ss, "unmask", sa->round, &hfl_wire_secagg_unmask, &out, until, why, err);
    memset(shares, 0, sizeof shares);
    return rc;
}

int client_secagg_payload(client_session *ss, client_secagg *sa, const client_task *task, const float *delta,
                          size_t n, uint8_t **payload, size_t *len, char *why, char *err) {
    double until = task->received_at + task->deadline_s;
    if (sa->masked) {
        int rc = sa_inbox(ss, sa, until, why, err);
        if (rc != 0) return rc;
    }
    uint64_t *x = hfl_malloc(sizeof(uint64_t) * (n + 1));
    sa_fixed(sa, delta, n, x);
    if (sa->masked && sa_mask(ss->s, sa, x, n + 1, err) != 0) {
        free(x);
        return -1;
    }
    *len = hfl_ring_bytes(n + 1, sa->bits);
    *payload = hfl_malloc(*len);
    hfl_ring_pack(x, n + 1, sa->bits, *payload);
    free(x);
    return 0;
}

int client_secagg_finish(client_session *ss, client_secagg *sa, const client_task *task, char *why, char *err) {
    if (!sa->masked) return 0;
    sa_test_kill("input", sa->round, ss->s->auth.self ? hfl_identity_name(ss->s->auth.self) : "");
    return sa_unmask(ss, sa, task->received_at + task->deadline_s, why, err);
}
