/* test_aggregate.c: the aggregator (coordinator/aggregate.h).
 *
 * 1. Order: 12 updates (fp32, fp16, int8, topk:0.05, sign; sample shares
 *    summing to 1, one clipped) added in 40 random orders, and by 4 threads
 *    racing, give the same output bytes every time. The same updates summed
 *    in float in two orders differ, so this data would catch a float sum.
 * 2. Value: the output equals an independent double-precision FedAvg of the
 *    decoded, clipped updates within 2^-22 of its largest element.
 * 3. Clipping: an update of norm 10 x clip comes out with norm clip (weight
 *    1), flagged; one below the clip is untouched and not flagged.
 * 4. Refusals leave the sum untouched: a NaN, a malformed payload, a weight
 *    outside (0, 1], and without clipping a value beyond the bound; int8's
 *    body, checked in the staging pass, refused as validation words it.
 * 5. Hold mode (robust rules): a limit below rows x n floats is refused
 *    naming it; a held row is decoded and clipped in place, once.
 * 6. The scale, at both ends: with clip 3 (B = 3 < 2^2, S = 48) an update
 *    (2.9, -2.9, 3, 2^-48) of norm above 3 is clipped, so one of
 *    (2.9, -2^-48, 2^-48) is used instead (norm < 3, unclipped): every value
 *    is a multiple of 2^-48 below 2^50 x 2^-48, so it comes back exact (a
 *    scale one bit coarser rounds 2^-48 to 0; two bits finer puts 2.9 x 2^50
 *    past the 2^51 where the rounding trick holds). Without clipping, bound 1
 *    (S = 49): 1 and 2^-49 come back exact. And the documented headroom:
 *    8000 updates of 2.9 at weight 1 (shares summing to 8000) sum without
 *    overflow to 8000 x 2.9 (below 2^63 at S = 48, past it one bit finer).
 *    A clip below 1 is itself the bound: clip 0.75 keeps 2^-50.
 * 7. A fresh aggregator: no clip, bound 1; 1.5 refused at every position of
 *    a 13-value update (the 8-lane maximum and its tail); no hold of 0 rows.
 * 8. Out of memory for the scratch vector (RLIMIT_AS in a child): refused,
 *    and the sum's memory given back.
 * 9. Sums of sums (a tier's aggregators): the updates split into two groups
 *    in several ways, each group summed alone and read out, the two sums
 *    added into a third aggregator give the bits of one sum of all (the
 *    integers and the mean); a sum at another scale, or one that would
 *    overflow, is refused with the sum untouched. */
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coordinator/aggregate.h"
#include "kernels/philox.h"
#include "tests/check.h"
#include "util/util.h"

#define N 10007
#define K 12
#define CLIP 2.0

static const char *const codecs[K] = {"fp32", "fp16", "int8", "topk:0.05", "sign", "fp32",
                                      "int8", "fp16", "fp32", "int8", "topk:0.05", "fp32"};
static uint8_t *payload[K];
static size_t plen[K];
static double share[K];

static void make_updates(void) {
    char err[HFL_ERR_LEN];
    float *delta = hfl_malloc(sizeof(float) * N);
    double total = 0;
    for (int k = 0; k < K; k++) total += share[k] = 1 + k % 5;
    for (int k = 0; k < K; k++) {
        share[k] /= total;
        /* values of very different sizes, so float sums depend on their order */
        double scale = k == 3 ? 0.5 : pow(10.0, -(k % 4));
        for (size_t i = 0; i < N; i++)
            delta[i] = (float)(scale * (hfl_u01(hfl_philox_u32(3, 0, 0, (uint32_t)k, 0, i)) - 0.5));
        if (k == 3) delta[7] = 400.0f; /* norm far above CLIP: clipped */
        const hfl_codec *c = hfl_codec_find(codecs[k], err);
        CHECK(c != NULL);
        payload[k] = hfl_malloc(hfl_codec_max_bytes(c, N, 256));
        hfl_rng_key key = {5, 1, (uint32_t)k, 0};
        plen[k] = hfl_codec_encode(c, delta, NULL, N, 256, &key, 1, payload[k]);
    }
    free(delta);
}

/* The mean, sum / weight_sum, copied to out (host). */
static void agg_finish(hfl_agg *a, double weight_sum, float *out) {
    hfl_agg_mean(a, weight_sum);
    a->ops->download(out, a->mean, a->n * sizeof *out);
}

