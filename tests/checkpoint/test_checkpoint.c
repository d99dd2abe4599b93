/* test_checkpoint.c: gradient-checkpointing schedules (model/checkpoint.h).
 *
 * 1. The accounting: hand-computed peaks and recomputes of small chains, and
 *    an event-by-event memory simulator (allocate/free every activation and
 *    gradient in the order checkpoint.h's execution model runs them) that
 *    must agree with hfl_ckpt_evaluate on random chains and random sets.
 * 2. The schedules against brute force over all 2^(n-1) checkpoint sets on
 *    2000 random chains of 1..10 layers (and 12 of 16..18) with random budgets: `optimal` has
 *    the brute-force least recompute (bit-equal) and, among those, the least
 *    peak, within budget, and is infeasible exactly when brute force finds
 *    no set; `full` has the least peak and the least recompute among those;
 *    `none` recomputes nothing and peaks where storing everything does;
 *    every plan re-evaluates to its own figures.
 * 3. sqrt on 16 uniform layers: 4 segments of 4, peak far below none's.
 * 4. Parsing and the refusals. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model/checkpoint.h"
#include "util/util.h"

static int failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            failures++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static uint64_t rnd_below(uint64_t k) { return rnd() % k; }

static size_t m_of(const hfl_ckpt_chain *ch, int j) {
    return j == 0 ? ch->in_bytes : ch->layers[j - 1].out_bytes;
}

/* ---- the simulator: an independent statement of the execution model ---- */

typedef struct {
    size_t cur, peak;
} meter;

static void alloc_b(meter *mt, size_t b) {
    mt->cur += b;
    if (mt->cur > mt->peak) mt->peak = mt->cur;
}

/* Peak bytes of activations and gradients over forward and backward. */
static size_t simulate(const hfl_ckpt_chain *ch, const unsigned char *stored) {
    int n = ch->n;
    meter mt = {0, 0};
    alloc_b(&mt, m_of(ch, 0));
    for (int i = 1; i <= n; i++) { /* forward: an internal input dies once used */
        alloc_b(&mt, m_of(ch, i));
        if (!stored[i - 1]) mt.cur -= m_of(ch, i - 1);
    }
    alloc_b(&mt, m_of(ch, n)); /* the loss gradient g_n */
    int e = n;
    while (e > 0) {
        int s = e - 1;
        while (!stored[s]) s--;
        unsigned char live[HFL_CKPT_MAX_LAYERS + 1] = {0};
        for (int k = s + 1; k < e; k++) { /* recompute, keep everything */
            alloc_b(&mt, m_of(ch, k));
            live[k] = 1;
        }
        for (int i = e; i > s; i--) {
            if (i - 1 > 0) alloc_b(&mt, m_of(ch, i - 1)); /* g_{i-1}, while g_i lives */
            mt.cur -= m_of(ch, i);                         /* g_i */
            for (int k = s + 1; k < e; k++) {             /* free what step i read last */
                int last = ch->layers[k - 1].needs_output ? k : k + 1;
                if (live[k] && last == i) {
                    live[k] = 0;
                    mt.cur -= m_of(ch, k);
                }
            }
        }
        e = s;
    }
    return mt.peak;
}

/* ---- helpers ---- */

static hfl_ckpt_plan eval_ok(const hfl_ckpt_chain *ch, const unsigned char *stored) {
    hfl_ckpt_plan p;
    memset(&p, 0, sizeof p);
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_ckpt_evaluate(ch, stored, &p, err);
    CHECK(rc == 0, "evaluate: %s", err);
    return p;
}

static hfl_ckpt_plan sched_ok(const hfl_ckpt_chain *ch, hfl_ckpt_kind k, size_t budget) {
    hfl_ckpt_plan p;
    memset(&p, 0, sizeof p);
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_ckpt_schedule(ch, k, budget, &p, err);
    CHECK(rc == 0, "schedule %s: %s", hfl_ckpt_name(k), err);
    return p;
}

/* A plan is self-consistent: ends stored, segments match the set, and its
 * figures are what evaluate gives for its set. */
