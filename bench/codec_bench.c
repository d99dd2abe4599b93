/* codec_bench.c: codec throughput as a ratio to memcpy in the same process.
 *
 * For each size, times (best of REPS) memcpy of n floats, then encode and
 * decode_accumulate of each codec on the same vector, and prints values/s and
 * the ratio to memcpy's rate. Usage: bench-codec [n ...] (default 199210 and
 * 16777216: one small model's update, and one that leaves the caches). */
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
        b->codec->encode(b->x, b->residual, b->n, b->block, &key, b->buf);
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
        if (b->codec->decode_accumulate(b->buf, b->len, b->n, 0.5f, b->acc, err)) {
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
    double t_copy = best_memcpy(acc, x, n);
    printf("n=%zu  memcpy %.3g values/s\n", n, (double)n / t_copy);
    printf("%-6s %6s %12s %9s %12s %9s %8s\n", "codec", "block", "encode/s", "x memcpy",
           "decode/s", "x memcpy", "bytes");
    const char *names[] = {"fp32", "int8"};
    for (int c = 0; c < 2; c++) {
        char err[HFL_ERR_LEN];
        bench_case b = {.codec = hfl_codec_find(names[c], err), .x = x, .residual = res,
                        .acc = acc, .n = n};
        if (!b.codec) {
            fprintf(stderr, "bench-codec: %s\n", err);
            exit(1);
        }
        b.block = c ? HFL_CODEC_DEFAULT_BLOCK : 0;
        if (hfl_codec_check(b.codec, n, b.block, err)) {
            fprintf(stderr, "bench-codec: %s\n", err);
            exit(1);
        }
        b.len = b.codec->encoded_bytes(n, b.block);
        b.buf = hfl_malloc(b.len);
        double te = best_encode(&b), td = best_decode(&b);
        printf("%-6s %6u %12.3g %9.3f %12.3g %9.3f %8.4f\n", names[c], b.block, (double)n / te,
               t_copy / te, (double)n / td, t_copy / td, (double)b.len / (12.0 + 4.0 * n));
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
