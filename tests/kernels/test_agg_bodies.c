/* test_agg_bodies.c: the aggregation's shared bodies (compress/payload_hd.h,
 * kernels/agg_hd.h) on the CPU: what the GPU's kernels compute, checked
 * here before any GPU runs them.
 *
 * DECODE. For every codec (block sizes that do and do not divide a chunk, n
 * not a multiple of anything), hfl_payload_value at every index, the CPU's
 * chunk decoder (hfl_agg_decode_span) and topk's expand-and-scatter give the
 * bits compress/'s decode_accumulate leaves in a zeroed vector with weight 1,
 * which is what the aggregator decoded before (memcmp).
 * OPS. The CPU backend's aggregation ops against agg_twin.h's CPU twin of the
 * CUDA kernels (the same sequence of operations as agg.cu, thread by
 * thread), byte for byte: the norm and its largest value, the fixed-point
 * add, a clipped row, the finish and its finite flag, the server optimizers,
 * the coordinate-wise rules (ties, signed zeros, k 1 to 9) and Krum's
 * distances and mean; the host's fused passes (stage_norm against a copy
 * and the twin's norm, add_fixed_pass from a garbage accumulator taken as
 * zero and with the mean riding it, against the twin's zero, add and
 * finish). The decode and the ops run at every instruction-set level of
 * kernels/cpu/agg_simd.h this CPU has (C, AVX2, AVX-512), with and without
 * the non-temporal writes of large passes.
 * ORACLES, independent of the bodies: the fixed-point rounding against
 * llrint (round to nearest even) on random and tie values; the norm and the
 * distances within 1e-12 relative of a long double sum; a coordinate's
 * median and trimmed mean against a qsort of the values (stable by row). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/codec.h"
#include "kernels/agg.h"
#include "kernels/cpu/agg_cpu.h"
#include "kernels/cpu/agg_simd.h"
#include "kernels/philox.h"
#include "tests/check.h"
#include "tests/kernels/agg_twin.h"
#include "util/util.h"

static float rnd_val(uint32_t tensor, size_t i, float amp) {
    float u = hfl_u01(hfl_philox_u32(77, 0, 0, 0, tensor, i));
    if (i % 13 == 4) return 0.0f;
    if (i % 29 == 7) return -0.0f;
    return amp * (2.0f * u - 1.0f);
}

/* ---- DECODE ---- */

static void test_decode(const char *name, size_t n, uint32_t block) {
    char err[HFL_ERR_LEN];
    const hfl_codec *c = hfl_codec_find(name, err);
    REQUIRE_MSG(c != NULL, "%s", err);
    float *x = hfl_malloc(sizeof(float) * n), *ref = hfl_calloc(n, sizeof(float));
    float *hd = hfl_malloc(sizeof(float) * n), *span = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = rnd_val(1, i, 3.0f);
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(c, n, block));
    hfl_rng_key key = {5, 1, 2, 0};
    size_t len = hfl_codec_encode(c, x, NULL, n, block, &key, 1, buf);
    REQUIRE(hfl_codec_decode_accumulate(c, buf, len, n, 1.0f, ref, 1, err) == 0);
    if (c->fraction > 0) { /* topk: expand, scatter, read as fp32 */
        uint32_t *idx = hfl_malloc(sizeof(uint32_t) * (hfl_codec_topk_entries(c, n) + 1));
        size_t k;
        const uint8_t *vals;
        REQUIRE(hfl_codec_topk_expand(c, buf, len, n, idx, &k, &vals, err) == 0);
        hfl_cpu_agg_ops.topk_scatter(span, n, vals, idx, k);
        CHECK_MSG(memcmp(span, ref, sizeof(float) * n) == 0, "%s n=%zu: scatter differs from decode", name, n);
        twin_topk_scatter(hd, n, vals, idx, k);
        CHECK_MSG(memcmp(hd, ref, sizeof(float) * n) == 0, "%s n=%zu: the twin's scatter differs", name, n);
        free(idx);
    } else {
        uint32_t hblock;
        REQUIRE(hfl_codec_validate(c, buf, len, n, &hblock, err) == 0);
        hfl_payload p = {.kind = c->id, .block = hblock, .body = buf + HFL_CODEC_HEADER_BYTES};
        for (size_t i = 0; i < n; i++) hd[i] = hfl_payload_value(&p, i);
        for (size_t i0 = 0; i0 < n; i0 += 1000) hfl_agg_decode_span(&p, i0, n - i0 < 1000 ? n - i0 : 1000, span + i0);
        CHECK_MSG(memcmp(hd, ref, sizeof(float) * n) == 0, "%s n=%zu block %u: hfl_payload_value differs from decode",
                  name, n, block);
        CHECK_MSG(memcmp(span, ref, sizeof(float) * n) == 0, "%s n=%zu block %u: decode_span differs from decode",
                  name, n, block);
    }
    free(x), free(ref), free(hd), free(span), free(buf);
}

