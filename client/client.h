/* client.h: the pieces of hfl-client.
 *
 * main.c   options, device probe, data, and the session's state machine (hello, plan, pull, task, update, rejoin)
 * session.c  the session's connection: the first dial, requests, a fresh dial after a failed one
 * train.c  one round of local training and the encoded update it produces
 * state.c  the state file that keeps the error-feedback residual across restarts
 * plan_cli.c  --plan: the candidate table, the choice, and --verify measurements
 * trial.c     --plan --trial-step: choose, verify and train one step, offline
 * handshake.c hello, welcome, and the plan chosen between them (plan/choose.h) */
#ifndef HFL_CLIENT_H
#define HFL_CLIENT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"
#include "kernels/device.h"
#include "proto/hello.h"
#include "proto/messages.h"
#include "proto/metrics_http.h"
#include "proto/transport.h"
#include "data/idx.h"
#include "model/lr_schedule.h"
#include "model/model.h"
#include "plan/choose.h"

/* --metrics: what the client has done, counted by the training loop under
 * lock and read by the HTTP threads (client/metrics.c). */
typedef struct {
    pthread_mutex_t lock;
    char name[64];
    int round;
    double tasks, declined, updates_sent, updates_refused, samples_trained, bytes_up, bytes_down;
    double loss, budget, predicted_peak, measured_peak;
    hfl_hist train_hist;
} client_metrics;

typedef struct {
    int round;
    int local_epochs;
    int local_steps; /* > 0: exactly this many optimizer steps (--local-steps, capacity-aware work), not the epochs */
    int batch;
    double lr, momentum, weight_decay;
    hfl_lr_schedule lr_schedule; /* lr is its peak; step lr_step0 + s is this task's step s */
    int64_t lr_step0;
    double prox_mu;            /* FedProx's mu (0: plain local SGD) */
    hfl_optimizer optimizer;   /* sgd, or adamw with beta1, beta2 (model/model.h, OPTIMIZERS) */
    double beta1, beta2;
    int keep_optimizer;        /* train on from the optimizer state the last round left (--keep-local-optimizer) */
    double received_at;        /* hfl_now() when the task arrived (--pace) */
    size_t task_bytes;         /* the task message's size (--pace) */
    uint64_t seed;
    uint32_t block;
    const hfl_codec *codec;
    double deadline_s;         /* the round's deadline, from when the task arrived */
    int secagg;                /* proto/secagg.h's SECAGG_*: the update goes up as a ring vector */
    int secagg_bits, secagg_shift; /* the ring the task announced */
} client_task;

/* The last update this client made, kept (and saved with the residual) so
 * that a task for the same round and model version, after a restart of the
 * coordinator or of this client, is answered with the same bytes instead of
 * training again: the residual has already moved past it. */
typedef struct {
    int round, version; /* the task it answers; round 0: none */
    double loss, seconds;
    double sim_s;       /* its task's simulated time (--link), 0 when not simulated */
    uint8_t *bytes;     /* malloc'd */
    size_t len;
} client_pending;

typedef struct {
    hfl_model_spec spec;
    const hfl_backend *be; /* what the trainer runs on (--device, kernels/select.h); NULL: the CPU */
    hfl_trainer *trainer;
    int trainer_batch;
    hfl_dataset data; /* this client's share */
    int client_id;    /* the coordinator's id for us: order of arrival */
    char token[33];   /* from the welcome; proves we are client_id */
    uint32_t stream;  /* hash of our name: keys our randomness, the same in every run */
    float *global;    /* the weights the last task came with: model version held_version */
    int held_version; /* -1 before the first task */
    float *local;     /* a device trainer's trainable part read back for its delta (made at its first round; NULL on the CPU, whose delta is made in the trainer's masters) */
    float *residual;  /* error feedback over the trainable part, kept across rounds */
    hfl_plan *plan;          /* the step this client runs, chosen to fit its budget */
    hfl_candidate chosen;    /* the chooser's row for it: predicted peak, samples/s */
    hfl_mem_budget budget;   /* the one budget object: what was chosen within, and every breach check */
    uint64_t process_bytes;  /* a GPU: this process's device memory (NVML) at the first step; 0 unknown */
    hfl_device_cost cost;    /* a GPU's per-process cost (plan/device_cost.h): known, every
                                memory figure on the GPU is NVML's less it */
    int replanned;           /* the plan was chosen again mid-run (client/replan.c): its first step is not measured */
    uint64_t rss_base;       /* the CPU: resident bytes before the trainer existed (0 unknown; client/replan.c) */
    int optimizer_kept;      /* 1 + the optimizer whose state the trainer holds from a finished round; 0: none */
    int optimizer_kept_round; /* that round */
    int optimizer_from_round; /* the round whose optimizer state the last round trained on from; 0: from zero */
    int measured_batch;      /* samples in the first step (budget.measured_peak: its memory) */
    int64_t trained;         /* samples trained in the last round (its optimizer steps x their rows) */
    double lr_first, lr_last; /* the learning rate of its first and last optimizer step (--lr-schedule) */
    double attack_scale;     /* --attack (simulation only): see client_options */
    int64_t claimed;         /* the samples this client says it holds (its real count unless --attack) */
    float *xbuf;      /* one gathered batch */
    int32_t *ybuf;
    hfl_hello_auth auth;   /* our certificate, and the CA to check the coordinator's */
    char instance[40];     /* the coordinator instance our session is with */
    int retry_ms;          /* a refused hello's "say hello again after" (0: none said) */
    client_pending pending; /* the last update we made, until a new task replaces it */
    client_metrics m;       /* --metrics */
    hfl_metrics_server *metrics; /* --metrics: the HTTP listener (NULL without) */
} client_state;

