/* philox.h: Philox-4x32-10, the counter-based generator behind all of hfl's randomness.
 *
 * Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11): ten
 * rounds of a 4x32-bit multiply-xor bijection keyed by 2x32 bits. Output
 * depends only on (key, counter), so the CPU and the GPU draw the same bits
 * for the same (seed, round, client, tensor, index), a run is reproducible,
 * and a resumed run equals an uninterrupted one.
 *
 * Convention: key = (seed low 32 bits, seed high 32 bits ^ stream), where the
 * stream says what the numbers are for (HFL_STREAM_*); counter = (index / 4,
 * round, client, tensor); lane index % 4 of the result is used. */
#ifndef HFL_PHILOX_H
#define HFL_PHILOX_H

#include <stdint.h>

#include "kernels/hd.h"

enum {
    HFL_STREAM_INIT = 1,      /* parameter initialisation */
    HFL_STREAM_SHUFFLE = 2,   /* data order */
    HFL_STREAM_PARTITION = 3, /* assigning samples to clients */
    HFL_STREAM_QUANT = 4,     /* stochastic rounding in codecs */
};

typedef struct {
    uint32_t k[2];
    uint32_t c[4];
} hfl_philox_state;

static inline HFL_HD void hfl_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                            uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The 32 random bits for element `index` of the stream (seed, stream, round, client, tensor). */
static inline HFL_HD uint32_t hfl_philox_u32(uint64_t seed, uint32_t stream, uint32_t round,
                                             uint32_t client, uint32_t tensor, uint64_t index) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ (stream * 0x85EBCA6Bu)};
    uint32_t ctr[4] = {(uint32_t)(index >> 2), round ^ (uint32_t)(index >> 34), client, tensor};
    uint32_t out[4];
    hfl_philox4x32_10(ctr, key, out);
    return out[index & 3];
}

/* Uniform in [0, 1) with 24 bits of resolution (exact in float). */
static inline HFL_HD float hfl_u01(uint32_t bits) { return (float)(bits >> 8) * (1.0f / 16777216.0f); }

/* Uniform in (0, 1), for logarithms (Box-Muller, gamma sampling). */
static inline HFL_HD double hfl_u01_open(uint32_t bits) { return ((double)bits + 0.5) * (1.0 / 4294967296.0); }

#endif
