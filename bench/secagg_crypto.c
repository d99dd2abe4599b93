/* secagg_crypto.c: bench-secagg-crypto, the per-client CPU cost of secure
 * aggregation's cryptography (proto/secagg_crypto.h, proto/identity.h) for the mlp's 199,210
 * parameters plus the count element, and the mask expansion against memcpy
 * of the same bytes and against mbedTLS's AES-256-CTR keystream of them
 * (what the masks ran on before proto/aes_ctr.h, and still do on a CPU
 * without the AES instructions), and X25519 (proto/x25519.c) against
 * mbedTLS's Curve25519, what the key agreement ran on before.
 *
 * usage: bench-secagg-crypto [CLIENTS [BITS]]   (defaults: 100 25)
 *
 * Prints each operation's CPU time, then what one client spends a round with k =
 * 2 ceil(log2 CLIENTS) neighbours (proto/secagg.h: two X25519 key
 * pairs, two shared secrets per neighbour for sealing and masks, k + 1 mask
 * expansions, packing, one signature over its keys and one check per
 * neighbour), and that times CLIENTS: the CPU a host running the whole fleet
 * spends on it (certificates are checked once a run and left out). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mbedtls/aes.h>
#include <mbedtls/ecdh.h>

#include "proto/aes_ctr.h"
#include "proto/identity.h"
#include "proto/pki.h"
#include "proto/secagg_crypto.h"
#include "util/util.h"

#define ELEMENTS 199211 /* the mlp's trainable floats and the count element */

/* This process's CPU seconds: the figures hold on a shared host. */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* mbedTLS's X25519 shared secret of k and u (its x-only ladder on its bignum code). */
static int mbed_x25519(const uint8_t k[32], const uint8_t u[32], uint8_t out[32]) {
    mbedtls_ecp_group grp;
    mbedtls_mpi d, z;
    mbedtls_ecp_point P;
    uint8_t kc[32];
    memcpy(kc, k, 32);
    kc[0] &= 248, kc[31] &= 127, kc[31] |= 64;
    mbedtls_ecp_group_init(&grp);
    mbedtls_mpi_init(&d), mbedtls_mpi_init(&z);
    mbedtls_ecp_point_init(&P);
    int rv = mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_CURVE25519);
    if (rv == 0) rv = mbedtls_mpi_read_binary_le(&d, kc, 32);
    if (rv == 0) rv = mbedtls_ecp_point_read_binary(&grp, &P, u, 32);
    if (rv == 0) rv = mbedtls_ecdh_compute_shared(&grp, &z, &P, &d, NULL, NULL);
    if (rv == 0) rv = mbedtls_mpi_write_binary_le(&z, out, 32);
    mbedtls_ecp_point_free(&P);
    mbedtls_mpi_free(&d), mbedtls_mpi_free(&z);
    mbedtls_ecp_group_free(&grp);
    return rv;
}

