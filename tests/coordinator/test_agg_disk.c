/* test_agg_disk.c: the aggregator's sum on disk (coordinator/aggregate.h, ON
 * DISK) against the sum in memory, which test_aggregate.c checks against an
 * independent double-precision FedAvg.
 *
 * 1. Same bits: 13 updates of every codec (fp32, fp16, bf16, int8 at blocks
 *    256 and 1000, int4, sign, topk at 5% and at 0.1%, whose 51 entries
 *    leave a chunk empty; three clipped), plus a dense vector (central DP
 *    noise's path), give the memory aggregator's mean byte for byte, and
 *    each update's norm and clip flag, with blocks of 4096 values (int8 256
 *    read in place, int8 1000 and sign 96 decoded from inside a codec
 *    block), 5000 (int8 256, int4 64 and sign 96 from inside one, int8
 *    1000 in place), and one block over all of N = 50,021 values (no
 *    multiple of either). A FedAvgM step from the two means moves the model
 *    and the momentum to the same bits. topk at 50%, 30% and 0.1% of
 *    300,007 values, in blocks of 4096 and 200,000: a block's entries read
 *    in several pieces (agg_disk.c's TOPK_PIECE, 65,536), the same bits.
 * 2. Memory: on disk, no whole sum and no mean while updates come; the mean
 *    exists from mean() to step() and is freed by it.
 * 3. Refusals: a NaN payload and a malformed one are refused as in memory,
 *    leaving the sum as it was; a held-rows rule is refused either way
 *    round; updates that cannot be read back at the close fail mean() with
 *    one line, not a crash, and so does a topk index the file gives back
 *    out of place (a write through it would leave the block's buffer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/aggregate.h"
#include "kernels/philox.h"
#include "tests/check.h"
#include "util/util.h"

#define N 50021
#define K 13
#define CLIP 2.0

static const char *const codecs[K] = {"fp32", "fp16", "bf16", "int8", "int8", "int4", "sign",
                                      "topk:0.05", "topk:0.001", "fp32", "int8", "fp16", "fp32"};
static const uint32_t blocks[K] = {0, 0, 0, 256, 1000, 64, 96, 0, 0, 0, 256, 0, 0};
static uint8_t *payload[K];
static size_t plen[K];
static double share[K];
static float noise[N];

/* Where the sums' files go (unlinked as made). */
static const char *tmp(void) {
    const char *t = getenv("TMPDIR");
    return t && t[0] ? t : "/tmp";
}

static void make_updates(void) {
    char err[HFL_ERR_LEN];
    float *delta = hfl_malloc(sizeof(float) * N);
    double total = 0;
    for (int k = 0; k < K; k++) total += share[k] = 1 + k % 4;
    for (int k = 0; k < K; k++) {
        share[k] /= total;
        double scale = pow(10.0, -(k % 3)) * (k == 2 || k == 7 || k == 10 ? 300 : 1); /* three above CLIP */
        for (size_t i = 0; i < N; i++)
            delta[i] = (float)(scale * (hfl_u01(hfl_philox_u32(9, 0, 0, (uint32_t)k, 0, i)) - 0.5) / sqrt(N / 12.0));
        const hfl_codec *c = hfl_codec_find(codecs[k], err);
        CHECK(c != NULL);
        uint32_t b = blocks[k] ? blocks[k] : 256;
        payload[k] = hfl_malloc(hfl_codec_max_bytes(c, N, b));
        hfl_rng_key key = {7, 1, (uint32_t)k, 0};
        plen[k] = hfl_codec_encode(c, delta, NULL, N, b, &key, 1, payload[k]);
    }
    for (size_t i = 0; i < N; i++) noise[i] = (float)(1e-3 * (hfl_u01(hfl_philox_u32(9, 1, 0, 0, 0, i)) - 0.5));
    free(delta);
}

/* A round of every update into a: their infos, the mean (copied to mean),
 * then a FedAvgM step of global and its momentum v. */
static void round_of(hfl_agg *a, hfl_agg_update *info, float *mean, float *global, float *v) {
    char err[HFL_ERR_LEN];
    hfl_agg_reset(a, CLIP, 0);
    hfl_agg_widen(a, 4.0);
    for (int k = 0; k < K; k++)
        CHECK(hfl_agg_add(a, hfl_codec_find(codecs[k], NULL), payload[k], plen[k], share[k], &info[k], err) == 0);
    CHECK(hfl_agg_add_dense(a, noise, 1.0, err) == 0);
    CHECK(hfl_agg_mean(a, 0.75) == 1);
    memcpy(mean, a->mean, sizeof(float) * N);
    hfl_server_opt o;
    CHECK(hfl_sopt_parse("fedavgm:1:0.9", &o, err) == 0 && hfl_sopt_init(&o, N, err) == 0);
    memcpy(o.v, v, sizeof(float) * N);
    CHECK(hfl_agg_step(a, &o, global, err) == 0);
    memcpy(v, o.v, sizeof(float) * N);
    hfl_sopt_free(&o);
}

