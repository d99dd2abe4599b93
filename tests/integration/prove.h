/* prove.h: integration tests say hello as a real client does, proving the
 * identity of a certificate file (proto/hello.h), so they can then act as
 * that client, honest or not. */
#ifndef HFL_TEST_PROVE_H
#define HFL_TEST_PROVE_H

#include <stddef.h>

#include <cjson/cJSON.h>
#include <nng/nng.h>

/* Says hello over sock as the holder of pem (the coordinator checked against
 * ca, named "localhost"), with `fields` (consumed). Returns the final reply's
 * type (HFL_MSG_WELCOME, HFL_MSG_ERROR) or -1 when the exchange failed; the
 * error text goes to why (256 bytes); a welcome's id and token to *id, token. */
int prove_hello(nng_socket sock, const char *pem, const char *ca, cJSON *fields, size_t max_payload, int *id,
                char token[64], char *why);

#endif
