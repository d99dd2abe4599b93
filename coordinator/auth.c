/* auth.c: the coordinator's side of the proven hello (proto/hello.h), the
 * revocation list, and session tokens.
 *
 * A hello without a challenge gets one: fresh, kept for CHALLENGE_TTL_S
 * seconds in the table of pending challenges (challenges.h: found by its
 * value, so a first hello carrying someone else's certificate cancels
 * nothing of theirs; bounded per connection, per identity and in all), and
 * signed together with the client's nonce by our own key, so the client
 * knows it talks to the coordinator. A hello with a challenge must carry one
 * pending for its certificate's name and a signature over (HFL_SIG_HELLO, our
 * name, its meta bytes); the challenge is then spent. A challenge that is
 * not pending (spent, expired, displaced) is answered "say hello again"
 * (`reauth`), which an honest client does. How fast first hellos are
 * answered at all is conns.c's (--hello-rate). With --insecure there are no
 * certificates and the hello's `name` is taken on trust (a lab setting;
 * main.c says so).
 * The certificate checks and signatures run outside the coordinator's lock
 * (auth_hello is called without it and takes it only for the table of
 * pending challenges), so hellos are checked in parallel.
 * Tokens are 128 random bits, bound to one identity's session, and expire
 * after --token-ttl; a request with an unknown, wrong or expired token is
 * told to re-authenticate (`reauth`), which a client does on its own. */
#include <stdlib.h>
#include <string.h>

#include "coordinator/challenges.h"
#include "coordinator/coord.h"
#include "proto/hello.h"
#include "util/util.h"

int auth_init(coord *c, const char *revoked_file, char *err) {
    if (hfl_random_hex(c->instance, err) != 0) return -1;
    c->instance[32] = 0; /* 128 bits name an instance */
    if (!c->cfg.tls.cert_file || !c->cfg.tls.ca_file) return 0; /* --insecure: names on trust */
    char e[HFL_ERR_LEN];
    if (hfl_identity_load(c->cfg.tls.cert_file, &c->self, e) != 0) return hfl_errf(err, "--cert: %s", e);
    if (strcmp(hfl_identity_role(c->self), HFL_ROLE_COORDINATOR) != 0)
        return hfl_errf(err, "--cert: the certificate of '%s' was issued for the %s role, not coordinator",
                        hfl_identity_name(c->self), hfl_identity_role(c->self));
    if (hfl_trust_load(c->cfg.tls.ca_file, revoked_file, &c->trust, e) != 0) return hfl_errf(err, "--ca: %s", e);
    c->challenges = challenges_new(COORD_MAX_PENDING);
    return 0;
}

void auth_free(coord *c) {
    hfl_identity_free(c->self);
    hfl_trust_free(c->trust);
    challenges_free(c->challenges);
    c->self = NULL;
    c->trust = NULL;
    c->challenges = NULL;
}

/* Applies the revocation list to registered sessions: a revoked identity is
 * drawn no more and its requests are refused. */
static void auth_apply_revocations(coord *c) {
    for (int i = 0; i < c->n_clients; i++) {
        coord_client *cl = &c->clients[i];
        if (cl->revoked || !hfl_trust_is_revoked(c->trust, cl->name)) continue;
        cl->revoked = 1;
        cl->has_plan = 0;
        snprintf(cl->left, sizeof cl->left, "certificate revoked");
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "event", "client_revoked");
        cJSON_AddNumberToObject(ev, "client", i);
        cJSON_AddStringToObject(ev, "name", cl->name);
        events_log(c, ev);
        if (!c->cfg.quiet) printf("coordinator: %s revoked\n", cl->name);
    }
}

void auth_reload(coord *c) {
    char err[HFL_ERR_LEN];
    if (!c->trust) return;
    if (hfl_trust_reload(c->trust, err) != 0) {
        fprintf(stderr, "hfl-coordinator: keeping the old revocation list: %s\n", err);
        return;
    }
    auth_apply_revocations(c);
}

