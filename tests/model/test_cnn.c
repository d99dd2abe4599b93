/* test_cnn.c: convolutional models end to end on the CPU backend.
 *
 * Checks the built-in cnn's shapes, parameter layout (1,663,370 parameters)
 * and FLOPs; its init bounds per layer (fan_in = in_c*k*k for convolutions);
 * the trainer's arena for it (which tensors share a buffer: each ReLU runs
 * in place, since backward only needs its output); that mlp and cnn written
 * as JSON specs train identically to the built-ins; a small whole CNN's
 * gradient against central differences on every parameter (skipping those
 * whose perturbation crosses a ReLU or pool kink); a few of the full cnn's; and that a small CNN from a JSON spec learns a synthetic
 * translated-pattern task it cannot solve at initialisation. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/philox.h"
#include "model/layers.h"
#include "plan/planner.h"
#include "model/model.h"
#include "tests/check.h"
#include "util/util.h"

static float rnd(uint32_t tensor, uint64_t i) {
    return 2.0f * hfl_u01(hfl_philox_u32(31, 99, 0, 0, tensor, i)) - 1.0f;
}

static const char *mlp_json =
    "{\"name\": \"mlp\", \"input\": [784], \"layers\": [{\"type\": \"dense\", \"out\": 200},"
    " {\"type\": \"relu\"}, {\"type\": \"dense\", \"out\": 200}, {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"out\": 10}]}";

static const char *cnn_json =
    "{\"name\": \"cnn\", \"input\": [1, 28, 28], \"layers\": ["
    "{\"type\": \"conv2d\", \"out\": 32, \"kernel\": 5, \"pad\": 2}, {\"type\": \"relu\"},"
    "{\"type\": \"maxpool2d\", \"size\": 2},"
    "{\"type\": \"conv2d\", \"out\": 64, \"kernel\": 5, \"pad\": 2}, {\"type\": \"relu\"},"
    "{\"type\": \"maxpool2d\", \"size\": 2},"
    "{\"type\": \"dense\", \"out\": 512}, {\"type\": \"relu\"}, {\"type\": \"dense\", \"out\": 10}]}";

static void test_cnn_spec(void) {
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_model_builtin("cnn", &s, err) == 0);
    CHECK(s.n_params == 1663370);
    CHECK(s.in_dim == 784 && s.n_classes == 10 && s.n_layers == 9);
    CHECK(s.input.c == 1 && s.input.h == 28 && s.input.w == 28);
    static const struct { hfl_layer_kind kind; int c, h, w; size_t off, n; } want[9] = {
        {HFL_LAYER_CONV2D, 32, 28, 28, 0, 832},
        {HFL_LAYER_RELU, 32, 28, 28, 832, 0},
        {HFL_LAYER_MAXPOOL2D, 32, 14, 14, 832, 0},
        {HFL_LAYER_CONV2D, 64, 14, 14, 832, 51264},
        {HFL_LAYER_RELU, 64, 14, 14, 52096, 0},
        {HFL_LAYER_MAXPOOL2D, 64, 7, 7, 52096, 0},
        {HFL_LAYER_DENSE, 512, 1, 1, 52096, 3136 * 512 + 512},
        {HFL_LAYER_RELU, 512, 1, 1, 1658240, 0},
        {HFL_LAYER_DENSE, 10, 1, 1, 1658240, 5130},
    };
    for (int l = 0; l < 9; l++) {
        const hfl_layer *ly = &s.layers[l];
        CHECK(ly->kind == want[l].kind);
        CHECK(ly->out_shape.c == want[l].c && ly->out_shape.h == want[l].h && ly->out_shape.w == want[l].w);
        CHECK(ly->param_off == want[l].off && ly->n_params == want[l].n);
    }
    CHECK(s.layers[6].in == 3136);
    /* conv1 2*32*25*784 + 32*784, relu 25088, pool 4*6272, conv2 2*64*800*196 + 64*196,
     * relu 12544, pool 4*3136, dense 2*3136*512 + 512, relu 512, dense 2*512*10 + 10 */
    uint64_t flops = 1254400 + 25088 + 25088 + 25088 + 20070400 + 12544 + 12544 + 12544 +
                     3211264 + 512 + 512 + 10240 + 10;
    CHECK(hfl_model_forward_flops(&s) == flops);
    CHECK(hfl_model_spec_check(&s, err) == 0);
}