/* ---- OPS ---- */

/* What the host's fused passes give for payload p (body_bytes of body)
 * equals the twin's ops run one after the other. */
static void test_host_passes(const hfl_payload *p, size_t body_bytes, size_t n, int wide, const char *name) {
    const hfl_agg_ops *cpu = &hfl_cpu_agg_ops, *twin = agg_twin()->agg;
    double *partials = hfl_malloc(sizeof(double) * (hfl_agg_chunks(n) + 1));
    uint8_t *slot = hfl_malloc(body_bytes + 1);
    memset(slot, 0xA5, body_bytes + 1);
    hfl_agg_norm a, b;
    cpu->stage_norm(slot, p, body_bytes, n, partials, &a);
    twin->norm(p, n, partials, &b);
    CHECK_MSG(memcmp(slot, p->body, body_bytes) == 0 && slot[body_bytes] == 0xA5,
              "%s n=%zu: stage_norm's copy is not the body's %zu bytes", name, n, body_bytes);
    CHECK_MSG(memcmp(&a.sumsq, &b.sumsq, sizeof a.sumsq) == 0 && memcmp(&a.maxabs, &b.maxabs, sizeof a.maxabs) == 0,
              "%s n=%zu: stage_norm's norm %.17g / %g, the twin's %.17g / %g", name, n, a.sumsq, (double)a.maxabs,
              b.sumsq, (double)b.maxabs);
    int64_t *acc_a = hfl_malloc(sizeof(int64_t) * n), *acc_b = hfl_malloc(sizeof(int64_t) * n);
    float *mean_a = hfl_malloc(sizeof(float) * n), *mean_b = hfl_malloc(sizeof(float) * n);
    double f[3] = {ldexp(0.37, wide ? 37 : 47), ldexp(-0.11, wide ? 37 : 47), ldexp(0.5, wide ? 37 : 47)};
    hfl_payload three[3] = {*p, *p, *p};
    double inv = ldexp(1.0, wide ? -37 : -47) / 3.0;
    for (int count = 0; count <= 3; count += 3)
        for (int with_mean = 0; with_mean < 2; with_mean++) {
            for (size_t i = 0; i < n; i++) acc_a[i] = (int64_t)hfl_philox_u32(4, 0, 0, 0, 0, i) << 20; /* garbage */
            twin->zero(acc_b, sizeof(int64_t) * n);
            twin->add_fixed(three, f, count, n, acc_b);
            int fb = with_mean ? twin->finish(acc_b, n, inv, mean_b) : 1;
            int fa = cpu->add_fixed_pass(three, f, count, n, acc_a, 1, inv, with_mean ? mean_a : NULL);
            CHECK_MSG(memcmp(acc_a, acc_b, sizeof(int64_t) * n) == 0 && fa == fb &&
                          (!with_mean || memcmp(mean_a, mean_b, sizeof(float) * n) == 0),
                      "%s n=%zu: add_fixed_pass from zero, %d updates, mean %d, differs from zero, add_fixed, finish",
                      name, n, count, with_mean);
            /* and onto what is there */
            twin->add_fixed(three, f, count, n, acc_b);
            fb = twin->finish(acc_b, n, inv, mean_b);
            fa = cpu->add_fixed_pass(three, f, count, n, acc_a, 0, inv, mean_a);
            CHECK_MSG(memcmp(acc_a, acc_b, sizeof(int64_t) * n) == 0 && fa == fb &&
                          memcmp(mean_a, mean_b, sizeof(float) * n) == 0,
                      "%s n=%zu: add_fixed_pass onto a sum, %d updates, differs from add_fixed, finish", name, n, count);
        }
    free(partials), free(slot), free(acc_a), free(acc_b), free(mean_a), free(mean_b);
}

