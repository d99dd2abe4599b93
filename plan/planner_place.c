/* planner_place.c: placing a plan's buffers in one arena (planner.h,
 * PLACEMENT).
 *
 * A placement puts buffers one at a time, in some order, each in a gap
 * between the already placed buffers whose lifetimes overlap its own (its
 * lifetime neighbours, in offset order), else above them all: first fit
 * takes the lowest gap that holds it, best fit the smallest. The arena is
 * the end of the highest buffer; no placement goes below the most aligned
 * bytes alive at one op (the lower bound).
 *
 * 0. The base. A buffer whose lifetime overlaps every other buffer's
 *    (parameters, master weights, gradients, momentum, usually the input
 *    batch) goes at the bottom, in table order: in any valid placement every
 *    other buffer lies wholly below or above it, so moving it to the bottom
 *    (and what was below it up) costs nothing. The rest is placed above.
 * 1. Greedy. Six orders, each with first and with best fit, keeping the
 *    smallest arena: by decreasing size (TensorFlow Lite's "greedy by
 *    size"), by first op (allocation order, as a running allocator would),
 *    by last op, by lifetime length, by size x lifetime, and the buffers
 *    alive over 3/4 of the step first, then by size. None of them does well
 *    on checkpointed cnn plans: for cnn `full` at batch 128 all leave 3.2 MB
 *    of gaps (52.47 MB for a 49.26 MB live peak), because a large late
 *    buffer (dconv1) is placed before a smaller one (dpool1) that must sit
 *    in the slot of a dead buffer (conv2's output) under it.
 * 2. Local search, unless the greedy arena is the lower bound: move the
 *    buffer at one position of the best order to a later position, place
 *    again with the fit that won, and keep the move if the arena shrinks;
 *    cycle through the moves until none helps, the lower bound is met, or
 *    the work budget is spent. A move from position i leaves the first i
 *    placements as they were, so a try starts from the best placement's
 *    prefix, and it is abandoned as soon as its arena reaches the best one.
 *
 * Over mlp and cnn at batches 1-512, the four schedules, three precisions,
 * with and without momentum, the arena meets the lower bound in 97.6% of
 * the plans (the greedy alone: 42.8%) and is at most 3.1% over the live
 * peak (9.8%); cnn at batch 128 places within 72 bytes of its live peak
 * under every schedule (docs/benchmarks.md, "Memory planner").
 *
 * Deterministic: orders tie-break on size, first op, then table order, and
 * the search visits moves in a fixed order. The budget bounds the time for
 * large models (up to HFL_PLAN_MAX_BUFFERS buffers, each placement being
 * quadratic in them): a plan spends at most ~0.15 ms searching, and mlp and
 * cnn plans take ~11 us on average, all work included. */
#include <stdint.h>
#include <string.h>

#include "plan/planner.h"

/* Neighbour visits the local search may spend per plan (~2 ns each). On
 * mlp and cnn at batches 1-512 it places exactly as an unbounded search. */
#define WORK_BUDGET 65536

static size_t align_up(size_t x) {
    return (x + HFL_PLAN_ALIGN - 1) / HFL_PLAN_ALIGN * HFL_PLAN_ALIGN;
}

/* Greedy orders (see the top); hfl_plan_place tries each with both fits. */
enum {
    ORDER_SIZE,
    ORDER_EARLIEST,
    ORDER_LATEST,
    ORDER_LONGEST,
    ORDER_AREA,
    ORDER_WHOLE_STEP,
    N_ORDERS
};

/* The plan's buffers as the placement sees them. */
typedef struct {
    int n, n_ops;
    size_t size[HFL_PLAN_MAX_BUFFERS]; /* aligned bytes */
    int first[HFL_PLAN_MAX_BUFFERS], last[HFL_PLAN_MAX_BUFFERS];
    long work; /* neighbour visits so far */
} placer;

/* One placement: the order, offsets by buffer, the arena end, the fit. */
typedef struct {
    int order[HFL_PLAN_MAX_BUFFERS];
    size_t offset[HFL_PLAN_MAX_BUFFERS];
    size_t end;
    int fit; /* 0: first fit, 1: best fit */
} placement;

