/* fleet_overhead.c: bench-fleet, the coordinator's memory and per-round
 * overhead against the size of the fleet and of the model (docs/benchmarks.md).
 *
 *   bench-fleet --coordinator PATH [--clients N] [--per-round K] [--rounds R]
 *               [--connections C] [--model NAME|FILE] [--chunk-bytes SIZE]
 *               [--deadline S] [--timeout S] [--json]
 *
 * N light clients live in this one process, spread over C connections (req
 * sockets; each client is an NNG context with its own aio, driven by its
 * callback): hello, then long-poll pulls (hold_ms), and for each task an
 * int8 update of a fixed small change at once, with no training. The update
 * is sized from the welcome's params and encoded once, shared by all. A task
 * whose weights are larger than the coordinator's --chunk-bytes carries none:
 * the client fetches every chunk in order (docs/protocol.md, "Chunked
 * weights"), checks each reply's offset and length, and drops the bytes
 * without checking their SHA-256 digests (to stay light: hashing 344 MB per
 * client would make this process, not the coordinator, the bottleneck). An
 * update longer than the welcome's chunk_bytes goes up by put, chunk by
 * chunk in order (each reply's `have` checked), then the update names its
 * size and digest (docs/protocol.md, "Chunked updates"). So a
 * round's wall time (open to close, from the coordinator's report) is the
 * coordinator's own overhead for the round: drawing K of N, sending K tasks
 * and their chunks, decoding and summing K updates, evaluating, logging. The
 * coordinator runs with --insecure (tcp): the cost of TLS and proven hellos
 * per client is bench-load-tls's subject, and per connection it does not
 * grow with N here. A language model (--model gpt2-small.json) has no
 * built-in test set: the coordinator gets one window of T tokens, the
 * smallest it takes (it has no option to skip evaluation).
 * Reports the coordinator's resident memory idle, at the end (every session
 * registered) and its peak, against the fp32 model's bytes; each round's
 * wall time; then one JSON line (alone with --json). Exit 0 when every
 * round closed ok. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <stdint.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <nng/nng.h>

#include "bench/bench_coord.h"
#include "compress/codec.h"
#include "data/files.h"
#include "data/text.h"
#include "model/model.h"
#include "proto/msg.h"
#include "proto/transport.h"
#include "util/util.h"

#define FLEET_MAX 16384
#define FLEET_HOLD_MS 20000

typedef struct {
    int i, id, done, failed;
    char token[33];
    nng_ctx ctx;
    nng_aio *aio;
    int sending; /* 1: the aio is sending; 0: receiving */
    /* the task in hand */
    int64_t round, version, base;
    size_t total, chunk, at; /* chunked weights: their bytes, the chunk size, the next offset */
    size_t put_at;           /* a chunked upload: the bytes the coordinator holds */
    char err[HFL_ERR_LEN];
} lite;

/* Shared by every client, set once: the update (int8 of a small constant
 * change) for the welcome's params and block, its digest, the welcome's
 * chunk_bytes (0: updates go whole), and the largest payload a reply may
 * carry (the model's fp32 weights in a task). */
static uint8_t *upd;
static size_t upd_len, upd_n, up_chunk;
static char upd_sha256[65];
static int upd_block = -1;
static pthread_mutex_t upd_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t reply_max;
static int n_done;
static long n_fetches, n_puts;
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

/* The update for n values at the run's block size, encoded once for every
 * client, and the chunk size of uploads: 0, or -1 when another client's
 * welcome said otherwise (one coordinator never does). */
static int lite_update(size_t n, uint32_t block, size_t chunk) {
    int rc = 0;
    pthread_mutex_lock(&upd_lock);
    if (upd_block < 0) {
        const hfl_codec *int8 = hfl_codec_find("int8", NULL);
        float *d = hfl_malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) d[i] = (i % 7 == 0 ? 1e-3f : -1e-4f);
        upd = hfl_malloc(hfl_codec_max_bytes(int8, n, block));
        hfl_rng_key key = {1, 1, 0, 0};
        upd_len = hfl_codec_encode(int8, d, NULL, n, block, &key, 1, upd);
        hfl_sha256_hex(upd, upd_len, upd_sha256);
        upd_n = n, upd_block = (int)block, up_chunk = chunk;
        free(d);
    } else if (upd_n != n || upd_block != (int)block || up_chunk != chunk) {
        rc = -1;
    }
    pthread_mutex_unlock(&upd_lock);
    return rc;
}

