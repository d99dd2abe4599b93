/* test_codec_malformed.c: every malformed payload, for every codec, is
 * rejected with a one-line error and the accumulator untouched (decoded with
 * two threads, so the range that fails need not be the one that would write). Damage is put in the last block where
 * it can be, so a decoder that accumulates while it validates would be caught. */
#include <float.h>

#include "tests/compress/codec_test.h"

enum { N = 1000, BLOCK = 256 }; /* 3 full blocks and one of 232 */

/* Decodes (p, len) expecting rejection; checks acc is untouched and err is set. */
static void expect_reject(const hfl_codec *c, const uint8_t *p, size_t len, size_t expect_n,
                          const char *what, const char *want_in_err) {
    float acc[N], before[N];
    for (size_t i = 0; i < N; i++)
        acc[i] = before[i] = (float)i * 0.25f - 7.0f;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_codec_decode_accumulate(c, p, len, expect_n, 1.0f, acc, 2, err);
    CHECK_MSG(rc == -1, "%s %s: accepted", c->name, what);
    CHECK_MSG(memcmp(acc, before, sizeof acc) == 0, "%s %s: acc modified", c->name, what);
    CHECK_MSG(err[0] && !strchr(err, '\n'), "%s %s: no one-line error", c->name, what);
    CHECK_MSG(!want_in_err || strstr(err, want_in_err), "%s %s: error '%s' lacks '%s'", c->name, what,
              err, want_in_err);
    uint32_t block;
    CHECK_MSG(hfl_codec_validate(c, p, len, expect_n, &block, err) == -1, "%s %s: validate accepted", c->name,
              what);
}

/* A copy of p (len bytes) with `bytes` bytes of v written at offset off. */
static uint8_t *patched(const uint8_t *p, size_t len, size_t off, const void *v, size_t bytes) {
    uint8_t *q = hfl_malloc(len + 1);
    memcpy(q, p, len);
    q[len] = 0;
    memcpy(q + off, v, bytes);
    return q;
}

static void check_patch(const hfl_codec *c, const uint8_t *p, size_t len, size_t off,
                        const void *v, size_t bytes, const char *what, const char *want) {
    uint8_t *q = patched(p, len, off, v, bytes);
    expect_reject(c, q, len, N, what, want);
    free(q);
}

static void test_header(const hfl_codec *c, const uint8_t *p, size_t len, const char *len_msg) {
    uint8_t *longer = patched(p, len, 0, p, 0);
    expect_reject(c, p, len - 1, N, "short by one", len_msg);
    expect_reject(c, longer, len + 1, N, "long by one", len_msg);
    expect_reject(c, p, 5, N, "truncated header", "header");
    expect_reject(c, p, 0, N, "empty", "header");
    expect_reject(c, p, len, N - 1, "n mismatch", "expected 999");
    free(longer);
    uint8_t other = c->id == 1 ? 2 : 1, one = 1;
    if (!len_msg) /* topk: a byte short truncates the last varint, a byte long trails */
        len_msg = "";
    check_patch(c, p, len, 0, &other, 1, "wrong id", "codec id");
    check_patch(c, p, len, 1, &one, 1, "reserved byte 1", "reserved");
    check_patch(c, p, len, 3, &one, 1, "reserved byte 3", "reserved");
    uint32_t zero = 0, big = HFL_CODEC_MAX_BLOCK + 1, b128 = 128, b256 = 256;
    if (c->blocked) {
        check_patch(c, p, len, 8, &zero, 4, "block 0", "block size 0");
        check_patch(c, p, len, 8, &big, 4, "block too big", "block size 65537");
        check_patch(c, p, len, 8, &b128, 4, "block size changed", "expected");
        (void)b256;
    } else {
        check_patch(c, p, len, 8, &b256, 4, "unblocked codec with a block", "block size 256");
    }
}

