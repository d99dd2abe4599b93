/* load_tls.c: bench-load-tls, N clients saying hello over mutual TLS at once
 * to one hfl-coordinator on loopback (the load check of coordinator/conns.c's bounds).
 *
 *   bench-load-tls --coordinator PATH [--clients N] [--timeout S] [--json]
 *
 * It writes a PKI for N clients, starts the coordinator (no round can open:
 * it waits for more clients than will come), measures its resident memory
 * idle, then starts N threads that wait on one barrier and each dial, prove
 * their identity (proto/hello.h: TLS handshake, challenge, ECDSA signature
 * both ways) and pull once, holding their connections open. It reports how
 * many were served (welcome, then wait), the wall time from the barrier to
 * the last welcome, hellos per second, and the coordinator's peak and
 * resident memory with every connection held. Bounded: each client gives up
 * after --timeout seconds, and the coordinator is stopped at the end.
 * Exit 0 when every client was served, 1 otherwise, 77 without Fashion-MNIST. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_coord.h"
#include "proto/hello.h"
#include "proto/pki.h"
#include "proto/transport.h"
#include "util/util.h"

#define LOAD_MAX 1024

typedef struct {
    int i;
    const char *url, *pki;
    pthread_barrier_t *go;
    pthread_barrier_t *hold;
    double t_welcome;
    int served, redials;
    char err[HFL_ERR_LEN];
} load_client;

static double load_timeout = 120;

static void *load_run(void *arg) {
    load_client *lc = arg;
    char pem[600], ca[600];
    snprintf(pem, sizeof pem, "%s/client-%d.pem", lc->pki, lc->i);
    snprintf(ca, sizeof ca, "%s/ca.crt", lc->pki);
    hfl_hello_auth auth = {.server_name = "localhost"};
    hfl_tls_opts tls = {0, ca, pem, "localhost"};
    nng_socket sock = NNG_SOCKET_INITIALIZER;
    int have_sock = 0;
    if (hfl_identity_load(pem, &auth.self, lc->err) != 0 || hfl_trust_load(ca, NULL, &auth.trust, lc->err) != 0) {
        pthread_barrier_wait(lc->go);
        goto out;
    }
    pthread_barrier_wait(lc->go);
    /* as hfl-client does: a dial refused while the coordinator is swamped (NNG
     * closes a TLS negotiation that takes over 10 s) is tried again */
    double until = hfl_now() + load_timeout;
    for (int k = 0; hfl_transport_dial(&sock, lc->url, &tls, 1 << 24, (int)(load_timeout * 1000), lc->err) != 0; k++) {
        if (hfl_now() > until) goto out;
        lc->redials++;
        hfl_sleep_ms(100 << (k < 5 ? k : 5));
    }
    have_sock = 1;
    cJSON *fields = cJSON_CreateObject();
    cJSON_AddNumberToObject(fields, "samples", 1);
    hfl_msg rep;
    nng_msg *raw;
    int rc = hfl_hello(sock, &auth, fields, 1 << 24, &rep, &raw, lc->err);
    cJSON_Delete(fields);
    if (rc != 0) goto out;
    int64_t id = -1;
    char token[64] = "";
    if (rep.type == HFL_MSG_WELCOME) {
        lc->t_welcome = hfl_now();
        hfl_meta_int(rep.meta, "client_id", 0, 1 << 20, &id, lc->err);
        hfl_meta_str(rep.meta, "token", sizeof token - 1, token, lc->err);
    } else {
        hfl_meta_str(rep.meta, "error", 200, lc->err, NULL);
    }
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    if (id < 0) goto out;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "client_id", (double)id);
    cJSON_AddStringToObject(m, "token", token);
    rc = hfl_transport_request(sock, HFL_MSG_PULL, m, NULL, 0, 1 << 24, &rep, &raw, lc->err);
    cJSON_Delete(m);
    if (rc == 0) {
        lc->served = rep.type == HFL_MSG_WAIT;
        if (!lc->served) snprintf(lc->err, sizeof lc->err, "pull answered with %s", hfl_msg_type_name(rep.type));
        hfl_msg_free(&rep);
        nng_msg_free(raw);
    }