static void test_same_bits(void) {
    char err[HFL_ERR_LEN];
    hfl_agg mem;
    hfl_agg_update want_info[2][K], info[K];
    float *want[2], *g0[2], *v0[2], *got = hfl_malloc(sizeof(float) * N);
    float *g = hfl_calloc(N, sizeof(float)), *v = hfl_calloc(N, sizeof(float));
    CHECK(hfl_agg_init_on(&mem, hfl_backend_cpu(), N, 1, err) == 0);
    for (int r = 0; r < 2; r++) { /* two rounds in memory: the oracle */
        want[r] = hfl_malloc(sizeof(float) * N), g0[r] = hfl_malloc(sizeof(float) * N);
        v0[r] = hfl_malloc(sizeof(float) * N);
        round_of(&mem, want_info[r], want[r], g, v);
        memcpy(g0[r], g, sizeof(float) * N), memcpy(v0[r], v, sizeof(float) * N);
    }
    int clipped = 0;
    for (int k = 0; k < K; k++) clipped += want_info[0][k].clipped;
    if (clipped != 3)
        for (int k = 0; k < K; k++) printf("update %d (%s): norm %g\n", k, codecs[k], want_info[0][k].norm);
    CHECK(clipped == 3);
    const size_t sizes[] = {4096, 5000, 0};
    for (int t = 0; t < 3; t++) {
        hfl_agg disk;
        CHECK(hfl_agg_init_on(&disk, hfl_backend_cpu(), N, 1, err) == 0);
        CHECK(hfl_agg_on_disk(&disk, tmp(), sizes[t], err) == 0);
        CHECK(disk.acc == NULL && disk.mean == NULL);
        CHECK(disk.disk->block == (sizes[t] ? sizes[t] : N)); /* the default's 262,144 is cut to N */
        memset(g, 0, sizeof(float) * N), memset(v, 0, sizeof(float) * N);
        for (int r = 0; r < 2; r++) { /* the second round's file holds none of the first's entries */
            round_of(&disk, info, got, g, v);
            CHECK(disk.mean == NULL); /* freed by the step */
            int same = memcmp(got, want[r], sizeof(float) * N) == 0;
            for (int k = 0; k < K; k++)
                same &= memcmp(&info[k].norm, &want_info[r][k].norm, sizeof(double)) == 0 &&
                        info[k].clipped == want_info[r][k].clipped;
            CHECK(same);
            CHECK(memcmp(g, g0[r], sizeof(float) * N) == 0 && memcmp(v, v0[r], sizeof(float) * N) == 0);
        }
        printf("test_agg_disk: blocks of %zu values: %d updates of 8 codecs and a dense vector, two rounds: the "
               "memory sum's bits\n", disk.disk->block, K);
        hfl_agg_free(&disk);
    }
    hfl_agg_free(&mem);
    for (int r = 0; r < 2; r++) free(want[r]), free(g0[r]), free(v0[r]);
    free(got), free(g), free(v);
}

/* topk updates of n values, in memory and on disk in blocks of `block`: the same mean. */
static void topk_pieces(size_t n, size_t block) {
    static const char *const names[] = {"topk:0.5", "topk:0.3", "topk:0.001"};
    char err[HFL_ERR_LEN];
    float *delta = hfl_malloc(sizeof(float) * n), *want = hfl_malloc(sizeof(float) * n);
    hfl_agg mem, disk;
    CHECK(hfl_agg_init_on(&mem, hfl_backend_cpu(), n, 1, err) == 0 && hfl_agg_init_on(&disk, hfl_backend_cpu(), n, 1, err) == 0);
    CHECK(hfl_agg_on_disk(&disk, tmp(), block, err) == 0);
    hfl_agg_reset(&mem, CLIP, 0), hfl_agg_reset(&disk, CLIP, 0);
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < n; i++) delta[i] = (float)(hfl_u01(hfl_philox_u32(9, 2, 0, (uint32_t)k, 0, i)) - 0.5) / 300;
        const hfl_codec *c = hfl_codec_find(names[k], err);
        uint8_t *pay = hfl_malloc(hfl_codec_max_bytes(c, n, 256));
        hfl_rng_key key = {7, 2, (uint32_t)k, 0};
        size_t len = hfl_codec_encode(c, delta, NULL, n, 256, &key, 1, pay);
        hfl_agg_update wi, gi;
        CHECK(hfl_agg_add(&mem, c, pay, len, 0.25, &wi, err) == 0 && hfl_agg_add(&disk, c, pay, len, 0.25, &gi, err) == 0);
        CHECK(memcmp(&wi.norm, &gi.norm, sizeof wi.norm) == 0);
        free(pay);
    }
    CHECK(hfl_agg_mean(&mem, 0.75) == 1 && hfl_agg_mean(&disk, 0.75) == 1);
    memcpy(want, mem.mean, sizeof(float) * n);
    CHECK(memcmp(disk.mean, want, sizeof(float) * n) == 0);
    printf("test_agg_disk: topk at 50%%, 30%% and 0.1%% of %zu values in blocks of %zu: the memory sum's bits\n", n,
           block);
    hfl_agg_free(&mem), hfl_agg_free(&disk);
    free(delta), free(want);
}

