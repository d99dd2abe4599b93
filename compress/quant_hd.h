/* quant_hd.h: the per-element arithmetic of the codecs, shared by the C loops
 * in compress/ and any CUDA kernel (HFL_HD, see kernels/hd.h).
 *
 * Stochastic rounding (int8, int4): scale = absmax / qmax per block (qmax 127
 * or 7); y = x / scale clamped to [-qmax, qmax]; q = floor(y) + [u < frac(y)].
 * The uniform u has 16 bits: u = (b + 1/2) / 2^16 for a 16-bit b drawn from
 * Philox (hfl_sr_bits16). frac(y) - y + floor(y) is exact, so P(round up) is
 * ceil(2^16 frac - 1/2) / 2^16, within 2^-17 of frac: |E[q] - y| <= 2^-17, i.e.
 * the bias is at most 2^-17 of a block scale per element (a 32-bit u would give
 * 2^-24; 16 bits lets one Philox call serve 8 values). |q * scale - x| < scale.
 * A block whose scale is 0 (all zeros, or absmax / qmax underflows) encodes
 * q = 0 and error feedback keeps the value.
 *
 * Randomness layout (this differs from philox.h's 4-lanes-per-call default):
 * element i of tensor (seed, round, client, tensor) uses Philox-4x32-10 with
 * key (seed lo, seed hi ^ HFL_STREAM_QUANT * 0x85EBCA6B), counter
 * (i >> 3, round ^ (i >> 35), client, tensor), output word (i >> 1) & 3, and
 * its low (i even) or high (i odd) 16 bits. A CUDA thread calls hfl_sr_bits16
 * for its element; the CPU encoder runs Philox over arrays of eight
 * independent counters (compress/codec_sr.c) and gets the same bits.
 *
 * fp16 / bf16: the conversions (round to nearest even, on the bits) live in
 * kernels/half_hd.h, shared with the device layer's 2-byte ops; this header
 * includes it. The codecs saturate finite values
 * past the format's largest finite value to that value (hfl_*_saturate) so a
 * finite update stays finite; Inf and NaN are kept and the decoder rejects them.
 *
 * Decode-accumulate is acc + wscale * q (wscale = weight * block scale, taken
 * once per block by the caller) or acc + weight * value. */
#ifndef HFL_QUANT_HD_H
#define HFL_QUANT_HD_H

#include <math.h>
#include <stdint.h>

#include "kernels/half_hd.h"
#include "kernels/hd.h"
#include "kernels/philox.h"

/* Running absmax that propagates NaN (fmaxf would drop it), so a NaN input
 * yields a NaN scale that the decoder rejects. */
static inline HFL_HD float hfl_q8_absmax(float m, float x) {
    float a = fabsf(x);
    return (a > m || a != a) ? a : m;
}

static inline HFL_HD float hfl_q8_scale(float absmax) { return absmax / 127.0f; }
static inline HFL_HD float hfl_q4_scale(float absmax) { return absmax / 7.0f; }

/* The 16 random bits for element `index` (layout in the header comment). */
static inline HFL_HD uint32_t hfl_sr_bits16(uint64_t seed, uint32_t round, uint32_t client,
                                            uint32_t tensor, uint64_t index) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ (HFL_STREAM_QUANT * 0x85EBCA6Bu)};
    uint32_t ctr[4] = {(uint32_t)(index >> 3), round ^ (uint32_t)(index >> 35), client, tensor};
    uint32_t out[4];
    hfl_philox4x32_10(ctr, key, out);
    /* A select chain, not out[s]: a run-time index would put out[] in a CUDA
     * thread's local memory (a 16-byte stack frame per thread). */
    uint32_t s = (uint32_t)(index >> 1) & 3u;
    uint32_t word = s == 0 ? out[0] : s == 1 ? out[1] : s == 2 ? out[2] : out[3];
    return (word >> (16 * (index & 1))) & 0xFFFFu;
}

/* u = (bits16 + 1/2) / 2^16, in (0, 1), exact in float. */
static inline HFL_HD float hfl_sr_uniform(uint32_t bits16) {
    return ((float)bits16 + 0.5f) * (1.0f / 65536.0f);
}

