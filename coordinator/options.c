/* options.c: hfl-coordinator's options, as one table (util/options.h) that
 * gives their parsing, defaults, --help, --config and --print-config, and
 * the checks of combinations the round engine cannot run. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "data/files.h"
#include "proto/secagg.h"
#include "util/config.h"
#include "util/options.h"
#include "util/util.h"

#define AT(field) offsetof(coord_config, field), sizeof(((coord_config *)0)->field) /* a row's field */

static int set_optimizer(void *o, const char *s, char *e) {
    return hfl_optimizer_parse(s, &((coord_config *)o)->optimizer, e);
}
static cJSON *show_optimizer(const void *o) {
    return cJSON_CreateString(hfl_optimizer_name(((const coord_config *)o)->optimizer));
}

/* --betas B1,B2: each in [0, 1). */
static int set_betas(void *o, const char *s, char *e) {
    coord_config *cfg = o;
    char a[64], *comma;
    snprintf(a, sizeof a, "%s", s);
    if (!(comma = strchr(a, ','))) return hfl_errf(e, "'%s' is not B1,B2", s);
    *comma = 0;
    double b1, b2;
    if (hfl_parse_double(a, 0, 0.999999, &b1, e) != 0 || hfl_parse_double(comma + 1, 0, 0.999999, &b2, e) != 0)
        return -1;
    cfg->beta1 = b1, cfg->beta2 = b2;
    return 0;
}

/* "A,B" or "A:B" of two numbers, each as a config file would give it. */
static cJSON *show_pair(double a, double b, char sep) {
    char s[90], x[40], y[40];
    hfl_config_number(a, x, sizeof x);
    hfl_config_number(b, y, sizeof y);
    snprintf(s, sizeof s, "%s%c%s", x, sep, y);
    return cJSON_CreateString(s);
}
static cJSON *show_betas(const void *o) {
    return show_pair(((const coord_config *)o)->beta1, ((const coord_config *)o)->beta2, ',');
}

static int set_clip(void *o, const char *s, char *e) {
    coord_parse_clip(s, o, e);
    return e[0] ? -1 : 0;
}
static cJSON *show_clip(const void *o) {
    const coord_config *c = o;
    char clip[64] = "off", num[40];
    hfl_config_number(c->clip_norm, num, sizeof num);
    if (c->clip_norm > 0) snprintf(clip, sizeof clip, "%s%s", c->clip_adaptive ? "adaptive:" : "", num);
    return cJSON_CreateString(clip);
}

/* --server-opt and --strategy are kept as given, once their parser takes them. */
static int set_server_opt(void *o, const char *s, char *e) {
    hfl_server_opt probe;
    if (hfl_sopt_parse(s, &probe, e) != 0) return -1;
    snprintf(((coord_config *)o)->server_opt, sizeof ((coord_config *)o)->server_opt, "%s", s);
    return 0;
}
static int set_strategy(void *o, const char *s, char *e) {
    hfl_rule probe;
    if (hfl_rule_parse(s, &probe, e) != 0) return -1;
    snprintf(((coord_config *)o)->strategy, sizeof ((coord_config *)o)->strategy, "%s", s);
    return 0;
}

/* --hello-rate C[:A]: per connection and per address, each in [0, 1e6]. */
static int set_hello_rate(void *o, const char *s, char *e) {
    coord_config *cfg = o;
    char a[64], *colon;
    snprintf(a, sizeof a, "%s", s);
    double conn, addr = cfg->hello_rate_addr;
    if ((colon = strchr(a, ':'))) *colon = 0;
    if (hfl_parse_double(a, 0, 1e6, &conn, e) != 0 || (colon && hfl_parse_double(colon + 1, 0, 1e6, &addr, e) != 0))
        return -1;
    cfg->hello_rate_conn = conn, cfg->hello_rate_addr = addr;
    return 0;
}
static cJSON *show_hello_rate(const void *o) {
    return show_pair(((const coord_config *)o)->hello_rate_conn, ((const coord_config *)o)->hello_rate_addr, ':');
}

static cJSON *show_min_clients(const void *o) {
    const coord_config *c = o;
    return cJSON_CreateNumber(c->min_clients ? c->min_clients : c->clients_per_round);
}

