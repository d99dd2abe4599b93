/* thread_hd.h: the thread bodies of the CUDA backend's kernels.
 *
 * A CUDA kernel of kernels/cuda/ is three lines: its flat thread index, a
 * bounds check, and a call to one of these. Each body maps the index to the
 * element (or column, channel, row) it writes and calls the formula bodies
 * of kernels/ops_hd.h, so the GPU's indexing is plain C that the CPU tests
 * (tests/kernels/test_thread_bodies.c) run over every index and compare with
 * the CPU backend bit for bit. Only launching, and the block reductions of
 * the loss and of the finite flag, stay GPU-only.
 *
 * Conventions: the index `i` runs over [0, count) where count is named in
 * each comment; a body writes only the elements of its own index (no
 * atomics, no ordering between threads); sizes and pointers come as plain
 * arguments, geometry by value (kernels/geom.h). Sums run in the order the
 * CPU backend uses, so both round alike:
 * - bias_grad: a column's rows r = 0, 1, ... added one by one onto the
 *   existing dbias value (cpu_bias_grad's row loop, seen from one column);
 * - channel_bias_grad: hfl_op_channel_sum from 0, then added to dbias;
 * - col2im and maxpool backward: the gather bodies, which sum in the order of
 *   the CPU's scatter loops (see cpu/backend_cpu.c). */
#ifndef HFL_THREAD_HD_H
#define HFL_THREAD_HD_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/geom.h"
#include "kernels/hd.h"
#include "kernels/ops_hd.h"

/* ---- elementwise: i < n, the op's element count ---- */

static inline HFL_HD void hfl_thread_fill(size_t i, float *p, float value) { p[i] = value; }

/* i < rows * cols: y[r, c] += bias[c] */
static inline HFL_HD void hfl_thread_bias_add(size_t i, float *y, const float *bias, int cols) {
    y[i] = hfl_op_bias_add(y[i], bias[i % (size_t)cols]);
}

/* i < n * c * hw: y[s, ch, j] += bias[ch] */
static inline HFL_HD void hfl_thread_channel_bias_add(size_t i, float *y, const float *bias, int c,
                                                      int hw) {
    y[i] = hfl_op_bias_add(y[i], bias[(i / (size_t)hw) % (size_t)c]);
}

static inline HFL_HD void hfl_thread_relu_fwd(size_t i, float *y, const float *x) {
    y[i] = hfl_op_relu(x[i]);
}

static inline HFL_HD void hfl_thread_relu_bwd(size_t i, float *dx, const float *dy,
                                              const float *y) {
    dx[i] = hfl_op_relu_bwd(dy[i], y[i]);
}

static inline HFL_HD void hfl_thread_relu_fwd_lp(size_t i, hfl_precision lp, uint16_t *y,
                                                 const uint16_t *x) {
    y[i] = hfl_op_relu_lp(lp, x[i]);
}

static inline HFL_HD void hfl_thread_relu_bwd_lp(size_t i, hfl_precision lp, uint16_t *dx,
                                                 const uint16_t *dy, const uint16_t *y) {
    dx[i] = hfl_op_relu_bwd_lp(lp, dy[i], y[i]);
}

static inline HFL_HD void hfl_thread_round_lp(size_t i, hfl_precision lp, uint16_t *dst,
                                              const float *src) {
    dst[i] = hfl_op_narrow(lp, src[i]);
}

static inline HFL_HD void hfl_thread_widen(size_t i, hfl_precision lp, float *dst,
                                           const uint16_t *src) {
    dst[i] = hfl_op_widen(lp, src[i]);
}

/* SGD on element i (v untouched, and may be NULL, when momentum == 0). Two
 * calls rather than one through `momentum ? &v[i] : &unused`: a pointer that
 * may point at a local puts the local in a CUDA thread's stack frame. */
static inline HFL_HD void hfl_thread_sgd_step(size_t i, float *w, float *v, const float *g,
                                              float lr, float momentum, float wd) {
    if (momentum != 0.0f) {
        w[i] = hfl_op_sgd(w[i], &v[i], g[i], lr, momentum, wd);
    } else {
        float unused = 0.0f;
        w[i] = hfl_op_sgd(w[i], &unused, g[i], lr, 0.0f, wd);
    }
}