int main(int argc, char **argv) {
    int clients = argc > 1 ? atoi(argv[1]) : 100, bits = argc > 2 ? atoi(argv[2]) : 25;
    if (clients < 2 || bits < 1 || bits > 64) {
        fprintf(stderr, "usage: bench-secagg-crypto [CLIENTS >= 2 [BITS 1..64]]\n");
        return 2;
    }
    char err[HFL_ERR_LEN];
    hfl_csprng *g = hfl_csprng_new("bench", err);
    if (!g) {
        fprintf(stderr, "bench-secagg-crypto: %s\n", err);
        return 1;
    }
    uint8_t sk[32], pk[32], sk2[32], pk2[32], out[32], key[32] = {1};
    if (hfl_x25519_keypair(g, sk2, pk2, err) != 0) return fprintf(stderr, "%s\n", err), 1;
    double t0 = cpu_now();
    for (int i = 0; i < 100; i++) hfl_x25519_keypair(g, sk, pk, err);
    double t_pair = (cpu_now() - t0) / 100;
    t0 = cpu_now();
    for (int i = 0; i < 100; i++) hfl_x25519_shared(sk, pk2, out, err);
    double t_shared = (cpu_now() - t0) / 100;
    uint8_t out2[32];
    t0 = cpu_now();
    for (int i = 0; i < 100; i++)
        if (mbed_x25519(sk, pk2, out2) != 0) return fprintf(stderr, "bench-secagg-crypto: mbedTLS's X25519 failed\n"), 1;
    double t_mbed_shared = (cpu_now() - t0) / 100;
    if (memcmp(out, out2, 32) != 0) return fprintf(stderr, "bench-secagg-crypto: X25519 differs from mbedTLS's\n"), 1;
    uint64_t *acc = hfl_calloc(ELEMENTS, sizeof *acc);
    size_t word = bits <= 32 ? 4 : 8, packed = hfl_ring_bytes(ELEMENTS, bits);
    uint8_t *buf = hfl_malloc(packed), *src = hfl_calloc(ELEMENTS, word), *dst = hfl_malloc(ELEMENTS * word);
    t0 = cpu_now();
    for (int i = 0; i < 20; i++) hfl_mask_apply(key, bits, 1, acc, ELEMENTS);
    double t_mask = (cpu_now() - t0) / 20;
    t0 = cpu_now();
    for (int i = 0; i < 20; i++) {
        memcpy(dst, src, ELEMENTS * word);
        src[i] = dst[7]; /* the next copy depends on this one */
    }
    double t_copy = (cpu_now() - t0) / 20;
    mbedtls_aes_context aes;
    mbedtls_aes_init(&aes);
    mbedtls_aes_setkey_enc(&aes, key, 256);
    t0 = cpu_now();
    for (int i = 0; i < 20; i++) {
        unsigned char ctr[16] = {0}, block[16];
        size_t off = 0;
        mbedtls_aes_crypt_ctr(&aes, ELEMENTS * word, &off, ctr, block, src, dst);
    }
    double t_mbed = (cpu_now() - t0) / 20;
    mbedtls_aes_free(&aes);
    t0 = cpu_now(); /* the same keystream alone, as hfl_mask_apply makes it */
    for (int i = 0; i < 20; i++)
        if (hfl_aes256_ctr(key, 0, dst, ELEMENTS * word / 16) != 0) break;
    double t_fast = hfl_aes256_ctr_available() ? (cpu_now() - t0) / 20 : t_mbed;
    t0 = cpu_now();
    for (int i = 0; i < 20; i++) hfl_ring_pack(acc, ELEMENTS, bits, buf);
    double t_pack = (cpu_now() - t0) / 20;
    /* signatures over the keys message: one signed, one checked per neighbour */
    char dir[] = "/tmp/hfl-bench-secagg-XXXXXX", pem[64] = "", ca[64], sig[HFL_ID_SIG_B64_MAX + 1];
    hfl_identity *id = NULL;
    hfl_trust *trust = NULL;
    hfl_peer *peer = NULL;
    if (mkdtemp(dir)) {
        snprintf(pem, sizeof pem, "%s/client-0.pem", dir);
        snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    }
    int ok = pem[0] && hfl_pki_create(dir, 1, "localhost", 1, err) == 0 && hfl_identity_load(pem, &id, err) == 0 &&
             hfl_trust_load(ca, NULL, &trust, err) == 0 &&
             hfl_trust_check(trust, hfl_identity_cert(id), "client", NULL, &peer, err) == 0;
    const void *parts[] = {"hfl-secagg-keys-v1", pk, pk2};
    size_t lens[] = {18, 32, 32};
    double t_sign = 0, t_verify = 0;
    if (ok) {
        t0 = cpu_now();
        for (int i = 0; i < 20; i++) ok = ok && hfl_identity_sign(id, parts, lens, 3, sig, err) == 0;
        t_sign = (cpu_now() - t0) / 20;
        t0 = cpu_now();
        for (int i = 0; i < 20; i++) ok = ok && hfl_peer_verify(peer, parts, lens, 3, sig, err) == 0;
        t_verify = (cpu_now() - t0) / 20;
    }
    if (pem[0]) {
        char rm[100];
        snprintf(rm, sizeof rm, "rm -rf %s", dir);
        if (system(rm) != 0) fprintf(stderr, "bench-secagg-crypto: could not remove %s\n", dir);
    }
    if (!ok) {
        fprintf(stderr, "bench-secagg-crypto: %s\n", pem[0] ? err : "cannot make a directory in /tmp");
        return 1;
    }
    int k = 2 * (int)ceil(log2(clients));
    if (k > clients - 1) k = clients - 1;
    double client = 2 * t_pair + 2 * k * t_shared + (k + 1) * t_mask + t_pack + t_sign + k * t_verify;
    printf("x25519 key pair %.3f ms, shared secret %.3f ms (mbedTLS's %.3f ms, %.1fx the time)\n", t_pair * 1e3,
           t_shared * 1e3, t_mbed_shared * 1e3, t_mbed_shared / t_shared);
    printf("mask expansion, %d elements at %d bits: %.3f ms (%.2f GB/s of keystream, %s; memcpy of the same bytes "
           "%.2f GB/s)\n",
           ELEMENTS, bits, t_mask * 1e3, ELEMENTS * word / t_mask / 1e9,
           hfl_aes256_ctr_available() ? "AES instructions, eight blocks at a time" : "mbedTLS",
           ELEMENTS * word / t_copy / 1e9);
    printf("ECDSA P-256 signature %.3f ms, its check %.3f ms\n", t_sign * 1e3, t_verify * 1e3);
    printf("packing: %.3f ms (%zu bytes)\n", t_pack * 1e3, packed);
    printf("the keystream alone: %.3f ms, mbedTLS's %.3f ms (%.1fx the time)\n", t_fast * 1e3, t_mbed * 1e3,
           t_mbed / t_fast);
    printf("one client a round with mbedTLS's keystream instead: %.1f ms; with its X25519 too: %.1f ms\n",
           (client + (k + 1) * (t_mbed - t_fast)) * 1e3,
           (client + (k + 1) * (t_mbed - t_fast) + (2 + 2 * k) * (t_mbed_shared - t_shared)) * 1e3);
    printf("one client a round, k = %d neighbours: %.1f ms; %d clients on one host: %.2f s of CPU\n", k, client * 1e3,
           clients, client * clients);
    hfl_csprng_free(g);
    hfl_peer_free(peer);
    hfl_trust_free(trust);
    hfl_identity_free(id);
    free(acc), free(buf), free(src), free(dst);
    return 0;
}
