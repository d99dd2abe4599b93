/* test_checkpoint.c: gradient-checkpointing schedules (plan/checkpoint.h).
 *
 * 1. The accounting: hand-computed peaks and recomputes of small chains, and
 *    an event-by-event memory simulator (every activation, recomputed
 *    activation and gradient is a buffer living from the step that writes it
 *    to the last step that reads it, the steps in the order checkpoint.h's
 *    execution model runs them) that must agree with hfl_ckpt_evaluate on
 *    random chains (all flags, first_backward, saved bytes on a third of
 *    the layers) and random sets.
 * 2. The schedules against brute force over all 2^(n-1) checkpoint sets on
 *    2000 random chains of 1..10 layers (and 40 of 14..18) with random budgets: `optimal` has
 *    the brute-force least recompute (bit-equal) and, among those, the least
 *    peak, within budget, and is infeasible exactly when brute force finds
 *    no set; `full` has the least peak and the least recompute among those;
 *    `none` recomputes nothing and peaks where storing everything does;
 *    every plan re-evaluates to its own figures.
 * 3. Three chains (9 to 11 layers) on which the DP's beam pass alone (the
 *    16 cheapest labels per position, checkpoint.c) is not optimal: at
 *    every budget from a chain's least peak to its greatest, `optimal` has
 *    brute force's recompute and peak, so a DP that returned the beam's
 *    schedule fails here (section 2's random chains pass with it).
 * 4. sqrt on 16 uniform layers: 4 segments of 4, peak far below none's.
 * 5. Parsing and the refusals. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "plan/checkpoint.h"
#include "tests/check.h"
#include "util/util.h"

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
    size_t bytes;
    int written, last; /* step indices; last = the last step touching it */
} sim_buf;

typedef struct {
    sim_buf b[5 * (HFL_CKPT_MAX_LAYERS + 1)];
    int nb, t;
} sim;

static int sim_new(sim *s, size_t bytes) {
    s->b[s->nb] = (sim_buf){bytes, s->t, s->t};
    return s->nb++;
}
static void sim_read(sim *s, int id) { s->b[id].last = s->t; }

/* Peak bytes of activations and gradients over forward and backward. */
static size_t simulate(const hfl_ckpt_chain *ch, const unsigned char *stored) {
    int n = ch->n, f = ch->first_backward < 1 ? 1 : ch->first_backward;
    sim s;
    memset(&s, 0, sizeof s);
    int A[HFL_CKPT_MAX_LAYERS + 1], R[HFL_CKPT_MAX_LAYERS + 1], G[HFL_CKPT_MAX_LAYERS + 1];
    int S[HFL_CKPT_MAX_LAYERS + 1]; /* the latest copy of s_i, read only by backward step i */
    A[0] = sim_new(&s, m_of(ch, 0)); /* load */
    for (int i = 1; i <= n; i++) {   /* forward */
        s.t++;
        sim_read(&s, A[i - 1]);
        A[i] = sim_new(&s, m_of(ch, i));
        S[i] = sim_new(&s, ch->layers[i - 1].saved_bytes);
    }
    s.t++; /* loss */
    sim_read(&s, A[n]);
    G[n] = sim_new(&s, m_of(ch, n));
    int e = n;
    while (e > 0) {
        int q = e - 1;
        while (!stored[q]) q--;
        if (e >= f) {
            for (int i = q + 1; i < e; i++) { /* recompute */
                s.t++;
                sim_read(&s, i - 1 == q ? A[q] : R[i - 1]);
                R[i] = sim_new(&s, m_of(ch, i));
                S[i] = sim_new(&s, ch->layers[i - 1].saved_bytes);
            }
            for (int i = e; i >= q + 1 && i >= f; i--) {
                const hfl_ckpt_layer *l = &ch->layers[i - 1];
                int out = i == e ? A[e] : R[i], in = i - 1 == q ? A[q] : R[i - 1];
                s.t++;
                sim_read(&s, G[i]);
                if (l->needs_output) {
                    sim_read(&s, out);
                    if (l->output_first) { /* the second sub-step */
                        s.t++;
                        sim_read(&s, G[i]);
                    }
                }
                if (l->needs_input) sim_read(&s, in);
                sim_read(&s, S[i]); /* by the sub-step that writes g_{i-1} */
                if (i > f) G[i - 1] = l->grad_in_place ? G[i] : sim_new(&s, m_of(ch, i - 1));
            }
        }
        e = q;
    }
    size_t peak = 0;
    for (int t = 0; t <= s.t; t++) {
        size_t live = 0;
        for (int k = 0; k < s.nb; k++)
            if (s.b[k].written <= t && t <= s.b[k].last) live += s.b[k].bytes;
        if (live > peak) peak = live;
    }
    return peak;
}