static void add_all(hfl_agg *a, const int *order) {
    char err[HFL_ERR_LEN];
    for (int j = 0; j < K; j++) {
        int k = order[j];
        CHECK(hfl_agg_add(a, hfl_codec_find(codecs[k], NULL), payload[k], plen[k], share[k], NULL, err) == 0);
    }
}

static void shuffle(int *order, uint32_t seed) {
    for (int k = 0; k < K; k++) order[k] = k;
    for (int k = K - 1; k > 0; k--) {
        int j = (int)(hfl_philox_u32(seed, 1, 0, 0, 0, (uint64_t)k) % (uint32_t)(k + 1));
        int t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
}

typedef struct {
    hfl_agg *a;
    int first;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    char err[HFL_ERR_LEN];
    for (int k = r->first; k < K; k += 4)
        CHECK(hfl_agg_add(r->a, hfl_codec_find(codecs[k], NULL), payload[k], plen[k], share[k], NULL, err) == 0);
    return NULL;
}

static void test_order(hfl_agg *a, float *want) {
    int order[K];
    float *got = hfl_malloc(sizeof(float) * N);
    shuffle(order, 0);
    hfl_agg_reset(a, CLIP, 0);
    add_all(a, order);
    agg_finish(a, 1.0, want);
    int same = 1;
    for (uint32_t s = 1; s <= 40; s++) {
        shuffle(order, s);
        hfl_agg_reset(a, CLIP, 0);
        add_all(a, order);
        agg_finish(a, 1.0, got);
        same &= memcmp(got, want, sizeof(float) * N) == 0;
    }
    CHECK(same);
    hfl_agg_reset(a, CLIP, 0);
    pthread_t th[4];
    racer rs[4];
    for (int t = 0; t < 4; t++) {
        rs[t] = (racer){a, t};
        pthread_create(&th[t], NULL, race, &rs[t]);
    }
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    agg_finish(a, 1.0, got);
    CHECK(memcmp(got, want, sizeof(float) * N) == 0);

    /* The float sum this replaces: two orders, different bits. */
    float *f1 = hfl_calloc(N, sizeof(float)), *f2 = hfl_calloc(N, sizeof(float));
    for (int k = 0; k < K; k++) {
        const hfl_codec *c = hfl_codec_find(codecs[k], NULL);
        CHECK(hfl_codec_decode_accumulate(c, payload[k], plen[k], N, (float)share[k], f1, 1, NULL) == 0);
        int r = K - 1 - k;
        CHECK(hfl_codec_decode_accumulate(hfl_codec_find(codecs[r], NULL), payload[r], plen[r], N, (float)share[r],
                                          f2, 1, NULL) == 0);
    }
    CHECK(memcmp(f1, f2, sizeof(float) * N) != 0);
    printf("test_aggregate: 40 orders and 4 racing threads: identical bytes (a float sum differs between two)\n");
    free(f1);
    free(f2);
    free(got);
}

/* FedAvg of the clipped updates in double, from each update decoded alone. */
static void test_value(const float *got) {
    double *ref = hfl_calloc(N, sizeof(double));
    float *v = hfl_malloc(sizeof(float) * N);
    for (int k = 0; k < K; k++) {
        memset(v, 0, sizeof(float) * N);
        CHECK(hfl_codec_decode_accumulate(hfl_codec_find(codecs[k], NULL), payload[k], plen[k], N, 1.0f, v, 1, NULL) == 0);
        double norm = 0;
        for (size_t i = 0; i < N; i++) norm += (double)v[i] * v[i];
        norm = sqrt(norm);
        double f = share[k] * (norm > CLIP ? CLIP / norm : 1.0);
        for (size_t i = 0; i < N; i++) ref[i] += f * v[i];
    }
    double big = 0, worst = 0;
    for (size_t i = 0; i < N; i++) big = fmax(big, fabs(ref[i]));
    for (size_t i = 0; i < N; i++) worst = fmax(worst, fabs(ref[i] - got[i]));
    printf("test_aggregate: against a double FedAvg: worst %.3g of the largest %.3g\n", worst, big);
    CHECK(big > 0 && worst <= ldexp(big, -22));
    free(ref);
    free(v);
}

static void test_clip(hfl_agg *a) {
    char err[HFL_ERR_LEN];
    const hfl_codec *fp32 = hfl_codec_find("fp32", NULL);
    float *x = hfl_calloc(N, sizeof(float)), *out = hfl_malloc(sizeof(float) * N);
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(fp32, N, 256));
    hfl_rng_key key = {1, 1, 0, 0};
    x[0] = 3.0f * (float)CLIP * 2; /* with x[1], norm 10 x CLIP */
    x[1] = 4.0f * (float)CLIP * 2;
    size_t len = hfl_codec_encode(fp32, x, NULL, N, 256, &key, 1, buf);
    hfl_agg_update info;
    hfl_agg_reset(a, CLIP, 0);
    CHECK(hfl_agg_add(a, fp32, buf, len, 1.0, &info, err) == 0);
    agg_finish(a, 1.0, out);
    CHECK(info.clipped && fabs(info.norm - 10 * CLIP) < 1e-9);
    CHECK(fabs(hypot(out[0], out[1]) - CLIP) < 1e-6 && fabs(out[0] / out[1] - 0.75) < 1e-6);
    x[0] = 0.3f, x[1] = 0.4f;
    len = hfl_codec_encode(fp32, x, NULL, N, 256, &key, 1, buf);
    hfl_agg_reset(a, CLIP, 0);
    CHECK(hfl_agg_add(a, fp32, buf, len, 1.0, &info, err) == 0);
    agg_finish(a, 1.0, out);
    CHECK(!info.clipped && out[0] == 0.3f && out[1] == 0.4f);
    free(x);
    free(out);
    free(buf);
}

