/* messages.h: every message's metadata as a typed struct, shared by the
 * client and the coordinator, with the table that writes and reads it
 * (wire.h). docs/protocol.md's "Fields" section documents the same tables
 * and tests/proto/test_wire_doc.c fails when the two disagree.
 *
 * An optional field has an int `has_<name>` beside it. Zero a struct, fill
 * it, encode it with hfl_wire_message; decode into a zeroed struct. */
#ifndef HFL_MESSAGES_H
#define HFL_MESSAGES_H

#include <stdint.h>

#include "proto/identity.h"
#include "proto/wire.h"
#include "util/util.h"

#define HFL_WIRE_MAX_CLIENTS 16384 /* client ids are below this */
#define HFL_WIRE_TOKEN_MAX 32      /* a session token's length */
#define HFL_WIRE_NAME_MAX 63       /* a model's name */
#define HFL_WIRE_CODEC_MAX 31      /* a codec's name, as "topk:0.25" */
#define HFL_WIRE_INSTANCE_MAX 32   /* a coordinator instance: 128 random bits in hex */
#define HFL_WIRE_CERT_MAX 8192     /* a certificate, base64 DER */

/* session: what every request after the welcome carries besides its own
 * fields (the coordinator checks it before it reads the rest). */
typedef struct {
    int64_t client_id;
    char token[HFL_WIRE_TOKEN_MAX + 1];
} hfl_session_msg;

/* pull: a client asks for work. */
typedef struct {
    int64_t have_version; /* the model version it holds, -1: none */
    int has_have_version;
    int64_t hold_ms; /* a long poll: the reply may wait this long */
    int has_hold_ms;
    int resend; /* the task it was sent this round, once more with weights */
    int has_resend;
    const cJSON *plan; /* a new plan (re-planned: client/replan.c), held to hfl_wire_plan_fields */
    int has_plan;
    int64_t plan_round; /* with plan: the round in which it re-planned */
    int has_plan_round;
} hfl_pull_msg;

/* task.secagg: secure aggregation's announcement (proto/secagg.h). */
typedef struct {
    char mode[16]; /* masked or clear */
    double clip;
    int64_t shift, bits;
} hfl_task_secagg;

/* A chunk's SHA-256, in hex (task.chunk_sha256). */
typedef struct {
    char sha256[65];
} hfl_chunk_digest;

/* Chunks of one task's weights: 32 GiB at 4 MiB. Each digest takes 78
 * bytes of the task's metadata, so 8192 of them (639 KB) leave the rest of
 * the task ample room under the 1 MiB metadata limit (msg.h). */
#define HFL_WIRE_MAX_CHUNKS 8192
_Static_assert(HFL_WIRE_MAX_CHUNKS * 78 + (64 << 10) < HFL_MSG_MAX_META, "a task's chunk digests fit its metadata");

/* task: the reply to a pull, one round's work; the payload holds the
 * weights (see `weights`), or, when they are larger than the coordinator's
 * chunk size, the weights come by fetch: payload_bytes in chunks of
 * chunk_bytes (the last one shorter), each with its digest, and the digest
 * of the whole. */
typedef struct {
    int64_t round, version;
    char model[HFL_WIRE_NAME_MAX + 1];
    int64_t params, trainable, local_epochs;
    int64_t local_steps; /* this many optimizer steps instead of the epochs */
    int has_local_steps;
    char lr_schedule[16]; /* cosine, with the four lr_ fields below */
    int has_lr_schedule;
    int64_t lr_warmup;
    int has_lr_warmup;
    int64_t lr_total;
    int has_lr_total;
    double lr_min;
    int has_lr_min;
    int64_t lr_step0;
    int has_lr_step0;
    int64_t batch;
    double lr, momentum, weight_decay;
    double prox_mu;
    int has_prox_mu;
    char optimizer[16]; /* adamw, with beta1 and beta2; absent: sgd */
    int has_optimizer;
    double beta1;
    int has_beta1;
    double beta2;
    int has_beta2;
    int keep_optimizer; /* keep the local optimizer's state from the client's last round */
    int has_keep_optimizer;
    char codec[HFL_WIRE_CODEC_MAX + 1];
    int64_t block, seed;
    double deadline_ms;
    hfl_task_secagg secagg;
    int has_secagg;
    char weights[8]; /* full, delta, held or sent */
    int64_t base_version;
    char downlink[HFL_WIRE_CODEC_MAX + 1];
    int64_t payload_bytes;
    int has_payload_bytes;
    int64_t chunk_bytes;
    int has_chunk_bytes;
    char payload_sha256[65];
    int has_payload_sha256;
    hfl_wire_list chunk_sha256; /* hfl_chunk_digest, payload_bytes / chunk_bytes rounded up */
    int has_chunk_sha256;
} hfl_task_msg;

