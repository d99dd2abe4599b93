/* sim.c: hfl-sim: runs a whole fleet from a scenario file on this machine.
 *
 * It makes a throwaway PKI (proto/pki.c), starts hfl-coordinator on an
 * ephemeral loopback port with mutual TLS, waits for it to say where it
 * listens, starts one hfl-client process per client with its share of the
 * data, follows the coordinator's JSON-lines log to show progress, and exits
 * with the coordinator's status once the run is over. With --netns each
 * client runs in a network namespace of its own behind a shaped link
 * (netns.h), and dials its link's host end instead of loopback. With --role
 * it runs one program of the fleet instead (ROLES below). Everything a run
 * writes (PKI, logs, report) goes under --out DIR (default runs/<name>). */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <cjson/cJSON.h>

#include "compress/codec.h"
#include "data/idx.h"
#include "data/partition.h"
#include "kernels/blas.h"
#include "model/model.h"
#include "proto/identity.h"
#include "proto/pki.h"
#include "scenarios/html.h"
#include "scenarios/netns.h"
#include "scenarios/profile.h"
#include "scenarios/scenario.h"
#include "scenarios/share.h"
#include "util/options.h"
#include "util/util.h"

#define SIM_MAX_CLIENTS 1000
#define SIM_SPAWN_WAVE 20        /* clients started at once */
#define SIM_SPAWN_PAUSE_MS 200   /* between waves: 100 hellos/s, which the coordinator's TLS keeps up with */

typedef struct {
    const char *scenario_path;
    char out_dir[900];
    char report[1024];
    char html[1024];
    char init_model[1024], save_model[1024]; /* the coordinator's --init-model, --save-model */
    char data_dir[1024];
    char shards[900];     /* --shards DIR: hfl-data split's files, one per client */
    char shard_ext[16];   /* their format's extension */
    char codec[32];
    char precision[8];
    char device[8];
    int rounds;
    int threads;
    int json, quiet;
    int netns;            /* --netns: each client in its own network namespace (netns.h) */
    double timeout_s;
    char role[16];        /* --role: fleet (all of it here), coordinator, client (ROLES above) */
    int index;            /* --index: the client a client role runs (-1: none given) */
    char listen[256];     /* --listen: where a coordinator role listens (hfl-coordinator's size) */
    char coordinator[256]; /* --coordinator: where a client role dials (hfl-client's size) */
    char pki[900];        /* --pki: hfl-pki's directory, shared by every role */
    char server_name[256]; /* --server-name: the coordinator certificate's CN a client role expects */
} sim_options;

#define AT(field) offsetof(sim_options, field), sizeof(((sim_options *)0)->field) /* a row's field */

/* The options (util/options.h); --print-config shows null for the
 * scenario's own settings and for files that go under --out. */
static const hfl_option sim_rows[] = {
    {"out", "DIR", HFL_OPT_STR, AT(out_dir), 0, 0, NULL,
     .help = "where PKI, logs and the report go (default runs/<name>)"},
    {"report", "FILE", HFL_OPT_STR, AT(report), 0, 0, NULL, .help = "JSON report (default DIR/report.json)"},
    {"html", "FILE", HFL_OPT_STR, AT(html), 0, 0, NULL,
     .help = "the report as a self-contained HTML page with charts (default DIR/report.html)"},
    {"init-model", "FILE", HFL_OPT_STR, AT(init_model), 0, 0, NULL,
     .help = "start from this model (safetensors; see hfl-coordinator --help); every client\n"
     "holds it too, so the first round downloads no weights"},
    {"save-model", "FILE", HFL_OPT_STR, AT(save_model), 0, 0, NULL,
     .help = "the global model after every round, as safetensors (default DIR/model.safetensors)"},
    {"codec", "NAME", HFL_OPT_STR, AT(codec), 0, 0, NULL, .help = "override the scenario's codec"},
    {"rounds", "N", HFL_OPT_INT, AT(rounds), 1, 1000000, NULL,
     .help = "override the scenario's rounds", .zero_null = 1},
    {"precision", "P", HFL_OPT_STR, AT(precision), 0, 0, NULL,
     .help = "override the scenario's precision: auto, fp32, bf16, fp16"},
    {"device", "D", HFL_OPT_CHOICE, AT(device), 0, 0, NULL,
     .help = "override the scenario's device for the coordinator and every client not in\n"
     "its client_devices: auto (the GPU when the CUDA module loads and finds one,\n"
     "else the CPU), cpu, or cuda (fail unless the GPU can be used)", .choices = "auto|cpu|cuda"},
    {"data", "DIR", HFL_OPT_STR, AT(data_dir), 0, 0, "/usr/share/datasets/fashion-mnist",
     .help = "Fashion-MNIST directory (default /usr/share/datasets/fashion-mnist)"},
    {"shards", "DIR", HFL_OPT_STR, AT(shards), 0, 0, NULL,
     .help = "client i trains on DIR/client-<i>.npz (or .safetensors), as written by\n"
     "hfl-data split, instead of its share of --data; the coordinator evaluates\n"
     "on DIR/test.npz when it is there"},
    {"threads", "N", HFL_OPT_INT, AT(threads), 1, 1024, "1", .help = "OpenBLAS threads per client (default 1)"},
    {"timeout", "SECONDS", HFL_OPT_DOUBLE, AT(timeout_s), 1, 1e7, "3600",
     .help = "give up on the whole run after this long (default 3600)"},
    {"netns", NULL, HFL_OPT_FLAG, AT(netns), 0, 0, NULL,
     .help = "each client in a network namespace of its own on a veth pair, its link\n"
     "shaped from its profile by the kernel (tc netem: rate and latency; tbf, rate\n"
     "only, where the kernel has no netem); the coordinator listens on every\n"
     "address. Needs root"},
    {"role", "R", HFL_OPT_CHOICE, AT(role), 0, 0, "fleet",
     .help = "fleet (default: the coordinator and every client, here), coordinator (the\n"
     "scenario's coordinator alone, on --listen) or client (client --index alone,\n"
     "dialing --coordinator): one role a node, for a fleet across machines (a\n"
     "Kubernetes Indexed Job, a Slurm job array: deploy/); roles need --pki", .choices = "fleet|coordinator|client"},
    {"index", "I", HFL_OPT_INT, AT(index), -1, SIM_MAX_CLIENTS - 1, "-1",
     .help = "with --role client: which of the scenario's clients to run (0-based)"},
    {"listen", "URL", HFL_OPT_STR, AT(listen), 0, 0, "tls+tcp://0.0.0.0:7450",
     .help = "with --role coordinator: where to listen (default tls+tcp://0.0.0.0:7450)"},
    {"coordinator", "URL", HFL_OPT_STR, AT(coordinator), 0, 0, NULL,
     .help = "with --role client: the coordinator's address, e.g. tls+tcp://head:7450"},
    {"pki", "DIR", HFL_OPT_STR, AT(pki), 0, 0, NULL,
     .help = "with a role: the PKI hfl-pki made for the scenario's clients (ca.crt,\n"
     "coordinator.pem, client-<i>.pem), instead of a throwaway one under --out"},
    {"server-name", "NAME", HFL_OPT_STR, AT(server_name), 0, 0, NULL,
     .help = "with --role client: the CN of the coordinator's certificate (hfl-pki --cn;\n"
     "default localhost)"},
    {"json", NULL, HFL_OPT_FLAG, AT(json), 0, 0, NULL, .help = "print the final report to stdout as JSON"},
    {"quiet", NULL, HFL_OPT_FLAG, AT(quiet), 0, 0, NULL, .help = "no progress output"},
    {"scenario", "FILE", HFL_OPT_PTR, AT(scenario_path), 0, 0, NULL,
     .help = "the scenario, as the SCENARIO.json argument gives it (which wins)"},
    {"config", "FILE", HFL_OPT_CONFIG, 0, 0, 0, 0, NULL,
     .help = "read options from FILE, a JSON object keyed by long option name, e.g.\n"
     "{\"scenario\": \"quick.json\", \"rounds\": 5}; the command line wins"},
    {"print-config", NULL, HFL_OPT_PRINT, 0, 0, 0, 0, NULL,
     .help = "print the options in effect (defaults included) as JSON and exit"},
    {"help", NULL, HFL_OPT_HELP, 0, 0, 0, 0, NULL, .help = "this text"},

    {0}};