static void test_refusals(hfl_agg *a) {
    char err[HFL_ERR_LEN];
    const hfl_codec *fp32 = hfl_codec_find("fp32", NULL);
    float *x = hfl_calloc(N, sizeof(float));
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(fp32, N, 256));
    hfl_rng_key key = {1, 1, 0, 0};
    x[5] = 0.25f;
    size_t len = hfl_codec_encode(fp32, x, NULL, N, 256, &key, 1, buf);
    hfl_agg_reset(a, 0, 1.0); /* no clipping, values within 1 */
    CHECK(hfl_agg_add(a, fp32, buf, len, 0.5, NULL, err) == 0);
    float *sum = hfl_malloc(N * sizeof(float)), *after = hfl_malloc(N * sizeof(float));
    agg_finish(a, 1.0, sum); /* the sum so far, through the public API (adds may wait) */
    CHECK(sum[5] == 0.125f);
    x[9] = NAN;
    len = hfl_codec_encode(fp32, x, NULL, N, 256, &key, 1, buf);
    CHECK(hfl_agg_add(a, fp32, buf, len, 0.5, NULL, err) != 0);
    x[9] = 2.0f; /* beyond the bound of 1 */
    len = hfl_codec_encode(fp32, x, NULL, N, 256, &key, 1, buf);
    CHECK(hfl_agg_add(a, fp32, buf, len, 0.5, NULL, err) != 0 && strstr(err, "beyond the aggregation bound"));
    x[9] = 0;
    len = hfl_codec_encode(fp32, x, NULL, N, 256, &key, 1, buf);
    CHECK(hfl_agg_add(a, fp32, buf, len - 1, 0.5, NULL, err) != 0);
    CHECK(hfl_agg_add(a, fp32, buf, len, 1.5, NULL, err) != 0);
    CHECK(hfl_agg_add(a, fp32, buf, len, 0.0, NULL, err) != 0);
    agg_finish(a, 1.0, after);
    CHECK(memcmp(sum, after, N * sizeof(float)) == 0 && after[9] == 0);
    free(sum);
    free(after);
    free(x);
    free(buf);
}

/* int8 on the host: the staging pass checks the body (kernels/agg.h,
 * stage_norm's refused), not a separate validation. Each damaged payload is
 * refused with the very message the codec's own validation gives for it
 * (the oracle), and the sum stays untouched: a -128 at the first value, in
 * the middle of a chunk, at a chunk's first value and at the last value (in
 * the short last block: N = 39 x 256 + 23); a NaN scale in block 0, a
 * negative one in the last block, one above int8's largest at the first
 * block of the second 4,096-value chunk. Then a valid update adds as if the
 * others had never come. */
