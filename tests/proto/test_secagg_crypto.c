/* test_secagg_crypto.c: secure aggregation's cryptography (proto/secagg_crypto.h,
 * proto/shamir.h).
 *
 * Oracles: X25519 against RFC 7748 section 6.1's key pairs and shared secret;
 * masks that cancel (a pair's +m and -m, each with its own generated bits)
 * and that are not zero; AES-GCM that refuses a flipped bit or another aad;
 * ring packing at every width 1..64 against a bit-by-bit reference; Shamir
 * shares that give the secret back from any t of n and (t - 1 of them) a
 * wrong one, and that fail at t - 1 in a way which depends on the secret not
 * at all (the same t - 1 shares are consistent with every secret byte); the
 * AES-NI keystream (proto/aes_ctr.h) and the masks made from it against
 * mbedTLS's AES-256-CTR, computed here block by block. */
#include <stdlib.h>
#include <string.h>

#include <mbedtls/aes.h>

#include "proto/aes_ctr.h"
#include "proto/secagg_crypto.h"
#include "proto/shamir.h"
#include "tests/check.h"
#include "util/util.h"

static void hex(const char *s, uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static void test_x25519_rfc7748(void) {
    uint8_t a[32], apub[32], b[32], bpub[32], k[32], got[32], got2[32];
    char err[HFL_ERR_LEN];
    hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a", a, 32);
    hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a", apub, 32);
    hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb", b, 32);
    hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f", bpub, 32);
    hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742", k, 32);
    CHECK_MSG(hfl_x25519_public(a, got, err) == 0, "%s", err);
    CHECK(memcmp(got, apub, 32) == 0);
    CHECK_MSG(hfl_x25519_public(b, got, err) == 0, "%s", err);
    CHECK(memcmp(got, bpub, 32) == 0);
    CHECK_MSG(hfl_x25519_shared(a, bpub, got, err) == 0, "%s", err);
    CHECK(memcmp(got, k, 32) == 0);
    CHECK_MSG(hfl_x25519_shared(b, apub, got2, err) == 0, "%s", err);
    CHECK(memcmp(got2, k, 32) == 0);
}

static void test_masks_and_seal(hfl_csprng *g) {
    char err[HFL_ERR_LEN];
    uint8_t sa[32], pa[32], sb[32], pb[32], za[32], zb[32];
    CHECK(hfl_x25519_keypair(g, sa, pa, err) == 0 && hfl_x25519_keypair(g, sb, pb, err) == 0);
    CHECK(hfl_x25519_shared(sa, pb, za, err) == 0 && hfl_x25519_shared(sb, pa, zb, err) == 0);
    CHECK(memcmp(za, zb, 32) == 0);
    uint32_t ctx[3] = {5, 1, 2};
    uint8_t ka[32], kb[32];
    hfl_secagg_kdf(za, 32, "mask", ctx, 3, ka);
    hfl_secagg_kdf(zb, 32, "mask", ctx, 3, kb);
    CHECK(memcmp(ka, kb, 32) == 0);
    for (int bits = 20; bits <= 64; bits += 44) {
        size_t n = 10007; /* not a multiple of a chunk */
        uint64_t *x = hfl_calloc(n, 8), *y = hfl_calloc(n, 8);
        hfl_mask_apply(ka, bits, +1, x, n);
        size_t zeros = 0, top = 0;
        for (size_t i = 0; i < n; i++) zeros += x[i] == 0, top += bits < 64 && x[i] >> bits;
        CHECK_MSG(zeros < 3 && top == 0, "bits %d: %zu zero elements, %zu beyond the ring", bits, zeros, top);
        hfl_mask_apply(kb, bits, -1, x, n);
        CHECK_MSG(memcmp(x, y, n * 8) == 0, "bits %d: +m - m is not 0", bits);
        free(x), free(y);
    }
    uint8_t msg[40], ct[40 + HFL_SEAL_OVERHEAD], back[40];
    for (int i = 0; i < 40; i++) msg[i] = (uint8_t)(i * 7);
    CHECK(hfl_seal(g, ka, "aad", 3, msg, 40, ct, err) == 0);
    CHECK(hfl_open(kb, "aad", 3, ct, sizeof ct, back, err) == 0 && memcmp(back, msg, 40) == 0);
    CHECK(hfl_open(kb, "aae", 3, ct, sizeof ct, back, err) != 0);
    ct[20] ^= 1;
    CHECK(hfl_open(kb, "aad", 3, ct, sizeof ct, back, err) != 0);
    CHECK(hfl_open(kb, "aad", 3, ct, 10, back, err) != 0);
}

static void test_ring(hfl_csprng *g) {
    char err[HFL_ERR_LEN];
    size_t n = 37;
    uint64_t v[37], acc[37];
    uint8_t out[37 * 8 + 1];
    for (int bits = 1; bits <= 64; bits++) {
        CHECK(hfl_csprng_bytes(g, v, sizeof v, err) == 0);
        size_t bytes = hfl_ring_bytes(n, bits);
        memset(out, 0xAB, sizeof out);
        hfl_ring_pack(v, n, bits, out);
        CHECK(out[bytes] == 0xAB); /* nothing written past its bytes */
        int bad = 0;
        for (size_t i = 0; i < n; i++) /* the reference: element i's bits one by one */
            for (int b = 0; b < bits; b++) {
                size_t at = i * (size_t)bits + (size_t)b;
                bad += ((out[at / 8] >> (at % 8)) & 1) != ((v[i] >> b) & 1);
            }
        CHECK_MSG(bad == 0, "bits %d: %d bits packed wrong", bits, bad);
        for (size_t i = 0; i < n; i++) acc[i] = 1;
        hfl_ring_unpack_add(out, n, bits, acc);
        uint64_t m = bits == 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
        for (size_t i = 0; i < n; i++) bad += acc[i] != ((v[i] + 1) & m);
        CHECK_MSG(bad == 0, "bits %d: %d elements unpacked wrong", bits, bad);
    }
    CHECK(hfl_ring_signed(((uint64_t)1 << 20) - 3, 20) == -3);
    CHECK(hfl_ring_signed(((uint64_t)1 << 19) - 1, 20) == (1 << 19) - 1);
    CHECK(hfl_ring_signed((uint64_t)1 << 19, 20) == -(1 << 19));
    CHECK(hfl_ring_signed((uint64_t)-5, 64) == -5);
}

static void test_shamir(hfl_csprng *g) {
    char err[HFL_ERR_LEN];
    enum { N = 9, T = 5, L = 64 };
    uint8_t secret[L], shares[N * L], back[L];
    CHECK(hfl_csprng_bytes(g, secret, L, err) == 0);
    CHECK_MSG(hfl_shamir_split(g, secret, L, T, N, shares, err) == 0, "%s", err);
    /* every subset of size T gives it back; every subset of size T - 1 does not */
    int bad_t = 0, good_t1 = 0, subsets_t = 0, subsets_t1 = 0;
    for (unsigned mask = 0; mask < (1u << N); mask++) {
        int k = __builtin_popcount(mask);
        if (k != T && k != T - 1) continue;
        const uint8_t *rows[N];
        uint8_t xs[N];
        int j = 0;
        for (int x = 1; x <= N; x++)
            if (mask >> (x - 1) & 1) rows[j] = shares + (size_t)(x - 1) * L, xs[j++] = (uint8_t)x;
        CHECK(hfl_shamir_combine(rows, xs, k, L, back, err) == 0);
        if (k == T) bad_t += memcmp(back, secret, L) != 0, subsets_t++;
        else good_t1 += memcmp(back, secret, L) == 0, subsets_t1++;
    }
    CHECK_MSG(bad_t == 0, "%d of %d subsets of %d shares miss the secret", bad_t, subsets_t, T);
    CHECK_MSG(good_t1 == 0, "%d of %d subsets of %d shares give the secret", good_t1, subsets_t1, T - 1);
    /* T - 1 shares fit every value of a secret byte: for each candidate c,
     * the point (0, c) with the T - 1 shares interpolates a polynomial whose
     * value at a fresh holder differs by candidate, so no candidate is ruled out */
    const uint8_t *rows[T];
    uint8_t xs[T];
    for (int j = 0; j < T - 1; j++) rows[j] = shares + (size_t)j * L, xs[j] = (uint8_t)(j + 1);
    uint8_t seen[256] = {0};
    int distinct = 0;
    for (int cand = 0; cand < 256; cand++) {
        /* the share holder T would need for secret byte 0 to be cand: solve by trying all 256 */
        uint8_t row[L];
        memcpy(row, shares + (size_t)(T - 1) * L, L);
        int found = 0;
        for (int v = 0; v < 256 && !found; v++) {
            row[0] = (uint8_t)v;
            rows[T - 1] = row, xs[T - 1] = (uint8_t)T;
            CHECK(hfl_shamir_combine(rows, xs, T, L, back, err) == 0);
            if (back[0] == cand) found = 1, distinct += !seen[v], seen[v] = 1;
        }
        CHECK_MSG(found, "no share of holder %d makes secret byte 0 equal %d", T, cand);
    }
    CHECK(distinct == 256);
    xs[1] = xs[0];
    CHECK(hfl_shamir_combine(rows, xs, T, L, back, err) != 0);
    CHECK(hfl_shamir_split(g, secret, L, 0, N, shares, err) != 0);
    CHECK(hfl_shamir_split(g, secret, L, N + 1, N, shares, err) != 0);
}

static hfl_csprng *rng; /* made in main, shared by the cases */

/* mbedTLS's AES-256-CTR keystream, blocks first .. first + blocks - 1. */
static void mbed_ctr(const uint8_t key[32], uint64_t first, uint8_t *out, size_t blocks) {
    mbedtls_aes_context aes;
    mbedtls_aes_init(&aes);
    mbedtls_aes_setkey_enc(&aes, key, 256);
    unsigned char ctr[16] = {0}, block[16];
    for (int b = 0; b < 8; b++) ctr[15 - b] = (unsigned char)(first >> (8 * b));
    size_t off = 0;
    memset(out, 0, blocks * 16);
    mbedtls_aes_crypt_ctr(&aes, blocks * 16, &off, ctr, block, out, out);
    mbedtls_aes_free(&aes);
}

/* The eight-wide AES-NI keystream is mbedTLS's, at counters that carry
 * across bytes (255 to 256, 2^32 - 1 to 2^32) and for block counts around
 * the eight in flight; and hfl_mask_apply's masks are those of mbedTLS's
 * keystream read as the header says, for ring widths of 4- and 8-byte
 * elements, a tail that is not a whole block, and both signs. */
static void case_keystream(void) {
    if (!hfl_aes256_ctr_available()) {
        printf("no AES instructions on this CPU: the masks run on mbedTLS, nothing to compare\n");
        return;
    }
    uint8_t key[32], *a = malloc(300 * 16), *b = malloc(300 * 16);
    for (int k = 0; k < 32; k++) key[k] = (uint8_t)(k * 37 + 11);
    static const uint64_t firsts[] = {0, 1, 250, 0xfffffff9ull, 1ull << 40};
    static const size_t counts[] = {1, 7, 8, 9, 300};
    for (size_t f = 0; f < sizeof firsts / sizeof *firsts; f++)
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            mbed_ctr(key, firsts[f], a, counts[c]);
            CHECK(hfl_aes256_ctr(key, firsts[f], b, counts[c]) == 0);
            CHECK_MSG(!memcmp(a, b, counts[c] * 16), "blocks %llu + %zu differ from mbedTLS's",
                      (unsigned long long)firsts[f], counts[c]);
        }
    static const int widths[] = {25, 32, 33, 64};
    enum { N = 5001 }; /* 4 bytes an element: 1,250 blocks and a quarter */
    uint8_t *stream = malloc(N * 8 + 16);
    uint64_t *acc = malloc(N * sizeof *acc);
    for (size_t w = 0; w < sizeof widths / sizeof *widths; w++)
        for (int sign = -1; sign <= 1; sign += 2) {
            int bits = widths[w];
            size_t per = bits > 32 ? 8 : 4;
            uint64_t m = bits == 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1, bad = 0;
            mbed_ctr(key, 0, stream, (N * per + 15) / 16);
            for (size_t i = 0; i < N; i++) acc[i] = (i * 0x9e3779b97f4a7c15ull) & m;
            hfl_mask_apply(key, bits, sign, acc, N);
            for (size_t i = 0; i < N; i++) {
                uint64_t v = 0;
                memcpy(&v, stream + per * i, per);
                uint64_t start = (i * 0x9e3779b97f4a7c15ull) & m;
                bad += acc[i] != ((sign > 0 ? start + v : start - v) & m);
            }
            CHECK_MSG(bad == 0, "bits %d sign %d: %llu of %d elements off mbedTLS's mask", bits, sign,
                      (unsigned long long)bad, N);
        }
    free(a), free(b), free(stream), free(acc);
}

