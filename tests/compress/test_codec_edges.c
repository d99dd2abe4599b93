/* test_codec_edges.c: the codecs (compress/) at the edges the other codec
 * tests leave open, written against mutants that survived scripts/mutate
 * (docs/testing.md). Expected values come from codec.h's contract and
 * independent references (fp16 by scaling to its ulp and rint, a
 * round-to-nearest-even on the bits for bf16, absmax / qmax and the
 * eight-lane mean written out here), never from the codec under test:
 *
 * 1. Bounds: every codec encodes and decodes with delta, residual, payload
 *    and accumulator ending at (and, separately, starting at) an inaccessible
 *    page, over sizes and block sizes around 8, a block and the 4096-value
 *    chunk, with 1 and 3 threads: a read or write one value past either end
 *    stops the test with SIGSEGV.
 * 2. The same runs check the contract: the bytes of encode(d, r) are those
 *    of encode(d + r, no residual); the residual left is exactly v -
 *    decoded(v); and decoded(v) is right by the references (fp32 exact,
 *    fp16 and bf16 correctly rounded, the int8 and int4 scale absmax / 127
 *    and / 7 and every value within one scale, sign's scale the mean |v| in
 *    its lane order and its signs, topk the k largest |v|, ties to the lower
 *    index, as fp16).
 * 3. Refusals with their messages: int8 -128 (and where), int4 -8 in either
 *    nibble and a non-zero pad, sign's unused bits, each reserved header
 *    byte, a non-zero block for fp32, a header n that differs; validate
 *    reports the header's block.
 * 4. Non-finite input: NaN or Inf anywhere in a block (the vector lanes and
 *    the tail), with and without residual, gives a payload every decoder
 *    rejects.
 * 5. Scale 0: a block of zeros (v = d + r = 0) and one whose absmax / 127
 *    underflows encode q = 0, and the residual keeps v.
 * 6. topk's sizes around a varint boundary and for n past 32 bits, and a
 *    tie broken by the last mantissa bit.
 * 7. Encoding leaks no memory (mallinfo2 before and after). */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compress/codec.h"
#include "tests/check.h"
#include "util/util.h"

/* ---- guarded buffers: `bytes` ending at (or starting at) 64 KiB of PROT_NONE ---- */

typedef struct {
    uint8_t *map;
    size_t len;
} guard_map;

#define GUARD ((size_t)65536)

static void *guarded(size_t bytes, int at_end, guard_map *g) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = (bytes + pg - 1) / pg * pg;
    if (span == 0) span = pg;
    g->len = GUARD + span + GUARD;
    g->map = mmap(NULL, g->len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(g->map != MAP_FAILED);
    REQUIRE(mprotect(g->map + GUARD, span, PROT_READ | PROT_WRITE) == 0);
    return at_end ? g->map + GUARD + span - bytes : g->map + GUARD;
}

static void unguard(guard_map *g) { munmap(g->map, g->len); }

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1Dull) >> 32);
}
static float rnd_value(void) { return ((float)(rnd() % 2001) - 1000.0f) / 256.0f; } /* exact in fp16 range */

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* References: fp16 by scaling to its ulp (2^(e - 10), at least 2^-24) and
 * rint in double, exact for a float (round to nearest even; values here stay
 * far below 65504); bf16 round-to-nearest-even on the bits. */
static float ref_fp16(float v) {
    double a = fabs((double)v);
    if (a == 0) return v;
    int e;
    frexp(a, &e); /* a = m 2^e, m in [1/2, 1): the exponent is e - 1 */
    int ex = e - 1 < -14 ? -14 : e - 1;
    double ulp = ldexp(1.0, ex - 10);
    return (float)(rint((double)v / ulp) * ulp);
}
static float ref_bf16(float v) {
    uint32_t u = bits(v);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    return from_bits(u);
}

static const hfl_codec *codec(const char *name) {
    char err[HFL_ERR_LEN];
    const hfl_codec *c = hfl_codec_find(name, err);
    REQUIRE_MSG(c != NULL, "%s", err);
    return c;
}

static float load_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* What one decoded value must be, given v and its block (for the blocked
 * codecs); 1 when dec is right. */