static const hfl_options sim_opts = {
    "hfl-sim",
    "usage: hfl-sim SCENARIO.json [options]\n"
    "       hfl-sim --config FILE [options]   (FILE gives the scenario as \"scenario\")\n"
    "Runs a federated fleet from a scenario: a coordinator and one process per client,\n"
    "talking mutual TLS over loopback.\n\n",
    NULL, 21, sim_rows};

/* ROLES. --role fleet runs everything here. --role coordinator and --role
 * client run one program of the same fleet each, with the arguments the
 * fleet would give it, in the foreground (this process becomes it), so that
 * a cluster places them: a coordinator pod and an Indexed Job of clients, or
 * a Slurm job and a job array (deploy/k8s/sim, deploy/slurm). The PKI is
 * made once with hfl-pki and shared (--pki). Each role keeps its state under
 * --out across restarts (the coordinator's in coordinator-state: restarted,
 * it continues the run; a new run needs fresh ones), and a client plans
 * against its own device (no share of a card: on GPUs a fleet split so may
 * choose other plans than one sharing a card). Scenario crashes are the
 * fleet's to simulate, and refused. The report is the coordinator's,
 * without the fleet's profile prices and HTML page. */
enum { ROLE_FLEET, ROLE_COORDINATOR, ROLE_CLIENT };
static int sim_role(const sim_options *o) {
    return !strcmp(o->role, "coordinator") ? ROLE_COORDINATOR : !strcmp(o->role, "client") ? ROLE_CLIENT : ROLE_FLEET;
}

/* What a role needs that the fleet makes itself; 0 or -1 with err. */
static int role_check(const sim_options *o, const hfl_scenario *sc, char *err) {
    int role = sim_role(o), clients = sc->clients;
    if (role != ROLE_CLIENT && (o->index >= 0 || o->coordinator[0] || o->server_name[0]))
        return hfl_errf(err, "--index, --coordinator and --server-name are for --role client");
    if (role == ROLE_FLEET && o->pki[0]) return hfl_errf(err, "--pki is for --role coordinator or client");
    if (role == ROLE_FLEET) return 0;
    if (o->netns) return hfl_errf(err, "--netns shapes the whole fleet's links here: not with --role %s", o->role);
    if (!o->pki[0]) return hfl_errf(err, "--role %s needs --pki DIR (hfl-pki --out DIR --clients %d)", o->role, clients);
    char path[1100];
    snprintf(path, sizeof path, "%s/ca.crt", o->pki);
    if (access(path, R_OK) != 0) return hfl_errf(err, "--pki %s: no readable ca.crt", o->pki);
    for (int i = 0; i < clients; i++) /* the fleet kills and restarts them; a role cannot */
        if (sc->client_crash[i][0])
            return hfl_errf(err, "the scenario crashes client %d, which only the whole fleet simulates: not "
                                 "with --role %s", i, o->role);
    if (role == ROLE_COORDINATOR) {
        snprintf(path, sizeof path, "%s/coordinator.pem", o->pki);
        return access(path, R_OK) == 0 ? 0 : hfl_errf(err, "--pki %s: no readable coordinator.pem", o->pki);
    }
    if (o->index < 0 || o->index >= clients)
        return hfl_errf(err, "--role client needs --index I in [0, %d]: the scenario has %d clients", clients - 1, clients);
    if (!o->coordinator[0]) return hfl_errf(err, "--role client needs --coordinator URL");
    snprintf(path, sizeof path, "%s/client-%d.pem", o->pki, o->index);
    if (access(path, R_OK) != 0) return hfl_errf(err, "--pki %s: no readable client-%d.pem", o->pki, o->index);
    return 0;
}

/* A role's program, in place of this process. */
static int role_exec(char *const argv[]) {
    execv(argv[0], argv);
    fprintf(stderr, "hfl-sim: cannot run %s: %s\n", argv[0], strerror(errno));
    return 1;
}

/* --netns's namespaces, removed however main returns (atexit). */
static sim_netns sim_links;
static void close_links(void) { sim_netns_close(&sim_links); }

/* The program `ip`, for `ip netns exec`: spawn_log runs a path. */
static int find_ip(char *out, size_t n, char *err) {
    static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(out, n, "%s/ip", dirs[i]);
        if (access(out, X_OK) == 0) return 0;
    }
    return hfl_errf(err, "--netns needs iproute2's ip (apt-get install iproute2)");
}

static int parse_args(int argc, char **argv, sim_options *o, char *err) {
    int first, print_config;
    if (hfl_options_parse(&sim_opts, &argc, &argv, o, &first, &print_config, err) != 0) return -1;
    if (first < argc - 1) return hfl_errf(err, "expected one scenario file (see --help)");
    if (first == argc - 1) o->scenario_path = argv[first];
    if (print_config) hfl_options_print(&sim_opts, o), exit(0);
    if (!o->scenario_path) return hfl_errf(err, "expected one scenario file (see --help)");
    return 0;
}

/* A sibling program: next to hfl-sim when installed, ../<dir>/ in the build tree. */
static int find_program(const char *name, const char *build_subdir, char *out, size_t n, char *err) {
    char dir[1024];
    if (hfl_exe_dir(dir, sizeof dir) != 0) return hfl_errf(err, "cannot find my own executable");
    snprintf(out, n, "%s/%s", dir, name);
    if (access(out, X_OK) == 0) return 0;
    snprintf(out, n, "%s/../%s/%s", dir, build_subdir, name);
    if (access(out, X_OK) == 0) return 0;
    return hfl_errf(err, "cannot find %s next to hfl-sim", name);
}