/* One add pass over updates of several codecs (int8 decoded inside the
 * add's loop, the others through the buffer, the rounding's subtraction
 * made once for all of them) equals the twin's adds one after another. */
static void test_mixed_pass(void) {
    enum { N = 10007, K = 4 };
    static const char *const names[K] = {"fp16", "int8", "sign", "int4"};
    char err[HFL_ERR_LEN];
    float *x = hfl_malloc(sizeof(float) * N);
    uint8_t *buf[K];
    hfl_payload p[K];
    double f[K];
    for (int k = 0; k < K; k++) {
        const hfl_codec *c = hfl_codec_find(names[k], err);
        for (size_t i = 0; i < N; i++) x[i] = rnd_val(20 + (uint32_t)k, i, 0.5f);
        buf[k] = hfl_malloc(hfl_codec_max_bytes(c, N, 100));
        hfl_rng_key key = {7, (uint32_t)k, 2, 0};
        size_t len = hfl_codec_encode(c, x, NULL, N, 100, &key, 1, buf[k]);
        uint32_t block;
        REQUIRE(hfl_codec_validate(c, buf[k], len, N, &block, err) == 0);
        p[k] = (hfl_payload){.kind = c->id, .block = block, .body = buf[k] + HFL_CODEC_HEADER_BYTES};
        f[k] = ldexp(0.3 - 0.2 * k, 47);
    }
    int64_t *acc_a = hfl_malloc(sizeof(int64_t) * N), *acc_b = hfl_malloc(sizeof(int64_t) * N);
    float *mean_a = hfl_malloc(sizeof(float) * N), *mean_b = hfl_malloc(sizeof(float) * N);
    for (int from_zero = 0; from_zero < 2; from_zero++) {
        for (size_t i = 0; i < N; i++) acc_a[i] = acc_b[i] = (int64_t)hfl_philox_u32(5, 0, 0, 0, 0, i) << 21;
        if (from_zero) agg_twin()->agg->zero(acc_b, sizeof(int64_t) * N);
        agg_twin()->agg->add_fixed(p, f, K, N, acc_b);
        int fb = agg_twin()->agg->finish(acc_b, N, ldexp(1.0, -47), mean_b);
        int fa = hfl_cpu_agg_ops.add_fixed_pass(p, f, K, N, acc_a, from_zero, ldexp(1.0, -47), mean_a);
        CHECK_MSG(fa == fb && memcmp(acc_a, acc_b, sizeof(int64_t) * N) == 0 &&
                      memcmp(mean_a, mean_b, sizeof(float) * N) == 0,
                  "a pass over fp16, int8, sign and int4 updates (from zero %d) differs from the twin's", from_zero);
    }
    for (int k = 0; k < K; k++) free(buf[k]);
    free(x), free(acc_a), free(acc_b), free(mean_a), free(mean_b);
}

/* The same op on the CPU's and the twin's ops gives the same bytes. With
 * `wide`, the values' exponents spread over 2^-10 .. 2^10, so that double
 * sums of their squares round and the order of every addition shows. */