static int check_value(const char *name, const float *v, size_t i, size_t lo, size_t hi, float dec, float scale) {
    if (!strcmp(name, "fp32")) return dec == v[i];
    if (!strcmp(name, "fp16")) return dec == ref_fp16(v[i]);
    if (!strcmp(name, "bf16")) return dec == ref_bf16(v[i]);
    if (!strcmp(name, "int8") || !strcmp(name, "int4")) {
        float absmax = 0;
        for (size_t k = lo; k < hi; k++) absmax = fabsf(v[k]) > absmax ? fabsf(v[k]) : absmax;
        float want = absmax / (!strcmp(name, "int8") ? 127.0f : 7.0f);
        if (scale != want) return 0;
        return scale == 0 ? dec == 0 : fabsf(dec - v[i]) < scale;
    }
    if (!strcmp(name, "sign")) {
        float lane[8] = {0}, sum = 0;
        for (size_t k = lo; k < hi; k++) lane[(k - lo) % 8] += fabsf(v[k]);
        for (int l = 0; l < 8; l++) sum += lane[l];
        float want = sum / (float)(hi - lo);
        return scale == want && dec == (v[i] < 0 ? -want : want);
    }
    return 0;
}

/* One encode/decode run with every buffer guarded (see the top). */
static void run(const char *name, size_t n, uint32_t block, int with_residual, int at_end, int threads) {
    const hfl_codec *c = codec(name);
    char err[HFL_ERR_LEN] = "";
    printf("%s n=%zu block=%u residual=%d %s threads=%d\n", name, n, block, with_residual,
           at_end ? "end" : "start", threads);
    fflush(stdout);
    guard_map gd, gr, gp, ga, gp2;
    size_t fb = n * sizeof(float), max = hfl_codec_max_bytes(c, n, block);
    float *d = guarded(fb, at_end, &gd), *r = with_residual ? guarded(fb, at_end, &gr) : NULL;
    float *v = hfl_malloc(fb + 4), *r0 = hfl_malloc(fb + 4);
    for (size_t i = 0; i < n; i++) {
        d[i] = rnd_value();
        r0[i] = with_residual ? rnd_value() / 64.0f : 0.0f;
        if (r) r[i] = r0[i];
        v[i] = d[i] + r0[i];
    }
    uint8_t *p = guarded(max, at_end, &gp), *p2 = hfl_malloc(max + 1);
    hfl_rng_key key = {.seed = 11, .round = 2, .client = 3, .tensor = 4};
    size_t len = hfl_codec_encode(c, d, r, n, block, &key, threads, p);
    size_t len2 = hfl_codec_encode(c, v, NULL, n, block, &key, 1, p2);
    CHECK_MSG(len == len2 && !memcmp(p, p2, len), "%s n=%zu: encode(d, r) differs from encode(d + r)", name, n);
    CHECK(c->fraction > 0 || len == max);
    /* the payload again at the very end of its guarded mapping, for decode */
    uint8_t *q = guarded(len, 1, &gp2);
    memcpy(q, p, len);
    float *acc = guarded(fb, at_end, &ga);
    memset(acc, 0, fb);
    int rc = hfl_codec_decode_accumulate(c, q, len, n, 1.0f, acc, threads, err);
    CHECK_MSG(rc == 0, "%s decode: %s", name, err);
    uint32_t vb = 12345;
    CHECK(hfl_codec_validate(c, q, len, n, &vb, err) == 0 && vb == (c->blocked ? block : 0));
    size_t bad = 0, bad_res = 0;
    if (c->fraction > 0) {
        /* topk: the k largest |v|, ties to the lower index, as fp16 */
        size_t k = (size_t)ceil(c->fraction * (double)n * (1 - 1e-12));
        for (size_t i = 0; i < n; i++) {
            size_t above = 0;
            for (size_t j = 0; j < n; j++)
                above += fabsf(v[j]) > fabsf(v[i]) || (fabsf(v[j]) == fabsf(v[i]) && j < i);
            float want = above < k ? ref_fp16(v[i]) : 0.0f;
            bad += acc[i] != want;
        }
    } else {
        uint32_t u = c->blocked ? block : (uint32_t)n;
        for (size_t i = 0; i < n; i++) {
            size_t b0 = i / (u ? u : 1) * u, b1 = b0 + u < n ? b0 + u : n;
            float scale = 0;
            if (c->blocked) {
                size_t unit = c->max_bytes(c, u, block) - 12;
                scale = load_f32(q + 12 + (i / block) * unit);
            }
            bad += !check_value(name, v, i, b0, b1, acc[i], scale);
        }
    }
    if (r)
        for (size_t i = 0; i < n; i++) bad_res += r[i] != v[i] - acc[i];
    CHECK_MSG(bad == 0, "%s n=%zu block=%u: %zu values decoded wrong", name, n, block, bad);
    CHECK_MSG(bad_res == 0, "%s n=%zu block=%u: %zu residuals are not v - decoded", name, n, block, bad_res);
    unguard(&gd);
    if (r) unguard(&gr);
    unguard(&gp);
    unguard(&gp2);
    unguard(&ga);
    free(v);
    free(r0);
    free(p2);
}