/* fetch: a chunk of the open round's task weights, asked for by offset
 * (a multiple of the task's chunk_bytes); the reply holds its bytes as the
 * payload, with the same fields. */
typedef struct {
    int64_t round, version, base_version, offset;
} hfl_fetch_msg;

/* wait: come back after `ms`. */
typedef struct {
    int64_t ms;
} hfl_wait_msg;

/* update: a client's trained change; the payload is the encoded delta. */
typedef struct {
    int64_t round, samples;
    double loss;
    char codec[HFL_WIRE_CODEC_MAX + 1];
    double peak_bytes;
    int has_peak_bytes;
    double train_s;
    int has_train_s;
    double trained_samples;
    int has_trained_samples;
    double lr_first;
    int has_lr_first;
    double lr_last;
    int has_lr_last;
    double sim_s;
    int has_sim_s;
    double predicted_peak_bytes;
    int has_predicted_peak_bytes;
    double measured_peak_bytes;
    int has_measured_peak_bytes;
    int64_t payload_bytes; /* present: the payload was put in chunks (put), this many bytes */
    int has_payload_bytes;
    char payload_sha256[65]; /* with payload_bytes: the SHA-256 of the whole, in hex */
    int has_payload_sha256;
} hfl_update_msg;

/* put: a chunk of an update larger than the welcome's chunk_bytes, in
 * order from offset 0 (a multiple of chunk_bytes); the payload holds bytes
 * [offset, offset + min(chunk_bytes, payload_bytes - offset)) of the
 * update's payload, whose length and SHA-256 every put repeats. The update
 * itself then follows without a payload (update.payload_bytes). */
typedef struct {
    int64_t round, offset, payload_bytes;
    char payload_sha256[65];
} hfl_put_msg;

/* put's reply: the bytes of the payload the coordinator holds, in order. */
typedef struct {
    int64_t round, have;
} hfl_put_reply_msg;

/* update (declined): a drawn client sits the round out (hfl-client --dropout). */
typedef struct {
    int64_t round;
    int declined; /* always true */
} hfl_decline_msg;

/* ack: the reply to an update. */
typedef struct {
    int64_t round;
    int missed_deadline; /* --virtual-time left it out */
    int has_missed_deadline;
    int64_t folded_into; /* a late update, folded into this later round */
    int has_folded_into;
} hfl_ack_msg;

/* error: any reply. */
typedef struct {
    char error[HFL_ERR_LEN];
    int reauth;
    int has_reauth;
    int64_t retry_ms;
    int has_retry_ms;
    int skip_round;
    int has_skip_round;
} hfl_error_msg;

/* bye: the reply to a pull once the run is over. */
typedef struct {
    char reason[64];
    int has_reason; /* absent in the reply to a client's bye */
} hfl_bye_msg;

/* bye (client): a client leaving, with why when it broke its memory budget. */
typedef struct {
    char error[HFL_ERR_LEN];
    int has_error;
    double budget_bytes;
    int has_budget_bytes;
    double measured_peak_bytes;
    int has_measured_peak_bytes;
    double predicted_peak_bytes;
    int has_predicted_peak_bytes;
} hfl_leave_msg;

/* welcome: the reply to a (proven) hello. */
typedef struct {
    int64_t client_id;
    char token[HFL_WIRE_TOKEN_MAX + 1];
    char name[HFL_ID_NAME_MAX + 1];
    char instance[HFL_WIRE_INSTANCE_MAX + 1];
    double token_ttl_s;
    char model[HFL_WIRE_NAME_MAX + 1];
    const cJSON *model_spec; /* the layers (model/spec_json.c reads them) */
    int64_t params;
    char codec[HFL_WIRE_CODEC_MAX + 1];
    int64_t block, rounds, batch;
    double momentum;
    int has_momentum;
    double prox_mu;
    int has_prox_mu;
    char optimizer[16];
    int has_optimizer;
    int64_t overhead_estimate; /* the fleet's, for this device */
    int has_overhead_estimate;
    int64_t seed;
    int has_seed;
    int64_t model_version;
    int has_model_version;
    char model_sha256[65];
    int has_model_sha256;
    int64_t chunk_bytes; /* updates larger than this go up by put; absent: whole */
    int has_chunk_bytes;
} hfl_welcome_msg;