/* Starts argv[0] with stdout and stderr going to log_path (appended to when
 * append is set). A client runs under SCHED_BATCH: it is CPU-bound batch
 * work, and ten of them sharing two cores otherwise preempt each other on
 * every wake-up (the quickstart's rounds took 8.3-8.7 s that way, 7.1-7.9 s
 * under SCHED_BATCH); the coordinator keeps the normal policy, as it must
 * answer promptly. */
static pid_t spawn_log(char *const argv[], const char *log_path, int append, int client) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    struct sched_param sp = {0};
    if (client) sched_setscheduler(0, SCHED_BATCH, &sp);
    int fd = open(log_path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* if hfl-sim dies, nothing it started lives on */
    if (getppid() == 1) _exit(1);
    execv(argv[0], argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}


/* The last non-empty line of a log, to say why a process failed. */
static void last_line(const char *path, char *out, size_t n) {
    char err[HFL_ERR_LEN];
    size_t len;
    char *text = hfl_read_file(path, &len, err);
    snprintf(out, n, "(no output)");
    if (!text) return;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = 0;
    char *start = strrchr(text, '\n');
    if (len > 0) snprintf(out, n, "%s", start ? start + 1 : text);
    free(text);
}

/* Prints the round lines that appeared in the coordinator's log since *pos;
 * *opened gets the last round opened. */
static void follow_log(const char *path, long *pos, int quiet, int *opened) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    fseek(f, *pos, SEEK_SET);
    char line[65536];
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n') break; /* partial line: read it next time */
        *pos += (long)n;
        cJSON *ev = cJSON_Parse(line);
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(ev, "event");
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "round_open"))
            *opened = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(ev, "round"));
        if (!quiet && cJSON_IsString(kind) && !strcmp(kind->valuestring, "round")) {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(ev, "status");
#define NUM(k) cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(ev, k))
            char late[32] = ""; /* --late fold, --async: updates of earlier rounds it took */
            if (NUM("late_folded") > 0) snprintf(late, sizeof late, " +%.0f late", NUM("late_folded"));
            printf("round %3.0f  %s  test_acc %.4f  test_loss %.4f  clients %2.0f/%-2.0f%s  up %7.3f MB  down %7.3f MB  %6.2f s\n",
                   NUM("round"), cJSON_IsString(st) ? st->valuestring : "?", NUM("test_acc"), NUM("test_loss"),
                   NUM("clients"), NUM("selected"), late, NUM("bytes_up") / 1e6, NUM("bytes_down") / 1e6, NUM("wall_s"));
#undef NUM
            fflush(stdout);
        }
        cJSON_Delete(ev);
    }
    fclose(f);
}

/* 1 when the scenario's model starts with token embeddings (a language
 * model, which needs text shards: hfl-data text). */
static int reads_text(const hfl_scenario *sc) {
    hfl_model_spec spec;
    char err[HFL_ERR_LEN];
    return hfl_model_resolve(sc->model, &spec, err) == 0 && spec.n_layers > 0 &&
           spec.layers[0].kind == HFL_LAYER_EMBED;
}

/* Checks what can be checked before any process starts, so a typo fails in one line. */
static int sim_check(const hfl_scenario *sc, char *err) {
    hfl_model_spec spec;
    hfl_partition_spec part;
    const hfl_codec *codec;
    if (hfl_model_resolve(sc->model, &spec, err) != 0 || !(codec = hfl_codec_find(sc->codec, err)) ||
        hfl_codec_check(codec, spec.n_trainable, (uint32_t)sc->block, err) != 0 ||
        hfl_partition_parse(sc->partition, &part, err) != 0)
        return -1;
    if (strcmp(sc->downlink, "fp32") && strcmp(sc->downlink, "fp16") && strcmp(sc->downlink, "bf16"))
        return hfl_errf(err, "\"downlink\" must be fp32, fp16 or bf16, not '%s'", sc->downlink);
    if (strcmp(sc->precision, "auto") && strcmp(sc->precision, "fp32") && strcmp(sc->precision, "bf16") &&
        strcmp(sc->precision, "fp16"))
        return hfl_errf(err, "\"precision\" must be auto, fp32, bf16 or fp16, not '%s'", sc->precision);
    for (int i = 0; i < sc->clients; i++) {
        uint64_t bytes;
        char e[HFL_ERR_LEN];
        if (sc->client_memory[i][0] && hfl_parse_size(sc->client_memory[i], &bytes, e) != 0)
            return hfl_errf(err, "client-%d: memory: %s", i, e);
        if (!sc->client_codec[i][0]) continue;
        if (!(codec = hfl_codec_find(sc->client_codec[i], e)) ||
            hfl_codec_check(codec, spec.n_trainable, (uint32_t)sc->block, e) != 0)
            return hfl_errf(err, "client-%d: %s", i, e);
    }
    return 0;
}

/* Each client's device profile (scenarios/profile.h), from the library named
 * by the scenario (relative to the scenario file; profiles.json beside it by
 * default); a profile's memory, times memory_scale, becomes the client's
 * budget unless client_memory gives one. */
static int apply_profiles(const char *scenario_path, hfl_scenario *sc, hfl_profile *p, char *err) {
    char lib[2200];
    const char *name = sc->profile_library[0] ? sc->profile_library : "profiles.json";
    const char *slash = strrchr(scenario_path, '/');
    if (name[0] == '/' || !slash) snprintf(lib, sizeof lib, "%s", name);
    else snprintf(lib, sizeof lib, "%.*s/%s", (int)(slash - scenario_path), scenario_path, name);
    if (hfl_profiles_resolve(lib, sc, p, err) != 0) return -1;
    for (int i = 0; i < sc->clients; i++)
        if (p[i].name[0] && !sc->client_memory[i][0])
            snprintf(sc->client_memory[i], sizeof sc->client_memory[i], "%.0f", (double)p[i].memory * sc->memory_scale);
    return 0;
}

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { (void)sig; interrupted = 1; }

typedef struct {
    pid_t coord;
    pid_t clients[SIM_MAX_CLIENTS];
    int n_clients;
    int failed; /* clients that exited with an error */
    char **argv[SIM_MAX_CLIENTS];     /* how each client was started, to start it again */
    int crash_round[SIM_MAX_CLIENTS]; /* "crashes": killed when this round opens (0: never) */
    double restart_s[SIM_MAX_CLIENTS];  /* and started again this long after (-1: never) */
    double restart_at[SIM_MAX_CLIENTS]; /* when a killed client is due to start again (0: not due) */
    int killed[SIM_MAX_CLIENTS];      /* killed by the scenario: its SIGKILL is no failure */
    pid_t aggs[HFL_SIM_MAX_AGGREGATORS]; /* "aggregators": the tier's aggregator coordinators */
    int n_aggs;
} sim_procs;

