/* codec.c: the codec registry (lookup by name, topk instances interned by
 * fraction, parameter checks), the common 12-byte payload header every codec
 * writes and validates, and what the codecs built on units share (codec_impl.h):
 * their encode, validate and decode_accumulate, and the dense codecs' (fp32,
 * fp16, bf16) finiteness scan and accumulate. Vectorised (gcc 12 -O3, SSE2):
 * both, for each of the three formats. */
#include "compress/codec_impl.h"
#include "compress/payload_hd.h"

/* The aggregator reads a codec's id as payload_hd.h's kind. */
_Static_assert((int)HFL_PAYLOAD_FP32 == (int)HFL_CODEC_ID_FP32 && (int)HFL_PAYLOAD_INT8 == (int)HFL_CODEC_ID_INT8 &&
                   (int)HFL_PAYLOAD_FP16 == (int)HFL_CODEC_ID_FP16 && (int)HFL_PAYLOAD_BF16 == (int)HFL_CODEC_ID_BF16 &&
                   (int)HFL_PAYLOAD_INT4 == (int)HFL_CODEC_ID_INT4 && (int)HFL_PAYLOAD_SIGN == (int)HFL_CODEC_ID_SIGN &&
                   (int)HFL_PAYLOAD_TOPK == (int)HFL_CODEC_ID_TOPK,
               "payload_hd.h's kinds are the codec ids");

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/util.h"

static const hfl_codec *const codec_registry[] = {&codec_fp32.codec, &codec_fp16.codec,
                                                  &codec_bf16.codec, &codec_int8.codec,
                                                  &codec_int4.codec, &codec_sign.codec};
#define CODEC_COUNT (sizeof codec_registry / sizeof codec_registry[0])
#define CODEC_KNOWN "fp32, fp16, bf16, int8, int4, sign, topk:<fraction in (0, 1]>"

/* Interned topk instances: written under the lock, never freed or moved, so a
 * returned pointer stays valid and can be read without the lock. */
typedef struct {
    hfl_codec codec;
    char name[32];
} topk_slot;

static pthread_mutex_t topk_lock = PTHREAD_MUTEX_INITIALIZER;
static topk_slot topk_slots[HFL_CODEC_MAX_TOPK];
static int topk_count;

static const hfl_codec *topk_intern(const char *name, const char *arg, char *err) {
    double f;
    char perr[HFL_ERR_LEN];
    if (hfl_parse_double(arg, 0.0, 1.0, &f, perr) || !(f > 0.0))
        return hfl_errf(err, "codec '%s': topk fraction must be a number in (0, 1]", name), NULL;
    /* The instance's fraction is the value of its canonical name, so a peer that parses
     * the name gets the same fraction (and the same k) bit for bit. */
    char canon[32];
    snprintf(canon, sizeof canon, "topk:%.9g", f);
    f = strtod(canon + 5, NULL);
    const hfl_codec *found = NULL;
    pthread_mutex_lock(&topk_lock);
    for (int i = 0; i < topk_count && !found; i++)
        if (topk_slots[i].codec.fraction == f)
            found = &topk_slots[i].codec;
    if (!found && topk_count < HFL_CODEC_MAX_TOPK) {
        topk_slot *s = &topk_slots[topk_count];
        s->codec = codec_topk_template;
        memcpy(s->name, canon, sizeof canon);
        s->codec.name = s->name;
        s->codec.fraction = f;
        found = &s->codec;
        topk_count++;
    }
    pthread_mutex_unlock(&topk_lock);
    if (!found)
        hfl_errf(err, "codec '%s': this process already uses %d topk fractions, the most it holds",
                 name, HFL_CODEC_MAX_TOPK);
    return found;
}

const hfl_codec *hfl_codec_find(const char *name, char *err) {
    for (size_t i = 0; name && i < CODEC_COUNT; i++)
        if (strcmp(codec_registry[i]->name, name) == 0)
            return codec_registry[i];
    if (name && strncmp(name, "topk:", 5) == 0)
        return topk_intern(name, name + 5, err);
    hfl_errf(err, "unknown codec '%s' (known: " CODEC_KNOWN ")", name ? name : "(null)");
    return NULL;
}

