/* quant_hd.h: the per-element arithmetic of the codecs, shared by the C loops
 * in compress/ and any CUDA kernel (HFL_HD, see kernels/hd.h).
 *
 * int8: scale = absmax / 127 per block; q = floor(x / scale + u) (computed
 * as floor(y) + [u < frac(y)], see hfl_q8_round), u uniform in
 * [0, 1) from philox stream HFL_STREAM_QUANT at the element's global index,
 * clamped to [-127, 127]. E[q * scale] = x, so decode is unbiased, and
 * |q * scale - x| < scale. A block whose scale is 0 (all zeros, or so small
 * that absmax / 127 underflows) encodes q = 0 and error feedback keeps it.
 * Decode-accumulate is acc + (weight * scale) * q: the product weight * scale
 * is taken once per block by the caller. */
#ifndef HFL_QUANT_HD_H
#define HFL_QUANT_HD_H

#include <math.h>
#include <stdint.h>

#include "kernels/hd.h"
#include "kernels/philox.h"

/* Running absmax that propagates NaN (fmaxf would drop it), so a NaN input
 * yields a NaN scale that the decoder rejects. */
static inline HFL_HD float hfl_q8_absmax(float m, float x) {
    float a = fabsf(x);
    return (a > m || a != a) ? a : m;
}

static inline HFL_HD float hfl_q8_scale(float absmax) { return absmax / 127.0f; }

/* The uniform u for element `index` of tensor (seed, round, client, tensor). */
static inline HFL_HD float hfl_q8_uniform(uint64_t seed, uint32_t round, uint32_t client,
                                          uint32_t tensor, uint64_t index) {
    return hfl_u01(hfl_philox_u32(seed, HFL_STREAM_QUANT, round, client, tensor, index));
}

/* The uniforms for elements 4 * quad .. 4 * quad + 3 from one Philox call: equal to
 * hfl_q8_uniform at those indices (same key and counter, all four lanes), for loops
 * that walk consecutive elements and would otherwise discard three lanes per call. */
static inline HFL_HD void hfl_q8_uniform4(uint64_t seed, uint32_t round, uint32_t client,
                                          uint32_t tensor, uint64_t quad, float u[4]) {
    uint64_t index = quad << 2;
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ (HFL_STREAM_QUANT * 0x85EBCA6Bu)};
    uint32_t ctr[4] = {(uint32_t)quad, round ^ (uint32_t)(index >> 34), client, tensor};
    uint32_t bits[4];
    hfl_philox4x32_10(ctr, key, bits);
    for (int l = 0; l < 4; l++)
        u[l] = hfl_u01(bits[l]);
}

/* Stochastic rounding of x to a multiple of scale; u in [0, 1). Rounds up when
 * u < frac(x / scale) rather than computing floor(x / scale + u): the sum would be
 * rounded to float and could round up (by up to half an ulp) too often, while
 * y - floorf(y) is exact, so an exact multiple never moves and P(up) = frac to
 * within u's 2^-24 resolution. The comparisons are written so that NaN or Inf
 * (payload rejected later) still give a defined q. */
static inline HFL_HD int8_t hfl_q8_round(float x, float scale, float u) {
    if (!(scale > 0.0f))
        return 0;
    float y = x / scale;
    float t = floorf(y);
    if (u < y - t)
        t += 1.0f;
    if (!(t > -127.0f))
        t = -127.0f;
    if (t > 127.0f)
        t = 127.0f;
    return (int8_t)t;
}

/* acc + wscale * q, where wscale = weight * block scale. */
static inline HFL_HD float hfl_q8_accum(float acc, int8_t q, float wscale) {
    return acc + wscale * (float)q;
}

/* acc + weight * x for the uncompressed codec. */
static inline HFL_HD float hfl_fp32_accum(float acc, float x, float weight) {
    return acc + weight * x;
}

#endif
