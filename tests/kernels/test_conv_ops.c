/* test_conv_ops.c: the CPU backend's convolution and pooling ops against
 * definitions: im2col entry by entry for several (k, stride, pad) windows,
 * col2im as im2col's adjoint (<col2im(y), x> == <y, im2col(x)>) and as a
 * coverage count, max pooling forward and backward (first-max tie rule,
 * overlapping windows against a scatter reference), that the CPU backend's
 * scatter loops give the same bits as the gather-form bodies of ops_hd.h a
 * GPU thread runs, and the per-channel bias (a strided gemm's row bias) and gradient. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/geom.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "tests/check.h"

static float rnd(uint32_t tensor, uint64_t i) {
    return 2.0f * hfl_u01(hfl_philox_u32(17, 99, 0, 0, tensor, i)) - 1.0f;
}

static const int geoms[][6] = {
    /* c, h, w, k, s, p */
    {2, 5, 6, 3, 1, 1}, {3, 7, 7, 5, 1, 2}, {2, 7, 6, 3, 2, 1},
    {1, 6, 8, 2, 2, 0}, {2, 4, 5, 4, 3, 3}, {1, 1, 1, 1, 1, 0},
};
#define N_GEOMS (int)(sizeof geoms / sizeof geoms[0])

static hfl_window_geom geom_at(int i) {
    const int *q = geoms[i];
    return hfl_window_geom_make(q[0], q[1], q[2], q[3], q[4], q[5]);
}

static void test_geom(void) {
    hfl_window_geom g = hfl_window_geom_make(1, 28, 28, 5, 1, 2); /* 'same' */
    CHECK(g.ho == 28 && g.wo == 28);
    g = hfl_window_geom_make(32, 28, 28, 2, 2, 0);
    CHECK(g.ho == 14 && g.wo == 14);
    g = hfl_window_geom_make(1, 7, 6, 3, 2, 1); /* floor((7 + 2 - 3) / 2) + 1 = 4; (6 - 1) / 2 + 1 = 3 */
    CHECK(g.ho == 4 && g.wo == 3);
    g = hfl_window_geom_make(1, 3, 3, 5, 1, 0); /* does not fit */
    CHECK(g.ho < 1 && g.wo < 1);
}

static void test_im2col(const hfl_backend *be) {
    enum { N = 2 };
    for (int gi = 0; gi < N_GEOMS; gi++) {
        hfl_window_geom g = geom_at(gi);
        int in_size = g.c * g.h * g.w, rows = g.c * g.k * g.k, plane = g.ho * g.wo;
        float *x = malloc(sizeof(float) * N * in_size), *cols = malloc(sizeof(float) * N * rows * plane);
        for (int i = 0; i < N * in_size; i++) x[i] = rnd(1, i);
        for (int i = 0; i < N * rows * plane; i++) cols[i] = 99.0f;
        be->im2col(HFL_PREC_FP32, cols, x, N, g);
        int bad = 0;
        for (int n = 0; n < N; n++)
            for (int ci = 0; ci < g.c; ci++)
                for (int ky = 0; ky < g.k; ky++)
                    for (int kx = 0; kx < g.k; kx++)
                        for (int oy = 0; oy < g.ho; oy++)
                            for (int ox = 0; ox < g.wo; ox++) {
                                int iy = oy * g.s - g.p + ky, ix = ox * g.s - g.p + kx;
                                int inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
                                float want = inside ? x[n * in_size + (ci * g.h + iy) * g.w + ix] : 0.0f;
                                int row = (ci * g.k + ky) * g.k + kx;
                                /* the chunk layout [C*k*k, N*ho*wo] */
                                bad += cols[(size_t)row * N * plane + n * plane + oy * g.wo + ox] != want;
                            }
        CHECK(bad == 0);
        free(x);
        free(cols);
    }
}

/* <col2im(y), x> == <y, im2col(x)> for random x and y, and col2im overwrites. */
static void test_col2im_adjoint(const hfl_backend *be) {
    enum { N = 2 };
    for (int gi = 0; gi < N_GEOMS; gi++) {
        hfl_window_geom g = geom_at(gi);
        int in_size = N * g.c * g.h * g.w, col_size = N * g.c * g.k * g.k * g.ho * g.wo;
        float *x = malloc(sizeof(float) * in_size), *dx = malloc(sizeof(float) * in_size);
        float *y = malloc(sizeof(float) * col_size), *cx = malloc(sizeof(float) * col_size);
        for (int i = 0; i < in_size; i++) {
            x[i] = rnd(2, i);
            dx[i] = 1e6f; /* must be overwritten */
        }
        for (int i = 0; i < col_size; i++) y[i] = rnd(3, i);
        be->im2col(HFL_PREC_FP32, cx, x, N, g);
        be->col2im(HFL_PREC_FP32, dx, y, N, g);
        double lhs = 0.0, rhs = 0.0, scale = 0.0;
        for (int i = 0; i < in_size; i++) {
            lhs += (double)dx[i] * x[i];
            scale += fabs((double)dx[i] * x[i]);
        }
        for (int i = 0; i < col_size; i++) rhs += (double)y[i] * cx[i];
        CHECK_CLOSE(lhs, rhs, 1e-5 * (scale + 1.0), 0);
        free(x);
        free(dx);
        free(y);
        free(cx);
    }
}