/* hello: who the client is, its device and (the second time) its plan.
 * The first hello of a proven identity carries only cert and nonce. */
typedef struct {
    char name[HFL_ID_NAME_MAX + 1]; /* --insecure only: with certificates the proof names the client */
    int has_name;
    int64_t samples;
    char codec[HFL_WIRE_CODEC_MAX + 1];
    int has_codec;
    const cJSON *device, *plan; /* held to hfl_wire_device_fields and hfl_wire_plan_fields */
    int has_device, has_plan;
    char cert[HFL_WIRE_CERT_MAX + 1];
    int has_cert;
    char nonce[HFL_ID_NONCE_HEX + 1];
    int has_nonce;
    char challenge[HFL_ID_NONCE_HEX + 1];
    int has_challenge;
    int aggregator; /* a tier's aggregator (hfl-coordinator --upstream), not a client */
    int has_aggregator;
} hfl_hello_msg;

/* challenge: the reply to a hello without proof. */
typedef struct {
    char challenge[HFL_ID_NONCE_HEX + 1];
    char coordinator[HFL_ID_NAME_MAX + 1];
    char cert[HFL_WIRE_CERT_MAX + 1];
    char signature[HFL_ID_SIG_B64_MAX + 1];
    char instance[HFL_WIRE_INSTANCE_MAX + 1];
    int has_instance;
} hfl_challenge_msg;

/* secagg (message 11): secure aggregation's steps (proto/secagg.h). A
 * request is the session, this header and its step's fields; a reply is
 * its step's reply, or {} for a step that is only acknowledged. Keys,
 * shares and seals travel in base64. */
#define HFL_SECAGG_MAX_HOLDERS 64 /* a member's neighbours and itself: secagg_degree(2^31) + 1 = 63 */
#define HFL_SECAGG_KEY_B64 44     /* 32 bytes */
#define HFL_SECAGG_CT_B64 124     /* a sealed share: 64 bytes + HFL_SEAL_OVERHEAD (28) */

typedef struct {
    int64_t round;
    char step[16]; /* keys, setup, shares, inbox, unmask_list, unmask */
} hfl_secagg_step_msg;

/* keys: the member's two X25519 public keys, signed under its certificate. */
typedef struct {
    char c_pk[HFL_SECAGG_KEY_B64 + 1], s_pk[HFL_SECAGG_KEY_B64 + 1];
    char cert[HFL_WIRE_CERT_MAX + 1]; /* absent under --insecure */
    int has_cert;
    char sig[HFL_ID_SIG_B64_MAX + 1];
    int has_sig;
} hfl_secagg_keys_msg;

/* setup's reply: the member's weight, ring and noise, and its holders. */
typedef struct {
    int64_t id, x; /* client id; Shamir abscissa */
    char name[HFL_ID_NAME_MAX + 1];
    char c_pk[HFL_SECAGG_KEY_B64 + 1], s_pk[HFL_SECAGG_KEY_B64 + 1];
    char cert[HFL_WIRE_CERT_MAX + 1];
    int has_cert;
    char sig[HFL_ID_SIG_B64_MAX + 1];
    int has_sig;
} hfl_secagg_holder;
typedef struct {
    int64_t round;
    double weight;
    int64_t bits, shift;
    double clip, sigma, sigma_count;
    int64_t threshold;
    hfl_wire_list holders; /* hfl_secagg_holder */
} hfl_secagg_setup_msg;

/* A sealed share: to a neighbour (shares), or from one (inbox's reply). */
typedef struct {
    int64_t to;
    char ct[HFL_SECAGG_CT_B64 + 1];
} hfl_secagg_sealed_to;
typedef struct {
    int64_t from;
    char ct[HFL_SECAGG_CT_B64 + 1];
} hfl_secagg_sealed_from;
typedef struct {
    hfl_wire_list shares; /* hfl_secagg_sealed_to */
} hfl_secagg_shares_msg;
typedef struct {
    int64_t round;
    hfl_wire_list shares; /* hfl_secagg_sealed_from */
} hfl_secagg_inbox_msg;

