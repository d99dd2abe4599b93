/* test_quant_hd.c: compress/quant_hd.h, the per-element arithmetic shared by
 * the codecs' C loops and any CUDA kernel, function by function on values
 * worked out by hand, written against mutants that survived scripts/mutate
 * (docs/testing.md): the codec tests reach these functions only through the
 * codecs, and some use them as their own reference.
 *
 *  - hfl_q8_absmax keeps the larger magnitude and propagates NaN from either
 *    side; hfl_q8_scale and hfl_q4_scale are absmax / 127 and / 7.
 *  - hfl_sr_bits16 follows the header's layout: Philox-4x32-10 (checked
 *    against Random123's known answer first) with key (seed lo, seed hi ^
 *    4 x 0x85EBCA6B), counter (i >> 3, round ^ (i >> 35), client, tensor),
 *    word (i >> 1) & 3, low or high half by i & 1; hfl_sr_uniform is
 *    (b + 1/2) / 2^16.
 *  - Stochastic rounding: up when u < frac(y), exact multiples never move,
 *    clamped to [-qmax, qmax] (NaN to a bound), 0 for a zero or NaN scale.
 *  - Accumulates, the int4 nibbles (two's complement, -8 included), the sign
 *    value's flip, and saturation at 65520 (fp16) and 0x7F7F8000 (bf16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/quant_hd.h"
#include "tests/check.h"

static uint32_t b32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_absmax_scale(void) {
    CHECK(hfl_q8_absmax(1.0f, -2.0f) == 2.0f);
    CHECK(hfl_q8_absmax(2.0f, 1.0f) == 2.0f);
    CHECK(hfl_q8_absmax(2.0f, -2.0f) == 2.0f);
    CHECK(hfl_q8_absmax(0.0f, -0.0f) == 0.0f);
    CHECK(isnan(hfl_q8_absmax(1.0f, NAN)));
    CHECK(isnan(hfl_q8_absmax(NAN, 1.0f)));
    CHECK(hfl_q8_absmax(1.0f, -INFINITY) == INFINITY);
    CHECK(hfl_q8_scale(254.0f) == 2.0f && hfl_q8_scale(127.0f) == 1.0f);
    CHECK(hfl_q4_scale(14.0f) == 2.0f && hfl_q4_scale(7.0f) == 1.0f);
}

static void test_bits(void) {
    /* Random123's known answer for Philox-4x32-10, counter and key zero */
    uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0}, out[4];
    hfl_philox4x32_10(ctr, key, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
    const uint64_t seeds[2] = {0x0123456789ABCDEFull, 7};
    const uint64_t idx[] = {0, 1, 2, 3, 6, 7, 8, 13, 1000001, ((uint64_t)1 << 35) + 5, ((uint64_t)3 << 35) + 14};
    for (int s = 0; s < 2; s++)
        for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
            uint64_t i = idx[k];
            uint32_t kk[2] = {(uint32_t)seeds[s], (uint32_t)(seeds[s] >> 32) ^ (4u * 0x85EBCA6Bu)};
            uint32_t cc[4] = {(uint32_t)(i >> 3), 9u ^ (uint32_t)(i >> 35), 21, 33};
            hfl_philox4x32_10(cc, kk, out);
            uint32_t word = out[(i >> 1) & 3], want = i & 1 ? word >> 16 : word & 0xFFFFu;
            CHECK_MSG(hfl_sr_bits16(seeds[s], 9, 21, 33, i) == want, "seed %d index %llu", s, (unsigned long long)i);
        }
    CHECK(hfl_sr_uniform(0) == 1.0f / 131072.0f);
    CHECK(hfl_sr_uniform(65535) == 65535.5f / 65536.0f);
    CHECK(hfl_sr_uniform(32768) == 0.5f + 1.0f / 131072.0f);
}

