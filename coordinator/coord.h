/* coord.h: the coordinator's state, shared by its files.
 *
 * auth.c      proof of identity at hello, revocation, session tokens
 *             (challenges.h: pending challenges; rate.h: the hello rate limits)
 * registry.c  clients that said hello (id, name, device, plan, samples)
 * rounds.c    the round engine: selection, tasks, updates into the
 *             aggregator (aggregate.h: clipped, exact), closing a round
 *             (FedAvg, evaluation, the adaptive clip)
 * overdue.c   clients that let a deadline pass with a task in hand: benched
 * downlink.c  the global model to clients: full or as a delta, fp32/fp16/bf16
 * server.c    NNG rep0 contexts with async I/O; decodes each request,
 *             dispatches it to the round engine under one lock, replies at once
 * conns.c     connections per address and idle connections, bounded
 * report.c    the JSON-lines log and the final report
 * persist.c   the state at every round's end (--state-dir), and the restart from it
 * options.c   the options table (util/options.h) and the combinations refused at start
 * tier.c      a tier's root: aggregators' syncs (their clients, the draw's share) and partial sums
 * upstream.c  a tier's aggregator (--upstream): its link to the root, the rounds the root assigns
 * main.c      start-up and the main loop that closes rounds on quorum or deadline
 *
 * One mutex guards everything below; NNG's callbacks take it for the short
 * time a request needs, the main loop takes it to close a round. */
#ifndef HFL_COORD_H
#define HFL_COORD_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "compress/codec.h"
#include "coordinator/aggregate.h"
#include "coordinator/robust.h"
#include "coordinator/round_record.h"
#include "coordinator/server_opt.h"
#include "data/idx.h"
#include "kernels/device.h"
#include "model/lr_schedule.h"
#include "model/model.h"
#include "proto/identity.h"
#include "proto/messages.h"
#include "proto/metrics_http.h"
#include "proto/transport.h"
#include "util/util.h"

#define COORD_MAX_CLIENTS 16384 /* registry slots: a fleet of 10,000 with room for churn */
#define COORD_MAX_CLIENTS_STR "16384"
_Static_assert(COORD_MAX_CLIENTS == HFL_WIRE_MAX_CLIENTS, "the session table checks ids against the registry's size");
_Static_assert(HFL_RECORD_MAX_ROWS >= COORD_MAX_CLIENTS, "a saved round lists at most every client");
#define HFL_EVAL_ARENA_BYTES ((size_t)256 << 20) /* the evaluation trainer's arena, at most (batch >= 1) */
#define DOWNLINK_HISTORY 4 /* global versions kept to send deltas against */
#define REGISTRY_MAX_CODECS 8 /* distinct codecs clients may ask for in one run */
/* hello challenges awaiting their signed answer (challenges.h): two for
 * each connection the coordinator can hold (conns.c's CONNS_MAX) */
#define COORD_MAX_PENDING 8192
/* --hello-rate's defaults: challenges a connection and a source address may
 * obtain per second (a client needs two at start and one per token expiry
 * or restart; a fleet of 1,000 simulated clients on one address needs 2,000
 * at start, 10 s at this rate). Each costs a certificate check and an ECDSA
 * signature (~1 ms of a core), so one address costs at most a fifth of a
 * core, one connection half a percent. */
#define COORD_HELLO_RATE_STR "5:200"
/* Defaults that keep a round from waiting on whoever does not answer (the
 * README's defaults paragraph): over-selection, after Bonawitz et al. 2019
 * ("Towards Federated Learning at Scale: System Design", whose server selects
 * 130% of the devices a round needs so that dropouts do not cost the round), and at the deadline
 * the round is aggregated once half its draw has reported: that is a FedAvg
 * step as a round drawing half as many would take (McMahan et al. 2017's C
 * halved for one round), where failing it throws the updates that came
 * away. */
#define COORD_OVER_SELECT_DEFAULT 0.3
#define COORD_OVER_SELECT_STR "0.3"
#define COORD_QUORUM_FRACTION_STR "0.5"
/* --async: a task more than this many aggregations old is given up on (its
 * update refused, its client drawable again). FedBuff's staleness weight at
 * 8 is 1/3 (Nguyen et al. 2022 saw most staleness far below that). */
#define COORD_ASYNC_MAX_STALENESS 8
#define COORD_ASYNC_MAX_STALENESS_STR "8"

