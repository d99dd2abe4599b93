/* thread_hd.h: the thread bodies of the CUDA backend's kernels.
 *
 * A CUDA kernel of kernels/cuda/ is three lines: its flat thread index, a
 * bounds check, and a call to one of these. Each body maps the index to the
 * element (or column, channel, row) it writes and calls the formula bodies
 * of kernels/ops_hd.h, so the GPU's indexing is plain C that the CPU tests
 * (tests/kernels/test_thread_bodies.c) run over every index and compare with
 * the CPU backend bit for bit. Only launching, and the finite flag's block
 * reduction, stay GPU-only. The loss (cuda/loss.cu, a warp per row) is
 * built from ops_hd.h's row pieces instead, and the transformer's bodies are
 * kernels/lm_hd.h.
 *
 * Conventions: the index `i` runs over [0, count) where count is named in
 * each comment; a body writes only the elements of its own index (no
 * atomics, no ordering between threads); sizes and pointers come as plain
 * arguments, geometry by value (kernels/geom.h); tensors of activations
 * are of the op's storage type t (kernels/backend.h, STORAGE TYPES), read
 * and written through ops_hd.h's hfl_ld, hfl_st and hfl_cp, so one body
 * serves fp32, bf16 and fp16. Sums run in the order the
 * CPU backend uses, so both round alike:
 * - bias_grad: a column's rows r = 0, 1, ... added one by one onto the
 *   existing dbias value, or onto +0 when not accumulating (cpu_bias_grad's
 *   clearing and row loop, seen from one column);
 * - channel_bias_grad: the lane tree of ops_hd.h (hfl_op_channel_lane,
 *   hfl_op_tree_level), whose CPU twin is hfl_block_channel_bias_grad;
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

/* ReLU forward, on the element's bits: y = x where x > 0, else 0. A NaN
 * input maps to 0 (the comparison is false), unlike torch.relu, which
 * propagates it. */
static inline HFL_TYPED void hfl_thread_relu_fwd(size_t i, hfl_precision t, void *y,
                                                 const void *x) {
    hfl_cp_if(t, y, i, hfl_ld(t, x, i) > 0.0f, x, i);
}

/* ReLU backward from the *output* y: dx = dy where the unit was active,
 * else 0 (y > 0 exactly when x > 0, so the pre-activation need not be
 * kept); dy passes bit for bit (a NaN keeps its payload). dx may alias dy. */
static inline HFL_TYPED void hfl_thread_relu_bwd(size_t i, hfl_precision t, void *dx,
                                                 const void *dy, const void *y) {
    hfl_cp_if(t, dx, i, hfl_ld(t, y, i) > 0.0f, dy, i);
}

/* dst[i] = src[i] as type t. */
static inline HFL_TYPED void hfl_thread_convert(size_t i, hfl_precision t, void *dst,
                                                const float *src) {
    hfl_st(t, dst, i, src[i]);
}

/* dst[i] = src[i] widened to fp32 (exact). */
static inline HFL_TYPED void hfl_thread_widen(size_t i, hfl_precision t, float *dst,
                                              const void *src) {
    dst[i] = hfl_ld(t, src, i);
}

/* SGD on the fp32 master weight (v untouched, and may be NULL, when
 * momentum == 0), then w[i] = the master as type t (w may be master itself
 * in fp32). Two calls rather than one through `momentum ? &v[i] : &unused`:
 * a pointer that may point at a local puts the local in a CUDA thread's
 * stack frame. */
static inline HFL_TYPED void hfl_thread_sgd_step(size_t i, hfl_precision t, float *master, float *v,
                                                 const float *g, void *w, float lr, float momentum,
                                                 float wd) {
    float nw;
    if (momentum != 0.0f) {
        nw = hfl_op_sgd(master[i], &v[i], g[i], lr, momentum, wd);
    } else {
        float unused = 0.0f;
        nw = hfl_op_sgd(master[i], &unused, g[i], lr, 0.0f, wd);
    }
    master[i] = nw;
    hfl_st(t, w, i, nw);
}

