/* secagg_crypto.c: secure aggregation's cryptography (see
 * secagg_crypto.h): X25519 on proto/x25519.c, masks on proto/aes_ctr.c where
 * the CPU has the AES instructions, the rest on mbedTLS 2.28's headers:
 * ctr_drbg.h (mbedtls_ctr_drbg_seed, _random), hkdf.h, aes.h
 * (mbedtls_aes_crypt_ctr, for masks on a CPU without the AES instructions)
 * and gcm.h (mbedtls_gcm_crypt_and_tag, mbedtls_gcm_auth_decrypt).
 * tests/proto/test_secagg_crypto.c checks X25519 against RFC 7748's
 * vectors, tests/proto/test_x25519.c against mbedTLS's Curve25519. */
#include "proto/secagg_crypto.h"
#include "proto/aes_ctr.h"
#include "proto/x25519.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/aes.h>
#include <mbedtls/base64.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/gcm.h>
#include <mbedtls/hkdf.h>
#include <mbedtls/md.h>

#include "util/util.h"

struct hfl_csprng {
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
};

static int sc_mbed_err(char *err, const char *what, int rv) {
    char msg[128];
    mbedtls_strerror(rv, msg, sizeof msg);
    return hfl_errf(err, "%s: %s", what, msg);
}

hfl_csprng *hfl_csprng_new(const char *personal, char *err) {
    hfl_csprng *g = hfl_calloc(1, sizeof *g);
    mbedtls_entropy_init(&g->entropy);
    mbedtls_ctr_drbg_init(&g->drbg);
    int rv = mbedtls_ctr_drbg_seed(&g->drbg, mbedtls_entropy_func, &g->entropy, (const unsigned char *)personal,
                                   strlen(personal));
    if (rv != 0) {
        sc_mbed_err(err, "cannot seed the random generator", rv);
        hfl_csprng_free(g);
        return NULL;
    }
    return g;
}

void hfl_csprng_free(hfl_csprng *g) {
    if (!g) return;
    mbedtls_ctr_drbg_free(&g->drbg);
    mbedtls_entropy_free(&g->entropy);
    free(g);
}

int hfl_csprng_bytes(hfl_csprng *g, void *buf, size_t n, char *err) {
    uint8_t *p = buf;
    while (n > 0) { /* CTR-DRBG gives at most MBEDTLS_CTR_DRBG_MAX_REQUEST bytes a call */
        size_t k = n < MBEDTLS_CTR_DRBG_MAX_REQUEST ? n : MBEDTLS_CTR_DRBG_MAX_REQUEST;
        int rv = mbedtls_ctr_drbg_random(&g->drbg, p, k);
        if (rv != 0) return sc_mbed_err(err, "random generator", rv);
        p += k, n -= k;
    }
    return 0;
}

/* A uniform double in (0, 1): 53 random bits, never 0. */
static double sc_uniform(hfl_csprng *g) {
    uint64_t u = 0;
    char err[HFL_ERR_LEN];
    if (hfl_csprng_bytes(g, &u, sizeof u, err) != 0) {
        /* CTR-DRBG fails only when reseeding from the kernel fails: no secret may then be drawn */
        fprintf(stderr, "hfl: %s\n", err);
        abort();
    }
    return ((double)(u >> 11) + 0.5) / 9007199254740992.0;
}

double hfl_csprng_gauss(hfl_csprng *g) {
    double u1 = sc_uniform(g), u2 = sc_uniform(g);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double hfl_csprng_gauss_within(hfl_csprng *g, double tail) {
    double x;
    do x = hfl_csprng_gauss(g);
    while (fabs(x) > tail);
    return x;
}

/* ---- X25519 ---- */

static void sc_clamp(const uint8_t in[32], uint8_t out[32]) {
    memcpy(out, in, 32);
    out[0] &= 248;
    out[31] &= 127;
    out[31] |= 64;
}

/* out = X25519(k, P), or of the base point when P is NULL (proto/x25519.c). */
static int sc_x25519(const uint8_t k[32], const uint8_t *p, uint8_t out[32], char *err) {
    if (!p) {
        hfl_x25519_base(k, out);
        return 0;
    }
    if (hfl_x25519(k, p, out) == 0) return 0;
    return hfl_errf(err, "X25519 key agreement: the peer's public key is of small order");
}

int hfl_x25519_keypair(hfl_csprng *g, uint8_t sk[32], uint8_t pk[32], char *err) {
    uint8_t raw[32];
    if (hfl_csprng_bytes(g, raw, sizeof raw, err) != 0) return -1;
    sc_clamp(raw, sk);
    mbedtls_platform_zeroize(raw, sizeof raw);
    return sc_x25519(sk, NULL, pk, err);
}

int hfl_x25519_public(const uint8_t sk[32], uint8_t pk[32], char *err) { return sc_x25519(sk, NULL, pk, err); }

int hfl_x25519_shared(const uint8_t sk[32], const uint8_t peer[32], uint8_t out[32], char *err) {
    return sc_x25519(sk, peer, out, err);
}

/* ---- keys, masks, sealing ---- */

void hfl_secagg_kdf(const uint8_t *secret, size_t len, const char *label, const uint32_t *ctx, int n_ctx,
                    uint8_t key[32]) {
    uint8_t info[128];
    size_t ll = strlen(label), n = 0;
    if (ll > 64) ll = 64;
    memcpy(info, label, ll), n = ll;
    for (int i = 0; i < n_ctx && i < 16; i++, n += 4)
        for (int b = 0; b < 4; b++) info[n + (size_t)b] = (uint8_t)(ctx[i] >> (8 * b));
    static const char salt[] = "hfl secagg";
    /* HKDF-SHA256 fails only for an output longer than 255 hashes or a missing md */
    if (mbedtls_hkdf(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), (const unsigned char *)salt, sizeof salt - 1,
                     secret, len, info, n, key, 32) != 0)
        abort();
}