/* ---- helpers ---- */

static hfl_ckpt_plan eval_ok(const hfl_ckpt_chain *ch, const unsigned char *stored) {
    hfl_ckpt_plan p;
    memset(&p, 0, sizeof p);
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_ckpt_evaluate(ch, stored, &p, err);
    CHECK_MSG(rc == 0, "evaluate: %s", err);
    return p;
}

static hfl_ckpt_plan sched_ok(const hfl_ckpt_chain *ch, hfl_ckpt_kind k, size_t budget) {
    hfl_ckpt_plan p;
    memset(&p, 0, sizeof p);
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_ckpt_schedule(ch, k, budget, &p, err);
    CHECK_MSG(rc == 0, "schedule %s: %s", hfl_ckpt_name(k), err);
    return p;
}

/* A plan is self-consistent: ends stored, segments match the set, and its
 * figures are what evaluate gives for its set. */
static void check_plan(const hfl_ckpt_chain *ch, const hfl_ckpt_plan *p) {
    int n = ch->n;
    CHECK_MSG(p->n == n && p->stored[0] && p->stored[n], "ends of the set");
    int segs = 0;
    for (int j = 1; j <= n; j++) segs += p->stored[j];
    CHECK_MSG(p->n_segments == segs && p->bound[0] == 0 && p->bound[segs] == n, "segments");
    for (int j = 0; j < p->n_segments; j++)
        CHECK_MSG(p->bound[j] < p->bound[j + 1] && p->stored[p->bound[j + 1]], "bound %d", j);
    hfl_ckpt_plan e = eval_ok(ch, p->stored);
    CHECK_MSG(e.peak == p->peak && e.recompute == p->recompute && e.stored_bytes == p->stored_bytes &&
                  e.segment_bytes == p->segment_bytes && e.held_bytes == p->held_bytes,
              "plan figures %zu/%g vs evaluated %zu/%g", p->peak, p->recompute, e.peak, e.recompute);
    CHECK_MSG(p->peak == p->held_bytes + p->segment_bytes, "peak is held + segment");
    CHECK_MSG(p->feasible == (p->peak <= p->budget), "feasible flag");
}

/* ---- 1. hand-computed accounting ---- */

static hfl_ckpt_layer lay(double c, size_t m, int no, int ni, int of, int gip) {
    return (hfl_ckpt_layer){.cost = c, .out_bytes = m, .needs_output = no, .needs_input = ni,
                            .output_first = of, .grad_in_place = gip};
}