/* Secure aggregation (client/secagg.c; proto/secagg.h). begin: keys,
 * setup and shares, before training; payload: the inbox, then our update
 * as the packed ring (masked in a masked round); finish: after the input is
 * sent, the unmask shares. Each returns 0, 1 when the coordinator told us to
 * skip the round (why), or -1 with err. */
typedef struct client_secagg client_secagg;
typedef struct client_session client_session;
int client_secagg_begin(client_session *ss, const client_task *task, client_secagg **out, char *why, char *err);
int client_secagg_payload(client_session *ss, client_secagg *sa, const client_task *task, const float *delta,
                          size_t n, uint8_t **payload, size_t *len, char *why, char *err);
int client_secagg_finish(client_session *ss, client_secagg *sa, const client_task *task, char *why, char *err);
void client_secagg_free(client_secagg *sa);

/* Trains on the client's data from `weights` with the planned trainer;
 * returns the encoded update (malloc'd, *len bytes), the mean training loss
 * of the last epoch in *loss and the training time in *seconds (under secure
 * aggregation, task->secagg, the update's n_trainable floats instead, for
 * client_secagg_payload, and the residual untouched); NULL with err
 * when the trainer cannot be created (its arena would break the budget) or
 * the budget was breached (s->budget.breached). */
uint8_t *client_train_round(client_state *s, const client_task *task, const float *weights,
                            size_t *len, double *loss, double *seconds, char *err);

/* Writes / reads the residual of client `name` under dir, with the pending
 * update (may be NULL) in the same atomic write. Load returns -1 with the
 * reason in why (no file, damaged, other model or codec). */
int client_state_save(const char *dir, const char *name, const char *model, const char *codec,
                      const float *residual, size_t n, const client_pending *p, char *err);
int client_state_load(const char *dir, const char *name, const char *model, const char *codec,
                      float *residual, size_t n, client_pending *p, char *why);

typedef struct {
    char url[256];
    hfl_tls_opts tls;
    char name[64];          /* with a certificate: its CN */
    int name_given;         /* --name was given */
    double retry_s;         /* --retry-for: how long to keep rejoining a coordinator that went away */
    char data_dir[1024];
    char partition[64];
    char codec[32]; /* update codec override; empty: the run's */
    char state_dir[1024];
    int plan, verify, json; /* --plan mode */
    int batch;              /* --plan --batch: the run's batch to plan for; 0: the ladder */
    int allow_smaller;      /* --allow-smaller-batch */
    int conv_chunk;         /* --conv-chunk: samples a conv layer unfolds at once, at most; 0: the backend's */
    hfl_optimizer optimizer; /* --plan --optimizer: the optimizer state to plan */
    int trial;              /* --plan --trial-step */
    int profile;            /* --plan --trial-step --profile: a per-op profile (kernels/profile.h) */
    double attack_scale;    /* --attack: the update sent is this times the real one (0: honest) */
    int64_t attack_samples; /* --attack: the samples claimed (0: the real count) */
    double dropout;         /* --dropout: the chance of declining a round (simulation only) */
    double speed;           /* --speed: declared samples/s (0: the plan's prediction) */
    char metrics[256];      /* --metrics ADDR: Prometheus metrics over HTTP ("": off) */
    char init_model[1024];  /* --init-model FILE: weights held from the start ("": none) */
    double pace;            /* --pace F: hold each update until F x its simulated time (0: off) */
    double link_up_bps, link_down_bps, link_latency_s; /* --link: the simulated link, bytes/s */
    char device[8];         /* --device: auto, cpu or cuda */
    char model[1024];
    uint64_t budget;
    int budget_at_round;       /* --budget-at ROUND:SIZE: from this round on (0: none) ... */
    uint64_t budget_at_bytes;  /* ... the budget is this (client/replan.c) */
    double headroom;
    unsigned precisions; /* bit (1 << hfl_precision) per precision the chooser may use */
    int index, num_clients;
    uint64_t seed;
    int threads;
    int quiet;
    double timeout_s;
} client_options;