/* JSON versions of the built-ins have the same layers, blocks and sizes. */
static void test_json_matches_builtins(const hfl_backend *be) {
    const char *texts[2] = {mlp_json, cnn_json}, *names[2] = {"mlp", "cnn"};
    for (int m = 0; m < 2; m++) {
        hfl_model_spec a, b;
        char err[HFL_ERR_LEN] = "";
        CHECK(hfl_model_builtin(names[m], &a, err) == 0);
        CHECK(hfl_model_spec_from_json(texts[m], strlen(texts[m]), &b, err) == 0);
        CHECK(a.n_params == b.n_params && a.n_layers == b.n_layers && a.in_dim == b.in_dim &&
              a.n_classes == b.n_classes);
        for (int l = 0; l < a.n_layers && l < b.n_layers; l++) {
            CHECK(a.layers[l].kind == b.layers[l].kind && a.layers[l].in == b.layers[l].in &&
                  a.layers[l].out == b.layers[l].out);
            CHECK(a.layers[l].param_off == b.layers[l].param_off &&
                  a.layers[l].n_params == b.layers[l].n_params);
        }
        /* Same init and same step on the same batch. */
        enum { B = 3 };
        float *pa = hfl_malloc(a.n_params * sizeof(float)), *pb = hfl_malloc(b.n_params * sizeof(float));
        hfl_model_init_params(&a, pa, 5);
        hfl_model_init_params(&b, pb, 5);
        CHECK(memcmp(pa, pb, a.n_params * sizeof(float)) == 0);
        float x[B * 784];
        int32_t y[B] = {1, 2, 3};
        for (int i = 0; i < B * 784; i++) x[i] = rnd(1, i);
        hfl_trainer *ta = hfl_trainer_create(&a, be, B), *tb = hfl_trainer_create(&b, be, B);
        hfl_trainer_set_params(ta, pa);
        hfl_trainer_set_params(tb, pb);
        CHECK(hfl_trainer_step(ta, x, y, B, 0.1f, 0.9f, 0) == hfl_trainer_step(tb, x, y, B, 0.1f, 0.9f, 0));
        hfl_trainer_free(ta);
        hfl_trainer_free(tb);
        free(pa);
        free(pb);
    }
}