static size_t order_key(const placer *pl, int i, int order) {
    size_t len = (size_t)(pl->last[i] - pl->first[i] + 1);
    switch (order) {
    case ORDER_EARLIEST: return (size_t)(pl->n_ops - pl->first[i]);
    case ORDER_LATEST: return (size_t)pl->last[i];
    case ORDER_LONGEST: return len;
    case ORDER_AREA: return pl->size[i] / HFL_PLAN_ALIGN * len;
    case ORDER_WHOLE_STEP: /* alive over at least 3/4 of the step first, then by size */
        return (len * 4 >= (size_t)pl->n_ops * 3 ? SIZE_MAX / 2 + 1 : 0) + pl->size[i] / 2;
    default: return pl->size[i];
    }
}

/* Whether buffer a goes before buffer b: larger key first, then larger size,
 * then earlier first op, then table order (deterministic). */
static int placed_before(const placer *pl, int a, int b, int order) {
    size_t ka = order_key(pl, a, order), kb = order_key(pl, b, order);
    if (ka != kb) return ka > kb;
    if (pl->size[a] != pl->size[b]) return pl->size[a] > pl->size[b];
    if (pl->first[a] != pl->first[b]) return pl->first[a] < pl->first[b];
    return a < b;
}

/* Insertion sort (a few hundred entries at most; no qsort, which would need
 * the plan in a global to compare indices, and planning may run in threads). */
static void sort_for_placement(const placer *pl, int *v, int order) {
    for (int i = 1; i < pl->n; i++) {
        int x = v[i], j = i;
        for (; j > 0 && placed_before(pl, x, v[j - 1], order); j--) v[j] = v[j - 1];
        v[j] = x;
    }
}

/* Places x->order[from..n-1] given x->offset of x->order[0..from-1], whose
 * offset-sorted list is sorted[0..n_sorted-1] and whose highest end is
 * `end`. Gives up (returns SIZE_MAX) once the arena would reach `limit`;
 * else sets x->end and returns it. */
static size_t place_from(placer *pl, placement *x, int from, int *sorted, int n_sorted,
                         size_t end, size_t limit) {
    for (int k = from; k < pl->n; k++) {
        int b = x->order[k];
        size_t size = pl->size[b], at = 0, best_at = SIZE_MAX, best_gap = SIZE_MAX;
        pl->work += n_sorted;
        for (int j = 0; j < n_sorted; j++) {
            int y = sorted[j];
            if (pl->first[b] > pl->last[y] || pl->first[y] > pl->last[b]) continue;
            if (x->offset[y] >= at + size) { /* the gap below y holds it */
                size_t gap = x->offset[y] - at;
                if (!x->fit) {
                    best_at = at;
                    break;
                }
                if (gap < best_gap) best_gap = gap, best_at = at;
            }
            size_t y_end = x->offset[y] + pl->size[y];
            if (y_end > at) at = y_end;
        }
        if (best_at == SIZE_MAX) best_at = at;
        x->offset[b] = best_at;
        if (best_at + size > end) end = best_at + size;
        if (end >= limit) return SIZE_MAX;
        int i = n_sorted++;
        for (; i > 0 && x->offset[sorted[i - 1]] > best_at; i--) sorted[i] = sorted[i - 1];
        sorted[i] = b;
    }
    return x->end = end;
}

/* The lower bound: the most aligned bytes alive at one op. */
static size_t lower_bound(const placer *pl) {
    size_t most = 0;
    for (int o = 0; o < pl->n_ops; o++) {
        size_t live = 0;
        for (int i = 0; i < pl->n; i++)
            if (pl->first[i] <= o && o <= pl->last[i]) live += pl->size[i];
        if (live > most) most = live;
    }
    return most;
}

/* Local search from best: move the buffer at one position of the order to a
 * later one (i ascending; for each, j from the end of the order back), place
 * again from position i on, keep the move if the arena shrinks; cycle
 * through the moves until a whole cycle brings nothing, the arena reaches
 * `floor` or the work budget is spent. (Allowing moves to an earlier
 * position as well found no smaller arenas on mlp and cnn, for 50% more
 * work.) */