/* FedProx: g[i] += mu * (w[i] - anchor[i]). */
static inline HFL_HD void hfl_thread_prox_grad(size_t i, float *g, const float *w,
                                               const float *anchor, float mu) {
    g[i] = hfl_op_prox_grad(g[i], w[i], anchor[i], mu);
}

/* SGD on the fp32 master weight, then its 2-byte working copy. */
static inline HFL_HD void hfl_thread_sgd_step_lp(size_t i, hfl_precision lp, float *master,
                                                 float *v, const float *g, uint16_t *w, float lr,
                                                 float momentum, float wd) {
    hfl_thread_sgd_step(i, master, v, g, lr, momentum, wd);
    w[i] = hfl_op_narrow(lp, master[i]);
}

/* g[i] *= inv_scale; returns whether the result is finite (the caller ANDs
 * the flags; inv_scale = 1.0f / sc->loss_scale on both backends). */
static inline HFL_HD int hfl_thread_unscale(size_t i, float *g, float inv_scale) {
    int finite = 1;
    g[i] = hfl_op_unscale(g[i], inv_scale, &finite);
    return finite;
}

/* ---- GEMM bias (CUDA's gemm_lp; the CPU adds the bias inside its tiles) ---- */

/* i < m * n: C[r, c] (2-byte, leading dimension ldc) := the bias of its row
 * or column, so that a GEMM with beta = 1 rounds acc + bias once. */
static inline HFL_HD void hfl_thread_bias_fill_lp(size_t i, uint16_t *c, int ldc, int n,
                                                  const uint16_t *bias, int bias_axis) {
    size_t r = i / (size_t)n, q = i % (size_t)n;
    c[r * (size_t)ldc + q] = bias[bias_axis == HFL_BIAS_ROW ? r : q];
}

/* i < count * m * n: hfl_thread_bias_fill_lp for GEMM s = i / (m * n) of a
 * strided batch, whose C starts at c + s * stride_c (gemm_lp_strided). */
static inline HFL_HD void hfl_thread_bias_fill_lp_strided(size_t i, uint16_t *c, int ldc, int m,
                                                          int n, long long stride_c,
                                                          const uint16_t *bias, int bias_axis) {
    size_t per = (size_t)m * n, s = i / per;
    hfl_thread_bias_fill_lp(i % per, c + (long long)s * stride_c, ldc, n, bias, bias_axis);
}

/* A 2-byte C with a bias and beta != 0 (a GPT block's residual projections)
 * goes through an fp32 tile t, so that it is rounded once, after the bias,
 * as the CPU does: t = widen(C) (this body), then the GEMM into t with beta,
 * then C = round(t + bias) (hfl_thread_bias_round_lp). i < m * n. */
static inline HFL_HD void hfl_thread_widen_tile_lp(size_t i, hfl_precision lp, float *t, int ldt,
                                                   const uint16_t *c, int ldc, int n) {
    size_t r = i / (size_t)n, q = i % (size_t)n;
    t[r * (size_t)ldt + q] = hfl_op_widen(lp, c[r * (size_t)ldc + q]);
}

/* i < m * n: C[r, c] := round(t[r, c] + bias), the one rounding of the tile
 * path above (the CPU's cpu_gemm_lp adds the bias and rounds the same way). */
static inline HFL_HD void hfl_thread_bias_round_lp(size_t i, hfl_precision lp, uint16_t *c,
                                                   int ldc, const float *t, int ldt, int n,
                                                   const uint16_t *bias, int bias_axis) {
    size_t r = i / (size_t)n, q = i % (size_t)n;
    float b = hfl_op_widen(lp, bias[bias_axis == HFL_BIAS_ROW ? r : q]);
    c[r * (size_t)ldc + q] = hfl_op_narrow(lp, hfl_op_bias_add(t[r * (size_t)ldt + q], b));
}

/* i < m * n: an fp32 C[r, c] += the widened bias, after the GEMM (the CPU's
 * order: alpha AB + beta C first, then the bias). */
static inline HFL_HD void hfl_thread_bias_add_f32(size_t i, hfl_precision lp, float *c, int ldc,
                                                  int n, const uint16_t *bias, int bias_axis) {
    size_t r = i / (size_t)n, q = i % (size_t)n;
    float *at = c + r * (size_t)ldc + q;
    *at = hfl_op_bias_add(*at, hfl_op_widen(lp, bias[bias_axis == HFL_BIAS_ROW ? r : q]));
}

