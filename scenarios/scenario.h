/* scenario.h: a fleet scenario for hfl-sim, read from JSON.
 *
 * {
 *   "name": "quickstart",      "model": "mlp",
 *   "clients": 10,             "clients_per_round": 10,  "min_quorum": 10,
 *   "rounds": 10,              "local_epochs": 1,        "batch": 32,
 *   "lr": 0.05,                "momentum": 0,            "weight_decay": 0,
 *   "optimizer": "sgd",        "betas": "0.9,0.999",
 *   "partition": "dirichlet:0.5", "codec": "int8",       "block": 256,
 *   "seed": 1,                 "deadline_s": 300,
 *   "downlink": "fp32",        "downlink_delta": false,  "chunk_bytes": 0,
 *   "client_codecs": {"client-3": "topk:0.01"},
 *   "precision": "auto",       "client_memory": {"client-0": "64M"},
 *   "memory_budget_at": {"client-0": "3:32M"},
 *   "device": "auto",          "client_devices": {"client-1": "cpu"},
 *   "clip_norm": "adaptive:2", "max_client_samples": 0,  "max_share": 0.2,
 *   "server_opt": "fedavg",    "strategy": "fedavg",     "sum_on_disk": "auto",
 *   "keep_local_optimizer": false,
 *   "client_attacks": {"client-0": "-10:1000000"},
 *   "profiles": {"gtx1650-4g": 2, "laptop-cpu": 1}, "profile_library": "profiles.json",
 *   "memory_scale": 1,         "crashes": {"client-3": "2:1.5"},
 *   "dropout": 0,              "slow": {"client-2": "4"},
 *   "over_selection": 0,       "late": "drop",  "local_work": "epochs",
 *   "prox_mu": 0,              "async_concurrency": 0,  "pace": 0,
 *   "compute_scale": 1,        "virtual_time": false,   "aggregators": 0
 * }
 * Required: name, model, clients, rounds, partition, codec. Everything else
 * has the default shown (clients_per_round and min_quorum default to
 * clients; client_codecs to none: every client uses "codec"; client_memory to
 * none: every client may use its device's free memory; device is what
 * every client and the coordinator run on, auto, cpu or cuda as their
 * --device, and client_devices overrides it per client; clip_norm,
 * max_client_samples and max_share are the coordinator's --clip-norm (off,
 * adaptive[:C0] or a norm, as a string or a number), --max-client-samples
 * (0: no cap) and --max-share, optimizer and betas its --optimizer (sgd or
 * adamw) and --betas, server_opt, strategy and sum_on_disk its --server-opt,
 * --strategy and --sum-on-disk, keep_local_optimizer its
 * --keep-local-optimizer, with their defaults; client_attacks makes a client
 * Byzantine: hfl-client --attack SCALE[:SAMPLES]; profiles names device
 * profiles from the library (scenarios/profile.h; a path relative to the
 * scenario file, default profiles.json beside it) with how many clients
 * have each, in client order, adding up to clients: a client's memory
 * budget is its profile's memory times memory_scale (so small models feel a
 * small card's pressure) unless client_memory says otherwise, and the report
 * gains simulated times from each profile's throughput and links);
 * memory_budget_at shrinks (or grows) a client's budget from round R on,
 * "R:SIZE" (hfl-client --budget-at; the client needs a budget from
 * client_memory or its profile): before round R trains, a client whose plan
 * no longer fits re-plans, verifies and sends the new plan, listed in the
 * report's "replans", or leaves the run when nothing fits; crashes
 * has hfl-sim kill a client with SIGKILL when round R opens ("R"), and
 * start it again S seconds later ("R:S"); dropout is each client's chance of
 * declining a round (hfl-client --dropout: the round stops waiting for it;
 * simulated time prices it as the deadline, as a silent dropout would
 * cost); slow multiplies a client's simulated training time;
 * over_selection is the coordinator's --over-select F (K (1 + F) drawn, the
 * round closes at K updates; the rest are "late") and late its --late (drop
 * or fold: an update one round late joins the next round at half weight),
 * local_work its --local-work (epochs, or capacity: each client's steps
 * scaled to its speed, a profiled client's being its profile's),
 * local_steps its --local-steps (H optimizer steps a round for every client
 * instead of local_epochs) and lr_schedule its --lr-schedule (constant, or
 * cosine[:WARMUP[:MIN]] over the run's rounds x H steps), prox_mu its
 * --prox-mu (FedProx's proximal term; 0: off), async_concurrency its --async
 * (FedBuff with C clients at once; 0: synchronous rounds), pace a profiled
 * client's --pace (each update held until pace x its simulated time, so
 * updates arrive in the order the profiled devices would send them; 0: as
 * fast as the host trains); compute_scale multiplies the model's FLOPs per
 * sample in simulated time, as memory_scale shrinks budgets (a small model
 * standing in for a large one on the profiled devices); virtual_time has
 * every client report its task's simulated time and the coordinator hold
 * the deadline in simulated time (--virtual-time: an update simulated past
 * it is "missed_deadline", as a real device that slow would be), which needs
 * a profile for every client and synchronous rounds. aggregators N (at most 16) runs the fleet as a tier:
 * hfl-sim starts the root coordinator as usual (without --save-model, which
 * a tier's root does not run) and N aggregators (hfl-coordinator
 * --upstream ROOT, with the root's run settings and a certificate of the
 * aggregator role from the throwaway PKI, named aggregator-<a>), and client
 * i dials aggregator i % N; the root draws and aggregates across the tier
 * (coordinator/tier.c), so the run's model is the flat run's. Clients are
 * named client-0 .. client-<clients-1>. Unknown keys are an error, so a typo never silently falls back. */