/* AdamW on the fp32 master weight and moments (ops_hd.h's formula), then
 * w[i] = the master as type t (w may be master itself in fp32). */
static inline HFL_TYPED void hfl_thread_adamw_step(size_t i, hfl_precision t, float *master,
                                                   float *m, float *v, const float *g, void *w,
                                                   hfl_adamw_args a) {
    float wi = master[i] * (1.0f - a.lr * a.wd);
    float mi = m[i] + (1.0f - a.beta1) * (g[i] - m[i]);
    float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    float nw = wi - a.step_size * mi / (sqrtf(vi) / a.bc2_sqrt + a.eps);
    master[i] = nw;
    hfl_st(t, w, i, nw);
}

/* ---- 2-byte pairs: j < n / 2 ----
 *
 * The CUDA backend's elementwise kernels over a 2-byte type read and write
 * elements 2j and 2j + 1 with one 4-byte access per tensor
 * (cuda/elementwise.cu, PAIRS): the pair is copied into a buffer, the
 * element body above runs on the buffer at indices 0 and 1, and the result
 * is copied back, so the arithmetic is the element body's and so are the
 * bits. The buffers hold 8 bytes, so the body's fp32 arm (never taken for a
 * 2-byte t) stays inside them; the copies are memcpy's, which the compiler
 * makes register moves. The caller passes 4-byte aligned tensors. */
static inline HFL_TYPED void hfl_pair_relu_fwd(size_t j, hfl_precision t, void *y, const void *x) {
    uint16_t a[4] = {0}, b[4] = {0};
    HFL_PAIR_IN(a, x, j);
    hfl_thread_relu_fwd(0, t, b, a);
    hfl_thread_relu_fwd(1, t, b, a);
    HFL_PAIR_OUT(y, j, b);
}

static inline HFL_TYPED void hfl_pair_relu_bwd(size_t j, hfl_precision t, void *dx, const void *dy,
                                               const void *y) {
    uint16_t d[4] = {0}, v[4] = {0}, b[4] = {0};
    HFL_PAIR_IN(d, dy, j);
    HFL_PAIR_IN(v, y, j);
    hfl_thread_relu_bwd(0, t, b, d, v);
    hfl_thread_relu_bwd(1, t, b, d, v);
    HFL_PAIR_OUT(dx, j, b);
}

static inline HFL_TYPED void hfl_pair_convert(size_t j, hfl_precision t, void *dst, const float *src) {
    uint16_t b[4] = {0};
    hfl_thread_convert(0, t, b, src + 2 * j);
    hfl_thread_convert(1, t, b, src + 2 * j);
    HFL_PAIR_OUT(dst, j, b);
}

/* FedProx: g[i] += mu * (w[i] - anchor[i]). */
static inline HFL_HD void hfl_thread_prox_grad(size_t i, float *g, const float *w,
                                               const float *anchor, float mu) {
    g[i] = hfl_op_prox_grad(g[i], w[i], anchor[i], mu);
}

/* g[i] *= inv_scale; returns whether the result is finite (the caller ANDs
 * the flags; inv_scale = 1.0f / sc->loss_scale on both backends). */
static inline HFL_HD int hfl_thread_unscale(size_t i, float *g, float inv_scale) {
    int finite = 1;
    g[i] = hfl_op_unscale(g[i], inv_scale, &finite);
    return finite;
}

/* ---- GEMM bias (the CUDA gemm's; the CPU adds the bias inside its loop) ---- */

/* Element i < count * m * n of a strided batch of count m x n outputs (one
 * GEMM: count 1): GEMM s = i / (m n), row r and column q of its C, which
 * starts stride_c elements after the previous one. Returns the element's
 * offset from the first C, in elements; *b gets its bias's index. */