/* unmask_list's reply: the holders' owners whose input came, and the rest. */
typedef struct {
    int64_t round;
    hfl_wire_list alive, dropped; /* int64_t client ids */
} hfl_secagg_unmask_list_msg;

/* unmask: the seed share of each alive owner, the key share of each dropped one. */
typedef struct {
    int64_t of;
    char share[HFL_SECAGG_KEY_B64 + 1];
} hfl_secagg_reveal;
typedef struct {
    hfl_wire_list shares; /* hfl_secagg_reveal */
} hfl_secagg_unmask_msg;

/* tier (message 14): an aggregator's requests to its root, each the
 * session and `op` with the op's fields (coordinator/tier.c, upstream.c). */
/* Clients one aggregator lists or is given: a listed client's hello (its
 * device and plan, at most ~900 bytes as their tables bound them) keeps a
 * sync of 1024 within the 1 MiB metadata limit (msg.h). */
#define HFL_TIER_MAX_CLIENTS 1024
/* tier sync.clients: one of the aggregator's clients, as it said hello. */
typedef struct {
    char name[HFL_ID_NAME_MAX + 1];
    const cJSON *hello; /* its hello's samples, device, plan and codec, as the aggregator stored them */
    int64_t seen_ms;    /* since the aggregator last heard from it */
} hfl_tier_client;
/* tier sync: the aggregator's clients and the model version it holds. */
typedef struct {
    char op[16]; /* sync */
    int64_t have_version; /* -1: none */
    hfl_wire_list clients; /* hfl_tier_client */
} hfl_tier_sync_msg;
/* tier sync (reply).selected: a drawn client reached via this aggregator. */
typedef struct {
    char name[HFL_ID_NAME_MAX + 1];
    int64_t samples_at_select, declared, share_cap;
} hfl_tier_selected;
/* tier sync (reply): the root's state, its open round's assignment; the
 * payload holds the global model when have_version is not the root's. */
typedef struct {
    int64_t version;
    char model_sha256[65];
    int64_t round; /* the open round, or the last one (0: none yet) */
    int open, done;
    double clip, samples_planned;
    int64_t shift;
    hfl_task_msg task; /* the open round's task */
    int has_task;
    hfl_wire_list selected; /* hfl_tier_selected */
} hfl_tier_sync_reply_msg;
/* tier partial.rows: how one of the round's clients ended. */
typedef struct {
    char name[HFL_ID_NAME_MAX + 1];
    char status[16]; /* ok, declined, refused */
    int64_t samples, weighed; /* claimed; the capped samples it was weighted by */
    double norm;
    int clipped;
    double loss, train_s, bytes, measured_peak, predicted_peak, trained;
} hfl_tier_row;
/* tier partial: the aggregator's fixed-point sum (payload: int64 LE, the
 * trainable values) at 2^shift, and its clients' rows. Reply: ack. */
typedef struct {
    char op[16]; /* partial */
    int64_t round, shift;
    hfl_wire_list rows; /* hfl_tier_row */
} hfl_tier_partial_msg;
extern const hfl_wire_msg hfl_wire_session, hfl_wire_pull, hfl_wire_task, hfl_wire_wait, hfl_wire_update, hfl_wire_decline,
    hfl_wire_ack, hfl_wire_error, hfl_wire_bye, hfl_wire_leave, hfl_wire_welcome, hfl_wire_hello,
    hfl_wire_challenge, hfl_wire_secagg_step, hfl_wire_secagg_keys, hfl_wire_secagg_setup, hfl_wire_secagg_shares,
    hfl_wire_secagg_inbox, hfl_wire_secagg_unmask_list, hfl_wire_secagg_unmask, hfl_wire_fetch, hfl_wire_put, hfl_wire_put_reply,
    hfl_wire_tier_sync, hfl_wire_tier_sync_reply, hfl_wire_tier_partial;
/* Every table above, for tests and docs: the messages and their nested objects. */
extern const hfl_wire_msg *const hfl_wire_all[];
extern const int hfl_wire_n_all;
/* The hello's device and plan: what the coordinator keeps of them. */
extern const hfl_field hfl_wire_device_fields[], hfl_wire_plan_fields[];
extern const int hfl_wire_n_device_fields, hfl_wire_n_plan_fields;

#endif
