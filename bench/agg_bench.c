/* agg_bench.c: the coordinator's exact aggregation against memcpy, in one process.
 *
 * For each size n, times (best of REPS) a one-thread memcpy of n fp32 values
 * (4n bytes), then per codec hfl_agg_add (validate, decode into scratch, norm,
 * clip, 64-bit fixed-point accumulate; coordinator/aggregate.h) and, for
 * reference, the float decode_accumulate it replaced. Rates are GB/s of fp32
 * values aggregated (4n bytes per update), so "x memcpy" is the ratio to
 * copying one uncompressed update. Then the robust rules' cost per round
 * against FedAvg's: K = 10 int8 updates added (hold mode for the rules) and
 * the round finished, in ms. Usage: bench-agg [n ...] (default 199210, the
 * mlp, and 16777216, out of the caches). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/aggregate.h"
#include "coordinator/robust.h"
#include "kernels/philox.h"
#include "util/util.h"

enum { REPS = 7 };

static const char *const codecs[] = {"fp32", "fp16", "int8", "int4", "sign", "topk:0.01"};

/* One round of K int8 updates per rule: adds plus the finish, best of 3. */
static void rules(const float *x, size_t n) {
    enum { K = 10 };
    static const char *const specs[] = {"fedavg", "median", "trimmed:0.2", "krum:2", "multikrum:2"};
    char err[HFL_ERR_LEN];
    const hfl_codec *c = hfl_codec_find("int8", err);
    uint8_t *buf[K];
    size_t len[K];
    float *v = hfl_malloc(sizeof(float) * n), *out = hfl_malloc(sizeof(float) * n);
    for (int k = 0; k < K; k++) {
        for (size_t i = 0; i < n; i++) v[i] = x[i] * (1.0f + 0.1f * (float)k);
        buf[k] = hfl_malloc(hfl_codec_max_bytes(c, n, 256));
        hfl_rng_key key = {1, 1, (uint32_t)k, 0};
        len[k] = hfl_codec_encode(c, v, NULL, n, 256, &key, 1, buf[k]);
    }
    printf("one round of %d int8 updates of n=%zu, adds + finish (best of 3):\n", K, n);
    double base = 0;
    for (size_t r = 0; r < sizeof specs / sizeof *specs; r++) {
        hfl_rule rule;
        hfl_agg a;
        if (hfl_rule_parse(specs[r], &rule, err) != 0 || hfl_agg_init(&a, n, 1, err) != 0 ||
            (rule.kind != HFL_RULE_FEDAVG && hfl_agg_hold(&a, K, (uint64_t)1 << 40, err) != 0)) {
            fprintf(stderr, "bench-agg: %s\n", err);
            exit(1);
        }
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t = hfl_now();
            hfl_agg_reset(&a, 1.0, 0);
            const float *rows[K];
            for (int k = 0; k < K; k++) {
                if (rule.kind == HFL_RULE_FEDAVG) hfl_agg_add(&a, c, buf[k], len[k], 0.1, NULL, err);
                else hfl_agg_add_row(&a, c, buf[k], len[k], k, NULL, err);
                rows[k] = a.rows ? a.rows + (size_t)k * n : NULL;
            }
            if (rule.kind == HFL_RULE_FEDAVG) hfl_agg_finish(&a, 1.0, out);
            else hfl_rule_apply(&rule, rows, K, n, out, NULL, err);
            t = hfl_now() - t;
            best = t < best ? t : best;
        }
        if (r == 0) base = best;
        printf("  %-12s %9.1f ms  %5.2fx fedavg\n", specs[r], best * 1e3, best / base);
        hfl_agg_free(&a);
    }
    for (int k = 0; k < K; k++) free(buf[k]);
    free(v);
    free(out);
}

static void bench(size_t n) {
    char err[HFL_ERR_LEN];
    float *x = hfl_malloc(sizeof(float) * n), *dst = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = 0.01f * (hfl_u01(hfl_philox_u32(1, 0, 0, 0, 0, i)) - 0.5f);
    memcpy(dst, x, sizeof(float) * n);
    double copy = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t = hfl_now();
        memcpy(dst, x, sizeof(float) * n);
        t = hfl_now() - t;
        copy = t < copy ? t : copy;
    }
    double gb = 4.0 * (double)n / 1e9;
    printf("n=%zu  memcpy of %zu bytes: %.2f GB/s (1 thread)\n", n, 4 * n, gb / copy);
    printf("%-10s %12s %9s %14s %9s\n", "codec", "exact GB/s", "x memcpy", "float GB/s", "x memcpy");
    hfl_agg a;
    if (hfl_agg_init(&a, n, 1, err) != 0) {
        fprintf(stderr, "bench-agg: %s\n", err);
        exit(1);
    }
    for (size_t k = 0; k < sizeof codecs / sizeof *codecs; k++) {
        const hfl_codec *c = hfl_codec_find(codecs[k], err);
        uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(c, n, 256));
        hfl_rng_key key = {1, 1, 0, 0};
        size_t len = hfl_codec_encode(c, x, NULL, n, 256, &key, 1, buf);
        double exact = 1e30, flt = 1e30;
        hfl_agg_reset(&a, 1.0, 0);
        for (int r = 0; r < REPS; r++) {
            double t = hfl_now();
            if (hfl_agg_add(&a, c, buf, len, 0.01, NULL, err) != 0) {
                fprintf(stderr, "bench-agg: %s\n", err);
                exit(1);
            }
            t = hfl_now() - t;
            exact = t < exact ? t : exact;
            t = hfl_now();
            hfl_codec_decode_accumulate(c, buf, len, n, 0.01f, dst, 1, err);
            t = hfl_now() - t;
            flt = t < flt ? t : flt;
        }
        printf("%-10s %12.2f %9.2f %14.2f %9.2f\n", codecs[k], gb / exact, copy / exact, gb / flt, copy / flt);
        free(buf);
    }
    hfl_agg_free(&a);
    rules(x, n);
    free(x);
    free(dst);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        for (int i = 1; i < argc; i++) bench((size_t)strtoull(argv[i], NULL, 10));
    } else {
        bench(199210);
        bench(16777216);
    }
    return 0;
}
