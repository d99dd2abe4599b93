/* payload_hd.h: one decoded value of a validated update payload, element by
 * element (HFL_HD: the CPU aggregator runs it in loops, a CUDA kernel once
 * per thread; kernels/agg_hd.h builds the aggregation on it).
 *
 * compress/codec.h's decode_accumulate walks a payload block by block and
 * adds weight * value into a float vector; the aggregator (coordinator/
 * aggregate.c) wants the value itself, at any index, from a payload that
 * compress/ has already validated on the host. hfl_payload_value(p, i) is the
 * float that decode_accumulate with weight 1 leaves in a zeroed vector at i,
 * bit for bit: 0 + value for the dense codecs (so -0 decodes to +0), and
 * 0 + (1 * scale) * q for the blocked ones, the same two fp32 operations
 * (tests/kernels/test_agg_bodies.c checks every codec against it).
 *
 * topk is not indexable (its indices are LEB128 gaps): the host expands them
 * while it validates (hfl_payload_topk_indices) and the k values are
 * scattered into a zeroed fp32 vector, which is then read as a dense fp32
 * payload. */
#ifndef HFL_PAYLOAD_HD_H
#define HFL_PAYLOAD_HD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compress/quant_hd.h"
#include "kernels/hd.h"

/* Codec ids (compress/codec_impl.h's, repeated here for device code, which
 * cannot include codec_impl.h; compress/codec.c asserts they agree). */
enum {
    HFL_PAYLOAD_FP32 = 1,
    HFL_PAYLOAD_INT8 = 2,
    HFL_PAYLOAD_FP16 = 3,
    HFL_PAYLOAD_BF16 = 4,
    HFL_PAYLOAD_INT4 = 5,
    HFL_PAYLOAD_SIGN = 6,
    HFL_PAYLOAD_TOPK = 7,
};

/* The largest block scale int8's decoder accepts: 127 of it, or a q of
 * -127 times it, stays finite (compress/codec_impl.h's codec_max_scale, and
 * the CPU aggregator's own check of the bytes it stages). */
#define HFL_PAYLOAD_INT8_MAX_SCALE (3.40282347e38f / 128)

/* What a decoder accepts, stated once for the codecs' validation
 * (compress/codec_impl.h, codec_int8.c) and the CPU aggregator's check of
 * the bytes it stages (kernels/cpu/agg_cpu.c): a block scale in [0, max]
 * (NaN fails both), and an int8 byte other than -128, so that every q has
 * its negation. */
static inline HFL_HD int hfl_payload_scale_ok(float s, float max) { return s >= 0.0f && s <= max; }
static inline HFL_HD int hfl_payload_int8_bad(uint8_t q) { return q == 0x80; }

/* A payload's body where the element bodies can read it (host memory for
 * the CPU, device memory for a kernel). */
typedef struct {
    int kind;            /* HFL_PAYLOAD_*, never TOPK here (see the header comment) */
    uint32_t block;      /* values per block for int8, int4 and sign */
    const uint8_t *body; /* the bytes after the 12-byte header */
} hfl_payload;

static inline HFL_HD float hfl_payload_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

static inline HFL_HD uint32_t hfl_payload_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Bytes of one block of `block` values (the last, short block starts at the
 * same multiple of it). */
static inline HFL_HD size_t hfl_payload_block_bytes(int kind, uint32_t block) {
    return kind == HFL_PAYLOAD_INT8   ? 4 + (size_t)block
           : kind == HFL_PAYLOAD_INT4 ? 4 + ((size_t)block + 1) / 2
                                      : 4 + ((size_t)block + 7) / 8;
}

/* Bytes of p's body that hold its values [0, i): whole blocks, then the
 * short block's scale and bytes (the same count as a last, short block's). */
static inline HFL_HD size_t hfl_payload_bytes_upto(const hfl_payload *p, size_t i) {
    if (p->kind == HFL_PAYLOAD_FP32) return 4 * i;
    if (p->kind == HFL_PAYLOAD_FP16 || p->kind == HFL_PAYLOAD_BF16) return 2 * i;
    size_t k = i / p->block, j = i % p->block;
    return k * hfl_payload_block_bytes(p->kind, p->block) + (j ? hfl_payload_block_bytes(p->kind, (uint32_t)j) : 0);
}

/* topk's value j (of the fp16 values at vals) as its scattered vector holds
 * it: 0 + the value, as hfl_payload_value gives an fp16 payload's. */
static inline HFL_HD float hfl_payload_topk_value(const uint8_t *vals, size_t j) {
    return hfl_fp32_accum(0.0f, hfl_f16_to_f32((uint16_t)hfl_payload_u16(vals + 2 * j)), 1.0f);
}

/* Decoded value i (the header comment's bits). */
static inline HFL_HD float hfl_payload_value(const hfl_payload *p, size_t i) {
    const uint8_t *b = p->body;
    switch (p->kind) {
    case HFL_PAYLOAD_FP32:
        return hfl_fp32_accum(0.0f, hfl_payload_f32(b + 4 * i), 1.0f);
    case HFL_PAYLOAD_FP16:
        return hfl_fp32_accum(0.0f, hfl_f16_to_f32((uint16_t)hfl_payload_u16(b + 2 * i)), 1.0f);
    case HFL_PAYLOAD_BF16:
        return hfl_fp32_accum(0.0f, hfl_bf16_to_f32((uint16_t)hfl_payload_u16(b + 2 * i)), 1.0f);
    default: {
        size_t k = i / p->block, j = i % p->block;
        const uint8_t *blk = b + k * hfl_payload_block_bytes(p->kind, p->block);
        float wscale = 1.0f * hfl_payload_f32(blk);
        const uint8_t *q = blk + 4;
        if (p->kind == HFL_PAYLOAD_INT8) return hfl_q8_accum(0.0f, (int8_t)q[j], wscale);
        if (p->kind == HFL_PAYLOAD_INT4)
            return hfl_q8_accum(0.0f, j & 1 ? hfl_q4_hi(q[j / 2]) : hfl_q4_lo(q[j / 2]), wscale);
        return 0.0f + hfl_sign_value((q[j / 8] >> (j % 8)) & 1u, wscale);
    }
    }
}

#endif
