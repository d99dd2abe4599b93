/* test_conv.c: the conv2d and maxpool2d layers through their ops tables on
 * the CPU backend: conv forward against a direct (naive) convolution;
 * finite-difference checks of conv2d's dX, dW and dbias with padding and
 * strides, and of maxpool2d's dX (inputs kept apart, so no ties); the shape
 * rules, parameter layout, workspace sizes, keeps flags and FLOPs the
 * tables report. A scalar loss L = sum(out * R) with a fixed random R turns
 * each backward into a gradient checkable by central differences.
 *
 * CHUNKS: the layer run over chunks of 2, 3 and 7 samples (ly->chunk; 7 is
 * more than the batch of 5) gives the same output, dX and bias gradient bits
 * as one sample at a time, in fp32, bf16 and fp16, and touches nothing past
 * its batch or workspace: every buffer carries a tail holding 1000 that
 * inputs must not read (it would change the bits) and outputs must not
 * overwrite. Its weight gradient is one GEMM per chunk (K = chunk * ho*wo)
 * where one sample at a time accumulates per-sample GEMMs with beta = 1
 * (model/conv.c, NUMERICS): a different summation order, so it is held to
 * the bound of two fp32 evaluations of the same sum instead, each within
 * gamma_n * sum|dy x| of the exact value (computed here in double), n the
 * depth of the sum: batch * ho*wo products plus a beta addition per GEMM. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "model/layers.h"
#include "tests/check.h"
#include "util/util.h"

static float rnd(uint32_t tensor, uint64_t i) {
    return 2.0f * hfl_u01(hfl_philox_u32(23, 99, 0, 0, tensor, i)) - 1.0f;
}

/* A stand-alone layer on a (c, h, w) input, its shape derived by its table. */
static int make_layer(hfl_layer *ly, hfl_layer_kind kind, hfl_shape in, int units, int k, int s,
                      int p, char *err) {
    memset(ly, 0, sizeof *ly);
    ly->kind = kind;
    ly->units = units;
    ly->kernel = k;
    ly->stride = s;
    ly->pad = p;
    ly->in_shape = in;
    ly->in = in.c * in.h * in.w;
    const hfl_layer_ops *ops = hfl_layer_ops_for(kind);
    if (ops->infer_shape(ly, err) != 0) return -1;
    ly->out = ly->out_shape.c * ly->out_shape.h * ly->out_shape.w;
    hfl_param_tensor pt[HFL_MAX_PARAM_TENSORS];
    int nt = ops->param_tensors(ly, pt);
    for (int i = 0; i < nt; i++) ly->n_params += pt[i].count;
    return 0;
}

/* Everything one layer needs for a forward and backward on n samples. */
typedef struct {
    const hfl_layer_ops *ops;
    hfl_layer ly;
    int n;
    float *p, *x, *y, *r, *dx, *dp;
    void *ws;
} rig;

static void rig_init(rig *g, const hfl_layer *ly, int n, uint32_t seed) {
    g->ops = hfl_layer_ops_for(ly->kind);
    g->ly = *ly;
    g->n = n;
    size_t np = ly->n_params ? ly->n_params : 1;
    g->p = malloc(np * sizeof(float));
    g->dp = malloc(np * sizeof(float));
    g->x = malloc((size_t)n * ly->in * sizeof(float));
    g->dx = malloc((size_t)n * ly->in * sizeof(float));
    g->y = malloc((size_t)n * ly->out * sizeof(float));
    g->r = malloc((size_t)n * ly->out * sizeof(float));
    size_t ws = g->ops->fwd_workspace_bytes(ly, HFL_PREC_FP32, n);
    if (g->ops->bwd_workspace_bytes(ly, HFL_PREC_FP32, n) > ws)
        ws = g->ops->bwd_workspace_bytes(ly, HFL_PREC_FP32, n);
    g->ws = malloc(ws ? ws : 1);
    for (size_t i = 0; i < ly->n_params; i++) g->p[i] = 0.5f * rnd(seed, i);
    for (size_t i = 0; i < (size_t)n * ly->in; i++) g->x[i] = rnd(seed + 1, i);
    for (size_t i = 0; i < (size_t)n * ly->out; i++) g->r[i] = rnd(seed + 2, i);
}

