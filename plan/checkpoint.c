/* checkpoint.c: gradient-checkpointing schedules (none, sqrt, optimal, full)
 * for a chain of layers, and the peak/recompute accounting of any schedule.
 * The model and the accounting are defined in checkpoint.h.
 *
 * The DP. A partial schedule that ends with a_q stored is summarised by a
 * label (s, p, c): s = P(q), the bytes of the checkpoints below q still
 * needed; p = the largest P + X over its segments so far (its peak, were the
 * chain to end there); c = recompute so far. Extending it by the segment
 * (q, e] gives (s + nd_q m_q, max(p, s + X(q,e)), c + segment cost); a
 * finished schedule's peak is p, its recompute c. All three only grow under
 * extension and the result is monotone in (s, p), so a label another matches
 * or beats in s, p and c can never finish better in (recompute, peak) or
 * (peak, recompute): each position keeps the exact Pareto frontier of its
 * labels. This is the shortest-path-over-checkpoint-positions formulation
 * behind Griewank & Walther's revolve and Beaumont et al.'s rotor ("Optimal
 * checkpointing for heterogeneous chains", 2019), specialised to
 * single-level recomputation; because bytes are not discretised (rotor's
 * memory slots) the answer is exact. The problem contains 0/1 knapsack, so
 * frontiers can grow on chains of unrelated sizes and costs; three things
 * keep them small:
 *   1. A backward pass computes, for every q, B(q): the least over all
 *      suffixes from a stored a_q of max over their segments of (D + X),
 *      D the needed bytes they add above P(q). A completion of (s, p) at q
 *      peaks at max(p, s + D + X), so max(p, s + B(q)) is the least peak
 *      any completion reaches: an exact test of whether a forward label can
 *      still finish within the budget (labels that cannot are never stored),
 *      and B(0) is the least peak of all (min_peak).
 *   2. A beam pass (the BEAM cheapest labels per position) finds a schedule
 *      within the budget; its recompute is an upper bound, and the exact pass
 *      drops labels already costlier.
 *   3. Candidates arrive as runs already in order (a frontier shifted by a
 *      constant), merged rather than sorted.
 * `full` is the exact pass with budget = min_peak. Each segment's cost is
 * summed left to right and the segments' costs in order, exactly as
 * hfl_ckpt_evaluate sums them, and X and nd come from the one function both
 * use, so the DP's figures and the evaluator's agree bit for bit; every call
 * re-evaluates its choice and checks that. */
#include "plan/checkpoint.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static const char *const kind_names[] = {"none", "sqrt", "optimal", "full"};

int hfl_ckpt_parse(const char *name, hfl_ckpt_kind *kind, char *err) {
    if (!name) return hfl_errf(err, "checkpoint schedule: no name given");
    for (int k = 0; k < 4; k++) {
        if (strcmp(name, kind_names[k]) == 0) {
            *kind = (hfl_ckpt_kind)k;
            return 0;
        }
    }
    return hfl_errf(err, "unknown checkpoint schedule '%s' (none, sqrt, optimal, full)", name);
}

const char *hfl_ckpt_name(hfl_ckpt_kind kind) {
    return (unsigned)kind < 4 ? kind_names[kind] : "?";
}

/* m_j: bytes of activation a_j (j = 0 is the input). */
static size_t act_bytes(const hfl_ckpt_chain *ch, int j) {
    return j == 0 ? ch->in_bytes : ch->layers[j - 1].out_bytes;
}

/* The flags of layer i (1..n); needs_output_0 is 0. */
static int no_(const hfl_ckpt_chain *ch, int i) { return i > 0 && ch->layers[i - 1].needs_output; }
static int ni_(const hfl_ckpt_chain *ch, int i) { return ch->layers[i - 1].needs_input != 0; }

/* f of checkpoint.h. */
static int first_bwd(const hfl_ckpt_chain *ch) {
    return ch->first_backward < 1 ? 1 : ch->first_backward;
}