static void check_plan(const hfl_ckpt_chain *ch, const hfl_ckpt_plan *p) {
    int n = ch->n;
    CHECK(p->n == n && p->stored[0] && p->stored[n], "ends of the set");
    int segs = 0;
    for (int j = 1; j <= n; j++) segs += p->stored[j];
    CHECK(p->n_segments == segs && p->bound[0] == 0 && p->bound[segs] == n, "segments");
    for (int j = 0; j < p->n_segments; j++)
        CHECK(p->bound[j] < p->bound[j + 1] && p->stored[p->bound[j + 1]], "bound %d", j);
    hfl_ckpt_plan e = eval_ok(ch, p->stored);
    CHECK(e.peak == p->peak && e.recompute == p->recompute && e.stored_bytes == p->stored_bytes &&
              e.segment_bytes == p->segment_bytes,
          "plan figures %zu/%g vs evaluated %zu/%g", p->peak, p->recompute, e.peak, e.recompute);
    CHECK(p->peak == p->stored_bytes + p->segment_bytes, "peak is stored + segment");
    CHECK(p->feasible == (p->peak <= p->budget), "feasible flag");
}

/* ---- 1. hand-computed accounting ---- */

static void test_hand(void) {
    /* m_0..m_3 = 10, 20, 30, 40; c = 1, 2, 4; layer 2 needs its output.
     * W_i = R(s,i) + [i<e && no_i] m_i + m_i + g(i-1), g(0) = 0. */
    hfl_ckpt_layer L[3] = {{1.0, 20, 0}, {2.0, 30, 1}, {4.0, 40, 0}};
    hfl_ckpt_chain ch = {3, 10, L};
    struct {
        unsigned char st[4];
        size_t stored, seg, peak;
        double cost;
    } cases[] = {
        /* all stored: segments (0,1] W=20+0, (1,2] W=30+20, (2,3] W=40+30 -> 70;
         * stored 100; peak 170. */
        {{1, 1, 1, 1}, 100, 70, 170, 0.0},
        /* {0,3}: W_3 = R 50 + 40 + 30 = 120; W_2 = R 20 + 30 (needs output) + 30
         * + 20 = 100; W_1 = 20. stored 50; peak 170; recompute 1+2. */
        {{1, 0, 0, 1}, 50, 120, 170, 3.0},
        /* {0,1,3}: (0,1] 20; (1,3]: W_3 = 30 + 40 + 30 = 100, W_2 = 0 + 30 + 30
         * + 20 = 80. stored 70; peak 170; recompute 2. */
        {{1, 1, 0, 1}, 70, 100, 170, 2.0},
        /* {0,2,3}: (0,2]: W_2 = 20 + 30 + 20 = 70, W_1 = 20; (2,3] 70. stored
         * 80; peak 150; recompute 1. */
        {{1, 0, 1, 1}, 80, 70, 150, 1.0},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        hfl_ckpt_plan p = eval_ok(&ch, cases[t].st);
        CHECK(p.stored_bytes == cases[t].stored && p.segment_bytes == cases[t].seg &&
                  p.peak == cases[t].peak && p.recompute == cases[t].cost,
              "case %zu: stored %zu seg %zu peak %zu cost %g", t, p.stored_bytes,
              p.segment_bytes, p.peak, p.recompute);
        CHECK(simulate(&ch, cases[t].st) == cases[t].peak, "case %zu: simulator", t);
        CHECK(p.forward == 7.0, "forward cost");
    }
    /* full: least peak 150 ({0,2,3}); optimal by budget. */
    hfl_ckpt_plan f = sched_ok(&ch, HFL_CKPT_FULL, SIZE_MAX);
    CHECK(f.peak == 150 && f.recompute == 1.0 && f.stored[2] && !f.stored[1], "full");
    hfl_ckpt_plan o = sched_ok(&ch, HFL_CKPT_OPTIMAL, 170);
    CHECK(o.peak == 170 && o.recompute == 0.0 && o.feasible, "optimal at 170: store all");
    o = sched_ok(&ch, HFL_CKPT_OPTIMAL, 169);
    CHECK(o.peak == 150 && o.recompute == 1.0 && o.feasible, "optimal at 169");
    o = sched_ok(&ch, HFL_CKPT_OPTIMAL, 149);
    CHECK(!o.feasible && o.min_peak == 150 && o.peak == 150, "optimal at 149: infeasible");

    /* needs_output decides the peak: m = 10, 50, 10, 5, only a_0, a_3 stored.
     * W_3 = R 60 + 5 + 10 = 75; W_2 = R 50 + [no_2] 10 + 10 + 50; W_1 = 50.
     * With no_2: W = 120, peak 15 + 120 = 135; without: 110, peak 125. */
    hfl_ckpt_layer M[3] = {{1.0, 50, 0}, {1.0, 10, 1}, {1.0, 5, 0}};
    hfl_ckpt_chain ch2 = {3, 10, M};
    unsigned char ends[4] = {1, 0, 0, 1};
    CHECK(eval_ok(&ch2, ends).peak == 135 && simulate(&ch2, ends) == 135, "needs_output on");
    M[1].needs_output = 0;
    CHECK(eval_ok(&ch2, ends).peak == 125 && simulate(&ch2, ends) == 125, "needs_output off");
    M[2].needs_output = 1; /* a segment's last layer: its output is stored anyway */
    CHECK(eval_ok(&ch2, ends).peak == 125, "needs_output of the last layer");

    /* One layer: a_0 and a_1 stored, W_1 = m_1 (no input gradient). */
    hfl_ckpt_layer one[1] = {{3.0, 7, 1}};
    hfl_ckpt_chain ch1 = {1, 5, one};
    for (int k = HFL_CKPT_NONE; k <= HFL_CKPT_FULL; k++) {
        hfl_ckpt_plan p = sched_ok(&ch1, (hfl_ckpt_kind)k, SIZE_MAX);
        CHECK(p.peak == 19 && p.recompute == 0.0 && p.n_segments == 1, "n=1 %d", k);
    }
}