static void rig_free(rig *g) {
    free(g->p);
    free(g->dp);
    free(g->x);
    free(g->dx);
    free(g->y);
    free(g->r);
    free(g->ws);
}

static double rig_loss(rig *g) {
    const hfl_backend *be = hfl_backend_cpu();
    g->ops->forward(be, HFL_PREC_FP32, &g->ly, g->p, g->x, g->y, NULL, g->ws, g->n);
    double s = 0.0;
    for (size_t i = 0; i < (size_t)g->n * g->ly.out; i++) s += (double)g->y[i] * g->r[i];
    return s;
}

static void rig_backward(rig *g) {
    const hfl_backend *be = hfl_backend_cpu();
    rig_loss(g);
    /* Outputs are overwritten, not accumulated: start them dirty. */
    for (size_t i = 0; i < g->ly.n_params; i++) g->dp[i] = 1e6f;
    for (size_t i = 0; i < (size_t)g->n * g->ly.in; i++) g->dx[i] = 1e6f;
    g->ops->backward(be, HFL_PREC_FP32, &g->ly, g->p, g->x, g->y, g->r, g->dx, g->dp, NULL, g->ws,
                     g->n, 0);
}

static double rig_fd(rig *g, float *v, float eps) {
    float keep = *v;
    *v = keep + eps;
    double lp = rig_loss(g);
    *v = keep - eps;
    double lm = rig_loss(g);
    *v = keep;
    return (lp - lm) / (2.0 * eps);
}

/* out[n, o, oy, ox] = b[o] + sum w[o, c, ky, kx] x[n, c, oy*s - p + ky, ox*s - p + kx]. */
static void naive_conv(const hfl_layer *ly, const float *p, const float *x, int n, double *out) {
    int C = ly->in_shape.c, H = ly->in_shape.h, W = ly->in_shape.w, K = ly->kernel;
    int O = ly->units, HO = ly->out_shape.h, WO = ly->out_shape.w;
    const float *b = p + (size_t)O * C * K * K;
    for (int i = 0; i < n; i++)
        for (int o = 0; o < O; o++)
            for (int oy = 0; oy < HO; oy++)
                for (int ox = 0; ox < WO; ox++) {
                    double s = b[o];
                    for (int c = 0; c < C; c++)
                        for (int ky = 0; ky < K; ky++)
                            for (int kx = 0; kx < K; kx++) {
                                int iy = oy * ly->stride - ly->pad + ky, ix = ox * ly->stride - ly->pad + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                s += (double)p[((o * C + c) * K + ky) * K + kx] *
                                     x[((size_t)(i * C + c) * H + iy) * W + ix];
                            }
                    out[(((size_t)i * O + o) * HO + oy) * WO + ox] = s;
                }
}

static const int conv_cases[][7] = {
    /* c, h, w, out, k, s, p */
    {3, 7, 6, 4, 5, 1, 2}, /* 'same' 5x5 */
    {2, 7, 6, 3, 3, 2, 1}, /* strided */
    {2, 5, 5, 2, 3, 1, 0}, /* 'valid' */
    {1, 4, 4, 3, 1, 1, 0}, /* 1x1 */
};

static void test_conv_forward(void) {
    enum { N = 2 };
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++) {
        const int *q = conv_cases[ci];
        hfl_layer ly;
        char err[HFL_ERR_LEN];
        CHECK(make_layer(&ly, HFL_LAYER_CONV2D, (hfl_shape){q[0], q[1], q[2]}, q[3], q[4], q[5], q[6], err) == 0);
        rig g;
        rig_init(&g, &ly, N, 10 * (uint32_t)ci);
        rig_loss(&g);
        double *want = malloc(sizeof(double) * N * ly.out);
        naive_conv(&ly, g.p, g.x, N, want);
        int bad = 0;
        for (int i = 0; i < N * ly.out; i++) bad += fabs(g.y[i] - want[i]) > 1e-5 + 1e-5 * fabs(want[i]);
        CHECK(bad == 0);
        free(want);
        rig_free(&g);
    }
}