/* The update for the task in hand: its payload attached, or after the
 * puts (lite_put) its size and digest in its place. */
static void lite_update_send(lite *l, int spooled) {
    cJSON *u = lite_meta(l);
    cJSON_AddNumberToObject(u, "round", (double)l->round);
    cJSON_AddNumberToObject(u, "samples", 60);
    cJSON_AddNumberToObject(u, "loss", 1.0);
    cJSON_AddStringToObject(u, "codec", "int8");
    if (!spooled) return lite_send(l, HFL_MSG_UPDATE, u, upd, upd_len);
    cJSON_AddNumberToObject(u, "payload_bytes", (double)upd_len);
    cJSON_AddStringToObject(u, "payload_sha256", upd_sha256);
    lite_send(l, HFL_MSG_UPDATE, u, NULL, 0);
}

/* Sends the update's chunk at l->put_at (docs/protocol.md, "Chunked updates"). */
static void lite_put(lite *l) {
    size_t m = upd_len - l->put_at < up_chunk ? upd_len - l->put_at : up_chunk;
    cJSON *p = lite_meta(l);
    cJSON_AddNumberToObject(p, "round", (double)l->round);
    cJSON_AddNumberToObject(p, "offset", (double)l->put_at);
    cJSON_AddNumberToObject(p, "payload_bytes", (double)upd_len);
    cJSON_AddStringToObject(p, "payload_sha256", upd_sha256);
    lite_send(l, HFL_MSG_PUT, p, upd + l->put_at, m);
}

/* The update goes up: whole when it fits the welcome's chunk_bytes (or the
 * coordinator named none), else in puts of chunk_bytes, then the update. */
static void lite_upload(lite *l) {
    if (!up_chunk || upd_len <= up_chunk) return lite_update_send(l, 0);
    l->put_at = 0;
    lite_put(l);
}

/* A put's reply: the coordinator holds `have` bytes, which must be the
 * chunk just sent added to what it held. */
static void lite_stored(lite *l, const hfl_msg *m) {
    int64_t have = -1;
    size_t sent = upd_len - l->put_at < up_chunk ? upd_len - l->put_at : up_chunk;
    hfl_meta_int(m->meta, "have", 0, (int64_t)1 << 40, &have, NULL);
    if (have != (int64_t)(l->put_at + sent)) return lite_finish(l, "put: the coordinator does not hold the chunk sent");
    pthread_mutex_lock(&done_lock);
    n_puts++;
    pthread_mutex_unlock(&done_lock);
    l->put_at = (size_t)have;
    if (l->put_at < upd_len) lite_put(l);
    else lite_update_send(l, 1);
}

/* Asks for the chunk of the task's weights at l->at. */
static void lite_fetch(lite *l) {
    cJSON *f = lite_meta(l);
    cJSON_AddNumberToObject(f, "round", (double)l->round);
    cJSON_AddNumberToObject(f, "version", (double)l->version);
    cJSON_AddNumberToObject(f, "base_version", (double)l->base);
    cJSON_AddNumberToObject(f, "offset", (double)l->at);
    lite_send(l, HFL_MSG_FETCH, f, NULL, 0);
}

/* A task: its weights come by fetch when it names payload_bytes (they are
 * larger than the coordinator's --chunk-bytes), else they are in it and go
 * unread; then the update. */
