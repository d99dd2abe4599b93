/* draw.c: Fisher-Yates, Box-Muller, Marsaglia-Tsang gamma and Dirichlet over Philox. */
#include "data/draw.h"

#include <math.h>

#include "kernels/philox.h"

void hfl_draw_init(hfl_draw *d, uint64_t seed, uint32_t purpose) {
    d->seed = seed;
    d->purpose = purpose;
    d->next = 0;
}

uint32_t hfl_draw_u32(hfl_draw *d) {
    return hfl_philox_u32(d->seed, HFL_STREAM_PARTITION, 0, 0, d->purpose, d->next++);
}

uint32_t hfl_draw_below(hfl_draw *d, uint32_t bound) {
    uint64_t m = (uint64_t)hfl_draw_u32(d) * bound;
    uint32_t low = (uint32_t)m;
    if (low < bound) {
        uint32_t threshold = (uint32_t)(-bound) % bound; /* 2^32 mod bound */
        while (low < threshold) {
            m = (uint64_t)hfl_draw_u32(d) * bound;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

double hfl_draw_uniform(hfl_draw *d) { return hfl_u01_open(hfl_draw_u32(d)); }

double hfl_draw_normal(hfl_draw *d) {
    double u1 = hfl_draw_uniform(d);
    double u2 = hfl_draw_uniform(d);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double hfl_draw_log_gamma(hfl_draw *d, double alpha) {
    if (alpha < 1.0) {
        /* Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha), taken in logs. */
        double lg = hfl_draw_log_gamma(d, alpha + 1.0);
        return lg + log(hfl_draw_uniform(d)) / alpha;
    }
    double dd = alpha - 1.0 / 3.0;
    double c = 1.0 / sqrt(9.0 * dd);
    for (;;) {
        double x = hfl_draw_normal(d);
        double v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        double u = hfl_draw_uniform(d);
        if (log(u) < 0.5 * x * x + dd - dd * v + dd * log(v)) return log(dd) + log(v);
    }
}

void hfl_draw_shuffle(hfl_draw *d, int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)hfl_draw_below(d, (uint32_t)i + 1);
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void hfl_draw_dirichlet(hfl_draw *d, double alpha, int k, double *p) {
    double max = -INFINITY;
    for (int j = 0; j < k; j++) {
        p[j] = hfl_draw_log_gamma(d, alpha);
        if (p[j] > max) max = p[j];
    }
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        p[j] = exp(p[j] - max); /* the largest becomes 1, so sum >= 1 */
        sum += p[j];
    }
    for (int j = 0; j < k; j++) p[j] /= sum;
}
