/* aes_ctr.c: AES-256-CTR's keystream with the x86 AES instructions, eight
 * blocks in flight (proto/aes_ctr.h).
 *
 * Secure aggregation expands every mask key into a keystream as long as the
 * update (proto/secagg_crypto.c, hfl_mask_apply): 15 of them a round for a
 * client with 14 neighbours. mbedTLS 2.28 encrypts one block per call, each
 * waiting on the one before: 0.65 GB/s here (docs/benchmarks.md). The
 * counter blocks are independent, so eight are encrypted together and the
 * AESENC latency overlaps (Gueron, "Intel Advanced Encryption Standard (AES)
 * New Instructions Set", Intel white paper 323641, 2010: the AES-256 key
 * expansion of its figure 26 and the parallel CTR of section 5). The
 * instructions take the same time for every key and data, like mbedTLS's
 * AES-NI path. Round keys are wiped after use. */
#include "proto/aes_ctr.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <emmintrin.h>
#include <wmmintrin.h>

#define AES_TARGET __attribute__((target("aes,sse2")))

/* One step of the AES-256 key schedule: the next round key from the one two
 * back (a) and the keygen assist of the previous one (t, its word picked by
 * shuffle). */
AES_TARGET static __m128i expand_step(__m128i a, __m128i t) {
    a = _mm_xor_si128(a, _mm_slli_si128(a, 4));
    a = _mm_xor_si128(a, _mm_slli_si128(a, 4));
    a = _mm_xor_si128(a, _mm_slli_si128(a, 4));
    return _mm_xor_si128(a, t);
}

/* The 15 round keys of AES-256 (FIPS 197, 5.2), the round constant an
 * immediate of each AESKEYGENASSIST. */
AES_TARGET static void expand_key(const uint8_t key[32], __m128i rk[15]) {
    rk[0] = _mm_loadu_si128((const __m128i *)key);
    rk[1] = _mm_loadu_si128((const __m128i *)(key + 16));
#define ROUND_PAIR(i, rcon)                                                                                  \
    rk[2 * (i)] = expand_step(rk[2 * (i)-2], _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[2 * (i)-1], rcon), 0xff)); \
    if ((i) < 7)                                                                                             \
        rk[2 * (i) + 1] = expand_step(rk[2 * (i)-1], _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[2 * (i)], 0), 0xaa));
    ROUND_PAIR(1, 0x01)
    ROUND_PAIR(2, 0x02)
    ROUND_PAIR(3, 0x04)
    ROUND_PAIR(4, 0x08)
    ROUND_PAIR(5, 0x10)
    ROUND_PAIR(6, 0x20)
    ROUND_PAIR(7, 0x40)
#undef ROUND_PAIR
}

/* Counter block b: the 128-bit big-endian number b (mbedTLS's increment of
 * the whole block, from 0; b < 2^64). */
AES_TARGET static __m128i counter(uint64_t b) {
    return _mm_set_epi64x((long long)__builtin_bswap64(b), 0);
}

AES_TARGET static void ctr_blocks(const __m128i rk[15], uint64_t first, uint8_t *out, size_t blocks) {
    size_t i = 0;
    for (; i + 8 <= blocks; i += 8) {
        __m128i x[8];
        for (int j = 0; j < 8; j++) x[j] = _mm_xor_si128(counter(first + i + (uint64_t)j), rk[0]);
        for (int r = 1; r < 14; r++)
            for (int j = 0; j < 8; j++) x[j] = _mm_aesenc_si128(x[j], rk[r]);
        for (int j = 0; j < 8; j++) _mm_storeu_si128((__m128i *)(out + 16 * (i + (size_t)j)), _mm_aesenclast_si128(x[j], rk[14]));
    }
    for (; i < blocks; i++) {
        __m128i x = _mm_xor_si128(counter(first + i), rk[0]);
        for (int r = 1; r < 14; r++) x = _mm_aesenc_si128(x, rk[r]);
        _mm_storeu_si128((__m128i *)(out + 16 * i), _mm_aesenclast_si128(x, rk[14]));
    }
}

int hfl_aes256_ctr_available(void) {
    static _Atomic int have = -1; /* threads that ask at once all find the same answer */
    int h = have;
    if (h < 0) {
        __builtin_cpu_init();
        have = h = __builtin_cpu_supports("aes") && __builtin_cpu_supports("sse2");
    }
    return h;
}

AES_TARGET static void ctr_run(const uint8_t key[32], uint64_t first, uint8_t *out, size_t blocks) {
    __m128i rk[15];
    expand_key(key, rk);
    ctr_blocks(rk, first, out, blocks);
    volatile uint8_t *w = (volatile uint8_t *)rk; /* the round keys are the key */
    for (size_t i = 0; i < sizeof rk; i++) w[i] = 0;
}

int hfl_aes256_ctr(const uint8_t key[32], uint64_t first, uint8_t *out, size_t blocks) {
    if (!hfl_aes256_ctr_available()) return -1;
    ctr_run(key, first, out, blocks);
    return 0;
}

#else

int hfl_aes256_ctr_available(void) { return 0; }

int hfl_aes256_ctr(const uint8_t key[32], uint64_t first, uint8_t *out, size_t blocks) {
    (void)key, (void)first, (void)out, (void)blocks;
    return -1;
}

#endif
