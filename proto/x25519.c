/* x25519.c: X25519 (RFC 7748) on five 51-bit limbs (proto/x25519.h).
 *
 * A field element of GF(p), p = 2^255 - 19, is h0 + h1 2^51 + h2 2^102 +
 * h3 2^153 + h4 2^204 with 64-bit limbs; a product's limbs are 128-bit
 * sums, and 2^255 = 19 (mod p) folds the top half back in (Bernstein,
 * "Curve25519: new Diffie-Hellman speed records", PKC 2006, section 4,
 * uses radix 2^25.5 on 32-bit machines; 2^51 is the 64-bit analogue).
 * Limb bounds: fe_mul and fe_mul_small return limbs below 2^51 + 2^18;
 * fe_add of two such is below 2^53; fe_sub adds 2p before subtracting, so
 * its result is below 2^53 too. fe_mul takes limbs below 2^54: each of
 * its 128-bit sums is then below 5 x 19 x 2^108 < 2^115.
 *
 * The ladder is RFC 7748 section 5's, with a24 = 121665, 255 steps over
 * the clamped scalar's bits 254..0. It swaps with a mask, never a branch,
 * and the inversion is z^(p - 2) along the public exponent, so no branch
 * or memory address depends on a secret. Temporaries that held secrets
 * are wiped before returning. */
#include "proto/x25519.h"

#include <string.h>

#include <mbedtls/platform_util.h>

typedef uint64_t fe[5];
typedef unsigned __int128 u128;

#define MASK51 ((1ull << 51) - 1)

static void fe_copy(fe h, const fe f) { memcpy(h, f, sizeof(fe)); }

static void fe_add(fe h, const fe f, const fe g) {
    for (int i = 0; i < 5; i++) h[i] = f[i] + g[i];
}

/* h = f - g + 2p, limb by limb (2p's limbs: 2^52 - 38, then 2^52 - 2). */
static void fe_sub(fe h, const fe f, const fe g) {
    h[0] = f[0] + 0xFFFFFFFFFFFDAull - g[0];
    for (int i = 1; i < 5; i++) h[i] = f[i] + 0xFFFFFFFFFFFFEull - g[i];
}

/* The carries of t (each limb's bits from 51 up go to the next, the top
 * limb's times 19 to the first) into h. */
static void fe_carry(fe h, u128 t[5]) {
    for (int i = 0; i < 4; i++) {
        t[i + 1] += t[i] >> 51;
        t[i] &= MASK51;
    }
    u128 x = t[0] + (t[4] >> 51) * 19;
    t[4] &= MASK51;
    h[0] = (uint64_t)(x & MASK51);
    h[1] = (uint64_t)(t[1] + (x >> 51));
    h[2] = (uint64_t)t[2], h[3] = (uint64_t)t[3], h[4] = (uint64_t)t[4];
}

static void fe_mul(fe h, const fe f, const fe g) {
    uint64_t g19[5];
    for (int i = 1; i < 5; i++) g19[i] = 19 * g[i];
    u128 t[5];
    t[0] = (u128)f[0] * g[0] + (u128)f[1] * g19[4] + (u128)f[2] * g19[3] + (u128)f[3] * g19[2] + (u128)f[4] * g19[1];
    t[1] = (u128)f[0] * g[1] + (u128)f[1] * g[0] + (u128)f[2] * g19[4] + (u128)f[3] * g19[3] + (u128)f[4] * g19[2];
    t[2] = (u128)f[0] * g[2] + (u128)f[1] * g[1] + (u128)f[2] * g[0] + (u128)f[3] * g19[4] + (u128)f[4] * g19[3];
    t[3] = (u128)f[0] * g[3] + (u128)f[1] * g[2] + (u128)f[2] * g[1] + (u128)f[3] * g[0] + (u128)f[4] * g19[4];
    t[4] = (u128)f[0] * g[4] + (u128)f[1] * g[3] + (u128)f[2] * g[2] + (u128)f[3] * g[1] + (u128)f[4] * g[0];
    fe_carry(h, t);
}

static void fe_mul_small(fe h, const fe f, uint64_t c) {
    u128 t[5];
    for (int i = 0; i < 5; i++) t[i] = (u128)f[i] * c;
    fe_carry(h, t);
}

/* h = f^(p - 2) = 1/f (0 for 0). p - 2 = 2^255 - 21: every bit of 254..0
 * is set but bits 4 and 2. */
static void fe_invert(fe h, const fe f) {
    fe r = {1, 0, 0, 0, 0};
    for (int i = 254; i >= 0; i--) {
        fe_mul(r, r, r);
        if (i != 4 && i != 2) fe_mul(r, r, f);
    }
    fe_copy(h, r);
    mbedtls_platform_zeroize(r, sizeof r);
}

