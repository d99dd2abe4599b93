/* hello.c: the client's side of the proven hello (see hello.h). */
#include "proto/hello.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/messages.h"
#include "proto/transport.h"
#include "util/util.h"

/* Checks the CHALLENGE reply: the coordinator's certificate and its
 * signature over our nonce; the challenge into out. */
static int hello_check_challenge(hfl_hello_auth *auth, const hfl_challenge_msg *m, const char *nonce, char *err) {
    const char *coord = m->coordinator, *challenge = m->challenge, *sig = m->signature;
    char e[HFL_ERR_LEN];
    if (strlen(challenge) != HFL_ID_NONCE_HEX)
        return hfl_errf(err, "malformed challenge from the coordinator: %zu hex digits", strlen(challenge));
    snprintf(auth->instance, sizeof auth->instance, "%s", m->instance);
    hfl_peer *peer;
    if (hfl_trust_check(auth->trust, m->cert, HFL_ROLE_COORDINATOR, auth->server_name, &peer, e) != 0)
        return hfl_errf(err, "coordinator did not prove its identity: %s", e);
    if (strcmp(coord, hfl_peer_name(peer)) != 0) {
        hfl_errf(err, "coordinator calls itself '%s' but its certificate names '%s'", coord, hfl_peer_name(peer));
        hfl_peer_free(peer);
        return -1;
    }
    const char *me = hfl_identity_name(auth->self);
    const void *parts[] = {HFL_SIG_CHALLENGE, nonce, challenge, me};
    const size_t lens[] = {strlen(HFL_SIG_CHALLENGE), strlen(nonce), strlen(challenge), strlen(me)};
    int rc = hfl_peer_verify(peer, parts, lens, 4, sig, e);
    hfl_peer_free(peer);
    if (rc != 0) return hfl_errf(err, "coordinator did not prove its identity: %s", e);
    return 0;
}

int hfl_hello(nng_socket sock, hfl_hello_auth *auth, const cJSON *fields, size_t max_payload, hfl_msg *reply,
              nng_msg **raw, char *err) {
    if (!auth || !auth->self) return hfl_transport_request(sock, HFL_MSG_HELLO, fields, NULL, 0, max_payload, reply, raw, err);
    char nonce[HFL_ID_NONCE_HEX + 1], challenge[HFL_ID_NONCE_HEX + 1], sig[HFL_ID_SIG_B64_MAX + 1];
    if (hfl_random_hex(nonce, err) != 0) return -1;
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "cert", hfl_identity_cert(auth->self));
    cJSON_AddStringToObject(meta, "nonce", nonce);
    int rc = hfl_transport_request(sock, HFL_MSG_HELLO, meta, NULL, 0, max_payload, reply, raw, err);
    cJSON_Delete(meta);
    if (rc != 0) return -1;
    if (reply->type != HFL_MSG_CHALLENGE) return 0; /* an error reply: the caller reads it */
    hfl_challenge_msg *ch = hfl_malloc(sizeof *ch);
    memset(ch, 0, sizeof *ch);
    char e[HFL_ERR_LEN], coord[HFL_ID_NAME_MAX + 1];
    rc = hfl_wire_decode(&hfl_wire_challenge, reply->meta, ch, e) != 0
             ? hfl_errf(err, "malformed challenge from the coordinator: %s", e)
             : hello_check_challenge(auth, ch, nonce, err);
    snprintf(challenge, sizeof challenge, "%s", ch->challenge);
    snprintf(coord, sizeof coord, "%s", ch->coordinator);
    free(ch);
    hfl_msg_free(reply);
    nng_msg_free(*raw);
    if (rc != 0) return -2;

    meta = cJSON_Duplicate(fields, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "name");
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "cert");
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "challenge");
    cJSON_AddStringToObject(meta, "cert", hfl_identity_cert(auth->self));
    cJSON_AddStringToObject(meta, "challenge", challenge);
    /* hfl_msg_encode prints meta the same way: these are the bytes sent */
    char *text = cJSON_PrintUnformatted(meta);
    if (!text) {
        cJSON_Delete(meta);
        return hfl_errf(err, "out of memory printing hello");
    }
    const void *parts[] = {HFL_SIG_HELLO, coord, text};
    const size_t lens[] = {strlen(HFL_SIG_HELLO), strlen(coord), strlen(text)};
    rc = hfl_identity_sign(auth->self, parts, lens, 3, sig, err);
    cJSON_free(text);
    if (rc == 0) rc = hfl_transport_request(sock, HFL_MSG_HELLO, meta, sig, strlen(sig), max_payload, reply, raw, err);
    cJSON_Delete(meta);
    return rc;
}
