/* draw.h: sequential random draws for partitioning, built on counter-based Philox.
 *
 * A hfl_draw is (seed, purpose id, next index): draw k is
 * hfl_philox_u32(seed, HFL_STREAM_PARTITION, 0, 0, purpose, k), so a sequence
 * depends only on the seed and the purpose, never on what else was drawn
 * before. Used by partition.c for shuffles and Dirichlet proportions; the
 * samplers are the textbook ones: Fisher-Yates, Box-Muller, Marsaglia-Tsang
 * gamma with the u^(1/alpha) boost for alpha < 1. Gamma variates are returned
 * as logarithms because for small alpha the boost underflows a double
 * (u^(1/0.01) can be 1e-1000); the Dirichlet normalises in log space. */
#ifndef HFL_DRAW_H
#define HFL_DRAW_H

#include <stdint.h>

typedef struct {
    uint64_t seed;
    uint32_t purpose; /* the philox "tensor" word: what these numbers are for */
    uint64_t next;    /* index of the next 32-bit draw */
} hfl_draw;

void hfl_draw_init(hfl_draw *d, uint64_t seed, uint32_t purpose);
uint32_t hfl_draw_u32(hfl_draw *d);
/* Uniform integer in [0, bound), unbiased (Lemire's multiply with rejection); bound > 0. */
uint32_t hfl_draw_below(hfl_draw *d, uint32_t bound);
/* Uniform in the open interval (0, 1). */
double hfl_draw_uniform(hfl_draw *d);
/* Standard normal (Box-Muller, cosine half). */
double hfl_draw_normal(hfl_draw *d);
/* log of a Gamma(alpha, 1) variate, alpha > 0. */
double hfl_draw_log_gamma(hfl_draw *d, double alpha);
/* Fisher-Yates shuffle of a[0..n). */
void hfl_draw_shuffle(hfl_draw *d, int *a, int n);
/* p[0..k) ~ Dirichlet(alpha, ..., alpha); sums to 1, every entry finite and >= 0. */
void hfl_draw_dirichlet(hfl_draw *d, double alpha, int k, double *p);

#endif
