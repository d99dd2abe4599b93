/* messages.c: the field table of every message (messages.h). Each row is a
 * member of the message's struct under its own name, so a field's wire
 * name, its place and its size are written once. The ranges are what the
 * reader accepts; docs/protocol.md's "Fields" tables mirror these rows. */
#include "proto/messages.h"

#include <stddef.h>

#include "proto/secagg.h"

/* A required field, and an optional one (beside its has_ flag). */
#define FIELD(T, m, kind, lo, hi) {#m, kind, 0, lo, hi, offsetof(T, m), sizeof(((T *)0)->m), 0, NULL, NULL, 0, 0}
#define OPTIONAL(T, m, kind, lo, hi) \
    {#m, kind, 1, lo, hi, offsetof(T, m), sizeof(((T *)0)->m), offsetof(T, has_##m), NULL, NULL, 0, 0}
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

#define I HFL_WIRE_INT
#define D HFL_WIRE_NUM
#define S HFL_WIRE_STR
#define B HFL_WIRE_BOOL
#define BIG 1e18   /* byte counts */
#define I32 2147483647.0
#define I64 9223372036854775807.0

static const hfl_wire_field session_fields[] = {
    FIELD(hfl_session_msg, client_id, I, 0, HFL_WIRE_MAX_CLIENTS - 1),
    FIELD(hfl_session_msg, token, S, 0, HFL_WIRE_TOKEN_MAX),
};
/* type 0: it rides in pull, update, bye and secagg */
const hfl_wire_msg hfl_wire_session = {0, "session", session_fields, N(session_fields), 0};


static const hfl_wire_field secagg_fields[] = {
    FIELD(hfl_task_secagg, mode, S, 0, 15),
    FIELD(hfl_task_secagg, clip, D, 0, 1e30),
    FIELD(hfl_task_secagg, shift, I, -2000, 2000),
    FIELD(hfl_task_secagg, bits, I, 1, SECAGG_MAX_BITS),
};
static const hfl_wire_msg task_secagg = {0, "task.secagg", secagg_fields, N(secagg_fields), 0};

static const hfl_wire_field digest_fields[] = {FIELD(hfl_chunk_digest, sha256, S, 0, 64)};
static const hfl_wire_msg digest_wire = {0, "task.chunk_sha256", digest_fields, N(digest_fields), 0};

static const hfl_wire_field task_fields[] = {
    FIELD(hfl_task_msg, round, I, 1, 1 << 30),
    FIELD(hfl_task_msg, version, I, 0, I32),
    FIELD(hfl_task_msg, model, S, 0, HFL_WIRE_NAME_MAX),
    FIELD(hfl_task_msg, params, I, 1, 1e15),
    FIELD(hfl_task_msg, trainable, I, 1, 1e15),
    FIELD(hfl_task_msg, local_epochs, I, 1, 10000),
    OPTIONAL(hfl_task_msg, local_steps, I, 1, 100000000),
    OPTIONAL(hfl_task_msg, lr_schedule, S, 0, 15),
    OPTIONAL(hfl_task_msg, lr_warmup, I, 0, 100000000),
    OPTIONAL(hfl_task_msg, lr_total, I, 1, 1125899906842624.0),
    OPTIONAL(hfl_task_msg, lr_min, D, 0, 1),
    OPTIONAL(hfl_task_msg, lr_step0, I, 0, 1125899906842624.0),
    FIELD(hfl_task_msg, batch, I, 1, 65536),
    FIELD(hfl_task_msg, lr, D, 0, 100),
    FIELD(hfl_task_msg, momentum, D, 0, 1),
    FIELD(hfl_task_msg, weight_decay, D, 0, 1),
    OPTIONAL(hfl_task_msg, prox_mu, D, 0, 1000),
    OPTIONAL(hfl_task_msg, optimizer, S, 0, 15),
    OPTIONAL(hfl_task_msg, beta1, D, 0, 0.999999),
    OPTIONAL(hfl_task_msg, beta2, D, 0, 0.999999),
    OPTIONAL(hfl_task_msg, keep_optimizer, B, 0, 0),
    FIELD(hfl_task_msg, codec, S, 0, HFL_WIRE_CODEC_MAX),
    FIELD(hfl_task_msg, block, I, 1, 65536),
    FIELD(hfl_task_msg, seed, I, 0, I64),
    FIELD(hfl_task_msg, deadline_ms, D, 1, 1e10),
    {"secagg", HFL_WIRE_OBJ, 1, 0, 0, offsetof(hfl_task_msg, secagg), sizeof(hfl_task_secagg),
     offsetof(hfl_task_msg, has_secagg), &task_secagg, NULL, 0, 0},
    FIELD(hfl_task_msg, weights, S, 0, 7),
    FIELD(hfl_task_msg, base_version, I, -1, I32),
    FIELD(hfl_task_msg, downlink, S, 0, HFL_WIRE_CODEC_MAX),
    OPTIONAL(hfl_task_msg, payload_bytes, I, 1, 1e15),
    OPTIONAL(hfl_task_msg, chunk_bytes, I, 4096, 1 << 30),
    OPTIONAL(hfl_task_msg, payload_sha256, S, 0, 64),
    {"chunk_sha256", HFL_WIRE_LIST, 1, 0, 0, offsetof(hfl_task_msg, chunk_sha256), sizeof(hfl_chunk_digest),
     offsetof(hfl_task_msg, has_chunk_sha256), &digest_wire, NULL, 0, HFL_WIRE_MAX_CHUNKS},
};
const hfl_wire_msg hfl_wire_task = {HFL_MSG_TASK, "task", task_fields, N(task_fields), 0};

static const hfl_wire_field wait_fields[] = {FIELD(hfl_wait_msg, ms, I, 0, 60000)};
const hfl_wire_msg hfl_wire_wait = {HFL_MSG_WAIT, "wait", wait_fields, N(wait_fields), 0};

static const hfl_wire_field update_fields[] = {
    FIELD(hfl_update_msg, round, I, 1, 1 << 30),
    FIELD(hfl_update_msg, samples, I, 1, 100000000),
    FIELD(hfl_update_msg, loss, D, 0, 1e30),
    FIELD(hfl_update_msg, codec, S, 0, HFL_WIRE_CODEC_MAX),
    OPTIONAL(hfl_update_msg, peak_bytes, D, 0, BIG),
    OPTIONAL(hfl_update_msg, train_s, D, 0, 1e9),
    OPTIONAL(hfl_update_msg, trained_samples, D, 0, 1e15),
    OPTIONAL(hfl_update_msg, lr_first, D, 0, 100),
    OPTIONAL(hfl_update_msg, lr_last, D, 0, 100),
    OPTIONAL(hfl_update_msg, sim_s, D, 0, 1e12),
    OPTIONAL(hfl_update_msg, predicted_peak_bytes, D, 0, BIG),
    OPTIONAL(hfl_update_msg, measured_peak_bytes, D, 0, BIG),
    OPTIONAL(hfl_update_msg, payload_bytes, I, 1, 1e15),
    OPTIONAL(hfl_update_msg, payload_sha256, S, 0, 64),
};
const hfl_wire_msg hfl_wire_update = {HFL_MSG_UPDATE, "update", update_fields, N(update_fields), 0};

static const hfl_wire_field decline_fields[] = {
    FIELD(hfl_decline_msg, round, I, 1, 1 << 30),
    FIELD(hfl_decline_msg, declined, B, 0, 0),
};
const hfl_wire_msg hfl_wire_decline = {HFL_MSG_UPDATE, "update (declined)", decline_fields, N(decline_fields), 0};

static const hfl_wire_field ack_fields[] = {
    FIELD(hfl_ack_msg, round, I, 1, 1 << 30),
    OPTIONAL(hfl_ack_msg, missed_deadline, B, 0, 0),
    OPTIONAL(hfl_ack_msg, folded_into, I, 1, 1 << 30),
};
const hfl_wire_msg hfl_wire_ack = {HFL_MSG_ACK, "ack", ack_fields, N(ack_fields), 0};

static const hfl_wire_field error_fields[] = {
    FIELD(hfl_error_msg, error, S, 0, HFL_ERR_LEN - 1),
    OPTIONAL(hfl_error_msg, reauth, B, 0, 0),
    OPTIONAL(hfl_error_msg, retry_ms, I, 1, 60000),
    OPTIONAL(hfl_error_msg, skip_round, B, 0, 0),
};
const hfl_wire_msg hfl_wire_error = {HFL_MSG_ERROR, "error", error_fields, N(error_fields), 0};

static const hfl_wire_field bye_fields[] = {OPTIONAL(hfl_bye_msg, reason, S, 0, 63)};
const hfl_wire_msg hfl_wire_bye = {HFL_MSG_BYE, "bye", bye_fields, N(bye_fields), 0};

static const hfl_wire_field leave_fields[] = {
    OPTIONAL(hfl_leave_msg, error, S, 0, HFL_ERR_LEN - 1),
    OPTIONAL(hfl_leave_msg, budget_bytes, D, 0, BIG),
    OPTIONAL(hfl_leave_msg, measured_peak_bytes, D, 0, BIG),
    OPTIONAL(hfl_leave_msg, predicted_peak_bytes, D, 0, BIG),
};
const hfl_wire_msg hfl_wire_leave = {HFL_MSG_BYE, "bye (client)", leave_fields, N(leave_fields), 0};

static const hfl_wire_field welcome_fields[] = {
    FIELD(hfl_welcome_msg, client_id, I, 0, HFL_WIRE_MAX_CLIENTS - 1),
    FIELD(hfl_welcome_msg, token, S, 0, HFL_WIRE_TOKEN_MAX),
    FIELD(hfl_welcome_msg, name, S, 0, HFL_ID_NAME_MAX),
    FIELD(hfl_welcome_msg, instance, S, 0, HFL_WIRE_INSTANCE_MAX),
    FIELD(hfl_welcome_msg, token_ttl_s, D, 0, 1e9),
    FIELD(hfl_welcome_msg, model, S, 0, HFL_WIRE_NAME_MAX),
    {"model_spec", HFL_WIRE_OBJ, 0, 0, 0, offsetof(hfl_welcome_msg, model_spec), sizeof(const cJSON *), 0, NULL,
     NULL, 0, 0},
    FIELD(hfl_welcome_msg, params, I, 1, 1e15),
    FIELD(hfl_welcome_msg, codec, S, 0, HFL_WIRE_CODEC_MAX),
    FIELD(hfl_welcome_msg, block, I, 1, 65536),
    FIELD(hfl_welcome_msg, rounds, I, 1, 1 << 30),
    FIELD(hfl_welcome_msg, batch, I, 1, 65536),
    OPTIONAL(hfl_welcome_msg, momentum, D, 0, 1),
    OPTIONAL(hfl_welcome_msg, prox_mu, D, 0, 1000),
    OPTIONAL(hfl_welcome_msg, optimizer, S, 0, 15),
    OPTIONAL(hfl_welcome_msg, overhead_estimate, I, 0, 1125899906842624.0),
    OPTIONAL(hfl_welcome_msg, seed, I, 0, I64),
    OPTIONAL(hfl_welcome_msg, model_version, I, 0, I32),
    OPTIONAL(hfl_welcome_msg, model_sha256, S, 0, 64),
    OPTIONAL(hfl_welcome_msg, chunk_bytes, I, 4096, 1 << 30),
};
const hfl_wire_msg hfl_wire_welcome = {HFL_MSG_WELCOME, "welcome", welcome_fields, N(welcome_fields), 0};

/* What a hello's device and plan may hold, as client/handshake.c writes
 * them: the coordinator keeps them (registry.c) and copies them into its
 * report, so every field is a scalar of its kind and range (schema.c) and a
 * stored description is one level deep and a few hundred bytes. */
const hfl_field hfl_wire_device_fields[] = {
    {"kind", HFL_FIELD_STR, 0, 16},        {"backend", HFL_FIELD_STR, 0, 32},
    {"name", HFL_FIELD_STR, 0, 128},       {"compute_capability", HFL_FIELD_STR, 0, 16},
    {"cores", HFL_FIELD_INT, 0, 1e6},      {"free_bytes", HFL_FIELD_NUM, 0, BIG},
    {"total_bytes", HFL_FIELD_NUM, 0, BIG},
};
const int hfl_wire_n_device_fields = N(hfl_wire_device_fields);
const hfl_field hfl_wire_plan_fields[] = {
    {"backend", HFL_FIELD_STR, 0, 32},           {"device", HFL_FIELD_STR, 0, 128},
    {"batch", HFL_FIELD_INT, 1, 65536},          {"accumulation_steps", HFL_FIELD_INT, 1, 65536},
    {"step_batch", HFL_FIELD_INT, 1, 1 << 30},   {"momentum", HFL_FIELD_BOOL, 0, 0},
    {"prox_anchor", HFL_FIELD_BOOL, 0, 0},       {"adamw", HFL_FIELD_BOOL, 0, 0},
    {"precision", HFL_FIELD_STR, 0, 16},         {"checkpoint", HFL_FIELD_STR, 0, 32},
    {"conv_chunk", HFL_FIELD_INT, 1, 4096},
    {"budget_bytes", HFL_FIELD_NUM, 0, BIG},     {"arena_bytes", HFL_FIELD_NUM, 0, BIG},
    {"predicted_peak_bytes", HFL_FIELD_NUM, 0, BIG}, {"predicted_samples_per_s", HFL_FIELD_NUM, 0, 1e15},
    {"capacity_samples_per_s", HFL_FIELD_NUM, 0, 1e15}, {"overhead_bytes", HFL_FIELD_NUM, 0, BIG},
    {"overhead_records", HFL_FIELD_INT, 0, 1e9}, {"verify_measurements", HFL_FIELD_INT, 0, 1e9},
    /* the device memory a GPU client holds (plan/overhead_log.c, hfl_device_memory_json) */
    {"context_bytes", HFL_FIELD_NUM_OR_NULL, 0, BIG}, {"context_source", HFL_FIELD_STR, 0, 32},
    {"process_device_bytes", HFL_FIELD_NUM_OR_NULL, 0, BIG}, {"alloc_granularity", HFL_FIELD_NUM, 1, 1e12},
};
const int hfl_wire_n_plan_fields = N(hfl_wire_plan_fields);

/* a re-planned client's new plan rides in its next pull, held to the hello's plan table */
static const hfl_wire_field pull_fields[] = {
    OPTIONAL(hfl_pull_msg, have_version, I, -1, I32),
    OPTIONAL(hfl_pull_msg, hold_ms, I, 0, 600000),
    OPTIONAL(hfl_pull_msg, resend, B, 0, 0),
    {"plan", HFL_WIRE_OBJ, 1, 0, 0, offsetof(hfl_pull_msg, plan), sizeof(const cJSON *),
     offsetof(hfl_pull_msg, has_plan), NULL, hfl_wire_plan_fields, N(hfl_wire_plan_fields), 0},
    OPTIONAL(hfl_pull_msg, plan_round, I, 1, 1 << 30),
};
const hfl_wire_msg hfl_wire_pull = {HFL_MSG_PULL, "pull", pull_fields, N(pull_fields), 0};

static const hfl_wire_field hello_fields[] = {
    OPTIONAL(hfl_hello_msg, name, S, 0, HFL_ID_NAME_MAX),
    FIELD(hfl_hello_msg, samples, I, 1, 100000000),
    OPTIONAL(hfl_hello_msg, codec, S, 0, HFL_WIRE_CODEC_MAX),
    {"device", HFL_WIRE_OBJ, 1, 0, 0, offsetof(hfl_hello_msg, device), sizeof(const cJSON *),
     offsetof(hfl_hello_msg, has_device), NULL, hfl_wire_device_fields, N(hfl_wire_device_fields), 0},
    {"plan", HFL_WIRE_OBJ, 1, 0, 0, offsetof(hfl_hello_msg, plan), sizeof(const cJSON *),
     offsetof(hfl_hello_msg, has_plan), NULL, hfl_wire_plan_fields, N(hfl_wire_plan_fields), 0},
    OPTIONAL(hfl_hello_msg, cert, S, 0, HFL_WIRE_CERT_MAX),
    OPTIONAL(hfl_hello_msg, nonce, S, 0, HFL_ID_NONCE_HEX),
    OPTIONAL(hfl_hello_msg, challenge, S, 0, HFL_ID_NONCE_HEX),
    OPTIONAL(hfl_hello_msg, aggregator, B, 0, 0),
};
/* strict: the coordinator keeps what a hello holds, so it holds nothing else */
const hfl_wire_msg hfl_wire_hello = {HFL_MSG_HELLO, "hello", hello_fields, N(hello_fields), 1};

static const hfl_wire_field challenge_fields[] = {
    FIELD(hfl_challenge_msg, challenge, S, 0, HFL_ID_NONCE_HEX),
    FIELD(hfl_challenge_msg, coordinator, S, 0, HFL_ID_NAME_MAX),
    FIELD(hfl_challenge_msg, cert, S, 0, HFL_WIRE_CERT_MAX),
    FIELD(hfl_challenge_msg, signature, S, 0, HFL_ID_SIG_B64_MAX),
    OPTIONAL(hfl_challenge_msg, instance, S, 0, HFL_WIRE_INSTANCE_MAX),
};
const hfl_wire_msg hfl_wire_challenge = {HFL_MSG_CHALLENGE, "challenge", challenge_fields, N(challenge_fields), 0};

/* A LIST of structs of type IT described by sub, at most max of them. */
#define LIST(T, m, IT, sub, max) \
    {#m, HFL_WIRE_LIST, 0, 0, 0, offsetof(T, m), sizeof(IT), 0, sub, NULL, 0, max}
#define IDS(T, m) {#m, HFL_WIRE_LIST, 0, 0, HFL_WIRE_MAX_CLIENTS - 1, offsetof(T, m), sizeof(int64_t), 0, NULL, NULL, \
                   0, HFL_SECAGG_MAX_HOLDERS}
#define KEY(T, m) FIELD(T, m, S, 0, HFL_SECAGG_KEY_B64)
#define ID(T, m) FIELD(T, m, I, 0, HFL_WIRE_MAX_CLIENTS - 1)

static const hfl_wire_field secagg_step_fields[] = {
    FIELD(hfl_secagg_step_msg, round, I, 1, 1 << 30),
    FIELD(hfl_secagg_step_msg, step, S, 0, 15),
};
const hfl_wire_msg hfl_wire_secagg_step = {HFL_MSG_SECAGG, "secagg", secagg_step_fields, N(secagg_step_fields), 0};

static const hfl_wire_field secagg_keys_fields[] = {
    KEY(hfl_secagg_keys_msg, c_pk), KEY(hfl_secagg_keys_msg, s_pk),
    OPTIONAL(hfl_secagg_keys_msg, cert, S, 0, HFL_WIRE_CERT_MAX),
    OPTIONAL(hfl_secagg_keys_msg, sig, S, 0, HFL_ID_SIG_B64_MAX),
};
const hfl_wire_msg hfl_wire_secagg_keys = {HFL_MSG_SECAGG, "secagg keys", secagg_keys_fields, N(secagg_keys_fields), 0};

static const hfl_wire_field holder_fields[] = {
    ID(hfl_secagg_holder, id),
    FIELD(hfl_secagg_holder, x, I, 1, HFL_SECAGG_MAX_HOLDERS),
    FIELD(hfl_secagg_holder, name, S, 0, HFL_ID_NAME_MAX),
    KEY(hfl_secagg_holder, c_pk), KEY(hfl_secagg_holder, s_pk),
    OPTIONAL(hfl_secagg_holder, cert, S, 0, HFL_WIRE_CERT_MAX),
    OPTIONAL(hfl_secagg_holder, sig, S, 0, HFL_ID_SIG_B64_MAX),
};
static const hfl_wire_msg holder_wire = {0, "secagg setup.holders", holder_fields, N(holder_fields), 0};

static const hfl_wire_field secagg_setup_fields[] = {
    FIELD(hfl_secagg_setup_msg, round, I, 1, 1 << 30),
    FIELD(hfl_secagg_setup_msg, weight, D, 1e-12, 1),
    FIELD(hfl_secagg_setup_msg, bits, I, 1, SECAGG_MAX_BITS),
    FIELD(hfl_secagg_setup_msg, shift, I, -2000, 2000),
    FIELD(hfl_secagg_setup_msg, clip, D, 1e-12, 1e12),
    FIELD(hfl_secagg_setup_msg, sigma, D, 0, 1e12),
    FIELD(hfl_secagg_setup_msg, sigma_count, D, 0, 1e12),
    FIELD(hfl_secagg_setup_msg, threshold, I, 1, HFL_SECAGG_MAX_HOLDERS),
    LIST(hfl_secagg_setup_msg, holders, hfl_secagg_holder, &holder_wire, HFL_SECAGG_MAX_HOLDERS),
};
const hfl_wire_msg hfl_wire_secagg_setup = {HFL_MSG_SECAGG, "secagg setup", secagg_setup_fields,
                                            N(secagg_setup_fields), 0};

static const hfl_wire_field sealed_to_fields[] = {
    ID(hfl_secagg_sealed_to, to),
    FIELD(hfl_secagg_sealed_to, ct, S, 0, HFL_SECAGG_CT_B64),
};
static const hfl_wire_msg sealed_to_wire = {0, "secagg shares.shares", sealed_to_fields, N(sealed_to_fields), 0};
static const hfl_wire_field secagg_shares_fields[] = {
    LIST(hfl_secagg_shares_msg, shares, hfl_secagg_sealed_to, &sealed_to_wire, HFL_SECAGG_MAX_HOLDERS),
};
const hfl_wire_msg hfl_wire_secagg_shares = {HFL_MSG_SECAGG, "secagg shares", secagg_shares_fields,
                                             N(secagg_shares_fields), 0};

static const hfl_wire_field sealed_from_fields[] = {
    ID(hfl_secagg_sealed_from, from),
    FIELD(hfl_secagg_sealed_from, ct, S, 0, HFL_SECAGG_CT_B64),
};
static const hfl_wire_msg sealed_from_wire = {0, "secagg inbox.shares", sealed_from_fields, N(sealed_from_fields), 0};
static const hfl_wire_field secagg_inbox_fields[] = {
    FIELD(hfl_secagg_inbox_msg, round, I, 1, 1 << 30),
    LIST(hfl_secagg_inbox_msg, shares, hfl_secagg_sealed_from, &sealed_from_wire, HFL_SECAGG_MAX_HOLDERS),
};
const hfl_wire_msg hfl_wire_secagg_inbox = {HFL_MSG_SECAGG, "secagg inbox", secagg_inbox_fields,
                                            N(secagg_inbox_fields), 0};

static const hfl_wire_field secagg_unmask_list_fields[] = {
    FIELD(hfl_secagg_unmask_list_msg, round, I, 1, 1 << 30),
    IDS(hfl_secagg_unmask_list_msg, alive),
    IDS(hfl_secagg_unmask_list_msg, dropped),
};
const hfl_wire_msg hfl_wire_secagg_unmask_list = {HFL_MSG_SECAGG, "secagg unmask_list", secagg_unmask_list_fields,
                                                  N(secagg_unmask_list_fields), 0};

static const hfl_wire_field reveal_fields[] = {ID(hfl_secagg_reveal, of), KEY(hfl_secagg_reveal, share)};
static const hfl_wire_msg reveal_wire = {0, "secagg unmask.shares", reveal_fields, N(reveal_fields), 0};
static const hfl_wire_field secagg_unmask_fields[] = {
    LIST(hfl_secagg_unmask_msg, shares, hfl_secagg_reveal, &reveal_wire, HFL_SECAGG_MAX_HOLDERS),
};
const hfl_wire_msg hfl_wire_secagg_unmask = {HFL_MSG_SECAGG, "secagg unmask", secagg_unmask_fields,
                                             N(secagg_unmask_fields), 0};

static const hfl_wire_field fetch_fields[] = {
    FIELD(hfl_fetch_msg, round, I, 1, 1 << 30),
    FIELD(hfl_fetch_msg, version, I, 0, I32),
    FIELD(hfl_fetch_msg, base_version, I, -1, I32),
    FIELD(hfl_fetch_msg, offset, I, 0, 1e15),
};
const hfl_wire_msg hfl_wire_fetch = {HFL_MSG_FETCH, "fetch", fetch_fields, N(fetch_fields), 0};

static const hfl_wire_field put_fields[] = {
    FIELD(hfl_put_msg, round, I, 1, 1 << 30),
    FIELD(hfl_put_msg, offset, I, 0, 1e15),
    FIELD(hfl_put_msg, payload_bytes, I, 1, 1e15),
    FIELD(hfl_put_msg, payload_sha256, S, 0, 64),
};
const hfl_wire_msg hfl_wire_put = {HFL_MSG_PUT, "put", put_fields, N(put_fields), 0};

static const hfl_wire_field put_reply_fields[] = {
    FIELD(hfl_put_reply_msg, round, I, 1, 1 << 30),
    FIELD(hfl_put_reply_msg, have, I, 0, 1e15),
};
const hfl_wire_msg hfl_wire_put_reply = {HFL_MSG_PUT, "put (reply)", put_reply_fields, N(put_reply_fields), 0};

static const hfl_wire_field tier_client_fields[] = {
    FIELD(hfl_tier_client, name, S, 0, HFL_ID_NAME_MAX),
    {"hello", HFL_WIRE_OBJ, 0, 0, 0, offsetof(hfl_tier_client, hello), sizeof(const cJSON *), 0, NULL, NULL, 0, 0},
    FIELD(hfl_tier_client, seen_ms, I, 0, 1e15),
};
static const hfl_wire_msg tier_client_wire = {0, "tier sync.clients", tier_client_fields, N(tier_client_fields), 0};
static const hfl_wire_field tier_sync_fields[] = {
    FIELD(hfl_tier_sync_msg, op, S, 0, 15),
    FIELD(hfl_tier_sync_msg, have_version, I, -1, I32),
    LIST(hfl_tier_sync_msg, clients, hfl_tier_client, &tier_client_wire, HFL_TIER_MAX_CLIENTS),
};
const hfl_wire_msg hfl_wire_tier_sync = {HFL_MSG_TIER, "tier sync", tier_sync_fields, N(tier_sync_fields), 0};

static const hfl_wire_field tier_selected_fields[] = {
    FIELD(hfl_tier_selected, name, S, 0, HFL_ID_NAME_MAX),
    FIELD(hfl_tier_selected, samples_at_select, I, 0, 1e15),
    FIELD(hfl_tier_selected, declared, I, 0, 1e15),
    FIELD(hfl_tier_selected, share_cap, I, 0, 1e15),
};
static const hfl_wire_msg tier_selected_wire = {0, "tier sync (reply).selected", tier_selected_fields,
                                                N(tier_selected_fields), 0};
static const hfl_wire_field tier_sync_reply_fields[] = {
    FIELD(hfl_tier_sync_reply_msg, version, I, 0, I32),
    FIELD(hfl_tier_sync_reply_msg, model_sha256, S, 0, 64),
    FIELD(hfl_tier_sync_reply_msg, round, I, 0, 1 << 30),
    FIELD(hfl_tier_sync_reply_msg, open, B, 0, 0),
    FIELD(hfl_tier_sync_reply_msg, done, B, 0, 0),
    FIELD(hfl_tier_sync_reply_msg, clip, D, 0, 1e30),
    FIELD(hfl_tier_sync_reply_msg, samples_planned, D, 0, 1e18),
    FIELD(hfl_tier_sync_reply_msg, shift, I, -2000, 2000),
    {"task", HFL_WIRE_OBJ, 1, 0, 0, offsetof(hfl_tier_sync_reply_msg, task), sizeof(hfl_task_msg),
     offsetof(hfl_tier_sync_reply_msg, has_task), &hfl_wire_task, NULL, 0, 0},
    LIST(hfl_tier_sync_reply_msg, selected, hfl_tier_selected, &tier_selected_wire, HFL_TIER_MAX_CLIENTS),
};
const hfl_wire_msg hfl_wire_tier_sync_reply = {HFL_MSG_TIER, "tier sync (reply)", tier_sync_reply_fields,
                                               N(tier_sync_reply_fields), 0};

static const hfl_wire_field tier_row_fields[] = {
    FIELD(hfl_tier_row, name, S, 0, HFL_ID_NAME_MAX),
    FIELD(hfl_tier_row, status, S, 0, 15),
    FIELD(hfl_tier_row, samples, I, 0, 100000000),
    FIELD(hfl_tier_row, weighed, I, 0, 100000000),
    FIELD(hfl_tier_row, norm, D, 0, 1e30),
    FIELD(hfl_tier_row, clipped, B, 0, 0),
    FIELD(hfl_tier_row, loss, D, 0, 1e30),
    FIELD(hfl_tier_row, train_s, D, 0, 1e9),
    FIELD(hfl_tier_row, bytes, D, 0, BIG),
    FIELD(hfl_tier_row, measured_peak, D, 0, BIG),
    FIELD(hfl_tier_row, predicted_peak, D, 0, BIG),
    FIELD(hfl_tier_row, trained, D, 0, 1e15),
};
static const hfl_wire_msg tier_row_wire = {0, "tier partial.rows", tier_row_fields, N(tier_row_fields), 0};
static const hfl_wire_field tier_partial_fields[] = {
    FIELD(hfl_tier_partial_msg, op, S, 0, 15),
    FIELD(hfl_tier_partial_msg, round, I, 1, 1 << 30),
    FIELD(hfl_tier_partial_msg, shift, I, -2000, 2000),
    LIST(hfl_tier_partial_msg, rows, hfl_tier_row, &tier_row_wire, HFL_TIER_MAX_CLIENTS),
};
const hfl_wire_msg hfl_wire_tier_partial = {HFL_MSG_TIER, "tier partial", tier_partial_fields,
                                            N(tier_partial_fields), 0};

const hfl_wire_msg *const hfl_wire_all[] = {
    &hfl_wire_session, &hfl_wire_hello, &hfl_wire_challenge, &hfl_wire_welcome, &hfl_wire_pull, &hfl_wire_task, &task_secagg, &digest_wire,
    &hfl_wire_wait, &hfl_wire_update, &hfl_wire_decline, &hfl_wire_ack, &hfl_wire_error, &hfl_wire_bye,
    &hfl_wire_leave, &hfl_wire_secagg_step, &hfl_wire_secagg_keys, &hfl_wire_secagg_setup, &holder_wire,
    &hfl_wire_secagg_shares, &sealed_to_wire, &hfl_wire_secagg_inbox, &sealed_from_wire, &hfl_wire_secagg_unmask_list,
    &hfl_wire_secagg_unmask, &reveal_wire, &hfl_wire_fetch, &hfl_wire_put, &hfl_wire_put_reply,
    &hfl_wire_tier_sync, &tier_client_wire, &hfl_wire_tier_sync_reply, &tier_selected_wire, &hfl_wire_tier_partial,
    &tier_row_wire,
};
const int hfl_wire_n_all = N(hfl_wire_all);