static int set_lr_schedule(void *o, const char *s, char *e) {
    return hfl_lr_schedule_parse(s, &((coord_config *)o)->lr_schedule, e);
}
static cJSON *show_lr_schedule(const void *o) {
    char sched[64];
    hfl_lr_schedule_name(&((const coord_config *)o)->lr_schedule, sched, sizeof sched);
    return hfl_options_json_str(sched);
}

/* A word of two that sets a flag: --local-work epochs|capacity, --late drop|fold. */
static int set_word(const char *s, const char *off, const char *on, int *flag, char *e) {
    if (strcmp(s, off) != 0 && strcmp(s, on) != 0) return hfl_errf(e, "'%s': use %s or %s", s, off, on);
    *flag = !strcmp(s, on);
    return 0;
}
static int set_local_work(void *o, const char *s, char *e) {
    return set_word(s, "epochs", "capacity", &((coord_config *)o)->capacity_work, e);
}
static cJSON *show_local_work(const void *o) {
    return cJSON_CreateString(((const coord_config *)o)->capacity_work ? "capacity" : "epochs");
}
static int set_late(void *o, const char *s, char *e) { return set_word(s, "drop", "fold", &((coord_config *)o)->late_fold, e); }
static cJSON *show_late(const void *o) { return cJSON_CreateString(((const coord_config *)o)->late_fold ? "fold" : "drop"); }

/* --secure-agg wins over --client-clip, in whichever order they come. */
static int set_secure_agg(void *o, const char *s, char *e) {
    (void)s, (void)e;
    ((coord_config *)o)->secure_agg = SECAGG_MASKED;
    return 0;
}
static int set_client_clip(void *o, const char *s, char *e) {
    (void)s, (void)e;
    coord_config *cfg = o;
    if (cfg->secure_agg != SECAGG_MASKED) cfg->secure_agg = SECAGG_CLEAR;
    return 0;
}
static cJSON *show_secure_agg(const void *o) { return cJSON_CreateBool(((const coord_config *)o)->secure_agg == SECAGG_MASKED); }
static cJSON *show_client_clip(const void *o) { return cJSON_CreateBool(((const coord_config *)o)->secure_agg == SECAGG_CLEAR); }

