/* test_cuda_agg.c: the coordinator's aggregation on the GPU against the CPU,
 * byte for byte (suite gpu; skips with exit 77, saying why, without one).
 *
 * For every codec (fp32, fp16, bf16, int8, int4, sign, topk:0.1), clipping on
 * and off, every strategy (fedavg, median, trimmed:0.2, krum:1, multikrum:1)
 * and every server optimizer (fedavg, fedavgm, fedadam, fedyogi, nesterov): three
 * rounds of K updates (each client's delta encoded with error feedback, as a
 * client would) are aggregated by coordinator/aggregate.c on the GPU and on
 * the CPU, each in two shuffled arrival orders; after every round the global
 * model and the server optimizer's state must be the same bytes in all four
 * runs. One line per combination that differs, one summary line.
 *
 * HFL_GPU_STANDIN=twin runs the same against tests/kernels/agg_twin.h's CPU
 * twin of the CUDA kernels (dressed as a device: payloads staged, state
 * copied) instead of a GPU, in the unit suite; =twin-skew against a twin
 * that adds the norm's chunk sums in float, which must fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/aggregate.h"
#include "coordinator/robust.h"
#include "coordinator/server_opt.h"
#include "kernels/device.h"
#include "kernels/philox.h"
#include "kernels/select.h"
#include "tests/check.h"
#include "tests/kernels/agg_twin.h"
#include "util/util.h"

enum { K = 5, N = 3 * 4096 + 77, ROUNDS = 3 };

static const char *const codecs[] = {"fp32", "fp16", "bf16", "int8", "int4", "sign", "topk:0.1"};
static const char *const rules[] = {"fedavg", "median", "trimmed:0.2", "krum:1", "multikrum:1"};
static const char *const sopts[] = {"fedavg", "fedavgm", "fedadam:0.05", "fedyogi:0.05", "nesterov"};

/* One run: the global model and the optimizer's state after the rounds. */
typedef struct {
    float global[N], m[N], v[N];
} run_state;

/* Client c's payload of round r: its delta, varied in scale so some clip,
 * and from chunk to chunk of the norm (agg_hd.h) by factors of 4. */
static uint8_t *payload(const hfl_codec *codec, int r, int c, float *residual, size_t *len) {
    float *d = hfl_malloc(sizeof(float) * N);
    float scale = 0.002f * (float)(1 + c);
    for (size_t i = 0; i < N; i++)
        d[i] = ldexpf(scale, 2 * (int)(i / 4096)) *
               (2.0f * hfl_u01(hfl_philox_u32(31, (uint32_t)r, (uint32_t)c, 0, 0, i)) - 1.0f);
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(codec, N, 64));
    hfl_rng_key key = {7, (uint32_t)r, (uint32_t)c, 0};
    *len = hfl_codec_encode(codec, d, residual, N, 64, &key, 1, buf);
    free(d);
    return buf;
}

/* Aggregates ROUNDS rounds on be, updates arriving in the order `order`
 * (a permutation of K), into *out; 0, or -1 with err. */
static int run(const hfl_backend *be, const hfl_codec *codec, const hfl_rule *rule, const char *sopt_spec,
               int clip, const int order[K], run_state *out, char *err) {
    hfl_agg a;
    hfl_server_opt o;
    float (*res)[N] = hfl_calloc(K, sizeof *res);
    if (hfl_sopt_parse(sopt_spec, &o, err) != 0 || hfl_sopt_init(&o, N, err) != 0 ||
        hfl_agg_init_on(&a, be, N, 1, err) != 0)
        return -1;
    if (rule->kind != HFL_RULE_FEDAVG && hfl_agg_hold(&a, K, (uint64_t)1 << 30, err) != 0) return -1;
    for (size_t i = 0; i < N; i++) out->global[i] = 0.1f * hfl_u01(hfl_philox_u32(32, 0, 0, 0, 0, i));
    int rc = 0;
    for (int r = 0; r < ROUNDS && rc == 0; r++) {
        hfl_agg_reset(&a, clip ? 0.5 : 0, 1.0);
        for (int j = 0; j < K && rc == 0; j++) {
            int c = order[j];
            size_t len;
            uint8_t *p = payload(codec, r, c, res[c], &len);
            rc = rule->kind == HFL_RULE_FEDAVG ? hfl_agg_add(&a, codec, p, len, 1.0 / K, NULL, err)
                                               : hfl_agg_add_row(&a, codec, p, len, c, NULL, err);
            free(p);
        }
        int finite = 0;
        if (rc == 0) {
            if (rule->kind == HFL_RULE_FEDAVG) finite = hfl_agg_mean(&a, 1.0);
            else rc = hfl_agg_rule(&a, rule, NULL, NULL, &finite, err);
        }
        if (rc == 0 && !finite) rc = hfl_errf(err, "round %d's aggregate is not finite", r);
        if (rc == 0) rc = hfl_agg_step(&a, &o, out->global, err);
    }
    memset(out->m, 0, sizeof out->m), memset(out->v, 0, sizeof out->v);
    if (o.m) memcpy(out->m, o.m, sizeof out->m);
    if (o.v) memcpy(out->v, o.v, sizeof out->v);
    hfl_agg_free(&a);
    hfl_sopt_free(&o);
    free(res);
    return rc;
}