static char **argv_keep(char *const *a) {
    int n = 0;
    while (a[n]) n++;
    char **k = hfl_calloc((size_t)n + 1, sizeof *k);
    for (int i = 0; i < n; i++) k[i] = hfl_strdup(a[i]);
    return k;
}

/* The scenario's crashes: a client is killed with SIGKILL when its round
 * opens and, when the scenario says so, started again later with the same
 * arguments (its state dir keeps its residual; the coordinator its session). */
static void run_faults(sim_procs *p, int opened, const char *out_dir, int quiet) {
    double now = hfl_now();
    for (int i = 0; i < p->n_clients; i++) {
        if (p->crash_round[i] && p->crash_round[i] == opened && !p->killed[i] && p->clients[i] > 0) {
            kill(p->clients[i], SIGKILL);
            p->killed[i] = 1;
            if (p->restart_s[i] >= 0) p->restart_at[i] = now + p->restart_s[i];
            if (!quiet)
                printf("hfl-sim: client %d killed as round %d opened, as the scenario says%s\n", i, opened,
                       p->restart_s[i] >= 0 ? "; it will be started again" : "");
        }
        if (p->restart_at[i] > 0 && now >= p->restart_at[i] && p->clients[i] == 0) {
            char log[1200];
            snprintf(log, sizeof log, "%s/client-%d.log", out_dir, i);
            p->clients[i] = spawn_log(p->argv[i], log, 1, 1);
            p->restart_at[i] = 0;
            if (!quiet) printf("hfl-sim: client %d started again\n", i);
        }
    }
}

static void kill_all(sim_procs *p) {
    for (int i = 0; i < p->n_clients; i++)
        if (p->clients[i] > 0) kill(p->clients[i], SIGKILL);
    if (p->coord > 0) kill(p->coord, SIGTERM);
    for (int a = 0; a < p->n_aggs; a++)
        if (p->aggs[a] > 0) kill(p->aggs[a], SIGTERM), p->aggs[a] = 0;
}

/* The URL a coordinator wrote to its --ready-file once it serves, into url
 * (n bytes); 1, or 0 while the file is absent or empty. */
static int read_url(const char *ready, char *url, size_t n) {
    FILE *f = fopen(ready, "r");
    url[0] = 0;
    if (f) {
        if (!fgets(url, (int)n, f)) url[0] = 0;
        url[strcspn(url, "\n")] = 0;
        fclose(f);
    }
    return url[0] != 0;
}

/* "aggregators": n coordinators under the root at root_url, each started
 * with the root's arguments (cargv; not --tier) but a listener, ready file, log and
 * report of its own, --upstream and an aggregator certificate issued from
 * the run's PKI; their URLs into urls once each serves. -1 with err. */
static int start_aggregators(sim_procs *p, char *const *cargv, int n, const char *root_url, const char *pki_dir,
                             const char *out_dir, char urls[][300], char *err) {
    for (int a = 0; a < n; a++) {
        char name[32], pem[1200], ready[1200], log[1200], report[1200], out[1200];
        snprintf(name, sizeof name, "aggregator-%d", a);
        if (hfl_pki_issue(pki_dir, name, HFL_ROLE_AGGREGATOR, 2, err) != 0) return -1;
        snprintf(pem, sizeof pem, "%s/%s.pem", pki_dir, name);
        snprintf(ready, sizeof ready, "%s/%s.url", out_dir, name);
        snprintf(log, sizeof log, "%s/%s.jsonl", out_dir, name);
        snprintf(report, sizeof report, "%s/%s.json", out_dir, name);
        snprintf(out, sizeof out, "%s/%s.log", out_dir, name);
        unlink(ready);
        char *argv[160];
        int k = 0;
        for (int i = 0; cargv[i] && k < 150; i++) {
            if (!strcmp(cargv[i], "--tier")) continue; /* the root's alone */
            const char *own = !strcmp(cargv[i], "--listen") ? "tls+tcp://127.0.0.1:0"
                            : !strcmp(cargv[i], "--ready-file") ? ready
                            : !strcmp(cargv[i], "--log") ? log : !strcmp(cargv[i], "--report") ? report : NULL;
            argv[k++] = cargv[i];
            if (own && cargv[i + 1]) argv[k++] = (char *)own, i++;
        }
        argv[k++] = "--upstream", argv[k++] = (char *)root_url, argv[k++] = "--upstream-cert", argv[k++] = pem;
        argv[k] = NULL;
        p->aggs[p->n_aggs++] = spawn_log(argv, out, 0, 0);
        double t0 = hfl_now();
        while (!read_url(ready, urls[a], sizeof urls[a])) {
            if (interrupted || hfl_now() - t0 > 60) {
                char why[512];
                last_line(out, why, sizeof why);
                return hfl_errf(err, "%s did not start: %s", name, why);
            }
            hfl_sleep_ms(20);
        }
    }
    return 0;
}

/* How a process ended, for people: "exited with status 1", "was killed by
 * signal 9 (SIGKILL)". */
static void describe_end(int st, char *out, size_t n) {
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        const char *name = sig == SIGKILL ? "SIGKILL" : sig == SIGTERM ? "SIGTERM" : sig == SIGSEGV ? "SIGSEGV"
                         : sig == SIGABRT ? "SIGABRT" : sig == SIGINT ? "SIGINT" : sig == SIGBUS ? "SIGBUS" : "";
        snprintf(out, n, "was killed by signal %d%s%s%s%s", sig, name[0] ? " (" : "", name, name[0] ? ")" : "",
                 sig == SIGKILL ? ", e.g. by the out-of-memory killer" : "");
    } else {
        snprintf(out, n, "exited with status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
}

/* Reaps whatever exited; returns the coordinator's exit status once it has exited, else -1. */
static int reap(sim_procs *p, const char *out_dir, int *coord_status, int quiet) {
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (pid == p->coord) {
            p->coord = 0;
            *coord_status = code;
            continue;
        }
        for (int i = 0; i < p->n_clients; i++) {
            if (p->clients[i] != pid) continue;
            p->clients[i] = 0;
            if (p->killed[i] == 1 && code == 128 + SIGKILL) {
                p->killed[i] = 2; /* the scenario's crash, reported when it was made */
                continue;
            }
            p->failed += code != 0;
            if (code != 0 && !quiet) {
                char log[1200], why[512];
                snprintf(log, sizeof log, "%s/client-%d.log", out_dir, i);
                last_line(log, why, sizeof why);
                char how[128];
                describe_end(st, how, sizeof how);
                fprintf(stderr, "hfl-sim: client %d %s; its last line: %s\n", i, how, why);
            }
        }
    }
    return p->coord == 0 ? 0 : -1;
}