/* Every element of dX, dW and db against central differences (conv is
 * linear in each, so the differences are exact up to float rounding). */
static void test_conv_gradients(void) {
    enum { N = 2 };
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++) {
        const int *q = conv_cases[ci];
        hfl_layer ly;
        make_layer(&ly, HFL_LAYER_CONV2D, (hfl_shape){q[0], q[1], q[2]}, q[3], q[4], q[5], q[6], NULL);
        rig g;
        rig_init(&g, &ly, N, 100 + 10 * (uint32_t)ci);
        rig_backward(&g);
        int bad = 0;
        for (size_t i = 0; i < ly.n_params; i++) {
            double fd = rig_fd(&g, &g.p[i], 1e-2f);
            if (fabs(g.dp[i] - fd) > 2e-3 + 1e-3 * fabs(fd)) {
                if (bad++ < 3) fprintf(stderr, "case %zu: dparam %zu = %g, fd %g\n", ci, i, g.dp[i], fd);
            }
        }
        for (int i = 0; i < N * ly.in; i++) {
            double fd = rig_fd(&g, &g.x[i], 1e-2f);
            if (fabs(g.dx[i] - fd) > 2e-3 + 1e-3 * fabs(fd)) {
                if (bad++ < 3) fprintf(stderr, "case %zu: dx %d = %g, fd %g\n", ci, i, g.dx[i], fd);
            }
        }
        CHECK(bad == 0);

        /* din == NULL still fills dW and db, identically. */
        float *dp = malloc(ly.n_params * sizeof(float));
        memcpy(dp, g.dp, ly.n_params * sizeof(float));
        g.ops->backward(hfl_backend_cpu(), HFL_PREC_FP32, &ly, g.p, g.x, g.y, g.r, NULL, g.dp, NULL,
                        g.ws, N, 0);
        CHECK(memcmp(dp, g.dp, ly.n_params * sizeof(float)) == 0);
        free(dp);
        rig_free(&g);
    }
}

/* Max pooling's gradient against central differences, on inputs that are a
 * shuffled ladder with steps of 0.02 (no ties, and x +- eps keeps every
 * window's maximum where it was). */