int hfl_ckpt_chain_check(const hfl_ckpt_chain *ch, char *err) {
    if (!ch) return hfl_errf(err, "checkpoint chain: NULL");
    if (ch->n < 1 || ch->n > HFL_CKPT_MAX_LAYERS)
        return hfl_errf(err, "checkpoint chain: %d layers (1..%d allowed)", ch->n,
                        HFL_CKPT_MAX_LAYERS);
    if (!ch->layers) return hfl_errf(err, "checkpoint chain: no layer array");
    if (ch->first_backward < 0 || ch->first_backward > ch->n)
        return hfl_errf(err, "checkpoint chain: first_backward %d outside 0..%d",
                        ch->first_backward, ch->n);
    /* Every figure is at most sum(m + s) + 2 max(m) (checkpoint.h's
     * accounting: distinct activations and saved bytes, then at most two
     * gradients). */
    size_t total = ch->in_bytes, maxm = ch->in_bytes;
    for (int i = 1; i <= ch->n; i++) {
        const hfl_ckpt_layer *l = &ch->layers[i - 1];
        if (!isfinite(l->cost) || !(l->cost > 0.0))
            return hfl_errf(err, "checkpoint chain: layer %d has cost %g (must be finite and > 0)",
                            i, l->cost);
        if (l->grad_in_place && l->out_bytes != act_bytes(ch, i - 1))
            return hfl_errf(err, "checkpoint chain: layer %d has grad_in_place but %zu output "
                            "bytes for %zu input bytes", i, l->out_bytes, act_bytes(ch, i - 1));
        if (l->out_bytes > SIZE_MAX - total || l->saved_bytes > SIZE_MAX - total - l->out_bytes)
            return hfl_errf(err, "checkpoint chain: activation bytes overflow at layer %d", i);
        total += l->out_bytes + l->saved_bytes;
        if (l->out_bytes > maxm) maxm = l->out_bytes;
    }
    if (maxm > (SIZE_MAX - total) / 2)
        return hfl_errf(err, "checkpoint chain: activation bytes too large to account");
    return 0;
}

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* s_i, and S(a..b) of checkpoint.h (SAVED ACTIVATIONS): s_k over f <= k, a <= k <= b. */
static size_t sv(const hfl_ckpt_chain *ch, int i) { return i > 0 ? ch->layers[i - 1].saved_bytes : 0; }
static size_t saved_sum(const hfl_ckpt_chain *ch, int a, int b) {
    size_t t = 0;
    for (int k = a > first_bwd(ch) ? a : first_bwd(ch); k <= b; k++) t += sv(ch, k);
    return t;
}

/* X(q, e) of checkpoint.h, step by step from the definition; *need =
 * nd_q m_q + s_q (what a_q adds to P above it); *cost = the segment's
 * recompute, summed left to right. */
static size_t segment_x(const hfl_ckpt_chain *ch, int q, int e, size_t *need, double *cost) {
    int n = ch->n, f = first_bwd(ch);
    size_t mq = act_bytes(ch, q), me = act_bytes(ch, e);
    int hq = (ni_(ch, q + 1) && q + 1 >= f) || (no_(ch, q) && q >= f);
    int nd = hq || (e > q + 1 && e >= f);
    size_t ndm = nd ? mq : 0, sq = saved_sum(ch, q, q); /* s_q when held (0 for q = 0) */
    /* forward steps q+1..e, and the loss */
    size_t x = mq + act_bytes(ch, q + 1) + sv(ch, q + 1);
    for (int i = q + 2; i <= e; i++)
        x = max2(x, ndm + act_bytes(ch, i - 1) + act_bytes(ch, i) + sv(ch, i));
    if (e == n) x = max2(x, ndm + me + me + sv(ch, n));
    double c = 0.0;
    if (e >= f) {
        size_t t = (no_(ch, e) ? me : 0) + me, hm = hq ? mq : 0, h = 0; /* h = H(i-1) */
        for (int i = q + 1; i < e; i++) { /* recompute step i */
            c += ch->layers[i - 1].cost;
            x = max2(x, (i == q + 1 ? mq : hm) + t + h + (i > q + 1 ? act_bytes(ch, i - 1) : 0) +
                            act_bytes(ch, i) + sv(ch, e) + saved_sum(ch, q + 1, i - 1) + sv(ch, i));
            int k = i - 1; /* H(i) = H(i-1) + h_k m_k */
            if (k > q && ((no_(ch, k) && k >= f) || (ni_(ch, k + 1) && k + 1 >= f)))
                h += act_bytes(ch, k);
        }
        /* h = H(e-1); H(e) adds k = e-1 when internal */
        if (e - 1 > q && ((no_(ch, e - 1) && e - 1 >= f) || (ni_(ch, e) && e >= f)))
            h += act_bytes(ch, e - 1);
        int lo = q + 1 > f ? q + 1 : f;
        for (int i = e; i >= lo; i--) { /* backward step i; h = H(i) */
            const hfl_ckpt_layer *l = &ch->layers[i - 1];
            size_t mi = act_bytes(ch, i), base = hm + h + saved_sum(ch, q + 1, i);
            size_t g = i > f && !l->grad_in_place ? act_bytes(ch, i - 1) : 0;
            if (l->needs_output && l->output_first)
                x = max2(x, max2(base + mi + mi, base + mi + g));
            else
                x = max2(x, base + (l->needs_output ? mi : 0) + mi + g);
            int k = i - 1; /* H(i-1) = H(i) - h_k m_k */
            if (k > q && ((no_(ch, k) && k >= f) || (ni_(ch, k + 1) && k + 1 >= f)))
                h -= act_bytes(ch, k);
        }
    }
    *need = ndm + sq;
    *cost = c;
    return x + sq;
}

