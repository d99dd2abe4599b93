/* test_server_opt.c: the server optimizers (coordinator/server_opt.h)
 * against values worked out by hand from Reddi et al. 2021's Algorithm 2.
 *
 * x0 = (1, -2, 0.5), round deltas D1 = (0.1, -0.2, 0), D2 = (0.3, 0.1, -0.05).
 * FedAvg (lr 1): x = x0 + D1 + D2 = (1.4, -2.1, 0.45).
 * FedAvgM (lr 1, beta 0.9): v1 = D1, v2 = 0.9 D1 + D2; x = x0 + v1 + v2
 *   = (1.49, -2.28, 0.45).
 * FedAdam (lr 0.01, b1 0.9, b2 0.99, tau 1e-3), element 0: m1 = 0.01,
 *   v1 = 1e-4, x1 = 1 + 0.01 * 0.01 / (0.01 + 0.001) = 1.0090909;
 *   m2 = 0.009 + 0.03 = 0.039, v2 = 0.99e-4 + 0.01 * 0.09 = 0.000999,
 *   x2 = x1 + 0.01 * 0.039 / (0.0316070 + 0.001) = 1.0210515.
 * FedYogi: the same but v2 = v1 + 0.01 * 0.09 (v1 < D2^2) = 0.001, so
 *   x2 = 1.0210457. The other elements likewise (the table below).
 * Yogi's three branches, from a state set by hand: v = 0.25 and m = 0 in
 *   every element, D = (0.5, 0.1, 0.9), so D^2 = (0.25, 0.01, 0.81) is equal
 *   to, below and above v: Yogi's v = v - 0.01 D^2 sign(v - D^2) stays
 *   0.25, shrinks to 0.2499 and grows to 0.2581 (Adam's v = 0.99 v + 0.01 D^2:
 *   0.25, 0.2476, 0.2556); m = 0.1 D = (0.05, 0.01, 0.09) for both; and
 *   x = x0 + 0.01 m / (sqrt(v) + 0.001) from x0 = (1, -2, 0.5), e.g. Yogi's
 *   x1 = -2 + 0.01 x 0.01 / (0.49989999 + 0.001) = -1.99980036 (fp32:
 *   -1.99980032). The two steps above never reach the shrinking branch (v
 *   only grows from 0 there).
 * Parsing: the four names with their parameters, and refusals. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/server_opt.h"
#include "kernels/backend.h"
#include "tests/check.h"
#include "util/util.h"

static void step(hfl_server_opt *o, float *x, const float *d) { hfl_sopt_step_on(o, hfl_backend_cpu(), x, o->m, o->v, d); }

static void run(const char *spec, const double want[3]) {
    char err[HFL_ERR_LEN];
    hfl_server_opt o;
    CHECK(hfl_sopt_parse(spec, &o, err) == 0);
    CHECK(hfl_sopt_init(&o, 3, err) == 0);
    float x[3] = {1.0f, -2.0f, 0.5f};
    const float d1[3] = {0.1f, -0.2f, 0.0f}, d2[3] = {0.3f, 0.1f, -0.05f};
    step(&o, x, d1);
    step(&o, x, d2);
    for (int i = 0; i < 3; i++) {
        if (fabs(x[i] - want[i]) > 2e-7 * fabs(want[i]) + 1e-7)
            printf("%s: x[%d] = %.9g, want %.9g\n", spec, i, (double)x[i], want[i]);
        CHECK(fabs(x[i] - want[i]) <= 2e-7 * fabs(want[i]) + 1e-7);
    }
    printf("test_server_opt: %s after two rounds: %.7f %.7f %.7f\n", spec, (double)x[0], (double)x[1], (double)x[2]);
    hfl_sopt_free(&o);
}

/* Nesterov (DiLoCo's outer step, lr 0.7, mu 0.9) over three rounds, by hand:
 *   v1 = D1, x1 = x0 + 0.7 (D1 + 0.9 v1) = (1.133, -2.266, 0.5);
 *   v2 = 0.9 v1 + D2 = (0.39, -0.08, -0.05), x2 = x1 + 0.7 (D2 + 0.9 v2)
 *      = x1 + 0.7 (0.651, 0.028, -0.095) = (1.5887, -2.2464, 0.4335);
 *   D3 = (-0.2, 0.05, 0.1): v3 = (0.151, -0.022, 0.055),
 *      x3 = x2 + 0.7 (-0.0641, 0.0302, 0.1495) = (1.54383, -2.22526, 0.53815). */
