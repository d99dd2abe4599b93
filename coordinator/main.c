/* main.c: hfl-coordinator: options, start-up, and the loop that closes rounds.
 *
 * Start-up picks the backend (--device, kernels/select.h), loads the test
 * set (for evaluation after every round), builds the model and its initial
 * weights from the seed, and starts serving. The main loop ticks the round
 * engine every few milliseconds; NNG's callbacks do all the talking. When
 * the last round is closed it keeps answering pulls with bye until every
 * client has had one (or --linger passes), then exits 0. SIGTERM or SIGINT
 * stops it after writing the state and report, with status 128 + the
 * signal (143, 130); 1 is a failure (bad options, every round failed). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/coord.h"
#include "proto/secagg.h"
#include "data/files.h"
#include "kernels/blas.h"
#include "model/safetensors.h"
#include "plan/planner.h"
#include "kernels/device.h"
#include "kernels/select.h"
#include "util/config.h"
#include "util/util.h"

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested;
static void on_signal(int sig) { stop_requested = sig; }
static void on_hup(int sig) { (void)sig; reload_requested = 1; }

static void usage(FILE *f) {
    fprintf(f,
        "usage: hfl-coordinator [options]\n"
        "Serves federated training rounds to hfl-client processes over mutual TLS.\n\n"
        "  --listen URL          address to serve (default tls+tcp://127.0.0.1:7450; port 0 picks one)\n"
        "  --ca FILE             CA certificate (PEM) that signed every client\n"
        "  --cert FILE           coordinator certificate and key (PEM)\n"
        "  --insecure            allow plain tcp:// without TLS (clients' names are then taken on trust)\n"
        "  --revoked FILE        revocation list, one certificate name per line, re-read on SIGHUP\n"
        "                        (default: revoked.txt beside --ca; written by hfl-pki revoke)\n"
        "  --init-model FILE     start from this model (safetensors, model/safetensors.h: tensors\n"
        "                        layers.<l>.weight/bias in PyTorch's layouts) instead of a seeded init\n"
        "  --save-model FILE     write the global model there (safetensors) after every round\n"
        "  --state-dir DIR       keep the run's state in DIR at every round's end; started again with\n"
        "                        the same DIR, the coordinator continues the run where it stopped\n"
        "  --token-ttl SECONDS   a session token expires this long after its hello; the client then\n"
        "                        proves its identity again (default 3600)\n"
        "  --model NAME|FILE     model to train: mlp, cnn or a JSON spec (default mlp)\n"
        "  --codec NAME          update codec: fp32, fp16, bf16, int8, int4, sign, topk:<fraction> (default int8)\n"
        "  --block N             codec block size (default 256)\n"
        "  --downlink NAME       how weights travel to clients: fp32, fp16, bf16 (default fp32)\n"
        "  --downlink-delta      send the change since the version a client holds, when recent\n"
        "  --rounds N            rounds to run (default 10)\n"
        "  --clients-per-round K clients selected each round (default 2)\n"
        "  --min-quorum Q        updates needed to aggregate at the deadline (default: --quorum-fraction\n"
        "                        of the clients drawn)\n"
        "  --quorum-fraction F   without --min-quorum, a round closed at its deadline is aggregated when\n"
        "                        at least F of the clients it drew have reported (default " COORD_QUORUM_FRACTION_STR ")\n"
        "  --min-clients N       the first round waits until N clients have planned (or left), or for\n"
        "                        --deadline, so the first draw does not depend on arrival order (default K)\n"
        "  --deadline SECONDS    per-round deadline (default 300)\n"
        "  --local-epochs E      local epochs per round (default 1)\n"
        "  --batch B             local batch size (default 32)\n"
        "  --lr LR               local learning rate (default 0.05)\n"
        "  --momentum M          local SGD momentum (default 0)\n"
        "  --weight-decay WD     local weight decay: L2 with sgd, decoupled with adamw (default 0)\n"
        "  --optimizer O         the clients' local optimizer: sgd (with --momentum) or adamw\n"
        "                        (torch.optim.AdamW: fp32 moments the clients plan, eps 1e-8; default sgd)\n"
        "  --betas B1,B2         AdamW's moment decays (default 0.9,0.999)\n"
        "  --prox-mu MU          FedProx (Li et al. 2020): each client's local objective gains\n"
        "                        MU/2 ||w - w_global||^2, holding stragglers and non-IID clients near\n"
        "                        the round's model (default 0: plain local SGD)\n"
        "  --seed S              seed for initial weights and client selection (default 1)\n"
        "  --clip-norm C         clip each update's L2 norm: a fixed C, adaptive[:C0] (the clip follows\n"
        "                        the median update norm from C0, Andrew et al. 2021), or off\n"
        "                        (default adaptive:" COORD_CLIP_DEFAULT_STR ")\n"
        "  --max-client-samples N cap each client's claimed samples at N (default: no cap)\n"
        "  --server-opt S        how the aggregate moves the model: fedavg[:lr], fedavgm[:lr[:beta]],\n"
        "                        fedadam[:lr], fedyogi[:lr] (Reddi et al. 2021), nesterov[:lr[:mu]]\n"
        "                        (DiLoCo's outer step, lr 0.7, mu 0.9; default fedavg)\n"
        "  --strategy S          fedavg (the weighted mean), median, trimmed[:beta], krum[:f] or\n"
        "                        multikrum[:f[:m]]: robust rules over the round's clipped updates,\n"
        "                        unweighted (default fedavg)\n"
        "  --robust-memory SIZE  the most a robust rule may hold decoded (default 2G)\n"
        "  --liveness SECONDS    a client not heard from for this long is not drawn (a waiting client\n"
        "                        asks every 0.2 s; default 10)\n"
        "  --max-sessions N      registry entries, one per identity (default and at most " COORD_MAX_CLIENTS_STR ")\n"
        "  --max-conns-per-addr N connections one address may hold; more are closed at once (default 256,\n"
        "                        0: no limit)\n"
        "  --hello-rate C[:A]    first hellos (each costs a certificate check and a signature) answered\n"
        "                        per second for one connection (C) and one source address (A); more are\n"
        "                        told to say hello again later (default " COORD_HELLO_RATE_STR "; 0: no limit)\n"
        "  --idle-timeout SECONDS close a connection that delivered no whole message for this long (a\n"
        "                        half-sent frame included; default 300)\n"
        "  --handshake-timeout SECONDS close an accepted connection that has sent nothing for this\n"
        "                        long, or not finished its TLS and SP handshake in 6 times it (default 10)\n"
        "  --max-inflight N      requests handled at once; more wait in their connections (default 64)\n"
        "  --threads N           OpenBLAS threads for evaluation (default 1: small GEMMs run slower\n"
        "                        on more threads while clients share the cores)\n"
        "  --session-ttl SECONDS a full registry (" COORD_MAX_CLIENTS_STR " sessions) forgets the session idle\n"
        "                        longest once it has been idle this long (default 600)\n"
        "  --max-share F         no update weighs more than F of its round (default 0.2; 1: no cap)\n"
        "  --over-select F       draw K (1 + F) clients and close the round once K updates arrived, so\n"
        "                        dropouts, stragglers and withholders do not hold it to its deadline\n"
        "                        (default " COORD_OVER_SELECT_STR "; 0 with --async or --virtual-time)\n"
        "  --local-steps H       every client takes H optimizer steps a round, cycling through its\n"
        "                        data, instead of --local-epochs (DiLoCo's inner steps; a step is a\n"
        "                        --batch, an epoch's last one its tail, as in epochs; default 0: epochs)\n"
        "  --lr-schedule S       the clients' learning rate over the run's rounds x H steps: constant\n"
        "                        (default), or cosine[:WARMUP[:MIN]]: WARMUP steps up to --lr, then a\n"
        "                        cosine down to MIN x --lr (default 0 and 0.1); needs --local-steps\n"
        "  --local-work epochs|capacity  fixed --local-epochs for every client (default), or each\n"
        "                        client's steps scaled to its declared speed so a round's clients\n"
        "                        finish together (the median client trains its epochs)\n"
        "  --async C             FedBuff (Nguyen et al. 2022): C clients train at once, each idle client\n"
        "                        drawn as soon as fewer are out; a round closes at K arrivals, updates\n"
        "                        of earlier rounds (up to " COORD_ASYNC_MAX_STALENESS_STR " late) weighed by 1/sqrt(1 + staleness)\n"
        "                        (default 0: synchronous rounds)\n"
        "  --virtual-time        (simulation) hold --deadline in simulated time: an update whose sim_s\n"
        "                        (its task's simulated seconds, from hfl-client --link) exceeds it\n"
        "                        missed the deadline and is left out, however fast the host ran it;\n"
        "                        synchronous rounds only (not with --over-select, --async, --late fold)\n"
        "  --late drop|fold      an update that comes after its round closed: refused (drop, the\n"
        "                        default) or, one round late, added to the open round at half weight\n"
        "  --device D            where to aggregate and evaluate: auto (the GPU when the CUDA module loads and finds\n"
        "                        one, else the CPU), cpu, or cuda (fail unless the GPU can be used); default auto\n"
        "  --data PATH           the evaluation set: a Fashion-MNIST directory's test set (default\n"
        "                        " HFL_FMNIST_DIR "), or a dataset file of the user's: an .npz or a\n"
        "                        safetensors file holding x and y, or a directory of x.npy and y.npy\n"
        "  --log FILE            JSON-lines event log\n"
        "  --report FILE         JSON report, rewritten after every round\n"
        "  --ready-file FILE     write the bound URL here once serving\n"
        "  --linger SECONDS      after the last round, wait this long for clients to get bye (default 10;\n"
        "                        with --metrics the whole time, so the final state can be scraped)\n"
        "  --metrics ADDR        serve Prometheus metrics on http://ADDR/metrics and a JSON summary on\n"
        "                        /status, ADDR being HOST:PORT (port 0: any; the URL is printed)\n"
        "  --secure-agg          secure aggregation (SecAgg+): clients clip and round their updates to fixed\n"
        "                        point themselves and mask them, so the coordinator learns only each\n"
        "                        round's sum (needs --clip-norm; not with robust rules, --async, --late fold)\n"
        "  --client-clip         the same clipping, rounding and packing by the clients, sent in the clear\n"
        "  --fixed-bits F        with the two above: updates are rounded to 2^-F of the clip (its power of\n"
        "                        two); the ring's bits per element follow from F, the clip and the clients\n"
        "                        (default 24)\n"
        "  --dp-noise Z          client-level differential privacy: Gaussian noise of Z x the clip x the\n"
        "                        largest weight on each round's sum (shared among the clients under\n"
        "                        --secure-agg); (epsilon, delta) reported every round\n"
        "  --dp-epsilon E        the privacy budget, with --dp-delta: Z derived for the planned rounds\n"
        "                        (without --dp-noise), and the run stops, with one line, before a round\n"
        "                        would spend more\n"
        "  --dp-delta D          the delta epsilon is held at (and reported at; default 1e-5 for reports)\n"
        "  --quiet               no progress output\n"
        "  --config FILE         read options from FILE, a JSON object keyed by long option name, e.g.\n"
        "                        {\"rounds\": 5, \"insecure\": true}; options on the command line win\n"
        "  --print-config        print the options in effect (defaults included) as JSON and exit\n"
        "  --help                this text\n"
        "Exit status: 0 when the run is done; 143 (130) when SIGTERM (SIGINT) stopped it, its state and\n"
        "report written; 1 on an error or when every round failed; 2 on bad options.\n");
}

/* --print-config: the options in effect, keyed by long option name. */
static void print_options(const coord_config *c, double linger) {
    cJSON *o = cJSON_CreateObject();
    char clip[64] = "off", num[40], betas[64];
    hfl_config_number(c->clip_norm, num, sizeof num);
    if (c->clip_norm > 0) snprintf(clip, sizeof clip, "%s%s", c->clip_adaptive ? "adaptive:" : "", num);
    hfl_config_add_str(o, "listen", c->listen_url);
    hfl_config_add_str(o, "ca", c->tls.ca_file);
    hfl_config_add_str(o, "cert", c->tls.cert_file);
    cJSON_AddBoolToObject(o, "insecure", c->tls.insecure);
    hfl_config_add_str(o, "revoked", c->revoked_path);
    hfl_config_add_str(o, "init-model", c->init_model);
    hfl_config_add_str(o, "save-model", c->save_model);
    hfl_config_add_str(o, "metrics", c->metrics_addr);
    hfl_config_add_str(o, "state-dir", c->state_dir);
    cJSON_AddNumberToObject(o, "token-ttl", c->token_ttl_s);
    hfl_config_add_str(o, "model", c->model);
    hfl_config_add_str(o, "codec", c->codec);
    cJSON_AddNumberToObject(o, "block", c->block);
    hfl_config_add_str(o, "downlink", c->downlink);
    cJSON_AddBoolToObject(o, "downlink-delta", c->downlink_delta);
    cJSON_AddNumberToObject(o, "rounds", c->rounds);
    cJSON_AddNumberToObject(o, "clients-per-round", c->clients_per_round);
    if (c->min_quorum > 0) cJSON_AddNumberToObject(o, "min-quorum", c->min_quorum);
    else cJSON_AddNullToObject(o, "min-quorum");
    cJSON_AddNumberToObject(o, "quorum-fraction", c->quorum_fraction);
    cJSON_AddNumberToObject(o, "min-clients", c->min_clients ? c->min_clients : c->clients_per_round);
    cJSON_AddNumberToObject(o, "deadline", c->deadline_s);
    cJSON_AddNumberToObject(o, "local-epochs", c->local_epochs);
    cJSON_AddNumberToObject(o, "local-steps", c->local_steps);
    char sched[64];
    hfl_lr_schedule_name(&c->lr_schedule, sched, sizeof sched);
    hfl_config_add_str(o, "lr-schedule", sched);
    cJSON_AddNumberToObject(o, "batch", c->batch);
    cJSON_AddNumberToObject(o, "lr", c->lr);
    cJSON_AddNumberToObject(o, "momentum", c->momentum);
    cJSON_AddNumberToObject(o, "weight-decay", c->weight_decay);
    cJSON_AddNumberToObject(o, "prox-mu", c->prox_mu);
    hfl_config_add_str(o, "optimizer", hfl_optimizer_name(c->optimizer));
    char b2[40];
    hfl_config_number(c->beta1, betas, sizeof betas);
    hfl_config_number(c->beta2, b2, sizeof b2);
    snprintf(betas + strlen(betas), sizeof betas - strlen(betas), ",%s", b2);
    hfl_config_add_str(o, "betas", betas);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    hfl_config_add_str(o, "clip-norm", clip);
    cJSON_AddNumberToObject(o, "max-client-samples", (double)c->max_client_samples);
    hfl_config_add_str(o, "server-opt", c->server_opt);
    hfl_config_add_str(o, "strategy", c->strategy);
    cJSON_AddNumberToObject(o, "robust-memory", (double)c->robust_memory);
    cJSON_AddNumberToObject(o, "liveness", c->liveness_s);
    cJSON_AddNumberToObject(o, "max-sessions", c->max_sessions);
    cJSON_AddNumberToObject(o, "max-conns-per-addr", c->max_conns_per_addr);
    char rate[80], ra[40], rb[40];
    hfl_config_number(c->hello_rate_conn, ra, sizeof ra);
    hfl_config_number(c->hello_rate_addr, rb, sizeof rb);
    snprintf(rate, sizeof rate, "%s:%s", ra, rb);
    hfl_config_add_str(o, "hello-rate", rate);
    cJSON_AddNumberToObject(o, "idle-timeout", c->idle_s);
    cJSON_AddNumberToObject(o, "handshake-timeout", c->handshake_s);
    cJSON_AddNumberToObject(o, "max-inflight", c->max_inflight);
    cJSON_AddNumberToObject(o, "threads", c->threads);
    cJSON_AddNumberToObject(o, "session-ttl", c->session_ttl_s);
    cJSON_AddNumberToObject(o, "max-share", c->max_share);
    cJSON_AddBoolToObject(o, "secure-agg", c->secure_agg == SECAGG_MASKED);
    cJSON_AddBoolToObject(o, "client-clip", c->secure_agg == SECAGG_CLEAR);
    cJSON_AddNumberToObject(o, "fixed-bits", c->fixed_bits);
    const char *dp_keys[] = {"dp-noise", "dp-epsilon", "dp-delta"}; /* null: not given */
    const double dp_vals[] = {c->dp_noise, c->dp_epsilon, c->dp_delta};
    for (int i = 0; i < 3; i++)
        if (dp_vals[i] > 0) cJSON_AddNumberToObject(o, dp_keys[i], dp_vals[i]);
        else cJSON_AddNullToObject(o, dp_keys[i]);
    cJSON_AddNumberToObject(o, "over-select", c->over_select);
    hfl_config_add_str(o, "local-work", c->capacity_work ? "capacity" : "epochs");
    cJSON_AddNumberToObject(o, "async", c->async_concurrency);
    hfl_config_add_str(o, "late", c->late_fold ? "fold" : "drop");
    cJSON_AddBoolToObject(o, "virtual-time", c->virtual_time);
    hfl_config_add_str(o, "device", c->device);
    hfl_config_add_str(o, "data", c->data_dir);
    hfl_config_add_str(o, "log", c->log_path);
    hfl_config_add_str(o, "report", c->report_path);
    hfl_config_add_str(o, "ready-file", c->ready_path);
    cJSON_AddNumberToObject(o, "linger", linger);
    cJSON_AddBoolToObject(o, "quiet", c->quiet);
    hfl_config_print(o);
}