#ifndef HFL_SCENARIO_H
#define HFL_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#define HFL_SIM_MAX_AGGREGATORS 16 /* "aggregators" */

typedef struct {
    char name[64];
    char model[1024]; /* built-in name or JSON spec file */
    char prepare[512]; /* the commands that make the scenario's shards ("" when it reads the images) */
    int clients, clients_per_round, min_quorum, rounds, local_epochs, batch;
    double lr, momentum, weight_decay, deadline_s;
    char partition[64];
    char codec[32];
    char downlink[32];
    int downlink_delta;
    int keep_local_optimizer;  /* the coordinator's --keep-local-optimizer */
    char (*client_codec)[32]; /* [clients]: "" for the run's codec; malloc'd, free with hfl_scenario_free */
    char (*client_memory)[32]; /* [clients]: "" for the device's free memory, else a size like "64M" */
    char (*client_memory_at)[32]; /* [clients]: "" or "R:SIZE": the budget from round R on (--budget-at) */
    char precision[8];         /* auto, fp32, bf16, fp16: what every client may train in */
    char device[8];            /* auto, cpu, cuda: --device of the coordinator and every client */
    char (*client_device)[32]; /* [clients]: "" for device, else auto, cpu or cuda */
    char (*client_attack)[32]; /* [clients]: "" for an honest client, else --attack's SCALE[:SAMPLES] */
    int block;
    uint64_t seed;
    char clip_norm[32];        /* "" for the coordinator's default */
    double chunk_bytes;        /* the coordinator's --chunk-bytes (4096..1G); 0: absent, its default */
    double max_client_samples; /* 0: no cap */
    double max_share;          /* 0: the coordinator's default */
    double over_selection;     /* the coordinator's --over-select: draw K (1 + F), close at K */
    char late[16];             /* "" (the coordinator's default, drop) or its --late: drop, fold */
    char local_work[16];       /* "" (epochs) or the coordinator's --local-work: epochs, capacity */
    double local_steps;        /* the coordinator's --local-steps H (0: local_epochs) */
    char lr_schedule[64];      /* "" (constant) or the coordinator's --lr-schedule */
    double prox_mu;            /* the coordinator's --prox-mu (0: off) */
    double async_concurrency;  /* the coordinator's --async C (0: synchronous rounds) */
    double pace;               /* profiled clients' --pace (0: off) */
    char server_opt[32];       /* "" for the coordinator's default */
    char optimizer[16];        /* "" (sgd) or the coordinator's --optimizer */
    char betas[64];            /* "" or the coordinator's --betas B1,B2 */
    char strategy[32];         /* "" for the coordinator's default */
    char sum_on_disk[8];       /* the coordinator's --sum-on-disk; "" for its default */
    char (*client_profile)[32]; /* [clients]: "" for none, else a profile's name */
    char profile_library[1024]; /* "" for profiles.json beside the scenario */
    double memory_scale;       /* profile memory -> budget factor (1) */
    char (*client_crash)[32];  /* [clients]: "" or "R[:S]": killed when round R opens, restarted after S s */
    char (*client_slow)[32];   /* [clients]: "" or a factor >= 1 on simulated training time */
    double dropout;            /* each client's chance of declining a round */
    double compute_scale;      /* FLOPs per sample -> simulated training time factor (1) */
    int virtual_time;          /* the coordinator's --virtual-time: deadlines in simulated time */
    int secure_agg, client_clip; /* the coordinator's --secure-agg, --client-clip (proto/secagg.h) */
    double fixed_bits;         /* its --fixed-bits (0: its default) */
    double dp_noise, dp_epsilon, dp_delta; /* its --dp-noise, --dp-epsilon, --dp-delta (0: not given) */
    double aggregators; /* a tier: this many aggregator coordinators under the root (0: none) */
} hfl_scenario;

int hfl_scenario_load(const char *path, hfl_scenario *sc, char *err);
int hfl_scenario_parse(const char *text, size_t len, hfl_scenario *sc, char *err);
void hfl_scenario_free(hfl_scenario *sc);
/* Client i's crash: the round that kills it (0: none) and the seconds until
 * it is started again (-1: never); -1 when its "crashes" entry is malformed. */
int hfl_scenario_crash(const hfl_scenario *sc, int i, int *round, double *restart_s);
/* i for a client named "client-<i>" of the scenario, else -1. */
int hfl_scenario_client_index(const hfl_scenario *sc, const char *name);

#endif
