/* agg_cpu.c: the CPU backend's aggregation ops (kernels/agg.h) over host
 * memory, in the kernels/agg_hd.h shapes, so that they give the CUDA
 * kernels' bits.
 *
 * The norm goes a chunk (HFL_AGG_CHUNK values) at a time: the chunk is
 * decoded into a 16 KiB buffer by decode_span (per codec, the codec's test
 * hoisted out of the loop and a blocked codec's scale read once a block:
 * the same two fp32 operations as hfl_payload_value, checked element by
 * element in tests/kernels/test_agg_bodies.c), then its lanes summed from
 * there: lane l of a chunk is buffer[l], buffer[l + 256], ..., so the lanes'
 * sums run down the buffer's rows, a register of lanes at a time. On the
 * host the staging copy is part of that pass (stage_norm). The add goes a
 * 1,024-value piece of the accumulator at a time through every waiting
 * update; int8 is decoded inside the add's loop, the others through the
 * buffer. The hot loops are agg_simd.c's AVX-512 or AVX2 intrinsics where
 * the CPU has them, else the C loops here. */
#include <stdlib.h>
#include <string.h>

#include "kernels/agg.h"
#include "kernels/cpu/agg_cpu.h"
#include "kernels/cpu/agg_simd.h"

/* The C loops compiled for AVX-512 and AVX2 beside the SSE2 baseline, the
 * loader picking one (ifunc), as compress/codec_impl.h does: the same IEEE
 * operations in wider registers (no reassociation, no contraction: ISO C's
 * -ffp-contract=off), so the same bits. Not with clang (the sanitizer build),
 * whose clones do not link across files. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define AGG_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AGG_CLONES
#endif

/* The int4 values e = j .. j + len - 1 of a block's nibbles q, scaled: pairs
 * of a byte at a time (element 2k in the low nibble, 2k + 1 in the high one),
 * so the loop vectorises, with an odd first or last element on its own. */
static inline void decode_int4(const uint8_t *q, size_t j, size_t len, float wscale, float *o) {
    size_t t = 0;
    if (len && j % 2) o[t++] = hfl_q8_accum(0.0f, hfl_q4_hi(q[j / 2]), wscale);
    const uint8_t *b = q + (j + t) / 2;
    size_t pairs = (len - t) / 2;
    float *w = o + t;
    for (size_t k = 0; k < pairs; k++) {
        w[2 * k] = hfl_q8_accum(0.0f, hfl_q4_lo(b[k]), wscale);
        w[2 * k + 1] = hfl_q8_accum(0.0f, hfl_q4_hi(b[k]), wscale);
    }
    if ((len - t) % 2) o[len - 1] = hfl_q8_accum(0.0f, hfl_q4_lo(b[pairs]), wscale);
}

/* The sign values e = j .. j + len - 1 of a block's bits q: a byte's eight
 * at a time, with a partial first and last byte on their own. */
static inline void decode_sign(const uint8_t *q, size_t j, size_t len, float wscale, float *o) {
    size_t t = 0, e = j;
    for (; t < len && e % 8; t++, e++) o[t] = 0.0f + hfl_sign_value((q[e / 8] >> (e % 8)) & 1u, wscale);
    const uint8_t *b = q + e / 8;
    size_t bytes = (len - t) / 8;
    float *w = o + t;
    for (size_t k = 0; k < bytes; k++)
        for (int bit = 0; bit < 8; bit++) w[8 * k + (size_t)bit] = 0.0f + hfl_sign_value((b[k] >> bit) & 1u, wscale);
    for (t += 8 * bytes, e += 8 * bytes; t < len; t++, e++)
        o[t] = 0.0f + hfl_sign_value((q[e / 8] >> (e % 8)) & 1u, wscale);
}

/* A walk over a blocked payload's values, a block's segment at a time:
 * the block holding the next value and that value's index j in it (one
 * division where the walk starts, none after). */
typedef struct {
    const uint8_t *blk;
    size_t j, block, block_bytes;
} block_walk;

/* One block's segment: the block's scale, its quantised bytes q, the
 * segment's first index j in the block and its length. */
typedef struct {
    float wscale;
    const uint8_t *q;
    size_t j, len;
} block_seg;

