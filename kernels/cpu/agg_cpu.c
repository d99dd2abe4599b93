/* agg_cpu.c: the CPU backend's aggregation ops (kernels/agg.h) over host
 * memory, in the kernels/agg_hd.h shapes, so that they give the CUDA
 * kernels' bits.
 *
 * The passes go a chunk (HFL_AGG_CHUNK values) at a time: the chunk is
 * decoded into a 16 KiB buffer by decode_span (per codec, the codec's test
 * hoisted out of the loop and a blocked codec's scale read once a block:
 * the same two fp32 operations as hfl_payload_value, checked element by
 * element in tests/kernels/test_agg_bodies.c), then summed or added from
 * there. Lane l of a chunk is buffer[l], buffer[l + 256], ..., so the lanes'
 * sums run across the buffer's rows as a loop that vectorises. */
#include <stdlib.h>
#include <string.h>

#include "kernels/agg.h"
#include "kernels/cpu/agg_cpu.h"

/* The hot passes compiled for AVX-512 (with DQ: int64 to double in the
 * finish) and AVX2 beside the SSE2 baseline, the
 * loader picking one (ifunc), as compress/codec_impl.h does: the same IEEE
 * operations in wider registers (no reassociation, no contraction: ISO C's
 * -ffp-contract=off), so the same bits. Not with clang (the sanitizer build),
 * whose clones do not link across files. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define AGG_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AGG_CLONES
#endif

/* out[j] = value i0 + j of p for j < m, as hfl_payload_value. */
AGG_CLONES void hfl_agg_decode_span(const hfl_payload *p, size_t i0, size_t m, float *out) {
    const uint8_t *b = p->body;
    switch (p->kind) {
    case HFL_PAYLOAD_FP32:
        for (size_t j = 0; j < m; j++) out[j] = hfl_fp32_accum(0.0f, hfl_payload_f32(b + 4 * (i0 + j)), 1.0f);
        return;
    case HFL_PAYLOAD_FP16:
        for (size_t j = 0; j < m; j++)
            out[j] = hfl_fp32_accum(0.0f, hfl_f16_to_f32((uint16_t)hfl_payload_u16(b + 2 * (i0 + j))), 1.0f);
        return;
    case HFL_PAYLOAD_BF16:
        for (size_t j = 0; j < m; j++)
            out[j] = hfl_fp32_accum(0.0f, hfl_bf16_to_f32((uint16_t)hfl_payload_u16(b + 2 * (i0 + j))), 1.0f);
        return;
    default:
        break;
    }
    size_t block = p->block, bytes = hfl_payload_block_bytes(p->kind, p->block);
    for (size_t i = i0, end = i0 + m; i < end;) {
        size_t k = i / block, j = i % block, stop = (k + 1) * block < end ? (k + 1) * block : end;
        const uint8_t *blk = b + k * bytes, *q = blk + 4;
        float wscale = 1.0f * hfl_payload_f32(blk), *o = out + (i - i0);
        size_t len = stop - i;
        if (p->kind == HFL_PAYLOAD_INT8)
            for (size_t t = 0; t < len; t++) o[t] = hfl_q8_accum(0.0f, (int8_t)q[j + t], wscale);
        else if (p->kind == HFL_PAYLOAD_INT4)
            for (size_t t = 0; t < len; t++) {
                size_t e = j + t;
                o[t] = hfl_q8_accum(0.0f, e & 1 ? hfl_q4_hi(q[e / 2]) : hfl_q4_lo(q[e / 2]), wscale);
            }
        else
            for (size_t t = 0; t < len; t++) {
                size_t e = j + t;
                o[t] = 0.0f + hfl_sign_value((q[e / 8] >> (e % 8)) & 1u, wscale);
            }
        i = stop;
    }
}

/* One chunk's sum of squares of x[0..m) (m <= HFL_AGG_CHUNK) in the lanes'
 * shape, with its largest |x| into *maxabs. */
AGG_CLONES static double chunk_sumsq(const float *x, size_t m, float *maxabs) {
    double s[HFL_AGG_LANES] = {0};
    enum { ROWS = HFL_AGG_CHUNK / HFL_AGG_LANES };
    if (m == HFL_AGG_CHUNK) {
        for (int t = 0; t < ROWS; t++)
            for (int l = 0; l < HFL_AGG_LANES; l++) {
                double v = x[t * HFL_AGG_LANES + l];
                s[l] += v * v;
            }
    } else {
        for (size_t i = 0; i < m; i++) {
            double v = x[i];
            s[i % HFL_AGG_LANES] += v * v;
        }
    }
    /* |x| ordered as its bits (non-negative floats order as unsigned
     * integers, as the GPU's atomicMax reads them): an integer max, which
     * vectorises where a float max with its NaN rules does not */
    uint32_t top = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t b = hfl_f32_bits(x[i]) & 0x7FFFFFFFu;
        top = b > top ? b : top;
    }
    *maxabs = hfl_bits_f32(top);
    hfl_agg_tree(s);
    return s[0];
}

