/* agg_simd.c: the aggregator's hot loops in AVX-512 (F and DQ) and AVX2
 * intrinsics (see agg_simd.h), and the run-time choice between them.
 *
 * Every loop spells out agg_hd.h's operations in its order: the int8 decode
 * 0.0f + wscale * (float)q (compress/quant_hd.h's hfl_q8_accum), f * (double)v,
 * + 1.5 * 2^52 and the integer read-off of hfl_agg_round_fixed, the 64-bit
 * adds (the read-off's subtraction made once a pass, see agg_simd.h's
 * int8_add: integer sums in any order are the same bits); the lanes' sums of
 * squares (double)x * (double)x added in t order;
 * the finish's (double)acc * inv to float. Multiplications and additions
 * are separate intrinsics, and the build is ISO C (-ffp-contract=off), so
 * none is fused. A loop's last few elements go through the agg_hd.h body
 * itself. int64 to double in the AVX-512 finish is vcvtqq2pd, the C
 * conversion, whose bits hfl_agg_i64_to_f64 gives (test_agg_bodies checks
 * the two agree). */
#include "kernels/cpu/agg_simd.h"

#include <stdatomic.h>
#include <string.h>

#include "kernels/agg_hd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AGG_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,avx512dq")))
#define AVX2 __attribute__((target("avx2")))

static const double magic = HFL_AGG_ROUND_MAGIC;

/* ---- AVX-512: 16 floats, 8 doubles a register ---- */

/* wscale * (float)q for 16 int8 at q (0.0f + that is the decoded value). */
AVX512 static inline __m512 q8_16_avx512(const int8_t *q, __m512 ws) {
    return _mm512_mul_ps(ws, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))));
}

/* One element of an add loop (int8_add's r and base), through the agg_hd.h
 * body: base + round(f * v) + mbits. */
static inline int64_t add_one(int mode, int64_t o, int64_t bias, double f, float v) {
    int64_t base = mode == HFL_AGG_ADD_ZERO ? bias : mode == HFL_AGG_ADD_FIRST ? (int64_t)((uint64_t)o + (uint64_t)bias) : o;
    uint64_t mbits;
    memcpy(&mbits, &magic, sizeof mbits);
    return (int64_t)((uint64_t)hfl_agg_add_fixed(base, f, v) + mbits);
}

/* o[0..8) from v (int8_add): t = f * v + magic, its bits r onto the base. */
AVX512 static inline void add8_avx512(int64_t *o, __m512d v, __m512d f, int mode, __m512i bias) {
    __m512i r = _mm512_castpd_si512(_mm512_add_pd(_mm512_mul_pd(f, v), _mm512_set1_pd(magic)));
    if (mode == HFL_AGG_ADD_ZERO) r = _mm512_add_epi64(r, bias);
    else if (mode == HFL_AGG_ADD_FIRST) r = _mm512_add_epi64(_mm512_add_epi64(_mm512_loadu_si512(o), bias), r);
    else r = _mm512_add_epi64(_mm512_loadu_si512(o), r);
    _mm512_storeu_si512(o, r);
}

/* 16 floats' adds: the low 8 and the high 8 widened to double. */
AVX512 static inline void add16_avx512(int64_t *o, __m512 v, __m512d f, int mode, __m512i bias) {
    add8_avx512(o, _mm512_cvtps_pd(_mm512_castps512_ps256(v)), f, mode, bias);
    add8_avx512(o + 8, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))), f, mode,
                bias);
}

AVX512 static void int8_decode_avx512(const int8_t *q, size_t len, float wscale, float *o) {
    __m512 ws = _mm512_set1_ps(wscale);
    size_t t = 0;
    for (; t + 16 <= len; t += 16) _mm512_storeu_ps(o + t, _mm512_add_ps(_mm512_setzero_ps(), q8_16_avx512(q + t, ws)));
    for (; t < len; t++) o[t] = hfl_q8_accum(0.0f, q[t], wscale);
}

/* int8_add's vector loop in one mode (a constant where it is inlined). */
AVX512 static inline size_t int8_add_loop_avx512(const int8_t *q, size_t len, __m512 ws, __m512d f, int64_t *o,
                                                 int mode, __m512i bias) {
    size_t t = 0;
    for (; t + 16 <= len; t += 16) add16_avx512(o + t, q8_16_avx512(q + t, ws), f, mode, bias);
    return t;
}

