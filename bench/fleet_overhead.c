/* fleet_overhead.c: bench-fleet, the coordinator's memory and per-round
 * overhead against the size of the fleet and of the model (docs/benchmarks.md).
 *
 *   bench-fleet --coordinator PATH [--clients N] [--per-round K] [--rounds R]
 *               [--connections C] [--model NAME|FILE] [--chunk-bytes SIZE]
 *               [--deadline S] [--sum-on-disk MODE] [--timeout S] [--json]
 *
 * N light clients (fleet_lite.c) live in this one process, spread over C
 * connections (req sockets; each client is an NNG context with its own aio,
 * driven by its callback): hello, then long-poll pulls (hold_ms), and for each task an
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <nng/nng.h>

#include "bench/bench_coord.h"
#include "bench/fleet_lite.h"
#include "data/files.h"
#include "data/text.h"
#include "model/model.h"
#include "proto/msg.h"
#include "proto/transport.h"
#include "util/util.h"

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
                                         {"sum-on-disk", 1, 0, 's'},
                                         {0, 0, 0, 0}};
    const char *coord_exe = NULL, *model = "mlp", *chunk_arg = NULL, *sum_arg = NULL;
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
        else if (ch == 's') sum_arg = optarg;
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
                          "                   [--deadline S] [--sum-on-disk MODE] [--timeout S] [--json]\n"
                          "N light clients (default 1000) over C connections (16) in this process; K of them\n"
                          "(100) drawn for each of R rounds (5) fetch the task's weights when they come in\n"
                          "chunks and answer at once with a fixed int8 update, put in chunks when it is\n"
                          "longer than the welcome's chunk_bytes. --model (default mlp) and\n"
                          "--chunk-bytes (default the coordinator's) go to the coordinator, --deadline (120)\n"
                          "and --sum-on-disk (auto, on, off; default the coordinator's) too. Prints the coordinator's memory against the fp32 model's and each round's wall\n"
                          "time (its own overhead).\n"),
                   0;
        else if (ch == '?') return fprintf(stderr, "bench-fleet: bad option (see --help)\n"), 2;
    }
    if (!coord_exe) return fprintf(stderr, "bench-fleet: --coordinator PATH is required\n"), 2;
    if (k > n) k = n;
    hfl_model_spec spec;
    if (hfl_model_resolve(model, &spec, err) != 0) return fprintf(stderr, "bench-fleet: --model: %s\n", err), 2;
    size_t model_bytes = spec.n_params * sizeof(float);
    size_t reply_max = model_bytes + 4096; /* the fp32 weights in a task, its largest payload */
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
    if (sum_arg) args[na++] = "--sum-on-disk", args[na++] = sum_arg;
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
    fleet_lite *ls = hfl_calloc((size_t)n, sizeof *ls);
    double t_start = hfl_now();
    fleet_lite_setup(reply_max);
    for (long i = 0; i < n; i++) fleet_lite_start(&ls[i], (int)i, socks[i % conns]);
    for (;;) {
        if (fleet_lite_counts_now().done == n || hfl_now() - t_start > timeout) break;
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
    fleet_lite_close(ls, (int)n);
    fleet_lite_counts counts = fleet_lite_counts_now();
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
    const char *sum = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rep, "coordinator_device"), "sum"));
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
           "\"peak_over_model\": %.3f, \"sum\": \"%s\", \"failed_clients\": %d}\n",
           n, k, conns, spec.name, spec.n_params, model_bytes, counts.update_bytes, counts.fetches, counts.puts, nr, ok, walls, nr ? wsum / nr : 0,
           wall, idle_rss, rss, peak / 1048576.0, peak, peak / (double)model_bytes, sum ? sum : "?", failed + unfinished);
    if (failed || unfinished)
        fprintf(stderr, "bench-fleet: %d clients failed, %d unfinished; first: %s\n", failed, unfinished,
                first ? first : "-");
    rc = ok == rounds && nr == rounds && !failed && !unfinished ? 0 : 1;
    cJSON_Delete(rep);
    fleet_lite_free(ls, (int)n);
    free(ls);
    free(socks);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench-fleet: cannot remove %s\n", dir);
    return rc;
}
