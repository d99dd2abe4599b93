/* conns.c: the coordinator's connections, bounded.
 *
 * NNG 1.5 bounds a TLS handshake and the SP header exchange at 10 s (its
 * tls transport's negotiation timeout), and our receive limit bounds a
 * message's size, but nothing bounds how many connections one address opens
 * or how long a connection may sit on half a frame. So:
 *   - a connection from an address that already holds --max-conns-per-addr
 *     is closed as it is added (NNG_PIPE_EV_ADD_PRE), 0: no limit;
 *   - a connection that has not delivered a whole message for --idle-timeout
 *     seconds is closed by the main loop (conns_reap): a half-sent frame
 *     holds its connection no longer than that. A client that was only busy
 *     training redials by itself (NNG's dialer) on its next request.
 * Connections are tracked in a fixed table (CONNS_MAX); past it a new one is
 * refused as well, so memory stays bounded whatever the peers do. */
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "util/util.h"

#define CONNS_MAX 4096

typedef struct {
    uint32_t id;      /* nng_pipe_id; 0: free slot */
    uint64_t addr;    /* the peer's address, folded */
    double last;      /* when it connected or last delivered a whole message */
} conns_entry;

struct coord_conns {
    pthread_mutex_t mu;
    coord *c;
    int max_per_addr;
    double idle_s;
    conns_entry e[CONNS_MAX];
    int hw; /* slots in use all lie below this: the scans stop there */
};

/* The peer's IP address folded into 64 bits (FNV-1a over its bytes); 0 when unknown. */
static uint64_t conns_addr(nng_pipe p) {
    nng_sockaddr sa;
    if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0) return 0;
    const uint8_t *b;
    size_t n;
    if (sa.s_family == NNG_AF_INET) {
        b = (const uint8_t *)&sa.s_in.sa_addr, n = sizeof sa.s_in.sa_addr;
    } else if (sa.s_family == NNG_AF_INET6) {
        b = sa.s_in6.sa_addr, n = sizeof sa.s_in6.sa_addr;
    } else {
        return 0;
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h | 1;
}

static void conns_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
    coord_conns *t = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    pthread_mutex_lock(&t->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        uint64_t addr = conns_addr(p);
        int same = 0, slot = -1;
        for (int i = 0; i < t->hw; i++) {
            if (!t->e[i].id) {
                if (slot < 0) slot = i;
            } else {
                same += addr && t->e[i].addr == addr;
            }
        }
        if (slot < 0 && t->hw < CONNS_MAX) slot = t->hw;
        if (slot < 0 || (t->max_per_addr > 0 && same >= t->max_per_addr)) {
            __atomic_fetch_add(&t->c->conns_refused, 1, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&t->mu);
            nng_pipe_close(p);
            return;
        }
        t->e[slot] = (conns_entry){.id = id, .addr = addr, .last = hfl_now()};
        if (slot >= t->hw) t->hw = slot + 1;
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        for (int i = 0; i < t->hw; i++)
            if (t->e[i].id == id) t->e[i].id = 0;
        while (t->hw > 0 && !t->e[t->hw - 1].id) t->hw--;
    }
    pthread_mutex_unlock(&t->mu);
}

coord_conns *conns_start(coord *c, nng_socket sock, char *err) {
    coord_conns *t = hfl_calloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    t->c = c;
    t->max_per_addr = c->cfg.max_conns_per_addr;
    t->idle_s = c->cfg.idle_s;
    int rv = nng_pipe_notify(sock, NNG_PIPE_EV_ADD_PRE, conns_event, t);
    if (rv == 0) rv = nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, conns_event, t);
    if (rv != 0) {
        hfl_errf(err, "cannot watch connections: %s", nng_strerror(rv));
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

void conns_seen(coord_conns *t, nng_pipe p) {
    uint32_t id = (uint32_t)nng_pipe_id(p);
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->hw; i++)
        if (t->e[i].id == id) t->e[i].last = hfl_now();
    pthread_mutex_unlock(&t->mu);
}

void conns_reap(coord_conns *t) {
    uint32_t close_ids[64];
    int n = 0;
    double now = hfl_now();
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->hw && n < 64; i++)
        if (t->e[i].id && now - t->e[i].last > t->idle_s) {
            close_ids[n++] = t->e[i].id;
            t->e[i].last = now; /* closing: not again while NNG removes it */
        }
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < n; i++) {
        nng_pipe p = NNG_PIPE_INITIALIZER;
        p.id = close_ids[i];
        nng_pipe_close(p);
        __atomic_fetch_add(&t->c->conns_reaped, 1, __ATOMIC_RELAXED);
    }
}

void conns_stop(coord_conns *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t);
}
