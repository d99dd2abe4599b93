/* wire.h: a message's metadata as a typed C struct, described once by a
 * table of its fields, which both encodes it and decodes it.
 *
 * Every message kind of the protocol (proto/messages.h) is a struct with one
 * member per metadata field and an hfl_wire_msg naming each field, its JSON
 * kind, whether it may be absent, its range and where it lives in the
 * struct. The client and the coordinator write and read through the same
 * table, so neither can send a field the other does not know, and
 * tests/proto/test_wire_doc.c holds docs/protocol.md's field tables to the
 * same tables. The table's row order is the order fields are written in.
 *
 * Decoding checks each field as the typed getters of msg.h do (same ranges,
 * same one-line errors), sets an optional field's `has` flag when present,
 * and leaves a struct the caller zeroed otherwise untouched for that field.
 * Fields a table does not name are ignored, except in a strict table (the
 * hello, whose device and plan the coordinator stores), where they are
 * refused. The coordinator's round log (coordinator/round_record.h) is
 * described the same way: its null-until-known figures are NULLABLE fields,
 * its participants a LIST of structs. */
#ifndef HFL_WIRE_H
#define HFL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "proto/msg.h"

typedef enum {
    HFL_WIRE_INT,  /* int64_t in [lo, hi] */
    HFL_WIRE_NUM,  /* double in [lo, hi], finite */
    HFL_WIRE_STR,  /* char[size]: 1..hi bytes (hi < size), no control characters */
    HFL_WIRE_BOOL, /* int: 0 or 1 */
    HFL_WIRE_OBJ,  /* a nested struct described by `sub`; or, without one, a
                      borrowed const cJSON * held to `schema` (schema.c),
                      or any object when there is none */
    HFL_WIRE_LIST, /* hfl_wire_list of at most max_items: structs of `size`
                      bytes described by `sub`, or without one int64_t in [lo, hi] */
} hfl_wire_kind;

/* optional, for NUM members only: HFL_WIRE_NULLABLE writes null when `has`
 * is clear, and reads a null as absent, the member NaN. HFL_WIRE_NAN_NULL is written
 * only when `has` is set, and reads a null as NaN with `has` set. Both are
 * for the coordinator's round log, where cJSON writes a NaN (an evaluation
 * of a diverged model) as null: reading the log back gives the same JSON. */
#define HFL_WIRE_NULLABLE 2
#define HFL_WIRE_NAN_NULL 3

/* A LIST member: n items at v (decoding allocates it; hfl_wire_free frees). */
typedef struct {
    void *v;
    int n;
} hfl_wire_list;

typedef struct hfl_wire_msg hfl_wire_msg;

typedef struct {
    const char *name;
    hfl_wire_kind kind;
    int optional;  /* 1: may be absent; `has` says whether it came; or HFL_WIRE_NULLABLE */
    double lo, hi; /* INT, NUM: the range; STR: the longest length */
    size_t offset; /* the member in the struct */
    size_t size;   /* its size (STR: the buffer; LIST: an item's) */
    size_t has;    /* optional: offset of the int saying it is present */
    const hfl_wire_msg *sub;                /* OBJ: a typed nested object; LIST: an item */
    const hfl_field *schema; int n_schema;  /* OBJ without sub: its known fields */
    int max_items; /* LIST: a longer array is refused before anything is allocated */
} hfl_wire_field;

struct hfl_wire_msg {
    int type;           /* HFL_MSG_*; 0 for a nested object */
    const char *name;   /* docs/protocol.md's heading: "task", "update (declined)", "task.secagg" */
    const hfl_wire_field *fields;
    int n;
    int strict; /* fields it does not name are refused */
};

/* The struct at s as a new JSON object (NULL when out of memory): required
 * fields always, optional ones when their `has` is set. */
cJSON *hfl_wire_encode(const hfl_wire_msg *d, const void *s);
/* Adds the struct's fields to the object o (a request's session beside its
 * own fields): 0, or -1 when out of memory. */
int hfl_wire_encode_into(const hfl_wire_msg *d, const void *s, cJSON *o);
/* Reads meta into the struct at s (zeroed by the caller): 0, or -1 with err
 * naming the field. OBJ fields without `sub` point into meta, which must
 * outlive s. A LIST is allocated even on failure: hfl_wire_free frees it. */
int hfl_wire_decode(const hfl_wire_msg *d, const cJSON *meta, void *s, char *err);
/* Frees what decoding allocated in the struct at s (its LISTs, nested too). */
void hfl_wire_free(const hfl_wire_msg *d, void *s);
/* Encodes the struct as a whole message of d's type. */
uint8_t *hfl_wire_message(const hfl_wire_msg *d, const void *s, const void *payload, size_t payload_len,
                          size_t *out_len);

#endif