static inline HFL_HD size_t hfl_gemm_c_at(size_t i, int ldc, int m, int n, long long stride_c,
                                          int bias_axis, size_t *b) {
    size_t per = (size_t)m * n, s = i / per, r = i % per / (size_t)n, q = i % (size_t)n;
    *b = bias_axis == HFL_BIAS_ROW ? r : q;
    return (size_t)((long long)s * stride_c) + r * (size_t)ldc + q;
}

/* i < count * m * n: C[r, q] (of type t) := the bias of its row or column
 * (bit for bit), so that a GEMM with beta = 1 rounds acc + bias once. */
static inline HFL_TYPED void hfl_thread_bias_fill(size_t i, hfl_precision t, void *c, int ldc,
                                                  int m, int n, long long stride_c,
                                                  const void *bias, int bias_axis) {
    size_t b, at = hfl_gemm_c_at(i, ldc, m, n, stride_c, bias_axis, &b);
    hfl_cp(t, c, at, bias, b);
}

/* i < count * m * n: an fp32 C[r, q] += the (widened) bias, after the GEMM
 * (the CPU's order: alpha AB + beta C first, then the bias). */
static inline HFL_TYPED void hfl_thread_bias_add_f32(size_t i, hfl_precision t, float *c, int ldc,
                                                     int m, int n, long long stride_c,
                                                     const void *bias, int bias_axis) {
    size_t b, at = hfl_gemm_c_at(i, ldc, m, n, stride_c, bias_axis, &b);
    c[at] = hfl_op_bias_add(c[at], hfl_ld(t, bias, b));
}

/* A 2-byte C with a bias and beta != 0 (a GPT block's residual projections)
 * goes through an fp32 tile w, so that it is rounded once, after the bias,
 * as the CPU does: w = widen(C) (this body), then the GEMM into w with beta,
 * then C = round(w + bias) (hfl_thread_bias_round). i < m * n. */
static inline HFL_TYPED void hfl_thread_widen_tile(size_t i, hfl_precision t, float *w, int ldw,
                                                   const void *c, int ldc, int n) {
    size_t r = i / (size_t)n, q = i % (size_t)n;
    w[r * (size_t)ldw + q] = hfl_ld(t, c, r * (size_t)ldc + q);
}

/* i < m * n: C[r, q] := round(w[r, q] + bias), the one rounding of the tile
 * path above (the CPU's gemm adds the bias and rounds the same way). */
static inline HFL_TYPED void hfl_thread_bias_round(size_t i, hfl_precision t, void *c, int ldc,
                                                   const float *w, int ldw, int n, const void *bias,
                                                   int bias_axis) {
    size_t r = i / (size_t)n, q = i % (size_t)n;
    float b = hfl_ld(t, bias, bias_axis == HFL_BIAS_ROW ? r : q);
    hfl_st(t, c, r * (size_t)ldc + q, hfl_op_bias_add(w[r * (size_t)ldw + q], b));
}

/* ---- reductions with one thread per output ---- */

/* col < cols: dbias[col] (+)= dy[0, col] + dy[1, col] + ..., one row at a
 * time, onto dbias[col] when accumulating, else onto +0. */
static inline HFL_TYPED void hfl_thread_bias_grad(size_t col, hfl_precision t, float *dbias,
                                                  const void *dy, int rows, int cols, int accumulate) {
    float acc = accumulate ? dbias[col] : 0.0f;
    for (int r = 0; r < rows; r++) acc += hfl_ld(t, dy, (size_t)r * cols + col);
    dbias[col] = acc;
}

/* ch < c: dbias[ch] (+)= the channel's sum over samples and positions, by
 * the lane tree of ops_hd.h, run here one lane and one level at a time: the
 * CPU twin of the CUDA block (one per channel) that runs them in parallel. */
static inline HFL_TYPED void hfl_block_channel_bias_grad(size_t ch, hfl_precision t, float *dbias,
                                                         const void *dy, int n, int c, int hw,
                                                         int accumulate) {
    float p[HFL_CHANNEL_LANES];
    for (int lane = 0; lane < HFL_CHANNEL_LANES; lane++)
        p[lane] = hfl_op_channel_lane(t, dy, n, c, hw, (int)ch, lane);
    for (int half = HFL_CHANNEL_LANES / 2; half > 0; half /= 2)
        for (int j = 0; j < half; j++) hfl_op_tree_level(p, j, half);
    dbias[ch] = (accumulate ? dbias[ch] : 0.0f) + p[0]; /* +0 + p: a fill's bits, -0 included */
}