static void test_hand(void) {
    /* m_0..m_3 = 10, 20, 30, 40; c = 1, 2, 4; every layer reads its input,
     * layer 2 also its output; f = 1. Figures are P(q) + X(q,e). */
    hfl_ckpt_layer L[3] = {lay(1.0, 20, 0, 1, 0, 0), lay(2.0, 30, 1, 1, 0, 0),
                           lay(4.0, 40, 0, 1, 0, 0)};
    hfl_ckpt_chain ch = {.n = 3, .in_bytes = 10, .layers = L};
    struct {
        unsigned char st[4];
        size_t held, seg, peak;
        double cost;
    } cases[] = {
        /* all stored: (0,1] X 30; (1,2] backward 2: a1 a2 g2 g1 = 100, P 10;
         * (2,3] loss: a2 + a3 + g3 = 110, P 10 + 20 = 30 -> 140. */
        {{1, 1, 1, 1}, 30, 110, 140, 0.0},
        /* {0,3}: backward step 3: a0, recomputed a1 a2 (held), g3, g2 = 130. */
        {{1, 0, 0, 1}, 0, 130, 130, 3.0},
        /* {0,1,3}: (1,3] backward 3: a1, a2, g3, g2 = 120, P 10 -> 130. */
        {{1, 1, 0, 1}, 10, 120, 130, 2.0},
        /* {0,2,3}: (0,2] backward 2: a0, a1, a2, g2, g1 = 110; (2,3] loss:
         * a2 + a3 + g3 = 110, P 10 -> 120. */
        {{1, 0, 1, 1}, 10, 110, 120, 1.0},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        hfl_ckpt_plan p = eval_ok(&ch, cases[t].st);
        CHECK_MSG(p.held_bytes == cases[t].held && p.segment_bytes == cases[t].seg &&
                      p.peak == cases[t].peak && p.recompute == cases[t].cost,
                  "case %zu: held %zu seg %zu peak %zu cost %g", t, p.held_bytes, p.segment_bytes,
                  p.peak, p.recompute);
        CHECK_MSG(simulate(&ch, cases[t].st) == cases[t].peak, "case %zu: simulator %zu", t,
                  simulate(&ch, cases[t].st));
        CHECK_MSG(p.forward == 7.0, "forward cost");
    }
    /* full: least peak 120 ({0,2,3}); optimal by budget. */
    hfl_ckpt_plan f = sched_ok(&ch, HFL_CKPT_FULL, SIZE_MAX);
    CHECK_MSG(f.peak == 120 && f.recompute == 1.0 && f.stored[2] && !f.stored[1], "full");
    hfl_ckpt_plan o = sched_ok(&ch, HFL_CKPT_OPTIMAL, 140);
    CHECK_MSG(o.peak == 140 && o.recompute == 0.0 && o.feasible, "optimal at 140: store all");
    o = sched_ok(&ch, HFL_CKPT_OPTIMAL, 139);
    CHECK_MSG(o.peak == 120 && o.recompute == 1.0 && o.feasible, "optimal at 139");
    o = sched_ok(&ch, HFL_CKPT_OPTIMAL, 119);
    CHECK_MSG(!o.feasible && o.min_peak == 120 && o.peak == 120, "optimal at 119: infeasible");

    /* A planner-like chain: m_0 = 8; a pool below the first parametric layer
     * (4), conv + in-place ReLU (6: reads its input, and its output first),
     * dense (2); f = 2.
     * All stored: a_0 dies after forward 1 (nothing in backward reads it);
     * (2,3] backward 3: P(2) = a1, then a2, g3, g2: 4 + 6 + 2 + 6 = 18.
     * {0,3}: forward 2 holds a0 for the recomputation: 8 + 4 + 6 = 18;
     * backward 3: recomputed a1 a2, g3, g2 = 18 (a0 died at recompute 1);
     * recompute c1 + c2 = 6. */
    hfl_ckpt_layer M[3] = {lay(1.0, 4, 0, 1, 0, 0), lay(5.0, 6, 1, 1, 1, 0),
                           lay(2.0, 2, 0, 1, 0, 0)};
    hfl_ckpt_chain pc = {.n = 3, .in_bytes = 8, .layers = M, .first_backward = 2};
    unsigned char all[4] = {1, 1, 1, 1}, ends[4] = {1, 0, 0, 1}, mid[4] = {1, 0, 1, 1};
    hfl_ckpt_plan p = eval_ok(&pc, all);
    CHECK_MSG(p.peak == 18 && p.held_bytes == 4 && p.recompute == 0.0, "f=2 all: %zu", p.peak);
    p = eval_ok(&pc, ends);
    CHECK_MSG(p.peak == 18 && p.recompute == 6.0, "f=2 ends: %zu %g", p.peak, p.recompute);
    CHECK_MSG(simulate(&pc, all) == 18 && simulate(&pc, ends) == 18, "f=2 simulator");
    /* m_3 = 20, {0,2,3}: (0,2] is processed (e = 2 >= f), so a0 is needed
     * (P(2) = 8) and recompute step 1 holds a0, a2 (for step 2), g2, a1 =
     * 24; (2,3]'s loss: 8 + a2 + a3 + g3 = 8 + 6 + 40 = 54. */
    M[2].out_bytes = 20;
    p = eval_ok(&pc, mid);
    CHECK_MSG(p.peak == 54 && simulate(&pc, mid) == 54, "f=2 mid: %zu", p.peak);
    M[2].out_bytes = 2;
    /* f = 1: a0 is read by backward 1 (P = 8 above it) and layer 2 writes
     * g1 (4). Without output_first, backward 2 holds a1 a2 g2 g1: 8 + 20 =
     * 28; with it, max(a1 a2 g2, a1 g2 g1) = 16, and (2,3] gives P(2) 12 +
     * a2 g3 g2 14 = 26. */
    pc.first_backward = 1;
    M[1].output_first = 0;
    CHECK_MSG(eval_ok(&pc, all).peak == 28 && simulate(&pc, all) == 28, "f=1: %zu",
              eval_ok(&pc, all).peak);
    M[1].output_first = 1;
    CHECK_MSG(eval_ok(&pc, all).peak == 26 && simulate(&pc, all) == 26, "f=1 output_first: %zu",
              eval_ok(&pc, all).peak);

    /* grad_in_place: a ReLU on its own (reads only its output) over an
     * equal-sized input; m = 10, 10, 10. All stored: a1 dies after forward 2
     * (layer 2 keeps no input, layer 1 no output); a0 is held for backward 1
     * (P = 10); backward 2: a2 + g2, g1 written over g2: 10 + 20 = 30, as
     * the loss (10 + a2 + g2). Without it, g1 is a buffer of its own: 40. */
    hfl_ckpt_layer Q[2] = {lay(1.0, 10, 0, 1, 0, 0), lay(1.0, 10, 1, 0, 0, 1)};
    hfl_ckpt_chain qc = {.n = 2, .in_bytes = 10, .layers = Q};
    unsigned char two[3] = {1, 1, 1};
    CHECK_MSG(eval_ok(&qc, two).peak == 30 && simulate(&qc, two) == 30, "gip: %zu",
              eval_ok(&qc, two).peak);
    Q[1].grad_in_place = 0;
    CHECK_MSG(eval_ok(&qc, two).peak == 40 && simulate(&qc, two) == 40, "no gip");

    /* One layer: a_0 and a_1 stored; backward 1 holds a_0 (read) + g_1. */
    hfl_ckpt_layer one[1] = {lay(3.0, 7, 1, 1, 0, 0)};
    hfl_ckpt_chain ch1 = {.n = 1, .in_bytes = 5, .layers = one};
    for (int k = HFL_CKPT_NONE; k <= HFL_CKPT_FULL; k++) {
        hfl_ckpt_plan q = sched_ok(&ch1, (hfl_ckpt_kind)k, SIZE_MAX);
        CHECK_MSG(q.peak == 19 && q.recompute == 0.0 && q.n_segments == 1, "n=1 %d: %zu", k, q.peak);
    }
}