typedef struct {
    /* run settings */
    char model[1024]; /* built-in name or JSON spec file */
    char codec[32];
    char downlink[32];  /* fp32, fp16, bf16 */
    int downlink_delta; /* send deltas against the version a client holds */
    uint64_t chunk_bytes; /* --chunk-bytes: weights and updates larger than this go in chunks (0: never) */
    char spool_dir[1024]; /* --spool-dir: where chunked updates are spooled (spool.c's spool_dir) */
    uint32_t block;
    int rounds;
    int clients_per_round; /* K: clients selected each round */
    int min_quorum;        /* updates needed to aggregate a round at its deadline (0: quorum_fraction of the draw) */
    double quorum_fraction; /* --quorum-fraction: without --min-quorum, the share of the draw that must report */
    int min_clients;       /* the first round waits for this many planned clients (or its deadline) */
    double over_select;    /* draw K (1 + F) and close once K updates arrived (0: draw K, wait for all) */
    int late_fold;         /* --late fold: an update one round late joins the open round at half weight */
    int capacity_work;     /* --local-work capacity: each client's steps scaled to its declared speed */
    int async_concurrency; /* --async C: FedBuff, C clients training at once, a round = K arrivals (0: off) */
    double deadline_s;     /* per round */
    int virtual_time;      /* --virtual-time: an update whose sim_s exceeds deadline_s missed it */
    int local_epochs;
    int local_steps;       /* --local-steps H: every client takes H optimizer steps, not epochs (0: epochs) */
    hfl_lr_schedule lr_schedule; /* --lr-schedule: over the run's rounds x H steps, in every task */
    int batch;
    double lr, momentum, weight_decay;
    hfl_optimizer optimizer; /* --optimizer: the clients' local optimizer (sgd, adamw) */
    double beta1, beta2;     /* --betas: AdamW's */
    double prox_mu;        /* --prox-mu: FedProx's proximal term on every client (0: off) */
    int keep_local_optimizer; /* --keep-local-optimizer: tasks say keep_optimizer */
    uint64_t seed;
    /* bounded trust (rounds.c) */
    double clip_norm;           /* fixed clip, or the adaptive clip's start; 0: no clipping */
    int clip_adaptive;          /* the clip follows the median update norm (Andrew et al. 2021) */
    int64_t max_client_samples; /* a hello's sample claim is capped to this (0: no cap) */
    double max_share;           /* an update's weight is at most this share of its round */
    char server_opt[32];        /* --server-opt (server_opt.h) */
    char strategy[32];          /* --strategy (robust.h) */
    double session_ttl_s;       /* a full registry forgets sessions idle this long */
    double liveness_s;          /* a client silent this long is not drawn */
    double token_ttl_s;         /* a session token expires this long after its hello */
    char revoked_path[1024];    /* the revocation list (reloaded on SIGHUP) */
    char state_dir[1024];       /* --state-dir: persist.c */
    char init_model[1024];      /* --init-model: the first global model, a safetensors file */
    char save_model[1024];      /* --save-model: the global model after every round (safetensors) */
    int max_sessions;           /* registry entries (identities), at most COORD_MAX_CLIENTS */
    int max_conns_per_addr;     /* connections one address may hold (0: any) */
    double hello_rate_conn, hello_rate_addr; /* --hello-rate: challenges per second a connection, an address may obtain (0: any) */
    double idle_s;              /* a connection without a whole message this long is closed */
    double handshake_s;         /* an accepted connection silent this long (not a pipe 6x) is closed */
    int max_inflight;           /* requests handled at once (NNG contexts) */
    int threads;                /* OpenBLAS threads for evaluation */
    uint64_t robust_memory;     /* the most a robust rule may hold decoded (bytes) */
    /* I/O */
    char listen_url[256];
    hfl_tls_opts tls;
    char data_dir[1024];
    char log_path[1024];
    char report_path[1024];
    char ready_path[1024];
    char metrics_addr[256];     /* --metrics: Prometheus and /status over HTTP ("" off) */
    char device[8]; /* --device: auto, cpu, cuda */
    char sum_on_disk[8]; /* --sum-on-disk: auto, on, off (aggregate.h, ON DISK) */
    double linger_s; /* --linger: after the last round, how long clients may still get bye */
    int quiet;
    /* privacy (secagg.h, dp.h) */
    int secure_agg;     /* SECAGG_OFF, SECAGG_CLEAR (--client-clip), SECAGG_MASKED (--secure-agg) */
    int fixed_bits;     /* --fixed-bits F: clients round to 2^-F of the clip's power of two */
    double dp_noise;    /* --dp-noise Z: the noise multiplier (0: no DP unless --dp-epsilon) */
    double dp_epsilon, dp_delta; /* --dp-epsilon E --dp-delta D: the budget (0: none) */
    /* a tier (tier.c, upstream.c) */
    int tier;               /* --tier: this coordinator is a tier's root: it accepts aggregators */
    char upstream[256];     /* --upstream URL: this coordinator is an aggregator of that root ("" : not) */
    char upstream_name[64]; /* --upstream-name: its name at the root under --insecure */
    char upstream_cert[1024]; /* --upstream-cert: its certificate and key (PEM, role aggregator) to the root */
    char upstream_server[64]; /* --upstream-server-name: the root certificate's CN (default localhost) */
} coord_config;

