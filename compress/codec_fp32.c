/* codec_fp32.c: the uncompressed codec. The body is n little-endian fp32
 * values; the header's block is 0 (a run's block size is ignored, so one
 * setting serves every codec). Encoding is exact, so error feedback
 * leaves the residual at 0. It is the reference the lossy codecs are
 * measured against. */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

#include "util/util.h"

static size_t fp32_encoded_bytes(size_t n, uint32_t block) {
    (void)block;
    if ((uint64_t)n > UINT32_MAX)
        return 0;
    return HFL_CODEC_HEADER_BYTES + n * sizeof(float);
}

static void fp32_encode(const float *delta, float *residual, size_t n, uint32_t block,
                        const hfl_rng_key *key, uint8_t *out) {
    (void)block;
    (void)key;
    codec_write_header(out, HFL_CODEC_ID_FP32, (uint32_t)n, 0);
    uint8_t *body = out + HFL_CODEC_HEADER_BYTES;
    for (size_t i = 0; i < n; i++) {
        float v = residual ? delta[i] + residual[i] : delta[i];
        codec_store_f32(body + i * sizeof(float), v);
        if (residual)
            residual[i] = 0.0f;
    }
}

static int fp32_validate(const uint8_t *in, size_t len, size_t expect_n, uint32_t *block,
                         char *err) {
    if (codec_read_header(&hfl_codec_fp32, in, len, expect_n, 0, 0, block, err))
        return -1;
    /* Branch-free scan (exponent bits all ones = Inf or NaN) so it vectorises; the
     * slow search for the culprit only runs on a bad payload. */
    const uint8_t *body = in + HFL_CODEC_HEADER_BYTES;
    uint32_t bad = 0;
    for (size_t i = 0; i < expect_n; i++) {
        uint32_t bits;
        memcpy(&bits, body + i * sizeof bits, sizeof bits);
        bad |= (bits & 0x7F800000u) == 0x7F800000u;
    }
    for (size_t i = 0; bad && i < expect_n; i++) {
        float v = codec_load_f32(body + i * sizeof(float));
        if (!isfinite(v))
            return hfl_errf(err, "fp32 payload: value %zu is %g, not finite", i, (double)v);
    }
    return 0;
}

/* acc[i] += weight * value[i]; counted loops over restrict pointers, the first a
 * multiple of 16 long so that gcc -O2 vectorises it too (see codec_int8.c). */
static void fp32_accum(float *restrict acc, const uint8_t *restrict body, size_t n,
                       float weight) {
    size_t n16 = n & ~(size_t)15, i = 0;
    for (; i < n16; i++)
        acc[i] = hfl_fp32_accum(acc[i], codec_load_f32(body + i * sizeof(float)), weight);
    for (; i < n; i++)
        acc[i] = hfl_fp32_accum(acc[i], codec_load_f32(body + i * sizeof(float)), weight);
}

static int fp32_decode_accumulate(const uint8_t *in, size_t len, size_t expect_n, float weight,
                                  float *acc, char *err) {
    uint32_t block;
    if (fp32_validate(in, len, expect_n, &block, err))
        return -1;
    fp32_accum(acc, in + HFL_CODEC_HEADER_BYTES, expect_n, weight);
    return 0;
}

const hfl_codec hfl_codec_fp32 = {
    .name = "fp32",
    .id = HFL_CODEC_ID_FP32,
    .biased = 0,
    .encoded_bytes = fp32_encoded_bytes,
    .encode = fp32_encode,
    .decode_accumulate = fp32_decode_accumulate,
    .validate = fp32_validate,
};
