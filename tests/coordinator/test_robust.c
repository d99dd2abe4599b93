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
 * bit-identical.
 * The trim count is floor(beta k), which 5 rows at beta 0.2 cannot tell from
 * ceil or round: 4 rows (1, 2, 3, 1000) at beta 0.2 trim floor(0.8) = 0, the
 * plain mean 251.5; at 0.25 and 0.3, floor(1) = floor(1.2) = 1: (2 + 3) / 2;
 * at 0.49, floor(1.96) = 1 still.
 * Krum's neighbour count k - f - 2: on 1-D points 0, 1, 3, 5, 8 (k = 5) the
 * squared distances from each are
 *   0: 1 9 25 64   1: 1 4 16 49   3: 4 4 9 25   5: 4 9 16 25   8: 9 25 49 64
 * (sorted), so the sums of the 2 nearest (f = 1) are 10 5 8 13 34 and Krum
 * picks 1; of the 3 nearest (f = 0): 35 21 17 29 83, and it picks 3; of the
 * single nearest, 1 1 4 4 9, a tie that would go to 0. Multi-Krum f = 1,
 * m = 3 averages 1, 3 and 0 (scores 5, 8, 10): 4/3; counting 3 neighbours
 * it would average 3, 1 and 5. Each point x is the row (x, 0, 0, 0, x), so
 * the distances run through the four-lane loop and its tail alike (each
 * squared distance doubles; the order stays); then as (0, 0, 0, 0, x), in
 * the tail alone. Multi-Krum with m = 1 is Krum. All 120 orders of the five
 * rows give the same picks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/robust.h"
#include "kernels/backend.h"
#include "tests/check.h"
#include "util/util.h"

/* The rule over k rows of n values (rows[i] is row i) into out, on the CPU
 * backend (hfl_rule_run). */
static int rule_apply(const hfl_rule *r, const float *const *rows, int k, size_t n, float *out, int *selected,
                      char *err) {
    if (k < 1 || k > 1024) return hfl_errf(err, "%s over %d updates: needs 1 to 1024", hfl_rule_name(r), k);
    float *all = hfl_malloc(sizeof(float) * (size_t)k * (n ? n : 1));
    int *pick = hfl_malloc(sizeof(int) * (size_t)k);
    for (int i = 0; i < k; i++) memcpy(all + (size_t)i * n, rows[i], sizeof(float) * n);
    int rc = hfl_rule_run(r, hfl_backend_cpu(), all, k, n, out, pick, NULL, selected, NULL, err);
    free(all);
    free(pick);
    return rc;
}

static float close_to(float a, double b) { return fabs(a - b) <= 1e-6 * fmax(1, fabs(b)); }

static void test_coordinatewise(void) {
    char err[HFL_ERR_LEN];
    float r0[3] = {1, 10, -1}, r1[3] = {2, 20, -2}, r2[3] = {3, 30, -3}, r3[3] = {4, 40, -4}, r4[3] = {1000, 50, -5};
    const float *rows[5] = {r0, r1, r2, r3, r4};
    float out[3];
    hfl_rule med, trim;
    CHECK(hfl_rule_parse("median", &med, err) == 0 && hfl_rule_parse("trimmed:0.2", &trim, err) == 0);
    CHECK(rule_apply(&med, rows, 5, 3, out, NULL, err) == 0);
    CHECK(out[0] == 3 && out[1] == 30 && out[2] == -3);
    CHECK(rule_apply(&trim, rows, 5, 3, out, NULL, err) == 0);
    CHECK(close_to(out[0], 3) && close_to(out[1], 30) && close_to(out[2], -3));
    CHECK(rule_apply(&med, rows, 4, 3, out, NULL, err) == 0); /* rows 0..3 */
    CHECK(out[0] == 2.5f && out[1] == 25 && out[2] == -2.5f);
    const float *perm[5] = {r4, r2, r0, r3, r1};
    float a[3], b[3];
    CHECK(rule_apply(&trim, rows, 5, 3, a, NULL, err) == 0 && rule_apply(&trim, perm, 5, 3, b, NULL, err) == 0);
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
    CHECK(rule_apply(&kr, rows, 5, 2, out, sel, err) == 0);
    CHECK(out[0] == 1 && out[1] == 1 && sel[3] == 1 && sel[0] + sel[1] + sel[2] + sel[4] == 0);
    CHECK(rule_apply(&mk, rows, 5, 2, out, sel, err) == 0);
    CHECK(close_to(out[0], 1.0) && close_to(out[1], 1.0) && sel[1] == 0 && sel[0] + sel[2] + sel[3] + sel[4] == 4);
    CHECK(rule_apply(&kr, rows, 4, 2, out, sel, err) != 0 && strstr(err, "needs more than 4"));
}

static void test_trim_count(void) {
    char err[HFL_ERR_LEN];
    float r0[2] = {1, -1}, r1[2] = {2, -2}, r2[2] = {3, -3}, r3[2] = {1000, -4};
    const float *rows[4] = {r3, r1, r0, r2};
    float out[2];
    static const struct {
        const char *spec;
        double want0, want1;
    } cases[] = {{"trimmed:0.2", 251.5, -2.5}, {"trimmed:0.25", 2.5, -2.5}, {"trimmed:0.3", 2.5, -2.5},
                 {"trimmed:0.49", 2.5, -2.5}, {"trimmed:0", 251.5, -2.5}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hfl_rule r;
        CHECK(hfl_rule_parse(cases[i].spec, &r, err) == 0);
        CHECK(rule_apply(&r, rows, 4, 2, out, NULL, err) == 0);
        CHECK_MSG(close_to(out[0], cases[i].want0) && close_to(out[1], cases[i].want1),
                  "%s over 4 rows: %g %g, want %g %g", cases[i].spec, (double)out[0], (double)out[1], cases[i].want0,
                  cases[i].want1);
    }
    /* one row: nothing to trim (floor(0.4 x 1) = 0) */
    hfl_rule r;
    CHECK(hfl_rule_parse("trimmed:0.4", &r, err) == 0 && rule_apply(&r, rows, 1, 2, out, NULL, err) == 0);
    CHECK(out[0] == 1000 && out[1] == -4);
}

