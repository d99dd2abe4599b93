/* codec_topk.c: top-k sparsification with fp16 values and LEB128 indices.
 *
 * topk:F keeps the k = ceil(F * n) entries of v = delta + residual with the
 * largest |v| (ties go to the lower index). k is computed in double as
 * ceil(F * n * (1 - 1e-12)), so a product that lands a rounding error above an
 * integer (0.07 * 100 = 7.000000000000001) counts as that integer.
 * Body: u32 k; k fp16 values (round to nearest even, finite values past 65504
 * saturate) in index order; then k LEB128 varints: the first index, then each
 * gap to the next index (>= 1). Varints are minimal and at most 5 bytes, so the
 * decoder rejects overlong, overflowing or truncated ones, gaps of 0, indices
 * >= n, a count other than k and trailing bytes. Error feedback: selected
 * entries keep v - fp16(v), the rest keep v.
 *
 * Selection is a three-pass radix select on the bits of |v| (11, 10 and 10
 * bits; for non-negative floats the bit pattern orders like the value, and NaN
 * sorts above Inf, so a NaN is always sent and the payload rejected), then one
 * pass emits in index order: O(n) with no sort and no copy of v. Everything
 * runs on the calling thread: the index stream is sequential, and the payload
 * is small (~1% of n). */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

#include <math.h>

#include "util/util.h"

#define TOPK_HEAD (HFL_CODEC_HEADER_BYTES + 4)

static size_t topk_k(double fraction, size_t n) {
    double t = fraction * (double)n;
    size_t k = (size_t)ceil(t - t * 1e-12);
    return k > n ? n : k;
}

static size_t varint_len(uint32_t v) {
    size_t len = 1;
    while (v >= 0x80) {
        v >>= 7;
        len++;
    }
    return len;
}

static size_t topk_max_bytes(const hfl_codec *c, size_t n, uint32_t block) {
    (void)block;
    if ((uint64_t)n > UINT32_MAX)
        return 0;
    size_t k = topk_k(c->fraction, n);
    return TOPK_HEAD + k * (sizeof(uint16_t) + varint_len(n ? (uint32_t)(n - 1) : 0));
}

/* |v| as ordered bits: sign cleared. */
static inline uint32_t topk_key(const float *d, const float *r, size_t i) {
    return hfl_f32_bits(r ? d[i] + r[i] : d[i]) & 0x7FFFFFFFu;
}

/* The k-th largest key T and how many entries equal to T are taken. */
static uint32_t topk_threshold(const float *d, const float *r, size_t n, size_t k,
                               size_t *take_eq) {
    static const int shift[3] = {20, 10, 0};
    static const uint32_t width[3] = {2048, 1024, 1024};
    uint32_t prefix = 0;
    size_t need = k;
    for (int pass = 0; pass < 3; pass++) {
        size_t hist[2048] = {0};
        int s = shift[pass];
        uint32_t hi_shift = (uint32_t)s + (pass == 0 ? 11u : 10u);
        for (size_t i = 0; i < n; i++) {
            uint32_t key = topk_key(d, r, i);
            if (pass == 0 || key >> hi_shift == prefix)
                hist[(key >> s) & (width[pass] - 1)]++;
        }
        uint32_t b = width[pass] - 1;
        while (hist[b] < need) {
            need -= hist[b];
            b--;
        }
        prefix = (prefix << (pass == 0 ? 11 : 10)) | b;
    }
    *take_eq = need;
    return prefix;
}

static uint8_t *put_varint(uint8_t *p, uint32_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static size_t topk_encode(const hfl_codec *c, const float *delta, float *residual, size_t n,
                          uint32_t block, const hfl_rng_key *key, int threads, uint8_t *out) {
    (void)block;
    (void)key;
    (void)threads;
    size_t k = topk_k(c->fraction, n);
    codec_write_header(out, HFL_CODEC_ID_TOPK, (uint32_t)n, 0);
    codec_store_u32(out + HFL_CODEC_HEADER_BYTES, (uint32_t)k);
    uint8_t *vals = out + TOPK_HEAD, *idx = vals + 2 * k;
    size_t take_eq = 0, taken = 0;
    uint32_t t = k ? topk_threshold(delta, residual, n, k, &take_eq) : 0xFFFFFFFFu;
    uint32_t last = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t kb = topk_key(delta, residual, i);
        float v = residual ? delta[i] + residual[i] : delta[i];
        if (kb < t || (kb == t && take_eq == 0)) {
            if (residual)
                residual[i] = v; /* not sent: all of it waits for the next round */
            continue;
        }
        take_eq -= kb == t;
        uint16_t h = hfl_f32_to_f16(hfl_f16_saturate(v));
        memcpy(vals + 2 * taken, &h, sizeof h);
        idx = put_varint(idx, taken ? (uint32_t)i - last : (uint32_t)i);
        last = (uint32_t)i;
        taken++;
        if (residual)
            residual[i] = v - hfl_f16_to_f32(h);
    }
    return (size_t)(idx - out);
}

