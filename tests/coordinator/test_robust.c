/* test_robust.c: the robust rules (coordinator/robust.h) on rows whose
 * answers are worked out by hand, and their parsing.
 *
 * Median and trimmed mean: 5 rows of 3 values, one column with an outlier
 * (1, 2, 3, 4, 1000): median 3, mean after trimming one at each end
 * (beta 0.2) (2 + 3 + 4) / 3 = 3, where the plain mean is 202; 4 rows:
 * the median averages the middle two. Krum (f = 1) over four honest rows
 * near (1, 1) and one at (50, -50): each row's score sums its k - f - 2 = 2
 * smallest squared distances; the honest row at (1, 1), closest to the
 * others, wins (scores worked out below), and Multi-Krum (m = k - f = 4)
 * averages exactly the four honest rows. Krum refuses 4 rows with f = 1
 * (needs k > 2f + 2). Permuting the rows leaves median and trimmed mean
 * bit-identical. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/robust.h"
#include "tests/check.h"
#include "util/util.h"

static float close_to(float a, double b) { return fabs(a - b) <= 1e-6 * fmax(1, fabs(b)); }

static void test_coordinatewise(void) {
    char err[HFL_ERR_LEN];
    float r0[3] = {1, 10, -1}, r1[3] = {2, 20, -2}, r2[3] = {3, 30, -3}, r3[3] = {4, 40, -4}, r4[3] = {1000, 50, -5};
    const float *rows[5] = {r0, r1, r2, r3, r4};
    float out[3];
    hfl_rule med, trim;
    CHECK(hfl_rule_parse("median", &med, err) == 0 && hfl_rule_parse("trimmed:0.2", &trim, err) == 0);
    CHECK(hfl_rule_apply(&med, rows, 5, 3, out, NULL, err) == 0);
    CHECK(out[0] == 3 && out[1] == 30 && out[2] == -3);
    CHECK(hfl_rule_apply(&trim, rows, 5, 3, out, NULL, err) == 0);
    CHECK(close_to(out[0], 3) && close_to(out[1], 30) && close_to(out[2], -3));
    CHECK(hfl_rule_apply(&med, rows, 4, 3, out, NULL, err) == 0); /* rows 0..3 */
    CHECK(out[0] == 2.5f && out[1] == 25 && out[2] == -2.5f);
    const float *perm[5] = {r4, r2, r0, r3, r1};
    float a[3], b[3];
    CHECK(hfl_rule_apply(&trim, rows, 5, 3, a, NULL, err) == 0 && hfl_rule_apply(&trim, perm, 5, 3, b, NULL, err) == 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

/* Rows (1,1), (1.5,1), (1,0.5), (0.5,1.5), (50,-50). Squared distances
 * from (1,1): 0.25, 0.25, 0.5; from (1.5,1): 0.25, 0.5, 1.25; from (1,0.5):
 * 0.25, 0.5, 1.25; from (0.5,1.5): 0.5, 1.25, 1.25. Two nearest: scores
 * 0.5, 0.75, 0.75, 1.75, and the far row's are thousands: (1,1) wins. */
static void test_krum(void) {
    char err[HFL_ERR_LEN];
    float h0[2] = {1, 1}, h1[2] = {1.5f, 1}, h2[2] = {1, 0.5f}, h3[2] = {0.5f, 1.5f}, bad[2] = {50, -50};
    const float *rows[5] = {h1, bad, h2, h0, h3};
    float out[2];
    int sel[5];
    hfl_rule kr, mk;
    CHECK(hfl_rule_parse("krum:1", &kr, err) == 0 && hfl_rule_parse("multikrum:1", &mk, err) == 0);
    CHECK(hfl_rule_apply(&kr, rows, 5, 2, out, sel, err) == 0);
    CHECK(out[0] == 1 && out[1] == 1 && sel[3] == 1 && sel[0] + sel[1] + sel[2] + sel[4] == 0);
    CHECK(hfl_rule_apply(&mk, rows, 5, 2, out, sel, err) == 0);
    CHECK(close_to(out[0], 1.0) && close_to(out[1], 1.0) && sel[1] == 0 && sel[0] + sel[2] + sel[3] + sel[4] == 4);
    CHECK(hfl_rule_apply(&kr, rows, 4, 2, out, sel, err) != 0 && strstr(err, "needs more than 4"));
}

static void test_parse(void) {
    char err[HFL_ERR_LEN];
    hfl_rule r;
    CHECK(hfl_rule_parse("trimmed", &r, err) == 0 && r.kind == HFL_RULE_TRIMMED && r.beta == 0.2);
    CHECK(hfl_rule_parse("multikrum:2:5", &r, err) == 0 && r.f == 2 && r.m == 5);
    CHECK(hfl_rule_parse("krum", &r, err) == 0 && r.f == 1);
    static const char *bad[] = {"", "mean", "median:1", "trimmed:0.5", "trimmed:-0.1", "krum:1.5", "krum:1:2",
                                "multikrum:1:0", "trimmed:", "Median", "krum:-1",
                                "trimmed:0.3x", "krum:2junk", "multikrum:1:", "krum:1e12", "median "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = hfl_rule_parse(bad[i], &r, err);
        if (rc == 0) printf("test_robust: '%s' accepted\n", bad[i]);
        CHECK(rc != 0 && strstr(err, "strategy"));
    }
}

int main(void) {
    test_coordinatewise();
    test_krum();
    test_parse();
    return check_exit_code("test_robust");
}