/* client/options.c: the command line (and --config) into o (zeroed), checked;
 * -1 with err. --help and --print-config print and exit 0. */
int client_options_parse(int argc, char **argv, client_options *o, char *err);

typedef struct {
    char model[1024], codec[32];
    char spec_json[16384];     /* the model's layers as JSON, "" when the welcome had none */
    int64_t batch;            /* the run's batch */
    int64_t overhead_estimate; /* the fleet's overhead for our device, -1: none */
    double momentum;           /* the run's SGD momentum: its buffer is planned only when non-zero */
    double prox_mu;            /* the run's FedProx mu: its anchor is planned only when non-zero */
    hfl_optimizer optimizer;   /* the run's: AdamW's moments are planned only for adamw */
    int64_t seed;              /* the run's initialisation seed (1 when the welcome had none) */
    int64_t model_version;     /* the coordinator's global model now, -1 when the welcome had none */
    char model_sha256[65];     /* its SHA-256 (of the float32 weights), "" likewise */
    int64_t chunk_bytes;       /* updates longer than this go up by put (client/upload.c); 0: whole */
} client_welcome;

/* One session with the coordinator, the state client/main.c's state
 * machine runs on: the socket (by value: a failed request has it replaced by
 * a fresh dial), what every step reads, our plan and the last welcome. */
struct client_session {
    nng_socket sock;
    int open;     /* sock is dialed */
    int lost;     /* a request on sock failed: the next request dials a fresh socket first */
    int limit_ms; /* each dial's and request's limit: --timeout, less during a rejoin */
    const client_options *o;
    const hfl_device_info *dev;
    client_state *s;
    cJSON *plan;        /* sent with every hello once chosen (NULL before); the session owns it */
    int plan_round;     /* re-planned (client/replan.c) in this round: the next pull sends plan (0: none) */
    int breach_replans; /* re-plans after a breach since the last round trained (client/replan.c) */
    int free_short;     /* rounds sat out in a row for want of free memory (client/replan.c) */
    size_t max_payload; /* the largest reply payload taken */
    client_welcome w;   /* the last welcome */
};

/* client/session.c. connect: the first dial, again with backoff for up to
 * --retry-for while the error may pass (a dropped negotiation); dial: closes
 * the socket and dials a fresh one within limit_ms; redial: that, when a
 * request failed (lost), else nothing; limit: each later dial's and
 * request's limit; request: hfl_transport_request on the session's socket
 * (redialed first when lost), which marks the session lost when it fails.
 * Each returns 0, or -1 with err. */
int client_session_connect(client_session *ss, char *err);
int client_session_dial(client_session *ss, char *err);
int client_session_redial(client_session *ss, char *err);
void client_session_limit(client_session *ss, int ms);
int client_request(client_session *ss, int type, const cJSON *meta, const void *payload, size_t len, hfl_msg *rep,
                   nng_msg **raw, char *err);
void client_session_close(client_session *ss);
/* The resume tests (HFL_TEST_FETCH_CUT, HFL_TEST_PUT_CUT = K): the
 * connection is cut once (*done), right after the K-th chunk of a transfer
 * (chunks): the socket closed under the session, so the next request fails
 * as on a lost link and is made again on a fresh one. */
void client_test_cut(client_session *ss, const char *env, int chunks, int *done);
/* Sleeps before retry k: a delay drawn uniformly from [0, min(5 s, 0.2 s *
 * 2^k)] ("full jitter", Brooker, "Exponential Backoff And Jitter", AWS
 * Architecture Blog, 2015), so a fleet whose coordinator restarted does not
 * come back in one burst. */
void client_backoff_sleep(const client_state *s, int k);

/* An ERROR reply's fields (proto/messages.h); for any other reply, or one
 * that cannot be read, `fallback` as its error and no flags. */
hfl_error_msg client_reply_error(const hfl_msg *m, const char *fallback);
/* client/upload.c: puts p's payload, of digest sha, chunk by chunk from
 * where the coordinator's holding ends (docs/protocol.md, "Chunked
 * updates"); a request that fails is made again on a fresh connection, up
 * to CLIENT_PUT_TRIES times in a row. 0 when the coordinator holds it all;
 * 1 when it refused a chunk: *rep and *raw hold that reply, for the caller
 * to read as the update's; -1 with why when the connection kept failing or
 * a reply made no sense. */
