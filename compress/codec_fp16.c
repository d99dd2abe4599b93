/* codec_fp16.c: IEEE binary16, round to nearest even.
 *
 * Body: n little-endian binary16 values; the header's block is 0 (the run's
 * block size is ignored). Conversions are quant_hd.h's bit-level ones (no
 * _Float16). Finite values beyond +-65504 saturate to +-65504 (a finite update
 * stays finite); NaN and Inf are kept and the decoder rejects them. Relative
 * error <= 2^-11 for values in the normal range (|v| >= 2^-14), absolute error
 * <= 2^-25 below it. Rounding is deterministic, so the codec is biased and
 * keeps v - decoded(v) as error feedback. Threads split the vector into
 * CODEC_CHUNK-value chunks. Vectorised (gcc 12 -O3, SSE2): both conversion
 * loops (integer ops and selects), the finiteness scan and accumulate. */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

#include "util/util.h"

static size_t fp16_max_bytes(const hfl_codec *c, size_t n, uint32_t block) {
    (void)c;
    (void)block;
    if ((uint64_t)n > UINT32_MAX)
        return 0;
    return HFL_CODEC_HEADER_BYTES + n * sizeof(uint16_t);
}

typedef struct {
    const float *delta;
    float *residual;
    size_t n;
    uint8_t *body;      /* encode: where the values go */
    const uint8_t *in;  /* decode: the values read */
    float weight;
    float *acc;
} fp16_job;

static void chunk_span(size_t n, size_t lo, size_t hi, size_t *a, size_t *b) {
    *a = lo * CODEC_CHUNK;
    *b = hi * CODEC_CHUNK < n ? hi * CODEC_CHUNK : n;
}

static void fp16_encode_plain(const float *restrict d, size_t m, uint16_t *restrict h) {
    for (size_t i = 0; i < m; i++)
        h[i] = hfl_f32_to_f16(hfl_f16_saturate(d[i]));
}

static void fp16_encode_ef(const float *restrict d, float *restrict r, size_t m,
                           uint16_t *restrict h) {
    for (size_t i = 0; i < m; i++) {
        float v = d[i] + r[i];
        uint16_t x = hfl_f32_to_f16(hfl_f16_saturate(v));
        h[i] = x;
        r[i] = v - hfl_f16_to_f32(x);
    }
}

/* Converts into an aligned local buffer, then copies: the payload's u16s sit at an
 * even offset, but writing through a uint16_t * there is still a cast gcc may not trust. */
static int fp16_encode_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    fp16_job *j = ctx;
    size_t a, b;
    chunk_span(j->n, lo, hi, &a, &b);
    uint16_t buf[CODEC_CHUNK];
    for (size_t s = a; s < b; s += CODEC_CHUNK) {
        size_t m = b - s < CODEC_CHUNK ? b - s : CODEC_CHUNK;
        if (j->residual)
            fp16_encode_ef(j->delta + s, j->residual + s, m, buf);
        else
            fp16_encode_plain(j->delta + s, m, buf);
        memcpy(j->body + s * sizeof(uint16_t), buf, m * sizeof(uint16_t));
    }
    return 0;
}

static size_t fp16_encode(const hfl_codec *c, const float *delta, float *residual, size_t n,
                          uint32_t block, const hfl_rng_key *key, int threads, uint8_t *out) {
    (void)key;
    codec_write_header(out, HFL_CODEC_ID_FP16, (uint32_t)n, 0);
    fp16_job j = {.delta = delta, .residual = residual, .n = n,
                  .body = out + HFL_CODEC_HEADER_BYTES};
    codec_parallel(codec_blocks(n, CODEC_CHUNK), threads, NULL, fp16_encode_range, &j, NULL);
    return fp16_max_bytes(c, n, block);
}

static uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static int fp16_check_range(void *ctx, size_t lo, size_t hi, char *err) {
    fp16_job *j = ctx;
    size_t a, b;
    chunk_span(j->n, lo, hi, &a, &b);
    uint32_t bad = 0;
    for (size_t i = a; i < b; i++)
        bad |= (load_u16(j->in + 2 * i) & 0x7C00u) == 0x7C00u;
    for (size_t i = a; bad && i < b; i++)
        if ((load_u16(j->in + 2 * i) & 0x7C00u) == 0x7C00u)
            return hfl_errf(err, "fp16 payload: value %zu is %g, not finite", i,
                            (double)hfl_f16_to_f32(load_u16(j->in + 2 * i)));
    return 0;
}

static int fp16_apply_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    fp16_job *j = ctx;
    size_t a, b;
    chunk_span(j->n, lo, hi, &a, &b);
    float *restrict acc = j->acc + a;
    const uint8_t *restrict in = j->in + 2 * a;
    float w = j->weight;
    size_t m = b - a, m16 = m & ~(size_t)15, i = 0;
    for (; i < m16; i++)
        acc[i] = hfl_fp32_accum(acc[i], hfl_f16_to_f32(load_u16(in + 2 * i)), w);
    for (; i < m; i++)
        acc[i] = hfl_fp32_accum(acc[i], hfl_f16_to_f32(load_u16(in + 2 * i)), w);
    return 0;
}

static int fp16_validate(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                         uint32_t *block, char *err) {
    if (codec_read_fixed(c, in, len, expect_n, block, err))
        return -1;
    fp16_job j = {.n = expect_n, .in = in + HFL_CODEC_HEADER_BYTES};
    return fp16_check_range(&j, 0, codec_blocks(expect_n, CODEC_CHUNK), err);
}

static int fp16_decode_accumulate(const hfl_codec *c, const uint8_t *in, size_t len,
                                  size_t expect_n, float weight, float *acc, int threads,
                                  char *err) {
    uint32_t block;
    if (codec_read_fixed(c, in, len, expect_n, &block, err))
        return -1;
    fp16_job j = {.n = expect_n, .in = in + HFL_CODEC_HEADER_BYTES, .weight = weight, .acc = acc};
    return codec_parallel(codec_blocks(expect_n, CODEC_CHUNK), threads, fp16_check_range,
                          fp16_apply_range, &j, err);
}

const hfl_codec hfl_codec_fp16 = {
    .name = "fp16",
    .id = HFL_CODEC_ID_FP16,
    .biased = 1,
    .blocked = 0,
    .max_bytes = fp16_max_bytes,
    .encode = fp16_encode,
    .decode_accumulate = fp16_decode_accumulate,
    .validate = fp16_validate,
};