static void test_ops_payload(const char *name, size_t n, uint32_t block, int wide) {
    char err[HFL_ERR_LEN];
    const hfl_codec *c = hfl_codec_find(name, err);
    float *x = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        x[i] = wide ? ldexpf(rnd_val(2, i, 1.0f), (int)(hfl_philox_u32(2, 1, 0, 0, 0, i) % 21) - 10)
                    : rnd_val(2, i, 0.5f);
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(c, n, block));
    hfl_rng_key key = {6, 1, 2, 0};
    size_t len = hfl_codec_encode(c, x, NULL, n, block, &key, 1, buf);
    uint32_t hblock;
    REQUIRE(hfl_codec_validate(c, buf, len, n, &hblock, err) == 0);
    hfl_payload p = {.kind = c->id, .block = hblock, .body = buf + HFL_CODEC_HEADER_BYTES};
    const hfl_agg_ops *cpu = &hfl_cpu_agg_ops, *twin = agg_twin()->agg;
    double *partials = hfl_malloc(sizeof(double) * (hfl_agg_chunks(n) + 1));
    hfl_agg_norm a, b;
    cpu->norm(&p, n, partials, &a);
    twin->norm(&p, n, partials, &b);
    CHECK_MSG(memcmp(&a.sumsq, &b.sumsq, sizeof a.sumsq) == 0 && memcmp(&a.maxabs, &b.maxabs, sizeof a.maxabs) == 0,
              "%s n=%zu: norm %.17g / %g on the CPU, %.17g / %g on the twin", name, n, a.sumsq, (double)a.maxabs,
              b.sumsq, (double)b.maxabs);
    long double ref = 0;
    float top = 0;
    for (size_t i = 0; i < n; i++) {
        float v = hfl_payload_value(&p, i);
        ref += (long double)v * v;
        top = fabsf(v) > top ? fabsf(v) : top;
    }
    CHECK_MSG(fabsl((long double)a.sumsq - ref) <= 1e-12L * ref && a.maxabs == top,
              "%s n=%zu: norm %.17g against the long double sum %.17Lg", name, n, a.sumsq, ref);
    int64_t *acc_a = hfl_malloc(sizeof(int64_t) * n), *acc_b = hfl_malloc(sizeof(int64_t) * n);
    for (size_t i = 0; i < n; i++) acc_a[i] = acc_b[i] = (int64_t)hfl_philox_u32(3, 0, 0, 0, 0, i) - (1 << 30);
    double f[2] = {ldexp(0.37, wide ? 38 : 48), ldexp(-0.11, wide ? 38 : 48)}; /* f * |v| below 2^51 */
    hfl_payload two[2] = {p, p};
    cpu->add_fixed(two, f, 2, n, acc_a);
    twin->add_fixed(two, f, 2, n, acc_b);
    CHECK_MSG(memcmp(acc_a, acc_b, sizeof(int64_t) * n) == 0, "%s n=%zu: add_fixed differs", name, n);
    float *row_a = hfl_malloc(sizeof(float) * n), *row_b = hfl_malloc(sizeof(float) * n);
    for (int clip = 0; clip < 2; clip++) {
        cpu->store_row(&p, n, clip ? 0.7 : 1.0, row_a);
        twin->store_row(&p, n, clip ? 0.7 : 1.0, row_b);
        CHECK_MSG(memcmp(row_a, row_b, sizeof(float) * n) == 0, "%s n=%zu: store_row differs", name, n);
    }
    int fa = cpu->finish(acc_a, n, ldexp(1.0, -48), row_a), fb = twin->finish(acc_b, n, ldexp(1.0, -48), row_b);
    CHECK_MSG(fa == fb && fa == 1 && memcmp(row_a, row_b, sizeof(float) * n) == 0, "%s n=%zu: finish differs", name, n);
    acc_a[n / 2] = INT64_MAX;
    CHECK_MSG(cpu->finish(acc_a, n, 1e300, row_a) == 0 && twin->finish(acc_a, n, 1e300, row_b) == 0,
              "%s: an infinite mean is not flagged", name);
    test_host_passes(&p, len - HFL_CODEC_HEADER_BYTES, n, wide, name);
    free(x), free(buf), free(partials), free(acc_a), free(acc_b), free(row_a), free(row_b);
}