static void test_cnn_init(void) {
    hfl_model_spec s;
    hfl_model_builtin("cnn", &s, NULL);
    float *p = hfl_malloc(s.n_params * sizeof(float));
    hfl_model_init_params(&s, p, 42);
    const int fan_in[9] = {25, 0, 0, 800, 0, 0, 3136, 0, 512};
    for (int l = 0; l < s.n_layers; l++) {
        const hfl_layer *ly = &s.layers[l];
        if (!ly->n_params) continue;
        float bound = 1.0f / sqrtf((float)fan_in[l]), lo = 1, hi = -1;
        for (size_t i = 0; i < ly->n_params; i++) {
            float v = p[ly->param_off + i] / bound;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        CHECK(lo >= -1.0f && hi <= 1.0f && lo < -0.9f && hi > 0.9f);
    }
    free(p);
}

/* The arena for cnn at batch B: exactly the planner's figure, no larger than
 * the old fixed layout (every buffer alive at once, piece by piece below),
 * and no smaller than what the first conv's forward holds at once. */
static void test_cnn_arena(const hfl_backend *be) {
    enum { B = 4 };
    hfl_model_spec s;
    hfl_model_builtin("cnn", &s, NULL);
    hfl_trainer *t = hfl_trainer_create(&s, be, B);
    size_t f = sizeof(float), P = (s.n_params * f + 63) / 64 * 64;
    size_t want = 3 * P                      /* params, grads, momentum */
                  + B * 784 * f              /* input */
                  + B * 25088 * f            /* conv1 (its ReLU writes over it) */
                  + B * 6272 * f             /* pool1 */
                  + B * 12544 * f            /* conv2 (ReLU in place) */
                  + B * 3136 * f             /* pool2 */
                  + B * 512 * f              /* dense1 (ReLU in place) */
                  + 192                      /* dense2 logits, B*10 floats = 160, aligned up */
                  + 2 * B * 25088 * f        /* gradient ping-pong, widest activation */
                  + 800 * 196 * f            /* conv2's columns, the largest workspace */
                  + 64;                      /* labels */
    size_t got = hfl_trainer_device_bytes(t);
    CHECK(got == hfl_trainer_plan(t)->arena_bytes);
    CHECK(got <= want);
    CHECK(got >= 2 * P + B * 784 * f + B * 25088 * f); /* params, momentum, input, conv1 output */
    hfl_trainer_free(t);
}

/* The loss of a forward pass run layer by layer through the ops tables
 * (as the trainer does), recording its kinks: each ReLU's active mask and
 * each max-pool window's argmax. pat must hold pattern_bytes() bytes. */
static size_t pattern_bytes(const hfl_model_spec *s, int b) {
    size_t n = 0;
    for (int l = 0; l < s->n_layers; l++)
        if (s->layers[l].kind == HFL_LAYER_RELU || s->layers[l].kind == HFL_LAYER_MAXPOOL2D)
            n += (size_t)b * s->layers[l].out;
    return n;
}

static double forward_pattern(const hfl_model_spec *s, const float *p, const float *x,
                              const int32_t *y, int b, unsigned char *pat) {
    const hfl_backend *be = hfl_backend_cpu();
    size_t widest = (size_t)s->in_dim, ws = 1;
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer_ops *ops = hfl_layer_ops_for(s->layers[l].kind);
        if ((size_t)s->layers[l].out > widest) widest = (size_t)s->layers[l].out;
        if (ops->fwd_workspace_bytes(&s->layers[l], HFL_PREC_FP32, b) > ws)
            ws = ops->fwd_workspace_bytes(&s->layers[l], HFL_PREC_FP32, b);
    }
    float *a = hfl_malloc(widest * b * sizeof(float)), *o = hfl_malloc(widest * b * sizeof(float));
    void *w = hfl_malloc(ws);
    memcpy(a, x, (size_t)b * s->in_dim * sizeof(float));
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer *ly = &s->layers[l];
        hfl_layer_ops_for(ly->kind)->forward(be, HFL_PREC_FP32, ly, p + ly->param_off, a, o, NULL,
                                             w, b);
        if (ly->kind == HFL_LAYER_RELU) {
            for (size_t i = 0; i < (size_t)b * ly->out; i++) *pat++ = o[i] > 0.0f;
        } else if (ly->kind == HFL_LAYER_MAXPOOL2D) {
            /* which tap of each window holds the output value (first one) */
            hfl_window_geom g = hfl_layer_geom(ly);
            for (int q = 0; q < b * g.c; q++)
                for (int oy = 0; oy < g.ho; oy++)
                    for (int ox = 0; ox < g.wo; ox++) {
                        const float *plane = a + (size_t)q * g.h * g.w;
                        float v = o[((size_t)q * g.ho + oy) * g.wo + ox];
                        unsigned char tap = 255;
                        for (int t = g.k * g.k - 1; t >= 0; t--) {
                            int iy = oy * g.s + t / g.k, ix = ox * g.s + t % g.k;
                            if (iy < g.h && ix < g.w && plane[iy * g.w + ix] == v) tap = (unsigned char)t;
                        }
                        *pat++ = tap;
                    }
        }
        float *t = a;
        a = o;
        o = t;
    }
    hfl_step_scalars sc = {.loss_scale = 1.0f, .finite = 1};
    be->softmax_xent(HFL_PREC_FP32, a, y, NULL, b, s->n_classes, b, &sc, NULL);
    double loss = (float)(sc.loss_sum / b);
    free(a);
    free(o);
    free(w);
    return loss;
}

/* Central differences against a forward and backward pass's gradient on the parameters
 * listed in idx (or all when idx == NULL). A perturbation that flips a ReLU
 * or moves a pool's argmax crosses a kink, where a difference is no
 * derivative: such parameters are skipped, and at least min_checked must
 * remain (the full cnn has ~40k ReLUs, so a third of its draws hit one). */