static void test_int8_refusals(hfl_agg *a) {
    char err[HFL_ERR_LEN], want[HFL_ERR_LEN];
    const hfl_codec *int8 = hfl_codec_find("int8", NULL);
    const uint32_t block = 256;
    const size_t bb = 4 + block, nb = (N + block - 1) / block;
    float *x = hfl_calloc(N, sizeof(float));
    for (int i = 0; i < N; i++) x[i] = (float)((i % 7) - 3) / 16;
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(int8, N, block)), *bad = hfl_malloc(hfl_codec_max_bytes(int8, N, block));
    hfl_rng_key key = {3, 1, 0, 0};
    size_t len = hfl_codec_encode(int8, x, NULL, N, block, &key, 1, buf);
    uint8_t *body = bad + HFL_CODEC_HEADER_BYTES;
    hfl_agg_reset(a, 0, 1.0);
    float *sum = hfl_malloc(N * sizeof(float)), *after = hfl_malloc(N * sizeof(float));
    CHECK(hfl_agg_add(a, int8, buf, len, 0.5, NULL, err) == 0);
    agg_finish(a, 1.0, sum);
    const size_t at[] = {0, 5000, 4096, N - 1};
    for (int c = 0; c < 4; c++) {
        memcpy(bad, buf, len);
        body[at[c] / block * bb + 4 + at[c] % block] = 0x80;
        int got = hfl_agg_add(a, int8, bad, len, 0.5, NULL, err);
        uint32_t b;
        CHECK(hfl_codec_validate(int8, bad, len, N, &b, want) != 0);
        CHECK_MSG(got != 0 && !strcmp(err, want), "-128 at value %zu: '%s', validation says '%s'", at[c],
                  got ? err : "(added)", want);
    }
    const size_t blk[] = {0, nb - 1, 4096 / block};
    const float scale[] = {NAN, -1.0f, 3.0e38f / 100};
    for (int c = 0; c < 3; c++) {
        memcpy(bad, buf, len);
        memcpy(body + blk[c] * bb, &scale[c], 4);
        int got = hfl_agg_add(a, int8, bad, len, 0.5, NULL, err);
        uint32_t b;
        CHECK(hfl_codec_validate(int8, bad, len, N, &b, want) != 0);
        CHECK_MSG(got != 0 && !strcmp(err, want), "scale %g in block %zu: '%s', validation says '%s'",
                  (double)scale[c], blk[c], got ? err : "(added)", want);
    }
    CHECK(hfl_agg_add(a, int8, buf, len - 1, 0.5, NULL, err) != 0); /* the frame: one byte short */
    agg_finish(a, 1.0, after);
    CHECK(memcmp(sum, after, N * sizeof(float)) == 0);
    CHECK(hfl_agg_add(a, int8, buf, len, 0.5, NULL, err) == 0); /* the second half of the weight */
    agg_finish(a, 1.0, after);
    for (int i = 0; i < N; i++) CHECK_MSG(after[i] == 2 * sum[i], "value %d: %g, twice %g", i, after[i], sum[i]);
    free(sum), free(after), free(x), free(buf), free(bad);
}

static void test_hold(hfl_agg *a) {
    char err[HFL_ERR_LEN];
    CHECK(hfl_agg_hold(a, K, (uint64_t)K * N * sizeof(float) - 1, err) != 0 && strstr(err, "--robust-memory"));
    CHECK(hfl_agg_hold(a, K, (uint64_t)K * N * sizeof(float), err) == 0);
    hfl_agg_reset(a, CLIP, 0);
    hfl_agg_update info;
    CHECK(hfl_agg_add_row(a, hfl_codec_find(codecs[3], NULL), payload[3], plen[3], 5, &info, err) == 0);
    CHECK(info.clipped && a->present[5] && !a->present[4]);
    double norm = 0;
    for (size_t i = 0; i < N; i++) norm += (double)a->rows[5 * (size_t)N + i] * a->rows[5 * (size_t)N + i];
    CHECK(fabs(sqrt(norm) - CLIP) < 1e-5);
    CHECK(hfl_agg_add_row(a, hfl_codec_find(codecs[3], NULL), payload[3], plen[3], 5, &info, err) != 0);
    CHECK(hfl_agg_add_row(a, hfl_codec_find(codecs[3], NULL), payload[3], plen[3], K, &info, err) != 0);
    hfl_agg_reset(a, CLIP, 0);
    CHECK(!a->present[5]);
}