/* ---- 2. brute force ---- */

enum { BRUTE_MAXN = 18 };
static size_t bf_peaks[1 << (BRUTE_MAXN - 1)]; /* [mask]: bit i-1 set = a_i stored */
static double bf_costs[1 << (BRUTE_MAXN - 1)];

/* Evaluates all 2^(n-1) sets of ch (n <= BRUTE_MAXN) into bf_peaks and
 * bf_costs; with sim, the simulator checks a random quarter of them, counted
 * there. Returns the number of sets. */
static unsigned brute_all(const hfl_ckpt_chain *ch, int *sim) {
    int n = ch->n;
    unsigned sets = 1u << (n - 1);
    for (unsigned mask = 0; mask < sets; mask++) {
        unsigned char st[HFL_CKPT_MAX_LAYERS + 1] = {0};
        st[0] = st[n] = 1;
        for (int i = 1; i < n; i++) st[i] = (mask >> (i - 1)) & 1u;
        hfl_ckpt_plan p = eval_ok(ch, st);
        bf_peaks[mask] = p.peak;
        bf_costs[mask] = p.recompute;
        if (sim && rnd_below(4) == 0) { /* the simulator on a sample of sets */
            size_t sp = simulate(ch, st);
            CHECK_MSG(sp == p.peak, "simulator %zu vs evaluate %zu (n=%d mask %u)", sp, p.peak, n,
                      mask);
            (*sim)++;
        }
    }
    return sets;
}

/* Brute force's `optimal` within budget: the least recompute, then the least
 * peak, of the sets brute_all evaluated. 0 when none fits. */
static int brute_best(unsigned sets, size_t budget, double *cost, size_t *peak) {
    int found = 0;
    for (unsigned mask = 0; mask < sets; mask++) {
        if (bf_peaks[mask] > budget) continue;
        if (!found || bf_costs[mask] < *cost ||
            (bf_costs[mask] == *cost && bf_peaks[mask] < *peak)) {
            *cost = bf_costs[mask];
            *peak = bf_peaks[mask];
        }
        found = 1;
    }
    return found;
}