int hfl_codec_check(const hfl_codec *c, size_t n, uint32_t block, char *err) {
    if ((uint64_t)n > UINT32_MAX)
        return hfl_errf(err, "%s: %zu values do not fit the 32-bit count of a payload", c->name, n);
    if (c->blocked && (block < 1 || block > HFL_CODEC_MAX_BLOCK))
        return hfl_errf(err, "%s: block size %u outside [1, %u]", c->name, block,
                        (unsigned)HFL_CODEC_MAX_BLOCK);
    return 0;
}

void codec_write_header(uint8_t *out, uint8_t id, uint32_t n, uint32_t block) {
    out[0] = id;
    out[1] = out[2] = out[3] = 0;
    codec_store_u32(out + 4, n);
    codec_store_u32(out + 8, block);
}

int codec_read_header(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                      uint32_t *block, char *err) {
    if (len < HFL_CODEC_HEADER_BYTES)
        return hfl_errf(err, "%s payload: %zu bytes, shorter than the %d-byte header", c->name,
                        len, HFL_CODEC_HEADER_BYTES);
    if (in[0] != c->id)
        return hfl_errf(err, "%s payload: codec id %u, expected %u", c->name, in[0], c->id);
    if (in[1] || in[2] || in[3])
        return hfl_errf(err, "%s payload: reserved header bytes are not zero", c->name);
    uint32_t n = codec_load_u32(in + 4), b = codec_load_u32(in + 8);
    if ((uint64_t)n != (uint64_t)expect_n)
        return hfl_errf(err, "%s payload: n=%u, expected %zu", c->name, n, expect_n);
    uint32_t lo = c->blocked ? 1 : 0, hi = c->blocked ? HFL_CODEC_MAX_BLOCK : 0;
    if (b < lo || b > hi)
        return hfl_errf(err, "%s payload: block size %u outside [%u, %u]", c->name, b, lo, hi);
    *block = b;
    return 0;
}

int codec_read_fixed(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                     uint32_t *block, char *err) {
    uint32_t b;
    if (codec_read_header(c, in, len, expect_n, &b, err))
        return -1;
    size_t want = c->max_bytes(c, expect_n, b);
    if (len != want)
        return hfl_errf(err, "%s payload: %zu bytes, expected %zu for n=%zu block=%u", c->name,
                        len, want, expect_n, b);
    *block = b;
    return 0;
}

size_t hfl_codec_frame(const hfl_codec *c, size_t n, uint32_t block, uint8_t head[HFL_CODEC_HEADER_BYTES]) {
    codec_write_header(head, c->id, (uint32_t)n, c->blocked ? block : 0);
    return c->max_bytes(c, n, block);
}

int hfl_codec_check_frame(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n, uint32_t *block,
                          char *err) {
    if (c->id == HFL_CODEC_ID_TOPK) return hfl_errf(err, "%s payload: no fixed frame", c->name);
    return codec_read_fixed(c, in, len, expect_n, block, err);
}

/* c is the first member of a codec_units (every codec that takes CODEC_UNITS_FUNCTIONS). */
static const codec_units *units_of(const hfl_codec *c) { return (const codec_units *)c; }

/* Values per unit: the block size, or CODEC_CHUNK for a codec without blocks. */
static uint32_t unit_values(const hfl_codec *c, uint32_t block) {
    return c->blocked ? block : CODEC_CHUNK;
}

size_t codec_units_max_bytes(const hfl_codec *c, size_t n, uint32_t block) {
    if ((uint64_t)n > UINT32_MAX || (c->blocked && (block < 1 || block > HFL_CODEC_MAX_BLOCK)))
        return 0;
    size_t (*unit_bytes)(size_t) = units_of(c)->unit_bytes;
    size_t u = unit_values(c, block), full = n / u, last = n % u;
    return HFL_CODEC_HEADER_BYTES + full * unit_bytes(u) + (last ? unit_bytes(last) : 0);
}

