/* main.c: hfl-coordinator: start-up, and the loop that closes rounds.
 *
 * Start-up picks the backend (--device, kernels/select.h), loads the test
 * set (for evaluation after every round), builds the model and its initial
 * weights from the seed, and starts serving. The main loop ticks the round
 * engine every few milliseconds; NNG's callbacks do all the talking. When
 * the last round is closed it keeps answering pulls with bye until every
 * client has had one (or --linger passes), then exits 0. SIGTERM or SIGINT
 * stops it after writing the state and report, with status 128 + the
 * signal (143, 130); 1 is a failure (bad options, every round failed). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "coordinator/coord.h"
#include "data/files.h"
#include "kernels/blas.h"
#include "model/safetensors.h"
#include "plan/planner.h"
#include "kernels/device.h"
#include "kernels/select.h"
#include "util/util.h"

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested;
static void on_signal(int sig) { stop_requested = sig; }
static void on_hup(int sig) { (void)sig; reload_requested = 1; }

/* The URL clients should dial: the listen URL with the bound port. */
static void ready_url(const char *listen, int port, char *out, size_t n) {
    const char *colon = strrchr(listen, ':');
    int host_len = colon ? (int)(colon - listen) : (int)strlen(listen);
    snprintf(out, n, "%.*s:%d", host_len, listen, port);
}

/* Waits on c->tick (with c->lock held) for at most ms milliseconds. */
static void main_tick_wait(coord *c, int ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)ms * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&c->tick, &c->lock, &until);
}

static int coord_setup(coord *c, char *err) {
    if (hfl_model_resolve(c->cfg.model, &c->spec, err) != 0) return -1;
    if (!(c->spec_json = hfl_model_spec_to_json(&c->spec, err))) return -1;
    if (!(c->codec = hfl_codec_find(c->cfg.codec, err))) return -1;
    if (hfl_codec_check(c->codec, c->spec.n_trainable, c->cfg.block, err) != 0) return -1;
    if ((hfl_data_is_file(c->cfg.data_dir) ? hfl_data_load(c->cfg.data_dir, &c->test, err)
                                           : hfl_fmnist_load(c->cfg.data_dir, 0, &c->test, err)) != 0)
        return -1;
    if (c->test.dim != c->spec.in_dim)
        return hfl_errf(err, "test set has %d features, model %s expects %d", c->test.dim, c->spec.name, c->spec.in_dim);
    if (c->spec.label_rows != hfl_dataset_label_rows(&c->test))
        return hfl_errf(err, "model %s takes %d label(s) per sample, the test set has %d (a language "
                        "model needs hfl-data text's windows)", c->spec.name, c->spec.label_rows,
                        hfl_dataset_label_rows(&c->test));
    if (hfl_model_check_tokens(&c->spec, c->test.x, (size_t)c->test.n * c->test.dim, c->test.pixels,
                               err) != 0)
        return -1;
    if (c->test.n_classes > c->spec.n_classes)
        return hfl_errf(err, "test set has labels up to %d, model %s tells %d classes apart", c->test.n_classes - 1,
                        c->spec.name, c->spec.n_classes);
    c->global = hfl_malloc(c->spec.n_params * sizeof(float));
    hfl_model_init_params(&c->spec, c->global, c->cfg.seed);
    if (c->cfg.init_model[0] && hfl_safetensors_load(c->cfg.init_model, &c->spec, c->global, err) != 0) return -1;
    if (downlink_init(c, c->cfg.downlink, c->cfg.downlink_delta, c->cfg.chunk_bytes, err) != 0) return -1;
    if (auth_init(c, c->cfg.revoked_path, err) != 0) return -1;
    if (!c->self && !c->cfg.quiet) printf("hfl-coordinator: no certificates: clients' names are taken on trust\n");
    hfl_blas_set_threads(c->cfg.threads); /* before the first GEMM */
    /* Evaluation chunks the test set; a chunk's arena is capped so a long-context
     * LM (every block's T x T probabilities per sample) is not planned at batch 500. */
    if (!(c->eval = hfl_trainer_create_eval(&c->spec, c->be, 500, HFL_EVAL_ARENA_BYTES, err))) return -1;
    pthread_mutex_init(&c->lock, NULL);
    int resumed;
    pthread_mutex_init(&c->report_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->tick, &ca);
    pthread_condattr_destroy(&ca);
    /* the sum's file goes in the spool directory, which may be the state
     * directory persist_load makes */
    if (rounds_init(c, err) != 0 || persist_load(c, &resumed, err) != 0 || sum_place(c, err) != 0) return -1;
    if (c->cfg.chunk_bytes && spool_check_dir(c, err) != 0) return -1; /* chunked updates are spooled there */
    /* a continued run appends to its log */
    if (c->cfg.log_path[0] && !(c->log = fopen(c->cfg.log_path, resumed ? "a" : "w")))
        return hfl_errf(err, "cannot write log %s", c->cfg.log_path);
    eval_fill_pending(c);
    if (resumed && !c->cfg.quiet)
        printf("hfl-coordinator: continuing the run in %s after round %d (model version %d)\n", c->cfg.state_dir,
               c->r.round, c->version);
    return 0;
}