typedef struct {
    char name[64];   /* its identity: the certificate's CN (--insecure: the hello's name) */
    char token[33];  /* random, given in welcome; every later request must carry it */
    double token_expires;
    int revoked;     /* its name is on the revocation list: refused from now on */
    int got_bye;     /* has been told the run is over */
    int has_plan;    /* its hello carried a plan: it knows what it will run, so it may be selected */
    cJSON *hello; /* device, plan, samples as the client reported them */
    int64_t samples;  /* declared, capped by --max-client-samples: what its updates weigh at most */
    int64_t declared; /* as declared in its hello */
    const hfl_codec *codec; /* the run's codec, or the one the client asked for */
    int64_t updates; /* accepted updates */
    double predicted_peak, measured_peak; /* from its updates: the plan's figure and the real one */
    char left[HFL_ERR_LEN]; /* why it left before the run ended (its bye's error), "" while it takes part */
    double last_seen;
    int late_round; /* --late fold, --async: the round it was tasked in and closed without it (0: none) */
    /* overdue.c: its oldest unanswered task, and what letting deadlines pass cost it */
    int task_round;     /* the round of that task (0: none) */
    double task_due;    /* when it is due: sent + --deadline */
    int strikes;        /* deadlines let pass since its last accepted update */
    int overdue;        /* deadlines let pass in all */
    int benched_until;  /* not drawn before this round (0: drawable) */
    /* secagg.c: its certificate as its secure aggregation keys came with it, checked once */
    char *sa_cert;
    struct hfl_peer *sa_peer;
    struct coord_spool *spool; /* uplink.c: the update it is putting in chunks (NULL: none) */
    int64_t put_round;         /* uplink.c: the round its puts are for, and their bytes, resent ones too */
    double put_bytes;
    int aggregator; /* tier.c: a tier's aggregator (its hello said so): sends tier requests, never drawn */
    int via;        /* tier.c: the aggregator that reaches this client; -1: it talks to us directly */
    uint32_t tier_said; /* tier.c, an aggregator's: a hash of the last refusal of its clients said, once */
    int partial_round;  /* tier.c, an aggregator's: the round of its last accepted partial (one a round) */
} coord_client;

/* Why a drawn client's slot is closed without an update (coord_slot.refused). */
enum {
    SLOT_REFUSED = 1,  /* its update was refused: told to skip the round */
    SLOT_DECLINED = 2, /* it declined the task (hfl-client --dropout) */
    SLOT_MISSED = 3,   /* --virtual-time: simulated past the deadline */
    SLOT_DROPPED = 4,  /* it dropped out of secure aggregation's phases */
};

/* One client's part in the open round, by client id (rounds.c's diagram:
 * idle -> drawn -> tasked -> received, or closed by `refused`). Zeroed when
 * a round opens. */
typedef struct {
    uint8_t selected;  /* drawn */
    uint8_t tasked;    /* sent the round's task */
    uint8_t mid_round; /* --async: drawn when it asked, after the round opened */
    uint8_t received;  /* its update was accepted */
    uint8_t refused;   /* SLOT_*: closed without an update; 0: not */
    int64_t samples_at_select; /* its samples when drawn, capped */
    int64_t declared;          /* and what it declared (an update may not claim more) */
    int64_t share_cap;         /* the most samples its update may weigh (--max-share) */
    int64_t weighed;           /* its accepted update's samples after the caps (what its weight counts) */
    int local_steps;           /* --local-work capacity: its steps (0: epochs) */
    /* its accepted update */
    double samples, weight, norm, loss, train_s, bytes, measured_peak, trained;
    double lr_first, lr_last; /* the client's first and last step's learning rate (0: not said) */
    double sim_s; /* its task's simulated seconds (0: not said) */
    int clipped;
    double bytes_down; /* every task message sent to it this round, short ones too */
    int downloads;     /* of them, those that carried weights (full or delta) */
    int resent;        /* re-downloads it asked for (at most COORD_MAX_RESENDS) */
    double fetched;    /* chunk bytes it fetched (downlink.c caps them alike) */
} coord_slot;

typedef struct {
    int round;         /* 1-based */
    int open;          /* accepting work */
    double opened_at;
    int n_selected;
    int selected[COORD_MAX_CLIENTS]; /* client ids, in draw order */
    coord_slot slot[COORD_MAX_CLIENTS];
    int n_refused, n_declined, n_missed;
    int n_silent;           /* planned clients not drawn: silent for --liveness */
    int n_benched;          /* planned clients not drawn: a task of theirs went overdue (overdue.c) */
    int n_eligible;         /* the live planned clients the round drew from */
    int n_target;           /* updates that close the round (K; n_selected without over-selection) */
    int n_received;
    double samples_planned; /* the selected clients' samples (from their hellos) */
    int64_t weight_samples; /* accepted updates' samples after the share cap: weights sum
                               to weight_samples / samples_planned, exactly */
    int64_t weight_max;     /* the largest of them */
    int64_t cap_total;      /* the selected clients' samples after the share cap */
    double samples_sum;     /* samples behind the accepted updates */
    double clip;            /* this round's clip norm (0: none) */
    double dp_sigma, dp_sigma_count; /* its DP noise on the weighted sum and the count (0: none) */
    int n_clipped;          /* accepted updates scaled down to the clip */
    int n_rule_kept;        /* Krum rules: updates the rule averaged */
    double norms[COORD_MAX_CLIENTS]; /* accepted updates' norms before clipping */
    double work_target;     /* --local-work capacity: the round's median fixed-epoch time (0: epochs) */
    double loss_sum;        /* sample-weighted training loss */
    uint64_t bytes_up, bytes_down;
    int tasks_delta; /* tasks sent as a delta against the client's version */
    int tasks_held;  /* tasks sent without weights: the client held the version */
    int tasks_resent; /* tasks sent again because the client asked for a re-download */
    int tasks_short;  /* pulls from clients already holding the task, answered without weights */
    int n_stale;        /* late updates folded into this round (--late fold, --async) */
    double weight_stale; /* what they add to the divisor: --late fold their capped samples at half
                            weight, --async their samples; either way exact in a double */
    struct {
        int client, from_round;
        double samples, weight, norm, bytes, trained;
    } stale[COORD_MAX_CLIENTS];
    hfl_task_msg task;    /* this round's task settings, the same for every client */
} coord_round;

