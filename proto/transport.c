/* transport.c: hfl's NNG req0/rep0 sockets over mutual TLS, and the one
 * request/reply helper the client uses (see transport.h).
 *
 * Decisions:
 * - The URL scheme decides security: tls+tcp:// needs the CA and this side's
 *   certificate+key; any other scheme (tcp://, ipc://, inproc://) is plain and
 *   is refused unless `insecure` is set.
 * - The dialer's server name defaults to the URL's host when none is given.
 * - Dialing is synchronous, so a refused connection or a failed handshake
 *   (e.g. a certificate from a foreign CA: NNG_ECRYPTO within milliseconds)
 *   is an error at dial time and the dialer does not linger retrying in the
 *   background. timeout_ms bounds the dial as well as each request.
 * - Once connected, the dialer reconnects by itself if the link drops.
 * - REQ resending is off (infinite resend time): hfl requests such as updates
 *   are not idempotent. A connection that drops before the reply (including
 *   the peer refusing a message over its NNG_OPT_RECVMAXSZ) fails the request
 *   at once with "Connection reset"; a reply that never comes fails it after
 *   timeout_ms. The caller decides whether to retry. */
#include "proto/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "util/util.h"

#define TRANSPORT_DEFAULT_TIMEOUT_MS 120000

/* Sets *use_tls from the scheme; refuses plain schemes unless insecure. */
static int transport_check_url(const char *url, const hfl_tls_opts *tls, int *use_tls,
                               char *err) {
    if (!url || !strstr(url, "://")) return hfl_errf(err, "bad URL '%s'", url ? url : "(null)");
    int insecure = tls && tls->insecure;
    *use_tls = strncmp(url, "tls+tcp://", 10) == 0;
    if (*use_tls) {
        if (!tls || !tls->ca_file || !tls->cert_file)
            return hfl_errf(err, "%s needs a CA file and a certificate+key file", url);
        return 0;
    }
    if (!insecure)
        return hfl_errf(err, "%s is not encrypted: use tls+tcp:// or pass --insecure", url);
    return 0;
}

/* Host part of a URL ("tls+tcp://host:port" or "tls+tcp://[v6]:port") into out. */
static int transport_url_host(const char *url, char *out, size_t outlen) {
    const char *h = strstr(url, "://") + 3, *end;
    if (*h == '[') {
        h++;
        end = strchr(h, ']');
    } else {
        end = strrchr(h, ':');
    }
    size_t n = end ? (size_t)(end - h) : strlen(h);
    if (n == 0 || n >= outlen) return -1;
    memcpy(out, h, n);
    out[n] = 0;
    return 0;
}

/* Builds a mutual-TLS config; server_name is used only in client mode. */
static int transport_tls_config(nng_tls_mode mode, const hfl_tls_opts *tls,
                                const char *server_name, nng_tls_config **out, char *err) {
    nng_tls_config *cfg;
    int rv = nng_tls_config_alloc(&cfg, mode);
    if (rv != 0) return hfl_errf(err, "cannot create TLS config: %s", nng_strerror(rv));
    if ((rv = nng_tls_config_ca_file(cfg, tls->ca_file)) != 0) {
        hfl_errf(err, "cannot load CA file %s: %s", tls->ca_file, nng_strerror(rv));
    } else if ((rv = nng_tls_config_cert_key_file(cfg, tls->cert_file, NULL)) != 0) {
        hfl_errf(err, "cannot load certificate and key from %s: %s", tls->cert_file,
                 nng_strerror(rv));
    } else if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0) {
        hfl_errf(err, "cannot require peer certificates: %s", nng_strerror(rv));
    } else if (server_name && (rv = nng_tls_config_server_name(cfg, server_name)) != 0) {
        hfl_errf(err, "cannot set TLS server name %s: %s", server_name, nng_strerror(rv));
    }
    if (rv != 0) {
        nng_tls_config_free(cfg);
        return -1;
    }
    *out = cfg;
    return 0;
}