static const hfl_option coord_rows[] = {
    {"listen", "URL", HFL_OPT_STR, AT(listen_url), 0, 0, "tls+tcp://127.0.0.1:7450",
     .help = "address to serve (default tls+tcp://127.0.0.1:7450; port 0 picks one)"},
    {"ca", "FILE", HFL_OPT_PTR, AT(tls.ca_file), 0, 0, NULL, .help = "CA certificate (PEM) that signed every client"},
    {"cert", "FILE", HFL_OPT_PTR, AT(tls.cert_file), 0, 0, NULL, .help = "coordinator certificate and key (PEM)"},
    {"insecure", NULL, HFL_OPT_FLAG, AT(tls.insecure), 0, 0, NULL,
     .help = "allow plain tcp:// without TLS (clients' names are then taken on trust)"},
    {"revoked", "FILE", HFL_OPT_STR, AT(revoked_path), 0, 0, NULL,
     .help = "revocation list, one certificate name per line, re-read on SIGHUP\n"
     "(default: revoked.txt beside --ca; written by hfl-pki revoke)"},
    {"init-model", "FILE", HFL_OPT_STR, AT(init_model), 0, 0, NULL,
     .help = "start from this model (safetensors, model/safetensors.h: tensors\n"
     "layers.<l>.weight/bias in PyTorch's layouts) instead of a seeded init"},
    {"save-model", "FILE", HFL_OPT_STR, AT(save_model), 0, 0, NULL,
     .help = "write the global model there (safetensors) after every round"},
    {"tier", NULL, HFL_OPT_FLAG, AT(tier), 0, 0, NULL,
     .help = "lead a tier: accept aggregators (hfl-coordinator --upstream; certificates of\n"
     "the aggregator role), draw across their clients and add their partial sums\n"
     "(messages of up to 8 bytes a trainable value; docs/architecture.md)"},
    {"upstream", "URL", HFL_OPT_STR, AT(upstream), 0, 0, NULL,
     .help = "be an aggregator of the root coordinator at URL: serve clients here, sum\n"
     "their updates exactly and send the sum up; the root draws and aggregates\n"
     "(docs/architecture.md; same model and run settings as the root)"},
    {"upstream-name", "NAME", HFL_OPT_STR, AT(upstream_name), 0, 0, NULL,
     .help = "with --upstream and --insecure: this aggregator's name at the root"},
    {"upstream-cert", "FILE", HFL_OPT_STR, AT(upstream_cert), 0, 0, NULL,
     .help = "with --upstream and TLS: this aggregator's certificate and key to the root\n"
     "(PEM of the aggregator role: hfl-pki issue NAME --role aggregator), from --ca's CA"},
    {"upstream-server-name", "CN", HFL_OPT_STR, AT(upstream_server), 0, 0, "localhost",
     .help = "with --upstream and TLS: the CN of the root's certificate (default localhost)"},
    {"state-dir", "DIR", HFL_OPT_STR, AT(state_dir), 0, 0, NULL,
     .help = "keep the run's state in DIR at every round's end; started again with\n"
     "the same DIR, the coordinator continues the run where it stopped"},
    {"token-ttl", "SECONDS", HFL_OPT_DOUBLE, AT(token_ttl_s), 1, 1e7, "3600",
     .help = "a session token expires this long after its hello; the client then\n"
     "proves its identity again (default 3600)"},
    {"model", "NAME|FILE", HFL_OPT_STR, AT(model), 0, 0, "mlp",
     .help = "model to train: mlp, cnn or a JSON spec (default mlp)"},
    {"codec", "NAME", HFL_OPT_STR, AT(codec), 0, 0, "int8",
     .help = "update codec: fp32, fp16, bf16, int8, int4, sign, topk:<fraction> (default int8)"},
    {"block", "N", HFL_OPT_INT, AT(block), 1, 65536, "256", .help = "codec block size (default 256)"},
    {"downlink", "NAME", HFL_OPT_STR, AT(downlink), 0, 0, "fp32",
     .help = "how weights travel to clients: fp32, fp16, bf16 (default fp32)"},
    {"downlink-delta", NULL, HFL_OPT_FLAG, AT(downlink_delta), 0, 0, NULL,
     .help = "send the change since the version a client holds, when recent"},
    {"chunk-bytes", "SIZE", HFL_OPT_SIZE, AT(chunk_bytes), 0, 0, "4M",
     .help = "weights larger than this go to clients in chunks they fetch, all served\n"
     "from one encoded copy, and updates larger than this come up in chunks\n"
     "(4K..1G, or 0: always whole; default 4M)"},
    {"spool-dir", "DIR", HFL_OPT_STR, AT(spool_dir), 0, 0, NULL,
     .help = "where updates coming in chunks are spooled, one file per client sending\n"
     "(unlinked as made; default --state-dir, else $TMPDIR, else /tmp; not a tmpfs)"},
    {"sum-on-disk", "MODE", HFL_OPT_CHOICE, AT(sum_on_disk), 0, 0, "auto",
     .help = "on: keep a round's updates in a file in --spool-dir and sum them a block at\n"
     "a time when the round closes, not in an int64 sum of 8 bytes a value in memory\n"
     "(the same bits), where the CPU aggregates fedavg without --secure-agg; off;\n"
     "or auto: on for sums of 256 MiB or more (default auto)", .choices = "auto|on|off"},
    {"rounds", "N", HFL_OPT_INT, AT(rounds), 1, 1000000, "10", .help = "rounds to run (default 10)"},
    {"clients-per-round", "K", HFL_OPT_INT, AT(clients_per_round), 1, COORD_MAX_CLIENTS, "2",
     .help = "clients selected each round (default 2)"},
    {"min-quorum", "Q", HFL_OPT_INT, AT(min_quorum), 1, COORD_MAX_CLIENTS, NULL,
     .help = "updates needed to aggregate at the deadline (default: --quorum-fraction\n"
     "of the clients drawn)", .zero_null = 1},
    {"quorum-fraction", "F", HFL_OPT_DOUBLE, AT(quorum_fraction), 0.01, 1, COORD_QUORUM_FRACTION_STR,
     .help = "without --min-quorum, a round closed at its deadline is aggregated when\n"
     "at least F of the clients it drew have reported (default " COORD_QUORUM_FRACTION_STR ")"},
    {"min-clients", "N", HFL_OPT_INT, AT(min_clients), 1, COORD_MAX_CLIENTS, NULL,
     .help = "the first round waits until N clients have planned (or left), or for\n"
     "--deadline, so the first draw does not depend on arrival order (default K)", .show = show_min_clients},
    {"deadline", "SECONDS", HFL_OPT_DOUBLE, AT(deadline_s), 0.1, 1e7, "300",
     .help = "per-round deadline (default 300)"},
    {"local-epochs", "E", HFL_OPT_INT, AT(local_epochs), 1, 10000, "1", .help = "local epochs per round (default 1)"},
    {"batch", "B", HFL_OPT_INT, AT(batch), 1, 65536, "32", .help = "local batch size (default 32)"},
    {"lr", "LR", HFL_OPT_DOUBLE, AT(lr), 0, 100, "0.05", .help = "local learning rate (default 0.05)"},
    {"momentum", "M", HFL_OPT_DOUBLE, AT(momentum), 0, 0.9999, NULL, .help = "local SGD momentum (default 0)"},
    {"weight-decay", "WD", HFL_OPT_DOUBLE, AT(weight_decay), 0, 1, NULL,
     .help = "local weight decay: L2 with sgd, decoupled with adamw (default 0)"},
    {"optimizer", "O", HFL_OPT_CUSTOM, AT(optimizer), 0, 0, NULL,
     .help = "the clients' local optimizer: sgd (with --momentum) or adamw\n"
     "(torch.optim.AdamW: fp32 moments the clients plan, eps 1e-8; default sgd)", .set = set_optimizer, .show = show_optimizer},
    {"betas", "B1,B2", HFL_OPT_CUSTOM, AT(beta1), 0, 0, "0.9,0.999",
     .help = "AdamW's moment decays (default 0.9,0.999)", .set = set_betas, .show = show_betas},
    {"prox-mu", "MU", HFL_OPT_DOUBLE, AT(prox_mu), 0, 100, NULL,
     .help = "FedProx (Li et al. 2020): each client's local objective gains\n"
     "MU/2 ||w - w_global||^2, holding stragglers and non-IID clients near\n"
     "the round's model (default 0: plain local SGD)"},
    {"keep-local-optimizer", NULL, HFL_OPT_FLAG, AT(keep_local_optimizer), 0, 0, NULL,
     .help = "clients keep their local optimizer's state (momentum, or AdamW's moments\n"
     "and step count) from one round they train to the next, as DiLoCo's workers\n"
     "do (Douillard et al. 2023), instead of starting it from zero each round"},
    {"seed", "S", HFL_OPT_INT, AT(seed), 0, 0x7fffffff, "1",
     .help = "seed for initial weights and client selection (default 1)"},
    {"clip-norm", "C", HFL_OPT_CUSTOM, AT(clip_norm), 0, 0, "adaptive:" COORD_CLIP_DEFAULT_STR,
     .help = "clip each update's L2 norm: a fixed C, adaptive[:C0] (the clip follows\n"
     "the median update norm from C0, Andrew et al. 2021), or off\n"
     "(default adaptive:" COORD_CLIP_DEFAULT_STR ")", .set = set_clip, .show = show_clip},
    {"max-client-samples", "N", HFL_OPT_INT, AT(max_client_samples), 0, 100000000, NULL,
     .help = "cap each client's claimed samples at N (default: no cap)"},
    {"server-opt", "S", HFL_OPT_STR, AT(server_opt), 0, 0, "fedavg",
     .help = "how the aggregate moves the model: fedavg[:lr], fedavgm[:lr[:beta]],\n"
     "fedadam[:lr], fedyogi[:lr] (Reddi et al. 2021), nesterov[:lr[:mu]]\n"
     "(DiLoCo's outer step, lr 0.7, mu 0.9; default fedavg)", .set = set_server_opt},
    {"strategy", "S", HFL_OPT_STR, AT(strategy), 0, 0, "fedavg",
     .help = "fedavg (the weighted mean), median, trimmed[:beta], krum[:f] or\n"
     "multikrum[:f[:m]]: robust rules over the round's clipped updates,\n"
     "unweighted (default fedavg)", .set = set_strategy},
    {"robust-memory", "SIZE", HFL_OPT_SIZE, AT(robust_memory), 0, 0, "2G",
     .help = "the most a robust rule may hold decoded (default 2G)"},
    {"liveness", "SECONDS", HFL_OPT_DOUBLE, AT(liveness_s), 0.01, 1e7, "10",
     .help = "a client not heard from for this long is not drawn (a waiting client\n"
     "asks every 0.2 s; default 10)"},
    {"max-sessions", "N", HFL_OPT_INT, AT(max_sessions), 1, COORD_MAX_CLIENTS, COORD_MAX_CLIENTS_STR,
     .help = "registry entries, one per identity (default and at most " COORD_MAX_CLIENTS_STR ")"},
    {"max-conns-per-addr", "N", HFL_OPT_INT, AT(max_conns_per_addr), 0, 1000000, "256",
     .help = "connections one address may hold; more are closed at once (default 256,\n"
     "0: no limit)"},
    {"hello-rate", "C[:A]", HFL_OPT_CUSTOM, AT(hello_rate_conn), 0, 0, COORD_HELLO_RATE_STR,
     .help = "first hellos (each costs a certificate check and a signature) answered\n"
     "per second for one connection (C) and one source address (A); more are\n"
     "told to say hello again later (default " COORD_HELLO_RATE_STR "; 0: no limit)", .set = set_hello_rate, .show = show_hello_rate},
    {"idle-timeout", "SECONDS", HFL_OPT_DOUBLE, AT(idle_s), 0.1, 1e7, "300",
     .help = "close a connection that delivered no whole message for this long (a\n"
     "half-sent frame included; default 300)"},
    {"handshake-timeout", "SECONDS", HFL_OPT_DOUBLE, AT(handshake_s), 1, 3600, "10",
     .help = "close an accepted connection that has sent nothing for this\n"
     "long, or not finished its TLS and SP handshake in 6 times it (default 10)"},
    {"max-inflight", "N", HFL_OPT_INT, AT(max_inflight), 1, 1024, "64",
     .help = "requests handled at once; more wait in their connections (default 64)"},
    {"threads", "N", HFL_OPT_INT, AT(threads), 1, 256, "1",
     .help = "OpenBLAS threads for evaluation (default 1: small GEMMs run slower\n"
     "on more threads while clients share the cores)"},
    {"session-ttl", "SECONDS", HFL_OPT_DOUBLE, AT(session_ttl_s), 0.01, 1e7, "600",
     .help = "a full registry (" COORD_MAX_CLIENTS_STR " sessions) forgets the session idle\n"
     "longest once it has been idle this long (default 600)"},
    {"max-share", "F", HFL_OPT_DOUBLE, AT(max_share), 0.01, 1, COORD_MAX_SHARE_STR,
     .help = "no update weighs more than F of its round (default 0.2; 1: no cap)"},
    {"over-select", "F", HFL_OPT_DOUBLE, AT(over_select), 0, 4, NULL,
     .help = "draw K (1 + F) clients and close the round once K updates arrived, so\n"
     "dropouts, stragglers and withholders do not hold it to its deadline\n"
     "(default " COORD_OVER_SELECT_STR "; 0 with --async, --virtual-time, --tier or --upstream)"},
    {"local-steps", "H", HFL_OPT_INT, AT(local_steps), 0, 100000000, NULL,
     .help = "every client takes H optimizer steps a round, cycling through its\n"
     "data, instead of --local-epochs (DiLoCo's inner steps; a step is a\n"
     "--batch, an epoch's last one its tail, as in epochs; default 0: epochs)"},
    {"lr-schedule", "S", HFL_OPT_CUSTOM, AT(lr_schedule), 0, 0, NULL,
     .help = "the clients' learning rate over the run's rounds x H steps: constant\n"
     "(default), or cosine[:WARMUP[:MIN]]: WARMUP steps up to --lr, then a\n"
     "cosine down to MIN x --lr (default 0 and 0.1); needs --local-steps", .set = set_lr_schedule, .show = show_lr_schedule},
    {"local-work", "epochs|capacity", HFL_OPT_CUSTOM, AT(capacity_work), 0, 0, NULL,
     .help = "fixed --local-epochs for every client (default), or each\n"
     "client's steps scaled to its declared speed so a round's clients\n"
     "finish together (the median client trains its epochs)", .set = set_local_work, .show = show_local_work},
    {"async", "C", HFL_OPT_INT, AT(async_concurrency), 0, COORD_MAX_CLIENTS, NULL,
     .help = "FedBuff (Nguyen et al. 2022): C clients train at once, each idle client\n"
     "drawn as soon as fewer are out; a round closes at K arrivals, updates\n"
     "of earlier rounds (up to " COORD_ASYNC_MAX_STALENESS_STR " late) weighed by 1/sqrt(1 + staleness)\n"
     "(default 0: synchronous rounds)"},
    {"virtual-time", NULL, HFL_OPT_FLAG, AT(virtual_time), 0, 0, NULL,
     .help = "(simulation) hold --deadline in simulated time: an update whose sim_s\n"
     "(its task's simulated seconds, from hfl-client --link) exceeds it\n"
     "missed the deadline and is left out, however fast the host ran it;\n"
     "synchronous rounds only (not with --over-select, --async, --late fold)"},
    {"late", "drop|fold", HFL_OPT_CUSTOM, AT(late_fold), 0, 0, NULL,
     .help = "an update that comes after its round closed: refused (drop, the\n"
     "default) or, one round late, added to the open round at half weight", .set = set_late, .show = show_late},
    {"device", "D", HFL_OPT_CHOICE, AT(device), 0, 0, "auto",
     .help = "where to aggregate and evaluate: auto (the GPU when the CUDA module loads and finds\n"
     "one, else the CPU), cpu, or cuda (fail unless the GPU can be used); default auto", .choices = "auto|cpu|cuda"},
    {"data", "PATH", HFL_OPT_STR, AT(data_dir), 0, 0, HFL_FMNIST_DIR,
     .help = "the evaluation set: a Fashion-MNIST directory's test set (default\n"
     "" HFL_FMNIST_DIR "), or a dataset file of the user's: an .npz or a\n"
     "safetensors file holding x and y, or a directory of x.npy and y.npy"},
    {"log", "FILE", HFL_OPT_STR, AT(log_path), 0, 0, NULL, .help = "JSON-lines event log"},
    {"report", "FILE", HFL_OPT_STR, AT(report_path), 0, 0, NULL, .help = "JSON report, rewritten after every round"},
    {"ready-file", "FILE", HFL_OPT_STR, AT(ready_path), 0, 0, NULL, .help = "write the bound URL here once serving"},
    {"linger", "SECONDS", HFL_OPT_DOUBLE, AT(linger_s), 0, 3600, "10",
     .help = "after the last round, wait this long for clients to get bye (default 10;\n"
     "with --metrics the whole time, so the final state can be scraped)"},
    {"metrics", "ADDR", HFL_OPT_STR, AT(metrics_addr), 0, 0, NULL,
     .help = "serve Prometheus metrics on http://ADDR/metrics and a JSON summary on\n"
     "/status, ADDR being HOST:PORT (port 0: any; the URL is printed)"},
    {"secure-agg", NULL, HFL_OPT_CUSTOM, AT(secure_agg), 0, 0, NULL,
     .help = "secure aggregation (SecAgg+): clients clip and round their updates to fixed\n"
     "point themselves and mask them, so the coordinator learns only each\n"
     "round's sum (needs --clip-norm; not with robust rules, --async, --late fold)", .set = set_secure_agg, .show = show_secure_agg},
    {"client-clip", NULL, HFL_OPT_CUSTOM, AT(secure_agg), 0, 0, NULL,
     .help = "the same clipping, rounding and packing by the clients, sent in the clear", .set = set_client_clip, .show = show_client_clip},
    {"fixed-bits", "F", HFL_OPT_INT, AT(fixed_bits), 4, 50, "24",
     .help = "with the two above: updates are rounded to 2^-F of the clip (its power of\n"
     "two); the ring's bits per element follow from F, the clip and the clients\n"
     "(default 24)"},
    {"dp-noise", "Z", HFL_OPT_DOUBLE, AT(dp_noise), 0.01, 1e4, NULL,
     .help = "client-level differential privacy: Gaussian noise of Z x the clip x the\n"
     "largest weight on each round's sum (shared among the clients under\n"
     "--secure-agg); (epsilon, delta) reported every round", .zero_null = 1},
    {"dp-epsilon", "E", HFL_OPT_DOUBLE, AT(dp_epsilon), 1e-3, 1e3, NULL,
     .help = "the privacy budget, with --dp-delta: Z derived for the planned rounds\n"
     "(without --dp-noise), and the run stops, with one line, before a round\n"
     "would spend more", .zero_null = 1},
    {"dp-delta", "D", HFL_OPT_DOUBLE, AT(dp_delta), 1e-15, 0.1, NULL,
     .help = "the delta epsilon is held at (and reported at; default 1e-5 for reports)", .zero_null = 1},
    {"quiet", NULL, HFL_OPT_FLAG, AT(quiet), 0, 0, NULL, .help = "no progress output"},
    {"config", "FILE", HFL_OPT_CONFIG, 0, 0, 0, 0, NULL,
     .help = "read options from FILE, a JSON object keyed by long option name, e.g.\n"
     "{\"rounds\": 5, \"insecure\": true}; options on the command line win"},
    {"print-config", NULL, HFL_OPT_PRINT, 0, 0, 0, 0, NULL,
     .help = "print the options in effect (defaults included) as JSON and exit"},
    {"help", NULL, HFL_OPT_HELP, 0, 0, 0, 0, NULL, .help = "this text"},

    {0}};

