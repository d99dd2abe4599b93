/* secagg_ring.c: the ring's width and the neighbour graph of secure
 * aggregation (secagg.h: THE RING, THE PROTOCOL's graph), shared by the
 * coordinator and, through the task and setup replies, by its clients. */
#include <math.h>
#include <stdlib.h>

#include "proto/secagg.h"
#include "kernels/philox.h"
#include "util/util.h"

int secagg_shift(double clip, int fixed_bits) {
    int e;
    frexp(clip, &e); /* clip < 2^e */
    return fixed_bits - e;
}

int secagg_ring_bits(double clip, int shift, double weight_total, int n, double sigma, double sigma_count,
                     int *bits, double *bound, char *err) {
    double scale = ldexp(1.0, shift), cscale = ldexp(1.0, SECAGG_COUNT_SHIFT);
    double m = clip * scale * weight_total * (1 + 1e-9) + n + SECAGG_NOISE_TAIL * n * sigma * scale + 1;
    double mc = n * cscale + SECAGG_NOISE_TAIL * n * sigma_count * cscale + n + 1;
    if (mc > m) m = mc;
    int b = 1;
    while (b <= 64 && ldexp(1.0, b) < 2 * m + 1) b++;
    *bound = m;
    *bits = b;
    if (b > SECAGG_MAX_BITS)
        return hfl_errf(err, "secure aggregation needs %d bits per element for a sum bounded by %.4g (clip %g, "
                        "scale 2^%d, %d clients): over %d, the most a client can round exactly; lower --fixed-bits",
                        b, m, clip, shift, n, SECAGG_MAX_BITS);
    return 0;
}

int secagg_degree(int n) {
    if (n <= 1) return 0;
    int lg = 0;
    while ((1 << lg) < n) lg++;
    int k = 2 * lg;
    return k >= n - 1 ? n - 1 : k;
}

/* Member i's position in the round's permutation, and the member at a position. */
static void sa_permutation(uint64_t seed, int round, int n, int *perm) {
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        uint32_t u = hfl_philox_u32(seed, HFL_STREAM_SHUFFLE, (uint32_t)round, 0xFFFFFFFDu, 0, (uint64_t)i);
        int j = (int)(((uint64_t)u * (uint64_t)(i + 1)) >> 32);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

void secagg_neighbours(uint64_t seed, int round, int n, int i, int *nb) {
    int k = secagg_degree(n);
    if (k == n - 1) { /* complete */
        for (int j = 0, m = 0; j < n; j++)
            if (j != i) nb[m++] = j;
        return;
    }
    /* a Harary graph H(k, n) over the permutation: the k/2 members on each
     * side of i's position (k is even here, and k < n - 1) */
    int *perm = hfl_malloc(sizeof(int) * (size_t)n), p = 0;
    sa_permutation(seed, round, n, perm);
    while (perm[p] != i) p++;
    for (int d = 1, m = 0; d <= k / 2; d++) {
        nb[m++] = perm[(p + d) % n];
        nb[m++] = perm[(p - d + n) % n];
    }
    free(perm);
}
