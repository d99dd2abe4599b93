/* msg.h: hfl's wire messages: framing, encoding, decoding and validation.
 *
 * A message is a fixed 24-byte header, then `meta_len` bytes of UTF-8 JSON
 * (an object), then `payload_len` bytes of binary payload (tensors).
 * Header, all little-endian:
 *   u32 magic 'HFL1' (0x314C4648), u16 version (1), u16 type,
 *   u32 meta_len, u32 payload_len (note: u32 caps a payload at 4 GiB),
 *   u32 crc32c of meta and payload, u32 reserved (0).
 * hfl_msg_decode checks everything at this boundary: size, magic, version,
 * known type, lengths agreeing with the buffer, CRC, JSON nested at most
 * HFL_MSG_MAX_DEPTH deep that parses to an object, and the payload limit.
 * Typed getters then range-check fields, and hfl_meta_check_fields holds an
 * object a peer wants kept (a client's device and plan) to a schema, so code
 * past the decoder trusts what it reads. */
#ifndef HFL_MSG_H
#define HFL_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define HFL_MSG_MAGIC 0x314C4648u
#define HFL_MSG_VERSION 1
#define HFL_MSG_HEADER_BYTES 24
#define HFL_MSG_MAX_META (1u << 20)
/* Metadata nests at most this deep (the object itself is depth 1; hfl's own
 * messages need 4: a welcome's model_spec, its layers, a layer). A peer's
 * JSON is copied into the report, which readers with the usual nesting limits
 * (64 and up) must be able to parse. */
#define HFL_MSG_MAX_DEPTH 16

typedef enum {
    HFL_MSG_HELLO = 1,   /* client -> coordinator: identity, device, plan, samples */
    HFL_MSG_WELCOME = 2, /* reply to hello: client id, model, codec, run settings */
    HFL_MSG_PULL = 3,    /* client asks for work */
    HFL_MSG_TASK = 4,    /* reply to pull: round, version, settings; payload: global weights */
    HFL_MSG_WAIT = 5,    /* reply to pull: come back in `ms` */
    HFL_MSG_UPDATE = 6,  /* client -> coordinator: metrics; payload: encoded delta */
    HFL_MSG_ACK = 7,     /* reply to update */
    HFL_MSG_ERROR = 8,   /* any reply: `error` says why */
    HFL_MSG_BYE = 9,     /* reply to pull when the run is over; or client leaving */
    HFL_MSG_CHALLENGE = 10, /* reply to a hello without proof: sign this (proto/hello.h) */
    HFL_MSG_SECAGG = 11, /* secure aggregation's steps, both ways (proto/secagg.h) */
    HFL_MSG_FETCH = 12,  /* a chunk of a task's weights, both ways (proto/messages.h) */
    HFL_MSG_PUT = 13,    /* a chunk of an update, client -> coordinator; reply: what it holds */
    HFL_MSG_TIER = 14,   /* an aggregator's sync or partial sum, aggregator -> root, and its reply */
} hfl_msg_type;
#define HFL_MSG_LAST HFL_MSG_TIER

const char *hfl_msg_type_name(int type); /* "hello", ... or "unknown" */

/* The SHA-256 of n bytes at p in lowercase hex: the digests a task names
 * for its weights and their chunks, and a model's final_model_sha256. */
void hfl_sha256_hex(const void *p, size_t n, char hex[65]);

typedef struct {
    int type;
    cJSON *meta;            /* owned; freed by hfl_msg_free */
    const uint8_t *payload; /* points into the decoded buffer (not owned) */
    size_t payload_len;
    const uint8_t *meta_raw; /* meta's bytes as sent (what a signature covers), in the buffer */
    size_t meta_len;
} hfl_msg;

/* CRC-32C (Castagnoli), as in iSCSI and ext4. */
uint32_t hfl_crc32c(uint32_t crc, const void *data, size_t len);

/* Encodes into a malloc'd buffer; *out_len is its size. meta may be NULL ({}). */
uint8_t *hfl_msg_encode(int type, const cJSON *meta, const void *payload, size_t payload_len,
                        size_t *out_len);
/* Decodes buf (len bytes) and validates it; payloads over max_payload are refused. */
int hfl_msg_decode(const uint8_t *buf, size_t len, size_t max_payload, hfl_msg *out, char *err);
void hfl_msg_free(hfl_msg *m);

/* Typed, range-checked field getters: -1 with err naming the field when
 * missing, of the wrong JSON type, or out of range. */
int hfl_meta_int(const cJSON *meta, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err);
int hfl_meta_num(const cJSON *meta, const char *key, double lo, double hi, double *out, char *err);
/* The string must be present, 1..maxlen bytes long and free of control
 * characters (it may end up in logs); copied into out (maxlen+1 bytes). */
int hfl_meta_str(const cJSON *meta, const char *key, size_t maxlen, char *out, char *err);

/* The nesting depth of JSON text (objects and arrays; a scalar is 0, {} is
 * 1), counted up to `stop` and no further; brackets inside strings do not
 * count. */
int hfl_json_depth(const char *text, size_t len, int stop);

/* A schema of known fields (proto/schema.c): each a string of 1..max bytes
 * without control characters, a number in [lo, hi], an integer in [lo, hi],
 * or a boolean. */
/* NUM_OR_NULL: a number in range, or null (a figure the sender could not measure). */
typedef enum { HFL_FIELD_STR, HFL_FIELD_NUM, HFL_FIELD_INT, HFL_FIELD_BOOL, HFL_FIELD_NUM_OR_NULL } hfl_field_kind;
typedef struct {
    const char *name;
    hfl_field_kind kind;
    double lo, hi; /* STR: hi is the longest length */
} hfl_field;
/* Checks that obj is an object holding only fields of the schema, each as
 * the schema says (all are optional); what: the object's name for err
 * ("device"; NULL at the top), so the error names the field ("device.name"). */
int hfl_meta_check_fields(const cJSON *obj, const char *what, const hfl_field *schema, int n, char *err);

#endif