/* Equal strings, in time that does not depend on where they differ. */
int auth_equal(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    unsigned char d = na != nb;
    for (size_t i = 0; i < na && i < nb; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static uint8_t *auth_challenge_reply(coord *c, const char *name, const char *nonce, uint32_t conn, uint64_t addr,
                                     size_t *len, char *err) {
    char challenge[HFL_ID_NONCE_HEX + 1], sig[HFL_ID_SIG_B64_MAX + 1];
    if (hfl_random_hex(challenge, err) != 0) return NULL;
    const void *parts[] = {HFL_SIG_CHALLENGE, nonce, challenge, name};
    const size_t lens[] = {strlen(HFL_SIG_CHALLENGE), strlen(nonce), strlen(challenge), strlen(name)};
    if (hfl_identity_sign(c->self, parts, lens, 4, sig, err) != 0) return NULL;
    pthread_mutex_lock(&c->lock);
    challenges_add(c->challenges, name, challenge, conn, addr, hfl_now());
    c->challenges_issued++;
    pthread_mutex_unlock(&c->lock);
    hfl_challenge_msg *ch = hfl_malloc(sizeof *ch); /* NNG threads: certificates are big for a stack */
    memset(ch, 0, sizeof *ch);
    snprintf(ch->challenge, sizeof ch->challenge, "%s", challenge);
    snprintf(ch->coordinator, sizeof ch->coordinator, "%s", hfl_identity_name(c->self));
    snprintf(ch->cert, sizeof ch->cert, "%s", hfl_identity_cert(c->self));
    snprintf(ch->signature, sizeof ch->signature, "%s", sig);
    snprintf(ch->instance, sizeof ch->instance, "%.*s", HFL_WIRE_INSTANCE_MAX, c->instance);
    ch->has_instance = 1;
    uint8_t *out = hfl_wire_message(&hfl_wire_challenge, ch, NULL, 0, len);
    free(ch);
    return out;
}

int auth_wants_challenge(const coord *c, const hfl_msg *m) {
    return c->trust && !cJSON_GetObjectItemCaseSensitive(m->meta, "challenge");
}

int auth_hello(coord *c, const hfl_msg *m, uint32_t conn, uint64_t addr, char name[HFL_ID_NAME_MAX + 1],
               uint8_t **reply, size_t *len, char *err) {
    *reply = NULL;
    if (!c->trust) return hfl_meta_str(m->meta, "name", HFL_ID_NAME_MAX, name, err) == 0 ? 1 : -1;
    /* a second hello costs a certificate check and a signature check: only
     * for a challenge that is pending (first hellos are rate-limited) */
    const cJSON *pending = cJSON_GetObjectItemCaseSensitive(m->meta, "challenge");
    if (cJSON_IsString(pending)) {
        pthread_mutex_lock(&c->lock);
        int known = challenges_known(c->challenges, pending->valuestring, hfl_now());
        pthread_mutex_unlock(&c->lock);
        if (!known) {
            hfl_errf(err, "hello carries no challenge of ours that is fresh and unspent: say hello again");
            return -2;
        }
    }
    const cJSON *cert = cJSON_GetObjectItemCaseSensitive(m->meta, "cert");
    if (!cJSON_IsString(cert)) return hfl_errf(err, "hello carries no certificate ('cert'): this coordinator needs proof of identity");
    hfl_peer *peer;
    /* a client's certificate, or a tier's aggregator's (upstream.c) for a
     * hello that says `aggregator`: the signed second hello names which, so
     * neither can have the other's session; a first hello may be either */
    int second = cJSON_GetObjectItemCaseSensitive(m->meta, "challenge") != NULL;
    int agg = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m->meta, "aggregator"));
    char why[HFL_ERR_LEN];
    if (hfl_trust_check(c->trust, cert->valuestring, agg ? HFL_ROLE_AGGREGATOR : HFL_ROLE_CLIENT, NULL, &peer,
                        err) != 0 &&
        (second || agg || hfl_trust_check(c->trust, cert->valuestring, HFL_ROLE_AGGREGATOR, NULL, &peer, why) != 0))
        return -1;
    snprintf(name, HFL_ID_NAME_MAX + 1, "%s", hfl_peer_name(peer));
    char nonce[HFL_ID_NONCE_HEX + 1], challenge[HFL_ID_NONCE_HEX + 1], sig[HFL_ID_SIG_B64_MAX + 1];
    int rc = -1;
    if (!cJSON_GetObjectItemCaseSensitive(m->meta, "challenge")) {
        if (hfl_meta_str(m->meta, "nonce", HFL_ID_NONCE_HEX, nonce, err) == 0 &&
            (*reply = auth_challenge_reply(c, name, nonce, conn, addr, len, err)) != NULL)
            rc = 0;
    } else if (hfl_meta_str(m->meta, "challenge", HFL_ID_NONCE_HEX, challenge, err) == 0) {
        const char *me = hfl_identity_name(c->self);
        const void *parts[] = {HFL_SIG_HELLO, me, m->meta_raw};
        const size_t lens[] = {strlen(HFL_SIG_HELLO), strlen(me), m->meta_len};
        if (m->payload_len == 0 || m->payload_len > HFL_ID_SIG_B64_MAX) {
            hfl_errf(err, "hello carries no signature");
        } else {
            memcpy(sig, m->payload, m->payload_len);
            sig[m->payload_len] = 0;
            if (hfl_peer_verify(peer, parts, lens, 3, sig, err) == 0) {
                pthread_mutex_lock(&c->lock);
                rc = challenges_spend(c->challenges, name, challenge, hfl_now()) == 0 ? 1 : -2;
                pthread_mutex_unlock(&c->lock);
                if (rc == -2)
                    hfl_errf(err, "hello of '%s' carries no challenge of ours that is fresh and unspent: say hello again",
                             name);
            }
        }
    }
    hfl_peer_free(peer);
    return rc;
}
