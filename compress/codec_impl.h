/* codec_impl.h: what the codec implementations share and nobody else needs:
 * the codec ids, the 12-byte common header (write, read and validate), the
 * thread splitter, the codecs built on units (their shared encode, validate and
 * decode_accumulate, and the value loops the dense codecs and int8 share), the
 * vectorised Philox fill, the stochastic-rounding block encoder shared by int8
 * and int4, and the registry's entries. Public API is compress/codec.h. */
#ifndef HFL_CODEC_IMPL_H
#define HFL_CODEC_IMPL_H

#include <string.h>

#include "compress/codec.h"
#include "compress/payload_hd.h"
#include "compress/quant_hd.h"

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

/* On x86-64 Linux with gcc the hot stochastic-rounding functions are
 * compiled twice, for AVX2 and for the SSE2 baseline, and the loader picks one
 * (ifunc): the vectorised Philox rounds and quantize loops then run 8 lanes
 * wide where the CPU allows (measured ~1.3x on int8 encode here). Both clones
 * compute the same bits. Not with clang (the sanitizer build): clang 14 names
 * the dispatcher "f.ifunc", so a call from another file fails to link. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CODEC_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CODEC_VECTOR_CLONES
#endif

/* Codecs without blocks split work for threads on chunks of this many values. */
#define CODEC_CHUNK 4096

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

/* Codecs built on units: every codec but topk cuts its n values into units, the
 * header's blocks (blocked codecs) or CODEC_CHUNK-value chunks (the others, whose
 * header block is 0); unit k's bytes start at k * unit_bytes(values per unit) in
 * the body, and a short last unit takes unit_bytes(its values). Such a codec is a
 * codec_units: its hfl_codec (the first member, which the registry hands out) takes
 * CODEC_UNITS_FUNCTIONS, which find the rest by converting c back to the
 * codec_units, check the header and size, and run the codec's range functions over
 * units through codec_parallel (encode_range: encode; check_range: validate; both
 * check_range and apply_range: decode_accumulate). The ranges get a codec_job. */
typedef struct {
    hfl_codec codec;                 /* first: c points to it */
    size_t (*unit_bytes)(size_t m);  /* the bytes of a unit of m values */
    codec_range_fn encode_range, check_range, apply_range;
} codec_units;

/* What one encode, validate or decode_accumulate call hands its range functions. */
typedef struct {
    const hfl_codec *c;
    const float *delta;
    float *residual;    /* encode: NULL for no error feedback */
    size_t n;
    uint32_t block;     /* values per unit: the header's block size, or CODEC_CHUNK */
    const hfl_rng_key *key;
    uint8_t *body;      /* encode: where the units go */
    const uint8_t *in;  /* decode: the units read */
    float weight;
    float *acc;
} codec_job;

size_t codec_units_max_bytes(const hfl_codec *c, size_t n, uint32_t block);
size_t codec_units_encode(const hfl_codec *c, const float *delta, float *residual, size_t n,
                          uint32_t block, const hfl_rng_key *key, int threads, uint8_t *out);
int codec_units_decode_accumulate(const hfl_codec *c, const uint8_t *in, size_t len,
                                  size_t expect_n, float weight, float *acc, int threads,
                                  char *err);
/* Sets *block only when the payload is valid. */
int codec_units_validate(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                         uint32_t *block, char *err);

#define CODEC_UNITS_FUNCTIONS                                                              \
    .max_bytes = codec_units_max_bytes, .encode = codec_units_encode,                      \
    .decode_accumulate = codec_units_decode_accumulate, .validate = codec_units_validate

extern const codec_units codec_fp32, codec_fp16, codec_bf16, codec_int8, codec_int4, codec_sign;

/* The values in unit k (the last may be short). */
static inline size_t codec_unit_len(const codec_job *j, size_t k) {
    size_t start = k * j->block;
    return j->n - start < j->block ? j->n - start : j->block;
}

/* Values [*a, *b) are those of units [lo, hi). */
static inline void codec_unit_span(const codec_job *j, size_t lo, size_t hi, size_t *a,
                                   size_t *b) {
    *a = lo * j->block;
    *b = hi * j->block < j->n ? hi * j->block : j->n;
}

