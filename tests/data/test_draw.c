/* test_draw.c: the Philox-based samplers used by partitioning have the right
 * moments, are deterministic per (seed, purpose), and shuffles are permutations. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/draw.h"
#include "tests/check.h"

#define N_DRAWS 200000

static void test_normal(void) {
    hfl_draw d;
    hfl_draw_init(&d, 42, 7);
    double s = 0, s2 = 0;
    for (int i = 0; i < N_DRAWS; i++) {
        double x = hfl_draw_normal(&d);
        s += x;
        s2 += x * x;
    }
    double mean = s / N_DRAWS, var = s2 / N_DRAWS - mean * mean;
    CHECK_MSG(fabs(mean) < 0.01, "normal mean %g", mean);
    CHECK_MSG(fabs(var - 1.0) < 0.02, "normal variance %g", var);
}

/* Gamma(a, 1) has mean a and variance a. */
static void test_gamma(double alpha) {
    hfl_draw d;
    hfl_draw_init(&d, 1234, 9);
    double s = 0, s2 = 0;
    int finite = 1;
    for (int i = 0; i < N_DRAWS; i++) {
        double lg = hfl_draw_log_gamma(&d, alpha);
        if (!isfinite(lg)) finite = 0;
        double x = exp(lg);
        s += x;
        s2 += x * x;
    }
    double mean = s / N_DRAWS, var = s2 / N_DRAWS - mean * mean;
    CHECK_MSG(finite, "gamma(%g) gave a non-finite log", alpha);
    CHECK_MSG(fabs(mean - alpha) < 0.02 * alpha + 0.005, "gamma(%g) mean %g", alpha, mean);
    CHECK_MSG(fabs(var - alpha) < 0.06 * alpha + 0.005, "gamma(%g) variance %g", alpha, var);
}

static void test_dirichlet(void) {
    enum { K = 10, REPS = 20000 };
    double p[K], mean[K] = {0};
    hfl_draw d;
    hfl_draw_init(&d, 5, 11);
    for (int r = 0; r < REPS; r++) {
        hfl_draw_dirichlet(&d, 0.5, K, p);
        double sum = 0;
        for (int j = 0; j < K; j++) {
            CHECK_MSG(p[j] >= 0 && p[j] <= 1, "p[%d] = %g", j, p[j]);
            sum += p[j];
            mean[j] += p[j] / REPS;
        }
        CHECK_MSG(fabs(sum - 1) < 1e-9, "dirichlet sums to %g", sum);
    }
    for (int j = 0; j < K; j++) CHECK_MSG(fabs(mean[j] - 0.1) < 0.01, "mean p[%d] = %g", j, mean[j]);
    /* Tiny alpha: the gamma boost underflows a double; the log-space path must not. */
    hfl_draw_dirichlet(&d, 1e-4, K, p);
    double sum = 0;
    for (int j = 0; j < K; j++) sum += p[j];
    CHECK_MSG(fabs(sum - 1) < 1e-9, "dirichlet(1e-4) sums to %g", sum);
}

static void test_shuffle_and_below(void) {
    enum { N = 1000 };
    int a[N], b[N], seen[N] = {0};
    for (int i = 0; i < N; i++) a[i] = b[i] = i;
    hfl_draw d1, d2;
    hfl_draw_init(&d1, 99, 1);
    hfl_draw_init(&d2, 99, 1);
    hfl_draw_shuffle(&d1, a, N);
    hfl_draw_shuffle(&d2, b, N);
    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "same seed and purpose shuffle differently");
    int fixed = 0;
    for (int i = 0; i < N; i++) {
        seen[a[i]]++;
        fixed += a[i] == i;
    }
    for (int i = 0; i < N; i++) CHECK_MSG(seen[i] == 1, "value %d seen %d times", i, seen[i]);
    CHECK_MSG(fixed < 10, "%d fixed points (expect about 1)", fixed);
    hfl_draw_init(&d2, 99, 2);
    for (int i = 0; i < N; i++) b[i] = i;
    hfl_draw_shuffle(&d2, b, N);
    CHECK_MSG(memcmp(a, b, sizeof a) != 0, "another purpose gives the same shuffle");
    int hist[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint32_t v = hfl_draw_below(&d1, 7);
        CHECK_MSG(v < 7, "below(7) gave %u", v);
        if (v < 7) hist[v]++;
    }
    for (int v = 0; v < 7; v++) CHECK_MSG(abs(hist[v] - 10000) < 500, "below(7): %d drawn %d times", v, hist[v]);
}

static void test_gammas(void) {
    test_gamma(0.1);
    test_gamma(0.7);
    test_gamma(1.0);
    test_gamma(4.5);
    test_gamma(1000.0);
}

static const check_case cases[] = {
    {"normal", test_normal},
    {"gamma", test_gammas},
    {"dirichlet", test_dirichlet},
    {"shuffle_and_below", test_shuffle_and_below},
};

int main(int argc, char **argv) {
    return check_run("test_draw", cases, CHECK_CASES(cases), argc, argv);
}
