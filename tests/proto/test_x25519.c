/* test_x25519.c: proto/x25519.c against RFC 7748 and against mbedTLS's
 * Curve25519 (mbedtls_ecp_mul on the x-only Montgomery ladder of its
 * bignum code, the implementation secure aggregation used before).
 * Oracles: RFC 7748 section 5.2's first vector and its iterated vectors
 * (1 and 1,000 times; the 1,000,000 would take minutes); mbedTLS on
 * random scalars and random u, the base point, u with bit 255 set (RFC
 * 7748: ignored) and u of p or more (taken mod p); the small-order points
 * (libsodium's list: 0, 1, two of order 8, p - 1, p, p + 1) refused, each
 * of them refused by mbedTLS's own check too. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <mbedtls/ecdh.h>
#include <mbedtls/ecp.h>

#include "proto/secagg_crypto.h"
#include "proto/x25519.h"
#include "tests/check.h"
#include "util/util.h"

static void hex(const char *s, uint8_t *out) {
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

/* X25519 by mbedTLS (u NULL: the base point); 0, or mbedTLS's error. */
static int ref_x25519(const uint8_t k[32], const uint8_t *u, uint8_t out[32]) {
    mbedtls_ecp_group grp;
    mbedtls_mpi d, z;
    mbedtls_ecp_point P, R;
    uint8_t kc[32];
    memcpy(kc, k, 32);
    kc[0] &= 248, kc[31] &= 127, kc[31] |= 64;
    mbedtls_ecp_group_init(&grp);
    mbedtls_mpi_init(&d), mbedtls_mpi_init(&z);
    mbedtls_ecp_point_init(&P), mbedtls_ecp_point_init(&R);
    int rv = mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_CURVE25519);
    if (rv == 0) rv = mbedtls_mpi_read_binary_le(&d, kc, 32);
    if (rv == 0 && !u) {
        size_t olen = 0;
        rv = mbedtls_ecp_mul(&grp, &R, &d, &grp.G, NULL, NULL);
        if (rv == 0) rv = mbedtls_ecp_point_write_binary(&grp, &R, MBEDTLS_ECP_PF_UNCOMPRESSED, &olen, out, 32);
    } else if (rv == 0) {
        rv = mbedtls_ecp_point_read_binary(&grp, &P, u, 32);
        if (rv == 0) rv = mbedtls_ecp_check_pubkey(&grp, &P);
        if (rv == 0) rv = mbedtls_ecdh_compute_shared(&grp, &z, &P, &d, NULL, NULL);
        if (rv == 0) rv = mbedtls_mpi_write_binary_le(&z, out, 32);
    }
    mbedtls_ecp_point_free(&P), mbedtls_ecp_point_free(&R);
    mbedtls_mpi_free(&d), mbedtls_mpi_free(&z);
    mbedtls_ecp_group_free(&grp);
    return rv;
}

static void test_rfc7748(void) {
    uint8_t k[32], u[32], want[32], got[32];
    hex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4", k);
    hex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c", u);
    hex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552", want);
    CHECK(hfl_x25519(k, u, got) == 0 && memcmp(got, want, 32) == 0);
    /* iterated: k, u = X25519(k, u), k from k = u = 9 */
    uint8_t next[32];
    memset(k, 0, 32), memset(u, 0, 32);
    k[0] = u[0] = 9;
    for (int i = 1; i <= 1000; i++) {
        CHECK(hfl_x25519(k, u, next) == 0);
        memcpy(u, k, 32), memcpy(k, next, 32);
        if (i == 1) {
            hex("422c8e7a6227d7bca1350b3e2bb7279f7897b87bb6854b783c60e80311ae3079", want);
            CHECK_MSG(memcmp(k, want, 32) == 0, "after 1 iteration");
        }
    }
    hex("684cf59ba83309552800ef566f2f4d3c1c3887c49360e3875f2eb94d99532c51", want);
    CHECK_MSG(memcmp(k, want, 32) == 0, "after 1,000 iterations");
}

static void test_against_mbedtls(void) {
    char err[HFL_ERR_LEN];
    hfl_csprng *g = hfl_csprng_new("test_x25519", err);
    if (!CHECK_MSG(g != NULL, "%s", err)) return;
    uint8_t k[32], u[32], got[32], want[32];
    int same = 0, n = 0;
    for (int i = 0; i < 200; i++, n += 3) {
        CHECK(hfl_csprng_bytes(g, k, 32, err) == 0 && hfl_csprng_bytes(g, u, 32, err) == 0);
        hfl_x25519_base(k, got);
        same += ref_x25519(k, NULL, want) == 0 && memcmp(got, want, 32) == 0;
        /* a random u is on the curve or its twist; both are defined */
        u[31] &= 127;
        same += hfl_x25519(k, u, got) == 0 && ref_x25519(k, u, want) == 0 && memcmp(got, want, 32) == 0;
        /* bit 255 is ignored */
        uint8_t top[32];
        memcpy(top, u, 32);
        top[31] |= 128;
        same += hfl_x25519(k, top, want) == 0 && memcmp(got, want, 32) == 0;
    }
    CHECK_MSG(same == n, "%d of %d agree with mbedTLS", same, n);
    /* u = 9 + p (non-canonical) is u = 9 */
    uint8_t nine[32] = {9}, big[32];
    hex("f6ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", big);
    CHECK(hfl_csprng_bytes(g, k, 32, err) == 0);
    CHECK(hfl_x25519(k, big, got) == 0 && hfl_x25519(k, nine, want) == 0 && memcmp(got, want, 32) == 0);
    hfl_x25519_base(k, want);
    CHECK(memcmp(got, want, 32) == 0);
    hfl_csprng_free(g);
}

static void test_small_order(void) {
    static const char *bad[] = {
        "0000000000000000000000000000000000000000000000000000000000000000",
        "0100000000000000000000000000000000000000000000000000000000000000",
        "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
        "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    };
    char err[HFL_ERR_LEN];
    uint8_t k[32], u[32], out[32];
    hfl_csprng *g = hfl_csprng_new("test_x25519", err);
    if (!CHECK_MSG(g != NULL, "%s", err)) return;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hex(bad[i], u);
        CHECK(hfl_csprng_bytes(g, k, 32, err) == 0);
        CHECK_MSG(hfl_x25519(k, u, out) == -1, "%s accepted", bad[i]);
        CHECK_MSG(ref_x25519(k, u, out) != 0, "%s: mbedTLS accepts it, so it is not of small order", bad[i]);
        CHECK_MSG(hfl_x25519_shared(k, u, out, err) == -1 && strstr(err, "small order"), "%s", bad[i]);
    }
    hfl_csprng_free(g);
}

static const check_case cases[] = {
    {"rfc7748", test_rfc7748},
    {"against_mbedtls", test_against_mbedtls},
    {"small_order", test_small_order},
};

int main(int argc, char **argv) { return check_run("test_x25519", cases, CHECK_CASES(cases), argc, argv); }
