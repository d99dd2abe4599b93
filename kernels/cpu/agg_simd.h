/* agg_simd.h: the CPU aggregator's hot loops (kernels/cpu/agg_cpu.c) in
 * AVX-512 and AVX2 intrinsics, the instruction set chosen once at run time;
 * a NULL loop means agg_cpu.c's own C loop. Each computes the kernels/agg_hd.h
 * body's IEEE operations one for one in wider registers (no reassociation,
 * no contraction), so every level gives the same bits;
 * tests/kernels/test_agg_bodies.c runs the ops at every level the machine
 * has against the CUDA twin. */
#ifndef HFL_AGG_SIMD_H
#define HFL_AGG_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/agg_hd.h"

enum { HFL_AGG_SIMD_C, HFL_AGG_SIMD_AVX2, HFL_AGG_SIMD_AVX512 };

/* How an add loop starts from o (see int8_add). */
enum { HFL_AGG_ADD_ZERO, HFL_AGG_ADD_FIRST, HFL_AGG_ADD_REST };

typedef struct {
    int level; /* HFL_AGG_SIMD_* */
    /* o[t] = hfl_q8_accum(0.0f, q[t], wscale), t < len. */
    void (*int8_decode)(const int8_t *q, size_t len, float wscale, float *o);
    /* o[t] = base + r, t < len, in 64-bit two's complement, where r =
     * hfl_agg_round_fixed(f * v) + mbits, v = hfl_q8_accum(0.0f, q[t],
     * wscale) and mbits the bits of its magic 1.5 * 2^52 (r is y + magic read
     * as an integer: the rounding without its subtraction), and base is
     * `bias` (HFL_AGG_ADD_ZERO: o[t] not read), o[t] + bias (ADD_FIRST) or
     * o[t] (ADD_REST). A pass of count updates gives its first update's add
     * bias = -count * mbits and the others none, so that each o[t] ends
     * where count hfl_agg_add_fixed calls leave it, with one subtraction
     * where they make count. */
    void (*int8_add)(const int8_t *q, size_t len, float wscale, double f, int64_t *o, int mode, int64_t bias);
    /* The same with v = x[j], j < m. */
    void (*float_add)(const float *x, size_t m, double f, int64_t *a, int mode, int64_t bias);
    /* s[l] = lane l's sum of squares of a full chunk x (HFL_AGG_CHUNK values,
     * agg_hd.h's lanes, in t order); returns the largest |x|'s bits. */
    uint32_t (*chunk_lanes)(const float *x, double *s);
    /* out[i] = hfl_agg_mean_value(acc[i], inv); 1 when every out[i] is finite. */
    int (*finish)(const int64_t *acc, size_t n, double inv, float *out);
    /* memcpy with non-temporal stores (not through the cache, so no read
     * of dst's lines first), for bytes that will be read back only after
     * the cache has turned over: a large batch's staged payloads, a large
     * accumulator and mean. */
    void (*stream_copy)(void *dst, const void *src, size_t bytes);
    /* Bytes written by one pass (a batch's staged payloads; an add pass's
     * acc and mean) beyond which the CPU ops write with stream_copy. */
    size_t stream_bytes;
} hfl_agg_simd;

/* stream_bytes: 32 MiB, more than a core's share of a last-level cache, so
 * that the lines would be gone before they are read again. */
#define HFL_AGG_STREAM_BYTES ((size_t)32 << 20)

/* int8_add's bias for a pass of count updates: -count * mbits. */
static inline int64_t hfl_agg_simd_bias(int count) {
    const double magic = HFL_AGG_ROUND_MAGIC;
    uint64_t mbits;
    memcpy(&mbits, &magic, sizeof mbits);
    return (int64_t)(0 - (uint64_t)count * mbits);
}

/* The loops of the best level this CPU runs (the first call decides). */
const hfl_agg_simd *hfl_agg_simd_get(void);

/* For tests: use `level`'s loops from now on, streaming past stream_bytes
 * (0: always); -1 when this CPU (or build) does not run them. */
int hfl_agg_simd_force(int level, size_t stream_bytes);

#endif