/* ---- convolution and pooling over n samples [n, C, H, W] ---- */

/* The coordinates of column entry i of im2col's [C*k*k, n*ho*wo] output
 * (the chunk layout of kernels/backend.h: a row per tap, the samples'
 * positions side by side). */
typedef struct {
    size_t sample;
    int ci, ky, kx, oy, ox;
} hfl_col_index;

static inline HFL_HD hfl_col_index hfl_thread_col_index(size_t i, const hfl_window_geom *g, int n) {
    hfl_col_index at;
    at.ox = (int)(i % (size_t)g->wo);
    i /= (size_t)g->wo;
    at.oy = (int)(i % (size_t)g->ho);
    i /= (size_t)g->ho;
    at.sample = i % (size_t)n;
    i /= (size_t)n;
    at.kx = (int)(i % (size_t)g->k);
    i /= (size_t)g->k;
    at.ky = (int)(i % (size_t)g->k);
    i /= (size_t)g->k;
    at.ci = (int)i;
    return at;
}

/* i < C*k*k * n * ho*wo: one column entry, copied from x or 0 (padding). */
static inline HFL_TYPED void hfl_thread_im2col(size_t i, hfl_precision t, void *cols, const void *x,
                                               hfl_window_geom g, int n) {
    hfl_col_index at = hfl_thread_col_index(i, &g, n);
    long src = hfl_op_im2col_src(&g, at.ci, at.ky, at.kx, at.oy, at.ox);
    if (src < 0) hfl_st(t, cols, i, 0.0f);
    else hfl_cp(t, cols, i, x, at.sample * (size_t)g.c * g.h * g.w + (size_t)src);
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

/* i < n * C * H * W: input element i, the fp32 sum of the (fp32) column
 * entries copied from it, stored once as type t. */
static inline HFL_TYPED void hfl_thread_col2im(size_t i, hfl_precision t, void *dx,
                                               const float *cols, hfl_window_geom g, int n) {
    hfl_plane_index at = hfl_thread_plane_index(i, g.h, g.w); /* plane = sample * C + ci */
    size_t sample = at.plane / (size_t)g.c, hw = (size_t)g.ho * g.wo;
    int ci = (int)(at.plane % (size_t)g.c);
    hfl_st(t, dx, i, hfl_op_col2im(cols + sample * hw, &g, (long)(n * hw), ci, at.y, at.x));
}

/* i < n * C * ho * wo: the window maximum (the first maximum, padding never wins). */
static inline HFL_TYPED void hfl_thread_maxpool_fwd(size_t i, hfl_precision t, void *y,
                                                    const void *x, hfl_window_geom g) {
    hfl_plane_index at = hfl_thread_plane_index(i, g.ho, g.wo);
    const void *xp = hfl_at(t, x, at.plane * (size_t)g.h * g.w);
    hfl_cp(t, y, i, xp, (size_t)hfl_op_maxpool_argmax(t, xp, &g, at.y, at.x));
}

/* i < n * C * H * W: the dy of the windows whose first maximum is input
 * element i, summed in fp32 and stored once. */
static inline HFL_TYPED void hfl_thread_maxpool_bwd(size_t i, hfl_precision t, void *dx,
                                                    const void *dy, const void *x,
                                                    hfl_window_geom g) {
    hfl_plane_index at = hfl_thread_plane_index(i, g.h, g.w);
    hfl_st(t, dx, i,
           hfl_op_maxpool_bwd(t, hfl_at(t, x, at.plane * (size_t)g.h * g.w),
                              hfl_at(t, dy, at.plane * (size_t)g.ho * g.wo), &g, at.y, at.x));
}

#endif
