/* codec.c: the codec registry (lookup by name, parameter checks) and the
 * common 12-byte payload header every codec writes and validates. */
#include "compress/codec_impl.h"

#include "util/util.h"

static const hfl_codec *const codec_registry[] = {&hfl_codec_fp32, &hfl_codec_int8};
#define CODEC_COUNT (sizeof codec_registry / sizeof codec_registry[0])

const hfl_codec *hfl_codec_find(const char *name, char *err) {
    for (size_t i = 0; name && i < CODEC_COUNT; i++)
        if (strcmp(codec_registry[i]->name, name) == 0)
            return codec_registry[i];
    hfl_errf(err, "unknown codec '%s' (known: fp32, int8)", name ? name : "(null)");
    return NULL;
}

int hfl_codec_check(const hfl_codec *c, size_t n, uint32_t block, char *err) {
    if ((uint64_t)n > UINT32_MAX)
        return hfl_errf(err, "%s: %zu values do not fit the 32-bit count of a payload", c->name, n);
    if (c->id != HFL_CODEC_ID_FP32 && (block < 1 || block > HFL_CODEC_MAX_BLOCK))
        return hfl_errf(err, "%s: block size %u outside [1, %u]", c->name, block,
                        (unsigned)HFL_CODEC_MAX_BLOCK);
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void codec_write_header(uint8_t *out, uint8_t id, uint32_t n, uint32_t block) {
    out[0] = id;
    out[1] = out[2] = out[3] = 0;
    put_u32(out + 4, n);
    put_u32(out + 8, block);
}

int codec_read_header(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                      uint32_t block_min, uint32_t block_max, uint32_t *block, char *err) {
    if (len < HFL_CODEC_HEADER_BYTES)
        return hfl_errf(err, "%s payload: %zu bytes, shorter than the %d-byte header", c->name,
                        len, HFL_CODEC_HEADER_BYTES);
    if (in[0] != c->id)
        return hfl_errf(err, "%s payload: codec id %u, expected %u", c->name, in[0], c->id);
    if (in[1] || in[2] || in[3])
        return hfl_errf(err, "%s payload: reserved header bytes are not zero", c->name);
    uint32_t n = get_u32(in + 4), b = get_u32(in + 8);
    if ((uint64_t)n != (uint64_t)expect_n)
        return hfl_errf(err, "%s payload: n=%u, expected %zu", c->name, n, expect_n);
    if (b < block_min || b > block_max)
        return hfl_errf(err, "%s payload: block size %u outside [%u, %u]", c->name, b, block_min,
                        block_max);
    size_t want = c->encoded_bytes(n, b);
    if (len != want)
        return hfl_errf(err, "%s payload: %zu bytes, expected %zu for n=%u block=%u", c->name, len,
                        want, n, b);
    *block = b;
    return 0;
}
