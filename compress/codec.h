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
 * stochastically, so decode is unbiased. Block sizes for int8 lie in
 * [1, HFL_CODEC_MAX_BLOCK]; fp32 has no blocks, ignores the block size it is given and writes block 0. n must fit
 * in 32 bits.
 *
 * Non-finite input: a NaN or Inf in delta + residual gives a payload whose
 * scale (int8) or value (fp32) is non-finite, which every decoder rejects, so
 * a diverged client cannot poison the aggregate. Hosts are little-endian. */
#ifndef HFL_CODEC_H
#define HFL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define HFL_CODEC_HEADER_BYTES 12
#define HFL_CODEC_DEFAULT_BLOCK 256
#define HFL_CODEC_MAX_BLOCK 65536

typedef struct {
    uint64_t seed;
    uint32_t round, client, tensor;
} hfl_rng_key;

typedef struct hfl_codec {
    const char *name; /* "fp32", "int8" */
    uint8_t id;
    int biased; /* 1: needs error feedback to converge */
    /* Exact payload size for n values and this block size; 0 when (n, block) cannot be
     * encoded (n over 32 bits, block outside the codec's range; see hfl_codec_check). */
    size_t (*encoded_bytes)(size_t n, uint32_t block);
    /* Writes encoded_bytes(n, block) bytes to out; (n, block) must be valid.
     * residual may be NULL (no error feedback). */
    void (*encode)(const float *delta, float *residual, size_t n, uint32_t block,
                   const hfl_rng_key *key, uint8_t *out);
    /* acc[i] += weight * decoded[i]; returns -1 with err (acc untouched) on a malformed payload
     * or one whose n differs from expect_n. */
    int (*decode_accumulate)(const uint8_t *in, size_t len, size_t expect_n, float weight,
                             float *acc, char *err);
    /* The checks decode_accumulate makes (header, exact length, finite scales/values),
     * without accumulating: for a GPU path that validates on the host and then
     * launches a kernel built from compress/quant_hd.h. *block gets the header's
     * block size. Returns -1 with err on a malformed payload. */
    int (*validate)(const uint8_t *in, size_t len, size_t expect_n, uint32_t *block, char *err);
} hfl_codec;

/* Looks a codec up by name; NULL (with err naming the known codecs) if unknown. */
const hfl_codec *hfl_codec_find(const char *name, char *err);

/* 0 if codec c can encode n values with this block size, else -1 with err
 * (e.g. "int8: block size 0 outside [1, 65536]"). */
int hfl_codec_check(const hfl_codec *c, size_t n, uint32_t block, char *err);

#endif