/* Stochastic rounding of x to a multiple of scale, clamped to [-qmax, qmax].
 * Rounds up when u < frac(y) rather than computing floor(y + u): the sum would be
 * rounded to float and could round up too often, while y - floor(y) is exact, so
 * an exact multiple never moves. Written without branches or library calls so the
 * encoder's loop vectorises (SSE2 has no floor: truncate, then step down when the
 * truncation rose). y is clamped first, which also makes the int conversion
 * defined for NaN (-> +qmax) and Inf (payload rejected later by its scale). */
static inline HFL_HD int32_t hfl_sr_round_pos(float x, float scale, float u, float qmax) {
    float y = x / scale;
    y = y < qmax ? y : qmax;
    y = y > -qmax ? y : -qmax;
    int32_t t = (int32_t)y; /* floor in integers: gcc will not if-convert a ?: over an */
    t -= (float)t > y;      /* FP operation (it could trap), but integer adds of */
    t += u < y - (float)t;  /* comparisons vectorise; y - t is exact, as is (float)t */
    return t;
}

/* hfl_sr_round_pos for scale > 0; 0 for a zero (or NaN) scale. A CPU loop tests the
 * block's scale once and calls hfl_sr_round_pos, which gcc vectorises without the
 * branch; the result is the same. */
static inline HFL_HD int32_t hfl_sr_round(float x, float scale, float u, float qmax) {
    return scale > 0.0f ? hfl_sr_round_pos(x, scale, u, qmax) : 0;
}

static inline HFL_HD int8_t hfl_q8_round(float x, float scale, float u) {
    return (int8_t)hfl_sr_round(x, scale, u, 127.0f);
}

static inline HFL_HD int8_t hfl_q4_round(float x, float scale, float u) {
    return (int8_t)hfl_sr_round(x, scale, u, 7.0f);
}

/* acc + wscale * q, where wscale = weight * block scale (int8, int4, sign). */
static inline HFL_HD float hfl_q8_accum(float acc, int32_t q, float wscale) {
    return acc + wscale * (float)q;
}

/* The two int4 values in a byte: element 2j in the low nibble, 2j + 1 in the high
 * one, each 4-bit two's complement in [-7, 7] (-8 is invalid). */
static inline HFL_HD uint8_t hfl_q4_pack(int32_t lo, int32_t hi) {
    return (uint8_t)(((uint32_t)lo & 0xFu) | ((uint32_t)hi & 0xFu) << 4);
}
static inline HFL_HD int32_t hfl_q4_lo(uint8_t b) { return (int32_t)((uint32_t)b << 28) >> 28; }
static inline HFL_HD int32_t hfl_q4_hi(uint8_t b) { return (int32_t)((uint32_t)b << 24) >> 28; }

/* acc + weight * x for the uncompressed codec. */
static inline HFL_HD float hfl_fp32_accum(float acc, float x, float weight) {
    return acc + weight * x;
}

/* sign: +scale or -scale by bit (1 = negative). The decoded value flips the sign
 * bit of wscale, so the decode loop is an xor and an add. */
static inline HFL_HD float hfl_sign_value(uint32_t bit, float wscale) {
    return hfl_bits_f32(hfl_f32_bits(wscale) ^ (bit << 31));
}

#define HFL_F16_MAX 65504.0f

/* x, or +-max when x is finite and would round past the largest finite value. */
static inline HFL_HD float hfl_saturate(float x, float max_finite, float round_limit) {
    float a = fabsf(x);
    uint32_t sat = 0u - (uint32_t)((a >= round_limit) & (a <= 3.40282347e38f));
    uint32_t s = hfl_f32_bits(copysignf(max_finite, x));
    return hfl_bits_f32((sat & s) | (~sat & hfl_f32_bits(x)));
}
static inline HFL_HD float hfl_f16_saturate(float x) { return hfl_saturate(x, HFL_F16_MAX, 65520.0f); }
/* bf16's largest finite value is 0x7F7F0000; it rounds to Inf from 0x7F7F8000 up. */
static inline HFL_HD float hfl_bf16_saturate(float x) {
    return hfl_saturate(x, hfl_bits_f32(0x7F7F0000u), hfl_bits_f32(0x7F7F8000u));
}

#endif