int hfl_ckpt_evaluate(const hfl_ckpt_chain *ch, const unsigned char *stored, hfl_ckpt_plan *out,
                      char *err) {
    if (hfl_ckpt_chain_check(ch, err)) return -1;
    if (!stored || !out) return hfl_errf(err, "checkpoint evaluate: NULL argument");
    int n = ch->n;
    if (!stored[0] || !stored[n])
        return hfl_errf(err, "checkpoint evaluate: a_0 and a_%d must be stored", n);
    memset(out, 0, sizeof *out);
    out->kind = HFL_CKPT_NONE;
    out->n = n;
    out->budget = SIZE_MAX;
    out->feasible = 1;
    for (int j = 0; j <= n; j++) {
        out->stored[j] = stored[j] ? 1 : 0;
        if (out->stored[j]) {
            out->stored_bytes += act_bytes(ch, j);
            if (j > 0) out->bound[++out->n_segments] = j;
        }
    }
    out->bound[0] = 0;
    for (int i = 1; i <= n; i++) out->forward += ch->layers[i - 1].cost;
    size_t held = 0; /* P(q) */
    for (int j = 0; j < out->n_segments; j++) {
        /* Summed per segment, left to right, then over segments: the DP's order. */
        size_t need;
        double c;
        size_t x = segment_x(ch, out->bound[j], out->bound[j + 1], &need, &c);
        out->recompute += c;
        if (j == 0 || held + x > out->peak) {
            out->peak = held + x;
            out->held_bytes = held;
            out->segment_bytes = x;
            out->peak_segment = j;
        }
        held += need;
    }
    return 0;
}

/* ---- the DP ---- */

/* A label of a prefix ending with a_q stored: s = P(q), p = the largest P + X
 * over its segments, c = recompute so far (checkpoint.c's header). */
typedef struct {
    size_t s, p;
    double c;
    int prev_pos, prev_idx;
} label;

typedef struct {
    label *v;
    size_t len, cap;
} label_vec;

static int push(label_vec *lv, label l) {
    if (lv->len == lv->cap) {
        size_t cap = lv->cap ? 2 * lv->cap : 64;
        label *nv = realloc(lv->v, cap * sizeof *nv);
        if (!nv) return -1;
        lv->v = nv;
        lv->cap = cap;
    }
    lv->v[lv->len++] = l;
    return 0;
}

/* a before b: by (s, p), or by (c, s, p) with by_cost. */
static int before(const label *a, const label *b, int by_cost) {
    if (by_cost && a->c != b->c) return a->c < b->c;
    return a->s < b->s || (a->s == b->s && a->p < b->p);
}

/* Merges two runs sorted by that order into dst, the left run first among
 * equal keys. */
static void merge_runs(const label *x, size_t nx, const label *y, size_t ny, label *dst,
                       int by_cost) {
    size_t i = 0, j = 0, k = 0;
    while (i < nx && j < ny) dst[k++] = before(&y[j], &x[i], by_cost) ? y[j++] : x[i++];
    while (i < nx) dst[k++] = x[i++];
    while (j < ny) dst[k++] = y[j++];
}