/* The add leaves out the decode's 0.0f + (it only turns -0 into +0, and
 * f * -0 + magic is magic as f * +0 + magic is: the same rounded 0). */
AVX512 static void int8_add_avx512(const int8_t *q, size_t len, float wscale, double f, int64_t *o, int mode,
                                   int64_t bias) {
    __m512 ws = _mm512_set1_ps(wscale);
    __m512d fv = _mm512_set1_pd(f);
    __m512i bv = _mm512_set1_epi64(bias);
    size_t t = mode == HFL_AGG_ADD_ZERO    ? int8_add_loop_avx512(q, len, ws, fv, o, HFL_AGG_ADD_ZERO, bv)
               : mode == HFL_AGG_ADD_FIRST ? int8_add_loop_avx512(q, len, ws, fv, o, HFL_AGG_ADD_FIRST, bv)
                                           : int8_add_loop_avx512(q, len, ws, fv, o, HFL_AGG_ADD_REST, bv);
    for (; t < len; t++) o[t] = add_one(mode, o[t], bias, f, hfl_q8_accum(0.0f, q[t], wscale));
}

AVX512 static inline size_t float_add_loop_avx512(const float *x, size_t m, __m512d f, int64_t *a, int mode,
                                                  __m512i bias) {
    size_t j = 0;
    for (; j + 16 <= m; j += 16) add16_avx512(a + j, _mm512_loadu_ps(x + j), f, mode, bias);
    return j;
}

AVX512 static void float_add_avx512(const float *x, size_t m, double f, int64_t *a, int mode, int64_t bias) {
    __m512d fv = _mm512_set1_pd(f);
    __m512i bv = _mm512_set1_epi64(bias);
    size_t j = mode == HFL_AGG_ADD_ZERO    ? float_add_loop_avx512(x, m, fv, a, HFL_AGG_ADD_ZERO, bv)
               : mode == HFL_AGG_ADD_FIRST ? float_add_loop_avx512(x, m, fv, a, HFL_AGG_ADD_FIRST, bv)
                                           : float_add_loop_avx512(x, m, fv, a, HFL_AGG_ADD_REST, bv);
    for (; j < m; j++) a[j] = add_one(mode, a[j], bias, f, x[j]);
}

/* A chunk's 256 lanes, 64 at a time in eight registers down the 16 rows. */
AVX512 static uint32_t chunk_lanes_avx512(const float *x, double *s) {
    __m512i top = _mm512_setzero_si512(), absmask = _mm512_set1_epi32(0x7FFFFFFF);
    for (int l0 = 0; l0 < HFL_AGG_LANES; l0 += 64) {
        __m512d g[8];
        for (int k = 0; k < 8; k++) g[k] = _mm512_setzero_pd();
        for (int t = 0; t < HFL_AGG_CHUNK / HFL_AGG_LANES; t++) {
            const float *row = x + t * HFL_AGG_LANES + l0;
            for (int k = 0; k < 4; k++) {
                __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(row + 16 * k));
                __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(row + 16 * k + 8));
                __m512 v = _mm512_loadu_ps(row + 16 * k);
                g[2 * k] = _mm512_add_pd(g[2 * k], _mm512_mul_pd(lo, lo));
                g[2 * k + 1] = _mm512_add_pd(g[2 * k + 1], _mm512_mul_pd(hi, hi));
                top = _mm512_max_epu32(top, _mm512_and_si512(_mm512_castps_si512(v), absmask));
            }
        }
        for (int k = 0; k < 8; k++) _mm512_storeu_pd(s + l0 + 8 * k, g[k]);
    }
    return (uint32_t)_mm512_reduce_max_epu32(top);
}

AVX512 static int finish_avx512(const int64_t *acc, size_t n, double inv, float *out) {
    __m512d iv = _mm512_set1_pd(inv);
    __m256i expo = _mm256_set1_epi32(0x7F800000);
    __m256i bad = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d d = _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_loadu_si512(acc + i)), iv);
        __m256 r = _mm512_cvtpd_ps(d);
        _mm256_storeu_ps(out + i, r);
        __m256i e = _mm256_and_si256(_mm256_castps_si256(r), expo);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, expo));
    }
    int finite = _mm256_testz_si256(bad, bad);
    for (; i < n; i++) {
        out[i] = hfl_agg_mean_value(acc[i], inv);
        finite &= hfl_agg_finite(out[i]);
    }
    return finite;
}

/* The 64-byte lines of dst that src covers whole, streamed; the partial
 * lines at either end through memcpy. */