/* fp32 updates of the first few values of x (the rest 0), through the aggregator. */
static void add_fp32(hfl_agg *a, const float *x, int nx, double weight, int times) {
    char err[HFL_ERR_LEN];
    const hfl_codec *fp32 = hfl_codec_find("fp32", NULL);
    float *v = hfl_calloc(a->n, sizeof(float));
    memcpy(v, x, sizeof(float) * (size_t)nx);
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(fp32, a->n, 256));
    hfl_rng_key key = {1, 1, 0, 0};
    size_t len = hfl_codec_encode(fp32, v, NULL, a->n, 256, &key, 1, buf);
    for (int t = 0; t < times; t++) CHECK_MSG(hfl_agg_add(a, fp32, buf, len, weight, NULL, err) == 0, "%s", err);
    free(v);
    free(buf);
}

static void test_scale(void) {
    char err[HFL_ERR_LEN];
    hfl_agg a;
    REQUIRE(hfl_agg_init_on(&a, hfl_backend_cpu(), 5, 1, err) == 0);
    float out[5];
    const float tiny48 = ldexpf(1.0f, -48), tiny49 = ldexpf(1.0f, -49);
    hfl_agg_reset(&a, 3.0, 0);
    CHECK(a.shift == 48);
    const float x[4] = {2.9f, -2.9f, 3.0f, tiny48};
    add_fp32(&a, x, 4, 1.0, 1); /* norm > 3: clipped, only to check it was */
    const float y[3] = {2.9f, -tiny48, tiny48};
    hfl_agg_reset(&a, 3.0, 0);
    add_fp32(&a, y, 3, 1.0, 1);
    agg_finish(&a, 1.0, out);
    CHECK_MSG(out[0] == 2.9f && out[1] == -tiny48 && out[2] == tiny48 && out[3] == 0,
              "clip 3: 2.9, -2^-48, 2^-48 came back %.9g %.9g %.9g", (double)out[0], (double)out[1], (double)out[2]);
    /* two at weight 0.5: each half is a multiple of 2^-48 too, so the mean is exact */
    const float y2[2] = {2.9f, 2 * tiny48};
    hfl_agg_reset(&a, 3.0, 0);
    add_fp32(&a, y2, 2, 0.5, 2);
    agg_finish(&a, 1.0, out);
    CHECK_MSG(out[0] == 2.9f && out[1] == 2 * tiny48, "clip 3, two halves: %.9g %.9g", (double)out[0], (double)out[1]);
    /* without clipping, bound 1: S = 49 */
    hfl_agg_reset(&a, 0, 1.0);
    CHECK(a.shift == 49);
    const float z[2] = {1.0f, tiny49};
    add_fp32(&a, z, 2, 1.0, 1);
    agg_finish(&a, 1.0, out);
    CHECK_MSG(out[0] == 1.0f && out[1] == tiny49, "bound 1: 1, 2^-49 came back %.9g %.9g", (double)out[0], (double)out[1]);
    /* 8000 updates at weight 1 */
    hfl_agg_reset(&a, 3.0, 0);
    add_fp32(&a, y, 1, 1.0, 8000);
    agg_finish(&a, 8000.0, out);
    CHECK_MSG(out[0] == 2.9f, "8000 updates of 2.9: mean %.9g", (double)out[0]);
    /* a clip below 1 is the bound, whatever value bound the caller passes
     * (the coordinator passes 2^20): 0.75 < 2^0, S = 50, and 2^-50 is kept */
    const float tiny50 = ldexpf(1.0f, -50), w[2] = {0.7f, tiny50};
    hfl_agg_reset(&a, 0.75, 1048576.0);
    add_fp32(&a, w, 2, 1.0, 1);
    agg_finish(&a, 1.0, out);
    CHECK_MSG(out[0] == 0.7f && out[1] == tiny50, "clip 0.75: 0.7, 2^-50 came back %.9g %.9g", (double)out[0],
              (double)out[1]);
    printf("test_aggregate: clip 3 gives 2.9 and 2^-48 back exactly, and 8000 shares sum without overflow\n");
    hfl_agg_free(&a);
}