static void random_chain(hfl_ckpt_chain *ch, hfl_ckpt_layer *L, int n) {
    static const uint64_t ranges[] = {3, 100, 1000000};
    uint64_t r = ranges[rnd_below(3)];
    int int_costs = (int)rnd_below(2);
    ch->n = n;
    ch->in_bytes = (size_t)rnd_below(r + 1);
    ch->layers = L;
    ch->first_backward = rnd_below(2) ? 0 : 1 + (int)rnd_below((uint64_t)n);
    for (int i = 0; i < n; i++) {
        L[i].out_bytes = (size_t)rnd_below(r + 1);
        L[i].cost = int_costs ? (double)(1 + rnd_below(3)) : 0.1 + 10.0 * (double)rnd_below(1000) / 997.0;
        L[i].needs_output = (int)rnd_below(2);
        L[i].needs_input = rnd_below(4) != 0;
        L[i].output_first = (int)rnd_below(2);
        L[i].grad_in_place = rnd_below(4) == 0;
        L[i].saved_bytes = rnd_below(3) == 0 ? (size_t)rnd_below(2 * r + 1) : 0;
        if (L[i].grad_in_place) L[i].out_bytes = i == 0 ? ch->in_bytes : L[i - 1].out_bytes;
    }
}

/* `chains` random chains of nmin..nmax layers; returns how many had no
 * feasible set for their budget. */
static int test_brute(int chains, int nmin, int nmax) {
    hfl_ckpt_layer L[BRUTE_MAXN];
    hfl_ckpt_chain ch;
    int infeasible = 0, sim_checked = 0;
    for (int t = 0; t < chains; t++) {
        int n = nmin + (int)rnd_below((uint64_t)(nmax - nmin + 1));
        random_chain(&ch, L, n);
        unsigned sets = brute_all(&ch, &sim_checked);
        size_t min_peak = SIZE_MAX, all_peak = bf_peaks[sets - 1];
        double full_cost = 0.0;
        for (unsigned mask = 0; mask < sets; mask++)
            if (bf_peaks[mask] < min_peak ||
                (bf_peaks[mask] == min_peak && bf_costs[mask] < full_cost)) {
                min_peak = bf_peaks[mask];
                full_cost = bf_costs[mask];
            }
        size_t budget;
        switch (rnd_below(5)) {
        case 0: budget = bf_peaks[rnd_below(sets)]; break;
        case 1: budget = bf_peaks[rnd_below(sets)] - 1; break; /* peaks >= 0: SIZE_MAX at worst */
        case 2: budget = (size_t)rnd_below(all_peak + all_peak / 5 + 2); break;
        case 3: budget = min_peak - (min_peak > 0); break;
        default: budget = SIZE_MAX; break;
        }
        double best_cost = 0.0;
        size_t best_peak = 0;
        int found = brute_best(sets, budget, &best_cost, &best_peak);
        hfl_ckpt_plan o = sched_ok(&ch, HFL_CKPT_OPTIMAL, budget);
        check_plan(&ch, &o);
        CHECK_MSG(o.min_peak == min_peak, "min_peak %zu vs %zu", o.min_peak, min_peak);
        CHECK_MSG(o.feasible == found, "chain %d: feasible %d vs brute %d", t, o.feasible, found);
        if (found) {
            CHECK_MSG(o.recompute == best_cost && o.peak == best_peak && o.peak <= budget,
                      "chain %d (n=%d, budget %zu): optimal %g/%zu vs brute %g/%zu", t, n, budget,
                      o.recompute, o.peak, best_cost, best_peak);
        } else {
            infeasible++;
            CHECK_MSG(o.peak == min_peak && o.recompute == full_cost, "infeasible plan is full's");
        }
        hfl_ckpt_plan f = sched_ok(&ch, HFL_CKPT_FULL, budget);
        check_plan(&ch, &f);
        CHECK_MSG(f.peak == min_peak && f.recompute == full_cost, "chain %d: full %zu/%g vs %zu/%g", t,
                  f.peak, f.recompute, min_peak, full_cost);
        hfl_ckpt_plan z = sched_ok(&ch, HFL_CKPT_NONE, budget);
        check_plan(&ch, &z);
        CHECK_MSG(z.recompute == 0.0 && z.peak == all_peak && z.n_segments == n, "none");
        hfl_ckpt_plan q = sched_ok(&ch, HFL_CKPT_SQRT, budget);
        check_plan(&ch, &q);
        CHECK_MSG(q.peak >= min_peak && q.min_peak == min_peak, "sqrt");
    }
    printf("brute force, %d chains of %d..%d layers: %d with no feasible set, %d sets simulated\n",
           chains, nmin, nmax, infeasible, sim_checked);
    return infeasible;
}

