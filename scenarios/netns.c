/* netns.c: hfl-sim --netns (see netns.h).
 *
 * Each client i gets namespace hfl-<tag>-<B>-<i> and a veth pair: hv<tag>h<i>
 * on the host, hv<tag>c<i> in the namespace (15 characters at most, the
 * kernel's IFNAMSIZ), addressed in /30s upwards from 10.B.0.0 (B from 200
 * to 249, one no live run holds: runs_scan), four addresses a client
 * (16,384 clients a /16). The coordinator listens on every address; client i dials its own
 * link's host end.
 *
 * Shaping. A veth end's egress is one direction of the link: the host end's
 * is what the client downloads, the client end's what it uploads. Where the
 * kernel has sch_netem, each end gets `netem delay <latency> rate <rate>`,
 * so a round trip costs twice the profile's one-way latency; where it does
 * not (checked once, on the first link), `tbf rate <rate>` alone, and the
 * latency is not applied, which hfl-sim says in one line. tbf's bucket is
 * 10 ms of the rate (at least 16 KiB, more than one segment) and its queue
 * 100 ms. Everything runs through ip(8) and tc(8), whose errors come back in
 * the error line. The namespaces go when hfl-sim exits; those of one that
 * was killed go when the next --netns run starts. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scenarios/netns.h"
#include "util/util.h"

#define NETNS_MAX_ARGS 24

/* Runs a command (argv[0] looked up in PATH, and in /usr/sbin and /sbin,
 * where ip and tc live but a user's PATH may not reach); 0, or -1 with err
 * holding the command's first line of stderr. */