/* col2im of all-ones columns counts the windows covering each pixel: with a
 * 3x3 'same' window on 3x3, 4 at the corners, 6 on the edges, 9 in the middle. */
static void test_col2im_coverage(const hfl_backend *be) {
    hfl_window_geom g = hfl_window_geom_make(1, 3, 3, 3, 1, 1);
    float ones[81], dx[9];
    for (int i = 0; i < 81; i++) ones[i] = 1.0f;
    be->col2im(HFL_PREC_FP32, dx, ones, 1, g);
    float want[9] = {4, 6, 4, 6, 9, 6, 4, 6, 4};
    for (int i = 0; i < 9; i++) CHECK(dx[i] == want[i]);
}

static void test_maxpool(const hfl_backend *be) {
    /* Two channels of 4x4, 2x2 windows with stride 2. Channel 1 has a tie
     * (two 5s) in its first window: the first in row-major order wins. */
    float x[32] = {1, 3, 0, 2,  /* */ 4, 2, 7, 1, /* */ 0, 0, -1, -2, /* */ -3, 1, -4, -5,
                   5, 5, 1, 1,  /* */ 2, 0, 1, 9, /* */ 8, 1, 0, 0, /* */ 1, 1, 0, 3};
    float y[8], want_y[8] = {4, 7, 1, -1, 5, 9, 8, 3};
    hfl_window_geom g = hfl_window_geom_make(2, 4, 4, 2, 2, 0);
    be->maxpool_fwd(HFL_PREC_FP32, y, x, 1, g);
    for (int i = 0; i < 8; i++) CHECK(y[i] == want_y[i]);

    float dy[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dx[32];
    for (int i = 0; i < 32; i++) dx[i] = 1e6f;
    be->maxpool_bwd(HFL_PREC_FP32, dx, dy, x, 1, g);
    float want_dx[32] = {0, 0, 0, 0, /* */ 1, 0, 2, 0, /* */ 0, 0, 4, 0, /* */ 0, 3, 0, 0,
                         5, 0, 0, 0, /* */ 0, 0, 0, 6, /* */ 7, 0, 0, 0, /* */ 0, 0, 0, 8};
    for (int i = 0; i < 32; i++) CHECK(dx[i] == want_dx[i]);
}

/* Overlapping (3x3 stride 1, pad 1) windows on random inputs against a scatter reference. */
static void test_maxpool_overlap(const hfl_backend *be) {
    enum { N = 2, C = 2, H = 5, W = 6 };
    hfl_window_geom g = hfl_window_geom_make(C, H, W, 3, 1, 1);
    CHECK(g.ho == H && g.wo == W);
    float x[N * C * H * W], y[N * C * H * W], dy[N * C * H * W], dx[N * C * H * W];
    double want[N * C * H * W] = {0};
    for (int i = 0; i < N * C * H * W; i++) {
        x[i] = rnd(4, i);
        dy[i] = rnd(5, i);
    }
    be->maxpool_fwd(HFL_PREC_FP32, y, x, N, g);
    be->maxpool_bwd(HFL_PREC_FP32, dx, dy, x, N, g);
    for (int q = 0; q < N * C; q++)
        for (int oy = 0; oy < H; oy++)
            for (int ox = 0; ox < W; ox++) {
                int best = -1;
                for (int ky = 0; ky < 3; ky++)
                    for (int kx = 0; kx < 3; kx++) {
                        int iy = oy - 1 + ky, ix = ox - 1 + kx;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        int at = q * H * W + iy * W + ix;
                        if (best < 0 || x[at] > x[best]) best = at;
                    }
                CHECK(y[q * H * W + oy * W + ox] == x[best]);
                want[best] += dy[q * H * W + oy * W + ox];
            }
    for (int i = 0; i < N * C * H * W; i++) CHECK_CLOSE(dx[i], want[i], 1e-6, 1e-6);
}

/* The backend's im2col, col2im and maxpool_bwd equal, bit for bit, the
 * per-element bodies hfl_op_im2col_src, hfl_op_col2im and hfl_op_maxpool_bwd
 * (what a CUDA thread runs). */
static void test_gather_bodies(const hfl_backend *be) {
    for (int gi = 0; gi < N_GEOMS; gi++) {
        hfl_window_geom g = geom_at(gi);
        int in_size = g.c * g.h * g.w, col_size = g.c * g.k * g.k * g.ho * g.wo;
        float *cols = malloc(sizeof(float) * col_size), *dx = malloc(sizeof(float) * in_size);
        float *want = malloc(sizeof(float) * in_size), *wcols = malloc(sizeof(float) * col_size);
        for (int i = 0; i < in_size; i++) dx[i] = rnd(9, i);
        be->im2col(HFL_PREC_FP32, cols, dx, 1, g);
        for (int ci = 0, at = 0; ci < g.c; ci++)
            for (int ky = 0; ky < g.k; ky++)
                for (int kx = 0; kx < g.k; kx++)
                    for (int oy = 0; oy < g.ho; oy++)
                        for (int ox = 0; ox < g.wo; ox++) {
                            long src = hfl_op_im2col_src(&g, ci, ky, kx, oy, ox);
                            wcols[at++] = src < 0 ? 0.0f : dx[src];
                        }
        CHECK(memcmp(cols, wcols, sizeof(float) * col_size) == 0);
        free(wcols);
        for (int i = 0; i < col_size; i++) cols[i] = rnd(6, i);
        be->col2im(HFL_PREC_FP32, dx, cols, 1, g);
        for (int ci = 0, at = 0; ci < g.c; ci++)
            for (int iy = 0; iy < g.h; iy++)
                for (int ix = 0; ix < g.w; ix++) want[at++] = hfl_op_col2im(cols, &g, g.ho * g.wo, ci, iy, ix);
        CHECK(memcmp(dx, want, sizeof(float) * in_size) == 0);
        free(cols);
        free(dx);
        free(want);
    }
    static const int pools[][3] = {{2, 2, 0}, {3, 1, 1}, {3, 2, 1}, {2, 1, 0}};
    for (int pi = 0; pi < 4; pi++) {
        hfl_window_geom g = hfl_window_geom_make(2, 7, 6, pools[pi][0], pools[pi][1], pools[pi][2]);
        int in_size = g.c * g.h * g.w, out_size = g.c * g.ho * g.wo;
        float *x = malloc(sizeof(float) * in_size), *dy = malloc(sizeof(float) * out_size);
        float *dx = malloc(sizeof(float) * in_size), *want = malloc(sizeof(float) * in_size);
        /* Coarse values so windows hold ties, which both forms must break alike. */
        for (int i = 0; i < in_size; i++) x[i] = (float)(int)(3.0f * rnd(7, i));
        for (int i = 0; i < out_size; i++) dy[i] = rnd(8, i);
        be->maxpool_bwd(HFL_PREC_FP32, dx, dy, x, 1, g);
        for (int ci = 0, at = 0; ci < g.c; ci++)
            for (int iy = 0; iy < g.h; iy++)
                for (int ix = 0; ix < g.w; ix++)
                    want[at++] = hfl_op_maxpool_bwd(HFL_PREC_FP32, x + ci * g.h * g.w,
                                                    dy + ci * g.ho * g.wo, &g, iy, ix);
        CHECK(memcmp(dx, want, sizeof(float) * in_size) == 0);
        free(x);
        free(dy);
        free(dx);
        free(want);
    }
}

static void test_channel_bias(const hfl_backend *be) {
    /* y [2 samples, 2 channels, 3 positions] */
    /* the bias of a conv's output: a strided gemm with a row bias (zero weights) */
    float y[12] = {0}, bias[2] = {1.5f, -2.0f}, zero[3] = {0};
    be->gemm_strided(HFL_PREC_FP32, 0, 0, 0, 2, 3, 1, 1.0f, zero, 1, 0, zero, 3, 0, 0.0f, y, 3, 6,
                     2, bias, HFL_BIAS_ROW, NULL);
    for (int i = 0; i < 12; i++) CHECK(y[i] == ((i / 3) % 2 == 0 ? 1.5f : -2.0f));
    float dy[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, db[2] = {100, 0};
    be->channel_bias_grad(HFL_PREC_FP32, db, dy, 2, 2, 3, 1); /* accumulates */
    CHECK(db[0] == 100.0f + 1 + 2 + 3 + 7 + 8 + 9);
    CHECK(db[1] == 4.0f + 5 + 6 + 10 + 11 + 12);
    be->channel_bias_grad(HFL_PREC_FP32, db, dy, 2, 2, 3, 0); /* overwrites */
    CHECK(db[0] == 1.0f + 2 + 3 + 7 + 8 + 9);
    CHECK(db[1] == 4.0f + 5 + 6 + 10 + 11 + 12);
}

static void case_im2col(void) { test_im2col(hfl_backend_cpu()); }
static void case_col2im_adjoint(void) { test_col2im_adjoint(hfl_backend_cpu()); }
static void case_col2im_coverage(void) { test_col2im_coverage(hfl_backend_cpu()); }
static void case_maxpool(void) { test_maxpool(hfl_backend_cpu()); }
static void case_maxpool_overlap(void) { test_maxpool_overlap(hfl_backend_cpu()); }
static void case_gather_bodies(void) { test_gather_bodies(hfl_backend_cpu()); }
static void case_channel_bias(void) { test_channel_bias(hfl_backend_cpu()); }

static const check_case cases[] = {
    {"geom", test_geom},
    {"im2col", case_im2col},
    {"col2im_adjoint", case_col2im_adjoint},
    {"col2im_coverage", case_col2im_coverage},
    {"maxpool", case_maxpool},
    {"maxpool_overlap", case_maxpool_overlap},
    {"gather_bodies", case_gather_bodies},
    {"channel_bias", case_channel_bias},
};

int main(int argc, char **argv) {
    return check_run("test_conv_ops", cases, CHECK_CASES(cases), argc, argv);
}