static int fd_check(hfl_trainer *t, const hfl_model_spec *s, float *p, const float *x,
                    const int32_t *y, int b, const size_t *idx, size_t n_idx, size_t min_checked) {
    size_t pb = pattern_bytes(s, b);
    unsigned char *p0 = hfl_malloc(pb + 1), *p1 = hfl_malloc(pb + 1);
    float *g = hfl_malloc(s->n_params * sizeof(float));
    hfl_trainer_set_params(t, p);
    float loss = hfl_trainer_accumulate(t, x, y, b, b);
    hfl_trainer_get_grads(t, g);
    CHECK(forward_pattern(s, p, x, y, b, p0) == loss); /* the same ops in the same order */
    int bad = 0;
    size_t n = idx ? n_idx : s->n_params, skipped = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = idx ? idx[k] : k;
        const float eps = 2e-3f;
        float keep = p[i];
        p[i] = keep + eps;
        double lp = forward_pattern(s, p, x, y, b, p1);
        int kink = memcmp(p0, p1, pb) != 0;
        p[i] = keep - eps;
        double lm = forward_pattern(s, p, x, y, b, p1);
        kink |= memcmp(p0, p1, pb) != 0;
        p[i] = keep;
        if (kink) {
            skipped++;
            continue;
        }
        double fd = (lp - lm) / (2.0 * eps);
        if (fabs(g[i] - fd) > 1e-4 + 1e-2 * fabs(fd)) {
            if (bad++ < 5) fprintf(stderr, "param %zu: grad %.7g, fd %.7g\n", i, g[i], fd);
        }
    }
    printf("fd check: %zu parameters, %zu skipped at a kink, %d wrong\n", n, skipped, bad);
    CHECK(n - skipped >= min_checked);
    free(g);
    free(p0);
    free(p1);
    return bad;
}

/* Every parameter of a small two-convolution CNN with a strided layer. */
static void test_small_cnn_gradient(const hfl_backend *be) {
    static const char *spec_json =
        "{\"name\": \"tiny\", \"input\": [2, 8, 8], \"layers\": ["
        "{\"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"pad\": 1}, {\"type\": \"relu\"},"
        "{\"type\": \"maxpool2d\", \"size\": 2},"
        "{\"type\": \"conv2d\", \"out\": 6, \"kernel\": 3, \"pad\": 1, \"stride\": 2}, {\"type\": \"relu\"},"
        "{\"type\": \"dense\", \"out\": 8}, {\"type\": \"relu\"}, {\"type\": \"dense\", \"out\": 3}]}";
    enum { B = 3 };
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_model_spec_from_json(spec_json, strlen(spec_json), &s, err) == 0);
    CHECK(s.n_params == 76 + 222 + (24 * 8 + 8) + 27);
    hfl_trainer *t = hfl_trainer_create(&s, be, B);
    float *p = hfl_malloc(s.n_params * sizeof(float)), x[B * 128];
    int32_t y[B] = {0, 2, 1};
    hfl_model_init_params(&s, p, 77);
    for (int i = 0; i < B * 128; i++) x[i] = 2.0f * rnd(2, i);
    CHECK(fd_check(t, &s, p, x, y, B, NULL, 0, 400) == 0);
    hfl_trainer_free(t);
    free(p);
}

/* The full cnn: the largest |grad| of each layer's block and a spread of
 * others. Every first-convolution parameter reaches ~25k ReLUs per sample,
 * so its perturbations always cross a kink and get skipped; the small CNN
 * above checks a first convolution on every parameter instead. */
static void test_cnn_gradient(const hfl_backend *be) {
    enum { B = 2 };
    hfl_model_spec s;
    hfl_model_builtin("cnn", &s, NULL);
    hfl_trainer *t = hfl_trainer_create(&s, be, B);
    float *p = hfl_malloc(s.n_params * sizeof(float)), *g = hfl_malloc(s.n_params * sizeof(float));
    float x[B * 784];
    int32_t y[B] = {4, 8};
    hfl_model_init_params(&s, p, 2024);
    for (int i = 0; i < B * 784; i++) x[i] = rnd(3, i);
    hfl_trainer_set_params(t, p);
    hfl_trainer_accumulate(t, x, y, B, B);
    hfl_trainer_get_grads(t, g);
    size_t idx[64];
    size_t n = 0;
    for (int l = 0; l < s.n_layers; l++) {
        const hfl_layer *ly = &s.layers[l];
        if (!ly->n_params) continue;
        size_t best = ly->param_off;
        for (size_t i = ly->param_off; i < ly->param_off + ly->n_params; i++)
            if (fabsf(g[i]) > fabsf(g[best])) best = i;
        idx[n++] = best;
        idx[n++] = ly->param_off + ly->n_params - 1; /* the last bias */
        for (int k = 0; k < 12; k++) idx[n++] = ly->param_off + (size_t)(k * 7919 + 13) % ly->n_params;
    }
    CHECK(fd_check(t, &s, p, x, y, B, idx, n, 20) == 0);
    hfl_trainer_free(t);
    free(p);
    free(g);
}