#define CLIENT_PUT_TRIES 8
int client_put_update(client_session *ss, const client_pending *p, const char sha[65], hfl_msg *rep, nng_msg **raw,
                      char *why);
/* client/weights.c: a task's weights into s->global, which then holds its
 * version (held_version). client_task_weights: from the task's own payload
 * (decoded whole, added for a delta, or ours for "held" and "sent"),
 * validated before a byte of ours changes; 1 for a "sent" task whose
 * weights we lack (ask again). client_fetch_weights: fetched chunk by chunk
 * (CLIENT_FETCH_TRIES tries in a row per chunk), each checked by its digest
 * and decoded as it comes; a download that ends after the first chunk
 * leaves held_version -1. Both 0 with *version, or -1 with err;
 * *malformed when the task itself cannot be right (the client ends). */
int client_task_weights(const uint8_t *payload, size_t plen, const hfl_task_msg *tm, client_state *s, int *version,
                        char *err);
int client_fetch_weights(client_session *ss, const hfl_task_msg *tm, int *version, int *malformed, char *err);
/* A request's metadata: body's fields by table d, and our session. */
cJSON *client_request_meta(const client_state *s, const hfl_wire_msg *d, const void *body);
/* Says hello (with ss->plan, once we have one) and reads the welcome into
 * ss->w; -1 with err when saying hello again may succeed (the coordinator
 * could not be reached: ss->lost, or it asked us to: `reauth`, after
 * s->retry_ms when it said), -2 when it refused us for good (revoked,
 * another CA, a wrong role, bad fields) or did not prove its own identity. */
int client_say_hello(client_session *ss, char *err);
/* After a welcome: when s->global (an --init-model file, or the version we
 * trained on) is the coordinator's global model bit for bit (its SHA-256),
 * we hold that version and the next task comes without weights; otherwise a
 * new coordinator instance means whatever we held is forgotten. Returns 1
 * when we hold the welcome's version. */
int client_adopt_model(client_state *s, const client_welcome *w, int new_instance);
/* Chooses and plans this client's configuration into s (s->cost first: call
 * it before the backend has run anything); returns the plan as JSON, NULL
 * with err. */
cJSON *client_choose_plan(const client_options *o, const hfl_device_info *dev, client_state *s,
                          const client_welcome *w, char *err);

/* The precisions the chooser may use: --precision's, less those the device
 * does not offer (hfl_chooser_device_precisions); -1 with err when none is left. */
int client_precisions(const client_options *o, const hfl_device_info *dev, unsigned *out, char *err);

/* hfl-client --plan on backend be (on device dev; why: "" or why --device auto
 * fell back to the CPU, a key of --json); -1 with err when nothing fits or the model is bad. */
int client_plan_run(const client_options *o, const hfl_backend *be, const hfl_device_info *dev, const char *why,
                    char *err);

/* hfl-client --plan --trial-step (client/trial.c): choose, verify and train
 * one step of the run's batch on synthetic data; -1 with err when refused up
 * front or when the step breached the budget. */
int client_trial_run(const client_options *o, const hfl_backend *be, const hfl_device_info *dev, char *err);

/* client/replan.c: re-planning when the budget shrinks. round: before
 * round `round` trains, the budget it has (--memory-budget, --budget-at);
 * a plan that no longer fits is chosen again and verified, and goes up with
 * the next pull. breach: after train.c's check found a breach in `round`
 * (err: its line), re-plans under the budget it has. Each returns 0 to
 * carry on (breach: the caller declines the round), or -1 with err when
 * the client has left the run (nothing fits: err names the smallest budget
 * that would; or breaches keep coming); round, without --memory-budget,
 * CLIENT_SIT_OUT (err: why) when free memory holds no plan this round.
 * leave: a bye with why (best effort). */
int client_replan_round(client_session *ss, int round, char *err);
#define CLIENT_SIT_OUT 1 /* client_replan_round: free memory holds no plan now; decline the round */
int client_replan_breach(client_session *ss, int round, char *err);
void client_leave(client_session *ss, const char *why);

/* Peak resident memory of this process so far (VmHWM), in bytes. */
uint64_t client_peak_rss(void);

/* --metrics (client/metrics.c): start and stop the listener; count a task,
 * a round's training, and an update's fate (accepted, refused, or a
 * decline). */
int client_metrics_start(const client_options *o, client_state *s, char *err);
void client_metrics_stop(client_state *s);
void client_metrics_task(client_state *s, int round, size_t bytes);
void client_metrics_trained(client_state *s, double loss, double seconds);
void client_metrics_sent(client_state *s, int accepted, size_t bytes, int declined);

#endif
