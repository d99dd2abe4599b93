/* codec_fp32.c: the uncompressed codec. The body is n little-endian fp32
 * values; the header's block is 0 (a run's block size is ignored, so one
 * setting serves every codec). Encoding is exact, so error feedback
 * leaves the residual at 0. It is the reference the lossy codecs are
 * measured against. Threads split the vector into CODEC_CHUNK-value chunks.
 * Vectorised (gcc 12 -O3, SSE2): encode, the finiteness scan and accumulate. */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

#include "util/util.h"

static size_t fp32_max_bytes(const hfl_codec *c, size_t n, uint32_t block) {
    (void)c;
    (void)block;
    if ((uint64_t)n > UINT32_MAX)
        return 0;
    return HFL_CODEC_HEADER_BYTES + n * sizeof(float);
}

typedef struct {
    const float *delta;
    float *residual;
    size_t n;
    uint8_t *body;      /* encode: where the values go */
    const uint8_t *in;  /* decode: the values read */
    float weight;
    float *acc;
} fp32_job;

static void chunk_span(size_t n, size_t lo, size_t hi, size_t *a, size_t *b) {
    *a = lo * CODEC_CHUNK;
    *b = hi * CODEC_CHUNK < n ? hi * CODEC_CHUNK : n;
}

static int fp32_encode_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    fp32_job *j = ctx;
    size_t a, b;
    chunk_span(j->n, lo, hi, &a, &b);
    if (!j->residual) {
        memcpy(j->body + a * sizeof(float), j->delta + a, (b - a) * sizeof(float));
        return 0;
    }
    for (size_t i = a; i < b; i++) {
        codec_store_f32(j->body + i * sizeof(float), j->delta[i] + j->residual[i]);
        j->residual[i] = 0.0f;
    }
    return 0;
}

static size_t fp32_encode(const hfl_codec *c, const float *delta, float *residual, size_t n,
                          uint32_t block, const hfl_rng_key *key, int threads, uint8_t *out) {
    (void)key;
    codec_write_header(out, HFL_CODEC_ID_FP32, (uint32_t)n, 0);
    fp32_job j = {.delta = delta, .residual = residual, .n = n,
                  .body = out + HFL_CODEC_HEADER_BYTES};
    codec_parallel(codec_blocks(n, CODEC_CHUNK), threads, NULL, fp32_encode_range, &j, NULL);
    return fp32_max_bytes(c, n, block);
}

/* Branch-free scan (exponent bits all ones = Inf or NaN) so it vectorises; the
 * slow search for the culprit only runs on a bad payload. */
static int fp32_check_range(void *ctx, size_t lo, size_t hi, char *err) {
    fp32_job *j = ctx;
    size_t a, b;
    chunk_span(j->n, lo, hi, &a, &b);
    uint32_t bad = 0;
    for (size_t i = a; i < b; i++)
        bad |= (codec_load_u32(j->in + i * 4) & 0x7F800000u) == 0x7F800000u;
    for (size_t i = a; bad && i < b; i++) {
        float v = codec_load_f32(j->in + i * sizeof(float));
        if (!isfinite(v))
            return hfl_errf(err, "fp32 payload: value %zu is %g, not finite", i, (double)v);
    }
    return 0;
}

/* acc[i] += weight * value[i]; counted loops over restrict pointers, the first a
 * multiple of 16 long so that gcc -O2 vectorises it too (see codec_int8.c). */
static int fp32_apply_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    fp32_job *j = ctx;
    size_t a, b;
    chunk_span(j->n, lo, hi, &a, &b);
    float *restrict acc = j->acc + a;
    const uint8_t *restrict body = j->in + a * sizeof(float);
    size_t m = b - a, m16 = m & ~(size_t)15, i = 0;
    for (; i < m16; i++)
        acc[i] = hfl_fp32_accum(acc[i], codec_load_f32(body + i * sizeof(float)), j->weight);
    for (; i < m; i++)
        acc[i] = hfl_fp32_accum(acc[i], codec_load_f32(body + i * sizeof(float)), j->weight);
    return 0;
}

static int fp32_validate(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                         uint32_t *block, char *err) {
    if (codec_read_fixed(c, in, len, expect_n, block, err))
        return -1;
    fp32_job j = {.n = expect_n, .in = in + HFL_CODEC_HEADER_BYTES};
    return fp32_check_range(&j, 0, codec_blocks(expect_n, CODEC_CHUNK), err);
}

static int fp32_decode_accumulate(const hfl_codec *c, const uint8_t *in, size_t len,
                                  size_t expect_n, float weight, float *acc, int threads,
                                  char *err) {
    uint32_t block;
    if (codec_read_fixed(c, in, len, expect_n, &block, err))
        return -1;
    fp32_job j = {.n = expect_n, .in = in + HFL_CODEC_HEADER_BYTES, .weight = weight, .acc = acc};
    return codec_parallel(codec_blocks(expect_n, CODEC_CHUNK), threads, fp32_check_range,
                          fp32_apply_range, &j, err);
}

const hfl_codec hfl_codec_fp32 = {
    .name = "fp32",
    .id = HFL_CODEC_ID_FP32,
    .biased = 0,
    .blocked = 0,
    .max_bytes = fp32_max_bytes,
    .encode = fp32_encode,
    .decode_accumulate = fp32_decode_accumulate,
    .validate = fp32_validate,
};
