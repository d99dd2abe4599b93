/* test_codec_format.c: codec lookup, payload sizes, round-trip error bounds,
 * determinism in the key, weighted accumulation, and rejection of malformed
 * payloads with the accumulator left untouched. */
#include "tests/compress/codec_test.h"

#include "compress/quant_hd.h"

static void test_find(void) {
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_codec_find("fp32", err) && hfl_codec_find("int8", err), "known codecs not found");
    CHECK(hfl_codec_find("int4", err) == NULL, "int4 found");
    CHECK(strcmp(err, "unknown codec 'int4' (known: fp32, int8)") == 0, "message: %s", err);
    const hfl_codec *i8 = test_codec("int8"), *f32 = test_codec("fp32");
    CHECK(hfl_codec_check(i8, 10, 0, err) == -1 && strstr(err, "block size 0"), "%s", err);
    CHECK(hfl_codec_check(i8, 10, HFL_CODEC_MAX_BLOCK + 1, err) == -1, "block too big accepted");
    CHECK(hfl_codec_check(i8, 10, HFL_CODEC_MAX_BLOCK, err) == 0, "%s", err);
    CHECK(hfl_codec_check(f32, 10, 0, err) == 0, "%s", err);
    CHECK(hfl_codec_check(f32, 10, 256, err) == 0 && f32->encoded_bytes(10, 256) == 12 + 40,
          "fp32 must ignore a run's block size");
    CHECK(i8->encoded_bytes(10, 0) == 0 && i8->encoded_bytes(10, 65537) == 0,
          "encoded_bytes accepts invalid block");
}

static void test_sizes(void) {
    const hfl_codec *i8 = test_codec("int8"), *f32 = test_codec("fp32");
    size_t n = 199210; /* 778 full blocks of 256 and one of 42 */
    size_t bi = i8->encoded_bytes(n, 256), bf = f32->encoded_bytes(n, 0);
    CHECK(bi == 12 + 779 * 4 + n, "int8 bytes %zu", bi);
    CHECK(bf == 12 + 4 * n, "fp32 bytes %zu", bf);
    double ratio = (double)bi / (double)bf; /* (256 + 4) / 1024 = 0.2539 per full block */
    CHECK(fabs(ratio - 260.0 / 1024.0) < 5e-4, "int8/fp32 ratio %.4f", ratio);
    printf("int8/fp32 bytes at block 256, n=%zu: %.4f\n", n, ratio);
    CHECK(i8->encoded_bytes(0, 256) == 12 && f32->encoded_bytes(0, 0) == 12, "empty payloads");
}

/* Every decoded value within its block's scale of x; exact multiples of the scale
 * come back exactly; fp32 is exact. */
static void test_round_trip(size_t n, uint32_t block) {
    const hfl_codec *i8 = test_codec("int8"), *f32 = test_codec("fp32");
    float *x = hfl_malloc(n * sizeof(float)), *y = hfl_malloc(n * sizeof(float));
    test_fill(x, n, 1.0f, 7, (uint32_t)n);
    for (size_t i = 0; i < n; i++) /* magnitudes from 1e-3 to 1e3 across the vector */
        x[i] *= powf(10.0f, -3.0f + 6.0f * (float)i / (float)n);
    size_t len;
    hfl_rng_key key = {.seed = 99, .round = 3, .client = 5, .tensor = 1};
    uint8_t *p = test_encode(i8, x, NULL, n, block, &key, &len);
    test_decode(i8, p, len, n, y);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float s = test_int8_scale(p, block, i / block), e = fabsf(y[i] - x[i]);
        if (!(e < s || y[i] == x[i]))
            bad++;
    }
    CHECK(bad == 0, "int8 n=%zu block=%u: %zu values off by >= scale", n, block, bad);
    free(p);
    /* Exact multiples of a power-of-two scale: each block opens with 127 * 2^-4, so
     * every scale is 2^-4 exactly and nothing may move. */
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i % block == 0 ? 127 : (long)(i % 255) - 127) * 0.0625f;
    p = test_encode(i8, x, NULL, n, block, &key, &len);
    test_decode(i8, p, len, n, y);
    CHECK(memcmp(x, y, n * sizeof(float)) == 0,
          "int8 n=%zu block=%u: exact multiples not exact", n, block);
    free(p);
    p = test_encode(f32, x, NULL, n, 0, &key, &len);
    test_decode(f32, p, len, n, y);
    CHECK(memcmp(x, y, n * sizeof(float)) == 0, "fp32 n=%zu not exact", n);
    free(p);
    free(x);
    free(y);
}

