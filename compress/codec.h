/* codec.h: update codecs, each a pair (encode on the client, fused
 * decode_accumulate on the aggregator).
 *
 * encode(delta, residual, key) -> bytes: compresses v = delta + residual
 * (error feedback, Seide et al. 2014; Karimireddy et al. 2019) and leaves in
 * residual exactly what the bytes failed to carry, v - decoded(v), so it is
 * sent next time. decode_accumulate(bytes, weight, acc): acc += weight *
 * decoded, without ever materialising the decoded vector; it validates the
 * bytes completely before touching acc.
 *
 * Codecs (`biased`: needs error feedback to converge):
 *   fp32        exact.
 *   fp16, bf16  round to nearest even (biased); finite values past the
 *               format's range saturate to its largest finite value.
 *   int8, int4  blockwise absmax / 127 (/ 7), stochastic rounding: unbiased
 *               to within 2^-17 of a block scale (see quant_hd.h).
 *   sign        1 bit per value and a block scale = mean |v| (EF-SignSGD,
 *               Karimireddy et al. 2019); decodes to +-scale (biased).
 *   topk:F      the ceil(F * n) largest |v| (F in (0, 1]; ties go to the lower
 *               index), values fp16 (biased).
 *
 * Payload layout shared by all codecs (little-endian):
 *   u8 codec id, u8 reserved 0, u16 reserved 0, u32 n (values),
 *   u32 block size (0 for codecs without blocks), then the codec's body:
 *   fp32        n fp32 values.
 *   fp16, bf16  n 16-bit values.
 *   int8        per block: fp32 scale, then the block's int8 values (in
 *               [-127, 127]); the last block may be short.
 *   int4        per block: fp32 scale, then ceil(m / 2) bytes, element 2j in the
 *               low nibble (4-bit two's complement in [-7, 7]); an odd block's
 *               last high nibble is 0.
 *   sign        per block: fp32 scale, then ceil(m / 8) bytes, bit j % 8 of byte
 *               j / 8 set when element j is negative; unused bits are 0.
 *   topk        u32 k, k fp16 values in index order, then k LEB128 varints: the
 *               first index, then the gaps between consecutive indices (>= 1).
 *               Varints are minimal (at most 5 bytes, no trailing zero group).
 * Blocked codecs (int8, int4, sign) take block sizes in [1, HFL_CODEC_MAX_BLOCK];
 * the others ignore the run's block size and write 0. n must fit in 32 bits.
 *
 * Sizes: every codec but topk writes exactly hfl_codec_max_bytes(n, block);
 * topk's size depends on the gaps, so encode returns the bytes it wrote, and
 * max_bytes is the buffer a caller must provide.
 *
 * Parameters: a codec is an instance, and its functions take it as their first
 * argument, so a parameter (topk's fraction) is at hand in encode and decode.
 * hfl_codec_find interns instances: "topk:0.01" is parsed once and the same
 * pointer is returned for every later lookup of an equal fraction, valid for
 * the life of the process (the table holds HFL_CODEC_MAX_TOPK fractions). The
 * instance's name is canonical ("topk:0.010" -> "topk:0.01"), so it can be
 * sent to a peer and compared with strcmp.
 *
 * Threads: encode and decode_accumulate take a thread count (<= 1: the calling
 * thread only). Work is split on block boundaries (codecs without blocks: on
 * 4096-value chunks), so the bytes and the accumulated values are the same for
 * every thread count. topk runs on the calling thread (its selection and its
 * index stream are sequential). A multi-threaded decode validates every range
 * before any thread touches acc.
 *
 * Non-finite input: NaN or Inf in delta + residual gives a payload whose
 * scale or value is non-finite, which every decoder rejects, so a diverged
 * client cannot poison the aggregate. Hosts are little-endian. */
#ifndef HFL_CODEC_H
#define HFL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define HFL_CODEC_HEADER_BYTES 12
#define HFL_CODEC_DEFAULT_BLOCK 256
#define HFL_CODEC_MAX_BLOCK 65536
#define HFL_CODEC_MAX_TOPK 64   /* distinct topk fractions one process can intern */
#define HFL_CODEC_MAX_THREADS 64

typedef struct {
    uint64_t seed;
    uint32_t round, client, tensor;
} hfl_rng_key;

typedef struct hfl_codec hfl_codec;