static int test_all(const hfl_backend *gpu, const hfl_backend *cpu) {
    static run_state s[4];
    static const int orders[2][K] = {{0, 1, 2, 3, 4}, {3, 0, 4, 2, 1}};
    int combos = 0, bad = 0;
    char err[HFL_ERR_LEN];
    for (size_t ci = 0; ci < sizeof codecs / sizeof *codecs; ci++)
        for (int clip = 0; clip < 2; clip++)
            for (size_t ri = 0; ri < sizeof rules / sizeof *rules; ri++)
                for (size_t si = 0; si < sizeof sopts / sizeof *sopts; si++) {
                    const hfl_codec *codec = hfl_codec_find(codecs[ci], err);
                    hfl_rule rule;
                    REQUIRE_MSG(codec && hfl_rule_parse(rules[ri], &rule, err) == 0, "%s", err);
                    int ok = 1;
                    for (int w = 0; w < 4 && ok; w++) {
                        if (run(w < 2 ? gpu : cpu, codec, &rule, sopts[si], clip, orders[w % 2], &s[w], err) != 0) {
                            printf("FAIL %s clip %d %s %s on %s: %s\n", codecs[ci], clip, rules[ri], sopts[si],
                                   (w < 2 ? gpu : cpu)->name, err);
                            ok = 0;
                        }
                    }
                    for (int w = 1; w < 4 && ok; w++)
                        if (memcmp(&s[w], &s[0], sizeof s[0]) != 0) {
                            size_t at = 0;
                            while (at < N && memcmp(&s[w].global[at], &s[0].global[at], sizeof(float)) == 0) at++;
                            printf("FAIL %s clip %d %s %s: the %s run in order %d differs from the %s run in "
                                   "order 0 (first at global[%zu]: %.9g against %.9g)\n",
                                   codecs[ci], clip, rules[ri], sopts[si], (w < 2 ? gpu : cpu)->name, w % 2,
                                   gpu->name, at, at < N ? (double)s[w].global[at] : 0.0,
                                   at < N ? (double)s[0].global[at] : 0.0);
                            ok = 0;
                        }
                    combos++;
                    bad += !ok;
                }
    printf("%s %d of %d combinations (codec x clip x strategy x server optimizer): %s and CPU bytes equal, "
           "in two arrival orders, over %d rounds\n",
           bad ? "FAIL" : "ok  ", combos - bad, combos, gpu->name, ROUNDS);
    return bad;
}

int main(void) {
    const char *standin = getenv("HFL_GPU_STANDIN");
    if (standin) {
        REQUIRE_MSG(!strcmp(standin, "twin") || !strcmp(standin, "twin-skew"),
                    "HFL_GPU_STANDIN=%s: expected twin or twin-skew", standin);
        twin_float_norm = strcmp(standin, "twin-skew") == 0;
        printf("stand-in: the CPU twin of the CUDA aggregation kernels%s\n",
               twin_float_norm ? ", adding the norm's chunks in float" : "");
        return test_all(agg_twin(), hfl_backend_cpu()) ? 1 : 0;
    }
    hfl_device_info info;
    char why[HFL_ERR_LEN], err[HFL_ERR_LEN];
    if (hfl_cuda_probe(&info, why, sizeof why) != 0) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    const hfl_backend *gpu = hfl_backend_select("cuda", &info, why, err);
    REQUIRE_MSG(gpu != NULL, "a GPU is present but the CUDA backend is not: %s", err);
    printf("GPU: %s, cc %d.%d\n", info.name, info.cc_major, info.cc_minor);
    return test_all(gpu, hfl_backend_cpu()) ? 1 : 0;
}