/* ---- 2. brute force ---- */

static void random_chain(hfl_ckpt_chain *ch, hfl_ckpt_layer *L, int n) {
    static const uint64_t ranges[] = {3, 100, 1000000};
    uint64_t r = ranges[rnd_below(3)];
    int int_costs = (int)rnd_below(2);
    ch->n = n;
    ch->in_bytes = (size_t)rnd_below(r + 1);
    ch->layers = L;
    for (int i = 0; i < n; i++) {
        L[i].out_bytes = (size_t)rnd_below(r + 1);
        L[i].cost = int_costs ? (double)(1 + rnd_below(3)) : 0.1 + 10.0 * (double)rnd_below(1000) / 997.0;
        L[i].needs_output = (int)rnd_below(2);
    }
}

/* `chains` random chains of nmin..nmax layers; returns how many had no
 * feasible set for their budget. */
static int test_brute(int chains, int nmin, int nmax) {
    enum { MAXN = 18 };
    hfl_ckpt_layer L[MAXN];
    hfl_ckpt_chain ch;
    static size_t peaks[1 << (MAXN - 1)];
    static double costs[1 << (MAXN - 1)];
    int infeasible = 0, sim_checked = 0;
    for (int t = 0; t < chains; t++) {
        int n = nmin + (int)rnd_below((uint64_t)(nmax - nmin + 1));
        random_chain(&ch, L, n);
        unsigned sets = 1u << (n - 1);
        size_t min_peak = SIZE_MAX, all_peak = 0;
        double full_cost = 0.0;
        for (unsigned mask = 0; mask < sets; mask++) {
            unsigned char st[HFL_CKPT_MAX_LAYERS + 1] = {0};
            st[0] = st[n] = 1;
            for (int i = 1; i < n; i++) st[i] = (mask >> (i - 1)) & 1u;
            hfl_ckpt_plan p = eval_ok(&ch, st);
            peaks[mask] = p.peak;
            costs[mask] = p.recompute;
            if (mask == sets - 1) all_peak = p.peak;
            if (p.peak < min_peak || (p.peak == min_peak && p.recompute < full_cost)) {
                min_peak = p.peak;
                full_cost = p.recompute;
            }
            if (rnd_below(4) == 0) { /* the simulator on a sample of sets */
                size_t sp = simulate(&ch, st);
                CHECK(sp == p.peak, "simulator %zu vs evaluate %zu (n=%d mask %u)", sp, p.peak, n,
                      mask);
                sim_checked++;
            }
        }
        size_t budget;
        switch (rnd_below(5)) {
        case 0: budget = peaks[rnd_below(sets)]; break;
        case 1: budget = peaks[rnd_below(sets)] - 1; break; /* peaks >= 0: SIZE_MAX at worst */
        case 2: budget = (size_t)rnd_below(all_peak + all_peak / 5 + 2); break;
        case 3: budget = min_peak - (min_peak > 0); break;
        default: budget = SIZE_MAX; break;
        }
        int found = 0;
        double best_cost = 0.0;
        size_t best_peak = 0;
        for (unsigned mask = 0; mask < sets; mask++) {
            if (peaks[mask] > budget) continue;
            if (!found || costs[mask] < best_cost ||
                (costs[mask] == best_cost && peaks[mask] < best_peak)) {
                best_cost = costs[mask];
                best_peak = peaks[mask];
            }
            found = 1;
        }
        hfl_ckpt_plan o = sched_ok(&ch, HFL_CKPT_OPTIMAL, budget);
        check_plan(&ch, &o);
        CHECK(o.min_peak == min_peak, "min_peak %zu vs %zu", o.min_peak, min_peak);
        CHECK(o.feasible == found, "chain %d: feasible %d vs brute %d", t, o.feasible, found);
        if (found) {
            CHECK(o.recompute == best_cost && o.peak == best_peak && o.peak <= budget,
                  "chain %d (n=%d, budget %zu): optimal %g/%zu vs brute %g/%zu", t, n, budget,
                  o.recompute, o.peak, best_cost, best_peak);
        } else {
            infeasible++;
            CHECK(o.peak == min_peak && o.recompute == full_cost, "infeasible plan is full's");
        }
        hfl_ckpt_plan f = sched_ok(&ch, HFL_CKPT_FULL, budget);
        check_plan(&ch, &f);
        CHECK(f.peak == min_peak && f.recompute == full_cost, "chain %d: full %zu/%g vs %zu/%g", t,
              f.peak, f.recompute, min_peak, full_cost);
        hfl_ckpt_plan z = sched_ok(&ch, HFL_CKPT_NONE, budget);
        check_plan(&ch, &z);
        CHECK(z.recompute == 0.0 && z.peak == all_peak && z.n_segments == n, "none");
        hfl_ckpt_plan q = sched_ok(&ch, HFL_CKPT_SQRT, budget);
        check_plan(&ch, &q);
        CHECK(q.peak >= min_peak && q.min_peak == min_peak, "sqrt");
    }
    printf("brute force, %d chains of %d..%d layers: %d with no feasible set, %d sets simulated\n",
           chains, nmin, nmax, infeasible, sim_checked);
    return infeasible;
}

