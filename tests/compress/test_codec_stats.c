/* test_codec_stats.c: the statistical promises of the codecs.
 *
 * Unbiasedness (int8, int4): one vector encoded under K = 2000 keys. The
 * 16-bit uniforms add a bias of at most 2^-17 scale, far inside the bound. Per element the
 * decoded error is (q - y) * scale with q in {floor y, floor y + 1}, a
 * two-point variable with variance frac(1 - frac) * scale^2 <= scale^2 / 4,
 * so the mean error over K keys has standard deviation <= scale / (2 sqrt K).
 * We allow 6 standard deviations, 3 * scale / sqrt(K) = 0.067 scale (per
 * element a false alarm has probability ~2e-9), and show that deterministic
 * rounding misses that bound on a value of 0.3 scale.
 *
 * Error feedback: sum(decoded) - sum(delta) over T rounds telescopes to
 * -residual_T, so for int8 it stays within one block scale, while without
 * feedback it is a random walk that grows like sqrt(T) scales. For the biased
 * codecs (sign, topk, fp16) the same identity bounds the drift by the final
 * residual, while without feedback sign's and topk's errors add up round after
 * round (topk without feedback never sends the small entries at all). */
#include "tests/compress/codec_test.h"

#include "compress/quant_hd.h"

enum { N = 512, BLOCK = 256, KEYS = 2000 };

static void test_unbiased(const char *name, float qmax) {
    const hfl_codec *i8 = test_codec(name);
    float x[N], y[N];
    test_fill(x, N, 0.9f, 21, 0);
    x[0] = x[BLOCK] = 1.0f; /* absmax of both blocks: scale = 1 / qmax */
    float s = 1.0f / qmax;
    x[1] = 0.3f * s;
    x[2] = -0.3f * s;
    x[3] = 0.7f * s;
    x[4] = (qmax - 0.5f) * s;
    double sum_err[N] = {0};
    for (uint32_t k = 0; k < KEYS; k++) {
        hfl_rng_key key = {.seed = 42, .round = k, .client = 1, .tensor = 0};
        size_t len;
        uint8_t *p = test_encode(i8, x, NULL, N, BLOCK, &key, &len);
        float s0, s1;
        memcpy(&s0, p + HFL_CODEC_HEADER_BYTES, 4);
        memcpy(&s1, p + len - (qmax > 100 ? 4 + BLOCK : 4 + BLOCK / 2), 4);
        CHECK_MSG(s0 == s && s1 == s, "%s scale not absmax / qmax", name);
        test_decode(i8, p, len, N, y);
        for (size_t i = 0; i < N; i++)
            sum_err[i] += (double)y[i] - (double)x[i];
        free(p);
    }
    double bound = 3.0 * s / sqrt((double)KEYS), total = 0, worst = 0;
    size_t over = 0;
    for (size_t i = 0; i < N; i++) {
        double m = sum_err[i] / KEYS;
        total += m;
        worst = fmax(worst, fabs(m));
        over += fabs(m) >= bound;
    }
    CHECK_MSG(over == 0, "%s: %zu of %d elements have |mean error| >= %.3g scale (worst %.3g scale)",
              name, over, N, bound / s, worst / s);
    /* Mean over all elements: standard deviation <= scale / (2 sqrt(K N)). */
    double all_bound = 3.0 * s / sqrt((double)KEYS * N);
    CHECK_MSG(fabs(total / N) < all_bound, "overall mean error %.3g scale", total / N / s);
    printf("%s unbiased: worst |mean error| %.4f scale, bound %.4f scale\n", name, worst / s,
           bound / s);

    /* The bound discriminates: round-to-nearest (u = 0.5) or truncation (u = 0) of 0.3
     * scale is off by 0.3 scale on every key. */
    double near_err = (double)hfl_sr_round(x[1], s, 0.5f, qmax) * s - x[1];
    double trunc_err = (double)hfl_sr_round(x[3], s, 0.0f, qmax) * s - x[3];
    CHECK_MSG(fabs(near_err) > bound && fabs(trunc_err) > bound,
              "deterministic rounding would pass (%.3g, %.3g scale)", near_err / s, trunc_err / s);
}

enum { EF_N = 1000, EF_BLOCK = 128, ROUNDS = 200 }; /* last block holds 104 values */

/* Runs ROUNDS rounds of random deltas through codec c (error feedback when ef), returns
 * max_i |sum decoded - sum delta| and the largest block scale of the last payload. */
static double run_rounds(const hfl_codec *c, uint32_t block, int ef, double *max_scale) {
    float delta[EF_N], res[EF_N] = {0}, y[EF_N];
    double sum_true[EF_N] = {0}, sum_dec[EF_N] = {0}, worst = 0;
    float last_scale[EF_N] = {0};
    for (uint32_t r = 0; r < ROUNDS; r++) {
        test_fill(delta, EF_N, 1.0f, 77, r);
        hfl_rng_key key = {.seed = 8, .round = r, .client = 2, .tensor = 0};
        size_t len;
        uint8_t *p = test_encode(c, delta, ef ? res : NULL, EF_N, block, &key, &len);
        test_decode(c, p, len, EF_N, y);
        for (size_t i = 0; i < EF_N; i++) {
            sum_true[i] += delta[i];
            sum_dec[i] += y[i];
            last_scale[i] = block ? test_int8_scale(p, block, i / block) : 0.0f;
        }
        free(p);
    }
    *max_scale = 0;
    size_t bad = 0;
    for (size_t i = 0; i < EF_N; i++) {
        double e = sum_dec[i] - sum_true[i];
        worst = fmax(worst, fabs(e));
        *max_scale = fmax(*max_scale, last_scale[i]);
        /* Telescoping holds up to float rounding of ~2 ulps of |v| <= 2 per round. */
        if (ef && (fabs(e + res[i]) > 2e-4 || fabs(e) > last_scale[i] + 2e-4))
            bad++;
    }
    CHECK_MSG(bad == 0, "%s: %zu elements drift past their residual / scale", c->name, bad);
    return worst;
}