/* 12x12 images holding one 3x3 stroke (class 0 horizontal, 1 vertical, 2
 * diagonal, 3 anti-diagonal) at a random place, plus noise. */
static void make_strokes(float *x, int32_t *y, int n, uint32_t stream) {
    for (int i = 0; i < n; i++) {
        uint32_t r = hfl_philox_u32(8, stream, 0, 0, 0, i);
        int cls = (int)(r % 4), oy = (int)((r >> 4) % 10), ox = (int)((r >> 12) % 10);
        float *img = x + (size_t)i * 144;
        for (int j = 0; j < 144; j++) img[j] = 0.3f * rnd(stream, (size_t)i * 144 + j);
        for (int k = 0; k < 3; k++) {
            int dy = cls == 0 ? 1 : k, dx = cls == 1 ? 1 : (cls == 3 ? 2 - k : k);
            img[(oy + dy) * 12 + ox + dx] += 1.0f;
        }
        y[i] = cls;
    }
}

static void test_small_cnn_learns(const hfl_backend *be) {
    static const char *spec_json =
        "{\"name\": \"strokes\", \"input\": [1, 12, 12], \"layers\": ["
        "{\"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"pad\": 1}, {\"type\": \"relu\"},"
        "{\"type\": \"maxpool2d\", \"size\": 2},"
        "{\"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"pad\": 1}, {\"type\": \"relu\"},"
        "{\"type\": \"maxpool2d\", \"size\": 2}, {\"type\": \"dense\", \"out\": 4}]}";
    enum { N = 512, B = 32, STEPS = 400 };
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_model_spec_from_json(spec_json, strlen(spec_json), &s, err) == 0);
    float *x = hfl_malloc(N * 144 * sizeof(float)), *xt = hfl_malloc(N * 144 * sizeof(float));
    int32_t y[N], yt[N];
    make_strokes(x, y, N, 40);
    make_strokes(xt, yt, N, 41); /* held out */
    float *p = hfl_malloc(s.n_params * sizeof(float));
    hfl_model_init_params(&s, p, 9);
    hfl_trainer *t = hfl_trainer_create(&s, be, B);
    hfl_trainer_set_params(t, p);
    float acc0, acc, acc_test;
    hfl_trainer_evaluate(t, xt, yt, N, &acc0);
    for (int k = 0; k < STEPS; k++) {
        int off = (k * B) % N;
        hfl_trainer_step(t, x + (size_t)off * 144, y + off, B, 0.05f, 0.9f, 0.0f);
    }
    float loss = hfl_trainer_evaluate(t, x, y, N, &acc);
    hfl_trainer_evaluate(t, xt, yt, N, &acc_test);
    printf("strokes: held-out accuracy %.3f -> %.3f (train %.3f, loss %.4f)\n", acc0, acc_test, acc, loss);
    CHECK(acc0 < 0.5f);
    CHECK(acc_test > 0.9f);
    hfl_trainer_free(t);
    free(x);
    free(xt);
    free(p);
}

static void case_json_matches_builtins(void) { test_json_matches_builtins(hfl_backend_cpu()); }
static void case_cnn_arena(void) { test_cnn_arena(hfl_backend_cpu()); }
static void case_small_cnn_gradient(void) { test_small_cnn_gradient(hfl_backend_cpu()); }
static void case_cnn_gradient(void) { test_cnn_gradient(hfl_backend_cpu()); }
static void case_small_cnn_learns(void) { test_small_cnn_learns(hfl_backend_cpu()); }

static const check_case cases[] = {
    {"cnn_spec", test_cnn_spec},
    {"json_matches_builtins", case_json_matches_builtins},
    {"cnn_init", test_cnn_init},
    {"cnn_arena", case_cnn_arena},
    {"small_cnn_gradient", case_small_cnn_gradient},
    {"cnn_gradient", case_cnn_gradient},
    {"small_cnn_learns", case_small_cnn_learns},
};

int main(int argc, char **argv) {
    return check_run("test_cnn", cases, CHECK_CASES(cases), argc, argv);
}
