/* test_dp.c: the RDP accountant (coordinator/dp.h) against an independent
 * reference over a grid of noise multipliers, sampling rates and rounds.
 *
 * The reference takes the definition, not the paper's series: for the
 * sampled Gaussian mechanism, A_a = E_{x ~ N(0, z^2)} [((1 - q) + q
 * exp((2x - 1) / (2 z^2)))^a] (Mironov, Talwar and Zhang 2019, section 3.1:
 * the ratio of the mixture (1 - q) N(0, z^2) + q N(1, z^2) to N(0, z^2)),
 * integrated numerically here (trapezoids of width z / 64 in log space over
 * [-40 z, a + 40 z], where the integrand lies), so an error in either of the
 * accountant's series (integer or fractional orders) shows. Rounds compose
 * by adding RDP and epsilon follows from Canonne, Kamath and Steinke 2020's
 * conversion, written out again below. Each epsilon must be within 1%.
 * Also: q = 1 gives the plain Gaussian's a / (2 z^2), and hfl_dp_noise_for
 * returns a multiplier whose epsilon is at most, and within 1% of, the target. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/dp.h"
#include "tests/check.h"

/* log A_a by integration (see the header). */
static double ref_log_a(double q, double z, double a) {
    double lo = -40 * z, hi = a + 40 * z, h = z / 64;
    double acc = -INFINITY;
    for (double x = lo; x <= hi; x += h) {
        double log_phi = -x * x / (2 * z * z) - log(z * sqrt(2 * M_PI));
        double u = (2 * x - 1) / (2 * z * z); /* log of the ratio N(1)/N(0) at x */
        double log_mix = u > 0 ? u + log(q + (1 - q) * exp(-u)) : log((1 - q) + q * exp(u));
        double t = log_phi + a * log_mix + log(h);
        acc = acc == -INFINITY ? t : (acc > t ? acc + log1p(exp(t - acc)) : t + log1p(exp(acc - t)));
    }
    return acc;
}

static double ref_epsilon(double q, double z, int rounds, double delta) {
    double best = INFINITY;
    for (int i = 0; i < HFL_RDP_ORDERS; i++) {
        double a = hfl_rdp_order(i);
        double rdp = rounds * ref_log_a(q, z, a) / (a - 1);
        double e = rdp + log((a - 1) / a) - (log(delta) + log(a)) / (a - 1);
        if (e < best) best = e;
    }
    return best < 0 ? 0 : best;
}

/* The accountant's epsilon against the reference over a grid of z, q, rounds. */
static void test_against_reference(void) {
    const double zs[] = {0.7, 1.0, 2.0, 5.0}, qs[] = {0.01, 0.1, 0.5, 1.0};
    const int rounds[] = {1, 10, 100, 1000};
    const double delta = 1e-5;
    double worst = 0;
    for (size_t a = 0; a < sizeof zs / sizeof *zs; a++)
        for (size_t b = 0; b < sizeof qs / sizeof *qs; b++)
            for (size_t k = 0; k < sizeof rounds / sizeof *rounds; k++) {
                hfl_rdp acc;
                memset(&acc, 0, sizeof acc);
                hfl_rdp_compose(&acc, qs[b], zs[a], rounds[k]);
                double got = hfl_rdp_epsilon(&acc, delta, NULL), want = ref_epsilon(qs[b], zs[a], rounds[k], delta);
                double rel = fabs(got - want) / want;
                if (rel > worst) worst = rel;
                CHECK_MSG(rel <= 0.01, "z %g q %g rounds %d: epsilon %.6g, reference %.6g", zs[a], qs[b], rounds[k],
                          got, want);
            }
    printf("accountant vs reference: worst relative difference %.2e over %zu cases\n", worst,
           sizeof zs / sizeof *zs * sizeof qs / sizeof *qs * sizeof rounds / sizeof *rounds);
}

static void test_full_sampling(void) {
    for (int i = 0; i < HFL_RDP_ORDERS; i += 17) { /* q = 1: the Gaussian's own RDP */
        double o = hfl_rdp_order(i);
        CHECK_CLOSE(hfl_rdp_sampled_gaussian(1.0, 1.5, o), o / (2 * 1.5 * 1.5), 0, 1e-12);
    }
}

static void test_noise_for(void) {
    const double delta = 1e-5;
    for (double eps = 1; eps <= 8; eps *= 2) {
        double z = hfl_dp_noise_for(0.1, 100, eps, delta);
        hfl_rdp acc;
        memset(&acc, 0, sizeof acc);
        hfl_rdp_compose(&acc, 0.1, z, 100);
        double e = hfl_rdp_epsilon(&acc, delta, NULL);
        CHECK_MSG(z > 0 && e <= eps && e > 0.99 * eps, "target %g: z %g gives %g", eps, z, e);
    }
    CHECK(hfl_dp_noise_for(1.0, 1000, 1e-3, delta) < 0 || hfl_dp_noise_for(1.0, 1000, 1e-3, delta) > 100);
}

static void test_update_multiplier(void) {
    CHECK_CLOSE(hfl_dp_update_multiplier(1.0, 10.0), 1.0 / sqrt(1 - 1.0 / 400), 0, 1e-12);
}

static const check_case cases[] = {
    {"against_reference", test_against_reference},
    {"full_sampling", test_full_sampling},
    {"noise_for", test_noise_for},
    {"update_multiplier", test_update_multiplier},
};

int main(int argc, char **argv) {
    return check_run("test_dp", cases, CHECK_CASES(cases), argc, argv);
}