/* Reads one minimal LEB128 varint of at most 32 bits from [*p, end); -1 if truncated,
 * overlong or overflowing. */
static int get_varint(const uint8_t **p, const uint8_t *end, uint32_t *v) {
    uint32_t x = 0;
    for (int i = 0; i < 5; i++) {
        if (*p == end)
            return -1;
        uint8_t b = *(*p)++;
        if (i == 4 && b > 0x0F)
            return -1;
        x |= (uint32_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            if (i > 0 && b == 0)
                return -1;
            *v = x;
            return 0;
        }
    }
    return -1;
}

static int topk_validate(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                         uint32_t *block, char *err) {
    uint32_t b;
    if (codec_read_header(c, in, len, expect_n, &b, err))
        return -1;
    if (len < TOPK_HEAD)
        return hfl_errf(err, "%s payload: %zu bytes, too short for the count", c->name, len);
    size_t want = topk_k(c->fraction, expect_n), k = codec_load_u32(in + HFL_CODEC_HEADER_BYTES);
    if (k != want)
        return hfl_errf(err, "%s payload: %zu entries, expected %zu for n=%zu", c->name, k, want,
                        expect_n);
    if (len - TOPK_HEAD < 3 * k) /* 2 bytes of value and at least 1 of index per entry */
        return hfl_errf(err, "%s payload: %zu bytes, too short for %zu entries", c->name, len, k);
    const uint8_t *vals = in + TOPK_HEAD, *p = vals + 2 * k, *end = in + len;
    for (size_t j = 0; j < k; j++) {
        uint16_t h;
        memcpy(&h, vals + 2 * j, sizeof h);
        if ((h & 0x7C00u) == 0x7C00u)
            return hfl_errf(err, "%s payload: entry %zu is %g, not finite", c->name, j,
                            (double)hfl_f16_to_f32(h));
    }
    uint64_t index = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t v;
        if (get_varint(&p, end, &v))
            return hfl_errf(err, "%s payload: index %zu is a truncated, overlong or over-32-bit varint",
                            c->name, j);
        if (j > 0 && v == 0)
            return hfl_errf(err, "%s payload: index %zu repeats the previous one", c->name, j);
        index = j ? index + v : v;
        if (index >= expect_n)
            return hfl_errf(err, "%s payload: index %zu is %llu, not below n=%zu", c->name, j,
                            (unsigned long long)index, expect_n);
    }
    if (p != end)
        return hfl_errf(err, "%s payload: %zu trailing bytes after %zu entries", c->name,
                        (size_t)(end - p), k);
    *block = b;
    return 0;
}

static int topk_decode_accumulate(const hfl_codec *c, const uint8_t *in, size_t len,
                                  size_t expect_n, float weight, float *acc, int threads,
                                  char *err) {
    (void)threads;
    uint32_t b;
    if (topk_validate(c, in, len, expect_n, &b, err))
        return -1;
    size_t k = codec_load_u32(in + HFL_CODEC_HEADER_BYTES);
    const uint8_t *vals = in + TOPK_HEAD, *p = vals + 2 * k, *end = in + len;
    size_t index = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t v = 0;
        get_varint(&p, end, &v); /* validated above */
        index = j ? index + v : v;
        uint16_t h;
        memcpy(&h, vals + 2 * j, sizeof h);
        acc[index] = hfl_fp32_accum(acc[index], hfl_f16_to_f32(h), weight);
    }
    return 0;
}

size_t hfl_codec_topk_entries(const hfl_codec *c, size_t n) { return topk_k(c->fraction, n); }

int hfl_codec_topk_expand(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                          uint32_t *idx, size_t *k, const uint8_t **vals, char *err) {
    uint32_t b;
    if (c->id != HFL_CODEC_ID_TOPK)
        return hfl_errf(err, "%s is not topk: no indices to expand", c->name);
    if (topk_validate(c, in, len, expect_n, &b, err))
        return -1;
    size_t entries = codec_load_u32(in + HFL_CODEC_HEADER_BYTES);
    const uint8_t *p = in + TOPK_HEAD + 2 * entries, *end = in + len;
    uint32_t index = 0;
    for (size_t j = 0; j < entries; j++) {
        uint32_t v = 0;
        get_varint(&p, end, &v); /* validated above: below n, so below 2^32 */
        index = j ? index + v : v;
        idx[j] = index;
    }
    *k = entries;
    *vals = in + TOPK_HEAD;
    return 0;
}

const hfl_codec codec_topk_template = {
    .name = "topk",
    .id = HFL_CODEC_ID_TOPK,
    .biased = 1,
    .blocked = 0,
    .max_bytes = topk_max_bytes,
    .encode = topk_encode,
    .decode_accumulate = topk_decode_accumulate,
    .validate = topk_validate,
};