static const hfl_options coord_options = {
    "hfl-coordinator",
    "usage: hfl-coordinator [options]\n"
    "Serves federated training rounds to hfl-client processes over mutual TLS.\n\n",
    "Exit status: 0 when the run is done; 143 (130) when SIGTERM (SIGINT) stopped it, its state and\n"
    "report written; 1 on an error or when every round failed; 2 on bad options.\n",
    24, coord_rows};

/* Combinations secure aggregation and DP cannot run, refused at start (secagg.h, dp.h). */
static int check_privacy(const coord_config *cfg, char *err) {
    const char *opt = cfg->secure_agg == SECAGG_MASKED ? "--secure-agg" : "--client-clip";
    if (cfg->secure_agg) {
        if (strcmp(cfg->strategy, "fedavg") != 0)
            return hfl_errf(err, "%s: the coordinator sees only the round's sum, so robust rules (--strategy %s), "
                            "which need every update, cannot run", opt, cfg->strategy);
        if (cfg->clip_norm <= 0)
            return hfl_errf(err, "%s: clients clip their own updates, and the ring is sized from the clip: set "
                            "--clip-norm (server-side clipping cannot see the updates)", opt);
        if (cfg->async_concurrency > 0 || cfg->late_fold)
            return hfl_errf(err, "%s: a round's masks cancel only within the round: not with --async or --late fold",
                            opt);
    }
    if ((cfg->dp_epsilon > 0) != (cfg->dp_delta > 0))
        return hfl_errf(err, "--dp-epsilon and --dp-delta go together");
    if ((cfg->dp_noise > 0 || cfg->dp_epsilon > 0) && cfg->clip_norm <= 0)
        return hfl_errf(err, "differential privacy calibrates its noise to the clip: set --clip-norm");
    if ((cfg->dp_noise > 0 || cfg->dp_epsilon > 0) && strcmp(cfg->strategy, "fedavg") != 0)
        return hfl_errf(err, "differential privacy noises the weighted sum: not with --strategy %s", cfg->strategy);
    if ((cfg->dp_noise > 0 || cfg->dp_epsilon > 0) && (cfg->async_concurrency > 0 || cfg->late_fold))
        return hfl_errf(err, "differential privacy calibrates each round's noise to its own draw: not with --async or "
                        "--late fold");
    return 0;
}

