/* test_codec_malformed.c: every malformed payload is rejected with a one-line
 * error and the accumulator untouched. Damage is put in the last block where
 * it can be, so a decoder that accumulates while it validates would be caught. */
#include "tests/compress/codec_test.h"

enum { N = 1000, BLOCK = 256 }; /* 3 full blocks and one of 232 */

/* Decodes (p, len) expecting rejection; checks acc is untouched and err is set. */
static void expect_reject(const hfl_codec *c, const uint8_t *p, size_t len, size_t expect_n,
                          const char *what, const char *want_in_err) {
    float acc[N], before[N];
    for (size_t i = 0; i < N; i++)
        acc[i] = before[i] = (float)i * 0.25f - 7.0f;
    char err[HFL_ERR_LEN] = "";
    int rc = c->decode_accumulate(p, len, expect_n, 1.0f, acc, err);
    CHECK(rc == -1, "%s %s: accepted", c->name, what);
    CHECK(memcmp(acc, before, sizeof acc) == 0, "%s %s: acc modified", c->name, what);
    CHECK(err[0] && !strchr(err, '\n'), "%s %s: no one-line error", c->name, what);
    CHECK(!want_in_err || strstr(err, want_in_err), "%s %s: error '%s' lacks '%s'", c->name, what,
          err, want_in_err);
    uint32_t block;
    CHECK(c->validate(p, len, expect_n, &block, err) == -1, "%s %s: validate accepted", c->name,
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
    check_patch(c, p, len, 0, &other, 1, "wrong id", "codec id");
    check_patch(c, p, len, 1, &one, 1, "reserved byte 1", "reserved");
    check_patch(c, p, len, 3, &one, 1, "reserved byte 3", "reserved");
    uint32_t zero = 0, big = HFL_CODEC_MAX_BLOCK + 1, b128 = 128, b256 = 256;
    if (c->id == 2) {
        check_patch(c, p, len, 8, &zero, 4, "block 0", "block size 0");
        check_patch(c, p, len, 8, &big, 4, "block too big", "block size 65537");
        check_patch(c, p, len, 8, &b128, 4, "block size changed", "expected");
    } else {
        check_patch(c, p, len, 8, &b256, 4, "fp32 with a block", "block size 256");
    }
}

int main(void) {
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
    size_t last_value = HFL_CODEC_HEADER_BYTES + (N - 1) * 4;
    check_patch(f32, pf, lf, last_value, &nan, 4, "NaN value", "value 999");
    check_patch(f32, pf, lf, last_value, &inf, 4, "Inf value", "value 999");

    /* A diverged client: NaN or Inf in the delta gives a payload the aggregator rejects. */
    const float bad_in[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        x[N - 3] = bad_in[k];
        uint8_t *qi = test_encode(i8, x, NULL, N, BLOCK, &key, &li);
        uint8_t *qf = test_encode(f32, x, NULL, N, 0, &key, &lf);
        expect_reject(i8, qi, li, N, k ? "Inf in delta" : "NaN in delta", "block 3");
        expect_reject(f32, qf, lf, N, k ? "Inf in delta" : "NaN in delta", "value 997");
        free(qi);
        free(qf);
    }
    free(pi);
    free(pf);
    return test_report("test_codec_malformed");
}