static int clients_alive(const sim_procs *p) {
    int n = 0;
    for (int i = 0; i < p->n_clients; i++) n += p->clients[i] > 0 || p->restart_at[i] > 0;
    return n;
}

/* --shards DIR: every client's file there, in one format (npz first), and
 * DIR/test.<ext> as the coordinator's evaluation set when it exists. */
static int check_shards(sim_options *o, int clients, char *err) {
    static const char *exts[2] = {"npz", "safetensors"};
    char path[sizeof o->data_dir - 1];
    for (int e = 0; e < 2 && !o->shard_ext[0]; e++) {
        snprintf(path, sizeof path, "%s/client-0000.%s", o->shards, exts[e]);
        if (access(path, R_OK) == 0) snprintf(o->shard_ext, sizeof o->shard_ext, "%s", exts[e]);
    }
    if (!o->shard_ext[0])
        return hfl_errf(err, "--shards %s holds no client-0000.npz or client-0000.safetensors (see hfl-data split)", o->shards);
    for (int i = 0; i < clients; i++) {
        snprintf(path, sizeof path, "%s/client-%04d.%s", o->shards, i, o->shard_ext);
        if (access(path, R_OK) != 0)
            return hfl_errf(err, "--shards %s has no client-%04d.%s for the scenario's %d clients", o->shards, i,
                            o->shard_ext, clients);
    }
    snprintf(path, sizeof path, "%s/test.%s", o->shards, o->shard_ext);
    if (access(path, R_OK) == 0) snprintf(o->data_dir, sizeof o->data_dir, "%s", path);
    return 0;
}