/* Sorts cand, made of runs each already sorted (see before()), by merging
 * neighbouring runs (bottom-up): runs[0..nruns] are the runs' starts, with
 * runs[nruns] = cand->len. tmp is scratch. O(len log nruns), no callbacks. */
static int sort_runs(label_vec *cand, size_t *runs, size_t nruns, label_vec *tmp, int by_cost) {
    if (cand->len == 0) return 0; /* and tmp->v may still be NULL */
    if (tmp->cap < cand->len) {
        label *nv = realloc(tmp->v, cand->len * sizeof *nv);
        if (!nv) return -1;
        tmp->v = nv;
        tmp->cap = cand->len;
    }
    label *src = cand->v, *dst = tmp->v;
    while (nruns > 1) {
        size_t out = 0;
        for (size_t r = 0; r < nruns; r += 2) {
            size_t lo = runs[r], mid = runs[r + 1], hi = r + 2 <= nruns ? runs[r + 2] : mid;
            if (r + 1 == nruns) hi = mid; /* an odd run out: copied as is */
            if (r + 1 < nruns) merge_runs(src + lo, mid - lo, src + mid, hi - mid, dst + lo, by_cost);
            else memcpy(dst + lo, src + lo, (mid - lo) * sizeof *src);
            runs[out++] = lo;
        }
        runs[out] = cand->len;
        nruns = out;
        label *t = src;
        src = dst;
        dst = t;
    }
    if (src != cand->v) memcpy(cand->v, src, cand->len * sizeof *src);
    return 0;
}

/* 3-D frontier of cand (sorted by c, then s, then p) into out; stair is
 * scratch. Every label kept before x has c <= x.c, so x is dominated if one
 * of them has s and p no larger (exact duplicates included), i.e. if the
 * staircase of the kept labels' (s, p) has a step at s' <= x.s with p' <=
 * x.p. out keeps that order. Correctness needs only the order by c: the
 * runs merged into cand are fwd[p] shifted by a constant cost, which keeps c
 * order but, where rounding makes two costs equal, not always the (s, p)
 * order among them; then a dominated label may precede its dominator and be
 * kept, which makes the frontier larger than minimal, never wrong. */
static int pareto3(const label_vec *cand, label_vec *out, label_vec *stair) {
    stair->len = 0;
    for (size_t i = 0; i < cand->len; i++) {
        const label *x = &cand->v[i];
        /* hi = number of steps with s <= x.s; the last of them has the least p. */
        size_t lo = 0, hi = stair->len;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (stair->v[mid].s <= x->s) lo = mid + 1;
            else hi = mid;
        }
        if (hi > 0 && stair->v[hi - 1].p <= x->p) continue;
        if (push(out, *x)) return -1;
        /* Insert x at hi, dropping the steps it dominates (s >= x.s, p >= x.p). */
        size_t end = hi;
        while (end < stair->len && stair->v[end].p >= x->p) end++;
        if (end == hi) {
            if (push(stair, *x)) return -1;
            memmove(stair->v + hi + 1, stair->v + hi, (stair->len - 1 - hi) * sizeof *stair->v);
        } else {
            memmove(stair->v + hi + 1, stair->v + end, (stair->len - end) * sizeof *stair->v);
            stair->len -= end - hi - 1;
        }
        stair->v[hi] = *x;
    }
    return 0;
}

/* Labels per position kept by the heuristic pass that seeds the upper bound. */
#define BEAM 16

typedef struct {
    const hfl_ckpt_chain *ch;
    int n;
    size_t *work;   /* [(n+1)^2]: X(q,e) */
    size_t *need;   /* [(n+1)^2]: nd_q m_q of the segment (q,e] */
    double *segc;   /* [(n+1)^2]: the segment's recompute, summed left to right */
    size_t bk[HFL_CKPT_MAX_LAYERS + 1]; /* B(q) */
    label_vec fwd[HFL_CKPT_MAX_LAYERS + 1];
    label_vec cand, stair, tmp;
    size_t runs[HFL_CKPT_MAX_LAYERS + 2];
} dp_state;

/* Backward pass: B(n) = 0 (no segment left; p >= s always, so it is
 * neutral) and B(q) = min over e > q of max(X(q,e), nd_q m_q + B(e)). */