static void test_key_and_weight(void) {
    const hfl_codec *i8 = test_codec("int8");
    size_t n = 1000, len, len2;
    float x[1000], a1[1000], a3[1000];
    test_fill(x, n, 2.0f, 1, 0);
    hfl_rng_key key = {.seed = 1, .round = 2, .client = 3, .tensor = 4};
    uint8_t *p = test_encode(i8, x, NULL, n, 256, &key, &len);
    uint8_t *q = test_encode(i8, x, NULL, n, 256, &key, &len2);
    CHECK(memcmp(p, q, len) == 0, "same key, different bytes");
    free(q);
    for (int field = 0; field < 4; field++) {
        hfl_rng_key k2 = key;
        if (field == 0) k2.seed++;
        if (field == 1) k2.round++;
        if (field == 2) k2.client++;
        if (field == 3) k2.tensor++;
        q = test_encode(i8, x, NULL, n, 256, &k2, &len2);
        CHECK(memcmp(p, q, len) != 0, "key field %d changed, bytes did not", field);
        free(q);
    }
    char err[HFL_ERR_LEN];
    for (size_t i = 0; i < n; i++)
        a1[i] = a3[i] = 0.5f * (float)i;
    CHECK(i8->decode_accumulate(p, len, n, 1.0f, a1, err) == 0, "%s", err);
    CHECK(i8->decode_accumulate(p, len, n, 3.0f, a3, err) == 0, "%s", err);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float base = 0.5f * (float)i, d1 = a1[i] - base, d3 = a3[i] - base;
        if (fabsf(d3 - 3.0f * d1) > 1e-5f * (1.0f + fabsf(base)))
            bad++;
    }
    CHECK(bad == 0, "weight 3 is not 3x weight 1 on %zu values", bad);
    free(p);
}

/* The encoder draws four uniforms per Philox call; it must match the per-element
 * formula a GPU kernel uses: q[i] = round(x[i], scale, u01(philox(key, i))). */
static void test_matches_reference(size_t n, uint32_t block) {
    const hfl_codec *i8 = test_codec("int8");
    float x[300];
    test_fill(x, n, 1.5f, 4, block);
    hfl_rng_key key = {.seed = 0x123456789ull, .round = 9, .client = 8, .tensor = 7};
    size_t len, mismatches = 0;
    uint8_t *p = test_encode(i8, x, NULL, n, block, &key, &len);
    for (size_t i = 0; i < n; i++) {
        float s = test_int8_scale(p, block, i / block);
        uint32_t bits = hfl_philox_u32(key.seed, HFL_STREAM_QUANT, key.round, key.client,
                                       key.tensor, i);
        int8_t want = hfl_q8_round(x[i], s, hfl_u01(bits)), got;
        memcpy(&got, p + HFL_CODEC_HEADER_BYTES + (i / block + 1) * sizeof(float) + i, 1);
        mismatches += got != want;
    }
    CHECK(mismatches == 0, "n=%zu block=%u: %zu values differ from the reference", n, block,
          mismatches);
    free(p);
    uint64_t quads[] = {0, 1, 12345, (1ull << 32) - 1, 1ull << 32, (1ull << 40) + 3};
    for (size_t k = 0; k < sizeof quads / sizeof quads[0]; k++) {
        float u[4];
        hfl_q8_uniform4(key.seed, key.round, key.client, key.tensor, quads[k], u);
        for (int l = 0; l < 4; l++)
            CHECK(u[l] == hfl_q8_uniform(key.seed, key.round, key.client, key.tensor,
                                         quads[k] * 4 + (uint64_t)l),
                  "uniform4 lane %d of quad %llu", l, (unsigned long long)quads[k]);
    }
}

int main(void) {
    test_find();
    test_sizes();
    size_t ns[] = {1, 255, 1000, 3001};
    uint32_t blocks[] = {1, 7, 256, 1000, HFL_CODEC_MAX_BLOCK};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
            test_round_trip(ns[a], blocks[b]);
    test_key_and_weight();
    test_matches_reference(300, 7);
    test_matches_reference(299, 256);
    test_matches_reference(5, 1);
    return test_report("test_codec_format");
}