int main(int argc, char **argv) {
    hfl_blas_core_fix(argv); /* before anything else: it may execute this program again */
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress reaches logs and pipes as it happens */
    sim_options o = {0};
    char err[HFL_ERR_LEN];
    hfl_scenario sc;
    if (parse_args(argc, argv, &o, err) != 0 || hfl_scenario_load(o.scenario_path, &sc, err) != 0)
        return hfl_fail("hfl-sim", err, 2);
    if (o.netns && geteuid() != 0) /* before anything is made */
        return hfl_fail("hfl-sim", "--netns needs root: it makes network namespaces and veth pairs", 2);
    if (o.codec[0]) snprintf(sc.codec, sizeof sc.codec, "%s", o.codec);
    if (o.rounds) sc.rounds = o.rounds;
    static hfl_profile profiles[1000]; /* a scenario has at most 1000 clients */
    if (apply_profiles(o.scenario_path, &sc, profiles, err) != 0) return hfl_fail("hfl-sim", err, 2);
    if (o.precision[0]) snprintf(sc.precision, sizeof sc.precision, "%s", o.precision);
    if (o.device[0]) snprintf(sc.device, sizeof sc.device, "%s", o.device);
    if (sim_check(&sc, err) != 0) {
        fprintf(stderr, "hfl-sim: %s: %s\n", o.scenario_path, err);
        return 2;
    }
    if (role_check(&o, &sc, err) != 0) return hfl_fail("hfl-sim", err, 2);
    int role = sim_role(&o);
    if (sc.aggregators > 0 && (role != ROLE_FLEET || o.netns || o.init_model[0]))
        return hfl_fail("hfl-sim", "\"aggregators\" runs a whole fleet on this host: not with --role, --netns or --init-model", 2);
    if (o.shards[0] && check_shards(&o, sc.clients, err) != 0) return hfl_fail("hfl-sim", err, 2);
    if (!o.shards[0] && reads_text(&sc)) { /* the images would fail later, and less clearly */
        if (sc.prepare[0])
            fprintf(stderr, "hfl-sim: %s's model reads byte-level text, not the Fashion-MNIST images: make its "
                    "shards first (%s), then pass --shards DIR\n", sc.name, sc.prepare);
        else
            fprintf(stderr, "hfl-sim: %s's model reads byte-level text, not the Fashion-MNIST images: make its "
                    "shards with hfl-data text, then pass --shards DIR\n", sc.name);
        return 2;
    }
    if (!o.out_dir[0]) snprintf(o.out_dir, sizeof o.out_dir, "runs/%s", sc.name);
    if (!o.report[0]) snprintf(o.report, sizeof o.report, "%s/report.json", o.out_dir);
    if (!o.html[0]) snprintf(o.html, sizeof o.html, "%s/report.html", o.out_dir);
    if (!o.save_model[0]) snprintf(o.save_model, sizeof o.save_model, "%s/model.safetensors", o.out_dir);
    char coord_exe[1100], client_exe[1100], pki_dir[1100], ready[1100], log[1100], clog[1100];
    if (find_program("hfl-coordinator", "coordinator", coord_exe, sizeof coord_exe, err) != 0 ||
        find_program("hfl-client", "client", client_exe, sizeof client_exe, err) != 0 ||
        hfl_mkdirs(o.out_dir, err) != 0)
        return hfl_fail("hfl-sim", err, 1);
    snprintf(pki_dir, sizeof pki_dir, "%s/pki", o.out_dir);
    snprintf(ready, sizeof ready, "%s/coordinator.url", o.out_dir);
    snprintf(log, sizeof log, "%s/events.jsonl", o.out_dir);
    snprintf(clog, sizeof clog, "%s/coordinator.log", o.out_dir);
    /* Clients keep their error-feedback residual here across restarts; a new run starts clean. */
    char state_dir[1100];
    snprintf(state_dir, sizeof state_dir, "%s/state", o.out_dir);
    if (hfl_mkdirs(state_dir, err) != 0) return hfl_fail("hfl-sim", err, 1);
    for (int i = 0; i < sc.clients && role == ROLE_FLEET; i++) { /* a client role's survives its restarts */
        char old[1200];
        snprintf(old, sizeof old, "%s/client-%d.state", state_dir, i);
        unlink(old);
    }
    unlink(ready);
    double t0 = hfl_now();
    /* The data decompressed once for the whole fleet: each client then reads
     * its labels and seeks to its own rows instead of inflating 47 MB. */
    char plain[sizeof o.data_dir];
    if (snprintf(plain, sizeof plain, "%s/train-images-idx3-ubyte", o.data_dir) >= (int)sizeof plain) plain[0] = 0;
    if (!o.shards[0] && access(plain, R_OK) != 0) {
        if (snprintf(plain, sizeof plain, "%s/data", o.out_dir) >= (int)sizeof plain) {
            fprintf(stderr, "hfl-sim: --out %.200s...: path too long\n", o.out_dir);
            return 1;
        }
        if (hfl_fmnist_unpack(o.data_dir, plain, err) != 0) {
            fprintf(stderr, "hfl-sim: --data %s: %s\n", o.data_dir, err);
            return 1;
        }
        snprintf(o.data_dir, sizeof o.data_dir, "%s", plain);
    }
    if (!o.quiet && role == ROLE_FLEET)
        printf("hfl-sim: %s: %d clients (%d per round), %s, %s, %d rounds, codec %s; output in %s\n",
               sc.name, sc.clients, sc.clients_per_round, sc.model, sc.partition, sc.rounds, sc.codec, o.out_dir);
    /* GPU clients without a scenario budget share the card, each with an
     * equal part of its free memory less its per-process cost, so N processes
     * each planning against the whole card cannot overcommit it; a fleet that
     * does not fit is refused here, before anything starts (scenarios/share.h). */
    uint64_t gpu_budget = 0;
    if (role == ROLE_FLEET && hfl_sim_gpu_budget(&sc, state_dir, o.quiet, &gpu_budget, err) != 0)
        return hfl_fail("hfl-sim", err, 1);
    char gpu_share[32] = "";
    if (gpu_budget) snprintf(gpu_share, sizeof gpu_share, "%llu", (unsigned long long)gpu_budget);
    if (role != ROLE_FLEET) snprintf(pki_dir, sizeof pki_dir, "%s", o.pki);
    else if (hfl_pki_create(pki_dir, sc.clients, "localhost", 2, err) != 0) return hfl_fail("hfl-sim", err, 1);
    char ca[1200], coord_pem[1200];
    snprintf(ca, sizeof ca, "%s/ca.crt", pki_dir);
    snprintf(coord_pem, sizeof coord_pem, "%s/coordinator.pem", pki_dir);
    char a_n[16], a_rounds[16], a_k[16], a_q[16], a_ep[16], a_b[16], a_lr[32], a_mom[32], a_wd[32], a_seed[24], a_dl[32], a_block[16];
    snprintf(a_rounds, sizeof a_rounds, "%d", sc.rounds);
    snprintf(a_k, sizeof a_k, "%d", sc.clients_per_round);
    snprintf(a_n, sizeof a_n, "%d", sc.clients);
    snprintf(a_q, sizeof a_q, "%d", sc.min_quorum);
    snprintf(a_ep, sizeof a_ep, "%d", sc.local_epochs);
    snprintf(a_b, sizeof a_b, "%d", sc.batch);
    snprintf(a_lr, sizeof a_lr, "%.17g", sc.lr);
    snprintf(a_mom, sizeof a_mom, "%.17g", sc.momentum);
    snprintf(a_wd, sizeof a_wd, "%.17g", sc.weight_decay);
    snprintf(a_seed, sizeof a_seed, "%llu", (unsigned long long)sc.seed);
    snprintf(a_dl, sizeof a_dl, "%.17g", sc.deadline_s);
    snprintf(a_block, sizeof a_block, "%d", sc.block);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    char ip_exe[64] = "";
    if (o.netns) {
        if (find_ip(ip_exe, sizeof ip_exe, err) != 0 ||
            sim_netns_open(&sim_links, sc.clients, profiles, &interrupted, err) != 0)
            return hfl_fail("hfl-sim", err, 1);
        atexit(close_links);
        if (!o.quiet)
            printf("hfl-sim: --netns: %d clients in namespaces of their own, %d links shaped%s\n", sc.clients,
                   sim_links.shaped,
                   sim_links.netem > 0 ? " (netem: rate and latency)"
                   : sim_links.netem == 0 ? " by tbf: rate only, this kernel has no sch_netem, so no latency" : "");
    }
    char *cargv[] = {coord_exe, "--listen", role == ROLE_COORDINATOR ? o.listen : o.netns ? "tls+tcp://0.0.0.0:0" : "tls+tcp://127.0.0.1:0", "--ca", ca, "--cert", coord_pem,
                     "--model", sc.model, "--codec", sc.codec, "--block", a_block, "--rounds", a_rounds,
                     "--clients-per-round", a_k, "--min-quorum", a_q, "--deadline", a_dl,
                     "--local-epochs", a_ep, "--batch", a_b, "--lr", a_lr, "--momentum", a_mom,
                     "--weight-decay", a_wd, "--seed", a_seed, "--data", o.data_dir, "--log", log,
                     "--report", o.report, "--ready-file", ready, "--downlink", sc.downlink, "--device", sc.device,
                     /* the simulated clients share 127.0.0.1 (each its own address
                      * under --netns): no cap per address */
                     "--max-conns-per-addr", "0",
                     /* the first draw waits for the whole fleet: the same seed draws the same clients */
                     "--min-clients", a_n,
                     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                     NULL, NULL, NULL, NULL, NULL, NULL,
                     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    /* the optional ones, after the fixed ones (and a coordinator role's --state-dir) */
    int na = 0;
    while (cargv[na]) na++;
    char a_maxs[32], a_share[32], a_chunk[32];
    snprintf(a_chunk, sizeof a_chunk, "%.0f", sc.chunk_bytes);
    if (sc.chunk_bytes > 0) cargv[na++] = "--chunk-bytes", cargv[na++] = a_chunk;
    snprintf(a_maxs, sizeof a_maxs, "%.0f", sc.max_client_samples);
    snprintf(a_share, sizeof a_share, "%.17g", sc.max_share);
    if (sc.downlink_delta) cargv[na++] = "--downlink-delta";
    if (sc.keep_local_optimizer) cargv[na++] = "--keep-local-optimizer";
    if (sc.clip_norm[0]) cargv[na++] = "--clip-norm", cargv[na++] = sc.clip_norm;
    if (sc.max_client_samples > 0) cargv[na++] = "--max-client-samples", cargv[na++] = a_maxs;
    if (sc.max_share > 0) cargv[na++] = "--max-share", cargv[na++] = a_share;
    if (sc.server_opt[0]) cargv[na++] = "--server-opt", cargv[na++] = sc.server_opt;
    if (sc.strategy[0]) cargv[na++] = "--strategy", cargv[na++] = sc.strategy;
    if (sc.sum_on_disk[0]) cargv[na++] = "--sum-on-disk", cargv[na++] = sc.sum_on_disk;
    char a_over[32];
    snprintf(a_over, sizeof a_over, "%.17g", sc.over_selection);
    /* always: a scenario's draw is reproducible unless it asks for over-selection
     * (the coordinator over-selects by default, and then which K arrive first
     * depends on the host) */
    cargv[na++] = "--over-select", cargv[na++] = a_over;
    if (sc.late[0]) cargv[na++] = "--late", cargv[na++] = sc.late;
    if (sc.local_work[0]) cargv[na++] = "--local-work", cargv[na++] = sc.local_work;
    char a_steps[32];
    snprintf(a_steps, sizeof a_steps, "%.0f", sc.local_steps);
    if (sc.local_steps > 0) cargv[na++] = "--local-steps", cargv[na++] = a_steps;
    if (sc.lr_schedule[0]) cargv[na++] = "--lr-schedule", cargv[na++] = sc.lr_schedule;
    if (sc.aggregators == 0) cargv[na++] = "--save-model", cargv[na++] = o.save_model; /* a tier's root does not */
    if (sc.aggregators > 0) cargv[na++] = "--tier"; /* its aggregators skip it (start_aggregators) */
    if (o.init_model[0]) cargv[na++] = "--init-model", cargv[na++] = o.init_model;
    char a_prox[32];
    snprintf(a_prox, sizeof a_prox, "%.17g", sc.prox_mu);
    if (sc.prox_mu > 0) cargv[na++] = "--prox-mu", cargv[na++] = a_prox;
    char a_async[16];
    snprintf(a_async, sizeof a_async, "%.0f", sc.async_concurrency);
    if (sc.async_concurrency > 0) cargv[na++] = "--async", cargv[na++] = a_async;
    if (sc.virtual_time) cargv[na++] = "--virtual-time";
    if (sc.optimizer[0]) cargv[na++] = "--optimizer", cargv[na++] = sc.optimizer;
    if (sc.betas[0]) cargv[na++] = "--betas", cargv[na++] = sc.betas;
    char a_fb[16], a_dpn[32], a_dpe[32], a_dpd[32];
    snprintf(a_fb, sizeof a_fb, "%.0f", sc.fixed_bits);
    snprintf(a_dpn, sizeof a_dpn, "%.17g", sc.dp_noise);
    snprintf(a_dpe, sizeof a_dpe, "%.17g", sc.dp_epsilon);
    snprintf(a_dpd, sizeof a_dpd, "%.17g", sc.dp_delta);
    if (sc.secure_agg) cargv[na++] = "--secure-agg";
    if (sc.client_clip) cargv[na++] = "--client-clip";
    if (sc.fixed_bits > 0) cargv[na++] = "--fixed-bits", cargv[na++] = a_fb;
    if (sc.dp_noise > 0) cargv[na++] = "--dp-noise", cargv[na++] = a_dpn;
    if (sc.dp_epsilon > 0) cargv[na++] = "--dp-epsilon", cargv[na++] = a_dpe, cargv[na++] = "--dp-delta", cargv[na++] = a_dpd;
    char coord_state[1100];
    if (role == ROLE_COORDINATOR) { /* restarted, it continues the run; a finished run's log stays whole */
        snprintf(coord_state, sizeof coord_state, "%s/coordinator-state", o.out_dir);
        cargv[na++] = "--state-dir", cargv[na++] = coord_state;
        if (!o.quiet)
            printf("hfl-sim: %s's coordinator on %s for %d clients; output in %s\n", sc.name, o.listen, sc.clients,
                   o.out_dir);
        return role_exec(cargv);
    }
    static sim_procs procs;
    int coord_status = -1;
    char url[300] = "";
    if (role == ROLE_CLIENT) snprintf(url, sizeof url, "%s", o.coordinator);
    else procs.coord = spawn_log(cargv, clog, 0, 0);
    while (!url[0]) { /* the coordinator writes its URL once it is serving */
        if (reap(&procs, o.out_dir, &coord_status, o.quiet) == 0 || interrupted || hfl_now() - t0 > 60) {
            char why[512];
            last_line(clog, why, sizeof why);
            fprintf(stderr, "hfl-sim: coordinator did not start: %s\n", why);
            kill_all(&procs);
            return 1;
        }
        if (!read_url(ready, url, sizeof url)) hfl_sleep_ms(20);
    }
    if (!o.quiet && role == ROLE_FLEET) printf("hfl-sim: coordinator serving on %s; starting %d clients\n", url, sc.clients);
    static char agg_urls[HFL_SIM_MAX_AGGREGATORS][300];
    if (sc.aggregators > 0) {
        if (start_aggregators(&procs, cargv, (int)sc.aggregators, url, pki_dir, o.out_dir, agg_urls, err) != 0) {
            fprintf(stderr, "hfl-sim: %s\n", err);
            kill_all(&procs);
            return 1;
        }
        if (!o.quiet) printf("hfl-sim: %d aggregators serving under the root\n", procs.n_aggs);
    }
    char a_threads[16], a_dropout[32];
    snprintf(a_dropout, sizeof a_dropout, "%.17g", sc.dropout);

    snprintf(a_threads, sizeof a_threads, "%d", o.threads);
    procs.n_clients = sc.clients;
    int first = role == ROLE_CLIENT ? o.index : 0, end = role == ROLE_CLIENT ? o.index + 1 : sc.clients;
    for (int i = first; i < end; i++) {
        char pem[1200], idx[16], name[32], clientlog[1200], shard[1100];
        snprintf(shard, sizeof shard, "%s/client-%04d.%s", o.shards, i, o.shard_ext);
        snprintf(pem, sizeof pem, "%s/client-%d.pem", pki_dir, i);
        snprintf(idx, sizeof idx, "%d", i);
        snprintf(name, sizeof name, "client-%d", i);
        snprintf(clientlog, sizeof clientlog, "%s/client-%d.log", o.out_dir, i);
        char *argv_c[] = {client_exe, "--coordinator", sc.aggregators > 0 ? agg_urls[i % procs.n_aggs] : url, "--ca", ca, "--cert", pem, "--name", name,
                          "--data", o.shards[0] ? shard : o.data_dir, "--partition", sc.partition,
                          "--client-index", idx, "--num-clients", o.shards[0] ? "1" : a_n, "--seed", a_seed, "--threads", a_threads, "--state-dir", state_dir,
                          "--precision", sc.precision, "--device",
                          sc.client_device[i][0] ? sc.client_device[i] : sc.device, NULL, NULL, NULL, NULL, NULL, NULL,
                          NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
                          /* codec, attack, dropout, speed, budget, budget-at, pace, link, init-model,
                           * server-name: 20, and the end */
        int k = 0;
        while (argv_c[k]) k++;
        if (sc.client_codec[i][0]) argv_c[k++] = "--codec", argv_c[k++] = sc.client_codec[i];
        if (sc.client_attack[i][0]) argv_c[k++] = "--attack", argv_c[k++] = sc.client_attack[i];
        if (sc.dropout > 0) argv_c[k++] = "--dropout", argv_c[k++] = a_dropout;
        /* a profiled client declares its profile's speed (fp32: the precision it picks is
         * not known yet), which capacity-aware work sizes its rounds by */
        char a_speed[32];
        hfl_model_spec mspec;
        if (profiles[i].name[0] && hfl_model_resolve(sc.model, &mspec, err) == 0) {
            snprintf(a_speed, sizeof a_speed, "%.6g",
                     hfl_profile_samples_per_s(&profiles[i], HFL_PREC_FP32, hfl_profile_slowdown(&sc, i), &mspec));
            argv_c[k++] = "--speed", argv_c[k++] = a_speed;
        }
        char a_pace[32], a_link[96];
        /* pace: updates arrive in the profiles' order; virtual_time: each
         * update says its simulated time (link and speed give it) */
        if (profiles[i].name[0] && (sc.pace > 0 || sc.virtual_time)) {
            snprintf(a_link, sizeof a_link, "%.17g:%.17g:%.17g", profiles[i].up_bps * 8 / 1e6,
                     profiles[i].down_bps * 8 / 1e6, profiles[i].latency_s * 1000);
            argv_c[k++] = "--link", argv_c[k++] = a_link;
        }
        if (profiles[i].name[0] && sc.pace > 0) {
            snprintf(a_pace, sizeof a_pace, "%.17g", sc.pace);
            argv_c[k++] = "--pace", argv_c[k++] = a_pace;
        }
        /* every device holds the starting model, as a fleet fine-tuning a shared base does */
        if (o.init_model[0]) argv_c[k++] = "--init-model", argv_c[k++] = o.init_model;
        if (sc.client_memory[i][0]) argv_c[k++] = "--memory-budget", argv_c[k++] = sc.client_memory[i];
        else if (gpu_share[0] && strcmp(sc.client_device[i][0] ? sc.client_device[i] : sc.device, "cpu"))
            argv_c[k++] = "--memory-budget", argv_c[k++] = gpu_share;
        if (sc.client_memory_at[i][0]) argv_c[k++] = "--budget-at", argv_c[k++] = sc.client_memory_at[i];
        if (o.server_name[0]) argv_c[k++] = "--server-name", argv_c[k++] = o.server_name;
        if (role == ROLE_CLIENT) {
            if (!o.quiet) printf("hfl-sim: %s's client %d dialing %s; output in %s\n", sc.name, i, url, o.out_dir);
            return role_exec(argv_c);
        }
        char ns[32], link_url[320], *argv_n[sizeof argv_c / sizeof *argv_c + 4];
        char *const *argv_run = argv_c;
        if (o.netns) { /* ip netns exec NS hfl-client ..., dialing its link's host end */
            char host[32];
            const char *port = strrchr(url, ':');
            sim_netns_name(&sim_links, i, ns, sizeof ns);
            sim_netns_host_ip(&sim_links, i, host, sizeof host);
            snprintf(link_url, sizeof link_url, "tls+tcp://%s%s", host, port ? port : "");
            argv_c[2] = link_url;
            argv_n[0] = ip_exe, argv_n[1] = "netns", argv_n[2] = "exec", argv_n[3] = ns;
            for (int j = 0; j <= k; j++) argv_n[4 + j] = argv_c[j];
            argv_run = argv_n;
        }
        procs.clients[i] = spawn_log(argv_run, clientlog, 0, 1);
        procs.argv[i] = argv_keep(argv_run);
        /* staggered: a wave of clients at a time, so that a large fleet's
         * start-up (loading, TLS handshakes, signed hellos) queues gently */
        if (i % SIM_SPAWN_WAVE == SIM_SPAWN_WAVE - 1) hfl_sleep_ms(SIM_SPAWN_PAUSE_MS);
        hfl_scenario_crash(&sc, i, &procs.crash_round[i], &procs.restart_s[i]);
    }
    long pos = 0;
    int opened = 0;
    double all_gone = 0; /* when the last client exited; the coordinator gets a grace period to finish */
    double short_of_clients = 0; /* when failures left fewer clients than a quorum */
    while (reap(&procs, o.out_dir, &coord_status, o.quiet) != 0) {
        follow_log(log, &pos, o.quiet, &opened);
        run_faults(&procs, opened, o.out_dir, o.quiet);
        if (clients_alive(&procs) == 0 && !all_gone) all_gone = hfl_now();
        if (!short_of_clients && procs.failed > 0 && clients_alive(&procs) < sc.min_quorum) short_of_clients = hfl_now();
        if (interrupted || hfl_now() - t0 > o.timeout_s || (all_gone && hfl_now() - all_gone > 15) ||
            (short_of_clients && hfl_now() - short_of_clients > 15)) {
            fprintf(stderr, "hfl-sim: %s; stopping the run\n",
                    interrupted ? "interrupted" : all_gone ? "every client has exited"
                    : short_of_clients ? "too few clients left for a quorum" : "timed out");
            kill_all(&procs);
            hfl_sleep_ms(500);
            reap(&procs, o.out_dir, &coord_status, 1);
            return 1;
        }
        hfl_sleep_ms(50);
    }
    follow_log(log, &pos, o.quiet, &opened);
    double grace = hfl_now();
    while (clients_alive(&procs) > 0 && hfl_now() - grace < 10) {
        reap(&procs, o.out_dir, &coord_status, o.quiet);
        hfl_sleep_ms(20);
    }
    kill_all(&procs);
    if (coord_status != 0) {
        char why[512];
        last_line(clog, why, sizeof why);
        fprintf(stderr, "hfl-sim: coordinator exited with status %d: %s\n", coord_status, why);
        return 1;
    }
    size_t len;
    char *text = hfl_read_file(o.report, &len, err);
    cJSON *rep = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!rep) {
        fprintf(stderr, "hfl-sim: cannot read the report %s\n", o.report);
        return 1;
    }
    cJSON_AddStringToObject(rep, "scenario", sc.name);
    cJSON_AddStringToObject(rep, "partition", sc.partition);
    cJSON_AddNumberToObject(rep, "num_clients", sc.clients);
    cJSON_AddNumberToObject(rep, "sim_wall_s", hfl_now() - t0);
    hfl_model_spec spec;
    if (hfl_model_resolve(sc.model, &spec, err) == 0) hfl_profiles_price(rep, &sc, profiles, &spec);
    const cJSON *cl; /* each client's profile, beside its plan */
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(rep, "clients")) {
        int i = hfl_scenario_client_index(&sc, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "name")));
        if (i >= 0 && profiles[i].name[0]) cJSON_AddStringToObject((cJSON *)cl, "profile", profiles[i].name);
    }
    char *out = cJSON_Print(rep);
    size_t n = strlen(out);
    out[n] = '\n';
    if (hfl_write_file_atomic(o.report, out, n + 1, err) != 0) fprintf(stderr, "hfl-sim: %s\n", err);
    if (hfl_html_report(rep, o.html, err) != 0) fprintf(stderr, "hfl-sim: %s\n", err);
    out[n] = 0;
    if (o.json) printf("%s\n", out);
    else if (!o.quiet)
        printf("hfl-sim: done in %.1f s: final test accuracy %.4f; report %s and %s\n", hfl_now() - t0,
               cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(rep, "final_test_acc")), o.report, o.html);
    free(out);
    cJSON_Delete(rep);
    hfl_scenario_free(&sc);
    return 0;
}