int hfl_transport_listen(nng_socket *sock, const char *url, const hfl_tls_opts *tls,
                         size_t recv_max, int *port, char *err) {
    int use_tls, rv;
    if (transport_check_url(url, tls, &use_tls, err) != 0) return -1;
    if ((rv = nng_rep0_open(sock)) != 0)
        return hfl_errf(err, "cannot open rep socket: %s", nng_strerror(rv));
    nng_listener l;
    nng_tls_config *cfg = NULL;
    if ((rv = nng_listener_create(&l, *sock, url)) != 0) {
        hfl_errf(err, "cannot listen on %s: %s", url, nng_strerror(rv));
        goto fail;
    }
    if (use_tls) {
        if (transport_tls_config(NNG_TLS_MODE_SERVER, tls, NULL, &cfg, err) != 0) goto fail;
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
        nng_tls_config_free(cfg); /* the listener holds its own reference */
        if (rv != 0) {
            hfl_errf(err, "cannot set TLS config on %s: %s", url, nng_strerror(rv));
            goto fail;
        }
    }
    if ((rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, recv_max)) != 0) {
        hfl_errf(err, "cannot set receive limit on %s: %s", url, nng_strerror(rv));
        goto fail;
    }
    if ((rv = nng_listener_start(l, 0)) != 0) {
        hfl_errf(err, "cannot listen on %s: %s", url, nng_strerror(rv));
        goto fail;
    }
    if (port) {
        *port = 0;
        if (strstr(url, "tcp://") && (rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, port))) {
            hfl_errf(err, "cannot read the bound port of %s: %s", url, nng_strerror(rv));
            goto fail;
        }
    }
    return 0;
fail:
    nng_close(*sock);
    return -1;
}

/* Timeouts and the receive limit on a fresh req socket and its dialer. */
static int transport_dial_options(nng_socket sock, nng_dialer d, size_t recv_max, int timeout_ms,
                                  char *err) {
    nng_duration t = timeout_ms > 0 ? timeout_ms : TRANSPORT_DEFAULT_TIMEOUT_MS;
    int rv;
    if ((rv = nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, t)) != 0 ||
        (rv = nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, t)) != 0 ||
        (rv = nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0)
        return hfl_errf(err, "cannot set socket timeouts: %s", nng_strerror(rv));
    if ((rv = nng_dialer_set_size(d, NNG_OPT_RECVMAXSZ, recv_max)) != 0)
        return hfl_errf(err, "cannot set receive limit: %s", nng_strerror(rv));
    return 0;
}

/* A synchronous dial, run on a helper thread so that it can be abandoned. */
typedef struct {
    nng_dialer dialer;
    int rv, done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} transport_dial_wait;

static void *transport_dial_thread(void *arg) {
    transport_dial_wait *w = arg;
    int rv = nng_dialer_start(w->dialer, 0);
    pthread_mutex_lock(&w->mu);
    w->rv = rv;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Dials synchronously, so a refused connection or a failed handshake is an
 * error here, but gives up after timeout_ms: a peer that accepts the TCP
 * connection and then stays silent would otherwise block nng_dialer_start
 * until it hangs up (NNG 1.5 has no handshake timeout). Closing the dialer
 * aborts the dial in progress. */
static int transport_dial_bounded(nng_dialer d, const char *url, int timeout_ms, char *err) {
    transport_dial_wait w = {.dialer = d};
    pthread_condattr_t ca;
    pthread_t th;
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&w.cv, &ca) != 0)
        return hfl_errf(err, "cannot create a condition variable");
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w.mu, NULL);
    if (pthread_create(&th, NULL, transport_dial_thread, &w) != 0) {
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
        return hfl_errf(err, "cannot start a thread to dial %s", url);
    }
    int ms = timeout_ms > 0 ? timeout_ms : TRANSPORT_DEFAULT_TIMEOUT_MS;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w.mu);
    while (!w.done && pthread_cond_timedwait(&w.cv, &w.mu, &until) != ETIMEDOUT) {
    }
    int timed_out = !w.done;
    pthread_mutex_unlock(&w.mu);
    if (timed_out) nng_dialer_close(d);
    pthread_join(th, NULL);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (timed_out)
        return hfl_errf(err, "cannot connect to %s: no connection and handshake within %d ms", url, ms);
    if (w.rv != 0) return hfl_errf(err, "cannot connect to %s: %s", url, nng_strerror(w.rv));
    return 0;
}

