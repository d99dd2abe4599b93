/* fleet_overhead.c: bench-fleet, the coordinator's memory and per-round
 * overhead against the size of the fleet (docs/benchmarks.md).
 *
 *   bench-fleet --coordinator PATH [--clients N] [--per-round K] [--rounds R]
 *               [--connections C] [--timeout S] [--json]
 *
 * N light clients live in this one process, spread over C connections (req
 * sockets; each client is an NNG context with its own aio, driven by its
 * callback): hello, then long-poll pulls (hold_ms), and for each task an
 * int8 update of a fixed small change at once, with no training. So a
 * round's wall time (open to close, from the coordinator's report) is the
 * coordinator's own overhead for the round: drawing K of N, sending K tasks,
 * decoding and summing K updates, evaluating, logging. The coordinator runs
 * with --insecure (tcp): the cost of TLS and proven hellos per client is
 * bench-load-tls's subject, and per connection it does not grow with N here.
 * Reports the coordinator's resident memory idle, at the end (every session
 * registered) and its peak; each round's wall time. Exit 0 when every round closed ok. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <nng/nng.h>

#include "bench/bench_coord.h"
#include "compress/codec.h"
#include "proto/msg.h"
#include "proto/transport.h"
#include "util/util.h"

#define FLEET_MAX 16384
#define FLEET_PARAMS 199210 /* mlp, the coordinator's default model */
#define FLEET_HOLD_MS 20000

typedef struct {
    int i, id, done, failed;
    char token[33];
    nng_ctx ctx;
    nng_aio *aio;
    int sending; /* 1: the aio is sending; 0: receiving */
    char err[HFL_ERR_LEN];
} lite;

static uint8_t *upd;     /* the update every client sends: int8 of a small constant change */
static size_t upd_len;
static int upd_block = -1;
static pthread_mutex_t upd_lock = PTHREAD_MUTEX_INITIALIZER;
static int n_done;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;

static void lite_finish(lite *l, const char *why) {
    if (why) snprintf(l->err, sizeof l->err, "%s", why), l->failed = 1;
    l->done = 1;
    pthread_mutex_lock(&done_lock);
    n_done++;
    pthread_mutex_unlock(&done_lock);
}

/* Sends (type, meta, payload) on l's context; meta is consumed. */
static void lite_send(lite *l, int type, cJSON *meta, const void *payload, size_t plen) {
    size_t len;
    uint8_t *buf = hfl_msg_encode(type, meta, payload, plen, &len);
    cJSON_Delete(meta);
    nng_msg *m;
    if (!buf || nng_msg_alloc(&m, len) != 0) {
        free(buf);
        lite_finish(l, "cannot encode a request");
        return;
    }
    memcpy(nng_msg_body(m), buf, len);
    free(buf);
    nng_aio_set_msg(l->aio, m);
    l->sending = 1;
    nng_ctx_send(l->ctx, l->aio);
}

static cJSON *lite_meta(const lite *l) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "client_id", l->id);
    cJSON_AddStringToObject(m, "token", l->token);
    return m;
}

static void lite_pull(lite *l) {
    cJSON *m = lite_meta(l);
    cJSON_AddNumberToObject(m, "hold_ms", FLEET_HOLD_MS);
    lite_send(l, HFL_MSG_PULL, m, NULL, 0);
}

/* The update for the run's block size, encoded once. */
static int lite_update(uint32_t block) {
    pthread_mutex_lock(&upd_lock);
    if (upd_block != (int)block) {
        const hfl_codec *int8 = hfl_codec_find("int8", NULL);
        float *d = hfl_malloc(sizeof(float) * FLEET_PARAMS);
        for (size_t i = 0; i < FLEET_PARAMS; i++) d[i] = (i % 7 == 0 ? 1e-3f : -1e-4f);
        free(upd);
        upd = hfl_malloc(hfl_codec_max_bytes(int8, FLEET_PARAMS, block));
        hfl_rng_key key = {1, 1, 0, 0};
        upd_len = hfl_codec_encode(int8, d, NULL, FLEET_PARAMS, block, &key, 1, upd);
        upd_block = (int)block;
        free(d);
    }
    pthread_mutex_unlock(&upd_lock);
    return 0;
}