typedef struct {
    const hfl_codec *codec;
    int delta;
    float *hist[DOWNLINK_HISTORY]; /* with deltas: the global model's trainable part at hist_version[i] */
    int hist_version[DOWNLINK_HISTORY];
    float *scratch;
    uint64_t chunk_bytes; /* --chunk-bytes: larger weights come by fetch, in chunks of this */
    /* this round's encoded weights: [0] full, [1 + slot] the delta from base */
    struct downlink_payload {
        uint8_t *bytes; /* the encoded weights; NULL: not built this round, or a view */
        const uint8_t *view; /* a view instead (chunked fp32 full weights): the payload is
                                head and then these bytes, the global model's own */
        uint8_t head[HFL_CODEC_HEADER_BYTES];
        size_t len;
        int base;
        char sha256[65];
        hfl_chunk_digest *chunks; /* when len > chunk_bytes */
        int n_chunks;
    } pay[DOWNLINK_HISTORY + 1];
} coord_downlink;

/* Why a hello was refused, counted for the report and --metrics. */
enum {
    COORD_HELLO_RATE,      /* --hello-rate: say hello again later */
    COORD_HELLO_CHALLENGE, /* its challenge is not pending (spent, expired, displaced): say hello again */
    COORD_HELLO_FULL,      /* the registry is full: say hello again later */
    COORD_HELLO_DENIED,    /* a definite refusal: revoked, another CA, wrong role, bad fields */
    COORD_HELLO_REFUSED_KINDS
};

/* Why an update was refused (rounds_update), counted for --metrics. */
enum {
    COORD_REJ_MALFORMED, /* its meta */
    COORD_REJ_ROUND,     /* for a round that is not open */
    COORD_REJ_TASK,      /* not tasked, a second one, or told to skip */
    COORD_REJ_SAMPLES,   /* claims more samples than declared */
    COORD_REJ_CODEC,     /* another codec than its client's */
    COORD_REJ_PAYLOAD,   /* does not decode, or not finite */
    COORD_REJ_LATE,      /* a late update that could not be folded */
    COORD_REJ_STORE,     /* the coordinator's own disk would not keep it (the sum on disk) */
    COORD_REJ_KINDS
};