/* A fresh aggregator sums as after reset(0, 1): no clipping, values within
 * 1; the bound is checked on every element (13 values: one 8-lane group
 * and a tail of 5); hold mode needs at least one row. */
static void test_fresh(void) {
    char err[HFL_ERR_LEN];
    hfl_agg a;
    REQUIRE(hfl_agg_init_on(&a, hfl_backend_cpu(), 13, 1, err) == 0);
    const hfl_codec *fp32 = hfl_codec_find("fp32", NULL);
    uint8_t buf[256];
    hfl_rng_key key = {1, 1, 0, 0};
    float v[13] = {0}, out[13];
    v[0] = 0.5f, v[12] = ldexpf(1.0f, -49);
    size_t len = hfl_codec_encode(fp32, v, NULL, 13, 256, &key, 1, buf);
    CHECK_MSG(hfl_agg_add(&a, fp32, buf, len, 1.0, NULL, err) == 0, "%s", err);
    agg_finish(&a, 1.0, out);
    CHECK(out[0] == 0.5f && out[12] == ldexpf(1.0f, -49));
    for (int at = 0; at < 13; at++) { /* 1.5 anywhere: beyond the bound, not clipped */
        memset(v, 0, sizeof v);
        v[at] = at % 2 ? -1.5f : 1.5f;
        len = hfl_codec_encode(fp32, v, NULL, 13, 256, &key, 1, buf);
        CHECK_MSG(hfl_agg_add(&a, fp32, buf, len, 1.0, NULL, err) != 0 && strstr(err, "beyond the aggregation bound 1"),
                  "1.5 at %d: '%s'", at, err);
    }
    CHECK(hfl_agg_hold(&a, 0, 1u << 20, err) != 0 && strstr(err, "holding 0 updates"));
    CHECK(hfl_agg_hold(&a, -1, 1u << 20, err) != 0);
    CHECK(hfl_agg_hold(&a, 1, 1u << 20, err) == 0 && a.n_rows == 1);
    hfl_agg_free(&a);
}

/* The address space limited (in a child: the limit is for good) to what
 * the sum's 8n bytes need but not the scratch vector's 4n more: init is
 * refused, saying so, and gives the sum's memory back. Not under the
 * sanitizers, whose shadow memory needs the address space. */
static void test_out_of_memory(void) {
    if (getenv("HFL_SANITIZED")) {
        printf("test_aggregate: the out-of-memory check is for builds without sanitizers\n");
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const size_t n = (size_t)1 << 26; /* a sum of 512 MiB, a scratch vector of 256 MiB */
        unsigned long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%lu", &pages) != 1) _exit(3);
        fclose(f);
        rlim_t limit = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + 8 * n + (64u << 20);
        struct rlimit rl = {limit, limit};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        struct mallinfo2 before = mallinfo2();
        char err[HFL_ERR_LEN] = "";
        hfl_agg a;
        int rc = hfl_agg_init_on(&a, hfl_backend_cpu(), n, 1, err);
        struct mallinfo2 after = mallinfo2();
        int ok = rc == -1 && strstr(err, "cannot allocate the aggregator for 67108864 values") && a.acc == NULL;
        if (!ok || after.hblkhd != before.hblkhd || after.uordblks != before.uordblks)
            fprintf(stderr, "init under the limit: rc %d, '%s'; %zu bytes kept in mappings, %zu in the heap\n", rc, err,
                    after.hblkhd - before.hblkhd, after.uordblks - before.uordblks);
        _exit(ok && after.hblkhd == before.hblkhd && after.uordblks == before.uordblks ? 0 : 1);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "out of memory: the child ended with status %d", st);
}

/* Sums group A (mask bit set) and group B into two aggregators, adds
 * both read-out sums into a third, and compares with one sum of all. */
