/* agg_disk.h: the round's updates kept on disk until the close, for the
 * aggregator's sum on disk (aggregate.h, ON DISK).
 *
 * Each accepted update's body (its codec's bytes, or topk's expanded
 * indices and values) is appended to one file, unlinked as it is made, with
 * the factor that weights and clips it; reset() empties the file for the
 * next round. At the close the aggregator reads the updates back a block of
 * values at a time (agg_disk_load), every update's piece of that block, and
 * sums them into a block-sized accumulator. The file is the only place the
 * bodies are kept: memory holds the list of entries and the buffers of one
 * block. */
#ifndef HFL_COORD_AGG_DISK_H
#define HFL_COORD_AGG_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "compress/payload_hd.h"
#include "kernels/agg.h"

/* Values a block covers unless the caller says otherwise: 2 MiB of int64
 * sum, 1 MiB of decoded floats an update. */
#define AGG_DISK_BLOCK ((size_t)1 << 18)

typedef struct {
    uint64_t off;     /* its bytes' place in the file */
    uint64_t k;       /* topk: its entries, k uint32 indices then k fp16 values */
    uint64_t *starts; /* topk: the first entry of each block, and k (blocks + 1) */
    int kind;         /* HFL_PAYLOAD_* of the bytes */
    uint32_t block;  /* the codec's block size */
    double f;        /* the factor add_fixed scales it by */
} agg_disk_entry;

typedef struct {
    int fd;
    size_t n, block;     /* values of an update; values a block covers */
    uint64_t end;        /* bytes the round's entries take */
    agg_disk_entry *e;
    int n_e, cap_e;
    int64_t *acc;                    /* block values of sum */
    float *x[HFL_AGG_MAX_BATCH];     /* a slot's decoded values, block of them */
    uint8_t *raw[HFL_AGG_MAX_BATCH]; /* a slot's bytes read back */
    size_t raw_cap[HFL_AGG_MAX_BATCH];
} agg_disk;

/* A store for updates of n values in a new, unlinked file in dir, summed
 * `block` values at a time (0: AGG_DISK_BLOCK); -1 with err. */
int agg_disk_open(agg_disk *d, const char *dir, size_t n, size_t block, char *err);
void agg_disk_free(agg_disk *d);
/* Drops the round's entries (and their disk space). */
void agg_disk_reset(agg_disk *d);

/* Appends a validated payload's body (bytes of it, kind and block as its
 * header says) with its factor; -1 with err (nothing kept) when the file
 * will not take it. */
int agg_disk_put(agg_disk *d, int kind, uint32_t block, const uint8_t *body, size_t bytes, double f, char *err);
/* The same for a topk update: k strictly increasing indices and their fp16 values. */
int agg_disk_put_topk(agg_disk *d, const uint32_t *idx, const uint8_t *vals, size_t k, double f, char *err);

/* Entry u's values [b0, b0 + m) (b0 a block's first value, m its values)
 * as a payload *p that the ops read from value 0, in slot s's buffers; the
 * same values, bit for bit, as the whole payload's from b0; ops->decode
 * decodes a piece that starts inside a codec block. -1 with err when the
 * file cannot be read back as it was written. */
int agg_disk_load(agg_disk *d, const hfl_agg_ops *ops, int u, int s, size_t b0, size_t m, hfl_payload *p,
                  char *err);

/* topk's norm pass without its dense vector: the same sum of squares and
 * largest |value| as ops->norm over the n-value vector the k values
 * scatter into (agg_hd.h's chunks, summed in chunk order; a chunk with
 * no value adds zero). */
void agg_disk_topk_norm(const hfl_agg_ops *ops, size_t n, const uint32_t *idx, const uint8_t *vals, size_t k,
                        double *partials, hfl_agg_norm *out);

#endif
