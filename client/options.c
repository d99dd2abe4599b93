/* options.c: hfl-client's options, as one table (util/options.h) that gives
 * their parsing, defaults, --help, --config and --print-config, and the
 * combinations refused at start. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "data/files.h"
#include "util/config.h"
#include "util/options.h"
#include "util/util.h"

#define AT(field) offsetof(client_options, field), sizeof(((client_options *)0)->field) /* a row's field */

static int set_name(void *o, const char *s, char *e) {
    (void)e;
    client_options *c = o;
    snprintf(c->name, sizeof c->name, "%s", s);
    c->name_given = 1;
    return 0;
}
static cJSON *show_name(const void *o) {
    const client_options *c = o;
    char name[64];
    snprintf(name, sizeof name, "%s", c->name);
    if (!name[0]) snprintf(name, sizeof name, "client-%d", c->index);
    return cJSON_CreateString(name);
}

/* --link UP:DOWN:MS, kept in bytes/s and seconds. */
static int set_link(void *o, const char *s, char *e) {
    client_options *c = o;
    double up, down, ms;
    char tail;
    if (sscanf(s, "%lf:%lf:%lf%c", &up, &down, &ms, &tail) != 3 || !(up >= 1e-3 && up <= 1e6) ||
        !(down >= 1e-3 && down <= 1e6) || !(ms >= 0 && ms <= 1e5))
        return hfl_errf(e, "'%s': use UP:DOWN:MS, Mbit/s in [0.001, 1e6] and latency ms in [0, 1e5]", s);
    c->link_up_bps = up * 1e6 / 8, c->link_down_bps = down * 1e6 / 8, c->link_latency_s = ms / 1000;
    return 0;
}
static cJSON *show_link(const void *o) {
    const client_options *c = o;
    char a[40], b[40], d[40], link[128] = "";
    if (c->link_up_bps > 0) {
        hfl_config_number(c->link_up_bps * 8 / 1e6, a, sizeof a);
        hfl_config_number(c->link_down_bps * 8 / 1e6, b, sizeof b);
        hfl_config_number(c->link_latency_s * 1000, d, sizeof d);
        snprintf(link, sizeof link, "%s:%s:%s", a, b, d);
    }
    return hfl_options_json_str(link);
}

/* --attack SCALE[:SAMPLES] (simulation of a Byzantine client). */
static int set_attack(void *o, const char *s, char *e) {
    client_options *c = o;
    char tail;
    double sc = 0, smp = 0;
    int got = sscanf(s, "%lf:%lf%c", &sc, &smp, &tail);
    c->attack_scale = sc, c->attack_samples = (int64_t)smp;
    if (got < 1 || got > 2 || !isfinite(sc) || sc == 0 || fabs(sc) > 1e6 ||
        (got == 2 && (smp < 1 || smp > 100000000 || smp != floor(smp))))
        return hfl_errf(e, "'%s' is not SCALE[:SAMPLES] (a non-zero scale, samples in [1, 1e8])", s);
    return 0;
}
static cJSON *show_attack(const void *o) {
    const client_options *c = o;
    char a[40], attack[128] = "";
    if (c->attack_scale != 0) {
        hfl_config_number(c->attack_scale, a, sizeof a);
        if (c->attack_samples > 0) snprintf(attack, sizeof attack, "%s:%lld", a, (long long)c->attack_samples);
        else snprintf(attack, sizeof attack, "%s", a);
    }
    return hfl_options_json_str(attack);
}

/* --budget-at ROUND:SIZE: the memory budget from round ROUND on (client/replan.c). */
static int set_budget_at(void *o, const char *s, char *e) {
    client_options *c = o;
    return hfl_parse_round_size(s, &c->budget_at_round, &c->budget_at_bytes, e);
}
static cJSON *show_budget_at(const void *o) {
    const client_options *c = o;
    char at[64] = "";
    if (c->budget_at_round > 0) snprintf(at, sizeof at, "%d:%llu", c->budget_at_round, (unsigned long long)c->budget_at_bytes);
    return hfl_options_json_str(at);
}

/* --precision auto (every precision: bits 0..2) or one. */
static int set_precision(void *o, const char *s, char *e) {
    client_options *c = o;
    hfl_precision p;
    if (!strcmp(s, "auto")) c->precisions = 7;
    else if (hfl_precision_parse(s, &p, e) == 0) c->precisions = 1u << p;
    else return -1;
    return 0;
}
static cJSON *show_precision(const void *o) {
    unsigned bits = ((const client_options *)o)->precisions;
    const char *prec = bits == 7 ? "auto" : "";
    for (int p = 0; p < 3 && !prec[0]; p++)
        if (bits == 1u << p) prec = hfl_precision_name((hfl_precision)p);
    return hfl_options_json_str(prec);
}