typedef struct {
    coord_config cfg;
    pthread_mutex_t lock;
    hfl_identity *self; /* our certificate and key (NULL with --insecure) */
    hfl_trust *trust;   /* the CA and the revoked names (NULL with --insecure) */
    char instance[HFL_ID_NONCE_HEX + 1]; /* random per process: clients notice a restart */
    struct coord_challenges *challenges; /* pending hello challenges (challenges.h; under lock) */
    uint64_t challenges_issued;
    uint64_t hellos_refused[COORD_HELLO_REFUSED_KINDS]; /* by kind (under lock) */
    hfl_model_spec spec;
    char *spec_json; /* the spec as JSON, sent in every welcome */
    const hfl_codec *codec;
    float *global; /* host copy of the global model */
    int version;   /* rounds aggregated into global */
    int n_inflight; /* --async: clients training a task of an earlier round (late_round != 0) */
    double work_target; /* --local-work capacity: the last round's target (r.work_target) */
    const hfl_backend *be; /* evaluation and aggregation run here */
    hfl_device_info dev;   /* the device be runs on */
    hfl_trainer *eval;
    hfl_dataset test;
    hfl_resident_set *test_dev; /* the test set in a device's memory (evaluate.c), or NULL */
    int test_dev_tried;
    coord_client clients[COORD_MAX_CLIENTS];
    int n_clients;
    const hfl_codec *client_codecs[REGISTRY_MAX_CODECS]; /* codecs clients asked for */
    int n_client_codecs;
    coord_round r;
    hfl_agg agg;       /* the round's exact sum of clipped, weighted updates */
    double clip;       /* the next round's clip norm (adaptive: moves after each round) */
    hfl_server_opt sopt; /* how the aggregate moves the global model */
    hfl_rule rule;       /* fedavg (the weighted exact sum) or a robust rule over held rows */
    coord_downlink down;
    int done;          /* all rounds finished: pulls get bye */
    int byes_sent; /* distinct clients told the run is over */
    uint64_t rejected; /* bad messages answered with an error */
    uint64_t rejected_update[COORD_REJ_KINDS]; /* the updates among them, by kind */
    hfl_hist round_hist, agg_hist, eval_hist; /* --metrics: round wall, aggregation, evaluation (under lock) */
    hfl_metrics_server *metrics; /* --metrics: the HTTP listener (NULL without) */
    double started;
    round_log rounds;  /* every closed round, for the report and the state dir */
    FILE *log;
    double final_acc;
    int restarts; /* times this run was continued from its state dir */
    uint64_t conns_refused, conns_reaped; /* conns.c: over the per-address limit; idle */
    uint64_t conns_unshaken;              /* conns.c: no handshake within --handshake-timeout */
    char final_sha256[65]; /* the global model's SHA-256 after the last round closed */
    char stop_reason[HFL_ERR_LEN]; /* why the run stopped before its rounds were done ("": it did not) */
    char initial_sha256[65]; /* the SHA-256 of the model the run starts from (seed or --init-model) */
    pthread_mutex_t report_lock; /* one report write at a time (report_store) */
    pthread_cond_t tick; /* with lock: wakes the main loop early (a round complete, a round published) */
    struct coord_eval *evq; /* the evaluation thread (evaluate.c); NULL: inline */
    struct coord_secagg *sa; /* the open round's secure aggregation (secagg.c), NULL without */
    struct coord_dp *dp;     /* differential privacy (dp_round.c), NULL without */
    int done_pending; /* the last round closed; done once its evaluation is published */
    cJSON *replans;      /* replan.c: the plans clients changed, in order (NULL: none yet) */
    int replans_dropped; /* those past COORD_MAX_REPLANS, counted only */
} coord;

/* auth.c */
int auth_init(coord *c, const char *revoked_file, char *err);
void auth_free(coord *c);
/* A hello's proof of identity: 1 with the proven name (go on to the
 * registry), 0 with *reply set (a challenge to answer), -1 with err for a
 * definite refusal, -2 with err when saying hello again may succeed (its
 * challenge is not pending). conn and addr: the connection it came on and
 * its folded source address (conns.c), which bound the challenges kept.
 * Called without c->lock (it takes it briefly itself). */
int auth_hello(coord *c, const hfl_msg *m, uint32_t conn, uint64_t addr, char name[HFL_ID_NAME_MAX + 1],
               uint8_t **reply, size_t *len, char *err);
/* Whether the hello asks for a challenge (a first hello, with certificates). */
int auth_wants_challenge(const coord *c, const hfl_msg *m);
void auth_reload(coord *c); /* SIGHUP: re-reads the revocation list and applies it */
int auth_equal(const char *a, const char *b);

/* registry.c */
/* Remembers a codec a client asked for (up to REGISTRY_MAX_CODECS). */
void registry_intern_codec(coord *c, const hfl_codec *codec);
/* Registers (or renews) the session of the proven identity `name`; returns its id or -1. */
int registry_hello(coord *c, const char *name, const cJSON *meta, char *err);
/* The registered client called name, or -1. */
int registry_find(const coord *c, const char *name);
/* Whether the registry has (or can make) room for `name`: when it has not,
 * a refused hello may succeed later. */
int registry_has_room(const coord *c, const char *name);
/* Checks a request's client_id and token; returns the id, or -1 with err and
 * *reauth set when saying hello again would help (unknown, wrong or expired token). */
int registry_check(const coord *c, const cJSON *meta, int *reauth, char *err);
/* A client's own bye: with an `error` (e.g. a broken memory budget) it
 * leaves the run, is drawn no more, and the report keeps the reason and its
 * peak figures. The reply is BYE; -1 with err when the meta is malformed. */
int registry_leave(coord *c, int id, const cJSON *meta, char *err);
cJSON *registry_report(const coord *c);
/* The fleet's overhead outside the arena for a device name: the median of
 * what clients with measurements reported in their plans; -1 when none. */
double registry_overhead_estimate(const coord *c, const char *device);

/* replan.c: a client's new plan from its pull (re-planned at plan_round, 0:
 * not said, or past the open round: the open round) replaces the one on
 * its record and is logged; the log for the report. */
#define COORD_MAX_REPLANS 1024
void replan_take(coord *c, int id, const cJSON *plan, int64_t plan_round);
cJSON *replan_report(const coord *c);

/* Bounded trust defaults: the adaptive clip's start (a quickstart update's
 * norm is about 1-3; the clip moves to the median within a few rounds). */