int main(int argc, char **argv) {
    hfl_blas_core_fix(argv); /* before anything else: it may execute this program again */
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress reaches logs and pipes as it happens */
    static coord c; /* large: the client table */
    coord_config *cfg = &c.cfg;
    char err[HFL_ERR_LEN];
    if (coord_options_parse(argc, argv, cfg, err) != 0) return hfl_fail("hfl-coordinator", err, 2);
    c.started = hfl_now();
    char why[HFL_ERR_LEN];
    if (!(c.be = hfl_backend_select(cfg->device, &c.dev, why, err))) return hfl_fail("hfl-coordinator", err, 1);
    if (!cfg->quiet) {
        if (why[0]) printf("hfl-coordinator: aggregating and evaluating on the CPU: %s\n", why);
        else printf("hfl-coordinator: aggregating and evaluating on %s (%s backend)\n", c.dev.name, c.be->name);
    }
    if (coord_setup(&c, err) != 0) return hfl_fail("hfl-coordinator", err, 1);
    int port = 0;
    if (eval_start(&c, err) != 0) return hfl_fail("hfl-coordinator", err, 1);
    coord_server *srv = server_start(&c, &port, err);
    if (!srv) return hfl_fail("hfl-coordinator", err, 1);
    if (cfg->metrics_addr[0] && metrics_start(&c, cfg->metrics_addr, err) != 0) {
        fprintf(stderr, "hfl-coordinator: %s\n", err);
        server_stop(srv);
        return 1;
    }
    /* before the ready file, so whoever waits on it may signal us at once */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGXFSZ, SIG_IGN); /* a spool or sum file past `ulimit -f`: EFBIG and one line, not death */
    signal(SIGHUP, on_hup);
    char url[300];
    ready_url(cfg->listen_url, port, url, sizeof url);
    if (!cfg->quiet)
        printf("serving %s on %s: %d rounds, %d clients per round, codec %s, %zu params\n", c.spec.name, url,
               cfg->rounds, cfg->clients_per_round, c.codec->name, c.spec.n_params);
    fflush(stdout);
    if (cfg->ready_path[0]) {
        char line[320];
        int n = snprintf(line, sizeof line, "%s\n", url);
        if (hfl_write_file_atomic(cfg->ready_path, line, (size_t)n, err) != 0) {
            fprintf(stderr, "hfl-coordinator: %s\n", err);
            server_stop(srv);
            return 1;
        }
    }
    coord_upstream *up = NULL; /* --upstream: this coordinator is an aggregator (upstream.c) */
    if (cfg->upstream[0] && !(up = upstream_start(&c, err))) {
        fprintf(stderr, "hfl-coordinator: %s\n", err);
        server_stop(srv);
        return 1;
    }
    double done_at = 0, reaped_at = 0;
    pthread_mutex_lock(&c.lock);
    while (!stop_requested) {
        if (reload_requested) {
            reload_requested = 0;
            auth_reload(&c);
        }
        rounds_tick(&c);
        if (!c.r.open) rounds_tick(&c); /* a round that just closed: the next opens in the same tick */
        server_wake(srv);
        if (hfl_now() - reaped_at > 0.5) { /* it scans our descriptors: not under the lock */
            reaped_at = hfl_now();
            pthread_mutex_unlock(&c.lock);
            server_reap(srv);
            pthread_mutex_lock(&c.lock);
        }
        int done = c.done, all_bye = c.byes_sent >= c.n_clients;
        if (done && !done_at) done_at = hfl_now();
        if (done && ((all_bye && !c.metrics) || hfl_now() - done_at > cfg->linger_s)) break;
        main_tick_wait(&c, 5); /* or sooner: a round complete or published */
    }
    pthread_mutex_unlock(&c.lock);
    upstream_stop(up);
    hfl_sleep_ms(100); /* let the last bye replies leave before the sockets close */
    metrics_stop(&c);
    server_stop(srv);
    eval_stop(&c); /* an evaluation in hand is finished and published */
    int rc = report_write(&c, err);
    if (rc != 0) fprintf(stderr, "hfl-coordinator: %s\n", err);
    if (!c.done) { /* 128 + the signal, as a shell reports it; the systemd unit counts 143 a clean stop */
        int sig = stop_requested ? (int)stop_requested : SIGTERM;
        if (cfg->state_dir[0])
            fprintf(stderr, "hfl-coordinator: stopped by %s after %d of %d rounds; started again, it continues from %s\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM", c.r.round, cfg->rounds, cfg->state_dir);
        else
            fprintf(stderr, "hfl-coordinator: stopped by %s after %d of %d rounds (no --state-dir: the run cannot continue)\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM", c.r.round, cfg->rounds);
        return rc != 0 ? 1 : 128 + sig; /* a report that could not be written is a failure */
    }
    if (cfg->upstream[0] && c.stop_reason[0]) return 1; /* the root refused us, said in one line */
    if (c.version == 0) {
        fprintf(stderr, "hfl-coordinator: all %d rounds failed; the global model never moved\n", cfg->rounds);
        return 1;
    }
    if (!cfg->quiet)
        printf("done: %d rounds (%d aggregated), final test accuracy %.4f, %.1f s\n", cfg->rounds, c.version,
               c.final_acc, hfl_now() - c.started);
    return rc == 0 ? 0 : 1;
}
