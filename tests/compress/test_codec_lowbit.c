/* test_codec_lowbit.c: round trips of int4, sign and topk, and decode with
 * several threads.
 *
 * int4: every value within its block's scale (absmax / 7); exact multiples of a
 * power-of-two scale come back exactly. sign: every value decodes to
 * +-mean|v| of its block with v's sign. topk: exactly the ceil(F n) largest
 * magnitudes come back (fp16-rounded), ties to the lower index, the rest 0.
 * Threads: decode_accumulate on 1, 2 and 5 threads gives the same bits. */
#include "tests/compress/codec_test.h"

#include "compress/quant_hd.h"

static float *fill_wide(size_t n, uint32_t tensor) {
    float *x = hfl_malloc(n * sizeof(float));
    test_fill(x, n, 1.0f, 17, tensor);
    for (size_t i = 0; i < n; i++) /* magnitudes from 1e-3 to 1e3 across the vector */
        x[i] *= powf(10.0f, -3.0f + 6.0f * (float)i / (float)n);
    return x;
}

static void test_int4(size_t n, uint32_t block) {
    const hfl_codec *c = test_codec("int4");
    float *x = fill_wide(n, block), *y = hfl_malloc(n * sizeof(float));
    hfl_rng_key key = {.seed = 3, .round = 1};
    size_t len, bad = 0, bb = 4 + (block + 1) / 2;
    uint8_t *p = test_encode(c, x, NULL, n, block, &key, &len);
    test_decode(c, p, len, n, y);
    for (size_t i = 0; i < n; i++) {
        float s;
        memcpy(&s, p + HFL_CODEC_HEADER_BYTES + (i / block) * bb, 4);
        bad += !(fabsf(y[i] - x[i]) < s || y[i] == x[i]);
    }
    CHECK_MSG(bad == 0, "int4 n=%zu block=%u: %zu values off by >= scale", n, block, bad);
    free(p);
    for (size_t i = 0; i < n; i++) /* each block opens with 7/8, so every scale is 1/8 */
        x[i] = (float)(i % block == 0 ? 7 : (long)(i % 15) - 7) * 0.125f;
    p = test_encode(c, x, NULL, n, block, &key, &len);
    test_decode(c, p, len, n, y);
    CHECK_MSG(memcmp(x, y, n * sizeof(float)) == 0, "int4 n=%zu block=%u: multiples not exact", n,
              block);
    free(p);
    free(x);
    free(y);
}

static void test_sign(size_t n, uint32_t block) {
    const hfl_codec *c = test_codec("sign");
    float *x = fill_wide(n, block + 1), *y = hfl_malloc(n * sizeof(float));
    x[0] = -0.0f;
    hfl_rng_key key = {0};
    size_t len, bad = 0;
    uint8_t *p = test_encode(c, x, NULL, n, block, &key, &len);
    test_decode(c, p, len, n, y);
    for (size_t start = 0; start < n; start += block) {
        size_t m = n - start < block ? n - start : block;
        double mean = 0;
        for (size_t j = 0; j < m; j++)
            mean += fabs((double)x[start + j]);
        mean /= (double)m;
        for (size_t j = 0; j < m; j++) {
            float v = x[start + j], d = y[start + j];
            bad += fabs(fabs((double)d) - mean) > 1e-5 * mean || (v < 0) != (d < 0);
        }
    }
    CHECK_MSG(bad == 0, "sign n=%zu block=%u: %zu values not +-mean|v| with v's sign", n, block, bad);
    free(p);
    free(x);
    free(y);
}

static int by_magnitude_desc(const void *a, const void *b) {
    float x = fabsf(*(const float *)a), y = fabsf(*(const float *)b);
    return x < y ? 1 : x > y ? -1 : 0;
}