/* The norm's order of additions, made visible: fp32 probes whose only
 * non-zero values sit in one lane (the lane's t order decides the rounding),
 * one per lane (the tree's shape decides it) or one per chunk (the chunk
 * order decides it), with magnitudes over 2^-12 .. 2^12 so that the double
 * sums round. 100 probes of each: an op that adds in another order than
 * agg_hd.h's gives other bits on some of them. */
static void test_norm_order(void) {
    enum { PROBES = 100, N = 3 * HFL_AGG_CHUNK + 5 };
    float *x = hfl_malloc(sizeof(float) * N);
    double *partials = hfl_malloc(sizeof(double) * (hfl_agg_chunks(N) + 1));
    int bad[3] = {0, 0, 0};
    for (int shape = 0; shape < 3; shape++)
        for (uint32_t probe = 0; probe < PROBES; probe++) {
            memset(x, 0, sizeof(float) * N);
            int count = shape == 0 ? HFL_AGG_CHUNK / HFL_AGG_LANES : shape == 1 ? HFL_AGG_LANES : 4;
            for (int j = 0; j < count; j++) {
                size_t at = shape == 0 ? (size_t)j * HFL_AGG_LANES : shape == 1 ? (size_t)j : (size_t)j * HFL_AGG_CHUNK;
                uint32_t u = hfl_philox_u32(10, (uint32_t)shape, probe, 0, 0, (uint64_t)j);
                x[at] = ldexpf(1.0f + (float)(u >> 8) / 16777216.0f, (int)(u % 25) - 12);
            }
            hfl_payload p = {.kind = HFL_PAYLOAD_FP32, .block = 0, .body = (const uint8_t *)x};
            hfl_agg_norm a, b;
            hfl_cpu_agg_ops.norm(&p, N, partials, &a);
            agg_twin()->agg->norm(&p, N, partials, &b);
            bad[shape] += memcmp(&a.sumsq, &b.sumsq, sizeof a.sumsq) != 0;
        }
    CHECK_MSG(!bad[0] && !bad[1] && !bad[2], "norm: the CPU and the twin differ on %d lane, %d tree and %d chunk probes "
              "of %d each", bad[0], bad[1], bad[2], PROBES);
    free(x), free(partials);
}

static void test_fixed_oracle(void) {
    int bad = 0;
    for (uint32_t i = 0; i < 200000; i++) {
        double y = ldexp(2.0 * hfl_u01(hfl_philox_u32(9, 0, 0, 0, 0, i)) - 1.0, (int)(i % 51));
        if (i % 5 == 0) y = floor(y) + 0.5; /* ties go to even */
        bad += hfl_agg_round_fixed(y) != (int64_t)llrint(y);
    }
    CHECK_MSG(bad == 0, "%d of 200000 roundings differ from llrint", bad);
    bad = 0; /* the int64 to double of the finish: the C conversion's bits */
    for (uint32_t i = 0; i < 200000; i++) {
        uint64_t u = (uint64_t)hfl_philox_u32(9, 1, 0, 0, 0, i) << 32 | hfl_philox_u32(9, 2, 0, 0, 0, i);
        int64_t x = (int64_t)(u >> (i % 40)) * (i % 2 ? -1 : 1);
        if (i < 4) x = i == 0 ? INT64_MIN : i == 1 ? INT64_MAX : i == 2 ? -1 : ((int64_t)1 << 53) + 1;
        double want = (double)x, got = hfl_agg_i64_to_f64(x);
        bad += memcmp(&want, &got, sizeof want) != 0;
    }
    CHECK_MSG(bad == 0, "%d of 200000 int64 to double conversions differ from C's", bad);
}