static void test_nesterov(void) {
    char err[HFL_ERR_LEN];
    hfl_server_opt o;
    CHECK(hfl_sopt_parse("nesterov", &o, err) == 0 && o.lr == 0.7 && o.beta1 == 0.9);
    CHECK(hfl_sopt_init(&o, 3, err) == 0 && o.v != NULL && o.m == NULL);
    float x[3] = {1.0f, -2.0f, 0.5f};
    const float d[3][3] = {{0.1f, -0.2f, 0.0f}, {0.3f, 0.1f, -0.05f}, {-0.2f, 0.05f, 0.1f}};
    static const double want[3][3] = {{1.133, -2.266, 0.5}, {1.5887, -2.2464, 0.4335}, {1.54383, -2.22526, 0.53815}};
    for (int r = 0; r < 3; r++) {
        step(&o, x, d[r]);
        for (int i = 0; i < 3; i++)
            CHECK_MSG(fabs(x[i] - want[r][i]) <= 2e-7 * fabs(want[r][i]) + 2e-7, "nesterov round %d x[%d] = %.9g, want %.9g",
                      r + 1, i, (double)x[i], want[r][i]);
    }
    hfl_sopt_free(&o);
    CHECK(hfl_sopt_parse("nesterov:0.5:0.8", &o, err) == 0 && o.lr == 0.5 && o.beta1 == 0.8);
    CHECK(hfl_sopt_parse("nesterov:0.5:1", &o, err) != 0 && hfl_sopt_parse("nesterov:1:0.9:2", &o, err) != 0);
    printf("test_server_opt: nesterov over three rounds: %.7f %.7f %.7f\n", (double)x[0], (double)x[1], (double)x[2]);
}

/* One step of spec from v = 0.25, m = 0 (the branches above). */
static void branches(const char *spec, const double want_x[3], const double want_v[3]) {
    char err[HFL_ERR_LEN];
    hfl_server_opt o;
    CHECK(hfl_sopt_parse(spec, &o, err) == 0 && hfl_sopt_init(&o, 3, err) == 0);
    for (int i = 0; i < 3; i++) o.v[i] = 0.25f;
    float x[3] = {1.0f, -2.0f, 0.5f};
    const float d[3] = {0.5f, 0.1f, 0.9f};
    step(&o, x, d);
    static const double want_m[3] = {0.05, 0.01, 0.09};
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(fabs(o.v[i] - want_v[i]) <= 1e-7 * want_v[i], "%s: v[%d] = %.9g, want %.9g", spec, i, (double)o.v[i],
                  want_v[i]);
        CHECK_MSG(fabs(o.m[i] - want_m[i]) <= 1e-7 * want_m[i], "%s: m[%d] = %.9g", spec, i, (double)o.m[i]);
        CHECK_MSG(fabs(x[i] - want_x[i]) <= 2e-7 * fabs(want_x[i]), "%s: x[%d] = %.9g, want %.9g", spec, i,
                  (double)x[i], want_x[i]);
    }
    hfl_sopt_free(&o);
}

static void test_rules(void) {
    static const double fedavg[3] = {1.4, -2.1, 0.45};
    static const double fedavgm[3] = {1.49, -2.28, 0.45};
    static const double fedadam[3] = {1.0210515, -2.0129616, 0.4916667};
    static const double fedyogi[3] = {1.0210457, -2.0129485, 0.4916667};
    run("fedavg", fedavg);
    run("fedavgm", fedavgm);
    run("fedadam", fedadam);
    run("fedyogi", fedyogi);
    static const double half[3] = {1.2, -2.05, 0.475};
    run("fedavg:0.5", half);
}

static void test_branches(void) {
    static const double yogi_x[3] = {1.00099802, -1.99980032, 0.501768053}, yogi_v[3] = {0.25, 0.2499, 0.2581};
    static const double adam_x[3] = {1.00099802, -1.99979949, 0.501776636}, adam_v[3] = {0.25, 0.2476, 0.2556};
    branches("fedyogi", yogi_x, yogi_v);
    branches("fedadam", adam_x, adam_v);
}

static void test_parse(void) {
    char err[HFL_ERR_LEN];
    hfl_server_opt o;
    CHECK(hfl_sopt_parse("fedavgm:0.5:0.8", &o, err) == 0 && o.lr == 0.5 && o.beta1 == 0.8);
    CHECK(hfl_sopt_parse("fedadam:0.001", &o, err) == 0 && o.lr == 0.001 && o.kind == HFL_SOPT_FEDADAM);
    /* the limits themselves: lr in (0, 100], beta in [0, 1) */
    CHECK(hfl_sopt_parse("fedavg:100", &o, err) == 0 && o.lr == 100);
    CHECK(hfl_sopt_parse("fedavgm:1:0", &o, err) == 0 && o.beta1 == 0);
    CHECK(hfl_sopt_parse("fedavg:100.001", &o, err) != 0);
    static const char *bad[] = {"", "fedsgd", "fedavg:", "fedavg:0", "fedavg:x", "fedadam:0.1:0.9", "fedavgm:1:1",
                                "fedavg 1", "FEDAVG", "fedadam:0.1junk",
                                "fedavgm:1:", "fedyogi:1e9"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = hfl_sopt_parse(bad[i], &o, err);
        if (rc == 0) printf("test_server_opt: '%s' accepted\n", bad[i]);
        CHECK(rc != 0 && strstr(err, "server optimizer"));
    }
}

static const check_case cases[] = {
    {"nesterov", test_nesterov},
    {"rules", test_rules},
    {"branches", test_branches},
    {"parse", test_parse},
};

int main(int argc, char **argv) {
    return check_run("test_server_opt", cases, CHECK_CASES(cases), argc, argv);
}