static void improve(placer *pl, placement *best, size_t floor) {
    placement t;
    int sorted[HFL_PLAN_MAX_BUFFERS], rank[HFL_PLAN_MAX_BUFFERS], by_offset[HFL_PLAN_MAX_BUFFERS];
    size_t prefix_end[HFL_PLAN_MAX_BUFFERS + 1];
    int n = pl->n, fresh = 1, i = 0, j = n;
    long moves = (long)n * (n - 1) / 2; /* in one cycle */
    for (long since = 0; since < moves && best->end > floor && pl->work < WORK_BUDGET; since++) {
        if (fresh) {
            /* best's buffers by offset, each one's position in the order,
             * and the arena end of each prefix of the order. */
            for (int k = 0; k < n; k++) rank[best->order[k]] = k, by_offset[k] = best->order[k];
            for (int k = 1; k < n; k++) {
                int v = by_offset[k], q = k;
                for (; q > 0 && best->offset[by_offset[q - 1]] > best->offset[v]; q--)
                    by_offset[q] = by_offset[q - 1];
                by_offset[q] = v;
            }
            prefix_end[0] = 0;
            for (int k = 0; k < n; k++) {
                size_t e = best->offset[best->order[k]] + pl->size[best->order[k]];
                prefix_end[k + 1] = e > prefix_end[k] ? e : prefix_end[k];
            }
            fresh = 0;
        }
        if (--j <= i) { /* the next move: i < j < n */
            if (++i >= n - 1) i = 0;
            j = n - 1;
        }
        /* best's order with position i moved to position j; positions
         * before i keep best's offsets */
        memcpy(t.order, best->order, sizeof t.order[0] * (size_t)n);
        memmove(&t.order[i], &t.order[i + 1], sizeof t.order[0] * (size_t)(j - i));
        t.order[j] = best->order[i];
        t.fit = best->fit;
        int n_sorted = 0;
        for (int k = 0; k < n; k++)
            if (rank[by_offset[k]] < i) sorted[n_sorted++] = by_offset[k];
        for (int k = 0; k < i; k++) t.offset[t.order[k]] = best->offset[t.order[k]];
        if (place_from(pl, &t, i, sorted, n_sorted, prefix_end[i], best->end) != SIZE_MAX) {
            *best = t;
            fresh = 1;
            since = -1;
        }
    }
}

void hfl_plan_place(hfl_plan *p) {
    /* The base: buffers whose lifetime overlaps every other buffer's go at
     * the bottom, in table order; the rest are placed above them. */
    placer pl = {.n = 0, .n_ops = p->n_ops};
    int id[HFL_PLAN_MAX_BUFFERS];
    size_t base = 0;
    for (int i = 0; i < p->n_buffers; i++) {
        const hfl_plan_buffer *x = &p->buffers[i];
        int all = 1;
        for (int j = 0; j < p->n_buffers && all; j++)
            all = x->first_op <= p->buffers[j].last_op && p->buffers[j].first_op <= x->last_op;
        if (all) {
            p->buffers[i].offset = base;
            base += align_up(x->bytes);
            continue;
        }
        id[pl.n] = i;
        pl.size[pl.n] = align_up(x->bytes);
        pl.first[pl.n] = x->first_op;
        pl.last[pl.n++] = x->last_op;
    }
    placement best = {.end = SIZE_MAX}, t;
    int sorted[HFL_PLAN_MAX_BUFFERS];
    size_t floor = lower_bound(&pl);
    for (int o = 0; o < N_ORDERS && best.end > floor; o++)
        for (int fit = 0; fit < 2 && best.end > floor; fit++) {
            for (int i = 0; i < pl.n; i++) t.order[i] = i;
            sort_for_placement(&pl, t.order, o);
            t.fit = fit;
            if (place_from(&pl, &t, 0, sorted, 0, 0, best.end) != SIZE_MAX) best = t;
        }
    pl.work = 0;
    improve(&pl, &best, floor);
    for (int k = 0; k < pl.n; k++) p->buffers[id[k]].offset = base + best.offset[k];
    p->arena_bytes = base + best.end;
}