static void test_krum_neighbours(void) {
    char err[HFL_ERR_LEN];
    static const float x[5] = {5, 8, 0, 3, 1}; /* the points, in this row order */
    float pts[5][5];
    const float *rows[5];
    for (int i = 0; i < 5; i++) {
        memset(pts[i], 0, sizeof pts[i]);
        pts[i][0] = pts[i][4] = x[i];
        rows[i] = pts[i];
    }
    float out[5];
    int sel[5];
    hfl_rule r;
    CHECK(hfl_rule_parse("krum:1", &r, err) == 0 && rule_apply(&r, rows, 5, 5, out, sel, err) == 0);
    CHECK_MSG(out[0] == 1 && out[4] == 1 && out[1] == 0 && sel[4] == 1 && sel[0] + sel[1] + sel[2] + sel[3] == 0,
              "krum:1 picked %g", (double)out[0]);
    CHECK(hfl_rule_parse("krum:0", &r, err) == 0 && rule_apply(&r, rows, 5, 5, out, sel, err) == 0);
    CHECK_MSG(out[0] == 3 && out[4] == 3 && sel[3] == 1 && sel[0] + sel[1] + sel[2] + sel[4] == 0,
              "krum:0 picked %g", (double)out[0]);
    CHECK(hfl_rule_parse("multikrum:1:3", &r, err) == 0 && rule_apply(&r, rows, 5, 5, out, sel, err) == 0);
    CHECK_MSG(close_to(out[0], 4.0 / 3) && close_to(out[4], 4.0 / 3) && out[2] == 0 && sel[2] + sel[3] + sel[4] == 3 &&
                  sel[0] + sel[1] == 0,
              "multikrum:1:3 gave %g", (double)out[0]);
    /* f = 1 needs k > 4: five rows are enough, and so is m = k */
    CHECK(hfl_rule_parse("multikrum:1:9", &r, err) == 0 && rule_apply(&r, rows, 5, 5, out, sel, err) == 0);
    CHECK(close_to(out[0], 17.0 / 5) && sel[0] + sel[1] + sel[2] + sel[3] + sel[4] == 5);
    /* m = 1 is Krum */
    CHECK(hfl_rule_parse("multikrum:1:1", &r, err) == 0 && rule_apply(&r, rows, 5, 5, out, sel, err) == 0);
    CHECK_MSG(out[0] == 1 && sel[4] == 1 && sel[0] + sel[1] + sel[2] + sel[3] == 0, "multikrum:1:1 gave %g",
              (double)out[0]);
    /* the points in the last coordinate alone (the distance's tail) */
    for (int i = 0; i < 5; i++) pts[i][0] = 0;
    CHECK(hfl_rule_parse("krum:1", &r, err) == 0 && rule_apply(&r, rows, 5, 5, out, sel, err) == 0);
    CHECK_MSG(out[4] == 1 && sel[4] == 1, "krum:1 on the last coordinate picked %g", (double)out[4]);
}

/* Krum and Multi-Krum do not depend on the order of the rows: the points
 * above in all 120 orders (no ties among the scores that decide). */
static void test_krum_orders(void) {
    char err[HFL_ERR_LEN];
    static const float x[5] = {5, 8, 0, 3, 1};
    int perm[5] = {0, 1, 2, 3, 4}, bad = 0, orders = 0;
    hfl_rule kr, k0, mk;
    CHECK(hfl_rule_parse("krum:1", &kr, err) == 0 && hfl_rule_parse("krum:0", &k0, err) == 0 &&
          hfl_rule_parse("multikrum:1:3", &mk, err) == 0);
    for (;;) {
        float pts[5][5] = {{0}}, out[5];
        const float *rows[5];
        for (int i = 0; i < 5; i++) {
            pts[i][0] = pts[i][4] = x[perm[i]];
            rows[i] = pts[i];
        }
        bad += rule_apply(&kr, rows, 5, 5, out, NULL, err) != 0 || out[0] != 1;
        bad += rule_apply(&k0, rows, 5, 5, out, NULL, err) != 0 || out[0] != 3;
        bad += rule_apply(&mk, rows, 5, 5, out, NULL, err) != 0 || !close_to(out[0], 4.0 / 3);
        orders++;
        /* the next permutation in lexicographic order */
        int i = 3;
        while (i >= 0 && perm[i] > perm[i + 1]) i--;
        if (i < 0) break;
        int j = 4;
        while (perm[j] < perm[i]) j--;
        int t = perm[i];
        perm[i] = perm[j], perm[j] = t;
        for (int a = i + 1, b = 4; a < b; a++, b--) t = perm[a], perm[a] = perm[b], perm[b] = t;
    }
    CHECK_MSG(orders == 120 && bad == 0, "%d wrong picks over %d row orders", bad, orders);
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

static const check_case cases[] = {
    {"coordinatewise", test_coordinatewise},
    {"krum", test_krum},
    {"trim_count", test_trim_count},
    {"krum_neighbours", test_krum_neighbours},
    {"krum_orders", test_krum_orders},
    {"parse", test_parse},
};

int main(int argc, char **argv) {
    return check_run("test_robust", cases, CHECK_CASES(cases), argc, argv);
}