/* Range functions of the dense codecs (fp32, fp16, bf16: value i at body + i * width):
 * every value finite; acc[i] += weight * value i. Both run codec_value's loops below
 * with the codec's id as the constant kind. */
int codec_dense_check_range(void *ctx, size_t lo, size_t hi, char *err);
int codec_dense_apply_range(void *ctx, size_t lo, size_t hi, char *err);

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

/* The largest block scale a decoder accepts: a decoded value is at most the
 * scale times the largest quantised magnitude (int8 127, int4 7, sign 1), and
 * it must stay finite, so the bound is FLT_MAX over the next power of two
 * (exact, and clear of rounding at the edge). An honest encoder never gets
 * near it (its block would need values near FLT_MAX). Without the bound one
 * client's update of scale FLT_MAX would decode to Inf and fail the whole
 * round for everyone. */
static inline float codec_max_scale(const hfl_codec *c) {
    return c->id == HFL_CODEC_ID_INT8 ? HFL_PAYLOAD_INT8_MAX_SCALE : c->id == HFL_CODEC_ID_INT4 ? 3.40282347e38f / 8
                                                                                         : 3.40282347e38f;
}

/* -1 with err "<codec> payload: block k has scale s, outside [0, max]". */
int codec_scale_error(const hfl_codec *c, size_t k, float s, char *err);

/* 0 when block k's scale, the fp32 at p, is one a decoder accepts (int8, int4, sign),
 * else codec_scale_error's -1. */
static inline int codec_check_scale(const codec_job *j, size_t k, const uint8_t *p, char *err) {
    float s = codec_load_f32(p);
    return hfl_payload_scale_ok(s, codec_max_scale(j->c)) ? 0 : codec_scale_error(j->c, k, s, err);
}

static inline uint32_t codec_load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Value loops over a region of values, one per element in a fixed format named by a
 * codec id: HFL_CODEC_ID_FP32, _FP16 or _BF16 (the dense codecs' bodies), or _INT8 (an
 * int8 block's q, for codec_accum_values only). kind is a constant at every call, so
 * after inlining the tests on it fold and the loops vectorise (gcc 12 -O3, SSE2; see
 * codec.c and codec_int8.c). */

/* Value i's bits (fp32, or a 16-bit format). */
static inline uint32_t codec_value_bits(int kind, const uint8_t *in, size_t i) {
    return kind == HFL_CODEC_ID_FP32 ? codec_load_u32(in + 4 * i) : codec_load_u16(in + 2 * i);
}

/* The exponent bits that are all ones in Inf and NaN. */
static inline uint32_t codec_value_inf_bits(int kind) {
    return kind == HFL_CODEC_ID_FP32 ? 0x7F800000u : kind == HFL_CODEC_ID_FP16 ? 0x7C00u : 0x7F80u;
}

/* Value i as fp32 (exact). */
static inline float codec_value(int kind, const uint8_t *in, size_t i) {
    if (kind == HFL_CODEC_ID_FP32)
        return codec_load_f32(in + 4 * i);
    if (kind == HFL_CODEC_ID_FP16)
        return hfl_f16_to_f32(codec_load_u16(in + 2 * i));
    return hfl_bf16_to_f32(codec_load_u16(in + 2 * i));
}

/* acc + w * value i: quant_hd.h's int8 or fp32 accumulate. */
static inline float codec_accum_value(int kind, float acc, const uint8_t *in, size_t i, float w) {
    if (kind == HFL_CODEC_ID_INT8)
        return hfl_q8_accum(acc, ((const int8_t *)in)[i], w);
    return hfl_fp32_accum(acc, codec_value(kind, in, i), w);
}

/* acc[i] += w * value i for i < m (w: the weight, or weight * block scale for int8);
 * counted loops over restrict pointers, the first a multiple of 16 long so that it
 * needs no epilogue and gcc -O2 vectorises it too. */
static inline void codec_accum_values(int kind, float *restrict acc, const uint8_t *restrict in,
                                      size_t m, float w) {
    size_t m16 = m & ~(size_t)15, i = 0;
    for (; i < m16; i++)
        acc[i] = codec_accum_value(kind, acc[i], in, i, w);
    for (; i < m; i++)
        acc[i] = codec_accum_value(kind, acc[i], in, i, w);
}

#endif
