/* test_codec_format.c: codec lookup (topk names parsed and interned), payload
 * sizes against the ceilings, int8 and fp32 round-trip error bounds,
 * determinism in the key, weighted accumulation, and the stochastic-rounding
 * encoders against the per-element HFL_HD formula. */
#include "tests/compress/codec_test.h"

#include "compress/quant_hd.h"

static void test_find(void) {
    char err[HFL_ERR_LEN] = "";
    const char *names[] = {"fp32", "fp16", "bf16", "int8", "int4", "sign"};
    const int biased[] = {0, 1, 1, 0, 0, 1};
    for (int i = 0; i < 6; i++) {
        const hfl_codec *c = hfl_codec_find(names[i], err);
        CHECK_MSG(c && strcmp(c->name, names[i]) == 0 && c->biased == biased[i], "%s: %s", names[i],
                  err);
    }
    CHECK_MSG(hfl_codec_find("int2", err) == NULL, "int2 found");
    CHECK_MSG(strcmp(err, "unknown codec 'int2' (known: fp32, fp16, bf16, int8, int4, sign, "
                          "topk:<fraction in (0, 1]>)") == 0, "message: %s", err);
    const hfl_codec *t1 = hfl_codec_find("topk:0.01", err), *t2 = hfl_codec_find("topk:0.010", err);
    CHECK_MSG(t1 && t1 == t2 && strcmp(t1->name, "topk:0.01") == 0 && t1->fraction == 0.01 &&
              t1->biased, "topk:0.01 not interned as one canonical instance");
    const hfl_codec *t3 = hfl_codec_find("topk:1", err), *t4 = hfl_codec_find("topk:0.5", err);
    CHECK_MSG(t3 && t4 && t3 != t4 && t3 != t1 && t3->fraction == 1.0, "topk:1 / topk:0.5");
    const char *bad[] = {"topk:0", "topk:1.5", "topk:-0.1", "topk:", "topk:abc", "topk:0.1x",
                         "topk:nan", "topk"};
    for (int i = 0; i < 8; i++) {
        err[0] = 0;
        CHECK_MSG(hfl_codec_find(bad[i], err) == NULL && err[0] && !strchr(err, '\n'),
                  "'%s' accepted", bad[i]);
    }
    const hfl_codec *i8 = test_codec("int8"), *f32 = test_codec("fp32");
    CHECK_MSG(hfl_codec_check(i8, 10, 0, err) == -1 && strstr(err, "block size 0"), "%s", err);
    CHECK_MSG(hfl_codec_check(test_codec("sign"), 10, 0, err) == -1, "sign block 0 accepted");
    CHECK_MSG(hfl_codec_check(i8, 10, HFL_CODEC_MAX_BLOCK + 1, err) == -1, "block too big accepted");
    CHECK_MSG(hfl_codec_check(i8, 10, HFL_CODEC_MAX_BLOCK, err) == 0, "%s", err);
    CHECK_MSG(hfl_codec_check(f32, 10, 0, err) == 0, "%s", err);
    CHECK_MSG(hfl_codec_check(t1, 10, 0, err) == 0, "%s", err);
    CHECK_MSG(hfl_codec_check(f32, 10, 256, err) == 0 && hfl_codec_max_bytes(f32, 10, 256) == 12 + 40,
              "fp32 must ignore a run's block size");
    CHECK_MSG(hfl_codec_max_bytes(i8, 10, 0) == 0 && hfl_codec_max_bytes(i8, 10, 65537) == 0,
              "max_bytes accepts invalid block");
}

/* Bytes relative to fp32 for n = 199210 at block 256, header included, against the
 * issue's ceilings; topk's is the size of an actual payload of random data. */
