/* codec_sr.c: the stochastic-rounding machinery int8 and int4 share: Philox
 * over arrays of independent counters, and the block encoder.
 *
 * Speed: one Philox-4x32-10 call gives 128 bits = eight 16-bit uniforms (see
 * quant_hd.h for the bias bound), and the rounds run over arrays of 16
 * counters (struct of arrays). The quantize loops are branch-free
 * (hfl_sr_round_pos) and the absmax keeps NaN apart from maxps.
 * What gcc 12 -O3 vectorises (checked with -fopt-info-vec and objdump): the
 * Philox rounds (pmuludq on xmm at the SSE2 baseline, vpmuludq on ymm in the
 * AVX2 clone; with 8 lanes instead of 16, gcc's SSE2 cost model kept them
 * scalar), the absmax lanes (maxps plus an unordered compare for NaN) and both
 * quantize loops (divps, cvttps2dq, cmpps, the u16 bits widened and converted).
 * CODEC_VECTOR_CLONES (codec_impl.h) builds each hot function for AVX2 and the
 * baseline and picks one at load time; both give the same bits. Profile of
 * int8 encode with error feedback (n = 199210): ~55% Philox, ~20% absmax
 * (the pass that first reads delta and residual), ~15% quantize. */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

enum { LANES = 8, PLANES = 16 }; /* absmax lanes; Philox counters per batch */


/* Ten Philox rounds on PLANES counters; the key schedule is shared by all lanes. */
static void sr_philox_lanes(uint32_t *restrict c0, uint32_t *restrict c1, uint32_t *restrict c2,
                       uint32_t *restrict c3, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        for (int l = 0; l < PLANES; l++) {
            uint64_t p0 = (uint64_t)0xD2511F53u * c0[l];
            uint64_t p1 = (uint64_t)0xCD9E8D57u * c2[l];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
            c1[l] = (uint32_t)p1;
            c3[l] = (uint32_t)p0;
            c0[l] = n0;
            c2[l] = n2;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* Groups g .. g + PLANES - 1 into out[0 .. 8 * PLANES): lane l's words w = 0..3 are the 16-bit values
 * 2w (low half) and 2w + 1 (high half) of group g + l, i.e. the words' bytes in
 * little-endian order. */
CODEC_VECTOR_CLONES
static void sr_fill_batch(const hfl_rng_key *key, uint64_t g, uint16_t *out) {
    uint32_t k0 = (uint32_t)key->seed;
    uint32_t k1 = (uint32_t)(key->seed >> 32) ^ (HFL_STREAM_QUANT * 0x85EBCA6Bu);
    uint32_t c0[PLANES], c1[PLANES], c2[PLANES], c3[PLANES];
    for (int l = 0; l < PLANES; l++) {
        c0[l] = (uint32_t)(g + (uint64_t)l);
        c1[l] = key->round ^ (uint32_t)((g + (uint64_t)l) >> 32);
        c2[l] = key->client;
        c3[l] = key->tensor;
    }
    sr_philox_lanes(c0, c1, c2, c3, k0, k1);
    uint32_t words[4 * PLANES];
    for (int l = 0; l < PLANES; l++) {
        words[4 * l] = c0[l];
        words[4 * l + 1] = c1[l];
        words[4 * l + 2] = c2[l];
        words[4 * l + 3] = c3[l];
    }
    memcpy(out, words, sizeof words);
}

CODEC_VECTOR_CLONES
void codec_sr_bits_fill(const hfl_rng_key *key, uint64_t first_group, size_t groups,
                        uint16_t *out) {
    size_t g = 0;
    for (; g + PLANES <= groups; g += PLANES)
        sr_fill_batch(key, first_group + g, out + 8 * g);
    if (g < groups) {
        uint16_t tail[8 * PLANES];
        sr_fill_batch(key, first_group + g, tail);
        memcpy(out + 8 * g, tail, (groups - g) * 8 * sizeof(uint16_t));
    }
}

/* max |v| in eight lanes (maxps), with NaN tracked apart (a != a) so the loop has no
 * branch: the result is NaN if any v is, as hfl_q8_absmax's running form gives. */
CODEC_VECTOR_CLONES
float codec_block_absmax(const float *delta, const float *residual, size_t m) {
    float lane[LANES] = {0};
    uint32_t nan[LANES] = {0};
    size_t j = 0;
    if (residual)
        for (; j + LANES <= m; j += LANES)
            for (int l = 0; l < LANES; l++) {
                float a = fabsf(delta[j + l] + residual[j + l]);
                nan[l] |= a != a;
                lane[l] = a > lane[l] ? a : lane[l];
            }
    else
        for (; j + LANES <= m; j += LANES)
            for (int l = 0; l < LANES; l++) {
                float a = fabsf(delta[j + l]);
                nan[l] |= a != a;
                lane[l] = a > lane[l] ? a : lane[l];
            }
    float a = 0.0f;
    for (; j < m; j++)
        a = hfl_q8_absmax(a, residual ? delta[j] + residual[j] : delta[j]);
    for (int l = 0; l < LANES; l++)
        a = hfl_q8_absmax(a, nan[l] ? NAN : lane[l]);
    return a;
}

/* The quantize loops for a block whose scale is > 0, one without and one with error
 * feedback; bits is indexed by block position (the caller has applied the block's
 * offset within its first group). */
CODEC_VECTOR_CLONES
static void sr_round_plain(const float *restrict delta, const uint16_t *restrict bits, size_t m,
                           float scale, float qmax, int8_t *restrict q) {
    for (size_t j = 0; j < m; j++)
        q[j] = (int8_t)hfl_sr_round_pos(delta[j], scale, hfl_sr_uniform(bits[j]), qmax);
}

CODEC_VECTOR_CLONES
static void sr_round_ef(const float *restrict delta, float *restrict residual,
                        const uint16_t *restrict bits, size_t m, float scale, float qmax,
                        int8_t *restrict q) {
    for (size_t j = 0; j < m; j++) {
        float v = delta[j] + residual[j];
        int32_t k = hfl_sr_round_pos(v, scale, hfl_sr_uniform(bits[j]), qmax);
        q[j] = (int8_t)k;
        residual[j] = v - hfl_q8_accum(0.0f, k, scale);
    }
}

CODEC_VECTOR_CLONES
float codec_sr_encode_block(const float *delta, float *residual, size_t start, size_t m,
                            const hfl_rng_key *key, float qmax, uint16_t *scratch, int8_t *q) {
    float scale = codec_block_absmax(delta, residual, m) / qmax;
    if (!(scale > 0.0f)) { /* hfl_sr_round's zero-scale case: q = 0, residual keeps v */
        memset(q, 0, m);
        for (size_t j = 0; residual && j < m; j++)
            residual[j] += delta[j];
        return scale;
    }
    uint64_t g0 = start >> 3, g1 = (start + m - 1) >> 3;
    codec_sr_bits_fill(key, g0, (size_t)(g1 - g0 + 1), scratch);
    const uint16_t *bits = scratch + (start & 7);
    if (residual)
        sr_round_ef(delta, residual, bits, m, scale, qmax, q);
    else
        sr_round_plain(delta, bits, m, scale, qmax, q);
    return scale;
}