/* ---- reductions with one thread per output ---- */

/* col < cols: dbias[col] += dy[0, col] + dy[1, col] + ..., one row at a time. */
static inline HFL_HD void hfl_thread_bias_grad(size_t col, float *dbias, const float *dy, int rows,
                                               int cols) {
    float acc = dbias[col];
    for (int r = 0; r < rows; r++) acc += dy[(size_t)r * cols + col];
    dbias[col] = acc;
}

static inline HFL_HD void hfl_thread_bias_grad_lp(size_t col, hfl_precision lp, float *dbias,
                                                  const uint16_t *dy, int rows, int cols) {
    float acc = dbias[col];
    for (int r = 0; r < rows; r++) acc += hfl_op_widen(lp, dy[(size_t)r * cols + col]);
    dbias[col] = acc;
}

/* ch < c: dbias[ch] += the channel's sum over samples and positions. */
static inline HFL_HD void hfl_thread_channel_bias_grad(size_t ch, float *dbias, const float *dy,
                                                       int n, int c, int hw) {
    dbias[ch] += hfl_op_channel_sum(dy, n, c, hw, (int)ch);
}

static inline HFL_HD void hfl_thread_channel_bias_grad_lp(size_t ch, hfl_precision lp,
                                                          float *dbias, const uint16_t *dy, int n,
                                                          int c, int hw) {
    dbias[ch] += hfl_op_channel_sum_lp(lp, dy, n, c, hw, (int)ch);
}

/* ---- convolution and pooling over n samples [n, C, H, W] ---- */

/* The coordinates of column entry i of im2col's [n, C*k*k, ho*wo] output. */
typedef struct {
    size_t sample;
    int ci, ky, kx, oy, ox;
} hfl_col_index;

static inline HFL_HD hfl_col_index hfl_thread_col_index(size_t i, const hfl_window_geom *g) {
    hfl_col_index at;
    at.ox = (int)(i % (size_t)g->wo);
    i /= (size_t)g->wo;
    at.oy = (int)(i % (size_t)g->ho);
    i /= (size_t)g->ho;
    at.kx = (int)(i % (size_t)g->k);
    i /= (size_t)g->k;
    at.ky = (int)(i % (size_t)g->k);
    i /= (size_t)g->k;
    at.ci = (int)(i % (size_t)g->c);
    at.sample = i / (size_t)g->c;
    return at;
}

/* i < n * C*k*k * ho*wo: one column entry, copied from x or 0 (padding). */
static inline HFL_HD void hfl_thread_im2col(size_t i, float *cols, const float *x,
                                            hfl_window_geom g) {
    hfl_col_index at = hfl_thread_col_index(i, &g);
    long src = hfl_op_im2col_src(&g, at.ci, at.ky, at.kx, at.oy, at.ox);
    cols[i] = src < 0 ? 0.0f : x[at.sample * (size_t)g.c * g.h * g.w + (size_t)src];
}

/* im2col of 2-byte x into 2-byte columns (a copy; 0x0000 in the padding). */
static inline HFL_HD void hfl_thread_im2col_lp(size_t i, uint16_t *cols, const uint16_t *x,
                                               hfl_window_geom g) {
    hfl_col_index at = hfl_thread_col_index(i, &g);
    long src = hfl_op_im2col_src(&g, at.ci, at.ky, at.kx, at.oy, at.ox);
    cols[i] = src < 0 ? (uint16_t)0 : x[at.sample * (size_t)g.c * g.h * g.w + (size_t)src];
}

/* The coordinates of element i of an [n * planes, rows, cols] tensor. */
typedef struct {
    size_t plane; /* sample * channels + channel (or sample, for col2im's [C, H, W]) */
    int y, x;
} hfl_plane_index;

static inline HFL_HD hfl_plane_index hfl_thread_plane_index(size_t i, int rows, int cols) {
    hfl_plane_index at;
    at.x = (int)(i % (size_t)cols);
    i /= (size_t)cols;
    at.y = (int)(i % (size_t)rows);
    at.plane = i / (size_t)rows;
    return at;
}