/* Little-endian bytes to limbs, bit 255 ignored. */
static void fe_frombytes(fe h, const uint8_t s[32]) {
    uint64_t w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = 0;
        for (int b = 7; b >= 0; b--) w[i] = w[i] << 8 | s[8 * i + b];
    }
    h[0] = w[0] & MASK51;
    h[1] = (w[0] >> 51 | w[1] << 13) & MASK51;
    h[2] = (w[1] >> 38 | w[2] << 26) & MASK51;
    h[3] = (w[2] >> 25 | w[3] << 39) & MASK51;
    h[4] = (w[3] >> 12) & MASK51;
}

/* The canonical value (below p) of f, little-endian. */
static void fe_tobytes(uint8_t s[32], const fe f) {
    fe h;
    u128 t[5];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 5; i++) t[i] = pass ? h[i] : f[i];
        fe_carry(h, t);
    }
    /* h < 2^255 + small now; q = 1 when h >= p: h + 19 carries out of bit 255 */
    uint64_t q = (h[0] + 19) >> 51;
    for (int i = 1; i < 5; i++) q = (h[i] + q) >> 51;
    h[0] += 19 * q;
    for (int i = 0; i < 4; i++) {
        h[i + 1] += h[i] >> 51;
        h[i] &= MASK51;
    }
    h[4] &= MASK51;
    uint64_t w[4] = {h[0] | h[1] << 51, h[1] >> 13 | h[2] << 38, h[2] >> 26 | h[3] << 25, h[3] >> 39 | h[4] << 12};
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 8; b++) s[8 * i + b] = (uint8_t)(w[i] >> (8 * b));
    mbedtls_platform_zeroize(h, sizeof h);
    mbedtls_platform_zeroize(w, sizeof w);
}

/* Swaps f and g when swap is 1, leaves them when 0, with the same work. */
static void fe_cswap(fe f, fe g, uint64_t swap) {
    uint64_t m = 0 - swap;
    for (int i = 0; i < 5; i++) {
        uint64_t x = m & (f[i] ^ g[i]);
        f[i] ^= x, g[i] ^= x;
    }
}

static void ladder(const uint8_t k[32], const uint8_t u[32], uint8_t out[32]) {
    uint8_t e[32];
    memcpy(e, k, 32);
    e[0] &= 248, e[31] &= 127, e[31] |= 64;
    fe x1, x2 = {1}, z2 = {0}, x3, z3 = {1}, a, aa, b, bb, c, d, da, cb, t;
    fe_frombytes(x1, u);
    fe_copy(x3, x1);
    uint64_t swap = 0;
    for (int i = 254; i >= 0; i--) {
        uint64_t bit = (e[i >> 3] >> (i & 7)) & 1;
        swap ^= bit;
        fe_cswap(x2, x3, swap);
        fe_cswap(z2, z3, swap);
        swap = bit;
        fe_add(a, x2, z2);
        fe_mul(aa, a, a);
        fe_sub(b, x2, z2);
        fe_mul(bb, b, b);
        fe_sub(t, aa, bb); /* E */
        fe_add(c, x3, z3);
        fe_sub(d, x3, z3);
        fe_mul(da, d, a);
        fe_mul(cb, c, b);
        fe_add(x3, da, cb);
        fe_mul(x3, x3, x3);
        fe_sub(z3, da, cb);
        fe_mul(z3, z3, z3);
        fe_mul(z3, z3, x1);
        fe_mul(x2, aa, bb);
        fe_mul_small(a, t, 121665);
        fe_add(a, a, aa);
        fe_mul(z2, t, a);
    }
    fe_cswap(x2, x3, swap);
    fe_cswap(z2, z3, swap);
    fe_invert(z2, z2);
    fe_mul(x2, x2, z2);
    fe_tobytes(out, x2);
    mbedtls_platform_zeroize(e, sizeof e);
    mbedtls_platform_zeroize(x2, sizeof x2), mbedtls_platform_zeroize(z2, sizeof z2);
    mbedtls_platform_zeroize(x3, sizeof x3), mbedtls_platform_zeroize(z3, sizeof z3);
    mbedtls_platform_zeroize(a, sizeof a), mbedtls_platform_zeroize(aa, sizeof aa);
    mbedtls_platform_zeroize(b, sizeof b), mbedtls_platform_zeroize(bb, sizeof bb);
    mbedtls_platform_zeroize(c, sizeof c), mbedtls_platform_zeroize(d, sizeof d);
    mbedtls_platform_zeroize(da, sizeof da), mbedtls_platform_zeroize(cb, sizeof cb);
    mbedtls_platform_zeroize(t, sizeof t);
}

int hfl_x25519(const uint8_t k[32], const uint8_t u[32], uint8_t out[32]) {
    ladder(k, u, out);
    uint8_t any = 0;
    for (int i = 0; i < 32; i++) any |= out[i];
    return any ? 0 : -1;
}

void hfl_x25519_base(const uint8_t k[32], uint8_t out[32]) {
    static const uint8_t nine[32] = {9};
    ladder(k, nine, out);
}