static void test_error_feedback(void) {
    const hfl_codec *i8 = test_codec("int8"), *f32 = test_codec("fp32");
    double scale, scale_no_ef;
    double with_ef = run_rounds(i8, EF_BLOCK, 1, &scale);
    double without = run_rounds(i8, EF_BLOCK, 0, &scale_no_ef);
    CHECK_MSG(with_ef <= scale + 2e-4, "with feedback drift %.3g > scale %.3g", with_ef, scale);
    CHECK_MSG(without > 3.0 * scale_no_ef, "without feedback drift only %.3g (scale %.3g)", without,
              scale_no_ef);
    printf("error feedback over %d rounds: drift %.2f scale with, %.2f scale without\n", ROUNDS,
           with_ef / scale, without / scale_no_ef);
    double ignored, fp = run_rounds(f32, 0, 1, &ignored);
    CHECK_MSG(fp < 1e-3, "fp32 drift %.3g", fp);
    float d[4] = {1, -2, 3, 0.5f}, r[4] = {0.25f, 0.5f, -1, 0};
    size_t len;
    hfl_rng_key key = {0};
    uint8_t *p = test_encode(f32, d, r, 4, 0, &key, &len);
    float y[4];
    test_decode(f32, p, len, 4, y);
    CHECK_MSG(y[0] == 1.25f && y[1] == -1.5f && y[2] == 2.0f && y[3] == 0.5f, "fp32 sends delta + residual");
    CHECK_MSG(r[0] == 0 && r[1] == 0 && r[2] == 0 && r[3] == 0, "fp32 residual not cleared");
    free(p);
}

/* Biased codecs: with feedback, |sum decoded - sum true + residual| is float rounding
 * and the drift is bounded by the final residual; without it, the drift is at least
 * `factor` times larger. Deltas have a common positive mean so that a biased codec's
 * errors have a direction to pile up in. */
static void test_biased_feedback(const char *name, double factor) {
    const hfl_codec *c = test_codec(name);
    static float delta[EF_N], res[EF_N], y[EF_N];
    double drift[2] = {0, 0}, max_res = 0;
    for (int ef = 1; ef >= 0; ef--) {
        double sum_true[EF_N] = {0}, sum_dec[EF_N] = {0};
        memset(res, 0, sizeof res);
        for (uint32_t r = 0; r < ROUNDS; r++) {
            test_fill(delta, EF_N, 1.0f, 78, r);
            for (size_t i = 0; i < EF_N; i++)
                delta[i] = 0.01f * (float)(i % 7) + 0.1f * delta[i];
            hfl_rng_key key = {.seed = 9, .round = r};
            size_t len;
            uint8_t *p = test_encode(c, delta, ef ? res : NULL, EF_N, EF_BLOCK, &key, &len);
            test_decode(c, p, len, EF_N, y);
            for (size_t i = 0; i < EF_N; i++) {
                sum_true[i] += delta[i];
                sum_dec[i] += y[i];
            }
            free(p);
        }
        size_t bad = 0;
        for (size_t i = 0; i < EF_N; i++) {
            double e = sum_dec[i] - sum_true[i];
            drift[ef] = fmax(drift[ef], fabs(e));
            if (ef) {
                max_res = fmax(max_res, fabs(res[i]));
                bad += fabs(e + res[i]) > 1e-3;
            }
        }
        CHECK_MSG(bad == 0, "%s: %zu elements where sum decoded - sum true != -residual", name, bad);
    }
    CHECK_MSG(drift[1] <= max_res + 1e-3, "%s: drift %.3g with feedback, past the residual %.3g", name,
              drift[1], max_res);
    CHECK_MSG(drift[0] > factor * drift[1], "%s: drift without feedback %.3g, with %.3g", name,
              drift[0], drift[1]);
    printf("%s over %d rounds: drift %.3f with feedback (max residual %.3f), %.3f without\n",
           name, ROUNDS, drift[1], max_res, drift[0]);
}

static void test_unbiased_int8(void) { test_unbiased("int8", 127.0f); }
static void test_unbiased_int4(void) { test_unbiased("int4", 7.0f); }
static void test_sign_feedback(void) { test_biased_feedback("sign", 3.0); }
static void test_topk_feedback(void) { test_biased_feedback("topk:0.05", 3.0); }

static const check_case cases[] = {
    {"unbiased_int8", test_unbiased_int8},
    {"unbiased_int4", test_unbiased_int4},
    {"error_feedback", test_error_feedback},
    {"sign_feedback", test_sign_feedback},
    {"topk_feedback", test_topk_feedback},
};

int main(int argc, char **argv) {
    return check_run("test_codec_stats", cases, CHECK_CASES(cases), argc, argv);
}