void hfl_mask_apply(const uint8_t key[32], int bits, int sign, uint64_t *acc, size_t n) {
    mbedtls_aes_context aes;
    mbedtls_aes_init(&aes);
    mbedtls_aes_setkey_enc(&aes, key, 256);
    unsigned char counter[16] = {0}, block[16];
    size_t off = 0;
    enum { CHUNK = 4096 };
    static const unsigned char zeros[CHUNK];
    unsigned char stream[CHUNK];
    const int wide = bits > 32; /* 8 bytes an element, else 4 */
    const size_t per = wide ? 8 : 4, step = CHUNK / per;
    const uint64_t m = bits == 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
    const int fast = hfl_aes256_ctr_available(); /* the same keystream, eight blocks at a time */
    for (size_t i = 0; i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        if (fast) hfl_aes256_ctr(key, i * per / 16, stream, (k * per + 15) / 16);
        else mbedtls_aes_crypt_ctr(&aes, k * per, &off, counter, block, zeros, stream);
        for (size_t j = 0; j < k; j++) {
            uint64_t w;
            if (wide) {
                memcpy(&w, stream + 8 * j, 8);
            } else {
                uint32_t h;
                memcpy(&h, stream + 4 * j, 4);
                w = h;
            }
            acc[i + j] = (sign > 0 ? acc[i + j] + w : acc[i + j] - w) & m;
        }
    }
    mbedtls_platform_zeroize(stream, sizeof stream);
    mbedtls_aes_free(&aes);
}

int hfl_seal(hfl_csprng *g, const uint8_t key[32], const void *aad, size_t aad_len, const uint8_t *pt, size_t n,
             uint8_t *out, char *err) {
    if (hfl_csprng_bytes(g, out, 12, err) != 0) return -1;
    mbedtls_gcm_context gcm;
    mbedtls_gcm_init(&gcm);
    int rv = mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 256);
    if (rv == 0)
        rv = mbedtls_gcm_crypt_and_tag(&gcm, MBEDTLS_GCM_ENCRYPT, n, out, 12, aad, aad_len, pt, out + 12, 16,
                                       out + 12 + n);
    mbedtls_gcm_free(&gcm);
    return rv == 0 ? 0 : sc_mbed_err(err, "AES-GCM", rv);
}

int hfl_open(const uint8_t key[32], const void *aad, size_t aad_len, const uint8_t *ct, size_t n, uint8_t *out,
             char *err) {
    if (n < HFL_SEAL_OVERHEAD) return hfl_errf(err, "sealed message of %zu bytes is too short", n);
    size_t len = n - HFL_SEAL_OVERHEAD;
    mbedtls_gcm_context gcm;
    mbedtls_gcm_init(&gcm);
    int rv = mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 256);
    if (rv == 0) rv = mbedtls_gcm_auth_decrypt(&gcm, len, ct, 12, aad, aad_len, ct + 12 + len, 16, ct + 12, out);
    mbedtls_gcm_free(&gcm);
    if (rv == MBEDTLS_ERR_GCM_AUTH_FAILED) return hfl_errf(err, "sealed message fails its authentication");
    return rv == 0 ? 0 : sc_mbed_err(err, "AES-GCM", rv);
}

/* ---- the ring ---- */

size_t hfl_ring_bytes(size_t n, int bits) { return (n * (size_t)bits + 7) / 8; }

void hfl_ring_pack(const uint64_t *v, size_t n, int bits, uint8_t *out) {
    const uint64_t m = bits == 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
    unsigned __int128 buf = 0; /* bits not yet written, low first */
    int have = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        buf |= (unsigned __int128)(v[i] & m) << have;
        have += bits;
        while (have >= 8) {
            out[o++] = (uint8_t)buf;
            buf >>= 8, have -= 8;
        }
    }
    if (have > 0) out[o++] = (uint8_t)buf;
}

void hfl_ring_unpack_add(const uint8_t *in, size_t n, int bits, uint64_t *acc) {
    const uint64_t m = bits == 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
    unsigned __int128 buf = 0;
    int have = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        while (have < bits) {
            buf |= (unsigned __int128)in[o++] << have;
            have += 8;
        }
        acc[i] = (acc[i] + ((uint64_t)buf & m)) & m;
        buf >>= bits, have -= bits;
    }
}

int64_t hfl_ring_signed(uint64_t x, int bits) {
    if (bits == 64) return (int64_t)x;
    uint64_t m = ((uint64_t)1 << bits) - 1, half = (uint64_t)1 << (bits - 1);
    x &= m;
    return x >= half ? (int64_t)(x - half) - (int64_t)half : (int64_t)x;
}

/* ---- base64 ---- */

int hfl_b64_encode(const uint8_t *p, size_t n, char *out, size_t cap) {
    size_t olen = 0;
    if (mbedtls_base64_encode((unsigned char *)out, cap, &olen, p, n) == 0) return 0;
    if (cap) out[0] = 0;
    return -1;
}

long hfl_b64_decode(const char *s, uint8_t *out, size_t cap) {
    size_t olen = 0;
    if (!s || mbedtls_base64_decode(out, cap, &olen, (const unsigned char *)s, strlen(s)) != 0) return -1;
    return (long)olen;
}