/* fp16 / bf16: a non-finite value (exponent all ones) in the last slot. */
static void test_half(const char *name, uint16_t inf_bits, uint16_t nan_bits) {
    const hfl_codec *c = test_codec(name);
    float x[N];
    test_fill(x, N, 3.0f, 12, 0);
    hfl_rng_key key = {.seed = 5};
    size_t len;
    uint8_t *p = test_encode(c, x, NULL, N, BLOCK, &key, &len);
    test_header(c, p, len, "expected 2012 for n=1000 block=0");
    size_t last = HFL_CODEC_HEADER_BYTES + (N - 1) * 2;
    check_patch(c, p, len, last, &inf_bits, 2, "Inf value", "value 999");
    check_patch(c, p, len, last, &nan_bits, 2, "NaN value", "value 999");
    free(p);
}

/* int4 and sign: scales, out-of-range nibbles and non-zero padding in the last block. */
static void test_lowbit(void) {
    const hfl_codec *i4 = test_codec("int4"), *sg = test_codec("sign");
    float x[N];
    test_fill(x, N, 3.0f, 13, 0);
    hfl_rng_key key = {.seed = 6};
    size_t l4, ls, l4o;
    uint8_t *p4 = test_encode(i4, x, NULL, N, BLOCK, &key, &l4);
    uint8_t *ps = test_encode(sg, x, NULL, N, BLOCK, &key, &ls);
    test_header(i4, p4, l4, "expected 528 for n=1000 block=256");
    test_header(sg, ps, ls, "expected 153 for n=1000 block=256");
    float nan = NAN, inf = INFINITY, neg = -1.0f;
    size_t s4 = HFL_CODEC_HEADER_BYTES + 3 * (4 + BLOCK / 2), ss = HFL_CODEC_HEADER_BYTES + 3 * 36;
    check_patch(i4, p4, l4, s4, &nan, 4, "NaN scale", "block 3");
    check_patch(i4, p4, l4, s4, &inf, 4, "Inf scale", "block 3");
    check_patch(i4, p4, l4, s4, &neg, 4, "negative scale", "block 3");
    float huge4 = FLT_MAX / 8 * 1.01f;
    check_patch(i4, p4, l4, s4, &huge4, 4, "scale past FLT_MAX/8", "block 3");
    check_patch(sg, ps, ls, ss, &nan, 4, "NaN scale", "block 3");
    check_patch(sg, ps, ls, ss, &inf, 4, "Inf scale", "block 3");
    check_patch(sg, ps, ls, ss, &neg, 4, "negative scale", "block 3");
    uint8_t lo8 = 0x08, hi8 = 0x80;
    check_patch(i4, p4, l4, l4 - 1, &lo8, 1, "nibble -8 (low)", "-8");
    check_patch(i4, p4, l4, l4 - 1, &hi8, 1, "nibble -8 (high)", "-8");
    /* N = 999 values at block 256: the last block holds 231, so the last byte of the int4
     * block has a pad nibble and the sign block 7 unused bits. */
    uint8_t *q4 = test_encode(i4, x, NULL, N - 1, BLOCK, &key, &l4o);
    uint8_t pad = (uint8_t)(q4[l4o - 1] | 0x10);
    uint8_t *bad = patched(q4, l4o, l4o - 1, &pad, 1);
    float acc[N] = {0};
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(hfl_codec_decode_accumulate(i4, bad, l4o, N - 1, 1.0f, acc, 1, err) == -1 &&
              strstr(err, "pad"), "int4 pad nibble accepted: %s", err);
    free(bad);
    free(q4);
    size_t lso;
    uint8_t *qs = test_encode(sg, x, NULL, N - 1, BLOCK, &key, &lso);
    pad = (uint8_t)(qs[lso - 1] | 0x80);
    bad = patched(qs, lso, lso - 1, &pad, 1);
    CHECK_MSG(hfl_codec_decode_accumulate(sg, bad, lso, N - 1, 1.0f, acc, 2, err) == -1 &&
              strstr(err, "unused bits"), "sign pad bit accepted: %s", err);
    for (size_t i = 0; i < N; i++)
        CHECK_MSG(acc[i] == 0.0f, "acc touched at %zu", i);
    free(bad);
    free(qs);
    free(p4);
    free(ps);
}