static void test_bounds_and_contract(void) {
    static const char *names[] = {"fp32", "fp16", "bf16", "int8", "int4", "sign", "topk:0.3"};
    static const size_t ns[] = {1, 3, 8, 13, 21, 64, 4096, 4099, 8200};
    static const uint32_t blocks[] = {1, 4, 8, 13, 21, 256};
    for (int c = 0; c < 7; c++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            size_t n = ns[i];
            if (c == 6 && n > 64) continue; /* the reference selection is quadratic */
            for (int res = 0; res < 2; res++)
                for (int end = 0; end < 2; end++) {
                    if (c >= 3 && c <= 5) {
                        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
                            if (n < 4096 || blocks[b] >= 13) run(names[c], n, blocks[b], res, end, 1 + 2 * (int)(b % 2));
                    } else {
                        run(names[c], n, 0, res, end, 1 + 2 * end);
                    }
                }
        }
}

/* ---- refusals ---- */

static void expect_refused(const hfl_codec *c, uint8_t *p, size_t len, size_t n, const char *want) {
    char err[HFL_ERR_LEN] = "";
    float acc[64];
    for (int i = 0; i < 64; i++) acc[i] = (float)i;
    CHECK_MSG(hfl_codec_decode_accumulate(c, p, len, n, 1.0f, acc, 1, err) == -1 && strstr(err, want),
              "%s: expected '%s', got '%s'", c->name, want, err);
    for (int i = 0; i < 64; i++) CHECK(acc[i] == (float)i);
    uint32_t b = 77;
    err[0] = 0;
    CHECK(hfl_codec_validate(c, p, len, n, &b, err) == -1 && strstr(err, want) && b == 77);
}

static void test_refusals(void) {
    hfl_rng_key key = {.seed = 5};
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(i % 7) - 3.0f;
    /* int8: a -128 anywhere; the message names the element. Each block's
     * largest magnitude is negative (it encodes to -127) and its positive
     * values are small, so no block holds a 127 either. */
    const hfl_codec *i8 = codec("int8");
    uint8_t p[1024];
    float y[64];
    for (int i = 0; i < 64; i++) y[i] = i % 16 == 0 ? -3.0f : (float)(i % 5) - 2.0f;
    size_t len = hfl_codec_encode(i8, y, NULL, 64, 16, &key, 1, p);
    for (size_t i = 12; i < len; i++) CHECK((i - 12) % 20 < 4 || p[i] != 0x7F);
    for (size_t e = 0; e < 64; e += 7) {
        size_t at = 12 + (e / 16) * 20 + 4 + e % 16;
        uint8_t keep = p[at];
        p[at] = 0x80;
        char want[64];
        snprintf(want, sizeof want, "int8 payload: value %zu is -128", e);
        expect_refused(i8, p, len, 64, want);
        p[at] = 0x81; /* -127 is fine */
        char err[HFL_ERR_LEN];
        uint32_t b;
        CHECK(hfl_codec_validate(i8, p, len, 64, &b, err) == 0);
        p[at] = keep;
    }
    /* int4: -8 in a low or a high nibble, a pad nibble in an odd block */
    const hfl_codec *i4 = codec("int4");
    len = hfl_codec_encode(i4, x, NULL, 21, 7, &key, 1, p); /* blocks of 7: 4 bytes, the last high nibble pad */
    for (int blk = 0; blk < 3; blk++) {
        size_t at = 12 + (size_t)blk * 8 + 4;
        uint8_t keep = p[at];
        p[at] = (uint8_t)((keep & 0xF0) | 0x08);
        char want[64];
        snprintf(want, sizeof want, "block %d holds a value -8", blk);
        expect_refused(i4, p, len, 21, want);
        p[at] = (uint8_t)((keep & 0x0F) | 0x80);
        expect_refused(i4, p, len, 21, want);
        p[at] = keep;
        keep = p[at + 3];
        p[at + 3] = (uint8_t)(keep | 0x10);
        snprintf(want, sizeof want, "block %d has a non-zero pad nibble", blk);
        expect_refused(i4, p, len, 21, want);
        p[at + 3] = keep;
    }
    /* sign: unused bits of a block's last byte (blocks of 13: bits 5..7 of byte 1) */
    const hfl_codec *sg = codec("sign");
    len = hfl_codec_encode(sg, x, NULL, 26, 13, &key, 1, p);
    for (int bit = 5; bit < 8; bit++) {
        p[12 + 6 + 1 + 4] ^= (uint8_t)(1u << bit); /* block 1's second byte */
        expect_refused(sg, p, len, 26, "sign payload: block 1 has non-zero unused bits");
        p[12 + 6 + 1 + 4] ^= (uint8_t)(1u << bit);
    }
    char err[HFL_ERR_LEN];
    uint32_t b;
    CHECK(hfl_codec_validate(sg, p, len, 26, &b, err) == 0 && b == 13);
    /* the header: each reserved byte, n, the block */
    const hfl_codec *f32 = codec("fp32");
    len = hfl_codec_encode(f32, x, NULL, 8, 256, &key, 1, p);
    CHECK(p[8] == 0 && p[9] == 0); /* fp32 writes block 0 whatever the run's */
    for (int k = 1; k < 4; k++) {
        p[k] = 1;
        expect_refused(f32, p, len, 8, "reserved header bytes are not zero");
        p[k] = 0;
    }
    p[8] = 1;
    expect_refused(f32, p, len, 8, "block size 1 outside [0, 0]");
    p[8] = 0;
    expect_refused(f32, p, len, 7, "n=8, expected 7");
    len = hfl_codec_encode(i8, x, NULL, 8, 8, &key, 1, p);
    p[8] = 0;
    expect_refused(i8, p, len, 8, "block size 0 outside [1, 65536]");
    p[8] = 8;
    p[0] = 3;
    expect_refused(i8, p, len, 8, "codec id 3, expected 2");
}

