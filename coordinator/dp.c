/* dp.c: the RDP accountant of the subsampled Gaussian mechanism (see dp.h).
 * Sums of terms of both signs are kept in log space as a positive and a
 * negative log-sum-exp, so orders up to 512 and noise multipliers down to
 * 0.3 neither overflow nor cancel. */
#include "coordinator/dp.h"

#include <math.h>
#include <string.h>

double hfl_rdp_order(int i) {
    if (i < 99) return 1.1 + 0.1 * i;   /* 1.1 .. 10.9 */
    if (i < 99 + 54) return 11 + (i - 99); /* 11 .. 64 */
    return 128.0 * (double)(1 << (i - 153)); /* 128, 256, 512 */
}

/* log(exp(a) + exp(b)) */
static double lse(double a, double b) {
    if (a == -INFINITY) return b;
    if (b == -INFINITY) return a;
    return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

/* Signed log-space accumulator. */
typedef struct {
    double pos, neg;
} dp_sum;

static void dp_add(dp_sum *s, int sign, double log_mag) {
    if (sign > 0) s->pos = lse(s->pos, log_mag);
    else s->neg = lse(s->neg, log_mag);
}

static double dp_log(const dp_sum *s) { /* log(pos - neg), pos > neg */
    if (s->neg == -INFINITY) return s->pos;
    return s->pos + log1p(-exp(s->neg - s->pos));
}

/* log A_a for integer a (dp.h). */
static double log_a_int(double q, double z, int a) {
    dp_sum s = {-INFINITY, -INFINITY};
    double log_binom = 0; /* log C(a, k) */
    for (int k = 0; k <= a; k++) {
        double t = log_binom + (a - k) * log1p(-q) + k * log(q) + (k * (double)k - k) / (2 * z * z);
        dp_add(&s, +1, t);
        log_binom += log((double)(a - k)) - log((double)(k + 1));
    }
    return dp_log(&s);
}

/* log A_a for fractional a (Mironov et al. 2019, section 3.3). */
static double log_a_frac(double q, double z, double a) {
    dp_sum s = {-INFINITY, -INFINITY};
    double z0 = z * z * log(1 / q - 1) + 0.5;
    double log_binom = 0;
    int sign = 1; /* of C(a, i) */
    for (int i = 0; i < 100000; i++) {
        double j = a - i;
        double log_t1 = log_binom + j * log1p(-q) + i * log(q) + (i * (double)i - i) / (2 * z * z) +
                        log(0.5 * erfc((i - z0) / (sqrt(2.0) * z)));
        double log_t2 = log_binom + i * log1p(-q) + j * log(q) + (j * j - j) / (2 * z * z) +
                        log(0.5 * erfc((z0 - j) / (sqrt(2.0) * z)));
        if (log_t1 > -INFINITY) dp_add(&s, sign, log_t1);
        if (log_t2 > -INFINITY) dp_add(&s, sign, log_t2);
        double top = s.pos > s.neg ? s.pos : s.neg;
        if (i > a && log_t1 < top - 40 && log_t2 < top - 40) break; /* below 4e-18 of the sum */
        double f = a - i; /* C(a, i + 1) = C(a, i) (a - i) / (i + 1) */
        if (f < 0) sign = -sign;
        log_binom += log(fabs(f)) - log(i + 1.0);
    }
    return dp_log(&s);
}

double hfl_rdp_sampled_gaussian(double q, double z, double a) {
    if (q <= 0) return 0;
    if (q >= 1) return a / (2 * z * z);
    double la = a == floor(a) ? log_a_int(q, z, (int)a) : log_a_frac(q, z, a);
    return la / (a - 1);
}

void hfl_rdp_compose(hfl_rdp *acc, double q, double z, int rounds) {
    for (int i = 0; i < HFL_RDP_ORDERS; i++) acc->rdp[i] += rounds * hfl_rdp_sampled_gaussian(q, z, hfl_rdp_order(i));
    acc->rounds += rounds;
}

double hfl_rdp_epsilon(const hfl_rdp *acc, double delta, double *order) {
    double best = INFINITY, at = 0;
    for (int i = 0; i < HFL_RDP_ORDERS; i++) {
        double a = hfl_rdp_order(i);
        double e = acc->rdp[i] + log((a - 1) / a) - (log(delta) + log(a)) / (a - 1);
        if (e < best) best = e, at = a;
    }
    if (order) *order = at;
    return best < 0 ? 0 : best;
}

double hfl_dp_noise_for(double q, int rounds, double epsilon, double delta) {
    double lo = 0.05, hi = 1e4;
    hfl_rdp acc;
    memset(&acc, 0, sizeof acc);
    hfl_rdp_compose(&acc, q, hi, rounds);
    if (hfl_rdp_epsilon(&acc, delta, NULL) > epsilon) return -1;
    while (hi / lo > 1.001) { /* epsilon falls as z grows */
        double mid = sqrt(lo * hi);
        memset(&acc, 0, sizeof acc);
        hfl_rdp_compose(&acc, q, mid, rounds);
        if (hfl_rdp_epsilon(&acc, delta, NULL) > epsilon) lo = mid;
        else hi = mid;
    }
    return hi;
}

double hfl_dp_update_multiplier(double z, double sigma_b) {
    return pow(pow(z, -2) - pow(2 * sigma_b, -2), -0.5);
}