static void test_sum_of_sums(void) {
    char err[HFL_ERR_LEN];
    hfl_agg all, g[2], root;
    CHECK(hfl_agg_init_on(&all, hfl_backend_cpu(), N, 1, err) == 0);
    CHECK(hfl_agg_init_on(&root, hfl_backend_cpu(), N, 1, err) == 0);
    for (int i = 0; i < 2; i++) CHECK(hfl_agg_init_on(&g[i], hfl_backend_cpu(), N, 1, err) == 0);
    int64_t *want = hfl_malloc(sizeof(int64_t) * N), *got = hfl_malloc(sizeof(int64_t) * N);
    int64_t *part = hfl_malloc(sizeof(int64_t) * N);
    float *mw = hfl_malloc(sizeof(float) * N), *mg = hfl_malloc(sizeof(float) * N);
    int order[K];
    shuffle(order, 7);
    hfl_agg_reset(&all, CLIP, 0);
    add_all(&all, order);
    hfl_agg_read_sum(&all, want);
    agg_finish(&all, 1.0, mw);
    const unsigned masks[] = {0x001, 0x555, 0x0f0, 0x7fe, 0x000};
    for (size_t m = 0; m < sizeof masks / sizeof *masks; m++) {
        hfl_agg_reset(&root, CLIP, 0);
        for (int i = 0; i < 2; i++) hfl_agg_reset(&g[i], CLIP, 0);
        for (int k = 0; k < K; k++)
            CHECK(hfl_agg_add(&g[(masks[m] >> k) & 1], hfl_codec_find(codecs[k], NULL), payload[k], plen[k], share[k],
                              NULL, err) == 0);
        for (int i = 0; i < 2; i++) {
            hfl_agg_read_sum(&g[i], part);
            CHECK_MSG(hfl_agg_add_sum(&root, part, g[i].shift, err) == 0, "%s", err);
        }
        hfl_agg_read_sum(&root, got);
        CHECK(memcmp(got, want, sizeof(int64_t) * N) == 0);
        agg_finish(&root, 1.0, mg);
        CHECK(memcmp(mg, mw, sizeof(float) * N) == 0);
    }
    /* refusals: another scale; an overflow; the sum untouched by either */
    hfl_agg_reset(&root, CLIP, 0);
    CHECK(hfl_agg_add_sum(&root, want, root.shift, err) == 0);
    CHECK(hfl_agg_add_sum(&root, want, root.shift + 1, err) != 0 && strstr(err, "scale"));
    for (size_t i = 0; i < N; i++) part[i] = 0;
    part[N - 1] = INT64_MAX;
    int64_t keep = want[N - 1];
    if (keep > 0) CHECK(hfl_agg_add_sum(&root, part, root.shift, err) != 0 && strstr(err, "overflow"));
    else {
        part[N - 1] = INT64_MIN;
        CHECK(hfl_agg_add_sum(&root, part, root.shift, err) != 0 && strstr(err, "overflow"));
    }
    hfl_agg_read_sum(&root, got);
    CHECK(memcmp(got, want, sizeof(int64_t) * N) == 0);
    printf("test_aggregate: 5 splits into two group sums, added: the bits of one sum\n");
    free(want), free(got), free(part), free(mw), free(mg);
    hfl_agg_free(&all), hfl_agg_free(&root), hfl_agg_free(&g[0]), hfl_agg_free(&g[1]);
}

static hfl_agg agg; /* the fixture the cases that take one share, made in main */

/* The order test's sum is the value test's input: one case. */
static void test_order_value(void) {
    float *want = hfl_malloc(sizeof(float) * N);
    test_order(&agg, want);
    test_value(want);
    free(want);
}

static void test_clip_agg(void) { test_clip(&agg); }
static void test_refusals_agg(void) { test_refusals(&agg); }
static void test_int8_refusals_agg(void) { test_int8_refusals(&agg); }
static void test_hold_agg(void) { test_hold(&agg); }

static const check_case cases[] = {
    {"order_value", test_order_value},
    {"clip", test_clip_agg},
    {"refusals", test_refusals_agg},
    {"int8_refusals", test_int8_refusals_agg},
    {"hold", test_hold_agg},
    {"scale", test_scale},
    {"fresh", test_fresh},
    {"out_of_memory", test_out_of_memory},
    {"sum_of_sums", test_sum_of_sums},
};

int main(int argc, char **argv) {
    char err[HFL_ERR_LEN];
    CHECK(hfl_agg_init_on(&agg, hfl_backend_cpu(), N, 1, err) == 0);
    make_updates();
    int rc = check_run("test_aggregate", cases, CHECK_CASES(cases), argc, argv);
    hfl_agg_free(&agg);
    for (int k = 0; k < K; k++) free(payload[k]);
    return rc;
}
