/* codec_half.c: the 16-bit float codecs, fp16 (IEEE binary16) and bf16
 * (bfloat16, the top 16 bits of an fp32), both round to nearest even; one set
 * of functions serves both, the format taken from the codec's id.
 *
 * Body: n little-endian 16-bit values; the header's block is 0 (the run's
 * block size is ignored). Conversions are quant_hd.h's bit-level ones (no
 * _Float16). Finite values past the format's largest finite value saturate to
 * it, so a finite update stays finite: +-65504 for fp16; bf16 keeps fp32's
 * exponent range, so only values within half an ulp of FLT_MAX would round to
 * Inf, and those saturate to the largest finite bf16 (0x7F7F). NaN and Inf are
 * kept and the decoder rejects them. Relative error for values in the normal
 * range: <= 2^-11 for fp16 (|v| >= 2^-14; absolute error <= 2^-25 below it),
 * <= 2^-8 for bf16. Rounding is deterministic, so the codecs are biased and
 * keep v - decoded(v) as error feedback. Threads split the vector into
 * CODEC_CHUNK-value chunks. Validate and decode are the dense codecs'
 * (codec.c). Vectorised (gcc 12 -O3, SSE2): both conversion loops of each
 * format here (integer ops and selects), the finiteness scan and accumulate
 * in codec.c. */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

static size_t half_unit_bytes(size_t m) { return m * sizeof(uint16_t); }

/* v in the format of codec id `kind` (a constant at each call), saturated and rounded. */
static inline uint16_t half_round(int kind, float v) {
    return kind == HFL_CODEC_ID_BF16 ? hfl_f32_to_bf16(hfl_bf16_saturate(v))
                                     : hfl_f32_to_f16(hfl_f16_saturate(v));
}

static inline float half_value(int kind, uint16_t h) {
    return kind == HFL_CODEC_ID_BF16 ? hfl_bf16_to_f32(h) : hfl_f16_to_f32(h);
}

/* h[i] = v_i rounded, v = d (r == NULL) or d + r, leaving r = v - decoded(v). */
static inline void half_encode_values(int kind, const float *restrict d, float *restrict r,
                                      size_t m, uint16_t *restrict h) {
    if (!r) {
        for (size_t i = 0; i < m; i++)
            h[i] = half_round(kind, d[i]);
        return;
    }
    for (size_t i = 0; i < m; i++) {
        float v = d[i] + r[i];
        uint16_t x = half_round(kind, v);
        h[i] = x;
        r[i] = v - half_value(kind, x);
    }
}

/* Converts into an aligned local buffer, then copies: the payload's u16s sit at an
 * even offset, but writing through a uint16_t * there is still a cast gcc may not trust. */
static int half_encode_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    size_t a, b;
    codec_unit_span(j, lo, hi, &a, &b);
    uint16_t buf[CODEC_CHUNK];
    for (size_t s = a; s < b; s += CODEC_CHUNK) {
        size_t m = b - s < CODEC_CHUNK ? b - s : CODEC_CHUNK;
        float *r = j->residual ? j->residual + s : NULL;
        if (j->c->id == HFL_CODEC_ID_BF16)
            half_encode_values(HFL_CODEC_ID_BF16, j->delta + s, r, m, buf);
        else
            half_encode_values(HFL_CODEC_ID_FP16, j->delta + s, r, m, buf);
        memcpy(j->body + s * sizeof(uint16_t), buf, m * sizeof(uint16_t));
    }
    return 0;
}

const codec_units codec_fp16 = {
    .codec = {.name = "fp16", .id = HFL_CODEC_ID_FP16, .biased = 1, .blocked = 0,
              CODEC_UNITS_FUNCTIONS},
    .unit_bytes = half_unit_bytes,
    .encode_range = half_encode_range,
    .check_range = codec_dense_check_range,
    .apply_range = codec_dense_apply_range,
};

const codec_units codec_bf16 = {
    .codec = {.name = "bf16", .id = HFL_CODEC_ID_BF16, .biased = 1, .blocked = 0,
              CODEC_UNITS_FUNCTIONS},
    .unit_bytes = half_unit_bytes,
    .encode_range = half_encode_range,
    .check_range = codec_dense_check_range,
    .apply_range = codec_dense_apply_range,
};
