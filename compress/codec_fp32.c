/* codec_fp32.c: the uncompressed codec. The body is n little-endian fp32
 * values; the header's block is 0 (a run's block size is ignored, so one
 * setting serves every codec). Encoding is exact, so error feedback
 * leaves the residual at 0. It is the reference the lossy codecs are
 * measured against. Threads split the vector into CODEC_CHUNK-value chunks.
 * Validate and decode are the dense codecs' (codec.c). Vectorised (gcc 12
 * -O3, SSE2): encode here, the finiteness scan and accumulate in codec.c. */
#include "compress/codec_impl.h"

static size_t fp32_unit_bytes(size_t m) { return m * sizeof(float); }

static int fp32_encode_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    size_t a, b;
    codec_unit_span(j, lo, hi, &a, &b);
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

const codec_units codec_fp32 = {
    .codec = {.name = "fp32", .id = HFL_CODEC_ID_FP32, .biased = 0, .blocked = 0,
              CODEC_UNITS_FUNCTIONS},
    .unit_bytes = fp32_unit_bytes,
    .encode_range = fp32_encode_range,
    .check_range = codec_dense_check_range,
    .apply_range = codec_dense_apply_range,
};
