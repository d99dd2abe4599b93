/* codec_int8.c: blockwise int8 with stochastic rounding.
 *
 * Body: for each block of `block` values (the last may be short), an fp32
 * scale = absmax / 127 followed by the block's int8 values. Rounding draws
 * from philox (HFL_STREAM_QUANT, key, global element index), so the same key
 * gives the same bytes on CPU and GPU and decode is unbiased; error feedback
 * still helps because each round's error then cancels instead of adding up
 * as a random walk. The per-element arithmetic is in compress/quant_hd.h. */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

#include <float.h>

#include "util/util.h"

static size_t int8_blocks(size_t n, uint32_t block) { return n / block + (n % block != 0); }

static size_t int8_encoded_bytes(size_t n, uint32_t block) {
    if ((uint64_t)n > UINT32_MAX || block < 1 || block > HFL_CODEC_MAX_BLOCK)
        return 0;
    return HFL_CODEC_HEADER_BYTES + int8_blocks(n, block) * sizeof(float) + n;
}

/* Quantizes v = delta + residual for one block of m values starting at global index
 * `start`; writes the scale and m int8 values at out, and the new residual. */
static void int8_encode_block(const float *delta, float *residual, size_t start, size_t m,
                              const hfl_rng_key *key, uint8_t *out) {
    float absmax = 0.0f;
    for (size_t j = 0; j < m; j++)
        absmax = hfl_q8_absmax(absmax, residual ? delta[j] + residual[j] : delta[j]);
    float scale = hfl_q8_scale(absmax);
    codec_store_f32(out, scale);
    int8_t *q = (int8_t *)(out + sizeof(float));
    float u[4];
    for (size_t j = 0; j < m; j++) {
        size_t i = start + j;
        if (j == 0 || (i & 3) == 0) /* one Philox call per four consecutive elements */
            hfl_q8_uniform4(key->seed, key->round, key->client, key->tensor, i >> 2, u);
        float v = residual ? delta[j] + residual[j] : delta[j];
        q[j] = hfl_q8_round(v, scale, u[i & 3]);
        if (residual)
            residual[j] = v - hfl_q8_accum(0.0f, q[j], scale);
    }
}

static void int8_encode(const float *delta, float *residual, size_t n, uint32_t block,
                        const hfl_rng_key *key, uint8_t *out) {
    codec_write_header(out, HFL_CODEC_ID_INT8, (uint32_t)n, block);
    uint8_t *p = out + HFL_CODEC_HEADER_BYTES;
    for (size_t start = 0; start < n; start += block) {
        size_t m = n - start < block ? n - start : block;
        int8_encode_block(delta + start, residual ? residual + start : NULL, start, m, key, p);
        p += sizeof(float) + m;
    }
}

static int int8_validate(const uint8_t *in, size_t len, size_t expect_n, uint32_t *block,
                         char *err) {
    uint32_t b;
    if (codec_read_header(&hfl_codec_int8, in, len, expect_n, 1, HFL_CODEC_MAX_BLOCK, &b, err))
        return -1;
    const uint8_t *p = in + HFL_CODEC_HEADER_BYTES;
    for (size_t start = 0, k = 0; start < expect_n; start += b, k++) {
        float s = codec_load_f32(p);
        if (!(s >= 0.0f && s <= FLT_MAX))
            return hfl_errf(err, "int8 payload: block %zu has scale %g, not finite and >= 0", k,
                            (double)s);
        p += sizeof(float) + (expect_n - start < b ? expect_n - start : b);
    }
    *block = b;
    return 0;
}

/* acc[j] += wscale * q[j] over one block. restrict and counted loops let gcc vectorise;
 * the main loop's count is a multiple of 16 because gcc -O2's cheap cost model only
 * vectorises loops that need no epilogue, and the scalar tail takes the rest. */
static void int8_accum_block(float *restrict acc, const int8_t *restrict q, size_t m,
                             float wscale) {
    size_t m16 = m & ~(size_t)15, j = 0;
    for (; j < m16; j++)
        acc[j] = hfl_q8_accum(acc[j], q[j], wscale);
    for (; j < m; j++)
        acc[j] = hfl_q8_accum(acc[j], q[j], wscale);
}

static int int8_decode_accumulate(const uint8_t *in, size_t len, size_t expect_n, float weight,
                                  float *acc, char *err) {
    uint32_t b = 1; /* set by int8_validate; initialised for gcc's benefit */
    if (int8_validate(in, len, expect_n, &b, err))
        return -1;
    const uint8_t *p = in + HFL_CODEC_HEADER_BYTES;
    for (size_t start = 0; start < expect_n; start += b) {
        size_t m = expect_n - start < b ? expect_n - start : b;
        int8_accum_block(acc + start, (const int8_t *)(p + sizeof(float)), m,
                         weight * codec_load_f32(p));
        p += sizeof(float) + m;
    }
    return 0;
}

const hfl_codec hfl_codec_int8 = {
    .name = "int8",
    .id = HFL_CODEC_ID_INT8,
    .biased = 0,
    .encoded_bytes = int8_encoded_bytes,
    .encode = int8_encode,
    .decode_accumulate = int8_decode_accumulate,
    .validate = int8_validate,
};