static void test_sizes(void) {
    const hfl_codec *i8 = test_codec("int8"), *f32 = test_codec("fp32");
    size_t n = 199210; /* 778 full blocks of 256 and one of 42 */
    size_t bi = hfl_codec_max_bytes(i8, n, 256), bf = hfl_codec_max_bytes(f32, n, 0);
    CHECK_MSG(bi == 12 + 779 * 4 + n, "int8 bytes %zu", bi);
    CHECK_MSG(bf == 12 + 4 * n, "fp32 bytes %zu", bf);
    CHECK_MSG(hfl_codec_max_bytes(test_codec("int4"), n, 256) == 12 + 779 * 4 + 778 * 128 + 21,
              "int4 bytes");
    CHECK_MSG(hfl_codec_max_bytes(test_codec("sign"), n, 256) == 12 + 779 * 4 + 778 * 32 + 6,
              "sign bytes");
    CHECK_MSG(hfl_codec_max_bytes(test_codec("fp16"), n, 256) == 12 + 2 * n, "fp16 bytes");
    const char *names[] = {"fp16", "bf16", "int8", "int4", "sign", "topk:0.01"};
    const double ceiling[] = {0.51, 0.51, 0.26, 0.14, 0.04, 0.03};
    float *x = hfl_malloc(n * sizeof(float));
    test_fill(x, n, 1.0f, 3, 0);
    for (int i = 0; i < 6; i++) {
        const hfl_codec *c = test_codec(names[i]);
        size_t len;
        hfl_rng_key key = {.seed = 1};
        uint8_t *p = test_encode(c, x, NULL, n, 256, &key, &len);
        double ratio = (double)len / (double)bf;
        CHECK_MSG(ratio <= ceiling[i], "%s: %.4f of fp32, over %.2f", names[i], ratio, ceiling[i]);
        printf("%s/fp32 bytes at block 256, n=%zu: %.4f (ceiling %.2f)\n", names[i], n, ratio,
               ceiling[i]);
        free(p);
    }
    free(x);
    CHECK_MSG(hfl_codec_max_bytes(i8, 0, 256) == 12 && hfl_codec_max_bytes(f32, 0, 0) == 12,
              "empty payloads");
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
    CHECK_MSG(bad == 0, "int8 n=%zu block=%u: %zu values off by >= scale", n, block, bad);
    free(p);
    /* Exact multiples of a power-of-two scale: each block opens with 127 * 2^-4, so
     * every scale is 2^-4 exactly and nothing may move. */
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i % block == 0 ? 127 : (long)(i % 255) - 127) * 0.0625f;
    p = test_encode(i8, x, NULL, n, block, &key, &len);
    test_decode(i8, p, len, n, y);
    CHECK_MSG(memcmp(x, y, n * sizeof(float)) == 0,
              "int8 n=%zu block=%u: exact multiples not exact", n, block);
    free(p);
    p = test_encode(f32, x, NULL, n, 0, &key, &len);
    test_decode(f32, p, len, n, y);
    CHECK_MSG(memcmp(x, y, n * sizeof(float)) == 0, "fp32 n=%zu not exact", n);
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
    CHECK_MSG(memcmp(p, q, len) == 0, "same key, different bytes");
    free(q);
    for (int field = 0; field < 4; field++) {
        hfl_rng_key k2 = key;
        if (field == 0) k2.seed++;
        if (field == 1) k2.round++;
        if (field == 2) k2.client++;
        if (field == 3) k2.tensor++;
        q = test_encode(i8, x, NULL, n, 256, &k2, &len2);
        CHECK_MSG(memcmp(p, q, len) != 0, "key field %d changed, bytes did not", field);
        free(q);
    }
    char err[HFL_ERR_LEN];
    for (size_t i = 0; i < n; i++)
        a1[i] = a3[i] = 0.5f * (float)i;
    CHECK_MSG(hfl_codec_decode_accumulate(i8, p, len, n, 1.0f, a1, 1, err) == 0, "%s", err);
    CHECK_MSG(hfl_codec_decode_accumulate(i8, p, len, n, 3.0f, a3, 2, err) == 0, "%s", err);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float base = 0.5f * (float)i, d1 = a1[i] - base, d3 = a3[i] - base;
        if (fabsf(d3 - 3.0f * d1) > 1e-5f * (1.0f + fabsf(base)))
            bad++;
    }
    CHECK_MSG(bad == 0, "weight 3 is not 3x weight 1 on %zu values", bad);
    free(p);
}

