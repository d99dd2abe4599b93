/* hello.h: the client's side of saying hello with a proven identity.
 *
 * With an identity (mutual TLS), hello is two requests:
 *   1. HELLO {cert, nonce}: our certificate and a fresh nonce.
 *      The coordinator checks the certificate (its CA, the client role, not
 *      revoked) and answers CHALLENGE {challenge, coordinator, cert,
 *      signature, instance}: a fresh challenge, its own name and certificate,
 *      and its signature over (HFL_SIG_CHALLENGE, nonce, challenge, our name).
 *      We accept only a certificate of the coordinator role, named as we
 *      expect (--server-name), whose signature verifies: a client's
 *      certificate can never stand in for the coordinator.
 *   2. HELLO {cert, challenge, <fields>} with our signature over
 *      (HFL_SIG_HELLO, coordinator name, the meta bytes as sent) as the
 *      payload. The coordinator answers WELCOME (a token bound to our name)
 *      or ERROR. A challenge is good once and for a short time, so a
 *      recorded hello cannot be replayed.
 * Our identity is our certificate's name: a `name` in the fields is ignored.
 * Without an identity (--insecure, plain tcp://) the fields go in one hello
 * and the coordinator takes the name on trust. */
#ifndef HFL_HELLO_H
#define HFL_HELLO_H

#include <nng/nng.h>

#include "proto/identity.h"
#include "proto/msg.h"

#define HFL_SIG_CHALLENGE "hfl-challenge-v1"
#define HFL_SIG_HELLO "hfl-hello-v1"

typedef struct {
    hfl_identity *self;      /* NULL: no proof (insecure) */
    hfl_trust *trust;        /* the CA, to check the coordinator's certificate */
    const char *server_name; /* the coordinator's expected name */
    char instance[40];       /* out: the coordinator instance that answered */
} hfl_hello_auth;

/* Says hello with `fields` (proving our identity first when auth->self is
 * set). The final reply is returned like hfl_transport_request's: WELCOME,
 * or ERROR with the reason; -1 with err when the exchange itself failed
 * (the coordinator unreachable: worth retrying), -2 when the coordinator did
 * not prove its identity (not worth retrying). */
int hfl_hello(nng_socket sock, hfl_hello_auth *auth, const cJSON *fields, size_t max_payload, hfl_msg *reply,
              nng_msg **raw, char *err);

#endif
