/* transport.h: NNG req/rep sockets with mutual TLS, and one request helper.
 *
 * `tls+tcp://` with mutual TLS is the default: both sides load the CA and
 * their own certificate+key, and the listener requires a client certificate
 * issued by that CA, so a foreign client fails the handshake. Plain `tcp://`
 * needs `insecure`. Every listener and dialer sets NNG_OPT_RECVMAXSZ (NNG 1.5
 * defaults to unlimited). A TLS dialer sets its server name (the coordinator
 * certificate's CN; mbedTLS 2.28 writes no SAN). */
#ifndef HFL_TRANSPORT_H
#define HFL_TRANSPORT_H

#include <stddef.h>

#include <nng/nng.h>

#include "proto/msg.h"

typedef struct {
    int insecure;            /* 1: plain tcp://, no TLS */
    const char *ca_file;     /* PEM of the CA that signs every certificate */
    const char *cert_file;   /* PEM holding this side's certificate and key */
    const char *server_name; /* dialer: expected CN of the coordinator ("localhost") */
} hfl_tls_opts;

/* Opens a rep0 socket listening on url. The bound port (for ":0") goes to *port. */
int hfl_transport_listen(nng_socket *sock, const char *url, const hfl_tls_opts *tls,
                         size_t recv_max, int *port, char *err);
/* Opens a req0 socket and dials url (blocking until connected or failed). */
int hfl_transport_dial(nng_socket *sock, const char *url, const hfl_tls_opts *tls,
                       size_t recv_max, int timeout_ms, char *err);

/* Sends one request and waits for the reply; reply->payload points into *raw,
 * which the caller frees with nng_msg_free after hfl_msg_free(reply). An
 * error reply is returned as a message of type HFL_MSG_ERROR, not as -1. */
int hfl_transport_request(nng_socket sock, int type, const cJSON *meta, const void *payload,
                          size_t payload_len, size_t max_payload, hfl_msg *reply, nng_msg **raw,
                          char *err);

#endif
