/* agg.h: the aggregation ops, the device half of the coordinator's
 * aggregator (coordinator/aggregate.h keeps validation, clipping decisions
 * and the global model on the host). A backend points to one table
 * (hfl_backend.agg): the CPU's runs the kernels/agg_hd.h bodies in loops
 * (kernels/cpu/agg_cpu.c), CUDA's runs them as kernels (kernels/cuda/agg.cu),
 * so both compute the same bits.
 *
 * Pointers are the backend's memory (alloc'ed; host memory on the CPU). On
 * CUDA the ops are enqueued on an aggregation stream of their own (never the
 * compute stream the evaluation thread uses, and never cuBLAS's handle or
 * workspace); `stage` copies through a pinned ring on that stream; the ops
 * that return a value to the host (norm, finish, all_finite, distances,
 * download) wait for that stream, and nothing else does. One thread at a
 * time (the aggregator's lock). */
#ifndef HFL_AGG_H
#define HFL_AGG_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/agg_hd.h"

/* The most updates add_fixed takes in one pass. */
#define HFL_AGG_MAX_BATCH 8

/* What the norm pass reports. */
typedef struct {
    double sumsq;  /* the sum of squares, in agg_hd.h's fixed shape */
    float maxabs;  /* the largest |value| */
    int refused;   /* stage_norm of an int8 payload: 1 when a value or a block
                      scale is one int8's decoder refuses (hfl_codec_validate
                      then says which); 0 otherwise */
} hfl_agg_norm;

typedef struct hfl_agg_ops {
    /* The most rows coordinatewise takes (k <= 1024 for every rule; a GPU's
     * limit is what one block's shared memory holds, k columns of 32). */
    int max_rule_rows;
    /* Makes what the ops need beyond the backend's context (CUDA: the
     * stream, pinned staging and a result block), once per process; 0, or -1
     * with err. NULL: nothing to make. */
    int (*prepare)(char *err);
    /* dst (backend memory) = bytes from host src; returns once src may be reused. */
    void (*stage)(void *dst, const void *src, size_t bytes);
    /* dst (host) = bytes of backend memory src, after every op enqueued so far. */
    void (*download)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    /* dst = src, bytes of backend memory that do not overlap. */
    void (*copy)(void *dst, const void *src, size_t bytes);
    /* topk: dense[0..n) = 0, then dense[idx[j]] = 0 + the fp16 value at
     * vals + 2 j (any alignment), j < k (idx strictly increasing and below n,
     * validated by the host). */
    void (*topk_scatter)(float *dense, size_t n, const uint8_t *vals, const uint32_t *idx,
                         size_t k);
    /* The norm pass over p's n values into *out (host); partials holds
     * hfl_agg_chunks(n) doubles of scratch. */
    void (*norm)(const hfl_payload *p, size_t n, double *partials, hfl_agg_norm *out);
    /* For a backend whose memory is the host's (NULL elsewhere): dst = the
     * `bytes` of src's body, and *out = src's norm, in one pass (the same
     * bytes and bits as a memcpy, then norm). An int8 body is also checked
     * in that pass, since its bytes are in cache (out->refused), so the
     * caller need only check its frame first (hfl_codec_check_frame). */
    void (*stage_norm)(void *dst, const hfl_payload *src, size_t bytes, size_t n, double *partials,
                       hfl_agg_norm *out);
    /* For a backend whose memory is the host's (NULL elsewhere): out[j] =
     * hfl_payload_value(p, i0 + j), j < m, vectorised (the sum on disk's
     * pieces that start inside a codec block, coordinator/agg_disk.h). */
    void (*decode)(const hfl_payload *p, size_t i0, size_t m, float *out);
    /* For u = 0 .. count - 1 in turn (count <= HFL_AGG_MAX_BATCH), acc[i] =
     * hfl_agg_add_fixed(acc[i], f[u], value i of p[u]), i < n: several
     * updates in one pass over acc (p and f are host arrays; the payloads'
     * bodies backend memory). */
    void (*add_fixed)(const hfl_payload *p, const double *f, int count, size_t n, int64_t *acc);
    /* Optional (NULL: the aggregator calls zero, add_fixed and finish in
     * turn): add_fixed (count >= 0) with two riders, in one pass over acc.
     * With from_zero, acc's old contents are taken as zeros and not read;
     * with mean non-NULL, mean[i] = hfl_agg_mean_value(acc[i], inv) of the
     * new acc, and the return is finish's finite flag (else 1). */
    int (*add_fixed_pass)(const hfl_payload *p, const double *f, int count, size_t n, int64_t *acc, int from_zero,
                          double inv, float *mean);
    /* row[i] = hfl_agg_row_value(value i, factor). */
    void (*store_row)(const hfl_payload *p, size_t n, double factor, float *row);
    /* out[i] = hfl_agg_mean_value(acc[i], inv); returns 1 when every out[i] is finite. */
    int (*finish)(const int64_t *acc, size_t n, double inv, float *out);
    /* 1 when every v[i] is finite. */
    int (*all_finite)(const float *v, size_t n);
    /* One server step over n values (agg_hd.h's hfl_agg_sopt_elem). */
    void (*sopt_step)(const hfl_agg_sopt *o, float *x, float *m, float *v, const float *d,
                      size_t n);
    /* out[i] = hfl_agg_coord_rule over the k rows (rows: k rows of n). */
    void (*coordinatewise)(const float *rows, int k, size_t n, int median, int trim, float *out);
    /* d (host, k x k) = the squared distances between rows, in the fixed
     * shape; partials holds k (k - 1) / 2 * (hfl_agg_chunks(n) + 1) doubles. */
    void (*distances)(const float *rows, int k, size_t n, double *partials, double *d);
    /* out[i] = hfl_agg_pick_mean(rows, n, k, pick, m, i); pick is backend
     * memory holding k ints. */
    void (*pick_mean)(const float *rows, int k, size_t n, const int *pick, int m, float *out);
} hfl_agg_ops;

#endif