out:
    pthread_barrier_wait(lc->hold); /* connections stay open until every client is done */
    pthread_barrier_wait(lc->hold); /* and the coordinator's memory was read */
    if (have_sock) nng_close(sock);
    hfl_identity_free(auth.self);
    hfl_trust_free(auth.trust);
    return NULL;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"coordinator", 1, 0, 'c'}, {"clients", 1, 0, 'n'}, {"timeout", 1, 0, 't'},
                                         {"json", 0, 0, 'j'},        {"help", 0, 0, 'h'},    {0, 0, 0, 0}};
    const char *coord_exe = NULL;
    long n = 500;
    int json = 0, ch;
    char err[HFL_ERR_LEN];
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (ch == 'c') coord_exe = optarg;
        else if (ch == 'n' && hfl_parse_int(optarg, 1, LOAD_MAX, &n, err) != 0) return fprintf(stderr, "bench-load-tls: --clients: %s\n", err), 2;
        else if (ch == 't' && hfl_parse_double(optarg, 1, 3600, &load_timeout, err) != 0) return fprintf(stderr, "bench-load-tls: --timeout: %s\n", err), 2;
        else if (ch == 'j') json = 1;
        else if (ch == 'h') return printf("usage: bench-load-tls --coordinator PATH [--clients N] [--timeout S] [--json]\n"), 0;
        else if (ch == '?') return fprintf(stderr, "bench-load-tls: bad option (see --help)\n"), 2;
    }
    if (!coord_exe) return fprintf(stderr, "bench-load-tls: --coordinator PATH is required\n"), 2;
    if (access("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: Fashion-MNIST not installed (the coordinator loads its test set)\n");
        return 77;
    }
    char dir[] = "/tmp/hfl-load-XXXXXX", pki[64], url[300] = "";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    snprintf(pki, sizeof pki, "%s/pki", dir);
    double t = hfl_now();
    if (hfl_pki_create(pki, (int)n, "localhost", 1, err) != 0) return fprintf(stderr, "bench-load-tls: %s\n", err), 1;
    fprintf(stderr, "bench-load-tls: %ld certificates in %.1f s\n", n, hfl_now() - t);
    char ca[96], cpem[96];
    snprintf(ca, sizeof ca, "%s/ca.crt", pki);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", pki);
    const char *args[] = {"--listen", "tls+tcp://127.0.0.1:0", "--ca", ca, "--cert", cpem, "--rounds", "1",
                          "--clients-per-round", "1024", "--max-conns-per-addr", "0", "--linger", "0",
                          "--hello-rate", "0:0", /* every client dials from one address: its throughput, unlimited */
                          NULL};
    pid_t coord = bench_coord_start("bench-load-tls", coord_exe, args, dir, url, sizeof url);
    if (coord < 0) return 1;
    int rc = 1;
    double idle_hwm, idle_rss;
    bench_coord_rss(coord, &idle_hwm, &idle_rss);
    pthread_barrier_t go, hold;
    pthread_barrier_init(&go, NULL, (unsigned)n + 1);
    pthread_barrier_init(&hold, NULL, (unsigned)n + 1);
    load_client *lc = hfl_calloc((size_t)n, sizeof *lc);
    pthread_t *th = hfl_calloc((size_t)n, sizeof *th);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    for (long i = 0; i < n; i++) {
        lc[i] = (load_client){.i = (int)i, .url = url, .pki = pki, .go = &go, .hold = &hold};
        pthread_create(&th[i], &attr, load_run, &lc[i]);
    }
    pthread_barrier_wait(&go);
    double start = hfl_now();
    fprintf(stderr, "bench-load-tls: %ld clients dialing %s\n", n, url);
    pthread_barrier_wait(&hold);
    double last = start;
    int served = 0, redials = 0;
    const char *first_err = NULL;
    for (long i = 0; i < n; i++) {
        served += lc[i].served;
        redials += lc[i].redials;
        if (lc[i].t_welcome > last) last = lc[i].t_welcome;
        if (!lc[i].served && !first_err) first_err = lc[i].err;
    }
    double hwm, rss;
    bench_coord_rss(coord, &hwm, &rss);
    pthread_barrier_wait(&hold);
    for (long i = 0; i < n; i++) pthread_join(th[i], NULL);
    kill(coord, SIGTERM);
    waitpid(coord, NULL, 0);
    double wall = last - start;
    if (json)
        printf("{\"clients\": %ld, \"served\": %d, \"redials\": %d, \"wall_s\": %.3f, \"hellos_per_s\": %.1f, \"coordinator_idle_rss_mib\": "
               "%.1f, \"coordinator_peak_rss_mib\": %.1f, \"coordinator_rss_mib\": %.1f}\n",
               n, served, redials, wall, served / (wall > 0 ? wall : 1e-9), idle_rss, hwm, rss);
    else
        printf("%d of %ld clients served in %.2f s (%.0f proven hellos/s, %d dials tried again); coordinator "
               "memory: %.1f MiB idle, %.1f MiB with every connection held (peak %.1f MiB)\n",
               served, n, wall, served / (wall > 0 ? wall : 1e-9), redials, idle_rss, rss, hwm);
    if (served == n) rc = 0;
    else fprintf(stderr, "bench-load-tls: %ld not served; first: %s\n", n - served, first_err ? first_err : "?");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench-load-tls: cannot remove %s\n", dir);
    free(lc);
    free(th);
    return rc;
}