/* ---- 3. chains the beam pass alone gets wrong ---- */

/* The DP's first pass keeps only the 16 cheapest labels per position and
 * serves only as a bound; on these chains its own schedule is worse, at
 * `budget` (random finds, A and B then shrunk; f = 0 unless given):
 *   A, n = 9:  optimum recompute 7 at peak 27, the beam's 8 at 27;
 *   B, n = 10: optimum 97 at peak 75, the beam's 97 at 76 (the same
 *              recompute: the tie-break to the lower peak is lost);
 *   C, n = 11, f = 2, mixed flags: optimum 158 at 433, the beam's 174 at 433.
 * In A and B, cheap layers of small, unequal sizes give more than 16
 * labels per position at nearly equal cost; the cut keeps the wrong ones
 * for the costly, large layers at the end. */
static void test_beam_traps(void) {
    hfl_ckpt_layer A[] = {lay(2, 1, 0, 1, 0, 0), lay(1, 1, 0, 1, 0, 0), lay(1, 1, 0, 1, 0, 0),
                          lay(1, 1, 0, 1, 0, 0), lay(1, 3, 0, 1, 0, 0), lay(1, 2, 0, 1, 0, 0),
                          lay(1, 0, 0, 1, 0, 0), lay(8, 9, 0, 1, 0, 0), lay(1, 9, 0, 1, 0, 1)};
    hfl_ckpt_layer B[] = {lay(1, 1, 0, 1, 0, 0),  lay(1, 1, 0, 1, 0, 0),  lay(1, 1, 0, 1, 0, 0),
                          lay(46, 18, 0, 1, 0, 0), lay(1, 2, 0, 1, 0, 0),  lay(50, 7, 0, 1, 0, 0),
                          lay(1, 0, 0, 1, 0, 0),  lay(96, 24, 0, 1, 0, 0), lay(1, 0, 0, 1, 0, 0),
                          lay(1, 24, 0, 1, 0, 0)};
    hfl_ckpt_layer C[] = {lay(98, 39, 1, 1, 1, 0), lay(53, 39, 1, 1, 1, 1), lay(63, 54, 0, 0, 1, 0),
                          lay(5, 46, 1, 1, 0, 0),  lay(21, 83, 1, 1, 1, 0), lay(51, 70, 0, 1, 1, 0),
                          lay(64, 70, 1, 1, 1, 1), lay(5, 9, 1, 1, 0, 0),   lay(21, 9, 0, 1, 1, 1),
                          lay(93, 92, 1, 1, 1, 0), lay(84, 92, 0, 0, 1, 1)};
    struct {
        hfl_ckpt_chain ch;
        size_t budget, peak;
        double recompute;
    } traps[] = {
        {{.n = 9, .in_bytes = 0, .layers = A}, 27, 27, 7.0},
        {{.n = 10, .in_bytes = 0, .layers = B}, 76, 75, 97.0},
        {{.n = 11, .in_bytes = 40, .layers = C, .first_backward = 2}, 433, 433, 158.0},
    };
    for (size_t t = 0; t < sizeof traps / sizeof traps[0]; t++) {
        const hfl_ckpt_chain *ch = &traps[t].ch;
        unsigned sets = brute_all(ch, NULL);
        double cost = 0.0;
        size_t peak = 0;
        CHECK_MSG(brute_best(sets, traps[t].budget, &cost, &peak) && cost == traps[t].recompute &&
                      peak == traps[t].peak, "trap %zu: brute force %g/%zu", t, cost, peak);
        /* Every budget from the least peak of a set to the greatest. */
        size_t lo = SIZE_MAX, hi = 0;
        for (unsigned mask = 0; mask < sets; mask++) {
            if (bf_peaks[mask] < lo) lo = bf_peaks[mask];
            if (bf_peaks[mask] > hi) hi = bf_peaks[mask];
        }
        int wrong = 0;
        for (size_t b = lo; b <= hi; b++) {
            brute_best(sets, b, &cost, &peak);
            hfl_ckpt_plan o = sched_ok(ch, HFL_CKPT_OPTIMAL, b);
            if (o.recompute != cost || o.peak != peak) {
                if (!wrong || b == traps[t].budget)
                    fprintf(stderr, "trap %zu, budget %zu: optimal %g/%zu vs brute force %g/%zu\n",
                            t, b, o.recompute, o.peak, cost, peak);
                wrong++;
            }
        }
        CHECK_MSG(wrong == 0, "trap %zu: optimal misses the optimum at %d of the budgets %zu..%zu",
                  t, wrong, lo, hi);
    }
}