int hfl_transport_dial(nng_socket *sock, const char *url, const hfl_tls_opts *tls,
                       size_t recv_max, int timeout_ms, char *err) {
    int use_tls, rv;
    if (transport_check_url(url, tls, &use_tls, err) != 0) return -1;
    char host[256];
    const char *server_name = tls ? tls->server_name : NULL;
    if (use_tls && !server_name) {
        if (transport_url_host(url, host, sizeof host) != 0)
            return hfl_errf(err, "no host in %s to check the server certificate against", url);
        server_name = host;
    }
    if ((rv = nng_req0_open(sock)) != 0)
        return hfl_errf(err, "cannot open req socket: %s", nng_strerror(rv));
    nng_dialer d;
    nng_tls_config *cfg = NULL;
    if ((rv = nng_dialer_create(&d, *sock, url)) != 0) {
        hfl_errf(err, "cannot dial %s: %s", url, nng_strerror(rv));
        goto fail;
    }
    if (use_tls) {
        if (transport_tls_config(NNG_TLS_MODE_CLIENT, tls, server_name, &cfg, err) != 0) goto fail;
        rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
        nng_tls_config_free(cfg); /* the dialer holds its own reference */
        if (rv != 0) {
            hfl_errf(err, "cannot set TLS config for %s: %s", url, nng_strerror(rv));
            goto fail;
        }
    }
    if (transport_dial_options(*sock, d, recv_max, timeout_ms, err) != 0) goto fail;
    if (transport_dial_bounded(d, url, timeout_ms, err) != 0) goto fail;
    return 0;
fail:
    nng_close(*sock);
    return -1;
}

int hfl_transport_request(nng_socket sock, int type, const cJSON *meta, const void *payload,
                          size_t payload_len, size_t max_payload, hfl_msg *reply, nng_msg **raw,
                          char *err) {
    memset(reply, 0, sizeof *reply);
    *raw = NULL;
    size_t len;
    uint8_t *buf = hfl_msg_encode(type, meta, payload, payload_len, &len);
    if (!buf)
        return hfl_errf(err, "cannot encode %s message (meta or payload too large?)",
                        hfl_msg_type_name(type));
    nng_msg *req;
    int rv = nng_msg_alloc(&req, len);
    if (rv != 0) {
        free(buf);
        return hfl_errf(err, "cannot allocate a %zu-byte message: %s", len, nng_strerror(rv));
    }
    memcpy(nng_msg_body(req), buf, len);
    free(buf);
    if ((rv = nng_sendmsg(sock, req, 0)) != 0) {
        nng_msg_free(req);
        return hfl_errf(err, "cannot send %s request: %s", hfl_msg_type_name(type),
                        nng_strerror(rv));
    }
    nng_msg *rep;
    if ((rv = nng_recvmsg(sock, &rep, 0)) != 0)
        return hfl_errf(err, "no reply to %s request: %s", hfl_msg_type_name(type),
                        nng_strerror(rv));
    char why[HFL_ERR_LEN];
    if (hfl_msg_decode(nng_msg_body(rep), nng_msg_len(rep), max_payload, reply, why) != 0) {
        nng_msg_free(rep);
        return hfl_errf(err, "bad reply to %s request: %s", hfl_msg_type_name(type), why);
    }
    *raw = rep;
    return 0;
}
