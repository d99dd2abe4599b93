/* codec_impl.h: what the codec implementations share and nobody else needs:
 * the codec ids, the 12-byte common header (write, read and validate), the
 * thread splitter, the vectorised Philox fill, the stochastic-rounding block
 * encoder shared by int8 and int4, and the registry's entries. Public API is
 * compress/codec.h. */
#ifndef HFL_CODEC_IMPL_H
#define HFL_CODEC_IMPL_H

#include <string.h>

#include "compress/codec.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hfl payloads are little-endian and read with memcpy: big-endian hosts are not supported"
#endif

enum {
    HFL_CODEC_ID_FP32 = 1,
    HFL_CODEC_ID_INT8 = 2,
    HFL_CODEC_ID_FP16 = 3,
    HFL_CODEC_ID_BF16 = 4,
    HFL_CODEC_ID_INT4 = 5,
    HFL_CODEC_ID_SIGN = 6,
    HFL_CODEC_ID_TOPK = 7,
};

/* On x86-64 Linux with gcc or clang the hot stochastic-rounding functions are
 * compiled twice, for AVX2 and for the SSE2 baseline, and the loader picks one
 * (ifunc): the vectorised Philox rounds and quantize loops then run 8 lanes
 * wide where the CPU allows (measured ~1.3x on int8 encode here). Both clones
 * compute the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define CODEC_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CODEC_VECTOR_CLONES
#endif

/* Codecs without blocks split work for threads on chunks of this many values. */
#define CODEC_CHUNK 4096

extern const hfl_codec hfl_codec_fp32, hfl_codec_fp16, hfl_codec_bf16, hfl_codec_int8,
    hfl_codec_int4, hfl_codec_sign;
/* topk's functions; hfl_codec_find copies it and sets name and fraction. */
extern const hfl_codec codec_topk_template;

static inline size_t codec_blocks(size_t n, uint32_t block) { return n / block + (n % block != 0); }

/* Writes id, the zero reserved bytes, n and block to out[0..12). */
void codec_write_header(uint8_t *out, uint8_t id, uint32_t n, uint32_t block);

/* Checks a payload's header against codec c: len covers a header, id matches,
 * reserved bytes are 0, n == expect_n, block in [1, HFL_CODEC_MAX_BLOCK] for a
 * blocked codec and 0 otherwise. Sets *block. -1 with err otherwise. */
int codec_read_header(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                      uint32_t *block, char *err);

/* codec_read_header, then len == c->max_bytes(n, block): for fixed-size codecs. */
int codec_read_fixed(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                     uint32_t *block, char *err);

/* Work on [lo, hi) of some units (blocks or chunks); 0, or -1 with err. */
typedef int (*codec_range_fn)(void *ctx, size_t lo, size_t hi, char *err);

/* Splits [0, units) into min(threads, units, HFL_CODEC_MAX_THREADS) contiguous ranges
 * and runs check (may be NULL) on every range, then, only if every check passed, apply
 * (may be NULL) on every range; the calling thread takes the first range. Returns 0, or
 * -1 with the err of the lowest failing range (the same for any thread count, given
 * each fn reports the first failure in its range). A thread that cannot be created has
 * its range run on the calling thread. */
int codec_parallel(size_t units, int threads, codec_range_fn check, codec_range_fn apply,
                   void *ctx, char *err);

/* out[8 * g + l] = hfl_sr_bits16(key, 8 * (first_group + g) + l) for g < groups, l < 8,
 * eight Philox counters at a time so that gcc vectorises the rounds. */
void codec_sr_bits_fill(const hfl_rng_key *key, uint64_t first_group, size_t groups,
                        uint16_t *out);

/* Scratch codec_sr_encode_block needs for blocks of up to `block` values (u16 count). */
static inline size_t codec_sr_scratch(uint32_t block) { return 8 * ((size_t)block / 8 + 2); }

/* Stochastic rounding of v = delta + residual (residual may be NULL) for one block of
 * m values starting at global index start: returns the scale absmax / qmax, writes
 * q[0..m) in [-qmax, qmax] and the new residual v - q * scale. */
float codec_sr_encode_block(const float *delta, float *residual, size_t start, size_t m,
                            const hfl_rng_key *key, float qmax, uint16_t *scratch, int8_t *q);

/* Absmax of delta + residual over m values (NaN propagates), in eight interleaved lanes. */
float codec_block_absmax(const float *delta, const float *residual, size_t m);

static inline float codec_load_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

static inline void codec_store_f32(uint8_t *p, float f) { memcpy(p, &f, sizeof f); }

static inline uint32_t codec_load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void codec_store_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, sizeof v); }

/* A block scale a decoder accepts: finite and >= 0 (NaN fails both). */
static inline int codec_scale_ok(float s) { return s >= 0.0f && s <= 3.40282347e38f; }

#endif