static void test_sopt(void) {
    enum { N = 1000 };
    for (int kind = HFL_AGG_SOPT_FEDAVG; kind <= HFL_AGG_SOPT_FEDYOGI; kind++) {
        hfl_agg_sopt o = {.kind = kind, .lr = 0.03, .beta1 = 0.9, .beta2 = 0.99, .tau = 1e-3};
        float x[2][N], m[2][N], v[2][N], d[N];
        for (int i = 0; i < N; i++) {
            x[0][i] = x[1][i] = rnd_val(4, i, 1);
            m[0][i] = m[1][i] = rnd_val(5, i, 0.1f);
            v[0][i] = v[1][i] = fabsf(rnd_val(6, i, 0.01f));
            d[i] = rnd_val(7, i, 0.2f);
        }
        for (int step = 0; step < 3; step++) {
            hfl_cpu_agg_ops.sopt_step(&o, x[0], m[0], v[0], d, N);
            agg_twin()->agg->sopt_step(&o, x[1], m[1], v[1], d, N);
        }
        CHECK_MSG(!memcmp(x[0], x[1], sizeof x[0]) && !memcmp(m[0], m[1], sizeof m[0]) && !memcmp(v[0], v[1], sizeof v[0]),
                  "server optimizer %d differs", kind);
    }
}

static int cmp_ranked(const void *a, const void *b) {
    const float *x = a, *y = b; /* value, then row (stable) */
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* out[i] by qsort of (value, row) pairs, summed in sorted order. */
static float coord_oracle(const float *rows, int k, size_t n, size_t i, int median, int trim) {
    float pairs[2 * 16];
    for (int r = 0; r < k; r++) pairs[2 * r] = rows[(size_t)r * n + i], pairs[2 * r + 1] = (float)r;
    qsort(pairs, (size_t)k, 2 * sizeof(float), cmp_ranked);
    if (median) return k % 2 ? pairs[2 * (k / 2)] : (float)(0.5 * ((double)pairs[2 * (k / 2 - 1)] + pairs[2 * (k / 2)]));
    double s = 0;
    for (int j = trim; j < k - trim; j++) s += pairs[2 * j];
    return (float)(s / (k - 2 * trim));
}

static void test_rules(void) {
    enum { N = 5000 };
    for (int k = 1; k <= 9; k++) {
        float *rows = hfl_malloc(sizeof(float) * k * N), *a = hfl_malloc(sizeof(float) * N), *b = hfl_malloc(sizeof(float) * N);
        for (int r = 0; r < k; r++)
            for (size_t i = 0; i < N; i++) { /* a third coarse: ties, and zeros of both signs */
                float v = (float)((int)(hfl_philox_u32(8, (uint32_t)r, 0, 0, 0, i) % 5) - 2);
                if (v == 0.0f && (r + i) % 2) v = -0.0f;
                rows[(size_t)r * N + i] = i % 3 ? rnd_val(8 + (uint32_t)r, i, 1) : v;
            }
        for (int mode = 0; mode < 3; mode++) {
            int median = mode == 0, trim = mode == 2 ? k / 4 : 0;
            hfl_cpu_agg_ops.coordinatewise(rows, k, N, median, trim, a);
            agg_twin()->agg->coordinatewise(rows, k, N, median, trim, b);
            CHECK_MSG(memcmp(a, b, sizeof(float) * N) == 0, "coordinatewise k %d mode %d: CPU and twin differ", k, mode);
            int bad = 0;
            for (size_t i = 0; i < N; i++) {
                float want = coord_oracle(rows, k, N, i, median, trim);
                bad += memcmp(&a[i], &want, sizeof want) != 0;
            }
            CHECK_MSG(bad == 0, "coordinatewise k %d mode %d: %d coordinates differ from the sorted oracle", k, mode, bad);
        }
        if (k >= 2) {
            double *da = hfl_malloc(sizeof(double) * k * k), *db = hfl_malloc(sizeof(double) * k * k);
            double *partials = hfl_malloc(sizeof(double) * (size_t)k * k * (hfl_agg_chunks(N) + 1));
            hfl_cpu_agg_ops.distances(rows, k, N, partials, da);
            agg_twin()->agg->distances(rows, k, N, partials, db);
            CHECK_MSG(memcmp(da, db, sizeof(double) * k * k) == 0, "distances k %d: CPU and twin differ", k);
            for (int i = 0; i < k; i++)
                for (int j = 0; j < k; j++) {
                    long double s = 0;
                    for (size_t x = 0; x < N; x++) {
                        long double d = (long double)rows[(size_t)i * N + x] - rows[(size_t)j * N + x];
                        s += d * d;
                    }
                    CHECK_MSG(fabsl(da[i * k + j] - s) <= 1e-12L * s, "distance %d %d: %.17g against %.17Lg", i, j,
                              da[i * k + j], s);
                }
            int pick[9] = {0};
            for (int r = 0; r < k; r += 2) pick[r] = 1;
            hfl_cpu_agg_ops.pick_mean(rows, k, N, pick, (k + 1) / 2, a);
            agg_twin()->agg->pick_mean(rows, k, N, pick, (k + 1) / 2, b);
            CHECK_MSG(memcmp(a, b, sizeof(float) * N) == 0, "pick_mean k %d differs", k);
            free(da), free(db), free(partials);
        }
        free(rows), free(a), free(b);
    }
}

/* Every codec's decode and ops at the current instruction-set level. */
static void test_level(void) {
    static const char *const dense[] = {"fp32", "fp16", "bf16"};
    static const size_t sizes[] = {1, 4095, 4097, 10007};
    static const uint32_t blocks[] = {1, 7, 100, 256, 1000, 4096, 5000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        for (int d = 0; d < 3; d++) test_decode(dense[d], sizes[s], 0);
        for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++) {
            test_decode("int8", sizes[s], blocks[b]);
            test_decode("int4", sizes[s], blocks[b]);
            test_decode("sign", sizes[s], blocks[b]);
        }
        test_decode("topk:0.1", sizes[s], 0);
        test_decode("topk:1", sizes[s], 0);
    }
    static const char *const all[] = {"fp32", "fp16", "bf16", "int8", "int4", "sign"};
    for (int c = 0; c < 6; c++) {
        test_ops_payload(all[c], 4096 * 3, 256, 0);
        test_ops_payload(all[c], 10007, 1000, 0);
        test_ops_payload(all[c], 10007, 13, 0);
    }
    test_ops_payload("fp32", 10007, 0, 1);
    test_mixed_pass();
    test_norm_order();
}