struct hfl_codec {
    const char *name; /* "fp32", "int8", "topk:0.01" */
    uint8_t id;
    int biased;   /* 1: deterministic or lossy-by-selection; needs error feedback */
    int blocked;  /* 1: block size must lie in [1, HFL_CODEC_MAX_BLOCK]; 0: ignored */
    double fraction; /* topk's F; 0 for the others */
    /* Most bytes encode writes for n values and this block size; 0 when (n, block)
     * cannot be encoded (see hfl_codec_check). */
    size_t (*max_bytes)(const hfl_codec *c, size_t n, uint32_t block);
    /* Writes the payload to out (room for max_bytes) and returns its length; (n, block)
     * must be valid. residual may be NULL (no error feedback). */
    size_t (*encode)(const hfl_codec *c, const float *delta, float *residual, size_t n,
                     uint32_t block, const hfl_rng_key *key, int threads, uint8_t *out);
    /* acc[i] += weight * decoded[i]; returns -1 with err (acc untouched) on a malformed
     * payload or one whose n differs from expect_n. */
    int (*decode_accumulate)(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                             float weight, float *acc, int threads, char *err);
    /* The checks decode_accumulate makes, without accumulating: for a GPU path that
     * validates on the host and then launches a kernel built from compress/quant_hd.h.
     * *block gets the header's block size. Returns -1 with err on a malformed payload. */
    int (*validate)(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                    uint32_t *block, char *err);
};

/* Looks a codec up by name ("fp32", "fp16", "bf16", "int8", "int4", "sign",
 * "topk:<fraction>"); NULL with err naming the known codecs if unknown. Thread-safe. */
const hfl_codec *hfl_codec_find(const char *name, char *err);

/* 0 if codec c can encode n values with this block size, else -1 with err
 * (e.g. "int8: block size 0 outside [1, 65536]"). */
int hfl_codec_check(const hfl_codec *c, size_t n, uint32_t block, char *err);

/* A payload's frame alone: its header (codec id, n, block size) and its
 * exact length, for every codec but topk; *block gets the block size. The
 * body is not read: a caller that checks the body itself, in a pass it makes
 * anyway (the CPU aggregator's staging, for int8), runs hfl_codec_validate
 * for the message when that check fails. -1 with err as validate's. */
int hfl_codec_check_frame(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n, uint32_t *block,
                          char *err);

/* The header codec c (not topk) writes for a payload of n values at this
 * block size into head, and that payload's length: what encode would
 * write first. fp32's body is the n floats' own little-endian bytes
 * (codec_fp32.c: encoding without a residual is a copy), so a holder of the
 * floats can serve the payload as head and them, never encoding a copy; and
 * a dense codec's payload cut at value boundaries is a run of payloads,
 * each a header and its values, that decode to the same floats. */
size_t hfl_codec_frame(const hfl_codec *c, size_t n, uint32_t block, uint8_t head[HFL_CODEC_HEADER_BYTES]);

/* topk only (c->id of "topk:F"): the entries a payload of n values holds. */
size_t hfl_codec_topk_entries(const hfl_codec *c, size_t n);
/* topk only: validates the payload as decode_accumulate does, then writes
 * its indices, increasing, to idx (room for hfl_codec_topk_entries), their
 * count to *k and where its k fp16 values start (inside in) to *vals. -1
 * with err for a malformed payload, idx then undefined. For an aggregator
 * that scatters the values itself (coordinator/aggregate.c). */
int hfl_codec_topk_expand(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                          uint32_t *idx, size_t *k, const uint8_t **vals, char *err);

/* The calls through c's functions, for brevity at call sites. */
static inline size_t hfl_codec_max_bytes(const hfl_codec *c, size_t n, uint32_t block) {
    return c->max_bytes(c, n, block);
}
static inline size_t hfl_codec_encode(const hfl_codec *c, const float *delta, float *residual,
                                      size_t n, uint32_t block, const hfl_rng_key *key,
                                      int threads, uint8_t *out) {
    return c->encode(c, delta, residual, n, block, key, threads, out);
}
static inline int hfl_codec_decode_accumulate(const hfl_codec *c, const uint8_t *in, size_t len,
                                              size_t expect_n, float weight, float *acc,
                                              int threads, char *err) {
    return c->decode_accumulate(c, in, len, expect_n, weight, acc, threads, err);
}
static inline int hfl_codec_validate(const hfl_codec *c, const uint8_t *in, size_t len,
                                     size_t expect_n, uint32_t *block, char *err) {
    return c->validate(c, in, len, expect_n, block, err);
}

#endif