AVX512 static void stream_copy_avx512(void *dst, const void *src, size_t bytes) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (64 - (uintptr_t)d % 64) % 64;
    if (head >= bytes) {
        memcpy(d, s, bytes);
        return;
    }
    memcpy(d, s, head);
    size_t i = head;
    for (; i + 64 <= bytes; i += 64) _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512(s + i));
    memcpy(d + i, s + i, bytes - i);
    _mm_sfence();
}

/* ---- AVX2: 8 floats, 4 doubles a register ---- */

AVX2 static inline __m256 q8_8_avx2(const int8_t *q, __m256 ws) {
    return _mm256_mul_ps(ws, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q))));
}

AVX2 static inline void add4_avx2(int64_t *o, __m256d v, __m256d f, int mode, __m256i bias) {
    __m256i r = _mm256_castpd_si256(_mm256_add_pd(_mm256_mul_pd(f, v), _mm256_set1_pd(magic)));
    __m256i *p = (__m256i *)o;
    if (mode == HFL_AGG_ADD_ZERO) r = _mm256_add_epi64(r, bias);
    else if (mode == HFL_AGG_ADD_FIRST) r = _mm256_add_epi64(_mm256_add_epi64(_mm256_loadu_si256(p), bias), r);
    else r = _mm256_add_epi64(_mm256_loadu_si256(p), r);
    _mm256_storeu_si256(p, r);
}

AVX2 static inline void add8_avx2(int64_t *o, __m256 v, __m256d f, int mode, __m256i bias) {
    add4_avx2(o, _mm256_cvtps_pd(_mm256_castps256_ps128(v)), f, mode, bias);
    add4_avx2(o + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), f, mode, bias);
}

AVX2 static void int8_decode_avx2(const int8_t *q, size_t len, float wscale, float *o) {
    __m256 ws = _mm256_set1_ps(wscale);
    size_t t = 0;
    for (; t + 8 <= len; t += 8) _mm256_storeu_ps(o + t, _mm256_add_ps(_mm256_setzero_ps(), q8_8_avx2(q + t, ws)));
    for (; t < len; t++) o[t] = hfl_q8_accum(0.0f, q[t], wscale);
}

AVX2 static inline size_t int8_add_loop_avx2(const int8_t *q, size_t len, __m256 ws, __m256d f, int64_t *o, int mode,
                                             __m256i bias) {
    size_t t = 0;
    for (; t + 8 <= len; t += 8) add8_avx2(o + t, q8_8_avx2(q + t, ws), f, mode, bias);
    return t;
}

/* Without the decode's 0.0f + (int8_add_avx512 says why). */
AVX2 static void int8_add_avx2(const int8_t *q, size_t len, float wscale, double f, int64_t *o, int mode,
                               int64_t bias) {
    __m256 ws = _mm256_set1_ps(wscale);
    __m256d fv = _mm256_set1_pd(f);
    __m256i bv = _mm256_set1_epi64x(bias);
    size_t t = mode == HFL_AGG_ADD_ZERO    ? int8_add_loop_avx2(q, len, ws, fv, o, HFL_AGG_ADD_ZERO, bv)
               : mode == HFL_AGG_ADD_FIRST ? int8_add_loop_avx2(q, len, ws, fv, o, HFL_AGG_ADD_FIRST, bv)
                                           : int8_add_loop_avx2(q, len, ws, fv, o, HFL_AGG_ADD_REST, bv);
    for (; t < len; t++) o[t] = add_one(mode, o[t], bias, f, hfl_q8_accum(0.0f, q[t], wscale));
}

AVX2 static inline size_t float_add_loop_avx2(const float *x, size_t m, __m256d f, int64_t *a, int mode,
                                              __m256i bias) {
    size_t j = 0;
    for (; j + 8 <= m; j += 8) add8_avx2(a + j, _mm256_loadu_ps(x + j), f, mode, bias);
    return j;
}

AVX2 static void float_add_avx2(const float *x, size_t m, double f, int64_t *a, int mode, int64_t bias) {
    __m256d fv = _mm256_set1_pd(f);
    __m256i bv = _mm256_set1_epi64x(bias);
    size_t j = mode == HFL_AGG_ADD_ZERO    ? float_add_loop_avx2(x, m, fv, a, HFL_AGG_ADD_ZERO, bv)
               : mode == HFL_AGG_ADD_FIRST ? float_add_loop_avx2(x, m, fv, a, HFL_AGG_ADD_FIRST, bv)
                                           : float_add_loop_avx2(x, m, fv, a, HFL_AGG_ADD_REST, bv);
    for (; j < m; j++) a[j] = add_one(mode, a[j], bias, f, x[j]);
}

