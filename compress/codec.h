/* codec.h: update codecs, each a pair (encode on the client, fused
 * decode_accumulate on the aggregator).
 *
 * encode(delta, residual, key) -> bytes: compresses delta + residual (error
 * feedback, Seide et al. 2014; Karimireddy et al. 2019) and leaves in
 * residual what the bytes failed to carry, so it is sent next time.
 * decode_accumulate(bytes, weight, acc): acc += weight * decoded, without
 * ever materialising the decoded vector; it validates the bytes completely
 * (length, header, block count, finite scales) before touching acc.
 *
 * Payload layout shared by all codecs (little-endian):
 *   u8 codec id, u8 reserved 0, u16 reserved 0, u32 n (values),
 *   u32 block size (0 when the codec has no blocks), then the codec's body.
 * `int8`: per block of `block` values, an fp32 scale (absmax / 127) then
 * `block` int8 values (the last block may be short); values are rounded
 * stochastically, so decode is unbiased. */
#ifndef HFL_CODEC_H
#define HFL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define HFL_CODEC_HEADER_BYTES 12
#define HFL_CODEC_DEFAULT_BLOCK 256

typedef struct {
    uint64_t seed;
    uint32_t round, client, tensor;
} hfl_rng_key;

typedef struct hfl_codec {
    const char *name; /* "fp32", "int8" */
    uint8_t id;
    int biased; /* 1: needs error feedback to converge */
    /* Exact payload size for n values and this block size. */
    size_t (*encoded_bytes)(size_t n, uint32_t block);
    /* Writes encoded_bytes(n, block) bytes to out. residual may be NULL (no error feedback). */
    void (*encode)(const float *delta, float *residual, size_t n, uint32_t block,
                   const hfl_rng_key *key, uint8_t *out);
    /* acc[i] += weight * decoded[i]; returns -1 with err (acc untouched) on a malformed payload
     * or one whose n differs from expect_n. */
    int (*decode_accumulate)(const uint8_t *in, size_t len, size_t expect_n, float weight,
                             float *acc, char *err);
} hfl_codec;

/* Looks a codec up by name; NULL (with err naming the known codecs) if unknown. */
const hfl_codec *hfl_codec_find(const char *name, char *err);

#endif
