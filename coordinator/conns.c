/* conns.c: the coordinator's connections, bounded.
 *
 * Our receive limit bounds a message's size, but nothing in NNG bounds how
 * many connections one address opens, how long a connection may sit on half
 * a frame, or (in Debian's NNG 1.5.2) how long an accepted TCP connection
 * may go without starting its TLS handshake: the TLS transport sets a 10 s
 * time-out on its SP header send, but the cancel aborts the TCP send, which
 * is not in flight while mbedTLS waits for the peer's ClientHello, so a peer
 * that connects and says nothing is held until the listener closes (seen: a
 * minute and counting; src/supplemental/tls/tls_common.c, tls_cancel). So:
 *   - a connection from an address that already holds --max-conns-per-addr
 *     is closed as it is added (NNG_PIPE_EV_ADD_PRE), 0: no limit;
 *   - a connection that has not delivered a whole message for --idle-timeout
 *     seconds is closed by the main loop (conns_reap): a half-sent frame
 *     holds its connection no longer than that. A client that was only busy
 *     training redials by itself (NNG's dialer) on its next request;
 *   - an accepted TCP connection that is not a pipe is shut down once it has
 *     sent nothing for --handshake-timeout seconds, or has not finished its
 *     handshake in CONNS_STALL times that (conns_reap_unshaken): NNG never
 *     hands us those, so we find them among our own descriptors and
 *     shutdown(2) them; NNG then reads EOF and closes them itself. A client
 *     always sends its ClientHello at once, but an overloaded coordinator
 *     may take longer than 10 s to answer one (200 clients at once under
 *     ASan did), so only silence gets the short bound.
 * Connections are tracked in a fixed table (CONNS_MAX); past it a new one is
 * refused as well, so memory stays bounded whatever the peers do.
 * A first hello costs the coordinator a certificate check and a signature,
 * and its sender nothing: conns_hello_allowed lets a connection and a source
 * address obtain challenges at --hello-rate's rates only (token buckets,
 * rate.h). The connection's bucket is asked first, and a hello it refuses
 * takes nothing from its address's, so one connection's flood cannot use up
 * the address's share: flooding an address takes many connections, each a
 * TLS handshake. */
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coordinator/coord.h"
#include "coordinator/rate.h"
#include "util/util.h"

#define CONNS_MAX 4096
#define CONNS_STALL 6 /* a peer that spoke but never finished: this many --handshake-timeouts */

typedef struct {
    uint32_t id;      /* nng_pipe_id; 0: free slot */
    uint64_t addr;    /* the peer's address, folded */
    uint64_t peer;    /* the peer's address and port, folded */
    double last;      /* when it connected or last delivered a whole message */
} conns_entry;

typedef struct {
    ino_t ino;    /* the socket's inode: the same descriptor number may be reused */
    double first; /* when a scan first saw it without a pipe */
    int shut;     /* shut down already: counted once */
} conns_unshaken;

struct coord_conns {
    pthread_mutex_t mu;
    coord *c;
    int max_per_addr;
    double idle_s;
    conns_entry e[CONNS_MAX];
    int hw; /* slots in use all lie below this: the scans stop there */
    int port;          /* the listener's TCP port; 0: not TCP, no handshake scan */
    double hs_s, scanned_at;
    conns_unshaken u[CONNS_MAX], u_next[CONNS_MAX];
    int n_u;
    uint64_t peers[CONNS_MAX]; /* the pipes' peers, sorted, for one scan */
    rate_table *hello_conn, *hello_addr; /* challenges each connection and address may obtain (t->mu) */
};

/* FNV-1a over an address's bytes and, when port is not NULL, its two port
 * bytes (network order); 0 is kept for "unknown". */
static uint64_t conns_fold(const uint8_t *b, size_t n, const uint8_t *port) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    for (int i = 0; port && i < 2; i++) h = (h ^ port[i]) * 1099511628211ull;
    return h | 1;
}

/* The pipe's peer folded: its IP address alone (with_port 0) or with its port. */
static uint64_t conns_addr(nng_pipe p, int with_port) {
    nng_sockaddr sa;
    if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0) return 0;
    if (sa.s_family == NNG_AF_INET)
        return conns_fold((const uint8_t *)&sa.s_in.sa_addr, sizeof sa.s_in.sa_addr,
                          with_port ? (const uint8_t *)&sa.s_in.sa_port : NULL);
    if (sa.s_family == NNG_AF_INET6)
        return conns_fold(sa.s_in6.sa_addr, sizeof sa.s_in6.sa_addr,
                          with_port ? (const uint8_t *)&sa.s_in6.sa_port : NULL);
    return 0;
}

static void conns_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
    coord_conns *t = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    pthread_mutex_lock(&t->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        uint64_t addr = conns_addr(p, 0);
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
        t->e[slot] = (conns_entry){.id = id, .addr = addr, .peer = conns_addr(p, 1), .last = hfl_now()};
        if (slot >= t->hw) t->hw = slot + 1;
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        for (int i = 0; i < t->hw; i++)
            if (t->e[i].id == id) t->e[i].id = 0;
        while (t->hw > 0 && !t->e[t->hw - 1].id) t->hw--;
    }
    pthread_mutex_unlock(&t->mu);
}

coord_conns *conns_start(coord *c, nng_socket sock, int port, char *err) {
    coord_conns *t = hfl_calloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    t->c = c;
    t->max_per_addr = c->cfg.max_conns_per_addr;
    t->idle_s = c->cfg.idle_s;
    t->port = port;
    t->hs_s = c->cfg.handshake_s;
    t->hello_conn = rate_new(CONNS_MAX);
    t->hello_addr = rate_new(CONNS_MAX);
    int rv = nng_pipe_notify(sock, NNG_PIPE_EV_ADD_PRE, conns_event, t);
    if (rv == 0) rv = nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, conns_event, t);
    if (rv != 0) {
        hfl_errf(err, "cannot watch connections: %s", nng_strerror(rv));
        conns_stop(t);
        return NULL;
    }
    return t;
}