/* The 256 lanes, 32 at a time in eight registers down the 16 rows. */
AVX2 static uint32_t chunk_lanes_avx2(const float *x, double *s) {
    __m256i top = _mm256_setzero_si256(), absmask = _mm256_set1_epi32(0x7FFFFFFF);
    for (int l0 = 0; l0 < HFL_AGG_LANES; l0 += 32) {
        __m256d g[8];
        for (int k = 0; k < 8; k++) g[k] = _mm256_setzero_pd();
        for (int t = 0; t < HFL_AGG_CHUNK / HFL_AGG_LANES; t++) {
            const float *row = x + t * HFL_AGG_LANES + l0;
            for (int k = 0; k < 4; k++) {
                __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(row + 8 * k));
                __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(row + 8 * k + 4));
                __m256 v = _mm256_loadu_ps(row + 8 * k);
                g[2 * k] = _mm256_add_pd(g[2 * k], _mm256_mul_pd(lo, lo));
                g[2 * k + 1] = _mm256_add_pd(g[2 * k + 1], _mm256_mul_pd(hi, hi));
                top = _mm256_max_epu32(top, _mm256_and_si256(_mm256_castps_si256(v), absmask));
            }
        }
        for (int k = 0; k < 8; k++) _mm256_storeu_pd(s + l0 + 4 * k, g[k]);
    }
    uint32_t lanes[8], m = 0;
    _mm256_storeu_si256((__m256i *)lanes, top);
    for (int k = 0; k < 8; k++) m = lanes[k] > m ? lanes[k] : m;
    return m;
}

AVX2 static void stream_copy_avx2(void *dst, const void *src, size_t bytes) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (32 - (uintptr_t)d % 32) % 32;
    if (head >= bytes) {
        memcpy(d, s, bytes);
        return;
    }
    memcpy(d, s, head);
    size_t i = head;
    for (; i + 32 <= bytes; i += 32)
        _mm256_stream_si256((__m256i *)(void *)(d + i), _mm256_loadu_si256((const __m256i *)(const void *)(s + i)));
    memcpy(d + i, s + i, bytes - i);
    _mm_sfence();
}

static const hfl_agg_simd simd_avx512 = {HFL_AGG_SIMD_AVX512, int8_decode_avx512, int8_add_avx512,
                                         float_add_avx512, chunk_lanes_avx512, finish_avx512, stream_copy_avx512,
                                         HFL_AGG_STREAM_BYTES};
/* The finish stays the C loop's (agg_cpu.c's clones): without AVX-512DQ's
 * int64 to double it is hfl_agg_i64_to_f64, which the compiler vectorises. */
static const hfl_agg_simd simd_avx2 = {HFL_AGG_SIMD_AVX2, int8_decode_avx2, int8_add_avx2, float_add_avx2,
                                       chunk_lanes_avx2, NULL, stream_copy_avx2, HFL_AGG_STREAM_BYTES};
#endif

static const hfl_agg_simd simd_c = {HFL_AGG_SIMD_C, NULL, NULL, NULL, NULL, NULL, NULL, 0};

/* The loops of `level`, or NULL when this CPU or build does not run them. */
static const hfl_agg_simd *simd_level(int level) {
    if (level == HFL_AGG_SIMD_C) return &simd_c;
#ifdef AGG_X86
    if (level == HFL_AGG_SIMD_AVX512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        return &simd_avx512;
    if (level == HFL_AGG_SIMD_AVX2 && __builtin_cpu_supports("avx2")) return &simd_avx2;
#endif
    return NULL;
}

static _Atomic(const hfl_agg_simd *) chosen;

const hfl_agg_simd *hfl_agg_simd_get(void) {
    const hfl_agg_simd *s = atomic_load(&chosen);
    if (s) return s;
    for (int level = HFL_AGG_SIMD_AVX512; !s; level--) s = simd_level(level);
    atomic_store(&chosen, s);
    return s;
}

int hfl_agg_simd_force(int level, size_t stream_bytes) {
    static hfl_agg_simd forced;
    const hfl_agg_simd *s = simd_level(level);
    if (!s) return -1;
    forced = *s;
    forced.stream_bytes = stream_bytes;
    atomic_store(&chosen, &forced);
    return 0;
}