/* ---- non-finite input, scale 0 ---- */

static void test_nonfinite(void) {
    static const char *names[] = {"fp32", "fp16", "bf16", "int8", "int4", "sign", "topk:1"};
    const float bad[2] = {NAN, INFINITY};
    for (int c = 0; c < 7; c++) {
        const hfl_codec *k = codec(names[c]);
        for (int which = 0; which < 2; which++)
            for (int res = 0; res < 2; res++)
                for (size_t at = 0; at < 19; at += 3) {
                    float d[19], r[19], acc[19] = {0};
                    for (int i = 0; i < 19; i++) d[i] = 0.5f * (float)(i % 5) - 1.0f, r[i] = 0.125f;
                    (res ? r : d)[at] = bad[which];
                    uint8_t p[512];
                    hfl_rng_key key = {.seed = 1};
                    size_t len = hfl_codec_encode(k, d, res ? r : NULL, 19, 19, &key, 1, p);
                    char err[HFL_ERR_LEN] = "";
                    CHECK_MSG(hfl_codec_decode_accumulate(k, p, len, 19, 1.0f, acc, 1, err) == -1,
                              "%s: %s at %zu (%s) accepted", names[c], which ? "Inf" : "NaN", at,
                              res ? "residual" : "delta");
                }
    }
}

