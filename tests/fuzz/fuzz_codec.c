/* fuzz_codec.c: libFuzzer harness for every codec's decoder (compress/codec.h)
 * and the coordinator's path through them (coordinator/aggregate.h).
 *
 * Input: one selector byte, then a payload. The selector's low 3 bits pick
 * the codec (FUZZ_CODECS), bit 3 the thread count of the second decode; n is
 * the payload header's own count, so the decoders get past the header.
 * Invariants:
 *   - validate and decode_accumulate agree; a refusal is -1 with a one-line
 *     error and leaves acc untouched (all zero here); validate's block is the
 *     header's;
 *   - a payload too short to carry n values is refused whatever its content;
 *   - an accepted payload decodes to finite values, the same bits on one
 *     thread and on several;
 *   - fp32, fp16 and bf16 values re-encode to the bytes they came from (-0
 *     decodes as +0);
 *   - hfl_agg_add (clip 1, weight 0.5) accepts exactly what the decoder does,
 *     leaves the sum untouched when it refuses, and otherwise adds an update
 *     whose mean is finite with norm at most 0.5. */
#include <math.h>
#include <string.h>

#include "compress/codec.h"
#include "coordinator/aggregate.h"
#include "fuzz.h"
#include "util/util.h"

static const char *const FUZZ_CODECS[8] = {"fp32", "fp16", "bf16", "int8",
                                           "int4", "sign", "topk:0.1", "topk:0.5"};

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int all_zero(const void *p, size_t bytes) {
    const uint8_t *b = p;
    for (size_t i = 0; i < bytes; i++)
        if (b[i]) return 0;
    return 1;
}

static void check_refusal(const hfl_codec *c, const char *what, const char *err) {
    FUZZ_REQUIRE(err[0] != 0, "%s: %s refused without an error", c->name, what);
    FUZZ_REQUIRE(strchr(err, '\n') == NULL, "%s: %s error is not one line: %s", c->name, what, err);
}

/* fp32, fp16, bf16: encoding the decoded values gives the payload back, but
 * for -0, which decodes (0 + -0) as +0. */
static void check_dense_roundtrip(const hfl_codec *c, const uint8_t *in, size_t len, const float *v,
                                  size_t n) {
    size_t width = strcmp(c->name, "fp32") == 0 ? 4 : 2; /* fp16, bf16: 2 */
    uint8_t *out = hfl_malloc(hfl_codec_max_bytes(c, n, 0));
    hfl_rng_key key = {1, 2, 3, 4};
    size_t out_len = hfl_codec_encode(c, v, NULL, n, 0, &key, 1, out);
    FUZZ_REQUIRE(out_len == len, "%s: re-encoding is %zu bytes, the payload %zu", c->name, out_len, len);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *a = in + HFL_CODEC_HEADER_BYTES + i * width, *b = out + HFL_CODEC_HEADER_BYTES + i * width;
        uint32_t sign = width == 4 ? 0x80000000u : 0x8000u;
        uint32_t x = width == 4 ? load_u32(a) : (uint32_t)(a[0] | a[1] << 8);
        uint32_t y = width == 4 ? load_u32(b) : (uint32_t)(b[0] | b[1] << 8);
        if (x == sign) x = 0;
        FUZZ_REQUIRE(x == y, "%s: value %zu re-encodes as 0x%x, sent 0x%x", c->name, i, (unsigned)y, (unsigned)x);
    }
    free(out);
}

