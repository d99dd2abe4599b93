/* agg_bench.c: the coordinator's exact aggregation against a copy, in one
 * process (bench-agg on the CPU, bench-gpu-agg on the GPU).
 *
 * CPU (bench-agg [n ...]; default 199210, the mlp, 1199882, the cnn, and
 * 16777216): a one-thread memcpy of n fp32 values (4n bytes, best of REPS),
 * then per codec one round of ROUND updates through coordinator/aggregate.h
 * on the CPU backend (its reset, each update's validation, norm, clip and
 * 64-bit fixed-point add, the mean at the end) and, for reference, the float
 * decode_accumulate it replaced; every timed piece starts with cold caches
 * (evict), so a model that fits them is measured out of cache too. Rates are
 * GB/s of fp32 values aggregated (4n bytes per update, the round's time over
 * ROUND), so "x memcpy" is the ratio to copying one uncompressed update. Then the robust rules' cost per
 * round against FedAvg's (K int8 updates, in ms).
 *
 * Options before the sizes: --codec NAME (repeatable) measures only those
 * codecs, --no-rules leaves out the robust rules (a 100M-value round of
 * them takes minutes).
 *
 * GPU (bench-gpu-agg [n ...]; skips, saying why, without a GPU): per codec,
 * the update already in device memory (the norm pass and the fixed-point add
 * of kernels/agg.h, one update) and end to end (a round of ROUND updates
 * from host memory through hfl_agg_add, validation, the pinned staging and
 * its copy, norm and the batched add, and the mean, per update), each
 * against a device-to-device copy of 4n bytes on the same GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/aggregate.h"
#include "coordinator/robust.h"
#include "kernels/device.h"
#include "kernels/philox.h"
#include "kernels/select.h"
#include "util/util.h"

enum { REPS = 5, ROUND = 8 };

static const char *codecs[8] = {"fp32", "fp16", "int8", "int4", "sign", "topk:0.01"};
static size_t n_codecs = 6;
static int with_rules = 1;

static void die(const char *err) {
    fprintf(stderr, "bench-agg: %s\n", err);
    exit(1);
}

/* n values of a small delta, and its payload per codec. */
static uint8_t *encoded(const hfl_codec *c, const float *x, size_t n, size_t *len) {
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(c, n, 256));
    hfl_rng_key key = {1, 1, 0, 0};
    *len = hfl_codec_encode(c, x, NULL, n, 256, &key, 1, buf);
    return buf;
}

/* One round of K int8 updates per rule: adds plus the aggregate, best of 3. */
static void rules(const hfl_backend *be, const float *x, size_t n) {
    enum { K = 10 };
    static const char *const specs[] = {"fedavg", "median", "trimmed:0.2", "krum:2", "multikrum:2"};
    char err[HFL_ERR_LEN];
    const hfl_codec *c = hfl_codec_find("int8", err);
    uint8_t *buf[K];
    size_t len[K];
    float *v = hfl_malloc(sizeof(float) * n);
    for (int k = 0; k < K; k++) {
        for (size_t i = 0; i < n; i++) v[i] = x[i] * (1.0f + 0.1f * (float)k);
        buf[k] = encoded(c, v, n, &len[k]);
    }
    printf("one round of %d int8 updates of n=%zu on the %s backend, adds + aggregate (best of 3):\n", K, n, be->name);
    double base = 0;
    for (size_t r = 0; r < sizeof specs / sizeof *specs; r++) {
        hfl_rule rule;
        hfl_agg a;
        if (hfl_rule_parse(specs[r], &rule, err) != 0 || hfl_agg_init_on(&a, be, n, 1, err) != 0 ||
            (rule.kind != HFL_RULE_FEDAVG && hfl_agg_hold(&a, K, (uint64_t)1 << 40, err) != 0))
            die(err);
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t = hfl_now();
            int finite;
            hfl_agg_reset(&a, 1.0, 0);
            for (int k = 0; k < K; k++)
                if ((rule.kind == HFL_RULE_FEDAVG ? hfl_agg_add(&a, c, buf[k], len[k], 0.1, NULL, err)
                                                  : hfl_agg_add_row(&a, c, buf[k], len[k], k, NULL, err)) != 0)
                    die(err);
            if (rule.kind == HFL_RULE_FEDAVG) hfl_agg_mean(&a, 1.0);
            else if (hfl_agg_rule(&a, &rule, NULL, NULL, &finite, err) != 0) die(err);
            t = hfl_now() - t;
            best = t < best ? t : best;
        }
        if (r == 0) base = best;
        printf("  %-12s %9.1f ms  %5.2fx fedavg\n", specs[r], best * 1e3, best / base);
        hfl_agg_free(&a);
    }
    for (int k = 0; k < K; k++) free(buf[k]);
    free(v);
}