static void case_masks_and_seal(void) { test_masks_and_seal(rng); }
static void case_ring(void) { test_ring(rng); }
static void case_shamir(void) { test_shamir(rng); }
static void case_b64(void) {
    uint8_t a[16] = {1, 2, 3}, b[16];
    char s[25], small[24];
    CHECK(hfl_b64_encode(a, 16, s, sizeof s) == 0 && strlen(s) == 24);
    CHECK(hfl_b64_decode(s, b, sizeof b) == 16 && memcmp(a, b, 16) == 0);
    CHECK(hfl_b64_decode(s, b, 8) < 0);
    CHECK(hfl_b64_decode("*!", b, 8) < 0);
    CHECK(hfl_b64_encode(a, 16, small, sizeof small) == -1 && small[0] == 0); /* no room for the NUL */
}

static const check_case cases[] = {
    {"x25519_rfc7748", test_x25519_rfc7748},
    {"masks_and_seal", case_masks_and_seal},
    {"keystream", case_keystream},
    {"ring", case_ring},
    {"shamir", case_shamir},
    {"b64", case_b64},
};

int main(int argc, char **argv) {
    char err[HFL_ERR_LEN];
    rng = hfl_csprng_new("test", err);
    if (!CHECK_MSG(rng != NULL, "%s", err)) return 1;
    int rc = check_run("test_secagg_crypto", cases, CHECK_CASES(cases), argc, argv);
    hfl_csprng_free(rng);
    return rc;
}