static void test_topk_pieces(void) {
    topk_pieces(300007, 4096);
    topk_pieces(300007, 200000); /* 100,000 entries at 50%: two pieces */
}

static void test_refusals(void) {
    char err[HFL_ERR_LEN];
    hfl_agg mem, disk;
    CHECK(hfl_agg_init_on(&mem, hfl_backend_cpu(), N, 1, err) == 0);
    CHECK(hfl_agg_init_on(&disk, hfl_backend_cpu(), N, 1, err) == 0);
    CHECK(hfl_agg_on_disk(&disk, tmp(), 4096, err) == 0);
    CHECK(hfl_agg_on_disk(&disk, tmp(), 4096, err) == -1); /* once */
    CHECK(hfl_agg_hold(&disk, 3, 1u << 30, err) == -1);
    printf("test_agg_disk: held rows refused: %s\n", err);
    hfl_agg held;
    CHECK(hfl_agg_init_on(&held, hfl_backend_cpu(), N, 1, err) == 0 && hfl_agg_hold(&held, 3, 1u << 30, err) == 0);
    CHECK(hfl_agg_on_disk(&held, tmp(), 0, err) == -1);
    hfl_agg_free(&held);
    CHECK(hfl_agg_on_disk(&mem, "/nonexistent-dir", 0, err) == -1 && mem.acc != NULL);
    printf("test_agg_disk: %s\n", err);

    uint8_t *nan = hfl_malloc(plen[0]), *cut = hfl_malloc(plen[3]);
    memcpy(nan, payload[0], plen[0]);
    float q = NAN;
    memcpy(nan + HFL_CODEC_HEADER_BYTES + 4 * 17, &q, 4);
    memcpy(cut, payload[3], plen[3]);
    hfl_agg *both[2] = {&mem, &disk};
    float *out[2];
    for (int w = 0; w < 2; w++) {
        hfl_agg *a = both[w];
        hfl_agg_reset(a, CLIP, 0);
        CHECK(hfl_agg_add(a, hfl_codec_find("fp32", NULL), payload[9], plen[9], 0.5, NULL, err) == 0);
        CHECK(hfl_agg_add(a, hfl_codec_find("fp32", NULL), nan, plen[0], 0.5, NULL, err) == -1);
        CHECK(hfl_agg_add(a, hfl_codec_find("int8", NULL), cut, plen[3] - 1, 0.5, NULL, err) == -1);
        CHECK(hfl_agg_add(a, hfl_codec_find("fp16", NULL), payload[11], plen[11], 0.5, NULL, err) == 0);
        CHECK(hfl_agg_mean(a, 1.0) == 1);
        out[w] = hfl_malloc(sizeof(float) * N);
        memcpy(out[w], a->mean, sizeof(float) * N);
    }
    CHECK(disk.disk->n_e == 2);
    CHECK(memcmp(out[0], out[1], sizeof(float) * N) == 0);

    /* the file gone from under it: one line, no mean */
    hfl_agg_reset(&disk, CLIP, 0);
    CHECK(hfl_agg_add(&disk, hfl_codec_find("fp32", NULL), payload[9], plen[9], 0.5, NULL, err) == 0);
    CHECK(ftruncate(disk.disk->fd, 100) == 0);
    CHECK(hfl_agg_mean(&disk, 1.0) == -1 && strstr(disk.disk_err, "cannot read the sum's updates back") != NULL);
    printf("test_agg_disk: a file cut short at the close: %s\n", disk.disk_err);
    /* a topk index given back below its block's start: refused, not written through */
    hfl_agg_reset(&disk, CLIP, 0);
    CHECK(hfl_agg_add(&disk, hfl_codec_find("topk:0.05", NULL), payload[7], plen[7], 0.5, NULL, err) == 0);
    uint32_t first;
    CHECK(pread(disk.disk->fd, &first, 4, (off_t)(disk.disk->e[0].off + 4 * disk.disk->e[0].starts[1])) == 4);
    first -= 4096; /* an index of the first block in the second's entries */
    CHECK(pwrite(disk.disk->fd, &first, 4, (off_t)(disk.disk->e[0].off + 4 * disk.disk->e[0].starts[1])) == 4);
    CHECK(hfl_agg_mean(&disk, 1.0) == -1 && strstr(disk.disk_err, "out of place") != NULL);
    printf("test_agg_disk: %s\n", disk.disk_err);
    hfl_agg_free(&mem);
    hfl_agg_free(&disk);
    free(nan), free(cut), free(out[0]), free(out[1]);
}

static const check_case cases[] = {
    {"same_bits", test_same_bits},
    {"topk_pieces", test_topk_pieces},
    {"refusals", test_refusals},
};

int main(int argc, char **argv) {
    make_updates();
    int rc = check_run("test_agg_disk", cases, CHECK_CASES(cases), argc, argv);
    for (int k = 0; k < K; k++) free(payload[k]);
    return rc;
}