static void test_round(void) {
    CHECK(hfl_sr_round_pos(2.5f, 1.0f, 0.4f, 127.0f) == 3);
    CHECK(hfl_sr_round_pos(2.5f, 1.0f, 0.6f, 127.0f) == 2);
    CHECK(hfl_sr_round_pos(2.5f, 1.0f, 0.5f, 127.0f) == 2); /* up only when u < frac */
    CHECK(hfl_sr_round_pos(-2.5f, 1.0f, 0.4f, 127.0f) == -2);
    CHECK(hfl_sr_round_pos(-2.5f, 1.0f, 0.6f, 127.0f) == -3);
    CHECK(hfl_sr_round_pos(-0.25f, 1.0f, 0.8f, 127.0f) == -1);
    CHECK(hfl_sr_round_pos(-0.25f, 1.0f, 0.7f, 127.0f) == 0);
    CHECK(hfl_sr_round_pos(3.0f, 1.0f, 0.00001f, 127.0f) == 3); /* an exact multiple stays */
    CHECK(hfl_sr_round_pos(-3.0f, 1.0f, 0.00001f, 127.0f) == -3);
    CHECK(hfl_sr_round_pos(6.0f, 2.0f, 0.99f, 127.0f) == 3);
    CHECK(hfl_sr_round_pos(5.0f, 2.0f, 0.49f, 127.0f) == 3 && hfl_sr_round_pos(5.0f, 2.0f, 0.51f, 127.0f) == 2);
    CHECK(hfl_sr_round_pos(200.0f, 1.0f, 0.9f, 127.0f) == 127 && hfl_sr_round_pos(-200.0f, 1.0f, 0.1f, 127.0f) == -127);
    CHECK(hfl_sr_round_pos(126.5f, 1.0f, 0.1f, 127.0f) == 127 && hfl_sr_round_pos(-126.5f, 1.0f, 0.9f, 127.0f) == -127);
    CHECK(hfl_sr_round_pos(9.0f, 1.0f, 0.1f, 7.0f) == 7 && hfl_sr_round_pos(-9.0f, 1.0f, 0.1f, 7.0f) == -7);
    /* NaN: clamped to a bound (the header says -qmax; the clamps give +qmax) */
    CHECK(abs(hfl_sr_round_pos(NAN, 1.0f, 0.5f, 127.0f)) == 127);
    CHECK(hfl_sr_round(5.0f, 0.0f, 0.5f, 127.0f) == 0 && hfl_sr_round(5.0f, NAN, 0.5f, 127.0f) == 0);
    CHECK(hfl_sr_round(5.0f, 2.0f, 0.49f, 127.0f) == 3);
    CHECK(hfl_sr_round(-5.0f, 2.0f, 0.49f, 127.0f) == -2);
    CHECK(hfl_q8_round(2.5f, 1.0f, 0.4f) == 3 && hfl_q8_round(300.0f, 1.0f, 0.4f) == 127 &&
          hfl_q8_round(-300.0f, 1.0f, 0.4f) == -127);
    CHECK(hfl_q4_round(2.5f, 1.0f, 0.4f) == 3 && hfl_q4_round(100.0f, 1.0f, 0.5f) == 7 &&
          hfl_q4_round(-100.0f, 1.0f, 0.5f) == -7 && hfl_q4_round(3.0f, 0.0f, 0.5f) == 0);
}

static void test_small(void) {
    CHECK(hfl_q8_accum(1.0f, 3, 0.5f) == 2.5f && hfl_q8_accum(1.0f, -3, 0.5f) == -0.5f);
    CHECK(hfl_fp32_accum(1.0f, 2.0f, 3.0f) == 7.0f);
    CHECK(hfl_q4_pack(-7, 7) == 0x79 && hfl_q4_pack(1, -1) == 0xF1 && hfl_q4_pack(0, 0) == 0 &&
          hfl_q4_pack(-8, 0) == 0x08);
    CHECK(hfl_q4_lo(0x79) == -7 && hfl_q4_hi(0x79) == 7 && hfl_q4_lo(0xF1) == 1 && hfl_q4_hi(0xF1) == -1);
    CHECK(hfl_q4_lo(0x08) == -8 && hfl_q4_hi(0x80) == -8 && hfl_q4_lo(0x07) == 7 && hfl_q4_hi(0x70) == 7);
    for (int lo = -7; lo <= 7; lo++)
        for (int hi = -7; hi <= 7; hi++) {
            uint8_t b = hfl_q4_pack(lo, hi);
            CHECK(hfl_q4_lo(b) == lo && hfl_q4_hi(b) == hi);
        }
    CHECK(hfl_sign_value(0, 2.5f) == 2.5f && hfl_sign_value(1, 2.5f) == -2.5f && hfl_sign_value(1, -2.5f) == 2.5f);
}

static void test_saturate(void) {
    volatile float f16max = HFL_F16_MAX;
    CHECK(f16max == 65504.0f);
    CHECK(hfl_f16_saturate(1.5f) == 1.5f && hfl_f16_saturate(65504.0f) == 65504.0f);
    CHECK(hfl_f16_saturate(65519.0f) == 65519.0f); /* rounds to 65504 by itself */
    CHECK(hfl_f16_saturate(65520.0f) == 65504.0f && hfl_f16_saturate(-65520.0f) == -65504.0f);
    CHECK(hfl_f16_saturate(1e30f) == 65504.0f && hfl_f16_saturate(-3.4028235e38f) == -65504.0f);
    CHECK(hfl_f16_saturate(INFINITY) == INFINITY && hfl_f16_saturate(-INFINITY) == -INFINITY);
    CHECK(isnan(hfl_f16_saturate(NAN)));
    CHECK(b32(hfl_bf16_saturate(f32(0x7F7F7FFFu))) == 0x7F7F7FFFu);
    CHECK(b32(hfl_bf16_saturate(f32(0x7F7F8000u))) == 0x7F7F0000u);
    CHECK(b32(hfl_bf16_saturate(f32(0x7F7FFFFFu))) == 0x7F7F0000u);
    CHECK(b32(hfl_bf16_saturate(f32(0xFF7FFFFFu))) == 0xFF7F0000u);
    CHECK(hfl_bf16_saturate(INFINITY) == INFINITY && hfl_bf16_saturate(2.0f) == 2.0f);
    CHECK(hfl_saturate(10.0f, 5.0f, 10.0f) == 5.0f && hfl_saturate(9.5f, 5.0f, 10.0f) == 9.5f &&
          hfl_saturate(-10.0f, 5.0f, 10.0f) == -5.0f);
}

static const check_case cases[] = {
    {"absmax_scale", test_absmax_scale},
    {"bits", test_bits},
    {"round", test_round},
    {"small", test_small},
    {"saturate", test_saturate},
};

int main(int argc, char **argv) {
    return check_run("test_quant_hd", cases, CHECK_CASES(cases), argc, argv);
}