static void case_levels(void) {
    static const char *const names[] = {"C", "AVX2", "AVX-512"};
    for (int level = HFL_AGG_SIMD_C; level <= HFL_AGG_SIMD_AVX512; level++)
        for (int stream = 0; stream < 2; stream++) {
            if (hfl_agg_simd_force(level, stream ? 0 : HFL_AGG_STREAM_BYTES) != 0) {
                printf("level %s: not on this CPU, not run\n", names[level]);
                break;
            }
            test_level();
            printf("level %s, non-temporal writes %s: done\n", names[level], stream ? "always" : "past 32 MiB");
            if (level == HFL_AGG_SIMD_C) break; /* no stream_copy at C */
        }
    printf("decode: every codec, 4 sizes, 7 block sizes: hfl_payload_value, decode_span and topk's scatter "
           "equal decode_accumulate\n");
    printf("ops: norm, stage_norm, add_fixed, add_fixed_pass, store_row and finish equal the CUDA twin's bytes for "
           "every codec\n");
}

static void case_rules(void) {
    test_rules();
    printf("oracles: fixed-point rounding = llrint; norm and distances within 1e-12 of long double; "
           "coordinate-wise rules = a stable qsort; server optimizers and Krum's mean = the twin's\n");
}

static const check_case cases[] = {
    {"levels", case_levels},
    {"fixed_oracle", test_fixed_oracle},
    {"sopt", test_sopt},
    {"rules", case_rules},
};

int main(int argc, char **argv) {
    return check_run("test_agg_bodies", cases, CHECK_CASES(cases), argc, argv);
}