size_t codec_units_encode(const hfl_codec *c, const float *delta, float *residual, size_t n,
                          uint32_t block, const hfl_rng_key *key, int threads, uint8_t *out) {
    codec_write_header(out, c->id, (uint32_t)n, c->blocked ? block : 0);
    codec_job j = {.c = c, .delta = delta, .residual = residual, .n = n,
                   .block = unit_values(c, block), .key = key,
                   .body = out + HFL_CODEC_HEADER_BYTES};
    codec_parallel(codec_blocks(n, j.block), threads, NULL, units_of(c)->encode_range, &j, NULL);
    return c->max_bytes(c, n, block);
}

int codec_units_validate(const hfl_codec *c, const uint8_t *in, size_t len, size_t expect_n,
                         uint32_t *block, char *err) {
    uint32_t b = 1;
    if (codec_read_fixed(c, in, len, expect_n, &b, err))
        return -1;
    codec_job j = {.c = c, .n = expect_n, .block = unit_values(c, b),
                   .in = in + HFL_CODEC_HEADER_BYTES};
    if (units_of(c)->check_range(&j, 0, codec_blocks(expect_n, j.block), err))
        return -1;
    *block = b;
    return 0;
}

int codec_units_decode_accumulate(const hfl_codec *c, const uint8_t *in, size_t len,
                                  size_t expect_n, float weight, float *acc, int threads,
                                  char *err) {
    uint32_t b = 1;
    if (codec_read_fixed(c, in, len, expect_n, &b, err))
        return -1;
    codec_job j = {.c = c, .n = expect_n, .block = unit_values(c, b),
                   .in = in + HFL_CODEC_HEADER_BYTES, .weight = weight, .acc = acc};
    const codec_units *u = units_of(c);
    return codec_parallel(codec_blocks(expect_n, j.block), threads, u->check_range,
                          u->apply_range, &j, err);
}

int codec_scale_error(const hfl_codec *c, size_t k, float s, char *err) {
    return hfl_errf(err, "%s payload: block %zu has scale %g, outside [0, %g]", c->name, k, (double)s,
                    (double)codec_max_scale(c));
}

/* Values [a, b) finite. A branch-free scan (exponent bits all ones = Inf or NaN) so it
 * vectorises; the slow search for the culprit only runs on a bad payload. */
static inline int dense_check(int kind, const hfl_codec *c, const uint8_t *in, size_t a,
                              size_t b, char *err) {
    uint32_t inf = codec_value_inf_bits(kind), bad = 0;
    for (size_t i = a; i < b; i++)
        bad |= (codec_value_bits(kind, in, i) & inf) == inf;
    for (size_t i = a; bad && i < b; i++)
        if ((codec_value_bits(kind, in, i) & inf) == inf)
            return hfl_errf(err, "%s payload: value %zu is %g, not finite", c->name, i,
                            (double)codec_value(kind, in, i));
    return 0;
}

int codec_dense_check_range(void *ctx, size_t lo, size_t hi, char *err) {
    codec_job *j = ctx;
    size_t a, b;
    codec_unit_span(j, lo, hi, &a, &b);
    switch (j->c->id) {
    case HFL_CODEC_ID_FP32:
        return dense_check(HFL_CODEC_ID_FP32, j->c, j->in, a, b, err);
    case HFL_CODEC_ID_FP16:
        return dense_check(HFL_CODEC_ID_FP16, j->c, j->in, a, b, err);
    default:
        return dense_check(HFL_CODEC_ID_BF16, j->c, j->in, a, b, err);
    }
}

int codec_dense_apply_range(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    codec_job *j = ctx;
    size_t a, b;
    codec_unit_span(j, lo, hi, &a, &b);
    float *acc = j->acc + a;
    switch (j->c->id) {
    case HFL_CODEC_ID_FP32:
        codec_accum_values(HFL_CODEC_ID_FP32, acc, j->in + 4 * a, b - a, j->weight);
        break;
    case HFL_CODEC_ID_FP16:
        codec_accum_values(HFL_CODEC_ID_FP16, acc, j->in + 2 * a, b - a, j->weight);
        break;
    default:
        codec_accum_values(HFL_CODEC_ID_BF16, acc, j->in + 2 * a, b - a, j->weight);
    }
    return 0;
}