/* A hand-built topk payload: n = 1000, k = 3 (topk:0.003), values and index bytes given. */
static uint8_t *topk_payload(const uint8_t *idx, size_t idx_len, uint16_t v2, size_t *len) {
    *len = 16 + 6 + idx_len;
    uint8_t *p = hfl_calloc(*len + 1, 1);
    p[0] = 7;
    uint32_t n = N, k = 3;
    memcpy(p + 4, &n, 4);
    memcpy(p + 12, &k, 4);
    uint16_t v[3] = {0x3C00, 0xBC00, v2}; /* 1, -1, v2 */
    memcpy(p + 16, v, 6);
    memcpy(p + 22, idx, idx_len);
    return p;
}

static void expect_topk(const uint8_t *idx, size_t idx_len, uint16_t v2, const char *what,
                        const char *want) {
    const hfl_codec *c = test_codec("topk:0.003");
    size_t len;
    uint8_t *p = topk_payload(idx, idx_len, v2, &len);
    expect_reject(c, p, len, N, what, want);
    free(p);
}

static void test_topk(void) {
    const hfl_codec *c = test_codec("topk:0.003");
    float x[N];
    test_fill(x, N, 3.0f, 14, 0);
    hfl_rng_key key = {.seed = 7};
    size_t len;
    uint8_t *p = test_encode(c, x, NULL, N, BLOCK, &key, &len);
    test_header(c, p, len, NULL);
    free(p);
    /* The hand-built payload is accepted as built: indices 5, 5 + 130 = 135, 135 + 1. */
    const uint8_t good[] = {5, 0x82, 0x01, 1};
    p = topk_payload(good, sizeof good, 0x4000, &len);
    float acc[N] = {0};
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(hfl_codec_decode_accumulate(c, p, len, N, 2.0f, acc, 1, err) == 0, "%s", err);
    CHECK_MSG(acc[5] == 2.0f && acc[135] == -2.0f && acc[136] == 4.0f, "hand-built payload decoded wrong");
    uint32_t four = 4;
    check_patch(c, p, len, 12, &four, 4, "index count", "4 entries, expected 3");
    free(p);
    const uint8_t gap0[] = {5, 0x82, 0x01, 0};
    expect_topk(gap0, sizeof gap0, 0x4000, "repeated index", "repeats");
    const uint8_t past[] = {5, 0x82, 0x01, 0xE1, 0x06}; /* 135 + 865 = 1000 = n */
    expect_topk(past, sizeof past, 0x4000, "index n", "is 1000, not below n=1000");
    const uint8_t first_past[] = {0xE8, 0x07, 1, 1}; /* first index 1000 */
    expect_topk(first_past, sizeof first_past, 0x4000, "first index n", "not below n=1000");
    const uint8_t overlong[] = {5, 0x82, 0x01, 0x81, 0x00};
    expect_topk(overlong, sizeof overlong, 0x4000, "overlong varint", "varint");
    const uint8_t overflow[] = {5, 0x82, 0x01, 0x81, 0x80, 0x80, 0x80, 0x10};
    expect_topk(overflow, sizeof overflow, 0x4000, "varint past 32 bits", "varint");
    const uint8_t six[] = {5, 0x82, 0x01, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00};
    expect_topk(six, sizeof six, 0x4000, "six-byte varint", "varint");
    const uint8_t trunc[] = {5, 0x82, 0x01, 0x81};
    expect_topk(trunc, sizeof trunc, 0x4000, "truncated varint", "varint");
    const uint8_t trail[] = {5, 0x82, 0x01, 1, 0};
    expect_topk(trail, sizeof trail, 0x4000, "trailing byte", "trailing");
    expect_topk(good, 2, 0x4000, "too few index bytes", NULL);
    expect_topk(good, sizeof good, 0x7C00, "Inf value", "entry 2");
    expect_topk(good, sizeof good, 0xFE00, "NaN value", "entry 2");
}

/* A diverged client: NaN or Inf in the delta gives a payload the aggregator rejects,
 * whatever the codec. */