static int set_optimizer(void *o, const char *s, char *e) {
    return hfl_optimizer_parse(s, &((client_options *)o)->optimizer, e);
}
static cJSON *show_optimizer(const void *o) {
    return cJSON_CreateString(hfl_optimizer_name(((const client_options *)o)->optimizer));
}

static const hfl_option client_rows[] = {
    {"coordinator", "URL", HFL_OPT_STR, AT(url), 0, 0, NULL,
     .help = "coordinator address, e.g. tls+tcp://127.0.0.1:7450"},
    {"ca", "FILE", HFL_OPT_PTR, AT(tls.ca_file), 0, 0, NULL, .help = "CA certificate (PEM)"},
    {"cert", "FILE", HFL_OPT_PTR, AT(tls.cert_file), 0, 0, NULL, .help = "this client's certificate and key (PEM)"},
    {"server-name", "NAME", HFL_OPT_PTR, AT(tls.server_name), 0, 0, "localhost",
     .help = "expected CN of the coordinator certificate (default localhost)"},
    {"insecure", NULL, HFL_OPT_FLAG, AT(tls.insecure), 0, 0, NULL, .help = "allow plain tcp:// without TLS"},
    {"name", "NAME", HFL_OPT_CUSTOM, AT(name), 0, 0, NULL,
     .help = "client name without a certificate (default client-<index>); with one,\n"
     "the name is the certificate's CN and --name must agree", .set = set_name, .show = show_name},
    {"metrics", "ADDR", HFL_OPT_STR, AT(metrics), 0, 0, NULL,
     .help = "serve Prometheus metrics on http://ADDR/metrics and a JSON summary on\n"
     "/status, ADDR being HOST:PORT (port 0: any; the URL is printed)"},
    {"dropout", "P", HFL_OPT_DOUBLE, AT(dropout), 0, 1, NULL,
     .help = "(simulation) decline each round's task with chance P, drawn from the\n"
     "seed, the round and the name, so a rerun declines the same rounds"},
    {"speed", "S", HFL_OPT_DOUBLE, AT(speed), 1e-6, 1e12, NULL,
     .help = "(simulation) the samples/s this client declares, instead of its plan's\n"
     "measured prediction: hfl-sim passes its device profile's", .zero_null = 1},
    {"pace", "F", HFL_OPT_DOUBLE, AT(pace), 0, 1000, NULL,
     .help = "(simulation) hold each update until F times its simulated time has\n"
     "passed since its task arrived (task bytes / downlink + samples trained /\n"
     "--speed + update bytes / uplink + 2 latencies), so updates reach the\n"
     "coordinator in the order the simulated devices would send them"},
    {"link", "UP:DOWN:MS", HFL_OPT_CUSTOM, AT(link_up_bps), 0, 0, NULL,
     .help = "(simulation) the link --pace prices: uplink and downlink Mbit/s, latency ms;\n"
     "each update then carries its task's simulated time (sim_s), which a\n"
     "coordinator with --virtual-time holds against its deadline", .set = set_link, .show = show_link},
    {"retry-for", "SECONDS", HFL_OPT_DOUBLE, AT(retry_s), 0, 1e6, "60",
     .help = "keep saying hello to a coordinator that went away, restarted or asked\n"
     "us to say hello again (a rate limit, a lost challenge) for this long\n"
     "(default 60)"},
    {"codec", "NAME", HFL_OPT_STR, AT(codec), 0, 0, NULL,
     .help = "update codec for this client instead of the run's"},
    {"state-dir", "DIR", HFL_OPT_STR, AT(state_dir), 0, 0, NULL,
     .help = "keep the error-feedback residual in DIR/<name>.state across restarts,\n"
     "and memory measurements in DIR/overhead.jsonl"},
    {"plan", NULL, HFL_OPT_FLAG, AT(plan), 0, 0, NULL,
     .help = "print the training configurations that fit and the one chosen, then exit"},
    {"model", "NAME|FILE", HFL_OPT_STR, AT(model), 0, 0, NULL,
     .help = "with --plan: a built-in model (mlp, cnn) or a JSON spec"},
    {"memory-budget", "SIZE", HFL_OPT_SIZE, AT(budget), 0, 0, NULL,
     .help = "memory the training step may use, e.g. 512M, 4G: on the CPU its peak\n"
     "resident growth (arena, batch staging, libraries; not the dataset or\n"
     "the model copies), on a GPU the device memory the process holds beyond\n"
     "its CUDA context and libraries; checked every epoch, and a breach\n"
     "re-plans and sits the round out. Default: the device's free memory\n"
     "(the host's within its cgroups' limits), read again before each round;\n"
     "when it no longer holds the plan, the client re-plans as --budget-at does\n"
     "(where nothing fits, it sits the round out; the third time in a row, it leaves)", .zero_null = 1},
    {"budget-at", "ROUND:SIZE", HFL_OPT_CUSTOM, AT(budget_at_round), 0, 0, NULL,
     .help = "the memory budget becomes SIZE from round ROUND on (a device whose\n"
     "free memory shrinks; hfl-sim's memory_budget_at): before that round's\n"
     "training the client re-plans when its plan no longer fits, verifies the\n"
     "new one and sends it with its next pull; when nothing fits it says the\n"
     "smallest budget that would and leaves the run", .set = set_budget_at, .show = show_budget_at},
    {"headroom", "F", HFL_OPT_DOUBLE, AT(headroom), 0, 0.9, "0.05",
     .help = "fraction of the budget kept free (default 0.05)"},
    {"precision", "P", HFL_OPT_CUSTOM, AT(precisions), 0, 0, "auto",
     .help = "auto (let the chooser pick), fp32, bf16 or fp16 (default auto)", .set = set_precision, .show = show_precision},
    {"device", "D", HFL_OPT_CHOICE, AT(device), 0, 0, "auto",
     .help = "auto (the GPU when the CUDA module loads and finds one, else the CPU),\n"
     "cpu, or cuda (fail unless the GPU can be used); default auto", .choices = "auto|cpu|cuda"},
    {"verify", NULL, HFL_OPT_FLAG, AT(verify), 0, 0, NULL,
     .help = "with --plan: run one real step per candidate and report the measured peak"},
    {"json", NULL, HFL_OPT_FLAG, AT(json), 0, 0, NULL, .help = "with --plan: print the table as JSON"},
    {"optimizer", "O", HFL_OPT_CUSTOM, AT(optimizer), 0, 0, NULL,
     .help = "with --plan: the run's local optimizer, sgd (with momentum) or adamw\n"
     "(two fp32 moments); default sgd. In a run the coordinator says which", .set = set_optimizer, .show = show_optimizer},
    {"batch", "N", HFL_OPT_INT, AT(batch), 1, 65536, NULL,
     .help = "with --plan: plan for a run whose batch is N (micro-batches that\n"
     "accumulate to N where N does not fit; the table shows the steps)", .zero_null = 1},
    {"trial-step", NULL, HFL_OPT_FLAG, AT(trial), 0, 0, NULL,
     .help = "with --plan: choose and verify as a client does for a run of --batch\n"
     "(default 32), then train one step of it on synthetic data and report\n"
     "its measured peak against the budget (exit 1: refused or breached)"},
    {"profile", NULL, HFL_OPT_FLAG, AT(profile), 0, 0, NULL,
     .help = "with --trial-step: then profile a few more steps: per op the calls\n"
     "and time per optimizer step (cudaEvents on a GPU, the clock on the\n"
     "CPU), the ops and the host synchronisations per step"},
    {"attack", "SCALE[:SAMPLES]", HFL_OPT_CUSTOM, AT(attack_scale), 0, 0, NULL,
     .help = "simulation of a Byzantine client: send SCALE times the real update\n"
     "(e.g. -10: scaled and sign-flipped) and claim SAMPLES samples", .set = set_attack, .show = show_attack},
    {"allow-smaller-batch", NULL, HFL_OPT_FLAG, AT(allow_smaller), 0, 0, NULL,
     .help = "where the run's batch does not fit, train a smaller real batch\n"
     "instead of accumulating micro-batches to it, with the learning rate\n"
     "scaled by batch/run batch (Goyal et al. 2017's linear rule)"},
    {"conv-chunk", "N", HFL_OPT_INT, AT(conv_chunk), 1, HFL_CONV_CHUNK_MAX, NULL,
     .help = "samples a conv layer unfolds into one GEMM, at most: fewer ops\n"
     "(launches on a GPU) for more workspace; halved where it does not fit\n"
     "(default: the whole batch on a GPU, one sample on the CPU)", .zero_null = 1},
    {"data", "PATH", HFL_OPT_STR, AT(data_dir), 0, 0, HFL_FMNIST_DIR,
     .help = "Fashion-MNIST directory, shared out by the next four options (default\n"
     "" HFL_FMNIST_DIR "), or this client's own dataset: an .npz or a\n"
     "safetensors file holding x and y, or a directory of x.npy and y.npy\n"
     "(hfl-data split writes such shards; x uint8 or float32, y integer)"},
    {"partition", "SPEC", HFL_OPT_STR, AT(partition), 0, 0, "iid",
     .help = "iid, dirichlet:<alpha> or shards:<k> (default iid)"},
    {"init-model", "FILE", HFL_OPT_STR, AT(init_model), 0, 0, NULL,
     .help = "start from this model (safetensors, as hfl-coordinator --save-model writes\n"
     "it): when it is the coordinator's global model, bit for bit, the first task\n"
     "comes without weights instead of downloading them"},
    {"client-index", "I", HFL_OPT_INT, AT(index), 0, 1000000, NULL,
     .help = "which share of the partition is this client's (default 0)"},
    {"num-clients", "N", HFL_OPT_INT, AT(num_clients), 1, 1000000, "1",
     .help = "number of shares (default 1: all the data)"},
    {"seed", "S", HFL_OPT_INT, AT(seed), 0, 0x7fffffff, "1", .help = "partition seed (default 1)"},
    {"threads", "N", HFL_OPT_INT, AT(threads), 1, 1024, "1", .help = "OpenBLAS threads (default 1)"},
    {"timeout", "SECONDS", HFL_OPT_DOUBLE, AT(timeout_s), 0.1, 86400, "120",
     .help = "per-request timeout (default 120)"},
    {"quiet", NULL, HFL_OPT_FLAG, AT(quiet), 0, 0, NULL, .help = "no progress output"},
    {"config", "FILE", HFL_OPT_CONFIG, 0, 0, 0, 0, NULL,
     .help = "read options from FILE, a JSON object keyed by long option name, e.g.\n"
     "{\"coordinator\": \"tcp://127.0.0.1:7450\", \"insecure\": true}; options on\n"
     "the command line win"},
    {"print-config", NULL, HFL_OPT_PRINT, 0, 0, 0, 0, NULL,
     .help = "print the options in effect (defaults included) as JSON and exit"},
    {"help", NULL, HFL_OPT_HELP, 0, 0, 0, 0, NULL, .help = "this text"},

    {0}};