static int run(char *err, const char *fmt, ...) {
    char line[512], *argv[NETNS_MAX_ARGS + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char copy[sizeof line];
    snprintf(copy, sizeof copy, "%s", line);
    int argc = 0;
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " ")) {
        if (argc == NETNS_MAX_ARGS) return hfl_errf(err, "%s: more than %d words", line, NETNS_MAX_ARGS);
        argv[argc++] = tok;
    }
    argv[argc] = NULL;
    int fds[2];
    if (pipe(fds) != 0) return hfl_errf(err, "%s: pipe: %s", line, strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return hfl_errf(err, "%s: fork: %s", line, strerror(errno));
    }
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]), close(fds[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1), close(devnull);
        char path[1024];
        snprintf(path, sizeof path, "%s:/usr/sbin:/sbin", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
        setenv("PATH", path, 1);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char out[256] = "";
    ssize_t got = 0, r;
    while (got < (ssize_t)sizeof out - 1 && (r = read(fds[0], out + got, sizeof out - 1 - got)) > 0) got += r;
    out[got > 0 ? got : 0] = 0;
    char drain[256];
    while (read(fds[0], drain, sizeof drain) > 0) {
    }
    close(fds[0]);
    int st = 0;
    pid_t w;
    while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
    }
    if (w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    out[strcspn(out, "\n")] = 0;
    return hfl_errf(err, "%s: %s", line, out[0] ? out : "failed");
}

void sim_netns_name(const sim_netns *nn, int i, char *out, size_t n) {
    snprintf(out, n, "hfl-%d-%d-%d", nn->tag, nn->base, i);
}

/* The /30 of client i: 10.B.0.0 + 4i, B the run's (runs_scan: no live
 * run's, so two runs at once never share a /16; one that did would route
 * some clients to the other run's links). */
static void link_ip(const sim_netns *nn, int i, int host, char *out, size_t n) {
    unsigned a = ((unsigned)nn->base << 16) + 4u * (unsigned)i + (host ? 1u : 2u);
    snprintf(out, n, "10.%u.%u.%u", (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

void sim_netns_host_ip(const sim_netns *nn, int i, char *out, size_t n) { link_ip(nn, i, 1, out, n); }

/* One direction: dev's egress (in namespace ns, or the host's when ns is
 * NULL) limited to bytes_per_s, delayed by latency_s where netem works. */
static int shape(const sim_netns *nn, const char *ns, const char *dev, double bytes_per_s, double latency_s,
                 char *err) {
    char pre[64] = "";
    if (ns) snprintf(pre, sizeof pre, "-n %s ", ns);
    double bits = bytes_per_s * 8;
    if (nn->netem)
        return run(err, "tc %sqdisc add dev %s root netem delay %.3fms rate %.0fbit", pre, dev, latency_s * 1e3, bits);
    double burst = bytes_per_s / 100 > 16384 ? bytes_per_s / 100 : 16384;
    return run(err, "tc %sqdisc add dev %s root tbf rate %.0fbit burst %.0f latency 100ms", pre, dev, bits, burst);
}

/* Client i's namespace and link; shaped when its profile has a link. */
static int open_one(sim_netns *nn, int i, const hfl_profile *p, char *err) {
    char ns[32], hv[16], cv[16], hip[32], cip[32];
    sim_netns_name(nn, i, ns, sizeof ns);
    snprintf(hv, sizeof hv, "hv%dh%d", nn->tag, i);
    snprintf(cv, sizeof cv, "hv%dc%d", nn->tag, i);
    link_ip(nn, i, 1, hip, sizeof hip);
    link_ip(nn, i, 0, cip, sizeof cip);
    if (run(err, "ip netns add %s", ns) != 0) return -1;
    nn->n = i + 1; /* from here on, close removes it */
    if (run(err, "ip link add %s type veth peer name %s netns %s", hv, cv, ns) != 0 ||
        run(err, "ip addr add %s/30 dev %s", hip, hv) != 0 || run(err, "ip link set %s up", hv) != 0 ||
        run(err, "ip -n %s addr add %s/30 dev %s", ns, cip, cv) != 0 ||
        run(err, "ip -n %s link set %s up", ns, cv) != 0 || run(err, "ip -n %s link set lo up", ns) != 0)
        return -1;
    if (!p || !p->name[0] || !(p->down_bps > 0) || !(p->up_bps > 0)) return 0;
    if (nn->netem < 0) { /* netem, where the kernel has it: tried once, on the first shaped link */
        char e[HFL_ERR_LEN];
        nn->netem = 1;
        if (shape(nn, NULL, hv, p->down_bps, p->latency_s, e) != 0) {
            nn->netem = 0;
            if (shape(nn, NULL, hv, p->down_bps, p->latency_s, err) != 0) return -1;
        }
    } else if (shape(nn, NULL, hv, p->down_bps, p->latency_s, err) != 0) {
        return -1;
    }
    if (shape(nn, ns, cv, p->up_bps, p->latency_s, err) != 0) return -1;
    nn->shaped++;
    return 0;
}

/* The other runs' namespaces (hfl-<pid>-<B>-<i>). A killed hfl-sim's (its
 * pid gone, or ours now: its exit handler never ran) are removed, with their
 * veth pairs; a live run's B goes into *used (bit B - 200). */
static void runs_scan(uint64_t *used) {
    DIR *d = opendir("/var/run/netns");
    if (!d) return;
    struct dirent *e;
    char err[HFL_ERR_LEN];
    while ((e = readdir(d))) {
        int pid, base, i;
        char tail;
        if (sscanf(e->d_name, "hfl-%d-%d-%d%c", &pid, &base, &i, &tail) != 3 || pid <= 0) continue;
        if (pid != (int)getpid() && (kill(pid, 0) == 0 || errno != ESRCH)) { /* a live run */
            if (base >= 200 && base < 250) *used |= 1ull << (base - 200);
            continue;
        }
        if (run(err, "ip netns del %s", e->d_name) != 0) fprintf(stderr, "hfl-sim: %s\n", err);
    }
    closedir(d);
}

int sim_netns_open(sim_netns *nn, int clients, const hfl_profile *profiles, volatile sig_atomic_t *stop,
                   char *err) {
    memset(nn, 0, sizeof *nn);
    nn->tag = (int)getpid();
    nn->netem = -1;
    if (geteuid() != 0) return hfl_errf(err, "--netns needs root: it makes network namespaces and veth pairs");
    uint64_t used = 0;
    runs_scan(&used);
    nn->base = -1;
    for (int k = 0; k < 50 && nn->base < 0; k++) {
        int b = (nn->tag + k) % 50;
        if (!(used >> b & 1)) nn->base = 200 + b;
    }
    if (nn->base < 0) return hfl_errf(err, "--netns: 50 other runs hold every /16 it uses (10.200-249.0.0)");
    if (clients > 16384) return hfl_errf(err, "--netns takes at most 16384 clients, not %d", clients);
    for (int i = 0; i < clients; i++)
        if ((stop && *stop && hfl_errf(err, "interrupted")) || open_one(nn, i, profiles ? &profiles[i] : NULL, err) != 0) {
            char e[HFL_ERR_LEN];
            snprintf(e, sizeof e, "--netns: client %d: %s", i, err);
            sim_netns_close(nn);
            return hfl_errf(err, "%s", e);
        }
    return 0;
}

void sim_netns_close(sim_netns *nn) {
    char err[HFL_ERR_LEN], ns[32];
    for (int i = 0; i < nn->n; i++) {
        sim_netns_name(nn, i, ns, sizeof ns);
        if (run(err, "ip netns del %s", ns) != 0) fprintf(stderr, "hfl-sim: %s\n", err);
    }
    nn->n = 0;
}