static void test_diverged(void) {
    const char *names[] = {"fp32", "fp16", "bf16", "int8", "int4", "sign", "topk:0.003", "topk:1"};
    const float bad_in[2] = {NAN, INFINITY};
    float x[N];
    for (int c = 0; c < 8; c++)
        for (int k = 0; k < 2; k++) {
            const hfl_codec *codec = test_codec(names[c]);
            test_fill(x, N, 3.0f, 11, 0);
            x[N - 3] = bad_in[k];
            hfl_rng_key key = {.seed = 5};
            size_t len;
            float res[N] = {0};
            uint8_t *q = test_encode(codec, x, res, N, BLOCK, &key, &len);
            expect_reject(codec, q, len, N, k ? "Inf in delta" : "NaN in delta", NULL);
            free(q);
        }
}

/* int8 and fp32 payloads: their headers, a payload of the other codec, and
 * patched scales and values. */
static void test_int8_fp32(void) {
    const hfl_codec *i8 = test_codec("int8"), *f32 = test_codec("fp32");
    float x[N];
    test_fill(x, N, 3.0f, 11, 0);
    hfl_rng_key key = {.seed = 5};
    size_t li, lf;
    uint8_t *pi = test_encode(i8, x, NULL, N, BLOCK, &key, &li);
    uint8_t *pf = test_encode(f32, x, NULL, N, 0, &key, &lf);

    test_header(i8, pi, li, "expected 1028 for n=1000 block=256");
    test_header(f32, pf, lf, "expected 4012 for n=1000");
    expect_reject(i8, pf, lf, N, "fp32 payload given to int8", "codec id");

    size_t last_scale = HFL_CODEC_HEADER_BYTES + 3 * (4 + BLOCK);
    float nan = NAN, inf = INFINITY, neg = -1.0f, tiny_neg = -1e-30f;
    check_patch(i8, pi, li, last_scale, &nan, 4, "NaN scale", "block 3");
    check_patch(i8, pi, li, last_scale, &inf, 4, "Inf scale", "inf");
    check_patch(i8, pi, li, last_scale, &neg, 4, "negative scale", "-1");
    check_patch(i8, pi, li, last_scale, &tiny_neg, 4, "tiny negative scale", NULL);
    /* A finite scale whose 127x overflows would decode to Inf: refused; at the
     * bound itself the decoded values stay finite. */
    float huge8 = FLT_MAX / 128 * 1.01f, edge8 = FLT_MAX / 128;
    check_patch(i8, pi, li, last_scale, &huge8, 4, "scale past FLT_MAX/128", "block 3");
    uint8_t *edge = patched(pi, li, last_scale, &edge8, 4);
    float *acc = calloc(N, sizeof(float));
    char err[HFL_ERR_LEN];
    CHECK_MSG(hfl_codec_decode_accumulate(i8, edge, li, N, 1.0f, acc, 1, err) == 0, "scale at the bound refused: %s", err);
    for (size_t i = 0; i < N; i++) CHECK_MSG(isfinite(acc[i]), "value %zu decoded to %g", i, (double)acc[i]);
    free(acc);
    free(edge);
    size_t last_value = HFL_CODEC_HEADER_BYTES + (N - 1) * 4;
    check_patch(f32, pf, lf, last_value, &nan, 4, "NaN value", "value 999");
    check_patch(f32, pf, lf, last_value, &inf, 4, "Inf value", "value 999");
    free(pi);
    free(pf);
}

static void test_half_fp16(void) { test_half("fp16", 0x7C00, 0x7E00); }
static void test_half_bf16(void) { test_half("bf16", 0x7F80, 0x7FC0); }

static const check_case cases[] = {
    {"int8_fp32", test_int8_fp32},
    {"fp16", test_half_fp16},
    {"bf16", test_half_bf16},
    {"lowbit", test_lowbit},
    {"topk", test_topk},
    {"diverged", test_diverged},
};

int main(int argc, char **argv) {
    return check_run("test_codec_malformed", cases, CHECK_CASES(cases), argc, argv);
}