static const hfl_options client_opts = {
    "hfl-client",
    "usage: hfl-client --coordinator URL [options]\n"
    "       hfl-client --plan --model NAME|SPEC.json [--memory-budget SIZE] [--verify] [--json]\n"
    "Trains rounds handed out by hfl-coordinator on this machine's device and data.\n\n",
    NULL, 23, client_rows};

int client_options_parse(int argc, char **argv, client_options *o, char *err) {
    int first, print_config;
    if (hfl_options_parse(&client_opts, &argc, &argv, o, &first, &print_config, err) != 0) return -1;
    if (first < argc) return hfl_errf(err, "unexpected argument '%s' (see --help)", argv[first]);
    if (print_config) hfl_options_print(&client_opts, o), exit(0);
    if (o->profile && !(o->plan && o->trial)) return hfl_errf(err, "--profile goes with --plan --trial-step");
    if (o->plan) {
        if (!o->model[0]) return hfl_errf(err, "--plan needs --model NAME|SPEC.json (see --help)");
        return 0;
    }
    if (!o->url[0]) return hfl_errf(err, "--coordinator URL is required (see --help)");
    if (o->pace > 0 && !o->link_up_bps) return hfl_errf(err, "--pace needs --link UP:DOWN:MS to price the messages");
    if (hfl_data_is_file(o->data_dir) && o->num_clients > 1)
        return hfl_errf(err, "--num-clients shares out the Fashion-MNIST directory; --data %.200s is this client's own data",
                        o->data_dir);
    if (o->index >= o->num_clients && !hfl_data_is_file(o->data_dir))
        return hfl_errf(err, "--client-index %d must be below --num-clients %d", o->index, o->num_clients);
    if (!o->tls.insecure && (!o->tls.ca_file || !o->tls.cert_file))
        return hfl_errf(err, "TLS needs --ca and --cert (or --insecure with a tcp:// URL)");
    if (!o->name[0]) snprintf(o->name, sizeof o->name, "client-%d", o->index);
    if (o->codec[0] && !hfl_codec_find(o->codec, err)) return -1;
    if (o->budget_at_round > 0 && !o->budget)
        return hfl_errf(err, "--budget-at changes the budget --memory-budget sets: give both");
    return 0;
}
