/* agg_hd.h: the coordinator's aggregation arithmetic, written once (HFL_HD)
 * for the CPU aggregator's loops (kernels/cpu/agg_cpu.c) and the CUDA
 * kernels (kernels/cuda/agg.cu), so both give the same bits and the CPU
 * tests cover the GPU's arithmetic (tests/kernels/test_agg_bodies.c).
 *
 * coordinator/aggregate.h describes the aggregation: each validated update is
 * decoded (compress/payload_hd.h), its L2 norm taken, it is scaled by
 * weight * min(1, clip / norm), rounded to 64-bit fixed point and added. The
 * sum is exact, so order does not matter, except in the one step that is not
 * a sum of integers: the norm. Its double sum of squares is therefore given a
 * fixed shape here, which a CPU loop and a GPU block both follow:
 *
 *   the vector is cut into chunks of HFL_AGG_CHUNK = 4096 values; in chunk c,
 *   lane l (of HFL_AGG_LANES = 256) sums the squares of values
 *   c * 4096 + l + 256 t, t = 0 .. 15 (those below n), in t order; the 256
 *   lanes are added pairwise, p[l] += p[l + s] for s = 128, 64, ..., 1 (a
 *   GPU block's shared-memory tree, level by level); the chunks' sums are
 *   then added in chunk order.
 *
 * The largest |value| (the no-clip bound check) is order-free. Krum's squared
 * distances between two held rows take the same shape. Everything else is
 * elementwise: the fixed-point add, the finish, the server optimizers
 * (coordinator/server_opt.h), a held row's clipping, and a coordinate's
 * median or trimmed mean over k held rows (an insertion sort of the
 * coordinate's k values, stable, so ties keep row order; the CPU sorts a
 * local copy, a GPU thread its own column of shared memory). */
#ifndef HFL_AGG_HD_H
#define HFL_AGG_HD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compress/payload_hd.h"
#include "kernels/hd.h"

#define HFL_AGG_CHUNK 4096
#define HFL_AGG_LANES 256

static inline HFL_HD size_t hfl_agg_chunks(size_t n) { return (n + HFL_AGG_CHUNK - 1) / HFL_AGG_CHUNK; }

/* Lane `lane` of chunk `chunk`: its sum of squares and largest |value|. */
static inline HFL_HD void hfl_agg_norm_lane(const hfl_payload *p, size_t n, size_t chunk, int lane,
                                            double *sumsq, float *maxabs) {
    double s = 0.0;
    float m = 0.0f;
    size_t i = chunk * HFL_AGG_CHUNK + (size_t)lane;
    for (int t = 0; t < HFL_AGG_CHUNK / HFL_AGG_LANES && i < n; t++, i += HFL_AGG_LANES) {
        float v = hfl_payload_value(p, i);
        double x = v;
        s += x * x;
        float a = fabsf(v);
        m = a > m ? a : m;
    }
    *sumsq = s;
    *maxabs = m;
}

/* Lane `lane` of chunk `chunk` of the squared distance between rows a and b. */
static inline HFL_HD double hfl_agg_dist_lane(const float *a, const float *b, size_t n, size_t chunk,
                                              int lane) {
    double s = 0.0;
    size_t i = chunk * HFL_AGG_CHUNK + (size_t)lane;
    for (int t = 0; t < HFL_AGG_CHUNK / HFL_AGG_LANES && i < n; t++, i += HFL_AGG_LANES) {
        double d = (double)a[i] - (double)b[i];
        s += d * d;
    }
    return s;
}

/* One level of the lanes' tree: p[l] += p[l + width] for l < width (the CPU
 * runs l in a loop, a GPU thread l its own). */
static inline HFL_HD void hfl_agg_tree_step(double *p, int l, int width) { p[l] += p[l + width]; }

/* The whole tree on the CPU: p[0] ends as the chunk's sum. */
static inline void hfl_agg_tree(double *p) {
    for (int w = HFL_AGG_LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) hfl_agg_tree_step(p, l, w);
}

/* round(y) as an int64 for |y| < 2^51: adding 1.5 * 2^52 leaves the rounded
 * integer (to nearest, ties to even) in the low mantissa bits, which a plain
 * integer subtraction reads off; unlike llrint it vectorises, and it is one
 * IEEE addition on every machine (CUDA code is built with -fmad=false, so
 * f * v and this addition are never fused). */
#define HFL_AGG_ROUND_MAGIC 6755399441055744.0 /* 1.5 * 2^52 */

static inline HFL_HD int64_t hfl_agg_round_fixed(double y) {
    const double magic = HFL_AGG_ROUND_MAGIC;
    double t = y + magic;
    int64_t bits, mbits;
    memcpy(&bits, &t, sizeof bits);
    memcpy(&mbits, &magic, sizeof mbits);
    return bits - mbits;
}

/* The fixed-point add of value v scaled by f = weight * clip factor * 2^S:
 * returns the new acc (two's-complement addition: exact and associative). */
static inline HFL_HD int64_t hfl_agg_add_fixed(int64_t acc, double f, float v) {
    return (int64_t)((uint64_t)acc + (uint64_t)hfl_agg_round_fixed(f * (double)v));
}