#define COORD_CLIP_DEFAULT 2.0
#define COORD_CLIP_DEFAULT_STR "2"
/* --max-share's default: no update weighs more than a fifth of its round, so
 * one client claiming huge data moves a round at most as much as a fifth of
 * a clipped step (test_poison: 1000.0 in every weight, 100M samples claimed,
 * moves round 2's accuracy by 0.25 points; at 0.5 it moved it by 4). Rounds
 * of 5 or more equal clients are not affected. In a round closed with some
 * updates missing, the divisor grows (up to the round's whole capped weight)
 * until the largest update weighs at most F of it (rounds.c). */
#define COORD_MAX_SHARE_STR "0.2"
/* Without clipping, no element of an update may exceed this (aggregate.h). */
#define COORD_VALUE_BOUND 1048576.0
/* --sum-on-disk auto keeps a sum of this many bytes (8 a trainable value)
 * or more on disk: 32M values, where the int64 sum is 256 MiB */
#define COORD_DISK_SUM_BYTES ((size_t)256 << 20)
/* --clip-norm's value into cfg: "off", "adaptive[:C0]" or a number; err on junk. */
void coord_parse_clip(const char *s, coord_config *cfg, char *err);
/* options.c: the command line (and --config) into cfg, checked; -1 with err.
 * --help and --print-config print and exit 0. */
int coord_options_parse(int argc, char **argv, coord_config *cfg, char *err);

/* rounds.c */
int rounds_init(coord *c, char *err);
/* sum_place.c: --sum-on-disk, the sum moved to a file in the spool
 * directory where it applies (aggregate.h, ON DISK); after persist_load,
 * which makes the state directory. -1 with err. */
int sum_place(coord *c, char *err);
/* Replies (malloc'd encoded messages) to pull and update requests. */
uint8_t *rounds_pull(coord *c, int id, int64_t have_version, size_t *len);
uint8_t *rounds_update(coord *c, int id, const cJSON *meta, const uint8_t *payload, size_t plen,
                       size_t msg_bytes, size_t *len);
/* A pull from a client that holds the open round's task already asks for
 * it again: it gets a short task (weights "sent", none attached), unless it
 * asks for a re-download (rounds_pull_again), which it gets this many times
 * a round; past that it is told to skip the round. */
#define COORD_MAX_RESENDS 1
uint8_t *rounds_pull_again(coord *c, int id, int64_t have_version, size_t *len);
/* Whether a pull from id would get more than "wait": a task, or bye. */
int rounds_pull_ready(const coord *c, int id);
#define COORD_WAIT_MS 200 /* a WAIT's usual ms (coord_wait_reply) */
/* Opens, closes or abandons rounds as quorum and deadline say; called by the
 * main loop. On an aggregator (--upstream) it does nothing: upstream.c
 * opens and closes its rounds as the root assigns them. */
void rounds_tick(coord *c);
/* An aggregator's side of rounds (rounds.c, with c->lock; upstream.c drives them). */
/* The root's global model of `version` (n_params floats) replaces ours, as a round's step would. */
void rounds_adopt(coord *c, const void *global, int version);
/* Opens the root's round a as ours: its task, clip and scale, its divisor,
 * and its drawn clients of ours with their caps. -1 with err (nothing
 * opened) when the scale differs or the task is not ours to run. */
int rounds_assign(coord *c, const hfl_tier_sync_reply_msg *a, char *err);
/* 1 when the open round is over here: every drawn client final, or its deadline near. */
int rounds_tier_ready(const coord *c);
/* Closes the open round to updates and writes its rows (hfl_tier_row, the
 * drawn clients that ended) and its sum (n_trainable values, malloc'd). */
void rounds_tier_close(coord *c, hfl_wire_list *rows, int64_t **sum);

/* upstream.c: an aggregator's link to its root (a thread). */
typedef struct coord_upstream coord_upstream;
coord_upstream *upstream_start(coord *c, char *err);
void upstream_stop(coord_upstream *u);

/* overdue.c */
void overdue_tasked(coord *c, int id);                  /* a task of the open round went out to id */
void overdue_answered(coord *c, int id, int64_t round); /* id sent an update or a decline for round */
void overdue_progress(coord *c, int id);                /* id's update was accepted */
void overdue_judge(coord *c, int next_round);           /* before next_round's draw: strikes for tasks past due */
int overdue_benched(const coord *c, int id, int round); /* id may not be drawn in round */

/* downlink.c */
int downlink_init(coord *c, const char *codec_name, int delta, uint64_t chunk_bytes, char *err);
void downlink_record(coord *c);      /* after the global model moved to a new version */
void downlink_reset_cache(coord *c); /* at a round's start */
void downlink_free(coord *c);        /* all of it: a process exits without it; tests set up again */
/* How a task carries the weights: whole, as a delta from the version the
 * client holds, or not at all when it holds the current version already
 * (it trained on it, or started from the same file: hfl-client --init-model). */
enum { DOWNLINK_FULL = 0, DOWNLINK_DELTA = 1, DOWNLINK_HELD = 2 };
/* A TASK with the weights for a client holding have_version (*kind says
 * how), encoded once a round per base version; weights larger than
 * cfg.chunk_bytes are left out, for the client to fetch. */
