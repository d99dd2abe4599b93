/* codec_impl.h: what the codec implementations share and nobody else needs:
 * the 12-byte common header (write, read and validate) and the registry's
 * entries. Public API is compress/codec.h. */
#ifndef HFL_CODEC_IMPL_H
#define HFL_CODEC_IMPL_H

#include <string.h>

#include "compress/codec.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hfl payloads are little-endian and read with memcpy: big-endian hosts are not supported"
#endif

enum { HFL_CODEC_ID_FP32 = 1, HFL_CODEC_ID_INT8 = 2 };

extern const hfl_codec hfl_codec_fp32;
extern const hfl_codec hfl_codec_int8;

/* Writes id, the zero reserved bytes, n and block to out[0..12). */
void codec_write_header(uint8_t *out, uint8_t id, uint32_t n, uint32_t block);

/* Checks a payload's header against codec c: len covers a header, id matches,
 * reserved bytes are 0, n == expect_n, block within [block_min, block_max], and
 * len == c->encoded_bytes(n, block) exactly. Sets *block. -1 with err otherwise. */
int codec_read_header(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                      uint32_t block_min, uint32_t block_max, uint32_t *block, char *err);

static inline float codec_load_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

static inline void codec_store_f32(uint8_t *p, float f) { memcpy(p, &f, sizeof f); }

#endif
