/* test_checkpoint_edges.c: the edges of plan/checkpoint.c that
 * test_checkpoint.c leaves open, written against mutants that survived
 * scripts/mutate (docs/testing.md).
 *
 * 1. Names: every kind, and "?" for the first value past the last.
 * 2. The DP's frontiers under stress: chains of 11 to 14 layers whose costs
 *    are nearly equal and whose sizes are small and unequal, so that many
 *    labels per position are Pareto-optimal (test_checkpoint.c's random
 *    chains rarely keep more than a few). At budgets from the least peak to
 *    storing everything, `optimal` must have brute force's least recompute
 *    (bit-equal) and, among those, the least peak; `full` the least peak and
 *    the least recompute among those. Brute force evaluates every one of the
 *    2^(n-1) sets with hfl_ckpt_evaluate, which test_checkpoint.c checks
 *    against an event-by-event simulator. A frontier that loses a label
 *    (a staircase search or insertion gone wrong) picks a worse schedule.
 * 3. A trap (a random find): 14 layers of costs 1 to 3 and sizes 60 to 276,
 *    where many labels tie on recompute. At the budget an eighth of the way
 *    from its least peak (1240) to storing everything (2453), brute force's
 *    answer is recompute 8 at peak 1312; a staircase search that skips a
 *    step drops the label leading there and returns recompute 8 at 1331.
 * 4. The last layer is checked like the others (cost, grad_in_place, the
 *    byte accounting), and the grad_in_place refusal names the layer's own
 *    output and input bytes.
 * 5. On a heap whose fresh blocks are filled with a known pattern (glibc's
 *    M_PERTURB; an ASan build fills them too), `optimal` still matches brute
 *    force: a read of a label the DP never wrote (past a frontier's end)
 *    takes the pattern, a negative cost, as an upper bound on the recompute,
 *    and the exact pass then keeps no schedule at all. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "plan/checkpoint.h"
#include "tests/check.h"
#include "util/util.h"

static uint64_t st = 0xD1B54A32D192ED03ull;
static uint64_t rnd(void) { /* xorshift64* */
    st ^= st >> 12;
    st ^= st << 25;
    st ^= st >> 27;
    return st * 0x2545F4914F6CDD1Dull;
}

static void test_names(void) {
    static const char *want[] = {"none", "sqrt", "optimal", "full"};
    for (int k = 0; k < 4; k++) {
        CHECK(!strcmp(hfl_ckpt_name((hfl_ckpt_kind)k), want[k]));
        hfl_ckpt_kind got = HFL_CKPT_FULL;
        char err[HFL_ERR_LEN];
        CHECK(hfl_ckpt_parse(want[k], &got, err) == 0 && got == (hfl_ckpt_kind)k);
    }
    CHECK(!strcmp(hfl_ckpt_name((hfl_ckpt_kind)4), "?"));
    CHECK(!strcmp(hfl_ckpt_name((hfl_ckpt_kind)-1), "?"));
}

#define MAXN 14
static size_t peaks[1 << (MAXN - 1)];
static double costs[1 << (MAXN - 1)];

static hfl_ckpt_layer lay(double c, size_t m, int no, int ni, int of) {
    return (hfl_ckpt_layer){.cost = c, .out_bytes = m, .needs_output = no, .needs_input = ni, .output_first = of};
}

/* Chain t: the trap (t = 0) or a random one; budgets at k/4 (k/8 for the
 * trap) of the way from the least peak to storing everything. */