static void test_topk(const char *name, size_t n, size_t want_k) {
    const hfl_codec *c = test_codec(name);
    float *x = fill_wide(n, 5), *y = hfl_malloc(n * sizeof(float));
    float *res = hfl_calloc(n, sizeof(float)), *sorted = hfl_malloc(n * sizeof(float));
    for (size_t i = 0; i + 1 < n; i += 97) /* ties: pairs of equal magnitude */
        x[i + 1] = -x[i];
    hfl_rng_key key = {0};
    size_t len, bad = 0, kept = 0;
    uint8_t *p = test_encode(c, x, res, n, 0, &key, &len);
    test_decode(c, p, len, n, y);
    memcpy(sorted, x, n * sizeof(float));
    qsort(sorted, n, sizeof(float), by_magnitude_desc);
    float thr = want_k ? fabsf(sorted[want_k - 1]) : INFINITY;
    size_t above = 0;
    for (size_t i = 0; i < n; i++)
        above += fabsf(x[i]) > thr;
    size_t eq_left = want_k - above;
    for (size_t i = 0; i < n; i++) {
        int expect = fabsf(x[i]) > thr || (fabsf(x[i]) == thr && eq_left > 0);
        if (fabsf(x[i]) == thr && expect)
            eq_left--;
        float want = expect ? hfl_f16_to_f32(hfl_f32_to_f16(x[i])) : 0.0f;
        bad += y[i] != want || res[i] != x[i] - y[i];
        kept += y[i] != 0.0f;
    }
    CHECK_MSG(bad == 0, "%s n=%zu: %zu entries not the top-k (or residual wrong)", name, n, bad);
    CHECK_MSG(kept == want_k, "%s n=%zu: kept %zu, expected %zu", name, n, kept, want_k);
    free(p);
    free(x);
    free(y);
    free(res);
    free(sorted);
}

/* Ties at the threshold go to the lower index. */
static void test_topk_ties(void) {
    const hfl_codec *c = test_codec("topk:0.5");
    float x[6] = {1, -2, 2, -2, 0.5f, 2}, y[6];
    hfl_rng_key key = {0};
    size_t len;
    uint8_t *p = test_encode(c, x, NULL, 6, 0, &key, &len);
    test_decode(c, p, len, 6, y);
    CHECK_MSG(y[0] == 0 && y[1] == -2 && y[2] == 2 && y[3] == -2 && y[4] == 0 && y[5] == 0,
              "ties not taken from the lowest index");
    CHECK_MSG(len == 12 + 4 + 3 * 2 + 3, "topk ties payload %zu bytes", len);
    free(p);
}

static void test_threads(void) {
    const char *names[] = {"fp32", "fp16", "bf16", "int8", "int4", "sign", "topk:0.05"};
    size_t n = 100003;
    float *x = fill_wide(n, 9), *a1 = hfl_malloc(n * sizeof(float));
    float *a2 = hfl_malloc(n * sizeof(float));
    for (int c = 0; c < 7; c++) {
        const hfl_codec *codec = test_codec(names[c]);
        hfl_rng_key key = {.seed = 4};
        size_t len;
        uint8_t *p = test_encode(codec, x, NULL, n, 100, &key, &len);
        char err[HFL_ERR_LEN];
        test_fill(a1, n, 1.0f, 2, 2);
        memcpy(a2, a1, n * sizeof(float));
        CHECK_MSG(hfl_codec_decode_accumulate(codec, p, len, n, 0.75f, a1, 1, err) == 0, "%s", err);
        for (int t = 2; t <= 5; t += 3) {
            float *a = hfl_malloc(n * sizeof(float));
            memcpy(a, a2, n * sizeof(float));
            CHECK_MSG(hfl_codec_decode_accumulate(codec, p, len, n, 0.75f, a, t, err) == 0, "%s", err);
            CHECK_MSG(memcmp(a, a1, n * sizeof(float)) == 0, "%s: %d threads decode differently",
                      names[c], t);
            free(a);
        }
        free(p);
    }
    free(x);
    free(a1);
    free(a2);
}

static const size_t sizes[] = {1, 255, 1000, 3001};
static const uint32_t blocks[] = {1, 7, 256, 1000, HFL_CODEC_MAX_BLOCK};

static void test_int4_all(void) {
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 5; b++) test_int4(sizes[a], blocks[b]);
}

static void test_sign_all(void) {
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 5; b++) test_sign(sizes[a], blocks[b]);
}

static void test_topk_all(void) {
    test_topk("topk:0.01", 199210, 1993);
    test_topk("topk:0.07", 100, 7); /* 0.07 * 100 = 7.000000000000001 in double */
    test_topk("topk:1", 1000, 1000);
    test_topk("topk:0.001", 1, 1);
    test_topk("topk:0.3", 3001, 901);
}

static const check_case cases[] = {
    {"int4", test_int4_all},
    {"sign", test_sign_all},
    {"topk", test_topk_all},
    {"topk_ties", test_topk_ties},
    {"threads", test_threads},
};

int main(int argc, char **argv) {
    return check_run("test_codec_lowbit", cases, CHECK_CASES(cases), argc, argv);
}