uint8_t *downlink_task(coord *c, const hfl_task_msg *task, int64_t have_version, size_t *len, int *kind);
/* A FETCH reply: the chunk id asks for (meta: hfl_fetch_msg) of the open
 * round's weights, or an error reply of one line. */
uint8_t *downlink_fetch(coord *c, int id, const cJSON *meta, size_t *len);
/* A TASK without weights ("sent": base_version is the task's version), for
 * a client that was sent this task already. */
uint8_t *downlink_sent(coord *c, const hfl_task_msg *task, size_t *len);

/* uplink.c: updates that come in chunks (docs/protocol.md, "Chunked updates"). */
size_t coord_max_payload(const coord *c); /* the longest update payload this model can have */
/* A PUT reply (meta: hfl_put_msg; chunk: its n bytes; msg_bytes: the
 * message's): the chunk spooled, and the bytes held; or an error reply of
 * one line (docs/protocol.md, "Chunked updates", says which refusals also
 * drop the spool or close the client's round). */
uint8_t *uplink_put(coord *c, int id, const cJSON *meta, const uint8_t *chunk, size_t n, size_t msg_bytes,
                    size_t *len);
/* An UPDATE's reply: rounds_update on its payload, or, when it names
 * payload_bytes, on its spooled payload once that is whole and matches its
 * digest (the spool is dropped after). n: the message's bytes. */
uint8_t *uplink_update(coord *c, int id, const hfl_msg *m, size_t n, size_t *len);
/* spool.c (spool.h): the file an update in chunks is held in. */
void spool_sweep(coord *c);        /* drops the spools no round can take any more (at a round's open) */
void spool_drop(coord_client *cl); /* its spool, if any */
/* 1 when an update of client id for `round`, earlier than the open one,
 * would be folded into the open round (--late fold, --async): the round
 * engine's fold and the spool's acceptance share it. */
int late_fold_ok(const coord *c, int id, int64_t round);
int spool_check_dir(const coord *c, char *err); /* the spool directory takes a file: 0, or -1 with err */

/* events.c: the JSON-lines event log */
void events_log(coord *c, cJSON *event); /* takes ownership */

/* report.c */
int report_write(coord *c, char *err);         /* render (needs c->lock) and store */
char *report_render(coord *c, size_t *len);   /* the report's text (malloc'd; NULL out of memory); needs c->lock */
/* Writes a rendered report (freeing it) atomically; serialised by
 * c->report_lock, so it may run without c->lock. */
int report_store(coord *c, char *text, size_t len, char *err);
/* Publishes c->rounds's entry i, a finished round (with c->lock): its event,
 * progress line and the report (rendered here, written by the caller when
 * text is given). Evaluation publishes through it, never through the round
 * engine. */
void report_publish_round(coord *c, int i, char **text, size_t *len);

/* evaluate.c: a closed round's evaluation runs on its own thread, so the
 * next round opens at once; until it is done the round is not published
 * (event, progress line, report) and no later round closes. */
int eval_start(coord *c, char *err); /* without it, rounds evaluate inline */
void eval_stop(coord *c);            /* lets the evaluation in hand finish */
/* With c->lock: evaluates the global model for c->rounds's entry i (its
 * test_acc, test_loss) and publishes the round, now or on the thread. */
void eval_round(coord *c, int i);
int eval_busy(coord *c);             /* with c->lock */
/* After a state is loaded and the log opened: a last round saved before its
 * evaluation is evaluated and published now. */
void eval_fill_pending(coord *c);

/* persist.c */
int persist_save(coord *c, char *err); /* at a round's end; no-op without --state-dir */
/* Continues a run from --state-dir when it holds one (*resumed = 1); -1 with
 * err when the state is damaged beyond its fallback or from another run. */
int persist_load(coord *c, int *resumed, char *err);

/* conns.c */
typedef struct coord_conns coord_conns;
coord_conns *conns_start(coord *c, nng_socket sock, int port, char *err); /* port: the listener's TCP port, 0: none */
void conns_seen(coord_conns *t, nng_pipe p); /* a whole message arrived on p */
/* --hello-rate: 1 when p's connection and its address may obtain a
 * challenge now (one is then taken from each), else 0 with *wait_s until
 * they may. */
int conns_hello_allowed(coord_conns *t, nng_pipe p, double *wait_s);
uint64_t conns_address(nng_pipe p); /* p's source address, folded (0: unknown) */
void conns_reap(coord_conns *t);             /* closes connections idle or not handshaken in time */
void conns_stop(coord_conns *t);             /* after the socket is closed */

/* server.c */
typedef struct coord_server coord_server;
coord_server *server_start(coord *c, int *port, char *err);
void server_reap(coord_server *s); /* from the main loop: idle connections */
/* From the main loop, with c->lock: answers held pulls whose client has work
 * now or whose hold ended. */
void server_wake(coord_server *s);
void server_stop(coord_server *s);