static void lite_cb(void *arg) {
    lite *l = arg;
    int rv = nng_aio_result(l->aio);
    if (rv != 0) {
        if (l->sending) nng_msg_free(nng_aio_get_msg(l->aio));
        if (rv != NNG_ECLOSED && rv != NNG_ECANCELED) lite_finish(l, nng_strerror(rv));
        return;
    }
    if (l->sending) {
        l->sending = 0;
        nng_ctx_recv(l->ctx, l->aio);
        return;
    }
    nng_msg *raw = nng_aio_get_msg(l->aio);
    hfl_msg m;
    char err[HFL_ERR_LEN];
    if (hfl_msg_decode(nng_msg_body(raw), nng_msg_len(raw), (size_t)FLEET_PARAMS * 4 + 4096, &m, err) != 0) {
        nng_msg_free(raw);
        lite_finish(l, err);
        return;
    }
    nng_msg_free(raw);
    int64_t v = 0;
    switch (m.type) {
    case HFL_MSG_WELCOME:
        hfl_meta_int(m.meta, "client_id", 0, FLEET_MAX - 1, &v, NULL);
        l->id = (int)v;
        hfl_meta_str(m.meta, "token", 32, l->token, NULL);
        if (hfl_meta_int(m.meta, "block", 1, 1 << 20, &v, err) == 0) lite_update((uint32_t)v);
        lite_pull(l);
        break;
    case HFL_MSG_WAIT:
    case HFL_MSG_ACK:
        lite_pull(l);
        break;
    case HFL_MSG_TASK: {
        cJSON *u = lite_meta(l);
        hfl_meta_int(m.meta, "round", 1, 1 << 30, &v, NULL);
        cJSON_AddNumberToObject(u, "round", (double)v);
        cJSON_AddNumberToObject(u, "samples", 60);
        cJSON_AddNumberToObject(u, "loss", 1.0);
        cJSON_AddStringToObject(u, "codec", "int8");
        lite_send(l, HFL_MSG_UPDATE, u, upd, upd_len);
        break;
    }
    case HFL_MSG_BYE:
        lite_finish(l, NULL);
        break;
    default: {
        char why[200] = "unexpected reply";
        hfl_meta_str(m.meta, "error", sizeof why - 1, why, NULL);
        lite_finish(l, why);
    }
    }
    hfl_msg_free(&m);
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"coordinator", 1, 0, 'c'}, {"clients", 1, 0, 'n'}, {"per-round", 1, 0, 'k'},
                                         {"rounds", 1, 0, 'r'},      {"connections", 1, 0, 'p'},
                                         {"timeout", 1, 0, 't'},     {"json", 0, 0, 'j'},
                                         {"help", 0, 0, 'h'},        {0, 0, 0, 0}};
    const char *coord_exe = NULL;
    long n = 1000, k = 100, rounds = 5, conns = 16;
    double timeout = 600;
    int json = 0, ch;
    char err[HFL_ERR_LEN];
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long *tgt = ch == 'n' ? &n : ch == 'k' ? &k : ch == 'r' ? &rounds : ch == 'p' ? &conns : NULL;
        if (tgt && hfl_parse_int(optarg, 1, FLEET_MAX, tgt, err) != 0)
            return fprintf(stderr, "bench-fleet: %s: %s\n", argv[optind - 2], err), 2;
        if (ch == 'c') coord_exe = optarg;
        else if (ch == 't' && hfl_parse_double(optarg, 1, 86400, &timeout, err) != 0)
            return fprintf(stderr, "bench-fleet: --timeout: %s\n", err), 2;
        else if (ch == 'j') json = 1;
        else if (ch == 'h')
            return printf("usage: bench-fleet --coordinator PATH [--clients N] [--per-round K] [--rounds R]\n"
                          "                   [--connections C] [--timeout S] [--json]\n"
                          "N light clients (default 1000) over C connections (16) in this process; K of them\n"
                          "(100) drawn for each of R rounds (5) answer at once with a fixed int8 update. Prints\n"
                          "the coordinator's memory and each round's wall time (its own overhead).\n"),
                   0;
        else if (ch == '?') return fprintf(stderr, "bench-fleet: bad option (see --help)\n"), 2;
    }
    if (!coord_exe) return fprintf(stderr, "bench-fleet: --coordinator PATH is required\n"), 2;
    if (k > n) k = n;
    if (access("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: Fashion-MNIST not installed (the coordinator loads its test set)\n");
        return 77;
    }
    char dir[] = "/tmp/hfl-fleet-XXXXXX", report[96], url[300] = "";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    snprintf(report, sizeof report, "%s/report.json", dir);
    char a_n[16], a_k[16], a_r[16];
    snprintf(a_n, sizeof a_n, "%ld", n);
    snprintf(a_k, sizeof a_k, "%ld", k);
    snprintf(a_r, sizeof a_r, "%ld", rounds);
    const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--insecure", "--report", report, "--rounds", a_r,
                          "--clients-per-round", a_k, "--min-clients", a_n, "--min-quorum", a_k, "--codec", "int8",
                          "--deadline", "120", "--liveness", "60", "--max-conns-per-addr", "0", "--linger", "2",
                          "--over-select", "0", /* K tasks a round, every update taken */
                          "--quiet", NULL};
    pid_t coord = bench_coord_start("bench-fleet", coord_exe, args, dir, url, sizeof url);
    if (coord < 0) return 1;
    int rc = 1;
    double idle_hwm, idle_rss;
    bench_coord_rss(coord, &idle_hwm, &idle_rss);
    hfl_tls_opts tls = {.insecure = 1};
    nng_socket *socks = hfl_calloc((size_t)conns, sizeof *socks);
    for (long i = 0; i < conns; i++)
        if (hfl_transport_dial(&socks[i], url, &tls, (size_t)FLEET_PARAMS * 4 + (1 << 20), 60000, err) != 0) {
            fprintf(stderr, "bench-fleet: %s\n", err);
            kill(coord, SIGKILL);
            waitpid(coord, NULL, 0);
            return 1;
        }
    lite *ls = hfl_calloc((size_t)n, sizeof *ls);
    double t_start = hfl_now();
    for (long i = 0; i < n; i++) {
        lite *l = &ls[i];
        l->i = (int)i;
        if (nng_ctx_open(&l->ctx, socks[i % conns]) != 0 || nng_aio_alloc(&l->aio, lite_cb, l) != 0) {
            lite_finish(l, "cannot open a context");
            continue;
        }
        nng_aio_set_timeout(l->aio, (nng_duration)(FLEET_HOLD_MS * 3));
        cJSON *h = cJSON_CreateObject();
        char name[32];
        snprintf(name, sizeof name, "lite-%ld", i);
        cJSON_AddStringToObject(h, "name", name);
        cJSON_AddNumberToObject(h, "samples", 60);
        cJSON_AddObjectToObject(h, "plan");
        lite_send(l, HFL_MSG_HELLO, h, NULL, 0);
    }
    for (;;) {
        pthread_mutex_lock(&done_lock);
        int d = n_done;
        pthread_mutex_unlock(&done_lock);
        if (d == n || hfl_now() - t_start > timeout) break;
        hfl_sleep_ms(50);
    }
    double wall = hfl_now() - t_start, hwm, rss;
    bench_coord_rss(coord, &hwm, &rss);
    int failed = 0, unfinished = 0;
    const char *first = NULL;
    for (long i = 0; i < n; i++) {
        unfinished += !ls[i].done;
        failed += ls[i].failed;
        if (ls[i].failed && !first) first = ls[i].err;
    }
    for (long i = 0; i < n; i++)
        if (ls[i].aio) nng_aio_stop(ls[i].aio);
    for (long i = 0; i < conns; i++) nng_close(socks[i]);
    int status = -1;
    for (double t0 = hfl_now(); hfl_now() - t0 < 10 && waitpid(coord, &status, WNOHANG) == 0; hfl_sleep_ms(50)) {
    }
    if (status == -1) {
        kill(coord, SIGKILL);
        waitpid(coord, NULL, 0);
    }
    size_t len;
    char *text = hfl_read_file(report, &len, err);
    cJSON *rep = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(rep, "rounds"), *r;
    int ok = 0, nr = 0;
    char walls[2048] = "";
    size_t wl = 0;
    double wsum = 0;
    cJSON_ArrayForEach(r, rs) {
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "status"));
        double w = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "wall_s"));
        ok += st && !strcmp(st, "ok");
        wsum += w;
        if (wl < sizeof walls - 32) wl += (size_t)snprintf(walls + wl, sizeof walls - wl, "%s%.3f", nr ? ", " : "", w);
        nr++;
    }
    double peak = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(rep, "coordinator_peak_rss_bytes")) / 1048576.0;
    if (json)
        printf("{\"clients\": %ld, \"per_round\": %ld, \"connections\": %ld, \"rounds\": %d, \"rounds_ok\": %d, "
               "\"round_wall_s\": [%s], \"round_wall_mean_s\": %.4f, \"run_s\": %.2f, \"coordinator_idle_rss_mib\": %.1f, "
               "\"coordinator_rss_end_mib\": %.1f, \"coordinator_peak_rss_mib\": %.1f, \"failed_clients\": %d}\n",
               n, k, conns, nr, ok, walls, nr ? wsum / nr : 0, wall, idle_rss, rss, peak > 0 ? peak : hwm,
               failed + unfinished);
    else
        printf("%ld clients (%ld per round, %ld connections): %d of %d rounds ok, round wall %s s (mean %.4f); "
               "coordinator RSS %.1f MiB idle, %.1f MiB at the end (every session registered), peak %.1f MiB\n",
               n, k, conns, ok, nr, walls, nr ? wsum / nr : 0, idle_rss, rss, peak > 0 ? peak : hwm);
    if (failed || unfinished)
        fprintf(stderr, "bench-fleet: %d clients failed, %d unfinished; first: %s\n", failed, unfinished,
                first ? first : "-");
    rc = ok == rounds && nr == rounds && !failed && !unfinished ? 0 : 1;
    cJSON_Delete(rep);
    for (long i = 0; i < n; i++) {
        if (ls[i].aio) nng_aio_free(ls[i].aio);
        nng_ctx_close(ls[i].ctx);
    }
    free(ls);
    free(socks);
    free(upd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench-fleet: cannot remove %s\n", dir);
    return rc;
}
