/* agg_twin.h: a CPU twin of kernels/cuda/agg.cu for the tests: aggregation
 * ops (kernels/agg.h) that follow the CUDA kernels' sequence of operations
 * exactly, thread by thread, in loops: the norm and Krum's distances one
 * chunk at a time, lane by lane through hfl_agg_norm_lane / dist_lane into a
 * "shared" array, the tree level by level, the chunks' sums stored and then
 * added in chunk order; every elementwise op through hfl_payload_value one
 * index at a time; a coordinate sorted in its column of a strided buffer, as
 * a thread does in shared memory. The CPU backend's ops (kernels/cpu/
 * agg_cpu.c) take faster paths; a test that finds the twin's bytes equal to
 * theirs shows that the CPU computes what the GPU's kernels compute
 * (tests/kernels/test_agg_bodies.c, and tests/gpu/test_cuda_agg.c with
 * HFL_GPU_STANDIN, where the twin stands in for the GPU). */
#ifndef HFL_TESTS_KERNELS_AGG_TWIN_H
#define HFL_TESTS_KERNELS_AGG_TWIN_H

#include <stdlib.h>
#include <string.h>

#include "kernels/agg.h"
#include "kernels/backend.h"

#define TWIN_THREADS 32 /* a coordinatewise block's threads: its column stride */

/* A deliberately wrong twin, for tests that must show they can fail: 1 adds
 * the norm's chunk sums in single precision (a kernel that reduced in
 * float), which moves the clip factor by about 1e-7 of itself. A last-bit
 * difference in the norm (another order of the double additions) would
 * mostly vanish in the fixed-point rounding and the float mean; this one
 * does not. */
static int twin_float_norm;

static void twin_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void twin_zero(void *p, size_t bytes) { memset(p, 0, bytes); }

static void twin_topk_scatter(float *dense, size_t n, const uint8_t *vals, const uint32_t *idx, size_t k) {
    memset(dense, 0, n * sizeof *dense);
    for (size_t j = 0; j < k; j++) /* k_topk_scatter, thread j */
        dense[idx[j]] = hfl_fp32_accum(0.0f, hfl_f16_to_f32((uint16_t)hfl_payload_u16(vals + 2 * j)), 1.0f);
}

static void twin_norm(const hfl_payload *p, size_t n, double *partials, hfl_agg_norm *out) {
    float top = 0.0f;
    size_t chunks = hfl_agg_chunks(n);
    for (size_t c = 0; c < chunks; c++) { /* k_norm_chunks, block c */
        double s[HFL_AGG_LANES];
        float m[HFL_AGG_LANES];
        for (int t = 0; t < HFL_AGG_LANES; t++) hfl_agg_norm_lane(p, n, c, t, &s[t], &m[t]);
        for (int w = HFL_AGG_LANES / 2; w >= 1; w /= 2)
            for (int t = 0; t < w; t++) {
                hfl_agg_tree_step(s, t, w);
                m[t] = m[t + w] > m[t] ? m[t + w] : m[t];
            }
        partials[c] = s[0];
        top = m[0] > top ? m[0] : top;
    }
    double total = 0.0; /* k_sum_in_order */
    float wrong = 0.0f;
    for (size_t c = 0; c < chunks; c++) total += partials[c], wrong += (float)partials[c];
    if (twin_float_norm) total = wrong;
    out->sumsq = total;
    out->maxabs = top;
}

static void twin_add_fixed(const hfl_payload *p, const double *f, int count, size_t n, int64_t *acc) {
    for (size_t i = 0; i < n; i++) /* k_add_fixed, thread i */
        for (int u = 0; u < count; u++) acc[i] = hfl_agg_add_fixed(acc[i], f[u], hfl_payload_value(&p[u], i));
}

static void twin_store_row(const hfl_payload *p, size_t n, double factor, float *row) {
    for (size_t i = 0; i < n; i++) row[i] = hfl_agg_row_value(hfl_payload_value(p, i), factor);
}

static int twin_finish(const int64_t *acc, size_t n, double inv, float *out) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = hfl_agg_mean_value(acc[i], inv);
        bad |= !hfl_agg_finite(out[i]);
    }
    return !bad;
}

static int twin_all_finite(const float *v, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad |= !hfl_agg_finite(v[i]);
    return !bad;
}

static void twin_sopt_step(const hfl_agg_sopt *o, float *x, float *m, float *v, const float *d, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_agg_sopt_elem(o, i, x, m, v, d[i]);
}

static void twin_coordinatewise(const float *rows, int k, size_t n, int median, int trim, float *out) {
    float *col = malloc(sizeof(float) * (size_t)k * TWIN_THREADS);
    if (!col) abort();
    for (size_t b = 0; b < n; b += TWIN_THREADS) /* a block of TWIN_THREADS coordinates */
        for (size_t t = 0; t < TWIN_THREADS && b + t < n; t++) {
            float *mine = col + t;
            for (int r = 0; r < k; r++) mine[(size_t)r * TWIN_THREADS] = rows[(size_t)r * n + b + t];
            out[b + t] = hfl_agg_coord_rule(mine, TWIN_THREADS, k, median, trim);
        }
    free(col);
}

static void twin_distances(const float *rows, int k, size_t n, double *partials, double *d) {
    size_t chunks = hfl_agg_chunks(n), pair = 0;
    for (int a = 0; a < k; a++) {
        d[(size_t)a * k + a] = 0.0;
        for (int b = a + 1; b < k; b++, pair++) {
            for (size_t c = 0; c < chunks; c++) { /* k_dist_chunks, block (pair, c) */
                double s[HFL_AGG_LANES];
                for (int t = 0; t < HFL_AGG_LANES; t++)
                    s[t] = hfl_agg_dist_lane(rows + (size_t)a * n, rows + (size_t)b * n, n, c, t);
                for (int w = HFL_AGG_LANES / 2; w >= 1; w /= 2)
                    for (int t = 0; t < w; t++) hfl_agg_tree_step(s, t, w);
                partials[pair * chunks + c] = s[0];
            }
            double total = 0.0; /* k_dist_combine, thread pair */
            for (size_t c = 0; c < chunks; c++) total += partials[pair * chunks + c];
            d[(size_t)a * k + b] = d[(size_t)b * k + a] = total;
        }
    }
}

static void twin_pick_mean(const float *rows, int k, size_t n, const int *pick, int m, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = hfl_agg_pick_mean(rows, n, k, pick, m, i);
}

static hfl_agg_ops twin_ops;
static hfl_backend twin_backend;

/* The CPU backend with the twin's aggregation ops, dressed as a device
 * (host_memory 0), so the aggregator stages payloads and copies the server
 * optimizer's state as it does for a GPU. */
static inline const hfl_backend *agg_twin(void) {
    twin_ops = (hfl_agg_ops){
        .max_rule_rows = 1024,
        .stage = twin_copy,
        .download = twin_copy,
        .zero = twin_zero,
        .copy = twin_copy,
        .topk_scatter = twin_topk_scatter,
        .norm = twin_norm,
        .add_fixed = twin_add_fixed,
        .store_row = twin_store_row,
        .finish = twin_finish,
        .all_finite = twin_all_finite,
        .sopt_step = twin_sopt_step,
        .coordinatewise = twin_coordinatewise,
        .distances = twin_distances,
        .pick_mean = twin_pick_mean,
    };
    twin_backend = *hfl_backend_cpu();
    twin_backend.name = "cuda twin";
    twin_backend.host_memory = 0;
    twin_backend.agg = &twin_ops;
    return &twin_backend;
}

#endif