/* ---- 4. sqrt and larger chains ---- */

static void test_sqrt_and_large(void) {
    hfl_ckpt_layer L[HFL_CKPT_MAX_LAYERS];
    for (int i = 0; i < 16; i++) L[i] = lay(1.0, 1000, i % 2, 1, 0, 0);
    hfl_ckpt_chain ch = {.n = 16, .in_bytes = 1000, .layers = L};
    hfl_ckpt_plan q = sched_ok(&ch, HFL_CKPT_SQRT, SIZE_MAX);
    hfl_ckpt_plan z = sched_ok(&ch, HFL_CKPT_NONE, SIZE_MAX);
    CHECK_MSG(q.n_segments == 4, "sqrt segments %d", q.n_segments);
    for (int j = 0; j <= 4; j++) CHECK_MSG(q.bound[j] == 4 * j, "sqrt bound %d = %d", j, q.bound[j]);
    /* none: backward 16 holds a0..a16, g16 and g15 = 19000. sqrt: backward
     * 16 holds a0, a4, a8 (P), a12, recomputed a13..a15, a16 (needed), g16
     * and g15 = 10000. */
    CHECK_MSG(z.peak == 19000 && q.peak == 10000, "peaks none %zu sqrt %zu", z.peak, q.peak);
    CHECK_MSG(q.recompute == 12.0, "sqrt recompute %g", q.recompute);
    for (int n = 1; n <= HFL_CKPT_MAX_LAYERS; n++) { /* segment counts near sqrt(n) */
        ch.n = n;
        for (int i = 0; i < n; i++) L[i] = lay(1.0, 1000, 0, 1, 0, 0);
        q = sched_ok(&ch, HFL_CKPT_SQRT, SIZE_MAX);
        CHECK_MSG(q.n_segments == (int)lround(sqrt((double)n)), "n=%d: %d segments", n, q.n_segments);
        check_plan(&ch, &q);
    }

    /* n = 40, random: every kind within its promises, optimal monotone in budget. */
    for (int t = 0; t < 20; t++) {
        random_chain(&ch, L, 40);
        hfl_ckpt_plan all = sched_ok(&ch, HFL_CKPT_NONE, SIZE_MAX);
        hfl_ckpt_plan f = sched_ok(&ch, HFL_CKPT_FULL, SIZE_MAX);
        hfl_ckpt_plan s = sched_ok(&ch, HFL_CKPT_SQRT, SIZE_MAX);
        CHECK_MSG(f.peak <= s.peak && f.peak <= all.peak && f.peak == all.min_peak, "full is least");
        hfl_ckpt_plan o = sched_ok(&ch, HFL_CKPT_OPTIMAL, all.peak);
        CHECK_MSG(o.recompute == 0.0 && o.peak == all.peak, "budget = none's peak: no recompute");
        double prev = -1.0;
        for (int k = 0; k <= 8; k++) {
            size_t b = f.peak + (all.peak - f.peak) / 8 * (size_t)(8 - k);
            o = sched_ok(&ch, HFL_CKPT_OPTIMAL, b);
            check_plan(&ch, &o);
            CHECK_MSG(o.feasible && o.peak <= b, "n=40 budget %zu", b);
            CHECK_MSG(o.recompute >= prev, "tighter budget, no less recompute");
            if (s.peak <= b) CHECK_MSG(o.recompute <= s.recompute, "optimal beats sqrt when sqrt fits");
            prev = o.recompute;
        }
    }
}

/* ---- 5. parsing and refusals ---- */

