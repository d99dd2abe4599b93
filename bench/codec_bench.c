/* codec_bench.c: codec throughput as a ratio to memcpy in the same process.
 *
 * For each size n, times (best of REPS) a one-thread memcpy of the n fp32
 * values (4n bytes), then each codec's encode (with error feedback, as a
 * client runs it) and decode_accumulate on the same vector at 1 and 2
 * threads. Rates are GB/s of fp32 values processed (4n bytes per call), so
 * "x memcpy" is the ratio to copying the uncompressed update once. Usage:
 * bench-codec [n ...] (default 199210 and 16777216: one small model's
 * update, and one that leaves the caches). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/codec.h"
#include "kernels/philox.h"
#include "util/util.h"

enum { REPS = 7 };

typedef struct {
    const hfl_codec *codec;
    uint32_t block;
    int threads;
    const float *x;
    float *residual, *acc;
    uint8_t *buf;
    size_t n, len;
} bench_case;

static double best_memcpy(float *dst, const float *src, size_t n) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t = hfl_now();
        memcpy(dst, src, n * sizeof(float));
        t = hfl_now() - t;
        best = t < best ? t : best;
    }
    return best;
}

static double best_encode(bench_case *b) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        hfl_rng_key key = {.seed = 1, .round = (uint32_t)r};
        double t = hfl_now();
        b->len = hfl_codec_encode(b->codec, b->x, b->residual, b->n, b->block, &key, b->threads,
                                  b->buf);
        t = hfl_now() - t;
        best = t < best ? t : best;
    }
    return best;
}

static double best_decode(bench_case *b) {
    double best = 1e30;
    char err[HFL_ERR_LEN];
    for (int r = 0; r < REPS; r++) {
        double t = hfl_now();
        if (hfl_codec_decode_accumulate(b->codec, b->buf, b->len, b->n, 0.5f, b->acc, b->threads,
                                        err)) {
            fprintf(stderr, "bench-codec: %s\n", err);
            exit(1);
        }
        t = hfl_now() - t;
        best = t < best ? t : best;
    }
    return best;
}

static void bench_size(size_t n) {
    float *x = hfl_malloc(n * sizeof(float)), *res = hfl_calloc(n, sizeof(float));
    float *acc = hfl_calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = 2.0f * hfl_u01(hfl_philox_u32(3, HFL_STREAM_INIT, 0, 0, 0, i)) - 1.0f;
    double t_copy = best_memcpy(acc, x, n), gb = 4.0 * (double)n / 1e9;
    printf("n=%zu  memcpy of %zu bytes: %.2f GB/s (1 thread)\n", n, 4 * n, gb / t_copy);
    printf("%-10s %6s %3s %9s %9s %9s %9s %8s\n", "codec", "block", "thr", "enc GB/s", "x memcpy",
           "dec GB/s", "x memcpy", "bytes");
    const char *names[] = {"fp32", "fp16", "bf16", "int8", "int4", "sign", "topk:0.01"};
    for (int c = 0; c < 7; c++) {
        char err[HFL_ERR_LEN];
        bench_case b = {.codec = hfl_codec_find(names[c], err), .x = x, .residual = res,
                        .acc = acc, .n = n, .block = HFL_CODEC_DEFAULT_BLOCK};
        if (!b.codec || hfl_codec_check(b.codec, n, b.block, err)) {
            fprintf(stderr, "bench-codec: %s\n", err);
            exit(1);
        }
        b.buf = hfl_malloc(hfl_codec_max_bytes(b.codec, n, b.block));
        for (b.threads = 1; b.threads <= 2; b.threads++) {
            memset(res, 0, n * sizeof(float));
            double te = best_encode(&b), td = best_decode(&b);
            printf("%-10s %6u %3d %9.2f %9.3f %9.2f %9.3f %8.4f\n", names[c],
                   b.codec->blocked ? b.block : 0, b.threads, gb / te, t_copy / te, gb / td,
                   t_copy / td, (double)b.len / (12.0 + 4.0 * n));
        }
        free(b.buf);
    }
    free(x);
    free(res);
    free(acc);
}

int main(int argc, char **argv) {
    if (argc == 1) {
        bench_size(199210);
        bench_size(16777216);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        long n;
        char err[HFL_ERR_LEN];
        if (hfl_parse_int(argv[i], 1, 1L << 31, &n, err)) {
            fprintf(stderr, "bench-codec: %s\n", err);
            return 1;
        }
        bench_size((size_t)n);
    }
    return 0;
}