/* The encoder draws eight 16-bit uniforms per Philox call over arrays of counters; it
 * must match the per-element formula a GPU kernel uses:
 * q[i] = round(x[i], scale, sr_uniform(sr_bits16(key, i)), qmax), for int8 and int4. */
static void test_matches_reference(size_t n, uint32_t block) {
    const hfl_codec *i8 = test_codec("int8"), *i4 = test_codec("int4");
    float x[300];
    test_fill(x, n, 1.5f, 4, block);
    hfl_rng_key key = {.seed = 0x123456789ull, .round = 9, .client = 8, .tensor = 7};
    size_t len, len4, mismatches = 0;
    uint8_t *p = test_encode(i8, x, NULL, n, block, &key, &len);
    uint8_t *p4 = test_encode(i4, x, NULL, n, block, &key, &len4);
    size_t b4 = 4 + (block + 1) / 2;
    for (size_t i = 0; i < n; i++) {
        float s = test_int8_scale(p, block, i / block), s4;
        memcpy(&s4, p4 + HFL_CODEC_HEADER_BYTES + (i / block) * b4, 4);
        float u = hfl_sr_uniform(hfl_sr_bits16(key.seed, key.round, key.client, key.tensor, i));
        int8_t want = hfl_q8_round(x[i], s, u), got;
        memcpy(&got, p + HFL_CODEC_HEADER_BYTES + (i / block + 1) * sizeof(float) + i, 1);
        mismatches += got != want;
        size_t j = i % block;
        uint8_t byte = p4[HFL_CODEC_HEADER_BYTES + (i / block) * b4 + 4 + j / 2];
        int32_t got4 = j & 1 ? hfl_q4_hi(byte) : hfl_q4_lo(byte);
        mismatches += got4 != hfl_q4_round(x[i], s4, u);
    }
    CHECK_MSG(mismatches == 0, "n=%zu block=%u: %zu values differ from the reference", n, block,
              mismatches);
    free(p);
    free(p4);
    /* The 16 bits at an index are the (i >> 1) & 3 word's half of Philox at counter i >> 3,
     * including past 2^32 groups, where the group's high bits go into the round word. */
    uint64_t idx[] = {0, 1, 7, 8, 12345, (1ull << 35) - 1, 1ull << 35, (1ull << 43) + 13};
    for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
        uint32_t key2[2] = {(uint32_t)key.seed,
                            (uint32_t)(key.seed >> 32) ^ (HFL_STREAM_QUANT * 0x85EBCA6Bu)};
        uint32_t ctr[4] = {(uint32_t)(idx[k] >> 3), key.round ^ (uint32_t)(idx[k] >> 35),
                           key.client, key.tensor}, out[4];
        hfl_philox4x32_10(ctr, key2, out);
        uint32_t want = (out[(idx[k] >> 1) & 3] >> (16 * (idx[k] & 1))) & 0xFFFF;
        CHECK_MSG(hfl_sr_bits16(key.seed, key.round, key.client, key.tensor, idx[k]) == want,
                  "bits16 at %llu", (unsigned long long)idx[k]);
    }
}

/* Every size against every block length, each encoded and decoded back. */
static void test_round_trips(void) {
    size_t ns[] = {1, 255, 1000, 3001};
    uint32_t blocks[] = {1, 7, 256, 1000, HFL_CODEC_MAX_BLOCK};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) test_round_trip(ns[a], blocks[b]);
}

static void test_references(void) {
    test_matches_reference(300, 7);
    test_matches_reference(299, 256);
    test_matches_reference(5, 1);
}

static const check_case cases[] = {
    {"find", test_find},
    {"sizes", test_sizes},
    {"round_trip", test_round_trips},
    {"key_and_weight", test_key_and_weight},
    {"matches_reference", test_references},
};

int main(int argc, char **argv) {
    return check_run("test_codec_format", cases, CHECK_CASES(cases), argc, argv);
}