static void cpu_stage(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_download(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }

static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void cpu_topk_scatter(float *dense, size_t n, const uint8_t *vals, const uint32_t *idx,
                             size_t k) {
    memset(dense, 0, n * sizeof *dense);
    for (size_t j = 0; j < k; j++)
        dense[idx[j]] = hfl_fp32_accum(0.0f, hfl_f16_to_f32((uint16_t)hfl_payload_u16(vals + 2 * j)), 1.0f);
}

AGG_CLONES static void cpu_norm(const hfl_payload *p, size_t n, double *partials, hfl_agg_norm *out) {
    (void)partials;
    float x[HFL_AGG_CHUNK];
    double total = 0.0;
    float top = 0.0f;
    for (size_t i0 = 0; i0 < n; i0 += HFL_AGG_CHUNK) {
        size_t m = n - i0 < HFL_AGG_CHUNK ? n - i0 : HFL_AGG_CHUNK;
        float mx;
        hfl_agg_decode_span(p, i0, m, x);
        total += chunk_sumsq(x, m, &mx);
        top = mx > top ? mx : top;
    }
    out->sumsq = total;
    out->maxabs = top;
}

/* A piece of acc at a time, every update added to it before the next
 * piece: the accumulator's 16 bytes an element of traffic are paid once for
 * `count` updates. ADD_PIECE values (8 KiB of acc, 4 KiB decoded) stay in
 * the first-level cache while the updates go by. */
#define ADD_PIECE 1024
AGG_CLONES static void cpu_add_fixed(const hfl_payload *p, const double *f, int count, size_t n, int64_t *acc) {
    float x[ADD_PIECE];
    for (size_t i0 = 0; i0 < n; i0 += ADD_PIECE) {
        size_t m = n - i0 < ADD_PIECE ? n - i0 : ADD_PIECE;
        int64_t *a = acc + i0;
        for (int u = 0; u < count; u++) {
            hfl_agg_decode_span(&p[u], i0, m, x);
            double fu = f[u];
            for (size_t j = 0; j < m; j++) a[j] = hfl_agg_add_fixed(a[j], fu, x[j]);
        }
    }
}

static void cpu_store_row(const hfl_payload *p, size_t n, double factor, float *row) {
    for (size_t i0 = 0; i0 < n; i0 += HFL_AGG_CHUNK) {
        size_t m = n - i0 < HFL_AGG_CHUNK ? n - i0 : HFL_AGG_CHUNK;
        hfl_agg_decode_span(p, i0, m, row + i0);
        if (factor < 1)
            for (size_t j = 0; j < m; j++) row[i0 + j] = hfl_agg_row_value(row[i0 + j], factor);
    }
}

AGG_CLONES static int cpu_finish(const int64_t *acc, size_t n, double inv, float *out) {
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        out[i] = hfl_agg_mean_value(acc[i], inv);
        finite &= hfl_agg_finite(out[i]);
    }
    return finite;
}

static int cpu_all_finite(const float *v, size_t n) {
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= hfl_agg_finite(v[i]);
    return finite;
}

static void cpu_sopt_step(const hfl_agg_sopt *o, float *x, float *m, float *v, const float *d, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_agg_sopt_elem(o, i, x, m, v, d[i]);
}

static void cpu_coordinatewise(const float *rows, int k, size_t n, int median, int trim, float *out) {
    float *col = malloc(sizeof(float) * (size_t)(k > 0 ? k : 1));
    if (!col) abort(); /* k floats: hfl_agg_hold has already held k rows of n */
    for (size_t i = 0; i < n; i++) {
        for (int r = 0; r < k; r++) col[r] = rows[(size_t)r * n + i];
        out[i] = hfl_agg_coord_rule(col, 1, k, median, trim);
    }
    free(col);
}

static void cpu_distances(const float *rows, int k, size_t n, double *partials, double *d) {
    (void)partials;
    for (int a = 0; a < k; a++) {
        d[(size_t)a * k + a] = 0.0;
        for (int b = a + 1; b < k; b++) {
            double total = 0.0, s[HFL_AGG_LANES];
            for (size_t c = 0; c < hfl_agg_chunks(n); c++) {
                for (int l = 0; l < HFL_AGG_LANES; l++)
                    s[l] = hfl_agg_dist_lane(rows + (size_t)a * n, rows + (size_t)b * n, n, c, l);
                hfl_agg_tree(s);
                total += s[0];
            }
            d[(size_t)a * k + b] = d[(size_t)b * k + a] = total;
        }
    }
}

static void cpu_pick_mean(const float *rows, int k, size_t n, const int *pick, int m, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = hfl_agg_pick_mean(rows, n, k, pick, m, i);
}

const hfl_agg_ops hfl_cpu_agg_ops = {
    .max_rule_rows = 1024,
    .stage = cpu_stage,
    .copy = cpu_copy,
    .download = cpu_download,
    .zero = cpu_zero,
    .topk_scatter = cpu_topk_scatter,
    .norm = cpu_norm,
    .add_fixed = cpu_add_fixed,
    .store_row = cpu_store_row,
    .finish = cpu_finish,
    .all_finite = cpu_all_finite,
    .sopt_step = cpu_sopt_step,
    .coordinatewise = cpu_coordinatewise,
    .distances = cpu_distances,
    .pick_mean = cpu_pick_mean,
};