#ifndef AGG_BENCH_GPU
/* Evicts the caches: writes and reads 256 MiB, more than any last-level
 * cache, so that what is timed next starts from memory (out of cache). */
static void evict(void) {
    static volatile uint8_t *junk;
    enum { BYTES = 256 << 20 };
    if (!junk) junk = hfl_calloc(BYTES, 1);
    for (size_t i = 0; i < BYTES; i += 64) junk[i] = (uint8_t)(junk[i] + 1);
}

static void bench_cpu(size_t n) {
    char err[HFL_ERR_LEN];
    float *x = hfl_malloc(sizeof(float) * n), *dst = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = 0.01f * (hfl_u01(hfl_philox_u32(1, 0, 0, 0, 0, i)) - 0.5f);
    memcpy(dst, x, sizeof(float) * n);
    double copy = 1e30;
    for (int r = 0; r < REPS; r++) {
        evict();
        double t = hfl_now();
        memcpy(dst, x, sizeof(float) * n);
        t = hfl_now() - t;
        copy = t < copy ? t : copy;
    }
    double gb = 4.0 * (double)n / 1e9;
    printf("n=%zu  memcpy of %zu bytes: %.2f GB/s (1 thread, out of cache)\n", n, 4 * n, gb / copy);
    printf("%-10s %12s %9s %14s %9s\n", "codec", "exact GB/s", "x memcpy", "float GB/s", "x memcpy");
    hfl_agg a;
    if (hfl_agg_init_on(&a, hfl_backend_cpu(), n, 1, err) != 0) die(err);
    for (size_t k = 0; k < n_codecs; k++) {
        const hfl_codec *c = hfl_codec_find(codecs[k], err);
        size_t len;
        uint8_t *buf = encoded(c, x, n, &len);
        double exact = 1e30, flt = 1e30;
        for (int r = 0; r < REPS; r++) {
            /* a round: its reset, ROUND adds and its mean, each from cold caches */
            double t = 0, t0;
            for (int u = 0; u <= ROUND + 1; u++) {
                evict();
                t0 = hfl_now();
                if (u == 0) hfl_agg_reset(&a, 1.0, 0);
                else if (u <= ROUND && hfl_agg_add(&a, c, buf, len, 1.0 / ROUND, NULL, err) != 0) die(err);
                else if (u > ROUND) hfl_agg_mean(&a, 1.0);
                t += hfl_now() - t0;
            }
            t /= ROUND;
            exact = t < exact ? t : exact;
            evict();
            t = hfl_now();
            hfl_codec_decode_accumulate(c, buf, len, n, 0.01f, dst, 1, err);
            t = hfl_now() - t;
            flt = t < flt ? t : flt;
        }
        printf("%-10s %12.2f %9.2f %14.2f %9.2f\n", codecs[k], gb / exact, copy / exact, gb / flt, copy / flt);
        free(buf);
    }
    hfl_agg_free(&a);
    if (with_rules) rules(hfl_backend_cpu(), x, n);
    free(x);
    free(dst);
}

#else
/* What one timed GPU run does (gpu_run), and its operands. */
typedef struct {
    int what; /* 0: a device-to-device copy; 1: the resident norm + add; 2: hfl_agg_add end to end */
    const hfl_backend *be;
    void *dst, *src;
    size_t bytes;
    hfl_agg *a;
    const hfl_payload *p;
    const hfl_codec *c;
    const uint8_t *buf;
    size_t len;
} gpu_job;

/* One run of the job, ended by a wait for the device. */
static void gpu_run(const gpu_job *j) {
    char err[HFL_ERR_LEN];
    const hfl_agg_ops *ops = j->be->agg;
    double f = 1.0, sink;
    hfl_agg_norm nm;
    if (j->what == 0) {
        j->be->copy(j->dst, j->src, j->bytes);
        j->be->sync();
        return;
    }
    if (j->what == 1) {
        ops->norm(j->p, j->a->n, j->a->partials, &nm);
        ops->add_fixed(j->p, &f, 1, j->a->n, j->a->acc);
    } else { /* a round of ROUND adds and its mean, per update */
        hfl_agg_reset(j->a, 1.0, 0);
        for (int u = 0; u < ROUND; u++)
            if (hfl_agg_add(j->a, j->c, j->buf, j->len, 1.0 / ROUND, NULL, err) != 0) die(err);
        hfl_agg_mean(j->a, 1.0);
    }
    ops->download(&sink, j->a->partials, sizeof sink);
}