uint64_t conns_address(nng_pipe p) { return conns_addr(p, 0); }

int conns_hello_allowed(coord_conns *t, nng_pipe p, double *wait_s) {
    double per_conn = t->c->cfg.hello_rate_conn, per_addr = t->c->cfg.hello_rate_addr, now = hfl_now(), w1 = 0, w2 = 0;
    uint64_t conn = (uint32_t)nng_pipe_id(p), addr = conns_addr(p, 0);
    pthread_mutex_lock(&t->mu);
    int ok = rate_has(t->hello_conn, conn, per_conn, now, &w1) && rate_has(t->hello_addr, addr, per_addr, now, &w2);
    if (ok) {
        rate_take(t->hello_conn, conn, per_conn, now);
        rate_take(t->hello_addr, addr, per_addr, now);
    }
    pthread_mutex_unlock(&t->mu);
    *wait_s = ok ? 0 : w1 > 0 ? w1 : w2;
    return ok;
}

void conns_seen(coord_conns *t, nng_pipe p) {
    uint32_t id = (uint32_t)nng_pipe_id(p);
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->hw; i++)
        if (t->e[i].id == id) t->e[i].last = hfl_now();
    pthread_mutex_unlock(&t->mu);
}

static int conns_cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int conns_cmp_ino(const void *a, const void *b) {
    ino_t x = ((const conns_unshaken *)a)->ino, y = ((const conns_unshaken *)b)->ino;
    return (x > y) - (x < y);
}

/* Our descriptor fd when it is a connection accepted on the listener's
 * port: its peer, folded as conns_addr folds a pipe's; 0 otherwise (not a
 * socket, another port, or the listening socket itself). */
static uint64_t conns_fd_peer(int fd, int port) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return 0;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (!(ss.ss_family == AF_INET && ntohs(v4->sin_port) == port) &&
        !(ss.ss_family == AF_INET6 && ntohs(v6->sin6_port) == port))
        return 0;
    len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) return 0;
    if (ss.ss_family == AF_INET)
        return conns_fold((const uint8_t *)&v4->sin_addr, sizeof v4->sin_addr, (const uint8_t *)&v4->sin_port);
    return conns_fold(v6->sin6_addr.s6_addr, sizeof v6->sin6_addr.s6_addr, (const uint8_t *)&v6->sin6_port);
}

/* Whether the peer on fd has sent us no byte at all (tcpi_bytes_received,
 * Linux 4.1; an older kernel's shorter tcp_info counts as "has spoken"). */
static int conns_fd_silent(int fd) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return 0;
    if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) return 0;
    return ti.tcpi_bytes_received == 0;
}

/* Once a second: every accepted connection that no pipe holds is timed from
 * when a scan first saw it, and shut down past --handshake-timeout if its
 * peer has been silent, past CONNS_STALL of them in any case (only the
 * silence rule when some pipe's address is unknown: it cannot be told from
 * a connection without a pipe, and a pipe has always spoken). Only the main
 * loop calls it, so u needs no lock. Each descriptor is dup(2)ed first and
 * every check and the shutdown run on the duplicate, which pins the socket:
 * if NNG closes and reuses the number meanwhile, what is checked is what is
 * shut down. */
static void conns_reap_unshaken(coord_conns *t) {
    double now = hfl_now();
    if (t->port <= 0 || now - t->scanned_at < 1.0) return;
    t->scanned_at = now;
    size_t np = 0;
    int unknown = 0;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->hw; i++) {
        if (t->e[i].id && t->e[i].peer) t->peers[np++] = t->e[i].peer;
        unknown |= t->e[i].id && !t->e[i].peer;
    }
    pthread_mutex_unlock(&t->mu);
    qsort(t->peers, np, sizeof *t->peers, conns_cmp_u64);
    DIR *d = opendir("/proc/self/fd");
    if (!d) return;
    int n_next = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n_next < CONNS_MAX) {
        char *end;
        long fd0 = strtol(de->d_name, &end, 10);
        if (end == de->d_name || *end || fd0 == dirfd(d)) continue;
        int fd = dup((int)fd0);
        if (fd < 0) continue;
        uint64_t peer = conns_fd_peer(fd, t->port);
        struct stat st;
        if (!peer || bsearch(&peer, t->peers, np, sizeof *t->peers, conns_cmp_u64) || fstat(fd, &st) != 0) {
            close(fd);
            continue;
        }
        conns_unshaken key = {.ino = st.st_ino, .first = now};
        conns_unshaken *seen = bsearch(&key, t->u, (size_t)t->n_u, sizeof *t->u, conns_cmp_ino);
        conns_unshaken u = seen ? *seen : key;
        double age = now - u.first;
        int silent = age > t->hs_s && conns_fd_silent(fd);
        int due = silent || (!unknown && age > CONNS_STALL * t->hs_s);
        if (!u.shut && due && shutdown(fd, SHUT_RDWR) == 0) {
            u.shut = 1;
            __atomic_fetch_add(&t->c->conns_unshaken, 1, __ATOMIC_RELAXED);
        }
        close(fd);
        t->u_next[n_next++] = u;
    }
    closedir(d);
    qsort(t->u_next, (size_t)n_next, sizeof *t->u_next, conns_cmp_ino);
    memcpy(t->u, t->u_next, (size_t)n_next * sizeof *t->u);
    t->n_u = n_next;
}

void conns_reap(coord_conns *t) {
    conns_reap_unshaken(t);
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
    rate_free(t->hello_conn);
    rate_free(t->hello_addr);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
