/* codec_int8.c: blockwise int8 with stochastic rounding.
 *
 * Body: for each block of `block` values (the last may be short), an fp32
 * scale = absmax / 127 followed by the block's int8 values. Rounding draws
 * 16-bit uniforms from philox (HFL_STREAM_QUANT, key, global element index;
 * layout and bias bound in compress/quant_hd.h), so the same key gives the
 * same bytes on CPU and GPU and decode is unbiased to within 2^-17 of a scale;
 * error feedback still helps because each round's error then cancels instead
 * of adding up as a random walk. Threads split the blocks (codec_parallel).
 * Vectorised (gcc 12 -O3, SSE2): the encoder's loops (codec_sr.c), the
 * validation's range scan and the accumulate loop. */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

#include <stdlib.h>

#include "util/util.h"

static size_t int8_max_bytes(const hfl_codec *c, size_t n, uint32_t block) {
    (void)c;
    if ((uint64_t)n > UINT32_MAX || block < 1 || block > HFL_CODEC_MAX_BLOCK)
        return 0;
    return HFL_CODEC_HEADER_BYTES + codec_blocks(n, block) * sizeof(float) + n;
}

typedef struct {
    const float *delta;
    float *residual;
    size_t n;
    uint32_t block;
    const hfl_rng_key *key;
    uint8_t *body;      /* encode: where the blocks go */
    const uint8_t *in;  /* decode: the blocks read */
    float weight;
    float *acc;
} int8_job;

static size_t block_len(const int8_job *j, size_t k) {
    size_t start = k * j->block;
    return j->n - start < j->block ? j->n - start : j->block;
}

static int int8_encode_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    int8_job *j = ctx;
    uint16_t *scratch = hfl_malloc(codec_sr_scratch(j->block) * sizeof(uint16_t));
    for (size_t k = lo; k < hi; k++) {
        size_t start = k * j->block, m = block_len(j, k);
        uint8_t *p = j->body + k * (sizeof(float) + j->block);
        float s = codec_sr_encode_block(j->delta + start, j->residual ? j->residual + start : NULL,
                                        start, m, j->key, 127.0f, scratch,
                                        (int8_t *)(p + sizeof(float)));
        codec_store_f32(p, s);
    }
    free(scratch);
    return 0;
}

static size_t int8_encode(const hfl_codec *c, const float *delta, float *residual, size_t n,
                          uint32_t block, const hfl_rng_key *key, int threads, uint8_t *out) {
    codec_write_header(out, HFL_CODEC_ID_INT8, (uint32_t)n, block);
    int8_job j = {.delta = delta, .residual = residual, .n = n, .block = block, .key = key,
                  .body = out + HFL_CODEC_HEADER_BYTES};
    codec_parallel(codec_blocks(n, block), threads, NULL, int8_encode_range, &j, NULL);
    return int8_max_bytes(c, n, block);
}

/* Scales finite and >= 0, no value -128 (the encoder clamps to [-127, 127]). The
 * value scan is branch-free so it vectorises; the culprit is searched only on failure. */
static int int8_check_range(void *ctx, size_t lo, size_t hi, char *err) {
    int8_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        const uint8_t *p = j->in + k * (sizeof(float) + j->block);
        float s = codec_load_f32(p);
        if (!codec_scale_ok(s))
            return hfl_errf(err, "int8 payload: block %zu has scale %g, not finite and >= 0", k,
                            (double)s);
        size_t m = block_len(j, k);
        const uint8_t *q = p + sizeof(float);
        uint32_t bad = 0;
        for (size_t i = 0; i < m; i++)
            bad |= q[i] == 0x80;
        for (size_t i = 0; bad && i < m; i++)
            if (q[i] == 0x80)
                return hfl_errf(err, "int8 payload: value %zu is -128, outside [-127, 127]",
                                k * j->block + i);
    }
    return 0;
}

/* acc[j] += wscale * q[j] over one block. restrict and counted loops let gcc vectorise;
 * the main loop's count is a multiple of 16 so it needs no epilogue. */
static void int8_accum_block(float *restrict acc, const int8_t *restrict q, size_t m,
                             float wscale) {
    size_t m16 = m & ~(size_t)15, i = 0;
    for (; i < m16; i++)
        acc[i] = hfl_q8_accum(acc[i], q[i], wscale);
    for (; i < m; i++)
        acc[i] = hfl_q8_accum(acc[i], q[i], wscale);
}

static int int8_apply_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    int8_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        const uint8_t *p = j->in + k * (sizeof(float) + j->block);
        int8_accum_block(j->acc + k * j->block, (const int8_t *)(p + sizeof(float)),
                         block_len(j, k), j->weight * codec_load_f32(p));
    }
    return 0;
}

static int int8_validate(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                         uint32_t *block, char *err) {
    uint32_t b = 1;
    if (codec_read_fixed(c, in, len, expect_n, &b, err))
        return -1;
    int8_job j = {.n = expect_n, .block = b, .in = in + HFL_CODEC_HEADER_BYTES};
    if (int8_check_range(&j, 0, codec_blocks(expect_n, b), err))
        return -1;
    *block = b;
    return 0;
}

static int int8_decode_accumulate(const hfl_codec *c, const uint8_t *in, size_t len,
                                  size_t expect_n, float weight, float *acc, int threads,
                                  char *err) {
    uint32_t b = 1;
    if (codec_read_fixed(c, in, len, expect_n, &b, err))
        return -1;
    int8_job j = {.n = expect_n, .block = b, .in = in + HFL_CODEC_HEADER_BYTES,
                  .weight = weight, .acc = acc};
    return codec_parallel(codec_blocks(expect_n, b), threads, int8_check_range, int8_apply_range,
                          &j, err);
}

const hfl_codec hfl_codec_int8 = {
    .name = "int8",
    .id = HFL_CODEC_ID_INT8,
    .biased = 0,
    .blocked = 1,
    .max_bytes = int8_max_bytes,
    .encode = int8_encode,
    .decode_accumulate = int8_decode_accumulate,
    .validate = int8_validate,
};