/* Seconds of the job's best of REPS runs. */
static double gpu_best(const gpu_job *j) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t = hfl_now();
        gpu_run(j);
        t = hfl_now() - t;
        best = t < best ? t : best;
    }
    return best;
}

static void bench_gpu(const hfl_backend *be, size_t n) {
    char err[HFL_ERR_LEN];
    float *x = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = 0.01f * (hfl_u01(hfl_philox_u32(1, 0, 0, 0, 0, i)) - 0.5f);
    float *d_src = be->alloc(4 * n), *d_dst = be->alloc(4 * n);
    be->upload(d_src, x, 4 * n);
    double gb = 4.0 * (double)n / 1e9;
    double copy = gpu_best(&(gpu_job){.what = 0, .be = be, .dst = d_dst, .src = d_src, .bytes = 4 * n});
    printf("n=%zu on the GPU: device-to-device copy of %zu bytes: %.1f GB/s\n", n, 4 * n, gb / copy);
    printf("%-10s %14s %9s %16s %9s\n", "codec", "resident GB/s", "x copy", "end-to-end GB/s", "x copy");
    hfl_agg a;
    if (hfl_agg_init_on(&a, be, n, 1, err) != 0) die(err);
    for (size_t k = 0; k < n_codecs; k++) {
        const hfl_codec *c = hfl_codec_find(codecs[k], err);
        size_t len;
        uint8_t *buf = encoded(c, x, n, &len);
        hfl_agg_reset(&a, 1.0, 0);
        double resident = 0;
        if (c->fraction == 0) { /* topk is scattered from host-expanded indices: end to end only */
            uint32_t block;
            if (hfl_codec_validate(c, buf, len, n, &block, err) != 0) die(err);
            uint8_t *body = be->alloc(len);
            be->agg->stage(body, buf + HFL_CODEC_HEADER_BYTES, len - HFL_CODEC_HEADER_BYTES);
            hfl_payload p = {.kind = c->id, .block = block, .body = body};
            resident = gpu_best(&(gpu_job){.what = 1, .be = be, .a = &a, .p = &p});
            be->free(body);
        }
        double e2e = gpu_best(&(gpu_job){.what = 2, .be = be, .a = &a, .c = c, .buf = buf, .len = len}) / ROUND;
        if (c->fraction == 0)
            printf("%-10s %14.1f %9.2f %16.1f %9.2f\n", codecs[k], gb / resident, copy / resident, gb / e2e, copy / e2e);
        else
            printf("%-10s %14s %9s %16.1f %9.2f\n", codecs[k], "-", "-", gb / e2e, copy / e2e);
        free(buf);
    }
    hfl_agg_free(&a);
    if (with_rules) rules(be, x, n);
    be->free(d_src), be->free(d_dst);
    free(x);
}

#endif

int main(int argc, char **argv) {
    static const size_t defaults[] = {199210, 1199882, 16777216};
    size_t picked = 0;
    char err0[HFL_ERR_LEN];
    while (argc > 1 && !strncmp(argv[1], "--", 2)) {
        if (!strcmp(argv[1], "--no-rules")) {
            with_rules = 0;
        } else if (!strcmp(argv[1], "--codec") && argc > 2 && picked < 8 && hfl_codec_find(argv[2], err0)) {
            codecs[picked++] = argv[2];
            argc--, argv++;
        } else {
            fprintf(stderr, "bench-agg: '%s': usage: bench-agg [--codec NAME]... [--no-rules] [N...]\n", argv[1]);
            return 2;
        }
        argc--, argv++;
    }
    if (picked) n_codecs = picked;
    size_t count = argc > 1 ? (size_t)argc - 1 : sizeof defaults / sizeof *defaults;
#ifdef AGG_BENCH_GPU
    hfl_device_info info;
    char why[HFL_ERR_LEN], err[HFL_ERR_LEN];
    if (hfl_cuda_probe(&info, why, sizeof why) != 0) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    const hfl_backend *be = hfl_backend_select("cuda", &info, why, err);
    if (!be) die(err);
    printf("GPU: %s\n", info.name);
#endif
    for (size_t i = 0; i < count; i++) {
        size_t n = argc > 1 ? (size_t)strtoull(argv[i + 1], NULL, 10) : defaults[i];
#ifdef AGG_BENCH_GPU
        bench_gpu(be, n);
#else
        bench_cpu(n);
#endif
    }
    return 0;
}