static void test_zero_scale(void) {
    const char *names[] = {"int8", "int4"};
    for (int c = 0; c < 2; c++) {
        const hfl_codec *k = codec(names[c]);
        /* v = d + r = 0 everywhere: q = 0 and the residual becomes 0 = v */
        float d[10], r[10];
        for (int i = 0; i < 10; i++) d[i] = i % 2 ? 1.0f : -1.0f, r[i] = -d[i];
        uint8_t p[256];
        hfl_rng_key key = {.seed = 3};
        size_t len = hfl_codec_encode(k, d, r, 10, 10, &key, 1, p);
        CHECK(load_f32(p + 12) == 0.0f);
        for (size_t i = 16; i < len; i++) CHECK(p[i] == 0);
        for (int i = 0; i < 10; i++) CHECK(r[i] == 0.0f);
        /* the smallest subnormal: absmax / qmax underflows to 0, v waits in the residual */
        float tiny = from_bits(1), t[3] = {tiny, -tiny, 0.0f}, tr[3] = {0.0f, 0.0f, 0.0f};
        len = hfl_codec_encode(k, t, tr, 3, 3, &key, 1, p);
        CHECK(load_f32(p + 12) == 0.0f && tr[0] == tiny && tr[1] == -tiny && tr[2] == 0.0f);
    }
    /* the tail of a block (past the last full lane group) with a residual */
    float d[11], r[11];
    for (int i = 0; i < 11; i++) d[i] = 0.25f, r[i] = 0.25f;
    d[10] = 1.0f, r[10] = 1.0f; /* the largest v = 2, in the tail */
    uint8_t p[256];
    hfl_rng_key key = {.seed = 3};
    hfl_codec_encode(codec("int8"), d, r, 11, 11, &key, 1, p);
    CHECK(load_f32(p + 12) == 2.0f / 127.0f);
    /* small blocks: a block's scale sees only its own values */
    float s[12] = {1, -1, 1, 1, 100, 100, 100, -100, 3, 3, 3, 3};
    hfl_codec_encode(codec("int8"), s, NULL, 12, 4, &key, 1, p);
    CHECK(load_f32(p + 12) == 1.0f / 127.0f && load_f32(p + 20) == 100.0f / 127.0f &&
          load_f32(p + 28) == 3.0f / 127.0f);
}

/* ---- topk ---- */

static void test_topk(void) {
    const hfl_codec *t = codec("topk:1");
    /* k = n entries of 2 bytes and at most varint_len(n - 1) bytes of index */
    CHECK(hfl_codec_max_bytes(t, 127, 0) == 16 + 127 * 3);
    CHECK(hfl_codec_max_bytes(t, 128, 0) == 16 + 128 * 3);
    CHECK(hfl_codec_max_bytes(t, 129, 0) == 16 + 129 * 4);
    CHECK(hfl_codec_max_bytes(t, 0, 0) == 16);
    CHECK(hfl_codec_max_bytes(t, (size_t)UINT32_MAX + 1, 0) == 0);
    /* the tie is broken by the last mantissa bit: the larger goes */
    const hfl_codec *h = codec("topk:0.5");
    float v[2] = {1.0f, from_bits(bits(1.0f) + 1)}, acc[2] = {0, 0};
    uint8_t p[64];
    hfl_rng_key key = {.seed = 1};
    size_t len = hfl_codec_encode(h, v, NULL, 2, 0, &key, 1, p);
    char err[HFL_ERR_LEN];
    CHECK(hfl_codec_decode_accumulate(h, p, len, 2, 1.0f, acc, 1, err) == 0 && acc[0] == 0.0f && acc[1] == 1.0f);
    /* equal magnitudes of opposite sign: the lower index goes */
    v[0] = -2.0f, v[1] = 2.0f, acc[0] = acc[1] = 0;
    len = hfl_codec_encode(h, v, NULL, 2, 0, &key, 1, p);
    CHECK(hfl_codec_decode_accumulate(h, p, len, 2, 1.0f, acc, 1, err) == 0 && acc[0] == -2.0f && acc[1] == 0.0f);
}

/* ---- leaks ---- */

static void test_no_leak(void) {
    static const char *names[] = {"int8", "int4", "sign", "fp16", "topk:0.1"};
    float *x = hfl_malloc(5000 * sizeof(float)), *r = hfl_calloc(5000, sizeof(float));
    for (int i = 0; i < 5000; i++) x[i] = rnd_value();
    uint8_t *p = hfl_malloc(40000);
    hfl_rng_key key = {.seed = 9};
    for (int c = 0; c < 5; c++) {
        const hfl_codec *k = codec(names[c]);
        hfl_codec_encode(k, x, r, 5000, 1024, &key, 1, p); /* warm up */
        size_t before = mallinfo2().uordblks;
        for (int t = 0; t < 50; t++) hfl_codec_encode(k, x, r, 5000, 1024, &key, 1, p);
        size_t after = mallinfo2().uordblks;
        CHECK_MSG(after < before + 1024, "%s: %zu bytes still allocated after 50 encodes", names[c], after - before);
    }
    free(x);
    free(r);
    free(p);
}

static const check_case cases[] = {
    {"refusals", test_refusals},
    {"nonfinite", test_nonfinite},
    {"zero_scale", test_zero_scale},
    {"topk", test_topk},
    {"no_leak", test_no_leak},
    {"bounds_and_contract", test_bounds_and_contract},
};

int main(int argc, char **argv) {
    return check_run("test_codec_edges", cases, CHECK_CASES(cases), argc, argv);
}