static inline block_walk walk_from(const hfl_payload *p, size_t i) {
    size_t bytes = hfl_payload_block_bytes(p->kind, p->block);
    return (block_walk){.blk = p->body + i / p->block * bytes, .j = i % p->block, .block = p->block, .block_bytes = bytes};
}

/* The next segment, at most `most` values long; the walk moves past it. */
static inline block_seg walk_next(block_walk *w, size_t most) {
    size_t len = w->block - w->j < most ? w->block - w->j : most;
    block_seg s = {.wscale = 1.0f * hfl_payload_f32(w->blk), .q = w->blk + 4, .j = w->j, .len = len};
    w->j += len;
    if (w->j == w->block) w->blk += w->block_bytes, w->j = 0;
    return s;
}

/* out[j] = value i0 + j of p for j < m, as hfl_payload_value; inlined into
 * each clone below, so that it runs in the clone's registers. */
static inline void decode_span(const hfl_agg_simd *v, const hfl_payload *p, size_t i0, size_t m, float *out) {
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
    block_walk w = walk_from(p, i0);
    for (size_t i = i0, end = i0 + m; i < end;) {
        block_seg s = walk_next(&w, end - i);
        float *o = out + (i - i0);
        if (p->kind == HFL_PAYLOAD_INT8 && v->int8_decode)
            v->int8_decode((const int8_t *)s.q + s.j, s.len, s.wscale, o);
        else if (p->kind == HFL_PAYLOAD_INT8)
            for (size_t t = 0; t < s.len; t++) o[t] = hfl_q8_accum(0.0f, (int8_t)s.q[s.j + t], s.wscale);
        else if (p->kind == HFL_PAYLOAD_INT4)
            decode_int4(s.q, s.j, s.len, s.wscale, o);
        else
            decode_sign(s.q, s.j, s.len, s.wscale, o);
        i += s.len;
    }
}

AGG_CLONES void hfl_agg_decode_span(const hfl_payload *p, size_t i0, size_t m, float *out) {
    decode_span(hfl_agg_simd_get(), p, i0, m, out);
}

/* One chunk's sum of squares of x[0..m) (m <= HFL_AGG_CHUNK; x has room for
 * a whole chunk) in the lanes' shape, with its largest |x| into *maxabs.
 * The lanes go a register of them at a time down the chunk's 16 rows (the
 * same additions, in the same t order, as hfl_agg_norm_lane): agg_simd.c's
 * loop, or here GROUP lanes at a time. */