/* --hello-rate C[:A]: per connection and per address, each in [0, 1e6]. */
static void parse_hello_rate(const char *s, coord_config *cfg, char *e) {
    char a[64], *colon;
    snprintf(a, sizeof a, "%s", s);
    double conn, addr = cfg->hello_rate_addr;
    if ((colon = strchr(a, ':'))) *colon = 0;
    if (hfl_parse_double(a, 0, 1e6, &conn, e) == 0 && (!colon || hfl_parse_double(colon + 1, 0, 1e6, &addr, e) == 0))
        cfg->hello_rate_conn = conn, cfg->hello_rate_addr = addr;
}

/* --betas B1,B2: each in [0, 1). */
static void parse_betas(const char *s, coord_config *cfg, char *e) {
    char a[64], *comma;
    snprintf(a, sizeof a, "%s", s);
    if (!(comma = strchr(a, ','))) {
        hfl_errf(e, "'%s' is not B1,B2", s);
        return;
    }
    *comma = 0;
    double b1, b2;
    if (hfl_parse_double(a, 0, 0.999999, &b1, e) == 0 && hfl_parse_double(comma + 1, 0, 0.999999, &b2, e) == 0)
        cfg->beta1 = b1, cfg->beta2 = b2;
}

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

static int parse_args(int argc, char **argv, coord_config *cfg, double *linger, char *err) {
    enum { O_LISTEN = 256, O_CA, O_CERT, O_INSECURE, O_MODEL, O_CODEC, O_BLOCK, O_ROUNDS, O_K, O_QUORUM,
           O_DEADLINE, O_EPOCHS, O_BATCH, O_LR, O_MOM, O_WD, O_SEED, O_DATA, O_LOG, O_REPORT, O_READY,
           O_LINGER, O_QUIET, O_HELP, O_DOWNLINK, O_DOWNDELTA, O_DEVICE, O_CLIP, O_MAXSAMPLES, O_MAXSHARE,
           O_SOPT, O_STRATEGY, O_ROBUSTMEM, O_TTL, O_LIVENESS, O_REVOKED, O_TOKENTTL, O_STATEDIR, O_MAXSESS, O_PERADDR, O_IDLE, O_HANDSHAKE, O_INFLIGHT, O_MINCLIENTS, O_THREADS, O_OVERSEL, O_LATE, O_WORK, O_PROX, O_ASYNC, O_INITM, O_SAVEM,
           O_METRICS, O_CONFIG, O_PRINTCFG, O_VIRTUAL, O_OPTIM, O_BETAS, O_QFRAC, O_HELLORATE,
           O_SECAGG, O_CLIENTCLIP, O_FIXEDBITS, O_DPNOISE, O_DPEPS, O_DPDELTA, O_STEPS, O_SCHED }; /* in opts[]'s order */
    static const struct option opts[] = {
        {"listen", 1, 0, O_LISTEN}, {"ca", 1, 0, O_CA}, {"cert", 1, 0, O_CERT},
        {"insecure", 0, 0, O_INSECURE}, {"model", 1, 0, O_MODEL}, {"codec", 1, 0, O_CODEC},
        {"block", 1, 0, O_BLOCK}, {"rounds", 1, 0, O_ROUNDS}, {"clients-per-round", 1, 0, O_K},
        {"min-quorum", 1, 0, O_QUORUM}, {"deadline", 1, 0, O_DEADLINE},
        {"local-epochs", 1, 0, O_EPOCHS}, {"batch", 1, 0, O_BATCH}, {"lr", 1, 0, O_LR},
        {"momentum", 1, 0, O_MOM}, {"weight-decay", 1, 0, O_WD}, {"seed", 1, 0, O_SEED},
        {"data", 1, 0, O_DATA}, {"log", 1, 0, O_LOG}, {"report", 1, 0, O_REPORT},
        {"ready-file", 1, 0, O_READY}, {"linger", 1, 0, O_LINGER}, {"quiet", 0, 0, O_QUIET},
        {"help", 0, 0, O_HELP}, {"downlink", 1, 0, O_DOWNLINK}, {"downlink-delta", 0, 0, O_DOWNDELTA},
        {"device", 1, 0, O_DEVICE}, {"clip-norm", 1, 0, O_CLIP}, {"max-client-samples", 1, 0, O_MAXSAMPLES},
        {"max-share", 1, 0, O_MAXSHARE}, {"server-opt", 1, 0, O_SOPT},
        {"strategy", 1, 0, O_STRATEGY}, {"robust-memory", 1, 0, O_ROBUSTMEM},
        {"session-ttl", 1, 0, O_TTL}, {"liveness", 1, 0, O_LIVENESS}, {"revoked", 1, 0, O_REVOKED},
        {"token-ttl", 1, 0, O_TOKENTTL}, {"state-dir", 1, 0, O_STATEDIR},
        {"max-sessions", 1, 0, O_MAXSESS}, {"max-conns-per-addr", 1, 0, O_PERADDR}, {"idle-timeout", 1, 0, O_IDLE},
        {"handshake-timeout", 1, 0, O_HANDSHAKE},
        {"max-inflight", 1, 0, O_INFLIGHT}, {"min-clients", 1, 0, O_MINCLIENTS},
        {"threads", 1, 0, O_THREADS}, {"over-select", 1, 0, O_OVERSEL},
        {"late", 1, 0, O_LATE}, {"local-work", 1, 0, O_WORK},
        {"prox-mu", 1, 0, O_PROX}, {"async", 1, 0, O_ASYNC},
        {"init-model", 1, 0, O_INITM}, {"save-model", 1, 0, O_SAVEM}, {"metrics", 1, 0, O_METRICS},
        {"config", 1, 0, O_CONFIG}, {"print-config", 0, 0, O_PRINTCFG}, {"virtual-time", 0, 0, O_VIRTUAL},
        {"optimizer", 1, 0, O_OPTIM}, {"betas", 1, 0, O_BETAS}, {"quorum-fraction", 1, 0, O_QFRAC},
        {"hello-rate", 1, 0, O_HELLORATE},
        {"secure-agg", 0, 0, O_SECAGG}, {"client-clip", 0, 0, O_CLIENTCLIP}, {"fixed-bits", 1, 0, O_FIXEDBITS},
        {"dp-noise", 1, 0, O_DPNOISE}, {"dp-epsilon", 1, 0, O_DPEPS}, {"dp-delta", 1, 0, O_DPDELTA},
        {"local-steps", 1, 0, O_STEPS}, {"lr-schedule", 1, 0, O_SCHED},
        {0, 0, 0, 0}};
    long v;
    double d;
    int quorum = -1, print_config = 0;
    if (hfl_config_apply("hfl-coordinator", &argc, &argv, opts, err) != 0) return -1;
    opterr = 0;
    for (;;) {
        int o = getopt_long(argc, argv, ":", opts, NULL);
        if (o == -1) break;
        char e[HFL_ERR_LEN] = "";
        switch (o) {
        case O_LISTEN: snprintf(cfg->listen_url, sizeof cfg->listen_url, "%s", optarg); break;
        case O_CA: cfg->tls.ca_file = optarg; break;
        case O_CERT: cfg->tls.cert_file = optarg; break;
        case O_INSECURE: cfg->tls.insecure = 1; break;
        case O_MODEL: snprintf(cfg->model, sizeof cfg->model, "%s", optarg); break;
        case O_CODEC: snprintf(cfg->codec, sizeof cfg->codec, "%s", optarg); break;
        case O_BLOCK: if (hfl_parse_int(optarg, 1, 65536, &v, e) == 0) cfg->block = (uint32_t)v; break;
        case O_ROUNDS: if (hfl_parse_int(optarg, 1, 1000000, &v, e) == 0) cfg->rounds = (int)v; break;
        case O_K: if (hfl_parse_int(optarg, 1, COORD_MAX_CLIENTS, &v, e) == 0) cfg->clients_per_round = (int)v; break;
        case O_QUORUM: if (hfl_parse_int(optarg, 1, COORD_MAX_CLIENTS, &v, e) == 0) quorum = (int)v; break;
        case O_DEADLINE: if (hfl_parse_double(optarg, 0.1, 1e7, &d, e) == 0) cfg->deadline_s = d; break;
        case O_EPOCHS: if (hfl_parse_int(optarg, 1, 10000, &v, e) == 0) cfg->local_epochs = (int)v; break;
        case O_STEPS: if (hfl_parse_int(optarg, 0, 100000000, &v, e) == 0) cfg->local_steps = (int)v; break;
        case O_SCHED: hfl_lr_schedule_parse(optarg, &cfg->lr_schedule, e); break;
        case O_BATCH: if (hfl_parse_int(optarg, 1, 65536, &v, e) == 0) cfg->batch = (int)v; break;
        case O_LR: if (hfl_parse_double(optarg, 0, 100, &d, e) == 0) cfg->lr = d; break;
        case O_MOM: if (hfl_parse_double(optarg, 0, 0.9999, &d, e) == 0) cfg->momentum = d; break;
        case O_WD: if (hfl_parse_double(optarg, 0, 1, &d, e) == 0) cfg->weight_decay = d; break;
        case O_OPTIM: hfl_optimizer_parse(optarg, &cfg->optimizer, e); break;
        case O_BETAS: parse_betas(optarg, cfg, e); break;
        case O_QFRAC: if (hfl_parse_double(optarg, 0.01, 1, &d, e) == 0) cfg->quorum_fraction = d; break;
        case O_HELLORATE: parse_hello_rate(optarg, cfg, e); break;
        case O_PROX: if (hfl_parse_double(optarg, 0, 100, &d, e) == 0) cfg->prox_mu = d; break;
        case O_SEED: if (hfl_parse_int(optarg, 0, 0x7fffffffL, &v, e) == 0) cfg->seed = (uint64_t)v; break;
        case O_DATA: snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", optarg); break;
        case O_LOG: snprintf(cfg->log_path, sizeof cfg->log_path, "%s", optarg); break;
        case O_REPORT: snprintf(cfg->report_path, sizeof cfg->report_path, "%s", optarg); break;
        case O_READY: snprintf(cfg->ready_path, sizeof cfg->ready_path, "%s", optarg); break;
        case O_LINGER: if (hfl_parse_double(optarg, 0, 3600, &d, e) == 0) *linger = d; break;
        case O_QUIET: cfg->quiet = 1; break;
        case O_DOWNLINK: snprintf(cfg->downlink, sizeof cfg->downlink, "%s", optarg); break;
        case O_DOWNDELTA: cfg->downlink_delta = 1; break;
        case O_VIRTUAL: cfg->virtual_time = 1; break;
        case O_CLIP: coord_parse_clip(optarg, cfg, e); break;
        case O_MAXSAMPLES:
            if (hfl_parse_int(optarg, 0, 100000000, &v, e) == 0) cfg->max_client_samples = v;
            break;
        case O_SOPT: {
            hfl_server_opt probe;
            if (hfl_sopt_parse(optarg, &probe, e) == 0) snprintf(cfg->server_opt, sizeof cfg->server_opt, "%s", optarg);
            break;
        }
        case O_STRATEGY: {
            hfl_rule probe;
            if (hfl_rule_parse(optarg, &probe, e) == 0) snprintf(cfg->strategy, sizeof cfg->strategy, "%s", optarg);
            break;
        }
        case O_ROBUSTMEM: hfl_parse_size(optarg, &cfg->robust_memory, e); break;
        case O_LIVENESS: if (hfl_parse_double(optarg, 0.01, 1e7, &d, e) == 0) cfg->liveness_s = d; break;
        case O_MINCLIENTS: if (hfl_parse_int(optarg, 1, COORD_MAX_CLIENTS, &v, e) == 0) cfg->min_clients = (int)v; break;
        case O_MAXSESS: if (hfl_parse_int(optarg, 1, COORD_MAX_CLIENTS, &v, e) == 0) cfg->max_sessions = (int)v; break;
        case O_PERADDR: if (hfl_parse_int(optarg, 0, 1000000, &v, e) == 0) cfg->max_conns_per_addr = (int)v; break;
        case O_IDLE: if (hfl_parse_double(optarg, 0.1, 1e7, &d, e) == 0) cfg->idle_s = d; break;
        case O_HANDSHAKE: if (hfl_parse_double(optarg, 1, 3600, &d, e) == 0) cfg->handshake_s = d; break;
        case O_INFLIGHT: if (hfl_parse_int(optarg, 1, 1024, &v, e) == 0) cfg->max_inflight = (int)v; break;
        case O_THREADS: if (hfl_parse_int(optarg, 1, 256, &v, e) == 0) cfg->threads = (int)v; break;
        case O_OVERSEL: if (hfl_parse_double(optarg, 0, 4, &d, e) == 0) cfg->over_select = d; break;
        case O_ASYNC: if (hfl_parse_int(optarg, 0, COORD_MAX_CLIENTS, &v, e) == 0) cfg->async_concurrency = (int)v; break;
        case O_WORK:
            if (!strcmp(optarg, "epochs") || !strcmp(optarg, "capacity")) cfg->capacity_work = !strcmp(optarg, "capacity");
            else hfl_errf(e, "'%s': use epochs or capacity", optarg);
            break;
        case O_LATE:
            if (!strcmp(optarg, "fold") || !strcmp(optarg, "drop")) cfg->late_fold = !strcmp(optarg, "fold");
            else hfl_errf(e, "'%s': use drop or fold", optarg);
            break;
        case O_STATEDIR: snprintf(cfg->state_dir, sizeof cfg->state_dir, "%s", optarg); break;
        case O_INITM: snprintf(cfg->init_model, sizeof cfg->init_model, "%s", optarg); break;
        case O_SAVEM: snprintf(cfg->save_model, sizeof cfg->save_model, "%s", optarg); break;
        case O_METRICS: snprintf(cfg->metrics_addr, sizeof cfg->metrics_addr, "%s", optarg); break;
        case O_REVOKED: snprintf(cfg->revoked_path, sizeof cfg->revoked_path, "%s", optarg); break;
        case O_TOKENTTL: if (hfl_parse_double(optarg, 1, 1e7, &d, e) == 0) cfg->token_ttl_s = d; break;
        case O_TTL: if (hfl_parse_double(optarg, 0.01, 1e7, &d, e) == 0) cfg->session_ttl_s = d; break;
        case O_MAXSHARE: if (hfl_parse_double(optarg, 0.01, 1, &d, e) == 0) cfg->max_share = d; break;
        case O_SECAGG: cfg->secure_agg = SECAGG_MASKED; break;
        case O_CLIENTCLIP: if (cfg->secure_agg != SECAGG_MASKED) cfg->secure_agg = SECAGG_CLEAR; break;
        case O_FIXEDBITS: if (hfl_parse_int(optarg, 4, 50, &v, e) == 0) cfg->fixed_bits = (int)v; break;
        case O_DPNOISE: hfl_parse_double(optarg, 0.01, 1e4, &cfg->dp_noise, e); break;
        case O_DPEPS: hfl_parse_double(optarg, 1e-3, 1e3, &cfg->dp_epsilon, e); break;
        case O_DPDELTA: hfl_parse_double(optarg, 1e-15, 0.1, &cfg->dp_delta, e); break;
        case O_DEVICE:
            if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                return hfl_errf(err, "unknown device '%s' (auto, cpu, cuda)", optarg);
            snprintf(cfg->device, sizeof cfg->device, "%s", optarg);
            break;
        case O_CONFIG: break; /* hfl_config_apply read it */
        case O_PRINTCFG: print_config = 1; break;
        case O_HELP: usage(stdout); exit(0);
        case ':': return hfl_errf(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
        default: return hfl_errf(err, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        if (e[0]) return hfl_errf(err, "--%s: %s", opts[o - O_LISTEN].name, e);
    }
    if (optind < argc) return hfl_errf(err, "unexpected argument '%s' (see --help)", argv[optind]);
    cfg->min_quorum = quorum > 0 ? quorum : 0; /* 0: --quorum-fraction of the draw */
    if (cfg->over_select < 0) /* over-select by default, where the run allows it */
        cfg->over_select = cfg->async_concurrency > 0 || cfg->virtual_time ? 0 : COORD_OVER_SELECT_DEFAULT;
    if (!cfg->revoked_path[0] && cfg->tls.ca_file) { /* revoked.txt beside the CA */
        const char *slash = strrchr(cfg->tls.ca_file, '/');
        int dir_len = slash ? (int)(slash - cfg->tls.ca_file) : 1;
        snprintf(cfg->revoked_path, sizeof cfg->revoked_path, "%.*s/revoked.txt", dir_len, slash ? cfg->tls.ca_file : ".");
    }
    if (print_config) print_options(cfg, *linger), exit(0);
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
    if (!cfg->tls.insecure && (!cfg->tls.ca_file || !cfg->tls.cert_file))
        return hfl_errf(err, "TLS needs --ca and --cert (or --insecure with a tcp:// URL)");
    return check_privacy(cfg, err);
}

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
    if (downlink_init(c, c->cfg.downlink, c->cfg.downlink_delta, err) != 0) return -1;
    if (auth_init(c, c->cfg.revoked_path, err) != 0) return -1;
    if (!c->self && !c->cfg.quiet) printf("hfl-coordinator: no certificates: clients' names are taken on trust\n");
    hfl_blas_set_threads(c->cfg.threads); /* before the first GEMM */
    /* Evaluation chunks the test set; a chunk's arena is capped so a long-context
     * LM (every block's T x T probabilities per sample) is not planned at batch 500. */
    if (!(c->eval = hfl_trainer_create_eval(&c->spec, c->be, 500, HFL_EVAL_ARENA_BYTES, err))) return -1;
    c->round_log = cJSON_CreateArray();
    pthread_mutex_init(&c->lock, NULL);
    int resumed;
    pthread_mutex_init(&c->report_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->tick, &ca);
    pthread_condattr_destroy(&ca);
    if (rounds_init(c, err) != 0 || persist_load(c, &resumed, err) != 0) return -1;
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
    snprintf(cfg->listen_url, sizeof cfg->listen_url, "tls+tcp://127.0.0.1:7450");
    snprintf(cfg->model, sizeof cfg->model, "mlp");
    snprintf(cfg->codec, sizeof cfg->codec, "int8");
    snprintf(cfg->downlink, sizeof cfg->downlink, "fp32");
    snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", HFL_FMNIST_DIR);
    snprintf(cfg->device, sizeof cfg->device, "auto");
    cfg->block = 256, cfg->rounds = 10, cfg->clients_per_round = 2, cfg->deadline_s = 300;
    cfg->fixed_bits = 24;
    cfg->local_epochs = 1, cfg->batch = 32, cfg->lr = 0.05, cfg->seed = 1;
    cfg->beta1 = HFL_ADAMW_BETA1, cfg->beta2 = HFL_ADAMW_BETA2;
    snprintf(cfg->server_opt, sizeof cfg->server_opt, "fedavg");
    snprintf(cfg->strategy, sizeof cfg->strategy, "fedavg");
    cfg->robust_memory = (uint64_t)2 << 30;
    cfg->session_ttl_s = 600;
    cfg->liveness_s = 10;
    cfg->token_ttl_s = 3600;
    cfg->max_sessions = COORD_MAX_CLIENTS, cfg->max_conns_per_addr = 256, cfg->idle_s = 300, cfg->max_inflight = 64;
    cfg->hello_rate_conn = COORD_HELLO_RATE_CONN, cfg->hello_rate_addr = COORD_HELLO_RATE_ADDR;
    cfg->quorum_fraction = COORD_QUORUM_FRACTION, cfg->over_select = -1; /* -1: the default, resolved after the options */
    cfg->handshake_s = 10;
    cfg->threads = 1;
    cfg->clip_norm = COORD_CLIP_DEFAULT, cfg->clip_adaptive = 1, cfg->max_share = COORD_MAX_SHARE_DEFAULT;
    cfg->tls.server_name = "localhost";
    double linger = 10;
    char err[HFL_ERR_LEN];
    if (parse_args(argc, argv, cfg, &linger, err) != 0) {
        fprintf(stderr, "hfl-coordinator: %s\n", err);
        return 2;
    }
    c.started = hfl_now();
    char why[HFL_ERR_LEN];
    if (!(c.be = hfl_backend_select(cfg->device, &c.dev, why, err))) {
        fprintf(stderr, "hfl-coordinator: %s\n", err);
        return 1;
    }
    if (!cfg->quiet) {
        if (why[0]) printf("hfl-coordinator: aggregating and evaluating on the CPU: %s\n", why);
        else printf("hfl-coordinator: aggregating and evaluating on %s (%s backend)\n", c.dev.name, c.be->name);
    }
    if (coord_setup(&c, err) != 0) {
        fprintf(stderr, "hfl-coordinator: %s\n", err);
        return 1;
    }
    int port = 0;
    if (eval_start(&c, err) != 0) {
        fprintf(stderr, "hfl-coordinator: %s\n", err);
        return 1;
    }
    coord_server *srv = server_start(&c, &port, err);
    if (!srv) {
        fprintf(stderr, "hfl-coordinator: %s\n", err);
        return 1;
    }
    if (cfg->metrics_addr[0] && metrics_start(&c, cfg->metrics_addr, err) != 0) {
        fprintf(stderr, "hfl-coordinator: %s\n", err);
        server_stop(srv);
        return 1;
    }
    /* before the ready file, so whoever waits on it may signal us at once */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
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
        if (done && ((all_bye && !c.metrics) || hfl_now() - done_at > linger)) break;
        main_tick_wait(&c, 5); /* or sooner: a round complete or published */
    }
    pthread_mutex_unlock(&c.lock);
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
    if (c.version == 0) {
        fprintf(stderr, "hfl-coordinator: all %d rounds failed; the global model never moved\n", cfg->rounds);
        return 1;
    }
    if (!cfg->quiet)
        printf("done: %d rounds (%d aggregated), final test accuracy %.4f, %.1f s\n", cfg->rounds, c.version,
               c.final_acc, hfl_now() - c.started);
    return rc == 0 ? 0 : 1;
}