/* ---- 3. sqrt and larger chains ---- */

static void test_sqrt_and_large(void) {
    hfl_ckpt_layer L[HFL_CKPT_MAX_LAYERS];
    for (int i = 0; i < 16; i++) L[i] = (hfl_ckpt_layer){1.0, 1000, i % 2};
    hfl_ckpt_chain ch = {16, 1000, L};
    hfl_ckpt_plan q = sched_ok(&ch, HFL_CKPT_SQRT, SIZE_MAX);
    hfl_ckpt_plan z = sched_ok(&ch, HFL_CKPT_NONE, SIZE_MAX);
    CHECK(q.n_segments == 4, "sqrt segments %d", q.n_segments);
    for (int j = 0; j <= 4; j++) CHECK(q.bound[j] == 4 * j, "sqrt bound %d = %d", j, q.bound[j]);
    /* none: 17 stored + 2 gradients = 19000. sqrt: 5 stored + segment (3 inner
     * + 2 gradients, or 2 inner + a needed output + 2 gradients) = 10000. */
    CHECK(z.peak == 19000 && q.peak == 10000, "peaks none %zu sqrt %zu", z.peak, q.peak);
    CHECK(q.recompute == 12.0, "sqrt recompute %g", q.recompute);
    for (int n = 1; n <= HFL_CKPT_MAX_LAYERS; n++) { /* segment counts near sqrt(n) */
        ch.n = n;
        for (int i = 0; i < n; i++) L[i] = (hfl_ckpt_layer){1.0, 1000, 0};
        q = sched_ok(&ch, HFL_CKPT_SQRT, SIZE_MAX);
        CHECK(q.n_segments == (int)lround(sqrt((double)n)), "n=%d: %d segments", n, q.n_segments);
        check_plan(&ch, &q);
    }

    /* n = 40, random: every kind within its promises, optimal monotone in budget. */
    for (int t = 0; t < 20; t++) {
        random_chain(&ch, L, 40);
        hfl_ckpt_plan all = sched_ok(&ch, HFL_CKPT_NONE, SIZE_MAX);
        hfl_ckpt_plan f = sched_ok(&ch, HFL_CKPT_FULL, SIZE_MAX);
        hfl_ckpt_plan s = sched_ok(&ch, HFL_CKPT_SQRT, SIZE_MAX);
        CHECK(f.peak <= s.peak && f.peak <= all.peak && f.peak == all.min_peak, "full is least");
        hfl_ckpt_plan o = sched_ok(&ch, HFL_CKPT_OPTIMAL, all.peak);
        CHECK(o.recompute == 0.0 && o.peak == all.peak, "budget = none's peak: no recompute");
        double prev = -1.0;
        for (int k = 0; k <= 8; k++) {
            size_t b = f.peak + (all.peak - f.peak) / 8 * (size_t)(8 - k);
            o = sched_ok(&ch, HFL_CKPT_OPTIMAL, b);
            check_plan(&ch, &o);
            CHECK(o.feasible && o.peak <= b, "n=40 budget %zu", b);
            CHECK(o.recompute >= prev, "tighter budget, no less recompute");
            if (s.peak <= b) CHECK(o.recompute <= s.recompute, "optimal beats sqrt when sqrt fits");
            prev = o.recompute;
        }
    }
}

