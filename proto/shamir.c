/* shamir.c: t-of-n secret sharing over GF(2^8) (see shamir.h). Products go
 * through log and antilog tables of the generator 3, built once; the tables
 * are the only state. */
#include "proto/shamir.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static uint8_t gf_exp[510], gf_log[256];
static pthread_once_t gf_once = PTHREAD_ONCE_INIT;

/* x * 3 in GF(2^8) with AES's reduction polynomial 0x11B. */
static uint8_t gf_times3(uint8_t x) {
    uint8_t x2 = (uint8_t)((x << 1) ^ (x & 0x80 ? 0x1B : 0));
    return (uint8_t)(x2 ^ x);
}

static void gf_tables(void) {
    uint8_t v = 1;
    for (int i = 0; i < 255; i++) {
        gf_exp[i] = gf_exp[i + 255] = v;
        gf_log[v] = (uint8_t)i;
        v = gf_times3(v);
    }
}

static uint8_t gf_mul(uint8_t a, uint8_t b) {
    return a && b ? gf_exp[gf_log[a] + gf_log[b]] : 0;
}

static uint8_t gf_div(uint8_t a, uint8_t b) { /* b != 0 */
    return a ? gf_exp[gf_log[a] + 255 - gf_log[b]] : 0;
}

int hfl_shamir_split(hfl_csprng *g, const uint8_t *secret, size_t len, int t, int n, uint8_t *shares, char *err) {
    pthread_once(&gf_once, gf_tables);
    if (n < 1 || n > HFL_SHAMIR_MAX_HOLDERS || t < 1 || t > n)
        return hfl_errf(err, "cannot share among %d holders with threshold %d", n, t);
    uint8_t *coef = hfl_malloc((size_t)t * len); /* row d: the degree-d coefficients */
    memcpy(coef, secret, len);
    if (t > 1 && hfl_csprng_bytes(g, coef + len, (size_t)(t - 1) * len, err) != 0) {
        free(coef);
        return -1;
    }
    for (int x = 1; x <= n; x++)
        for (size_t b = 0; b < len; b++) { /* Horner from the top coefficient */
            uint8_t y = 0;
            for (int d = t - 1; d >= 0; d--) y = (uint8_t)(gf_mul(y, (uint8_t)x) ^ coef[(size_t)d * len + b]);
            shares[(size_t)(x - 1) * len + b] = y;
        }
    memset(coef, 0, (size_t)t * len);
    free(coef);
    return 0;
}

int hfl_shamir_combine(const uint8_t *const *shares, const uint8_t *xs, int k, size_t len, uint8_t *secret,
                       char *err) {
    pthread_once(&gf_once, gf_tables);
    for (int j = 0; j < k; j++) {
        if (xs[j] == 0) return hfl_errf(err, "share holder 0 is not a holder");
        for (int m = 0; m < j; m++)
            if (xs[m] == xs[j]) return hfl_errf(err, "two shares of holder %d", xs[j]);
    }
    memset(secret, 0, len);
    for (int j = 0; j < k; j++) {
        /* Lagrange basis at 0: prod over m != j of x_m / (x_m - x_j); in
         * characteristic 2, subtraction is XOR */
        uint8_t l = 1;
        for (int m = 0; m < k; m++)
            if (m != j) l = gf_mul(l, gf_div(xs[m], (uint8_t)(xs[m] ^ xs[j])));
        for (size_t b = 0; b < len; b++) secret[b] ^= gf_mul(l, shares[j][b]);
    }
    return 0;
}