static void test_refusals(void) {
    char err[HFL_ERR_LEN];
    hfl_ckpt_kind k;
    const char *names[] = {"none", "sqrt", "optimal", "full"};
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(hfl_ckpt_parse(names[i], &k, err) == 0 && (int)k == i, "parse %s", names[i]);
        CHECK_MSG(strcmp(hfl_ckpt_name(k), names[i]) == 0, "name %s", names[i]);
    }
    err[0] = 0;
    CHECK_MSG(hfl_ckpt_parse("revolve", &k, err) == -1 && strstr(err, "revolve"), "bad name: %s", err);
    CHECK_MSG(hfl_ckpt_parse(NULL, &k, err) == -1, "NULL name");

    hfl_ckpt_layer L[HFL_CKPT_MAX_LAYERS + 1];
    for (int i = 0; i <= HFL_CKPT_MAX_LAYERS; i++) L[i] = lay(1.0, 8, 0, 1, 0, 0);
    hfl_ckpt_chain ch = {.n = 0, .in_bytes = 8, .layers = L};
    hfl_ckpt_plan p;
    unsigned char st[HFL_CKPT_MAX_LAYERS + 2];
    memset(st, 1, sizeof st);
    CHECK_MSG(hfl_ckpt_schedule(&ch, HFL_CKPT_FULL, SIZE_MAX, &p, err) == -1, "n = 0");
    ch.n = HFL_CKPT_MAX_LAYERS + 1;
    CHECK_MSG(hfl_ckpt_schedule(&ch, HFL_CKPT_FULL, SIZE_MAX, &p, err) == -1, "n too large");
    ch.n = 4;
    L[2].cost = 0.0;
    CHECK_MSG(hfl_ckpt_evaluate(&ch, st, &p, err) == -1 && strstr(err, "layer 3"), "cost 0: %s", err);
    L[2].cost = NAN;
    CHECK_MSG(hfl_ckpt_schedule(&ch, HFL_CKPT_NONE, SIZE_MAX, &p, err) == -1, "NaN cost");
    L[2].cost = 1.0;
    L[1].out_bytes = SIZE_MAX - 4;
    CHECK_MSG(hfl_ckpt_schedule(&ch, HFL_CKPT_NONE, SIZE_MAX, &p, err) == -1, "byte overflow: %s", err);
    L[1].out_bytes = SIZE_MAX / 3 + 1; /* sums fit, but not with two gradients on top */
    CHECK_MSG(hfl_ckpt_schedule(&ch, HFL_CKPT_NONE, SIZE_MAX, &p, err) == -1, "accounting overflow");
    L[1].out_bytes = 8;
    CHECK_MSG(hfl_ckpt_schedule(&ch, (hfl_ckpt_kind)7, SIZE_MAX, &p, err) == -1, "bad kind");
    ch.first_backward = 5;
    CHECK_MSG(hfl_ckpt_schedule(&ch, HFL_CKPT_NONE, SIZE_MAX, &p, err) == -1 &&
                  strstr(err, "first_backward"), "first_backward > n: %s", err);
    ch.first_backward = -1;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1, "first_backward < 0");
    ch.first_backward = 4;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == 0, "first_backward = n: %s", err);
    L[2].grad_in_place = 1;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == 0, "grad_in_place, equal sizes: %s", err);
    L[2].out_bytes = 16;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1 && strstr(err, "layer 3"), "grad_in_place: %s",
              err);
    L[2].out_bytes = 8;
    L[2].grad_in_place = 0;
    st[0] = 0;
    CHECK_MSG(hfl_ckpt_evaluate(&ch, st, &p, err) == -1, "a_0 not stored");
    st[0] = 1;
    st[4] = 0;
    CHECK_MSG(hfl_ckpt_evaluate(&ch, st, &p, err) == -1, "a_n not stored");
    ch.layers = NULL;
    CHECK_MSG(hfl_ckpt_chain_check(&ch, err) == -1, "no layers");
}

static void case_brute(void) {
    int infeasible = test_brute(2000, 1, 10);
    CHECK_MSG(infeasible > 50 && infeasible < 1000, "budgets exercise both outcomes: %d", infeasible);
}

static void case_brute_long(void) {
    /* Longer chains, where the DP's frontiers outgrow its heuristic beam. */
    test_brute(40, 14, 18);
}

static const check_case cases[] = {
    {"hand", test_hand},
    {"brute", case_brute},
    {"brute_long", case_brute_long},
    {"beam_traps", test_beam_traps},
    {"sqrt_and_large", test_sqrt_and_large},
    {"refusals", test_refusals},
};

int main(int argc, char **argv) {
    return check_run("test_checkpoint", cases, CHECK_CASES(cases), argc, argv);
}
