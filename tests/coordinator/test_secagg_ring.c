/* test_secagg_ring.c: secure aggregation's ring and graph (proto/secagg.h).
 *
 * The ring: for clips, scales, client counts and noise levels over a grid,
 * the bits are the fewest whose signed range holds the stated bound (2^b >=
 * 2M + 1 > 2^(b-1)), and the worst sum the clients can make stays exact
 * through the ring: every client at its largest weighted element (w_i C
 * 2^S, rounded to nearest: at most floor(w_i C 2^S + 1/2)) plus its noise
 * share at the truncation tail (rounded likewise), all of one sign, summed mod 2^b and read back signed, gives the integer sum, and
 * the bound itself wraps one bit narrower (the choice is the fewest). Settings past 52 bits are refused with one line.
 * The graph: k = 2 ceil(log2 n) (n - 1 when that is smaller), every member
 * has k distinct neighbours other than itself, and the relation is
 * symmetric (a pair's masks must cancel). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto/secagg.h"
#include "proto/secagg_crypto.h"
#include "tests/check.h"
#include "util/util.h"

static void test_ring(void) {
    const double clips[] = {1e-3, 0.5, 1, 2, 37};
    const int fbits[] = {8, 24, 40}, ns[] = {1, 2, 10, 100, 1000};
    const double sig[] = {0, 0.01, 1};
    char err[HFL_ERR_LEN];
    int cases = 0;
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t k = 0; k < 5; k++)
                for (size_t z = 0; z < 3; z++) {
                    double clip = clips[a];
                    int n = ns[k], shift = secagg_shift(clip, fbits[b]), bits;
                    double sigma = sig[z] * clip / n, bound, w = 1.0 / n; /* equal shares summing to 1 */
                    if (secagg_ring_bits(clip, shift, 1.0, n, sigma, sigma, &bits, &bound, err) != 0) {
                        CHECK_MSG(strstr(err, "bits per element") != NULL, "%s", err);
                        continue;
                    }
                    cases++;
                    CHECK_MSG(ldexp(1.0, bits) >= 2 * bound + 1 && 2 * bound + 1 > ldexp(1.0, bits - 1),
                              "clip %g F %d n %d: %d bits for bound %g", clip, fbits[b], n, bits, bound);
                    /* the worst sum: every client at its element's bound and noise tail, one sign */
                    /* the most rounding to nearest makes of y: floor(y + 1/2) */
                    double one = floor(w * clip * ldexp(1.0, shift) + 0.5) +
                                 floor(SECAGG_NOISE_TAIL * sigma * ldexp(1.0, shift) + 0.5);
                    for (int sign = -1; sign <= 1; sign += 2) {
                        int64_t want = 0;
                        uint64_t ring = 0;
                        for (int i = 0; i < n; i++) {
                            int64_t x = sign * (int64_t)one;
                            want += x;
                            ring += (uint64_t)x;
                        }
                        CHECK_MSG(fabs((double)want) <= bound, "clip %g n %d: worst sum %lld beyond the bound %g",
                                  clip, n, (long long)want, bound);
                        CHECK_MSG(hfl_ring_signed(ring, bits) == want, "clip %g F %d n %d: the worst sum wraps",
                                  clip, fbits[b], n);
                    }
                }
    CHECK(cases > 100);
    /* one bit fewer than chosen cannot hold every bound: the choice is the fewest */
    int bits;
    double bound;
    CHECK(secagg_ring_bits(2.0, secagg_shift(2.0, 24), 1.0, 100, 0, 0, &bits, &bound, err) == 0);
    CHECK(ldexp(1.0, bits - 1) < 2 * bound + 1);
    int64_t top = (int64_t)floor(bound);
    CHECK(hfl_ring_signed((uint64_t)top, bits - 1) != top); /* the bound itself wraps one bit narrower */
    /* past 52 bits: refused, in one line naming what to lower */
    CHECK(secagg_ring_bits(1.0, secagg_shift(1.0, 50), 1.0, 1000, 1.0, 0, &bits, &bound, err) != 0);
    CHECK_MSG(strstr(err, "--fixed-bits") && !strchr(err, '\n'), "%s", err);
}

static void test_graph(void) {
    const int ns[] = {2, 3, 8, 10, 17, 100, 1000};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        int n = ns[a], k = secagg_degree(n), lg = 0;
        while ((1 << lg) < n) lg++;
        CHECK_MSG(k == (2 * lg < n - 1 ? 2 * lg : n - 1), "n %d: degree %d", n, k);
        unsigned char *adj = hfl_calloc((size_t)n * n, 1);
        int *nb = hfl_malloc(sizeof(int) * (size_t)(k ? k : 1)), bad = 0;
        for (int i = 0; i < n; i++) {
            secagg_neighbours(7, 3, n, i, nb);
            for (int j = 0; j < k; j++) {
                bad += nb[j] < 0 || nb[j] >= n || nb[j] == i || adj[(size_t)i * n + nb[j]];
                if (nb[j] >= 0 && nb[j] < n) adj[(size_t)i * n + nb[j]] = 1;
            }
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) bad += adj[(size_t)i * n + j] != adj[(size_t)j * n + i];
        CHECK_MSG(bad == 0, "n %d: %d faults (self, repeated, out of range or one-sided neighbours)", n, bad);
        free(adj), free(nb);
    }
}

static const check_case cases[] = {
    {"ring", test_ring},
    {"graph", test_graph},
};

int main(int argc, char **argv) {
    return check_run("test_secagg_ring", cases, CHECK_CASES(cases), argc, argv);
}
