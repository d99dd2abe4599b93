/* codec_test.h: helpers shared by the codec tests: reproducible random
 * vectors drawn from philox, and encode/decode wrappers that check (with
 * tests/check.h) the byte count encode writes and that the bytes do not
 * depend on the thread count. */
#ifndef HFL_CODEC_TEST_H
#define HFL_CODEC_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/codec.h"
#include "kernels/philox.h"
#include "tests/check.h"
#include "util/util.h"

/* x[i] uniform in [-amp, amp), reproducible from (seed, tensor). */
static inline void test_fill(float *x, size_t n, float amp, uint64_t seed, uint32_t tensor) {
    for (size_t i = 0; i < n; i++)
        x[i] = amp * (2.0f * hfl_u01(hfl_philox_u32(seed, HFL_STREAM_INIT, 0, 0, tensor, i)) - 1.0f);
}

static inline const hfl_codec *test_codec(const char *name) {
    char err[HFL_ERR_LEN];
    const hfl_codec *c = hfl_codec_find(name, err);
    REQUIRE_MSG(c != NULL, "%s", err);
    return c;
}

/* Encodes into a fresh buffer of max_bytes(n, block), checking that encode writes
 * every byte it reports (two encodes over different fill patterns agree), none past
 * it (guard bytes unchanged), the same bytes on 1 and 3 threads, and exactly
 * max_bytes for every codec but topk. *len gets the size. */
static inline uint8_t *test_encode(const hfl_codec *c, const float *x, float *residual, size_t n,
                                   uint32_t block, const hfl_rng_key *key, size_t *len) {
    size_t bytes = hfl_codec_max_bytes(c, n, block), guard = 16;
    CHECK_MSG(bytes > 0, "%s max_bytes(%zu, %u) = 0", c->name, n, block);
    uint8_t *a = hfl_malloc(bytes + guard), *b = hfl_malloc(bytes + guard);
    memset(a, 0x00, bytes + guard);
    memset(b, 0xFF, bytes + guard);
    float *res_copy = NULL;
    if (residual) {
        res_copy = hfl_malloc(n * sizeof(float));
        memcpy(res_copy, residual, n * sizeof(float));
    }
    size_t la = hfl_codec_encode(c, x, residual, n, block, key, 1, a);
    size_t lb = hfl_codec_encode(c, x, res_copy, n, block, key, 3, b);
    CHECK_MSG(la == lb && la <= bytes, "%s encode wrote %zu and %zu bytes, max %zu", c->name, la, lb,
              bytes);
    CHECK_MSG(c->fraction > 0 || la == bytes, "%s encode wrote %zu bytes, not %zu", c->name, la,
              bytes); /* only topk (the one codec with a fraction) varies */
    CHECK_MSG(memcmp(a, b, la) == 0, "%s encode leaves bytes unwritten or depends on threads "
              "(n=%zu block=%u)", c->name, n, block);
    CHECK_MSG(!residual || memcmp(residual, res_copy, n * sizeof(float)) == 0,
              "%s residual depends on threads", c->name);
    for (size_t i = la; i < bytes + guard; i++)
        CHECK_MSG(a[i] == 0x00 && b[i] == 0xFF, "%s encode writes past its length (n=%zu block=%u)",
                  c->name, n, block);
    free(b);
    free(res_copy);
    *len = la;
    return a;
}

/* The scale stored for block k of an int8 payload. */
static inline float test_int8_scale(const uint8_t *p, uint32_t block, size_t k) {
    float s;
    memcpy(&s, p + HFL_CODEC_HEADER_BYTES + k * (sizeof(float) + block), sizeof s);
    return s;
}

/* Decodes with weight 1 into a zeroed vector (which must succeed). */
static inline void test_decode(const hfl_codec *c, const uint8_t *p, size_t len, size_t n,
                               float *out) {
    char err[HFL_ERR_LEN] = "";
    memset(out, 0, n * sizeof(float));
    int rc = hfl_codec_decode_accumulate(c, p, len, n, 1.0f, out, 1, err);
    CHECK_MSG(rc == 0, "%s decode failed: %s", c->name, err);
}

#endif