/* secagg.c: the open round's secure aggregation (secagg.h) */
typedef struct coord_secagg coord_secagg;
/* After the draw: the round's members, ring and graph; sigma, sigma_count:
 * the round's DP noise (0: none), shared among the clients so that any
 * max(threshold, quorum) of them add it whole. -1 with err when the ring
 * cannot hold the sum. */
int secagg_round_open(coord *c, double sigma, double sigma_count, int quorum, char *err);
void secagg_free(coord *c);
/* At start: -1 with err when the largest draw's ring (weights summing to 1,
 * the largest weight --max-share, DP noise at its multiplier) would need
 * more bits than a client can round exactly: such settings could wrap. */
int secagg_check_settings(const coord *c, char *err);
void secagg_task(const coord *c, hfl_task_secagg *out); /* the task's "secagg" */
/* A SECAGG message of msg_bytes (counted with its reply in the report). */
uint8_t *secagg_request(coord *c, int id, const cJSON *meta, size_t msg_bytes, size_t *len);
/* A member's input (the packed ring): added to the sum; -1 with err. */
int secagg_input(coord *c, int id, const uint8_t *payload, size_t plen, char *err);
/* At the round's close: 1 when the sum is in the aggregator, 0 while
 * unmasking goes on, -1 with why when the round fails (fewer inputs than
 * the threshold or the quorum, too few shares). */
int secagg_ready(coord *c, int quorum, char *why, size_t cap);
int secagg_unmasking(const coord *c);
/* 1 with why when a phase left too few clients. */
int secagg_failed(coord *c, char *why, size_t cap);
void secagg_tick(coord *c);                /* closes phases whose time ran out */
double secagg_phase_s(const coord *c);     /* how long the keys, shares and unmask phases wait */
double secagg_count(const coord *c);       /* the sum's count of norms at most the clip */
int secagg_report(const coord *c, round_secagg *x); /* 1 and the round's figures in x; 0 without */

/* dp_round.c: client-level differential privacy in rounds (dp.h) */
typedef struct coord_dp coord_dp;
int dp_init(coord *c, int draw, char *err); /* nothing without --dp-noise or --dp-epsilon */
void dp_free(coord *c); /* a process exits without it; for tests that set up DP again */
/* The open round's noise: on the weighted sum (z_d w_max C) and on the count. */
void dp_round_sigma(const coord *c, double *sigma, double *sigma_count);
/* 0 with why when one more round would pass --dp-epsilon. */
int dp_budget_left(coord *c, char *why, size_t cap);
int dp_add_central(coord *c, double sigma, char *err); /* N(0, sigma^2) into the aggregator's sum */
double dp_noised_count(coord *c, double count);       /* central adaptive clipping's noised count */
int dp_charge(coord *c, round_dp *o); /* the round into the accountant: 1 and its spend in o; 0 without DP */
int dp_epsilon(const coord *c, double *eps, double *delta); /* 1 and the spend so far, 0 without DP */
double dp_multiplier(const coord *c);  /* the update's noise multiplier z_d (0 without DP) */
double dp_count_sigma(const coord *c); /* the count's noise sigma_b (0 without DP or adaptive clipping) */
int dp_rounds_charged(const coord *c);   /* persist.c: rounds the accountant holds */
void dp_restore(coord *c, int rounds);   /* a continued run's accountant: `rounds` charged already */

/* reply.c: replies any handler gives (proto/messages.h). */
uint8_t *coord_error_reply(const char *msg, size_t *len);
uint8_t *coord_skip_reply(const char *msg, int skip, size_t *len); /* an error saying skip_round true or false */
uint8_t *coord_wait_reply(int ms, size_t *len); /* come back in ms (0: at once, after a held pull) */
/* An ack of an update for round; folded_into > 0: a late one, folded into that round. */
uint8_t *coord_ack_reply(int round, int missed_deadline, int folded_into, size_t *len);
uint8_t *coord_bye_reply(const char *reason, size_t *len); /* reason NULL: none */
/* An error reply telling the client to say hello again (its session is
 * unknown or stale, its challenge gone, or it must slow down): `reauth`
 * true, and `retry_ms` when retry_ms > 0. */
uint8_t *coord_reauth_reply(const char *msg, size_t *len);
uint8_t *coord_retry_reply(const char *msg, int retry_ms, size_t *len);

/* tier.c: the root's side of a tier (aggregators: upstream.c). */
/* NULL, or the setting of cfg a tier cannot run with (named as its option). */
const char *tier_unsupported(const coord_config *cfg);
/* A TIER request (sync or partial) from client id, an aggregator; the reply,
 * or an error of one line with nothing touched. */
uint8_t *tier_request(coord *c, int id, const hfl_msg *m, size_t *len);

/* metrics.c: --metrics ADDR ([http://]HOST:PORT), Prometheus's text format
 * on /metrics and a JSON summary on /status. */
int metrics_start(coord *c, const char *addr, char *err);
void metrics_stop(coord *c);

#endif