/* ---- 4. parsing and refusals ---- */

static void test_refusals(void) {
    char err[HFL_ERR_LEN];
    hfl_ckpt_kind k;
    const char *names[] = {"none", "sqrt", "optimal", "full"};
    for (int i = 0; i < 4; i++) {
        CHECK(hfl_ckpt_parse(names[i], &k, err) == 0 && (int)k == i, "parse %s", names[i]);
        CHECK(strcmp(hfl_ckpt_name(k), names[i]) == 0, "name %s", names[i]);
    }
    err[0] = 0;
    CHECK(hfl_ckpt_parse("revolve", &k, err) == -1 && strstr(err, "revolve"), "bad name: %s", err);
    CHECK(hfl_ckpt_parse(NULL, &k, err) == -1, "NULL name");

    hfl_ckpt_layer L[HFL_CKPT_MAX_LAYERS + 1];
    for (int i = 0; i <= HFL_CKPT_MAX_LAYERS; i++) L[i] = (hfl_ckpt_layer){1.0, 8, 0};
    hfl_ckpt_chain ch = {0, 8, L};
    hfl_ckpt_plan p;
    unsigned char st[HFL_CKPT_MAX_LAYERS + 2];
    memset(st, 1, sizeof st);
    CHECK(hfl_ckpt_schedule(&ch, HFL_CKPT_FULL, SIZE_MAX, &p, err) == -1, "n = 0");
    ch.n = HFL_CKPT_MAX_LAYERS + 1;
    CHECK(hfl_ckpt_schedule(&ch, HFL_CKPT_FULL, SIZE_MAX, &p, err) == -1, "n too large");
    ch.n = 4;
    L[2].cost = 0.0;
    CHECK(hfl_ckpt_evaluate(&ch, st, &p, err) == -1 && strstr(err, "layer 3"), "cost 0: %s", err);
    L[2].cost = NAN;
    CHECK(hfl_ckpt_schedule(&ch, HFL_CKPT_NONE, SIZE_MAX, &p, err) == -1, "NaN cost");
    L[2].cost = 1.0;
    L[1].out_bytes = SIZE_MAX - 4;
    CHECK(hfl_ckpt_schedule(&ch, HFL_CKPT_NONE, SIZE_MAX, &p, err) == -1, "byte overflow: %s", err);
    L[1].out_bytes = SIZE_MAX / 3 + 1; /* sums fit, but not with two gradients on top */
    CHECK(hfl_ckpt_schedule(&ch, HFL_CKPT_NONE, SIZE_MAX, &p, err) == -1, "accounting overflow");
    L[1].out_bytes = 8;
    CHECK(hfl_ckpt_schedule(&ch, (hfl_ckpt_kind)7, SIZE_MAX, &p, err) == -1, "bad kind");
    st[0] = 0;
    CHECK(hfl_ckpt_evaluate(&ch, st, &p, err) == -1, "a_0 not stored");
    st[0] = 1;
    st[4] = 0;
    CHECK(hfl_ckpt_evaluate(&ch, st, &p, err) == -1, "a_n not stored");
    ch.layers = NULL;
    CHECK(hfl_ckpt_chain_check(&ch, err) == -1, "no layers");
}

int main(void) {
    test_hand();
    int infeasible = test_brute(2000, 1, 10);
    CHECK(infeasible > 50 && infeasible < 1000, "budgets exercise both outcomes: %d", infeasible);
    /* Longer chains, where the DP's frontiers outgrow its heuristic beam. */
    test_brute(40, 14, 18);
    test_sqrt_and_large();
    test_refusals();
    if (failures) {
        fprintf(stderr, "test_checkpoint: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_checkpoint: all checks passed\n");
    return 0;
}