static void lite_task(lite *l, const hfl_msg *m) {
    char err[HFL_ERR_LEN];
    int64_t n = 0, total, chunk;
    if (hfl_meta_int(m->meta, "round", 1, 1 << 30, &l->round, err) != 0 ||
        hfl_meta_int(m->meta, "version", 0, INT32_MAX, &l->version, err) != 0 ||
        hfl_meta_int(m->meta, "base_version", -1, INT32_MAX, &l->base, err) != 0 ||
        hfl_meta_int(m->meta, "trainable", 1, (int64_t)1 << 40, &n, err) != 0)
        return lite_finish(l, err);
    if ((size_t)n != upd_n) return lite_finish(l, "the task's trainable part is not the welcome's params (LoRA?)");
    if (!cJSON_GetObjectItemCaseSensitive(m->meta, "payload_bytes")) return lite_upload(l);
    if (hfl_meta_int(m->meta, "payload_bytes", 1, (int64_t)1 << 40, &total, err) != 0 ||
        hfl_meta_int(m->meta, "chunk_bytes", 4096, 1 << 30, &chunk, err) != 0)
        return lite_finish(l, err);
    if ((size_t)chunk + 4096 > reply_max) return lite_finish(l, "the task's chunks are larger than a reply may be");
    l->total = (size_t)total, l->chunk = (size_t)chunk, l->at = 0;
    lite_fetch(l);
}

/* A fetch's reply: the chunk at l->at, of the length the task implies; the
 * bytes are dropped unchecked against their digests (a light client: the
 * real one, client/main.c's fetch_chunk, checks them). */
static void lite_chunk(lite *l, const hfl_msg *m) {
    int64_t off = -1;
    size_t want = l->total - l->at < l->chunk ? l->total - l->at : l->chunk;
    hfl_meta_int(m->meta, "offset", 0, (int64_t)1 << 40, &off, NULL);
    if (off != (int64_t)l->at || m->payload_len != want) return lite_finish(l, "fetch: the reply is not the chunk asked for");
    pthread_mutex_lock(&done_lock);
    n_fetches++;
    pthread_mutex_unlock(&done_lock);
    l->at += want;
    if (l->at < l->total) lite_fetch(l);
    else lite_upload(l);
}

static void lite_welcome(lite *l, const hfl_msg *m) {
    int64_t id, params, block;
    char err[HFL_ERR_LEN];
    if (hfl_meta_int(m->meta, "client_id", 0, FLEET_MAX - 1, &id, err) != 0 ||
        hfl_meta_str(m->meta, "token", 32, l->token, err) != 0 ||
        hfl_meta_int(m->meta, "params", 1, (int64_t)1 << 40, &params, err) != 0 ||
        hfl_meta_int(m->meta, "block", 1, 1 << 20, &block, err) != 0)
        return lite_finish(l, err);
    l->id = (int)id;
    int64_t chunk = 0; /* absent: updates go whole */
    if (cJSON_GetObjectItemCaseSensitive(m->meta, "chunk_bytes") &&
        hfl_meta_int(m->meta, "chunk_bytes", 4096, 1 << 30, &chunk, err) != 0)
        return lite_finish(l, err);
    if (lite_update((size_t)params, (uint32_t)block, (size_t)chunk) != 0)
        return lite_finish(l, "welcomes disagree on params, block or chunk_bytes");
    lite_pull(l);
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
    if (hfl_msg_decode(nng_msg_body(raw), nng_msg_len(raw), reply_max, &m, err) != 0) {
        nng_msg_free(raw);
        lite_finish(l, err);
        return;
    }
    switch (m.type) {
    case HFL_MSG_WELCOME: lite_welcome(l, &m); break;
    case HFL_MSG_WAIT:
    case HFL_MSG_ACK: lite_pull(l); break;
    case HFL_MSG_TASK: lite_task(l, &m); break;
    case HFL_MSG_FETCH: lite_chunk(l, &m); break;
    case HFL_MSG_PUT: lite_stored(l, &m); break;
    case HFL_MSG_BYE: lite_finish(l, NULL); break;
    default: {
        char why[200] = "unexpected reply";
        hfl_meta_str(m.meta, "error", sizeof why - 1, why, NULL);
        lite_finish(l, why);
    }
    }
    hfl_msg_free(&m);
    nng_msg_free(raw);
}

/* For a language model, whose test set the coordinator cannot find
 * built in: one window of T tokens (of two cut from a fixed text) written to
 * dir/test.safetensors, the smallest set the coordinator takes (it has no
 * option to skip evaluation), into path. 0 for other models (path empty:
 * Fashion-MNIST's), -1 with err. */