/* The coordinator's path: clip 1, weight 0.5, then the mean. */
static void check_aggregate(const hfl_codec *c, const uint8_t *in, size_t len, size_t n, int accepted) {
    hfl_agg a;
    char err[HFL_ERR_LEN] = "";
    FUZZ_REQUIRE(hfl_agg_init_on(&a, hfl_backend_cpu(), n, 1, err) == 0, "%s", err);
    hfl_agg_reset(&a, 1.0, 1.0);
    hfl_agg_update info = {0, 0};
    int rc = hfl_agg_add(&a, c, in, len, 0.5, &info, err);
    FUZZ_REQUIRE((rc == 0) == accepted, "%s: hfl_agg_add says %d, the decoder %s (%s)", c->name, rc,
                 accepted ? "accepts" : "refuses", err);
    if (rc != 0) {
        check_refusal(c, "hfl_agg_add", err);
        /* the reset leaves acc's zeros to the next pass (acc_zero), and only a
         * pass writes acc and clears the flag; nothing may wait to be added */
        FUZZ_REQUIRE((a.acc_zero || all_zero(a.acc, n * sizeof *a.acc)) && a.n_pending == 0,
                     "%s: a refused update touched the sum", c->name);
    } else {
        FUZZ_REQUIRE(isfinite(info.norm) && info.norm >= 0, "%s: norm %g", c->name, info.norm);
        FUZZ_REQUIRE(info.clipped == (info.norm > 1.0), "%s: norm %g, clipped %d", c->name, info.norm,
                     info.clipped);
        float *mean = hfl_malloc((n ? n : 1) * sizeof *mean);
        hfl_agg_mean(&a, 1.0);
        a.ops->download(mean, a.mean, a.n * sizeof *mean);
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            FUZZ_REQUIRE(isfinite(mean[i]), "%s: mean[%zu] = %g", c->name, i, (double)mean[i]);
            sum += (double)mean[i] * mean[i];
        }
        FUZZ_REQUIRE(sqrt(sum) <= 0.5 * (1 + 1e-5), "%s: clipped mean has norm %g", c->name, sqrt(sum));
        free(mean);
    }
    hfl_agg_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
    char err[HFL_ERR_LEN] = "";
    const hfl_codec *c = hfl_codec_find(FUZZ_CODECS[data[0] & 7], err);
    FUZZ_REQUIRE(c != NULL, "%s", err);
    int threads = data[0] & 8 ? 3 : 2;
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    size_t n = len >= HFL_CODEC_HEADER_BYTES ? load_u32(in + 4) : 1;

    uint32_t block = 0xFFFFFFFFu;
    int rc = hfl_codec_validate(c, in, len, n, &block, err);
    if (rc != 0) check_refusal(c, "validate", err);
    else FUZZ_REQUIRE(block == load_u32(in + 8), "%s: validate's block %u, the header's %u", c->name,
                      (unsigned)block, (unsigned)load_u32(in + 8));
    /* Every codec spends at least a bit per value (topk:F 3 bytes per F * n). */
    if (n > 16 * len + 64) {
        FUZZ_REQUIRE(rc != 0, "%s: %zu bytes accepted for n=%zu", c->name, len, n);
        return 0;
    }
    /* A wrong n is refused. */
    err[0] = 0;
    FUZZ_REQUIRE(hfl_codec_validate(c, in, len, n + 1, &block, err) != 0, "%s: n=%zu accepted as n+1", c->name, n);
    check_refusal(c, "validate", err);

    size_t bytes = (n ? n : 1) * sizeof(float);
    float *acc1 = hfl_calloc(1, bytes), *accn = hfl_calloc(1, bytes);
    err[0] = 0;
    int rc1 = hfl_codec_decode_accumulate(c, in, len, n, 1.0f, acc1, 1, err);
    FUZZ_REQUIRE(rc1 == rc, "%s: validate says %d, decode_accumulate %d (%s)", c->name, rc, rc1, err);
    char errn[HFL_ERR_LEN] = "";
    int rcn = hfl_codec_decode_accumulate(c, in, len, n, 1.0f, accn, threads, errn);
    FUZZ_REQUIRE(rcn == rc1, "%s: %d threads say %d, one thread %d", c->name, threads, rcn, rc1);
    if (rc1 != 0) {
        check_refusal(c, "decode_accumulate", err);
        check_refusal(c, "decode_accumulate", errn);
        FUZZ_REQUIRE(all_zero(acc1, bytes) && all_zero(accn, bytes), "%s: a refused payload touched acc", c->name);
    } else {
        FUZZ_REQUIRE(memcmp(acc1, accn, bytes) == 0, "%s: %d threads decode other bits", c->name, threads);
        for (size_t i = 0; i < n; i++)
            FUZZ_REQUIRE(isfinite(acc1[i]), "%s: value %zu decodes to %g", c->name, i, (double)acc1[i]);
        if ((data[0] & 7) < 3) check_dense_roundtrip(c, in, len, acc1, n); /* fp32, fp16, bf16 */
    }
    free(acc1);
    free(accn);
    check_aggregate(c, in, len, n, rc == 0);
    return 0;
}