int coord_options_parse(int argc, char **argv, coord_config *cfg, char *err) {
    int first, print_config;
    cfg->over_select = -1; /* not given: resolved below, once --async and --virtual-time are known */
    cfg->tls.server_name = "localhost";
    if (hfl_options_parse(&coord_options, &argc, &argv, cfg, &first, &print_config, err) != 0) return -1;
    if (first < argc) return hfl_errf(err, "unexpected argument '%s' (see --help)", argv[first]);
    if (cfg->over_select < 0) /* over-select by default, where the run allows it (not in a tier) */
        cfg->over_select = cfg->async_concurrency > 0 || cfg->virtual_time || cfg->upstream[0] || cfg->tier
                               ? 0 : COORD_OVER_SELECT_DEFAULT;
    if (!cfg->revoked_path[0] && cfg->tls.ca_file) { /* revoked.txt beside the CA */
        const char *slash = strrchr(cfg->tls.ca_file, '/');
        int dir_len = slash ? (int)(slash - cfg->tls.ca_file) : 1;
        snprintf(cfg->revoked_path, sizeof cfg->revoked_path, "%.*s/revoked.txt", dir_len, slash ? cfg->tls.ca_file : ".");
    }
    if (print_config) hfl_options_print(&coord_options, cfg), exit(0);
    if (cfg->min_quorum > 0 && cfg->min_quorum > cfg->clients_per_round)
        return hfl_errf(err, "--min-quorum %d exceeds --clients-per-round %d", cfg->min_quorum, cfg->clients_per_round);
    if (cfg->local_steps > 0 && cfg->capacity_work)
        return hfl_errf(err, "--local-steps fixes every client's steps: not with --local-work capacity");
    cfg->lr_schedule.total = (int64_t)cfg->rounds * cfg->local_steps;
    if (cfg->lr_schedule.cosine && cfg->local_steps == 0)
        return hfl_errf(err, "--lr-schedule runs over the run's steps: it needs --local-steps");
    if (cfg->lr_schedule.cosine && cfg->lr_schedule.warmup >= cfg->lr_schedule.total)
        return hfl_errf(err, "--lr-schedule's warmup of %lld steps is not under the run's %lld (--rounds x --local-steps)",
                        (long long)cfg->lr_schedule.warmup, (long long)cfg->lr_schedule.total);
    if (cfg->optimizer == HFL_OPTIM_ADAMW && cfg->momentum != 0)
        return hfl_errf(err, "--momentum is SGD's: AdamW keeps its own moments (--betas)");
    if (cfg->async_concurrency > 0 && cfg->over_select > 0)
        return hfl_errf(err, "--async and --over-select do not mix: --async keeps C clients busy itself");
    if (cfg->virtual_time && (cfg->async_concurrency > 0 || cfg->over_select > 0 || cfg->late_fold))
        return hfl_errf(err, "--virtual-time orders synchronous deadline rounds only: not with --async, "
                             "--over-select or --late fold");
    if (cfg->async_concurrency > 0 && strcmp(cfg->strategy, "fedavg") != 0)
        return hfl_errf(err, "--async needs --strategy fedavg: robust rules hold one row per drawn client");
    if (cfg->chunk_bytes && (cfg->chunk_bytes < 4096 || cfg->chunk_bytes > (1u << 30)))
        return hfl_errf(err, "--chunk-bytes: %llu is outside 4K..1G (or 0: whole)", (unsigned long long)cfg->chunk_bytes);
    if (!cfg->tls.insecure && (!cfg->tls.ca_file || !cfg->tls.cert_file))
        return hfl_errf(err, "TLS needs --ca and --cert (or --insecure with a tcp:// URL)");
    if (cfg->tier && cfg->upstream[0])
        return hfl_errf(err, "--tier and --upstream: an aggregator leads no tier of its own");
    if (cfg->tier && tier_unsupported(cfg))
        return hfl_errf(err, "--tier: a tier's root cannot run %s", tier_unsupported(cfg));
    if (cfg->upstream[0] && tier_unsupported(cfg))
        return hfl_errf(err, "--upstream: an aggregator cannot run %s", tier_unsupported(cfg));
    if (cfg->upstream[0] && !cfg->tls.insecure && !cfg->upstream_cert[0])
        return hfl_errf(err, "--upstream with TLS needs --upstream-cert, a certificate of the aggregator role");
    if (cfg->upstream[0] && cfg->tls.insecure && !cfg->upstream_name[0])
        return hfl_errf(err, "--upstream with --insecure needs --upstream-name, its name at the root");
    return check_privacy(cfg, err);
}
