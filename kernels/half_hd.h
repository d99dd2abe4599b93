/* half_hd.h: fp32 <-> IEEE binary16 and bfloat16 conversions, the device
 * layer's 2-byte storage types (kernels/backend.h, STORAGE TYPES) and the
 * codecs' half-precision payloads (compress/quant_hd.h, codec_half.c).
 *
 * Round to nearest even, written on the bits (no _Float16, no __half), so the
 * CPU and a CUDA thread (HFL_HD, kernels/hd.h) give the same bits for every
 * input: correct for subnormals, infinities and NaN (NaN stays a quiet NaN,
 * sign kept). A finite value past the format's largest finite value becomes
 * Inf; the codecs that must not overflow saturate first (quant_hd.h).
 * Branch-free (masks rather than ?: where gcc would not if-convert), so the
 * CPU loops vectorise and a warp does not diverge. */
#ifndef HFL_HALF_HD_H
#define HFL_HALF_HD_H

#include <stdint.h>
#include <string.h>

#include "kernels/hd.h"

static inline HFL_HD uint32_t hfl_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline HFL_HD float hfl_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16 with round to nearest even (F. Giesen's float_to_half_fast3_rtne):
 * normal results round by adding 0xFFF plus the mantissa's lowest kept bit; a
 * carry out of the mantissa moves to the next binade, and past 65520 into
 * 0x7C00 = Inf. Subnormal results come from adding 0.5f, whose ulp (2^-24) is the
 * half subnormal step, so the float adder does the rounding. */
static inline HFL_HD uint16_t hfl_f32_to_f16(float f) {
    uint32_t x = hfl_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7FFFFFFFu;
    uint32_t sub = hfl_f32_bits(hfl_bits_f32(a) + 0.5f) - 0x3F000000u;
    uint32_t norm = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13; /* 0xC8000000 = (15-127) << 23 */
    uint32_t big = 0x7C00u | ((0u - (uint32_t)(a > 0x7F800000u)) & 0x0200u); /* Inf, NaN */
    uint32_t is_big = 0u - (uint32_t)(a >= 0x47800000u), is_sub = 0u - (uint32_t)(a < 0x38800000u);
    uint32_t h = (is_big & big) | (~is_big & ((is_sub & sub) | (~is_sub & norm)));
    return (uint16_t)(h | sign);
}

/* Exact: normal and Inf/NaN by moving the exponent, subnormals as m * 2^-24. Written
 * with masks rather than ?: so that gcc's vectoriser sees no control flow. */
static inline HFL_HD float hfl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h & 0x7C00u, m = h & 0x3FFu;
    uint32_t inf = 0u - (uint32_t)(e == 0x7C00u), zero_e = 0u - (uint32_t)(e == 0);
    /* 0x38000000 = (127 - 15) << 23; Inf/NaN need twice that to reach 0x7F800000. */
    uint32_t bits = ((uint32_t)(h & 0x7FFFu) << 13) + 0x38000000u + (inf & 0x38000000u);
    uint32_t sub = hfl_f32_bits((float)m * (1.0f / 16777216.0f));
    return hfl_bits_f32(((zero_e & sub) | (~zero_e & bits)) | sign);
}

/* bfloat16 with round to nearest even; NaN is kept quiet (a NaN whose payload sits in the
 * low 16 bits must not round to Inf or truncate to Inf). */
static inline HFL_HD uint16_t hfl_f32_to_bf16(float f) {
    uint32_t x = hfl_f32_bits(f);
    uint32_t r = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    return (uint16_t)((x & 0x7FFFFFFFu) > 0x7F800000u ? (x >> 16) | 0x40u : r);
}

static inline HFL_HD float hfl_bf16_to_f32(uint16_t h) { return hfl_bits_f32((uint32_t)h << 16); }

#endif