static void test_frontiers(int chains) {
    hfl_ckpt_layer L[MAXN];
    int checked = 0;
    for (int t = 0; t <= chains; t++) {
        int n, steps = 4;
        hfl_ckpt_chain ch;
        if (t == 0) {
            const hfl_ckpt_layer trap[14] = {
                lay(1, 91, 1, 1, 0),  lay(1, 144, 0, 1, 1), lay(1, 227, 1, 1, 0), lay(1, 237, 1, 1, 0),
                lay(1, 157, 0, 1, 0), lay(2, 166, 1, 1, 0), lay(2, 162, 0, 1, 0), lay(1, 184, 0, 1, 0),
                lay(2, 191, 1, 0, 1), lay(2, 276, 0, 1, 1), lay(1, 152, 0, 1, 1), lay(3, 157, 0, 1, 1),
                lay(2, 178, 1, 1, 1), lay(1, 60, 0, 0, 1)};
            n = 14, steps = 8;
            memcpy(L, trap, sizeof trap);
            ch = (hfl_ckpt_chain){.n = n, .in_bytes = 77, .layers = L, .first_backward = 0};
        } else {
            n = 11 + (int)(rnd() % (MAXN - 10));
            ch = (hfl_ckpt_chain){.n = n, .in_bytes = 1 + rnd() % 64, .layers = L,
                                  .first_backward = rnd() % 3 ? 0 : 1 + (int)(rnd() % 3)};
            int ties = t % 2; /* integer costs 1..3: many ties, the peak decides */
            for (int i = 0; i < n; i++)
                L[i] = lay(ties ? (double)(1 + rnd() % 3) : 1.0 + (double)(rnd() % 64) / 1024.0,
                           ties ? 1 + rnd() % 300 : 1 + rnd() % 64, rnd() % 3 == 0, rnd() % 5 != 0, (int)(rnd() % 2));
        }
        unsigned sets = 1u << (n - 1);
        unsigned char stored[MAXN + 1];
        size_t min_peak = SIZE_MAX, all_peak = 0;
        double full_cost = 0;
        char err[HFL_ERR_LEN];
        for (unsigned mask = 0; mask < sets; mask++) {
            stored[0] = stored[n] = 1;
            for (int i = 1; i < n; i++) stored[i] = (mask >> (i - 1)) & 1;
            hfl_ckpt_plan p;
            if (!CHECK_MSG(hfl_ckpt_evaluate(&ch, stored, &p, err) == 0, "%s", err)) return;
            peaks[mask] = p.peak, costs[mask] = p.recompute;
            if (p.peak < min_peak || (p.peak == min_peak && p.recompute < full_cost))
                min_peak = p.peak, full_cost = p.recompute;
        }
        all_peak = peaks[sets - 1];
        hfl_ckpt_plan f;
        CHECK(hfl_ckpt_schedule(&ch, HFL_CKPT_FULL, SIZE_MAX, &f, err) == 0);
        CHECK_MSG(f.peak == min_peak && f.recompute == full_cost && f.min_peak == min_peak,
                  "chain %d: full %zu/%g, brute force %zu/%g", t, f.peak, f.recompute, min_peak, full_cost);
        if (t == 0) CHECK(min_peak == 1240 && all_peak == 2453);
        for (int k = 0; k <= steps; k++) {
            size_t budget = min_peak + (all_peak - min_peak) * (size_t)k / (size_t)steps;
            double best_c = 0;
            size_t best_p = 0;
            int found = 0;
            for (unsigned mask = 0; mask < sets; mask++)
                if (peaks[mask] <= budget &&
                    (!found || costs[mask] < best_c || (costs[mask] == best_c && peaks[mask] < best_p)))
                    best_c = costs[mask], best_p = peaks[mask], found = 1;
            hfl_ckpt_plan o;
            CHECK(hfl_ckpt_schedule(&ch, HFL_CKPT_OPTIMAL, budget, &o, err) == 0);
            CHECK_MSG(found && o.feasible && o.recompute == best_c && o.peak == best_p,
                      "chain %d (n=%d) budget %zu: optimal %g/%zu, brute force %g/%zu", t, n, budget, o.recompute,
                      o.peak, best_c, best_p);
            if (t == 0 && k == 1) CHECK(best_c == 8 && best_p == 1312);
            checked++;
        }
    }
    printf("frontiers: %d chains, %d budgets checked against brute force\n", chains, checked);
}

static void case_frontiers(void) { test_frontiers(60); }

static void test_last_layer(void) {
    char err[HFL_ERR_LEN] = "";
    hfl_ckpt_layer L[3] = {lay(1, 7, 0, 1, 0), lay(1, 9, 0, 1, 0), lay(1, 11, 0, 1, 0)};
    hfl_ckpt_chain ch = {.n = 3, .in_bytes = 5, .layers = L};
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == 0, "%s", err);
    L[2].cost = 0.0;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1 &&
                  !strcmp(err, "checkpoint chain: layer 3 has cost 0 (must be finite and > 0)"), "%s", err);
    L[2].cost = HUGE_VAL;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1 && strstr(err, "layer 3 has cost inf"), "%s", err);
    L[2].cost = 1.0;
    L[2].grad_in_place = 1; /* a_3 is 11 bytes, a_2 9 */
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1 && strstr(err, "layer 3 has grad_in_place"), "%s", err);
    L[2].grad_in_place = 0;
    /* total = 5 + 7 + 9 + m_3 fits, but not two gradients of m_3 on top */
    L[2].out_bytes = SIZE_MAX / 3 + 1;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1 && strstr(err, "too large to account"), "%s", err);
    L[2].out_bytes = SIZE_MAX - 20; /* total 21 + m_3 overflows */
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1 && strstr(err, "overflow at layer 3"), "%s", err);
    L[2].out_bytes = 11;
    /* the message names layer 2's output (9) and its input a_1 (7) */
    L[1].grad_in_place = 1;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1 &&
                  !strcmp(err, "checkpoint chain: layer 2 has grad_in_place but 9 output bytes for 7 input bytes"),
              "%s", err);
}

/* test_frontiers again (the trap and 8 more chains), with fresh heap blocks
 * filled by 0xbe bytes (M_PERTURB 0x41 fills them with its complement):
 * 0xbebebebebebebebe is the double -1.6e-6, a cost no schedule has. */
static void test_fresh_heap(void) {
#ifdef __GLIBC__
    mallopt(M_PERTURB, 0x41); /* ASan's mallopt does nothing: it fills fresh blocks with 0xbe itself */
#endif
    test_frontiers(8);
#ifdef __GLIBC__
    mallopt(M_PERTURB, 0);
#endif
}

static const check_case cases[] = {
    {"names", test_names},
    {"frontiers", case_frontiers},
    {"last_layer", test_last_layer},
    {"fresh_heap", test_fresh_heap},
};

int main(int argc, char **argv) {
    return check_run("test_checkpoint_edges", cases, CHECK_CASES(cases), argc, argv);
}
