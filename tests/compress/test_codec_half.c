/* test_codec_half.c: the fp16 and bf16 conversions of compress/quant_hd.h
 * against slow references written on doubles (nearest representable value,
 * ties to the even bit pattern), over every binary16 and bf16 pattern and a
 * stride through all 2^32 float patterns plus the rounding boundaries; then
 * the fp16 and bf16 codecs' round-trip bounds, saturation and residuals. */
#include "tests/compress/codec_test.h"

#include <float.h>

#include "compress/quant_hd.h"

/* binary16 value of pattern h, in double (independent of hfl_f16_to_f32). */
static double ref_f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

/* Nearest binary16 of a finite or infinite float by search over the 31744 finite
 * magnitudes (binary search on the ordered patterns), ties to even. */
static uint16_t ref_f32_to_f16(float f) {
    if (f != f)
        return 0; /* not called for NaN */
    double a = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (a >= 65520.0)
        return sign | 0x7C00;
    uint16_t lo = 0, hi = 0x7BFF; /* largest pattern with value <= a */
    while (lo < hi) {
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (ref_f16_value(mid) <= a)
            lo = mid;
        else
            hi = (uint16_t)(mid - 1);
    }
    uint16_t r = lo;
    if (lo < 0x7C00) {
        double dlo = a - ref_f16_value(lo), dhi = ref_f16_value((uint16_t)(lo + 1)) - a;
        if (dhi < dlo || (dhi == dlo && (lo & 1)))
            r = (uint16_t)(lo + 1);
    }
    return sign | r;
}

static uint16_t ref_f32_to_bf16(float f) {
    uint32_t x = hfl_f32_bits(f), t = x >> 16;
    double v = f, dlo = fabs(v - (double)hfl_bf16_to_f32((uint16_t)t));
    double dhi = fabs((double)hfl_bits_f32((t + 1) << 16) - v);
    if ((t & 0x7F80) == 0x7F80) /* Inf stays Inf */
        return (uint16_t)t;
    if ((t & 0x7FFF) == 0x7F7F) /* above the largest finite: next pattern is Inf */
        dhi = fabs(ldexp(1.0, 128) - fabs(v));
    return (uint16_t)(dhi < dlo || (dhi == dlo && (t & 1)) ? t + 1 : t);
}

static void check_f32(float f, size_t *bad16, size_t *badbf) {
    if (f != f) {
        *bad16 += (hfl_f32_to_f16(f) & 0x7E00) != 0x7E00;
        *badbf += (hfl_f32_to_bf16(f) & 0x7FC0) != 0x7FC0;
        return;
    }
    *bad16 += hfl_f32_to_f16(f) != ref_f32_to_f16(f);
    *badbf += hfl_f32_to_bf16(f) != ref_f32_to_bf16(f);
}

static void test_conversions(void) {
    size_t bad = 0, exact = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hfl_f16_to_f32((uint16_t)h), b = hfl_bf16_to_f32((uint16_t)h);
        double ref = ref_f16_value((uint16_t)h);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) { /* NaN: stays NaN, quiet */
            bad += f == f || (hfl_f32_to_f16(f) & 0x7E00) != 0x7E00;
            continue;
        }
        bad += (double)f != ref || hfl_f32_to_f16(f) != h;
        exact += (double)f == ref;
        if (b == b)
            bad += hfl_f32_to_bf16(b) != h;
    }
    CHECK_MSG(bad == 0, "%zu of 65536 half patterns do not round-trip", bad);
    size_t bad16 = 0, badbf = 0;
    for (uint64_t x = 0; x < (1ull << 32); x += 65521) /* a prime stride through all patterns */
        check_f32(hfl_bits_f32((uint32_t)x), &bad16, &badbf);
    /* Around every binary16 pattern: the value, the midpoints and one float ulp either side. */
    for (uint32_t h = 0; h < 0x7C00; h++) {
        float v = hfl_f16_to_f32((uint16_t)h);
        float mid = (float)(((double)v + ref_f16_value((uint16_t)(h + 1))) / 2);
        float pts[5] = {v, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), -mid};
        for (int k = 0; k < 5; k++)
            check_f32(pts[k], &bad16, &badbf);
    }
    float special[] = {0.0f, -0.0f, FLT_MIN, -FLT_MIN, 1e-45f, FLT_MAX, -FLT_MAX, INFINITY,
                       -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f, 5.96e-8f, 2.98e-8f,
                       2.99e-8f, hfl_bits_f32(0x7F7F7FFF), hfl_bits_f32(0x7F7F8000)};
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++)
        check_f32(special[k], &bad16, &badbf);
    CHECK_MSG(bad16 == 0, "%zu floats convert to the wrong binary16", bad16);
    CHECK_MSG(badbf == 0, "%zu floats convert to the wrong bf16", badbf);
    CHECK_MSG(hfl_f32_to_f16(65520.0f) == 0x7C00 && hfl_f32_to_f16(65519.99f) == 0x7BFF &&
              hfl_f32_to_f16(2.98023224e-8f) == 0 && hfl_f32_to_f16(2.9802326e-8f) == 1,
              "binary16 rounding edges");
    CHECK_MSG(hfl_f32_to_bf16(hfl_bits_f32(0x7F7F8000)) == 0x7F80, "bf16 overflow edge");
    printf("half conversions: %zu exact values, 0 mismatches expected\n", exact);
}

/* Codec round trip: relative error within 2^-11 (fp16) or 2^-8 (bf16) on normal
 * values, residual = v - decoded exactly, saturation of big finite values. */
static void test_round_trip(const char *name, double rel, float normal_min, float big, float max_fin) {
    const hfl_codec *c = test_codec(name);
    enum { N = 3001 };
    float x[N], y[N], res[N] = {0};
    test_fill(x, N, 1.0f, 31, 0);
    for (size_t i = 0; i < N; i++) /* magnitudes from 2^-13 to 2^14 */
        x[i] *= exp2f(-13.0f + 27.0f * (float)i / N);
    x[7] = big;
    x[8] = -big;
    hfl_rng_key key = {0};
    size_t len, bad = 0;
    uint8_t *p = test_encode(c, x, res, N, 0, &key, &len);
    test_decode(c, p, len, N, y);
    for (size_t i = 0; i < N; i++) {
        if (i == 7 || i == 8)
            continue;
        if (fabsf(x[i]) >= normal_min && fabs((double)y[i] - x[i]) > rel * fabs((double)x[i]))
            bad++;
        if (res[i] != x[i] - y[i])
            bad++;
    }
    CHECK_MSG(bad == 0, "%s: %zu values past the bound or with a wrong residual", name, bad);
    CHECK_MSG(y[7] == max_fin && y[8] == -max_fin && res[7] == big - max_fin,
              "%s: %g saturates to %g (residual %g)", name, (double)big, (double)y[7],
              (double)res[7]);
    free(p);
}

static void test_fp16(void) { test_round_trip("fp16", 1.0 / 2048, 6.1035156e-5f, 1e5f, 65504.0f); }
static void test_bf16(void) { test_round_trip("bf16", 1.0 / 256, FLT_MIN, FLT_MAX, hfl_bits_f32(0x7F7F0000)); }

static const check_case cases[] = {
    {"conversions", test_conversions},
    {"fp16", test_fp16},
    {"bf16", test_bf16},
};

int main(int argc, char **argv) {
    return check_run("test_codec_half", cases, CHECK_CASES(cases), argc, argv);
}