static void test_maxpool_gradient(void) {
    enum { N = 2 };
    static const int cases[][6] = {{3, 6, 6, 2, 2}, {2, 7, 5, 2, 2}, {2, 5, 6, 3, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *q = cases[ci];
        hfl_layer ly;
        char err[HFL_ERR_LEN];
        CHECK(make_layer(&ly, HFL_LAYER_MAXPOOL2D, (hfl_shape){q[0], q[1], q[2]}, 0, q[3], q[4], 0, err) == 0);
        rig g;
        rig_init(&g, &ly, N, 200 + 10 * (uint32_t)ci);
        int m = N * ly.in;
        for (int i = 0; i < m; i++) g.x[i] = 0.02f * (float)((i * 7919) % m) - 0.01f * m;
        rig_backward(&g);
        int bad = 0, routed = 0;
        for (int i = 0; i < m; i++) {
            double fd = rig_fd(&g, &g.x[i], 1e-3f);
            bad += fabs(g.dx[i] - fd) > 1e-3 + 1e-3 * fabs(fd);
            routed += g.dx[i] != 0.0f;
        }
        CHECK(bad == 0);
        CHECK(routed > 0 && routed < m); /* some inputs got gradient, some did not */
        rig_free(&g);
    }
}

static void test_tables(void) {
    char err[HFL_ERR_LEN];
    hfl_layer ly;
    /* The cnn's second convolution: 32x14x14 -> 64x14x14. */
    CHECK(make_layer(&ly, HFL_LAYER_CONV2D, (hfl_shape){32, 14, 14}, 64, 5, 1, 2, err) == 0);
    CHECK(ly.out_shape.c == 64 && ly.out_shape.h == 14 && ly.out_shape.w == 14);
    CHECK(ly.n_params == 64 * 32 * 25 + 64);
    hfl_param_tensor pt[HFL_MAX_PARAM_TENSORS];
    CHECK(hfl_conv2d_ops.param_tensors(&ly, pt) == 2);
    CHECK(strcmp(pt[0].name, "weight") == 0 && pt[0].offset == 0 && pt[0].count == 51200 && pt[0].fan_in == 800);
    CHECK(strcmp(pt[1].name, "bias") == 0 && pt[1].offset == 51200 && pt[1].count == 64 && pt[1].fan_in == 800);
    CHECK(hfl_conv2d_ops.fwd_workspace_bytes(&ly, HFL_PREC_FP32, 32) == 800 * 196 * sizeof(float));
    CHECK(hfl_conv2d_ops.bwd_workspace_bytes(&ly, HFL_PREC_FP32, 32) == 800 * 196 * sizeof(float));
    CHECK(hfl_conv2d_ops.flops(&ly) == 2ull * 64 * 196 * 800 + 64 * 196);
    CHECK(hfl_conv2d_ops.keeps == HFL_KEEP_INPUT);

    CHECK(make_layer(&ly, HFL_LAYER_MAXPOOL2D, (hfl_shape){64, 14, 14}, 0, 2, 2, 0, err) == 0);
    CHECK(ly.out_shape.c == 64 && ly.out_shape.h == 7 && ly.out_shape.w == 7 && ly.n_params == 0);
    CHECK(hfl_maxpool2d_ops.keeps == HFL_KEEP_INPUT &&
          hfl_maxpool2d_ops.fwd_workspace_bytes(&ly, HFL_PREC_FP32, 8) == 0);
    CHECK(hfl_relu_ops.keeps == HFL_KEEP_OUTPUT && hfl_relu_ops.fwd_in_place && hfl_relu_ops.bwd_in_place);
    CHECK(hfl_dense_ops.keeps == HFL_KEEP_INPUT);

    /* Odd sizes floor like PyTorch: 7x5 pooled by 2 is 3x2. */
    CHECK(make_layer(&ly, HFL_LAYER_MAXPOOL2D, (hfl_shape){1, 7, 5}, 0, 2, 2, 0, err) == 0);
    CHECK(ly.out_shape.h == 3 && ly.out_shape.w == 2);

    /* Rejections, one line each. */
    CHECK(make_layer(&ly, HFL_LAYER_CONV2D, (hfl_shape){1, 3, 3}, 4, 5, 1, 0, err) == -1);
    CHECK(strcmp(err, "a 5x5 window does not fit the 3x3 input padded by 0") == 0);
    CHECK(make_layer(&ly, HFL_LAYER_CONV2D, (hfl_shape){1, 8, 8}, 4, 3, 1, 3, err) == -1);
    CHECK(strcmp(err, "pad 3 outside [0, 2]") == 0);
    CHECK(make_layer(&ly, HFL_LAYER_CONV2D, (hfl_shape){1, 8, 8}, 0, 3, 1, 1, err) == -1);
    CHECK(strcmp(err, "out 0 outside [1, 65536]") == 0);
    CHECK(make_layer(&ly, HFL_LAYER_MAXPOOL2D, (hfl_shape){1, 8, 8}, 0, 2, 0, 0, err) == -1);
    CHECK(strcmp(err, "stride 0 outside [1, 32]") == 0);

    CHECK(hfl_layer_ops_by_name("conv2d") == &hfl_conv2d_ops);
    CHECK(hfl_layer_ops_by_name("Conv2d") == NULL);
    CHECK(hfl_layer_ops_for((hfl_layer_kind)0) == NULL && hfl_layer_ops_for((hfl_layer_kind)99) == NULL);
}

enum { CN = 5, TAIL = 4096 };

/* Elements [from, to) of a buffer of esize-byte elements := 1000. */
static void fill_k(void *buf, size_t from, size_t to, int esize) {
    for (size_t i = from; i < to; i++) {
        if (esize == 4) ((float *)buf)[i] = 1000.0f;
        else if (esize == 2) ((uint16_t *)buf)[i] = 0x447A; /* fp16 1002, bf16 1000 */
        else ((unsigned char *)buf)[i] = 0xA5;
    }
}

static int tail_ok(const void *buf, size_t from, int esize) {
    unsigned char want[TAIL * 4];
    fill_k(want, 0, TAIL, esize);
    return memcmp((const char *)buf + from * esize, want, (size_t)TAIL * esize) == 0;
}

/* A buffer of n esize-byte elements plus the tail, all 1000. */
static void *guarded(size_t n, int esize) {
    void *b = malloc((n + TAIL) * esize);
    fill_k(b, 0, n + TAIL, esize);
    return b;
}

/* One forward and backward of ly (its chunk as given) in precision prec on
 * the fixed inputs; y, dx (as stored: 4 or 2 bytes) and dp are returned. */
static void chunk_run(const hfl_layer *ly, hfl_precision prec, const float *p32, const float *x32,
                      const float *r32, void **y_out, void **dx_out, float **dp_out) {
    const hfl_backend *be = hfl_backend_cpu();
    const hfl_layer_ops *ops = hfl_layer_ops_for(ly->kind);
    int es = prec == HFL_PREC_FP32 ? 4 : 2;
    size_t nin = (size_t)CN * ly->in, nout = (size_t)CN * ly->out;
    size_t wsb = ops->fwd_workspace_bytes(ly, prec, CN),
           bw = ops->bwd_workspace_bytes(ly, prec, CN);
    if (bw > wsb) wsb = bw;
    void *p = guarded(ly->n_params, es), *x = guarded(nin, es), *r = guarded(nout, es);
    void *y = guarded(nout, es), *dx = guarded(nin, es), *ws = guarded(wsb, 1);
    float *dp = guarded(ly->n_params, 4);
    be->convert(prec, p, p32, ly->n_params);
    be->convert(prec, x, x32, nin);
    be->convert(prec, r, r32, nout);
    ops->forward(be, prec, ly, p, x, y, NULL, ws, CN);
    ops->backward(be, prec, ly, p, x, y, r, dx, dp, NULL, ws, CN, 0);
    CHECK(tail_ok(y, nout, es) && tail_ok(dx, nin, es) && tail_ok(dp, ly->n_params, 4));
    CHECK(tail_ok(ws, wsb, 1));
    free(p), free(x), free(r), free(ws);
    *y_out = y, *dx_out = dx, *dp_out = dp;
}

/* The values a type-t run computes with: v rounded to t and widened. */
static float *as_type(hfl_precision t, const float *v, size_t n) {
    float *w = malloc(n * sizeof(float));
    uint16_t h;
    for (size_t i = 0; i < n; i++) {
        if (t == HFL_PREC_FP32) w[i] = v[i];
        else hfl_st(t, &h, 0, v[i]), w[i] = hfl_ld(t, &h, 0);
    }
    return w;
}

/* dW from one sample at a time (dw0) and from chunks (dw1) against the exact
 * dW of CN samples, x and dy as type t holds them: each within gamma_n S of
 * it, S = sum |dy x| over the same terms, n = CN*hw + CN + 2 (every product
 * and every addition onto C, conservatively), u = 2^-24 (the CPU rounds to
 * nearest). Returns how many weights differ at all (0 would mean the test
 * says nothing about the order). */
static int check_dw_bound(const hfl_layer *ly, hfl_precision t, const float *x32, const float *r32,
                          const float *dw0, const float *dw1) {
    hfl_window_geom g = hfl_layer_geom(ly);
    int C = ly->in_shape.c, K = ly->kernel, hw = g.ho * g.wo, differ = 0;
    float *x = as_type(t, x32, (size_t)CN * ly->in), *dy = as_type(t, r32, (size_t)CN * ly->out);
    double n = (double)CN * hw + CN + 2, nu = n * 0x1p-24, gamma = nu / (1.0 - nu);
    for (int o = 0; o < ly->units; o++)
        for (int c = 0; c < C; c++)
            for (int ky = 0; ky < K; ky++)
                for (int kx = 0; kx < K; kx++) {
                    double exact = 0.0, S = 0.0;
                    for (int i = 0; i < CN; i++)
                        for (int oy = 0; oy < g.ho; oy++)
                            for (int ox = 0; ox < g.wo; ox++) {
                                int iy = oy * g.s - g.p + ky, ix = ox * g.s - g.p + kx;
                                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                                double v = (double)dy[((size_t)i * ly->units + o) * hw + oy * g.wo + ox] *
                                           x[(size_t)i * ly->in + ((size_t)c * g.h + iy) * g.w + ix];
                                exact += v, S += fabs(v);
                            }
                    size_t at = (((size_t)o * C + c) * K + ky) * K + kx;
                    CHECK_MSG(fabs(dw0[at] - exact) <= gamma * S && fabs(dw1[at] - exact) <= gamma * S,
                              "dW[%zu]: per sample %.9g, chunked %.9g, exact %.9g, bound %.3g", at,
                              (double)dw0[at], (double)dw1[at], exact, gamma * S);
                    differ += dw0[at] != dw1[at];
                }
    free(x), free(dy);
    return differ;
}

static void test_conv_chunks(void) {
    const hfl_precision precs[3] = {HFL_PREC_FP32, HFL_PREC_BF16, HFL_PREC_FP16};
    const int chunks[3] = {2, 3, 7};
    int differ = 0;
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++) {
        const int *q = conv_cases[ci];
        hfl_layer ly;
        make_layer(&ly, HFL_LAYER_CONV2D, (hfl_shape){q[0], q[1], q[2]}, q[3], q[4], q[5], q[6], NULL);
        rig g;
        rig_init(&g, &ly, CN, 300 + 10 * (uint32_t)ci);
        for (int pi = 0; pi < 3; pi++) {
            size_t es = precs[pi] == HFL_PREC_FP32 ? 4 : 2, nw = ly.n_params - (size_t)ly.units;
            void *y0, *dx0, *y1, *dx1;
            float *dp0, *dp1;
            ly.chunk = 0;
            chunk_run(&ly, precs[pi], g.p, g.x, g.r, &y0, &dx0, &dp0);
            for (int k = 0; k < 3; k++) {
                ly.chunk = chunks[k];
                chunk_run(&ly, precs[pi], g.p, g.x, g.r, &y1, &dx1, &dp1);
                CHECK(memcmp(y0, y1, CN * ly.out * es) == 0);
                CHECK(memcmp(dx0, dx1, CN * ly.in * es) == 0);
                CHECK(memcmp(dp0 + nw, dp1 + nw, (size_t)ly.units * sizeof(float)) == 0); /* bias */
                differ += check_dw_bound(&ly, precs[pi], g.x, g.r, dp0, dp1);
                free(y1), free(dx1), free(dp1);
            }
            free(y0), free(dx0), free(dp0);
        }
        rig_free(&g);
    }
    printf("conv chunks: %d chunked weight gradients differ in bits from one sample at a time, "
           "all within the bound\n", differ);
}

static const check_case cases[] = {
    {"conv_chunks", test_conv_chunks},
    {"conv_forward", test_conv_forward},
    {"conv_gradients", test_conv_gradients},
    {"maxpool_gradient", test_maxpool_gradient},
    {"tables", test_tables},
};

int main(int argc, char **argv) {
    return check_run("test_conv", cases, CHECK_CASES(cases), argc, argv);
}