static int fleet_test_set(const hfl_model_spec *spec, const char *dir, char *path, size_t cap, char *err) {
    path[0] = 0;
    if (spec->label_rows <= 1) return 0;
    size_t len = 2 * (size_t)spec->in_dim + 1;
    const char *text = "In the beginning was the word, and every byte of it a token. ";
    uint8_t *bytes = hfl_malloc(len);
    for (size_t i = 0; i < len; i++) bytes[i] = (uint8_t)text[i % strlen(text)];
    hfl_dataset train = {0}, test = {0};
    snprintf(path, cap, "%s/test.safetensors", dir);
    int rc = hfl_text_windows(bytes, len, spec->in_dim, 0.5, &train, &test, err);
    if (rc == 0) rc = hfl_data_save(path, &test, HFL_DATA_SAFETENSORS, err);
    free(bytes);
    hfl_dataset_free(&train);
    hfl_dataset_free(&test);
    return rc;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"coordinator", 1, 0, 'c'}, {"clients", 1, 0, 'n'}, {"per-round", 1, 0, 'k'},
                                         {"rounds", 1, 0, 'r'},      {"connections", 1, 0, 'p'},
                                         {"timeout", 1, 0, 't'},     {"json", 0, 0, 'j'},
                                         {"model", 1, 0, 'm'},       {"chunk-bytes", 1, 0, 'b'},
                                         {"deadline", 1, 0, 'd'},    {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *coord_exe = NULL, *model = "mlp", *chunk_arg = NULL;
    long n = 1000, k = 100, rounds = 5, conns = 16;
    double timeout = 600, deadline = 120;
    uint64_t chunk_bytes = 0;
    int json = 0, ch;
    char err[HFL_ERR_LEN];
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long *tgt = ch == 'n' ? &n : ch == 'k' ? &k : ch == 'r' ? &rounds : ch == 'p' ? &conns : NULL;
        if (tgt && hfl_parse_int(optarg, 1, FLEET_MAX, tgt, err) != 0)
            return fprintf(stderr, "bench-fleet: %s: %s\n", argv[optind - 2], err), 2;
        if (ch == 'c') coord_exe = optarg;
        else if (ch == 'm') model = optarg;
        else if (ch == 'b' && hfl_parse_size(chunk_arg = optarg, &chunk_bytes, err) != 0)
            return fprintf(stderr, "bench-fleet: --chunk-bytes: %s\n", err), 2;
        else if (ch == 't' && hfl_parse_double(optarg, 1, 86400, &timeout, err) != 0)
            return fprintf(stderr, "bench-fleet: --timeout: %s\n", err), 2;
        else if (ch == 'd' && hfl_parse_double(optarg, 1, 86400, &deadline, err) != 0)
            return fprintf(stderr, "bench-fleet: --deadline: %s\n", err), 2;
        else if (ch == 'j') json = 1;
        else if (ch == 'h')
            return printf("usage: bench-fleet --coordinator PATH [--clients N] [--per-round K] [--rounds R]\n"
                          "                   [--connections C] [--model NAME|FILE] [--chunk-bytes SIZE]\n"
                          "                   [--deadline S] [--timeout S] [--json]\n"
                          "N light clients (default 1000) over C connections (16) in this process; K of them\n"
                          "(100) drawn for each of R rounds (5) fetch the task's weights when they come in\n"
                          "chunks and answer at once with a fixed int8 update, put in chunks when it is\n"
                          "longer than the welcome's chunk_bytes. --model (default mlp) and\n"
                          "--chunk-bytes (default the coordinator's) go to the coordinator, --deadline (120)\n"
                          "too. Prints the coordinator's memory against the fp32 model's and each round's wall\n"
                          "time (its own overhead).\n"),
                   0;
        else if (ch == '?') return fprintf(stderr, "bench-fleet: bad option (see --help)\n"), 2;
    }
    if (!coord_exe) return fprintf(stderr, "bench-fleet: --coordinator PATH is required\n"), 2;
    if (k > n) k = n;
    hfl_model_spec spec;
    if (hfl_model_resolve(model, &spec, err) != 0) return fprintf(stderr, "bench-fleet: --model: %s\n", err), 2;
    size_t model_bytes = spec.n_params * sizeof(float);
    reply_max = model_bytes + 4096; /* the fp32 weights in a task, its largest payload */
    if (spec.label_rows <= 1 && access("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: Fashion-MNIST not installed (the coordinator loads its test set)\n");
        return 77;
    }
    char dir[] = "/tmp/hfl-fleet-XXXXXX", report[96], url[300] = "", data[96];
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    if (fleet_test_set(&spec, dir, data, sizeof data, err) != 0)
        return fprintf(stderr, "bench-fleet: the test set: %s\n", err), 1;
    snprintf(report, sizeof report, "%s/report.json", dir);
    char a_n[16], a_k[16], a_r[16], a_d[32];
    snprintf(a_n, sizeof a_n, "%ld", n);
    snprintf(a_k, sizeof a_k, "%ld", k);
    snprintf(a_r, sizeof a_r, "%ld", rounds);
    snprintf(a_d, sizeof a_d, "%g", deadline);
    const char *args[40] = {"--listen", "tcp://127.0.0.1:0", "--insecure", "--report", report, "--rounds", a_r,
                            "--clients-per-round", a_k, "--min-clients", a_n, "--min-quorum", a_k, "--codec", "int8",
                            "--deadline", a_d, "--liveness", "60", "--max-conns-per-addr", "0", "--linger", "2",
                            "--over-select", "0", /* K tasks a round, every update taken */
                            "--quiet", "--model", model};
    int na = 0;
    while (args[na]) na++;
    if (chunk_arg) args[na++] = "--chunk-bytes", args[na++] = chunk_arg;
    if (data[0]) args[na++] = "--data", args[na++] = data;
    pid_t coord = bench_coord_start("bench-fleet", coord_exe, args, dir, url, sizeof url);
    if (coord < 0) return 1;
    int rc = 1;
    double idle_hwm, idle_rss;
    bench_coord_rss(coord, &idle_hwm, &idle_rss);
    hfl_tls_opts tls = {.insecure = 1};
    nng_socket *socks = hfl_calloc((size_t)conns, sizeof *socks);
    for (long i = 0; i < conns; i++)
        if (hfl_transport_dial(&socks[i], url, &tls, reply_max + HFL_MSG_MAX_META + HFL_MSG_HEADER_BYTES, 60000,
                               err) != 0) {
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
    /* the peak: the coordinator's VmHWM read here after the last round, or
     * its own report's (written at the run's end), whichever is larger */
    double rep_peak = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(rep, "coordinator_peak_rss_bytes"));
    double peak = hwm * 1048576.0 > rep_peak ? hwm * 1048576.0 : rep_peak;
    if (!json)
        printf("%ld clients (%ld per round, %ld connections), model %s (%.1f MB fp32): %d of %d rounds ok, round "
               "wall %s s (mean %.4f); coordinator RSS %.1f MiB idle, %.1f MiB at the end (every session registered), "
               "peak %.1f MiB (%.2fx the fp32 model)\n",
               n, k, conns, spec.name, model_bytes / 1e6, ok, nr, walls, nr ? wsum / nr : 0, idle_rss, rss,
               peak / 1048576.0, peak / (double)model_bytes);
    printf("{\"clients\": %ld, \"per_round\": %ld, \"connections\": %ld, \"model\": \"%s\", \"params\": %zu, "
           "\"model_bytes\": %zu, \"update_bytes\": %zu, \"chunk_fetches\": %ld, \"chunk_puts\": %ld, \"rounds\": %d, \"rounds_ok\": %d, "
           "\"round_wall_s\": [%s], \"round_wall_mean_s\": %.4f, \"run_s\": %.2f, \"coordinator_idle_rss_mib\": %.1f, "
           "\"coordinator_rss_end_mib\": %.1f, \"coordinator_peak_rss_mib\": %.1f, \"coordinator_peak_rss_bytes\": %.0f, "
           "\"peak_over_model\": %.3f, \"failed_clients\": %d}\n",
           n, k, conns, spec.name, spec.n_params, model_bytes, upd_len, n_fetches, n_puts, nr, ok, walls, nr ? wsum / nr : 0,
           wall, idle_rss, rss, peak / 1048576.0, peak, peak / (double)model_bytes, failed + unfinished);
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
