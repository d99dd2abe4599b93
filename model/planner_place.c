/* planner_place.c: placing a plan's buffers in one arena (planner.h,
 * PLACEMENT).
 *
 * First fit in a chosen order: each buffer goes at the lowest aligned offset
 * that clears every already placed buffer whose lifetime overlaps its own
 * (scanning the gaps between those neighbours in offset order). The order
 * matters and neither of two wins everywhere, so both are tried and the
 * smallest arena kept: by decreasing size (TensorFlow Lite's "greedy by
 * size"; best for `none`), and by first op (allocation order, as a running
 * allocator would; best for some checkpointed plans, e.g. cnn sqrt at batch
 * 128: 49.8 MB against 52.5 MB). Size x lifetime, longest-first and best fit
 * instead of first fit never did better on mlp and cnn at batches 1-512.
 * Ties go to the larger size, then the earlier first op, then table order,
 * so a plan is deterministic. A plan has at most a few hundred buffers, so
 * the quadratic scans and insertion sorts cost microseconds. */
#include <stdint.h>
#include <string.h>

#include "model/planner.h"

static size_t align_up(size_t x) {
    return (x + HFL_PLAN_ALIGN - 1) / HFL_PLAN_ALIGN * HFL_PLAN_ALIGN;
}

/* Placement orders; hfl_plan_place tries each and keeps the smallest arena. */
enum { ORDER_SIZE, ORDER_EARLIEST, N_ORDERS };

static size_t order_key(const hfl_plan_buffer *x, int order) {
    if (order == ORDER_EARLIEST) return (size_t)(HFL_PLAN_MAX_OPS - x->first_op);
    return align_up(x->bytes);
}

/* Whether buffer a goes before buffer b: larger key first, then larger size,
 * then earlier first op, then table order (deterministic). */
static int placed_before(const hfl_plan *p, int a, int b, int order) {
    const hfl_plan_buffer *x = &p->buffers[a], *y = &p->buffers[b];
    size_t kx = order_key(x, order), ky = order_key(y, order);
    if (kx != ky) return kx > ky;
    if (align_up(x->bytes) != align_up(y->bytes)) return align_up(x->bytes) > align_up(y->bytes);
    if (x->first_op != y->first_op) return x->first_op < y->first_op;
    return a < b;
}

/* Insertion sorts (a few hundred entries at most; no qsort, which would need
 * the plan in a global to compare indices, and planning may run in threads). */
static void sort_for_placement(const hfl_plan *p, int *v, int n, int order) {
    for (int i = 1; i < n; i++) {
        int x = v[i], j = i;
        for (; j > 0 && placed_before(p, x, v[j - 1], order); j--) v[j] = v[j - 1];
        v[j] = x;
    }
}

static void sort_by_offset(const hfl_plan *p, int *v, int n) {
    for (int i = 1; i < n; i++) {
        int x = v[i], j = i;
        for (; j > 0 && p->buffers[x].offset < p->buffers[v[j - 1]].offset; j--) v[j] = v[j - 1];
        v[j] = x;
    }
}

static int lifetimes_overlap(const hfl_plan_buffer *a, const hfl_plan_buffer *b) {
    return a->first_op <= b->last_op && b->first_op <= a->last_op;
}

/* First fit of the buffers in `order`: each in the lowest gap between its
 * lifetime neighbours that holds it, else above them all. Records the
 * offsets; returns the arena end. */
static size_t place_in_order(hfl_plan *p, const int *order, size_t *offsets) {
    int near[HFL_PLAN_MAX_BUFFERS];
    size_t end = 0;
    for (int k = 0; k < p->n_buffers; k++) {
        hfl_plan_buffer *x = &p->buffers[order[k]];
        int n_near = 0;
        for (int j = 0; j < k; j++)
            if (lifetimes_overlap(x, &p->buffers[order[j]])) near[n_near++] = order[j];
        sort_by_offset(p, near, n_near);
        size_t at = 0, size = align_up(x->bytes);
        for (int j = 0; j < n_near; j++) {
            const hfl_plan_buffer *y = &p->buffers[near[j]];
            if (at + size <= y->offset) break; /* the gap below y holds it */
            size_t y_end = y->offset + align_up(y->bytes);
            if (y_end > at) at = y_end;
        }
        x->offset = at;
        if (at + size > end) end = at + size;
    }
    for (int i = 0; i < p->n_buffers; i++) offsets[i] = p->buffers[i].offset;
    return end;
}

void hfl_plan_place(hfl_plan *p) {
    int order[HFL_PLAN_MAX_BUFFERS];
    size_t offsets[HFL_PLAN_MAX_BUFFERS], best[HFL_PLAN_MAX_BUFFERS], best_end = SIZE_MAX;
    for (int o = 0; o < N_ORDERS; o++) {
        for (int i = 0; i < p->n_buffers; i++) order[i] = i;
        sort_for_placement(p, order, p->n_buffers, o);
        size_t end = place_in_order(p, order, offsets);
        if (end < best_end) {
            best_end = end;
            memcpy(best, offsets, sizeof offsets[0] * (size_t)p->n_buffers);
        }
    }
    for (int i = 0; i < p->n_buffers; i++) p->buffers[i].offset = best[i];
    p->arena_bytes = best_end;
}
