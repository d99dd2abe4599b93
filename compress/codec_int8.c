/* codec_int8.c: blockwise int8 with stochastic rounding.
 *
 * Body: for each block of `block` values (the last may be short), an fp32
 * scale = absmax / 127 followed by the block's int8 values. Rounding draws
 * 16-bit uniforms from philox (HFL_STREAM_QUANT, key, global element index;
 * layout and bias bound in compress/quant_hd.h), so the same key gives the
 * same bytes on CPU and GPU and decode is unbiased to within 2^-17 of a scale;
 * error feedback still helps because each round's error then cancels instead
 * of adding up as a random walk. Threads split the blocks (codec_parallel).
 * Header, size and thread handling are codec.c's (codec_units). Vectorised
 * (gcc 12 -O3, SSE2): the encoder's loops (codec_sr.c), the validation's range
 * scan and the accumulate loop (codec_impl.h's codec_accum_values). */
#include "compress/codec_impl.h"

#include <stdlib.h>

#include "util/util.h"

static size_t int8_unit_bytes(size_t m) { return sizeof(float) + m; }

static int int8_encode_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    uint16_t *scratch = hfl_malloc(codec_sr_scratch(j->block) * sizeof(uint16_t));
    for (size_t k = lo; k < hi; k++) {
        size_t start = k * j->block, m = codec_unit_len(j, k);
        uint8_t *p = j->body + k * int8_unit_bytes(j->block);
        float s = codec_sr_encode_block(j->delta + start, j->residual ? j->residual + start : NULL,
                                        start, m, j->key, 127.0f, scratch,
                                        (int8_t *)(p + sizeof(float)));
        codec_store_f32(p, s);
    }
    free(scratch);
    return 0;
}

/* Scales finite and >= 0, no value -128 (the encoder clamps to [-127, 127]). The
 * value scan is branch-free so it vectorises; the culprit is searched only on failure. */
static int int8_check_range(void *ctx, size_t lo, size_t hi, char *err) {
    codec_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        const uint8_t *p = j->in + k * int8_unit_bytes(j->block);
        if (codec_check_scale(j, k, p, err))
            return -1;
        size_t m = codec_unit_len(j, k);
        const uint8_t *q = p + sizeof(float);
        uint8_t bad = 0; /* a byte, so the loop stays in byte lanes and vectorises */
        for (size_t i = 0; i < m; i++)
            bad |= (uint8_t)hfl_payload_int8_bad(q[i]);
        for (size_t i = 0; bad && i < m; i++)
            if (hfl_payload_int8_bad(q[i]))
                return hfl_errf(err, "int8 payload: value %zu is -128, outside [-127, 127]",
                                k * j->block + i);
    }
    return 0;
}

static int int8_apply_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        const uint8_t *p = j->in + k * int8_unit_bytes(j->block);
        codec_accum_values(HFL_CODEC_ID_INT8, j->acc + k * j->block, p + sizeof(float),
                           codec_unit_len(j, k), j->weight * codec_load_f32(p));
    }
    return 0;
}

const codec_units codec_int8 = {
    .codec = {.name = "int8", .id = HFL_CODEC_ID_INT8, .biased = 0, .blocked = 1,
              CODEC_UNITS_FUNCTIONS},
    .unit_bytes = int8_unit_bytes,
    .encode_range = int8_encode_range,
    .check_range = int8_check_range,
    .apply_range = int8_apply_range,
};