static void run_back(dp_state *d) {
    int n = d->n;
    d->bk[n] = 0;
    for (int q = n - 1; q >= 0; q--) {
        size_t best = SIZE_MAX;
        for (int e = q + 1; e <= n; e++) {
            size_t v = max2(d->work[q * (n + 1) + e], d->need[q * (n + 1) + e] + d->bk[e]);
            if (v < best) best = v;
        }
        d->bk[q] = best;
    }
}

/* Whether a forward label (s, p) at q has a completion with peak <= budget:
 * the least peak of its completions is max(p, s + B(q)). */
static int completes(const dp_state *d, int q, size_t s, size_t p, size_t budget) {
    return p <= budget && d->bk[q] <= budget - s; /* s <= p */
}

/* Forward 3-D pass: fwd[q] = the frontier of (s, p, c) over prefixes ending
 * with a_q stored that can still finish with peak <= budget and whose
 * recompute is at most ub. beam > 0 keeps only the beam cheapest labels per
 * position: a heuristic pass whose result is an upper bound. */
static int run_fwd(dp_state *d, size_t budget, double ub, size_t beam) {
    int n = d->n;
    size_t min_s[HFL_CKPT_MAX_LAYERS + 1];
    label start = {0, 0, 0.0, -1, -1};
    if (!completes(d, 0, 0, 0, budget)) return 0;
    if (push(&d->fwd[0], start)) return -1;
    min_s[0] = 0;
    for (int q = 1; q <= n; q++) {
        d->cand.len = 0;
        size_t nruns = 0;
        for (int p = 0; p < q; p++) {
            d->runs[nruns++] = d->cand.len; /* in c order, as fwd[p] is */
            size_t w = d->work[p * (n + 1) + q], nd = d->need[p * (n + 1) + q];
            double sc = d->segc[p * (n + 1) + q];
            if (d->fwd[p].len == 0 || min_s[p] + w > budget) continue; /* nl.p >= this */
            for (size_t k = 0; k < d->fwd[p].len; k++) {
                const label *l = &d->fwd[p].v[k];
                label nl = {l->s + nd, max2(l->p, l->s + w), l->c + sc, p, (int)k};
                if (nl.c > ub) break; /* and so are the rest: sorted by c */
                if (!completes(d, q, nl.s, nl.p, budget)) continue;
                if (push(&d->cand, nl)) return -1;
            }
        }
        d->runs[nruns] = d->cand.len;
        if (sort_runs(&d->cand, d->runs, nruns, &d->tmp, 1) ||
            pareto3(&d->cand, &d->fwd[q], &d->stair))
            return -1;
        if (beam && d->fwd[q].len > beam) d->fwd[q].len = beam; /* the cheapest: sorted by c */
        min_s[q] = SIZE_MAX;
        for (size_t k = 0; k < d->fwd[q].len; k++)
            if (d->fwd[q].v[k].s < min_s[q]) min_s[q] = d->fwd[q].v[k].s;
    }
    return 0;
}

/* Walks the predecessors of fwd[n].v[idx] into stored[0..n]. */
static void trace(const dp_state *d, size_t idx, unsigned char *stored) {
    memset(stored, 0, (size_t)(d->n + 1));
    int pos = d->n, i = (int)idx;
    while (pos >= 0) {
        stored[pos] = 1;
        const label *l = &d->fwd[pos].v[i];
        pos = l->prev_pos;
        i = l->prev_idx;
    }
}

static void dp_free(dp_state *d) {
    for (int q = 0; q <= d->n; q++) free(d->fwd[q].v);
    free(d->cand.v);
    free(d->stair.v);
    free(d->tmp.v);
    free(d->work);
    free(d->need);
    free(d->segc);
}

/* X, nd_q m_q and the recompute of every segment (q, e]: O(n^3), by the
 * function hfl_ckpt_evaluate uses. */
