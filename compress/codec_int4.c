/* codec_int4.c: blockwise int4 with stochastic rounding, two values per byte.
 *
 * Body: for each block of m values (the last may be short), an fp32 scale =
 * absmax / 7, then ceil(m / 2) bytes: element 2j in the low nibble, 2j + 1 in
 * the high nibble, each 4-bit two's complement in [-7, 7] (quant_hd.h's
 * hfl_q4_pack). An odd block's last high nibble is 0; the decoder rejects a
 * nibble of -8 or a non-zero pad. Rounding is int8's (codec_sr.c, 16-bit
 * uniforms at the element's global index) with qmax = 7, so decode is unbiased
 * to within 2^-17 of a scale and |decoded - v| < scale. Threads split blocks;
 * header, size and thread handling are codec.c's (codec_units).
 * Vectorised (gcc 12 -O3, SSE2): the rounding loops (codec_sr.c), the pack and
 * the check scan; the accumulate loop's interleaved stores are done by SLP. */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

#include <stdlib.h>

#include "util/util.h"

static size_t int4_block_bytes(size_t m) { return sizeof(float) + (m + 1) / 2; }

static void int4_pack(const int8_t *restrict q, size_t m, uint8_t *restrict out) {
    size_t half = m / 2;
    for (size_t i = 0; i < half; i++)
        out[i] = hfl_q4_pack(q[2 * i], q[2 * i + 1]);
    if (m & 1)
        out[half] = hfl_q4_pack(q[m - 1], 0);
}

static int int4_encode_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    uint16_t *scratch = hfl_malloc(codec_sr_scratch(j->block) * sizeof(uint16_t));
    int8_t *q = hfl_malloc(j->block);
    for (size_t k = lo; k < hi; k++) {
        size_t start = k * j->block, m = codec_unit_len(j, k);
        uint8_t *p = j->body + k * int4_block_bytes(j->block);
        float s = codec_sr_encode_block(j->delta + start, j->residual ? j->residual + start : NULL,
                                        start, m, j->key, 7.0f, scratch, q);
        codec_store_f32(p, s);
        int4_pack(q, m, p + sizeof(float));
    }
    free(q);
    free(scratch);
    return 0;
}

static int int4_check_range(void *ctx, size_t lo, size_t hi, char *err) {
    codec_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        const uint8_t *p = j->in + k * int4_block_bytes(j->block);
        if (codec_check_scale(j, k, p, err))
            return -1;
        size_t m = codec_unit_len(j, k), bytes = (m + 1) / 2;
        const uint8_t *q = p + sizeof(float);
        uint32_t bad = 0;
        for (size_t i = 0; i < bytes; i++)
            bad |= ((q[i] & 0x0Fu) == 0x08u) | ((q[i] & 0xF0u) == 0x80u);
        if (bad)
            return hfl_errf(err, "int4 payload: block %zu holds a value -8, outside [-7, 7]", k);
        if ((m & 1) && (q[bytes - 1] & 0xF0u))
            return hfl_errf(err, "int4 payload: block %zu has a non-zero pad nibble", k);
    }
    return 0;
}

static void int4_accum_block(float *restrict acc, const uint8_t *restrict q, size_t m,
                             float wscale) {
    size_t half = m / 2;
    for (size_t i = 0; i < half; i++) {
        acc[2 * i] = hfl_q8_accum(acc[2 * i], hfl_q4_lo(q[i]), wscale);
        acc[2 * i + 1] = hfl_q8_accum(acc[2 * i + 1], hfl_q4_hi(q[i]), wscale);
    }
    if (m & 1)
        acc[m - 1] = hfl_q8_accum(acc[m - 1], hfl_q4_lo(q[half]), wscale);
}

static int int4_apply_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        const uint8_t *p = j->in + k * int4_block_bytes(j->block);
        int4_accum_block(j->acc + k * j->block, p + sizeof(float), codec_unit_len(j, k),
                         j->weight * codec_load_f32(p));
    }
    return 0;
}

const codec_units codec_int4 = {
    .codec = {.name = "int4", .id = HFL_CODEC_ID_INT4, .biased = 0, .blocked = 1,
              CODEC_UNITS_FUNCTIONS},
    .unit_bytes = int4_block_bytes,
    .encode_range = int4_encode_range,
    .check_range = int4_check_range,
    .apply_range = int4_apply_range,
};