/* i < n * C * H * W: input element i, the sum of the column entries copied from it. */
static inline HFL_HD float hfl_thread_col2im_sum(size_t i, const float *cols, hfl_window_geom g) {
    hfl_plane_index at = hfl_thread_plane_index(i, g.h, g.w); /* plane = sample * C + ci */
    size_t sample = at.plane / (size_t)g.c;
    int ci = (int)(at.plane % (size_t)g.c);
    size_t col_size = (size_t)g.c * g.k * g.k * g.ho * g.wo;
    return hfl_op_col2im(cols + sample * col_size, &g, ci, at.y, at.x);
}

static inline HFL_HD void hfl_thread_col2im(size_t i, float *dx, const float *cols,
                                            hfl_window_geom g) {
    dx[i] = hfl_thread_col2im_sum(i, cols, g);
}

/* fp32 columns summed in fp32, rounded once to lp. */
static inline HFL_HD void hfl_thread_col2im_lp(size_t i, hfl_precision lp, uint16_t *dx,
                                               const float *cols, hfl_window_geom g) {
    dx[i] = hfl_op_narrow(lp, hfl_thread_col2im_sum(i, cols, g));
}

/* i < n * C * ho * wo: the window maximum (the first maximum, padding never wins). */
static inline HFL_HD void hfl_thread_maxpool_fwd(size_t i, float *y, const float *x,
                                                 hfl_window_geom g) {
    hfl_plane_index at = hfl_thread_plane_index(i, g.ho, g.wo);
    const float *xp = x + at.plane * (size_t)g.h * g.w;
    y[i] = xp[hfl_op_maxpool_argmax(xp, &g, at.y, at.x)];
}

static inline HFL_HD void hfl_thread_maxpool_fwd_lp(size_t i, hfl_precision lp, uint16_t *y,
                                                    const uint16_t *x, hfl_window_geom g) {
    hfl_plane_index at = hfl_thread_plane_index(i, g.ho, g.wo);
    const uint16_t *xp = x + at.plane * (size_t)g.h * g.w;
    y[i] = xp[hfl_op_maxpool_argmax_lp(lp, xp, &g, at.y, at.x)];
}

/* i < n * C * H * W: the dy of the windows whose first maximum is input element i. */
static inline HFL_HD void hfl_thread_maxpool_bwd(size_t i, float *dx, const float *dy,
                                                 const float *x, hfl_window_geom g) {
    hfl_plane_index at = hfl_thread_plane_index(i, g.h, g.w);
    dx[i] = hfl_op_maxpool_bwd(x + at.plane * (size_t)g.h * g.w,
                               dy + at.plane * (size_t)g.ho * g.wo, &g, at.y, at.x);
}

static inline HFL_HD void hfl_thread_maxpool_bwd_lp(size_t i, hfl_precision lp, uint16_t *dx,
                                                    const uint16_t *dy, const uint16_t *x,
                                                    hfl_window_geom g) {
    hfl_plane_index at = hfl_thread_plane_index(i, g.h, g.w);
    dx[i] = hfl_op_narrow(lp, hfl_op_maxpool_bwd_lp(lp, x + at.plane * (size_t)g.h * g.w,
                                                    dy + at.plane * (size_t)g.ho * g.wo, &g, at.y,
                                                    at.x));
}

/* ---- softmax cross-entropy: one row r < rows per call ---- */

/* Row r's loss (float, as the CPU sums it into a double); dlogits' row r
 * (when not NULL) gets scale * (softmax - onehot); *is_correct its argmax hit.
 * scale = 1/rows for fp32, sc->loss_scale / rows for the 2-byte form. */
static inline HFL_HD float hfl_thread_softmax_xent(size_t r, const float *logits,
                                                   const int32_t *labels, float *dlogits, int cols,
                                                   float scale, int *is_correct) {
    return hfl_op_softmax_xent_row(logits + r * (size_t)cols, labels[r],
                                   dlogits ? dlogits + r * (size_t)cols : NULL, cols, scale,
                                   is_correct);
}

static inline HFL_HD float hfl_thread_softmax_xent_lp(size_t r, hfl_precision lp,
                                                      const uint16_t *logits,
                                                      const int32_t *labels, uint16_t *dlogits,
                                                      int cols, float scale, int *is_correct) {
    return hfl_op_softmax_xent_row_lp(lp, logits + r * (size_t)cols, labels[r],
                                      dlogits ? dlogits + r * (size_t)cols : NULL, cols, scale,
                                      is_correct);
}

#endif