static int dp_tables(dp_state *d) {
    int n = d->n;
    size_t cells = (size_t)(n + 1) * (size_t)(n + 1);
    d->work = malloc(cells * sizeof *d->work);
    d->need = malloc(cells * sizeof *d->need);
    d->segc = malloc(cells * sizeof *d->segc);
    if (!d->work || !d->need || !d->segc) return -1;
    for (int q = 0; q < n; q++)
        for (int e = q + 1; e <= n; e++) {
            size_t i = (size_t)q * (size_t)(n + 1) + (size_t)e;
            d->work[i] = segment_x(d->ch, q, e, &d->need[i], &d->segc[i]);
        }
    return 0;
}

int hfl_ckpt_schedule(const hfl_ckpt_chain *ch, hfl_ckpt_kind kind, size_t budget,
                      hfl_ckpt_plan *out, char *err) {
    if (hfl_ckpt_chain_check(ch, err)) return -1;
    if (!out) return hfl_errf(err, "checkpoint schedule: NULL plan");
    if ((unsigned)kind > HFL_CKPT_FULL)
        return hfl_errf(err, "checkpoint schedule: unknown kind %d", (int)kind);
    int n = ch->n;
    dp_state d;
    memset(&d, 0, sizeof d);
    d.ch = ch;
    d.n = n;
    unsigned char stored[HFL_CKPT_MAX_LAYERS + 1];
    const label *pick = NULL;
    size_t min_peak = SIZE_MAX;
    int rc = dp_tables(&d) ? -1 : 0;
    if (rc == 0) {
        run_back(&d);
        min_peak = d.bk[0];
    }
    if (rc == 0 && (kind == HFL_CKPT_OPTIMAL || kind == HFL_CKPT_FULL)) {
        /* Least recompute, then least peak, among peaks <= b (full, or a
         * budget below min_peak: among the least-peak schedules). */
        size_t b = (kind == HFL_CKPT_FULL || budget < min_peak) ? min_peak : budget;
        /* A beam pass finds some schedule within b (every kept label can still
         * finish, so one always does); its recompute bounds the exact pass,
         * which drops labels already costlier (ties kept, for the peak). Where
         * storing everything fits, the bound is 0 from the start. */
        double ub = HUGE_VAL;
        memset(stored, 1, (size_t)(n + 1)); /* storing everything: recompute 0 */
        if (kind == HFL_CKPT_OPTIMAL && hfl_ckpt_evaluate(ch, stored, out, err) == 0 &&
            out->peak <= b)
            ub = 0.0;
        rc = run_fwd(&d, b, ub, BEAM);
        for (size_t k = 0; rc == 0 && k < d.fwd[n].len; k++)
            if (d.fwd[n].v[k].c < ub) ub = d.fwd[n].v[k].c;
        for (int q = 0; q <= n; q++) d.fwd[q].len = 0;
        if (rc == 0) rc = run_fwd(&d, b, ub, 0);
        if (rc == 0 && d.fwd[n].len == 0) rc = -2; /* cannot happen: min_peak is reachable */
        if (rc == 0) {
            size_t best = 0;
            for (size_t k = 1; k < d.fwd[n].len; k++) {
                const label *l = &d.fwd[n].v[k], *o = &d.fwd[n].v[best];
                if (l->c < o->c || (l->c == o->c && l->p < o->p)) best = k;
            }
            pick = &d.fwd[n].v[best];
            trace(&d, best, stored);
        }
    } else if (rc == 0 && kind == HFL_CKPT_NONE) {
        memset(stored, 1, (size_t)(n + 1));
    } else if (rc == 0) {
        int segs = (int)lround(sqrt((double)n));
        if (segs < 1) segs = 1;
        memset(stored, 0, (size_t)(n + 1));
        for (int j = 0; j <= segs; j++) /* boundary j at round(j * n / segs) */
            stored[(2 * j * n + segs) / (2 * segs)] = 1;
    }
    if (rc == -1) {
        dp_free(&d);
        return hfl_errf(err, "checkpoint schedule: out of memory");
    }
    if (rc == 0) rc = hfl_ckpt_evaluate(ch, stored, out, err);
    if (rc == -2 || (rc == 0 && pick && (pick->p != out->peak || pick->c != out->recompute)))
        rc = hfl_errf(err, "checkpoint schedule: internal error (DP and evaluation disagree)");
    dp_free(&d);
    if (rc) return -1;
    out->kind = kind;
    out->budget = budget;
    out->feasible = out->peak <= budget;
    out->min_peak = min_peak;
    return 0;
}
