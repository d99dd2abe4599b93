/* codec_sign.c: 1 bit per value plus a per-block scale (EF-SignSGD,
 * Karimireddy et al. 2019: the scaled sign with error feedback).
 *
 * Body: for each block of m values (the last may be short), an fp32 scale =
 * mean |v| over the block, then ceil(m / 8) bytes; bit j % 8 of byte j / 8 is
 * set when v_j < 0 (so -0 and +0 send +scale); unused bits of the last byte
 * are 0. Decoded value: +-scale. The sign is a biased compressor, so the codec
 * is only useful with error feedback: encode leaves v - (+-scale) in the
 * residual. The mean is taken as eight interleaved float partial sums (lane
 * j % 8), added lane 0 to 7, divided by m: a fixed order, so the bytes do not
 * depend on the thread count. NaN or Inf in v gives a non-finite scale, which
 * the decoder rejects. Header, size and thread handling are codec.c's
 * (codec_units). Vectorised (gcc 12 -O3, SSE2): the |v| lanes, and the
 * per-byte bit packing and the decode's sign-flip adds (SLP over 8 lanes). */
#include "compress/codec_impl.h"
#include "compress/quant_hd.h"

#include "util/util.h"

enum { LANES = 8 };

static size_t sign_block_bytes(size_t m) { return sizeof(float) + (m + 7) / 8; }

static float sign_block_scale(const float *restrict d, const float *restrict r, size_t m) {
    float lane[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= m; j += LANES)
        for (int l = 0; l < LANES; l++)
            lane[l] += fabsf(r ? d[j + l] + r[j + l] : d[j + l]);
    for (; j < m; j++)
        lane[j % LANES] += fabsf(r ? d[j] + r[j] : d[j]);
    float sum = 0.0f;
    for (int l = 0; l < LANES; l++)
        sum += lane[l];
    return m ? sum / (float)m : 0.0f;
}

/* One byte of signs for the c <= 8 values at d (+ r); updates r when r is not NULL. */
static uint8_t sign_byte(const float *restrict d, float *restrict r, int c, float s) {
    uint32_t b = 0;
    for (int l = 0; l < c; l++) {
        float v = r ? d[l] + r[l] : d[l];
        uint32_t neg = v < 0.0f;
        b |= neg << l;
        if (r)
            r[l] = v - hfl_sign_value(neg, s);
    }
    return (uint8_t)b;
}

/* Full bytes, without and with error feedback, in fixed 8-wide bodies gcc can SLP. */
static void sign_pack_plain(const float *restrict d, size_t bytes, uint8_t *restrict out) {
    for (size_t i = 0; i < bytes; i++) {
        uint32_t b = 0;
        for (int l = 0; l < LANES; l++)
            b |= (uint32_t)(d[LANES * i + l] < 0.0f) << l;
        out[i] = (uint8_t)b;
    }
}

static void sign_pack_ef(const float *restrict d, float *restrict r, size_t bytes, float s,
                         uint8_t *restrict out) {
    for (size_t i = 0; i < bytes; i++) {
        uint32_t b = 0;
        for (int l = 0; l < LANES; l++) {
            size_t e = LANES * i + (size_t)l;
            float v = d[e] + r[e];
            uint32_t neg = v < 0.0f;
            b |= neg << l;
            r[e] = v - hfl_sign_value(neg, s);
        }
        out[i] = (uint8_t)b;
    }
}

static int sign_encode_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        size_t start = k * j->block, m = codec_unit_len(j, k), full = m / LANES;
        const float *d = j->delta + start;
        float *r = j->residual ? j->residual + start : NULL;
        uint8_t *p = j->body + k * sign_block_bytes(j->block);
        float s = sign_block_scale(d, r, m);
        codec_store_f32(p, s);
        if (r)
            sign_pack_ef(d, r, full, s, p + sizeof(float));
        else
            sign_pack_plain(d, full, p + sizeof(float));
        if (m % LANES)
            p[sizeof(float) + full] = sign_byte(d + LANES * full, r ? r + LANES * full : NULL,
                                                (int)(m % LANES), s);
    }
    return 0;
}

static int sign_check_range(void *ctx, size_t lo, size_t hi, char *err) {
    codec_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        const uint8_t *p = j->in + k * sign_block_bytes(j->block);
        if (codec_check_scale(j, k, p, err))
            return -1;
        size_t m = codec_unit_len(j, k);
        if ((m % LANES) && (p[sizeof(float) + m / LANES] >> (m % LANES)))
            return hfl_errf(err, "sign payload: block %zu has non-zero unused bits", k);
    }
    return 0;
}

static void sign_accum_block(float *restrict acc, const uint8_t *restrict q, size_t m,
                             float wscale) {
    size_t full = m / LANES;
    for (size_t i = 0; i < full; i++)
        for (int l = 0; l < LANES; l++)
            acc[LANES * i + l] += hfl_sign_value((q[i] >> l) & 1u, wscale);
    for (size_t e = LANES * full; e < m; e++)
        acc[e] += hfl_sign_value((q[full] >> (e % LANES)) & 1u, wscale);
}

static int sign_apply_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        const uint8_t *p = j->in + k * sign_block_bytes(j->block);
        sign_accum_block(j->acc + k * j->block, p + sizeof(float), codec_unit_len(j, k),
                         j->weight * codec_load_f32(p));
    }
    return 0;
}

const codec_units codec_sign = {
    .codec = {.name = "sign", .id = HFL_CODEC_ID_SIGN, .biased = 1, .blocked = 1,
              CODEC_UNITS_FUNCTIONS},
    .unit_bytes = sign_block_bytes,
    .encode_range = sign_encode_range,
    .check_range = sign_check_range,
    .apply_range = sign_apply_range,
};