static inline double chunk_sumsq(const hfl_agg_simd *v, float *x, size_t m, float *maxabs) {
    enum { ROWS = HFL_AGG_CHUNK / HFL_AGG_LANES, GROUP = 32 };
    double s[HFL_AGG_LANES];
    if (v->chunk_lanes) {
        /* a short chunk padded with +0: a lane's sum of squares gains
         * +0 * +0 terms after its last value, and s + +0 is s (s >= +0),
         * the largest |x| nothing */
        memset(x + m, 0, (HFL_AGG_CHUNK - m) * sizeof *x);
        *maxabs = hfl_bits_f32(v->chunk_lanes(x, s));
        hfl_agg_tree(s);
        return s[0];
    }
    if (m == HFL_AGG_CHUNK) {
        for (int l0 = 0; l0 < HFL_AGG_LANES; l0 += GROUP) {
            double g[GROUP] = {0};
            for (int t = 0; t < ROWS; t++)
                for (int l = 0; l < GROUP; l++) {
                    double d = x[t * HFL_AGG_LANES + l0 + l];
                    g[l] += d * d;
                }
            memcpy(s + l0, g, sizeof g);
        }
    } else {
        memset(s, 0, sizeof s);
        for (size_t i = 0; i < m; i++) {
            double d = x[i];
            s[i % HFL_AGG_LANES] += d * d;
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
        dense[idx[j]] = hfl_payload_topk_value(vals, j);
}

/* 1 when int8 values i0 .. i0 + m - 1 of p, or the scale of a block that
 * starts among them, are what int8's decoder refuses: the predicates of
 * compress/payload_hd.h that codec_int8.c's check_range applies too. The
 * spans of a pass cover [0, n), so every block's scale is checked once.
 * Branch-free over the bytes, so the scan vectorises. */
static int int8_refused(const hfl_payload *p, size_t i0, size_t m) {
    size_t bb = hfl_payload_block_bytes(HFL_PAYLOAD_INT8, p->block);
    uint8_t bad = 0;
    for (size_t i = i0, end = i0 + m; i < end;) {
        size_t k = i / p->block, j = i % p->block, len = p->block - j;
        if (len > end - i) len = end - i;
        const uint8_t *blk = p->body + k * bb, *q = blk + 4 + j;
        if (j == 0) {
            float s = hfl_payload_f32(blk);
            bad |= (uint8_t)!hfl_payload_scale_ok(s, HFL_PAYLOAD_INT8_MAX_SCALE);
        }
        for (size_t t = 0; t < len; t++) bad |= (uint8_t)hfl_payload_int8_bad(q[t]);
        i += len;
    }
    return bad != 0;
}

/* The norm pass over p's n values, a chunk at a time. With `fill`
 * (stage_norm), p's body (`bytes` of it) is copied to fill as it goes: a
 * chunk's bytes right after the chunk is decoded, so that the copy and the
 * decode share one trip through the cache; past stream_bytes of a batch (HFL_AGG_MAX_BATCH such
 * bodies) with non-temporal stores, since the flush will find them in
 * memory anyway. */
AGG_CLONES static void norm_pass(const hfl_payload *p, size_t n, uint8_t *fill, size_t bytes, hfl_agg_norm *out) {
    const hfl_agg_simd *v = hfl_agg_simd_get();
    int stream = fill && v->stream_copy && bytes * HFL_AGG_MAX_BATCH > v->stream_bytes;
    int check = fill && p->kind == HFL_PAYLOAD_INT8, refused = 0;
    float x[HFL_AGG_CHUNK];
    double total = 0.0;
    float top = 0.0f;
    size_t copied = 0;
    for (size_t i0 = 0; i0 < n; i0 += HFL_AGG_CHUNK) {
        size_t m = n - i0 < HFL_AGG_CHUNK ? n - i0 : HFL_AGG_CHUNK;
        float mx;
        decode_span(v, p, i0, m, x);
        if (check) refused |= int8_refused(p, i0, m);
        total += chunk_sumsq(v, x, m, &mx);
        top = mx > top ? mx : top;
        if (fill) {
            size_t upto = hfl_payload_bytes_upto(p, i0 + m);
            if (stream) v->stream_copy(fill + copied, p->body + copied, upto - copied);
            else memcpy(fill + copied, p->body + copied, upto - copied);
            copied = upto;
        }
    }
    if (fill && bytes > copied) memcpy(fill + copied, p->body + copied, bytes - copied);
    out->sumsq = total;
    out->maxabs = top;
    out->refused = refused;
}

static void cpu_norm(const hfl_payload *p, size_t n, double *partials, hfl_agg_norm *out) {
    (void)partials;
    norm_pass(p, n, NULL, 0, out);
}

static void cpu_stage_norm(void *dst, const hfl_payload *src, size_t bytes, size_t n, double *partials,
                           hfl_agg_norm *out) {
    (void)partials;
    norm_pass(src, n, dst, bytes, out);
}

/* a[j] = hfl_agg_add_fixed(a[j], f, value i0 + j of p), j < m, update u of
 * a pass of count from zero or not: int8 decoded inside the add's loop, the
 * others through x. agg_simd.c's loops leave the rounding's subtraction to
 * the pass's first update (agg_simd.h's int8_add), the C loop makes it. */
static inline void add_span(const hfl_agg_simd *v, const hfl_payload *p, size_t i0, size_t m, double f, int64_t *a,
                            int u, int count, int from_zero, float *x) {
    const int from0 = from_zero && u == 0;
    int mode = u > 0 ? HFL_AGG_ADD_REST : from_zero ? HFL_AGG_ADD_ZERO : HFL_AGG_ADD_FIRST;
    int64_t bias = hfl_agg_simd_bias(count);
    if (p->kind == HFL_PAYLOAD_INT8 && v->int8_add) {
        block_walk w = walk_from(p, i0);
        for (size_t i = i0, end = i0 + m; i < end;) {
            block_seg s = walk_next(&w, end - i);
            v->int8_add((const int8_t *)s.q + s.j, s.len, s.wscale, f, a + (i - i0), mode, bias);
            i += s.len;
        }
        return;
    }
    decode_span(v, p, i0, m, x);
    if (v->float_add) v->float_add(x, m, f, a, mode, bias);
    else
        for (size_t j = 0; j < m; j++) a[j] = hfl_agg_add_fixed(from0 ? 0 : a[j], f, x[j]);
}

AGG_CLONES static int finish_c(const int64_t *acc, size_t n, double inv, float *out) {
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        out[i] = hfl_agg_mean_value(acc[i], inv);
        finite &= hfl_agg_finite(out[i]);
    }
    return finite;
}

/* A piece of acc at a time, every update added to it (and the piece's mean
 * taken) before the next piece: the accumulator's 16 bytes an element of
 * traffic are paid once for `count` updates, 8 without its old contents
 * (from_zero), and the mean reads no acc of its own. ADD_PIECE values
 * (16 KiB of acc, 8 KiB decoded) stay in the first-level cache while the
 * updates go by. Past stream_bytes, a piece from zero is summed in
 * a buffer and streamed out, and so is the mean: no line of acc or mean is
 * read before it is written. */
#define ADD_PIECE 2048
AGG_CLONES static int cpu_add_fixed_pass(const hfl_payload *p, const double *f, int count, size_t n, int64_t *acc,
                                         int from_zero, double inv, float *mean) {
    const hfl_agg_simd *v = hfl_agg_simd_get();
    size_t written = n * (sizeof *acc + (mean ? sizeof *mean : 0));
    int stream = v->stream_copy && written > v->stream_bytes;
    float x[ADD_PIECE], out[ADD_PIECE];
    int64_t sum[ADD_PIECE];
    int finite = 1;
    for (size_t i0 = 0; i0 < n; i0 += ADD_PIECE) {
        size_t m = n - i0 < ADD_PIECE ? n - i0 : ADD_PIECE;
        int64_t *a = stream && from_zero ? sum : acc + i0;
        if (from_zero && count == 0) memset(a, 0, m * sizeof *a);
        for (int u = 0; u < count; u++) add_span(v, &p[u], i0, m, f[u], a, u, count, from_zero, x);
        if (a == sum) v->stream_copy(acc + i0, sum, m * sizeof *a);
        if (!mean) continue;
        float *o = stream ? out : mean + i0;
        finite &= v->finish ? v->finish(a, m, inv, o) : finish_c(a, m, inv, o);
        if (o == out) v->stream_copy(mean + i0, out, m * sizeof *o);
    }
    return finite;
}

static void cpu_add_fixed(const hfl_payload *p, const double *f, int count, size_t n, int64_t *acc) {
    cpu_add_fixed_pass(p, f, count, n, acc, 0, 1.0, NULL);
}

static void cpu_store_row(const hfl_payload *p, size_t n, double factor, float *row) {
    for (size_t i0 = 0; i0 < n; i0 += HFL_AGG_CHUNK) {
        size_t m = n - i0 < HFL_AGG_CHUNK ? n - i0 : HFL_AGG_CHUNK;
        hfl_agg_decode_span(p, i0, m, row + i0);
        if (factor < 1)
            for (size_t j = 0; j < m; j++) row[i0 + j] = hfl_agg_row_value(row[i0 + j], factor);
    }
}

static int cpu_finish(const int64_t *acc, size_t n, double inv, float *out) {
    const hfl_agg_simd *v = hfl_agg_simd_get();
    return v->finish ? v->finish(acc, n, inv, out) : finish_c(acc, n, inv, out);
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
    .stage_norm = cpu_stage_norm,
    .decode = hfl_agg_decode_span,
    .add_fixed = cpu_add_fixed,
    .add_fixed_pass = cpu_add_fixed_pass,
    .store_row = cpu_store_row,
    .finish = cpu_finish,
    .all_finite = cpu_all_finite,
    .sopt_step = cpu_sopt_step,
    .coordinatewise = cpu_coordinatewise,
    .distances = cpu_distances,
    .pick_mean = cpu_pick_mean,
};