/* A held row's element: v clipped by factor (< 1), or v as decoded. */
static inline HFL_HD float hfl_agg_row_value(float v, double factor) {
    return factor < 1 ? (float)(v * factor) : v;
}

/* (double)x, rounded once to nearest, from two exact int32 conversions:
 * hi 2^32 and the low word (biased to signed and back) are exact doubles
 * whose exact sum is x, so the one addition that rounds gives (double)x's
 * bits; written this way because int64 to double has no vector instruction
 * before AVX-512DQ, and the CPU's finish vectorises on it. */
static inline HFL_HD double hfl_agg_i64_to_f64(int64_t x) {
    int32_t hi = (int32_t)(x >> 32);
    uint32_t lo = (uint32_t)x;
    double low = (double)(int32_t)(lo ^ 0x80000000u) + 2147483648.0;
    return (double)hi * 4294967296.0 + low;
}

/* The mean's element from the sum: acc * 2^-S / weight_sum, as inv. */
static inline HFL_HD float hfl_agg_mean_value(int64_t acc, double inv) {
    return (float)(hfl_agg_i64_to_f64(acc) * inv);
}

/* 1 when x is finite (not Inf or NaN), written on the bits so that device and
 * host agree whatever the compiler does with isfinite. */
static inline HFL_HD int hfl_agg_finite(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7F800000u) != 0x7F800000u;
}

/* ---- server optimizers (coordinator/server_opt.h), one element ---- */

enum { HFL_AGG_SOPT_FEDAVG, HFL_AGG_SOPT_FEDAVGM, HFL_AGG_SOPT_FEDADAM, HFL_AGG_SOPT_FEDYOGI, HFL_AGG_SOPT_NESTEROV };

typedef struct {
    int kind; /* HFL_AGG_SOPT_*, server_opt.h's hfl_sopt_kind in the same order */
    double lr, beta1, beta2, tau;
} hfl_agg_sopt;

/* x moves by the round's mean delta d; m and v are the moments (fedavgm and
 * nesterov: v is the momentum; unused ones may be NULL). In double from the
 * float state. */
static inline HFL_HD void hfl_agg_sopt_elem(const hfl_agg_sopt *o, size_t i, float *x, float *m,
                                            float *v, float d) {
    double lr = o->lr, b1 = o->beta1, b2 = o->beta2;
    if (o->kind == HFL_AGG_SOPT_FEDAVG) {
        x[i] = (float)(x[i] + lr * d);
    } else if (o->kind == HFL_AGG_SOPT_FEDAVGM) {
        double vv = b1 * v[i] + d;
        v[i] = (float)vv;
        x[i] = (float)(x[i] + lr * vv);
    } else if (o->kind == HFL_AGG_SOPT_NESTEROV) {
        double vv = b1 * v[i] + d;
        v[i] = (float)vv;
        x[i] = (float)(x[i] + lr * (d + b1 * vv));
    } else {
        double g = d, g2 = g * g, mm = b1 * m[i] + (1 - b1) * g, vv = v[i];
        if (o->kind == HFL_AGG_SOPT_FEDADAM) vv = b2 * vv + (1 - b2) * g2;
        else vv = vv - (1 - b2) * g2 * (vv > g2 ? 1.0 : vv < g2 ? -1.0 : 0.0);
        m[i] = (float)mm;
        v[i] = (float)vv;
        x[i] = (float)(x[i] + lr * mm / (sqrt(vv) + o->tau));
    }
}

/* ---- robust rules (coordinator/robust.h), one coordinate ---- */

/* The coordinate's k values at col[0], col[stride], ...: sorted in place
 * (insertion sort, stable), then the median (median != 0) or the mean of the
 * values left after dropping `trim` at each end, summed in sorted order in
 * double. */
static inline HFL_HD float hfl_agg_coord_rule(float *col, size_t stride, int k, int median, int trim) {
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0 && col[(size_t)b * stride] < col[(size_t)(b - 1) * stride]; b--) {
            float t = col[(size_t)b * stride];
            col[(size_t)b * stride] = col[(size_t)(b - 1) * stride];
            col[(size_t)(b - 1) * stride] = t;
        }
    if (median)
        return k % 2 ? col[(size_t)(k / 2) * stride]
                     : (float)(0.5 * ((double)col[(size_t)(k / 2 - 1) * stride] + col[(size_t)(k / 2) * stride]));
    double s = 0;
    for (int j = trim; j < k - trim; j++) s += col[(size_t)j * stride];
    return (float)(s / (k - 2 * trim));
}

/* Multi-Krum's mean at coordinate i of the rows picked (pick[r] != 0), m of
 * them: summed in row order in double. rows is k rows of n. */
static inline HFL_HD float hfl_agg_pick_mean(const float *rows, size_t n, int k, const int *pick,
                                             int m, size_t i) {
    double s = 0;
    for (int r = 0; r < k; r++)
        if (pick[r]) s += rows[(size_t)r * n + i];
    return (float)(s / m);
}

#endif
