/* lm_hd.h: the arithmetic of the transformer language model's ops (kernels/lm.h),
 * as thread bodies both backends run.
 *
 * Each `hfl_lm_thread_*` body writes the elements of its own index and
 * nothing else: the CPU backend (cpu/lm_cpu.c) calls it in a loop over the
 * index, a CUDA kernel (cuda/lm.cu) once per thread, so the GPU's indexing
 * and arithmetic are plain C that tests/kernels/test_lm_ops.c runs on every
 * machine. Layer norm and the causal softmax reduce rows (and layer norm's
 * weight gradients columns) in a fixed lane tree ("row reductions" below):
 * a CUDA warp per row, which the CPU's hfl_lm_row_* bodies emulate with the
 * same operations in the same order, so both backends round alike. The
 * embeddings' gradients sum rows r = 0, 1, ... in order (the token table's
 * by buckets of rows, one per token).
 *
 * Layouts: a batch of n sequences of T tokens is n*T rows ("tokens" r =
 * b*T + t) of C features, row-major. Attention works on heads laid out
 * [n, H, T, hs] (hs = C / H), gathered from and scattered back to the rows'
 * column blocks by the heads_* bodies, so that one strided batched GEMM of
 * count n*H computes every head's scores (llm.c's layout).
 *
 * Each body takes its tensors' storage type t (kernels/backend.h, STORAGE
 * TYPES) and reads and writes activations, tables and working weights
 * through ops_hd.h's hfl_ld and hfl_st: 2-byte operands widened exactly,
 * fp32 arithmetic in one order, each 2-byte result rounded once; layer-norm
 * statistics, parameter gradients and optimizer state are fp32 in every
 * type. So a 2-byte op's result is the fp32 op's on the widened inputs,
 * rounded.
 *
 * Formulas follow PyTorch's modules, so its autograd is the reference
 * (tests/kernels/lm_torch.py): nn.Embedding plus a learned position
 * embedding, nn.LayerNorm (eps 1e-5, biased variance), nn.GELU(approximate=
 * "tanh") (GPT-2's), causal softmax attention as
 * F.scaled_dot_product_attention(is_causal=True). */
#ifndef HFL_LM_HD_H
#define HFL_LM_HD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/hd.h"
#include "kernels/ops_hd.h"

#define HFL_LN_EPS 1e-5f

/* A token id from its float: ids are whole numbers in [0, V); anything else
 * (a loader should refuse it first) is clamped so no read leaves the table. */
static inline HFL_HD int hfl_lm_token(float x, int V) {
    if (x < (float)V) return x >= 0.0f ? (int)x : 0;
    return V - 1; /* V or more, or NaN */
}

/* ---- embeddings: i < rows * C ---- */

/* y[r, c] = wte[tok(r), c] + wpe[r % T, c] */
static inline HFL_TYPED void hfl_lm_thread_embed_fwd(size_t i, hfl_precision t, void *y,
                                                     const void *tokens, const void *wte,
                                                     const void *wpe, int T, int C, int V) {
    size_t r = i / (size_t)C, c = i % (size_t)C;
    int v = hfl_lm_token(hfl_ld(t, tokens, r), V);
    hfl_st(t, y, i, hfl_ld(t, wte, (size_t)v * C + c) + hfl_ld(t, wpe, (r % (size_t)T) * C + c));
}

/* The token embedding's gradient, dwte[v, c] (+)= the sum of dy[r, c] over
 * the rows r = 0, 1, ... whose token is v, by buckets: cuda/lm.cu runs a
 * block per token v, which deals the rows in tiles of HFL_LM_EMBED_TILE,
 * keeps the tile's rows of token v in row order (a stable compaction, whose
 * sequential twin is hfl_lm_embed_tile), and adds them column by column
 * (hfl_lm_embed_bucket_add) onto dwte[v, :], cleared first unless
 * accumulating. Each sum runs over v's rows in increasing r, the order of the
 * CPU's scatter over rows (cpu/lm_cpu.c), so both round alike; the work is
 * V * rows token reads and rows * C adds, where a thread per (v, c) scanning
 * every row did V * C * rows. */
#define HFL_LM_EMBED_TILE 256

/* list[0 .. n) = the rows r of [r0, min(r0 + HFL_LM_EMBED_TILE, rows))
 * whose token is v, in increasing r; returns n. */
static inline HFL_TYPED int hfl_lm_embed_tile(hfl_precision t, int *list, const void *tokens,
                                              int r0, int rows, int V, int v) {
    int n = 0, end = rows - r0 < HFL_LM_EMBED_TILE ? rows : r0 + HFL_LM_EMBED_TILE;
    for (int r = r0; r < end; r++)
        if (hfl_lm_token(hfl_ld(t, tokens, (size_t)r), V) == v) list[n++] = r;
    return n;
}

/* drow[c] += dy[list[0], c] + dy[list[1], c] + ..., one add at a time in
 * list order (drow: the token's row of dwte). */
static inline HFL_TYPED void hfl_lm_embed_bucket_add(size_t c, hfl_precision t, float *drow,
                                                     const void *dy, const int *list, int n,
                                                     int C) {
    float s = drow[c];
    for (int k = 0; k < n; k++) s += hfl_ld(t, dy, (size_t)list[k] * C + c);
    drow[c] = s;
}

/* i < T * C: dwpe[t, c] (+)= dy[t, c] + dy[T + t, c] + ... over the sequences */
static inline HFL_TYPED void hfl_lm_thread_embed_bwd_wpe(size_t i, hfl_precision t, float *dwpe,
                                                         const void *dy, int rows, int T, int C,
                                                         int accumulate) {
    float s = accumulate ? dwpe[i] : 0.0f;
    for (size_t at = i; at < (size_t)rows * C; at += (size_t)T * C) s += hfl_ld(t, dy, at);
    dwpe[i] = s;
}

/* ---- row reductions: HFL_LM_LANES lanes per row ----
 *
 * Layer norm's row sums, its weight gradients' column sums and the causal
 * softmax's row max, sum and dot product all reduce in one fixed order, the
 * same on both backends: the n values e = 0 .. n-1 being reduced (a row's
 * features or scores, or a column's rows) are dealt to HFL_LM_LANES lanes,
 * value e to lane e % LANES; each lane folds its values in increasing e,
 * starting from +0 (sums) or -inf (the max), so a lane with no values holds
 * that start; then the lanes' partials are combined pairwise, level by level,
 * half = LANES/2, ..., 1: p[j] = p[j] + p[j + half] for j < half (ops_hd.h's
 * hfl_op_tree_level, or hfl_lm_max_level), and the result is p[0]
 * (hfl_lm_tree_sum, hfl_lm_tree_max).
 *
 * A CUDA warp runs the lanes as its 32 threads and the levels in shared
 * memory (cuda/lm.cu): a warp per row, a block of warps per 32 columns. The
 * CPU (the hfl_lm_row_* and hfl_lm_cols_* bodies below) runs the lanes as 32
 * accumulators it walks the row with, LANES values at a time (p[l] op=
 * value(e0 + l): each lane's operations in the same order), then
 * the same levels: the same operations on the same operands, so the same
 * bits. Each value is computed by one helper (hfl_lm_ln_*, hfl_lm_sm_*) that
 * both run.
 *
 * Rounding: a value passes through at most ceil(n / LANES) - 1 + LEVELS
 * additions, so |sum - exact| <= gamma_(ceil(n/LANES) + LEVELS) * sum|value|
 * (Higham, ASNA 2nd ed., 4.2), where the sequential sum the ops ran before
 * had gamma_(n - 1). */
#define HFL_LM_LANES 32

static inline HFL_HD float hfl_lm_max2(float a, float v) { return v > a ? v : a; }

static inline HFL_HD void hfl_lm_max_level(float *p, int j, int half) {
    p[j] = hfl_lm_max2(p[j], p[j + half]);
}

/* The levels over p[0 .. LANES-1] (which they overwrite); the result. */
static inline HFL_HD float hfl_lm_tree_sum(float *p) {
    for (int half = HFL_LM_LANES / 2; half > 0; half /= 2)
        for (int j = 0; j < half; j++) hfl_op_tree_level(p, j, half);
    return p[0];
}

static inline HFL_HD float hfl_lm_tree_max(float *p) {
    for (int half = HFL_LM_LANES / 2; half > 0; half /= 2)
        for (int j = 0; j < half; j++) hfl_lm_max_level(p, j, half);
    return p[0];
}

/* The CPU's walk: the lanes l < lanes_at(e0, n) take values e0 + l of n
 * (e0 a multiple of LANES), a loop the compiler can vectorise. */
static inline HFL_HD int hfl_lm_lanes_at(int e0, int n) {
    return n - e0 < HFL_LM_LANES ? n - e0 : HFL_LM_LANES;
}

static inline HFL_HD void hfl_lm_lanes_zero(float *p) {
    for (int l = 0; l < HFL_LM_LANES; l++) p[l] = 0.0f;
}

/* ---- layer norm ----
 *
 * Forward, row r of C features: mean = sum(x) / C, var = sum((x - mean)^2)
 * / C (two passes, biased), rstd = 1 / sqrt(var + eps), y = (x - mean) *
 * rstd * w + b; mean and rstd saved for backward. y may alias x.
 * Backward, with xhat = (x - mean) * rstd and g = dy * w:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), or dx plus that when
 * `add` (a residual branch's gradient joining the main one; dx may alias dy
 * only without `add`); dw (+)= column sums of dy * xhat, db (+)= of dy.
 * Every sum is a lane tree (above). */

static inline HFL_TYPED float hfl_lm_ln_dev(hfl_precision t, const void *x, size_t at, float m) {
    return hfl_ld(t, x, at) - m;
}

static inline HFL_TYPED void hfl_lm_ln_store(hfl_precision t, void *y, const void *x, const void *w,
                                             const void *b, size_t row, int c, float m, float rs) {
    hfl_st(t, y, row + c, hfl_lm_ln_dev(t, x, row + c, m) * rs * hfl_ld(t, w, c) + hfl_ld(t, b, c));
}

/* g = dy * w and g * xhat, the backward's two row sums' values */
static inline HFL_TYPED float hfl_lm_ln_g(hfl_precision t, const void *dy, const void *w, size_t row,
                                          int c) {
    return hfl_ld(t, dy, row + c) * hfl_ld(t, w, c);
}

static inline HFL_TYPED float hfl_lm_ln_gx(hfl_precision t, const void *x, size_t row, int c, float g,
                                           float m, float rs) {
    return g * hfl_lm_ln_dev(t, x, row + c, m) * rs;
}

/* sg = mean(g), sgx = mean(g * xhat) */
static inline HFL_TYPED void hfl_lm_ln_bwd_store(hfl_precision t, void *dx, const void *dy,
                                                 const void *x, const void *w, size_t row, int c,
                                                 float m, float rs, float sg, float sgx, int add) {
    float g = hfl_lm_ln_g(t, dy, w, row, c);
    float d = rs * (g - sg - hfl_lm_ln_dev(t, x, row + c, m) * rs * sgx);
    hfl_st(t, dx, row + c, add ? hfl_ld(t, dx, row + c) + d : d);
}

/* dy * xhat of row r, column c: the weight gradient's value */
static inline HFL_TYPED float hfl_lm_ln_dw(hfl_precision t, const void *dy, const void *x,
                                           const float *mean, const float *rstd, int r, int c, int C) {
    size_t at = (size_t)r * C + c;
    return hfl_ld(t, dy, at) * hfl_lm_ln_dev(t, x, at, mean[r]) * rstd[r];
}

static inline HFL_HD float hfl_lm_ln_rstd(float var_sum, int C) {
    return 1.0f / sqrtf(var_sum / C + HFL_LN_EPS);
}

/* The CPU's forward of row i (the warp's, lanes as accumulators). */
static inline HFL_TYPED void hfl_lm_row_layernorm_fwd(size_t i, hfl_precision t, void *y, float *mean,
                                                      float *rstd, const void *x, const void *w,
                                                      const void *b, int C) {
    size_t row = i * C;
    float p[HFL_LM_LANES];
    hfl_lm_lanes_zero(p);
    for (int c0 = 0; c0 < C; c0 += HFL_LM_LANES)
        for (int l = 0; l < hfl_lm_lanes_at(c0, C); l++) p[l] += hfl_ld(t, x, row + c0 + l);
    float m = hfl_lm_tree_sum(p) / C;
    hfl_lm_lanes_zero(p);
    for (int c0 = 0; c0 < C; c0 += HFL_LM_LANES)
        for (int l = 0; l < hfl_lm_lanes_at(c0, C); l++) {
            float d = hfl_lm_ln_dev(t, x, row + c0 + l, m);
            p[l] += d * d;
        }
    float rs = hfl_lm_ln_rstd(hfl_lm_tree_sum(p), C);
    for (int c = 0; c < C; c++) hfl_lm_ln_store(t, y, x, w, b, row, c, m, rs);
    mean[i] = m;
    rstd[i] = rs;
}

/* The CPU's dx of row i. */
static inline HFL_TYPED void hfl_lm_row_layernorm_bwd_dx(size_t i, hfl_precision t, void *dx,
                                                         const void *dy, const void *x,
                                                         const void *w, const float *mean,
                                                         const float *rstd, int C, int add) {
    size_t row = i * C;
    float m = mean[i], rs = rstd[i], pg[HFL_LM_LANES], pgx[HFL_LM_LANES];
    hfl_lm_lanes_zero(pg);
    hfl_lm_lanes_zero(pgx);
    for (int c0 = 0; c0 < C; c0 += HFL_LM_LANES)
        for (int l = 0; l < hfl_lm_lanes_at(c0, C); l++) {
            float g = hfl_lm_ln_g(t, dy, w, row, c0 + l);
            pg[l] += g;
            pgx[l] += hfl_lm_ln_gx(t, x, row, c0 + l, g, m, rs);
        }
    float sg = hfl_lm_tree_sum(pg) / C, sgx = hfl_lm_tree_sum(pgx) / C;
    for (int c = 0; c < C; c++) hfl_lm_ln_bwd_store(t, dx, dy, x, w, row, c, m, rs, sg, sgx, add);
}

/* The CPU's dw and db of columns c0 .. c0 + n - 1 (n <= HFL_LM_COL_TILE):
 * row r goes to lane r % LANES of each column, as the CUDA block's row
 * lanes; then each column's tree; dw (+)= the result. */
#define HFL_LM_COL_TILE 64
static inline HFL_TYPED void hfl_lm_cols_layernorm_dw(int c0, int n, hfl_precision t, float *dw,
                                                      float *db, const void *dy, const void *x,
                                                      const float *mean, const float *rstd,
                                                      int rows, int C, int accumulate) {
    float pw[HFL_LM_LANES][HFL_LM_COL_TILE] = {{0}}, pb[HFL_LM_LANES][HFL_LM_COL_TILE] = {{0}};
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < n; k++) {
            pw[r % HFL_LM_LANES][k] += hfl_lm_ln_dw(t, dy, x, mean, rstd, r, c0 + k, C);
            pb[r % HFL_LM_LANES][k] += hfl_ld(t, dy, (size_t)r * C + c0 + k);
        }
    for (int k = 0; k < n; k++) {
        float qw[HFL_LM_LANES], qb[HFL_LM_LANES];
        for (int l = 0; l < HFL_LM_LANES; l++) qw[l] = pw[l][k], qb[l] = pb[l][k];
        dw[c0 + k] = (accumulate ? dw[c0 + k] : 0.0f) + hfl_lm_tree_sum(qw);
        db[c0 + k] = (accumulate ? db[c0 + k] : 0.0f) + hfl_lm_tree_sum(qb);
    }
}

/* ---- GELU, tanh form: i < n ---- */

#define HFL_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define HFL_GELU_A 0.044715f

/* With u = K (x + A x^3) and s = sigmoid(2u) = 1 / (1 + exp(-2u)):
 * 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s), so
 *   gelu(x) = x s,  gelu'(x) = s + 2 x s (1 - s) K (1 + 3 A x^2),
 * one expf and no cancellation near 0 (tanhf cost twice as much here). */
static inline HFL_HD float hfl_lm_gelu_s(float x) {
    float u = HFL_GELU_K * (x + HFL_GELU_A * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

static inline HFL_HD float hfl_lm_gelu(float x) { return x * hfl_lm_gelu_s(x); }

static inline HFL_HD float hfl_lm_gelu_grad(float x) {
    float s = hfl_lm_gelu_s(x);
    return s + 2.0f * x * s * (1.0f - s) * HFL_GELU_K * (1.0f + 3.0f * HFL_GELU_A * x * x);
}

static inline HFL_TYPED void hfl_lm_thread_gelu_fwd(size_t i, hfl_precision t, void *y,
                                                    const void *x) {
    hfl_st(t, y, i, hfl_lm_gelu(hfl_ld(t, x, i)));
}

/* dx = dy * gelu'(x), x the forward input; dx may alias dy. */
static inline HFL_TYPED void hfl_lm_thread_gelu_bwd(size_t i, hfl_precision t, void *dx,
                                                    const void *dy, const void *x) {
    hfl_st(t, dx, i, hfl_ld(t, dy, i) * hfl_lm_gelu_grad(hfl_ld(t, x, i)));
}

/* GELU over a 2-byte pair (thread_hd.h's PAIRS; j < n / 2). */
static inline HFL_TYPED void hfl_lm_pair_gelu_fwd(size_t j, hfl_precision t, void *y, const void *x) {
    uint16_t a[4] = {0}, b[4] = {0};
    HFL_PAIR_IN(a, x, j);
    hfl_lm_thread_gelu_fwd(0, t, b, a);
    hfl_lm_thread_gelu_fwd(1, t, b, a);
    HFL_PAIR_OUT(y, j, b);
}

static inline HFL_TYPED void hfl_lm_pair_gelu_bwd(size_t j, hfl_precision t, void *dx,
                                                  const void *dy, const void *x) {
    uint16_t d[4] = {0}, v[4] = {0}, b[4] = {0};
    HFL_PAIR_IN(d, dy, j);
    HFL_PAIR_IN(v, x, j);
    hfl_lm_thread_gelu_bwd(0, t, b, d, v);
    hfl_lm_thread_gelu_bwd(1, t, b, d, v);
    HFL_PAIR_OUT(dx, j, b);
}

/* ---- attention heads: i < n * H * T * hs ---- */

/* The row-layout offset of head element i = ((b*H + h)*T + t)*hs + d:
 * row b*T + t, column h*hs + d, in rows of ld elements. */
static inline HFL_HD size_t hfl_lm_head_src(size_t i, int T, int H, int hs, int ld) {
    size_t d = i % (size_t)hs, q = i / (size_t)hs;
    size_t t = q % (size_t)T, bh = q / (size_t)T;
    size_t h = bh % (size_t)H, b = bh / (size_t)H;
    return (b * T + t) * (size_t)ld + h * hs + d;
}

/* heads[i] = rows[head_src(i)] (a copy of the bits): q, k or v (rows = qkv
 * + 0, C or 2C, ld = 3C) or dy (ld = C). */
static inline HFL_TYPED void hfl_lm_thread_heads_gather(size_t i, hfl_precision t, void *heads,
                                                        const void *rows, int T, int H, int hs,
                                                        int ld) {
    hfl_cp(t, heads, i, rows, hfl_lm_head_src(i, T, H, hs, ld));
}

/* rows[head_src(i)] = heads[i]: the adjoint copy (y, or dq, dk, dv into dqkv). */
static inline HFL_TYPED void hfl_lm_thread_heads_scatter(size_t i, hfl_precision t, void *rows,
                                                         const void *heads, int T, int H, int hs,
                                                         int ld) {
    hfl_cp(t, rows, hfl_lm_head_src(i, T, H, hs, ld), heads, i);
}

/* ---- causal softmax: one row of T scores per index, i < n * H * T ----
 *
 * Row i is query q = i % T: p[s] = softmax(scale * z)[s] over s <= q, 0 for
 * s > q. The row's max and its sum of exps (in fp32) are lane trees (above)
 * over its q + 1 live scores; each probability is then computed again from
 * its score and stored once, so p may alias z. The backward (dz may alias
 * dp): dz[s] = scale * p[s] * (dp[s] - dot), dot = sum_{s <= q} p[s] dp[s]
 * by the lane tree, 0 for s > q. */

static inline HFL_TYPED float hfl_lm_sm_exp(hfl_precision t, const void *z, size_t at, float zmax,
                                            float scale) {
    return expf(scale * (hfl_ld(t, z, at) - zmax));
}

static inline HFL_TYPED void hfl_lm_sm_store(hfl_precision t, void *p, const void *z, size_t row,
                                             int s, int q, float zmax, float scale, float inv) {
    hfl_st(t, p, row + s, s <= q ? hfl_lm_sm_exp(t, z, row + s, zmax, scale) * inv : 0.0f);
}

static inline HFL_TYPED float hfl_lm_sm_dot(hfl_precision t, const void *dp, const void *p,
                                            size_t at) {
    return hfl_ld(t, p, at) * hfl_ld(t, dp, at);
}

static inline HFL_TYPED void hfl_lm_sm_bwd_store(hfl_precision t, void *dz, const void *dp,
                                                 const void *p, size_t row, int s, int q,
                                                 float scale, float dot) {
    size_t at = row + s;
    hfl_st(t, dz, at, s <= q ? scale * hfl_ld(t, p, at) * (hfl_ld(t, dp, at) - dot) : 0.0f);
}

/* The CPU's row i (the warp's, lanes as accumulators). */
static inline HFL_TYPED void hfl_lm_row_causal_softmax(size_t i, hfl_precision t, void *p,
                                                       const void *z, int T, float scale) {
    int q = (int)(i % (size_t)T);
    size_t row = i * T;
    float a[HFL_LM_LANES];
    for (int l = 0; l < HFL_LM_LANES; l++) a[l] = -INFINITY;
    for (int s0 = 0; s0 <= q; s0 += HFL_LM_LANES)
        for (int l = 0; l < hfl_lm_lanes_at(s0, q + 1); l++) a[l] = hfl_lm_max2(a[l], hfl_ld(t, z, row + s0 + l));
    float zmax = hfl_lm_tree_max(a);
    hfl_lm_lanes_zero(a);
    for (int s0 = 0; s0 <= q; s0 += HFL_LM_LANES)
        for (int l = 0; l < hfl_lm_lanes_at(s0, q + 1); l++) a[l] += hfl_lm_sm_exp(t, z, row + s0 + l, zmax, scale);
    float inv = 1.0f / hfl_lm_tree_sum(a);
    for (int s = 0; s < T; s++) hfl_lm_sm_store(t, p, z, row, s, q, zmax, scale, inv);
}

static inline HFL_TYPED void hfl_lm_row_causal_softmax_bwd(size_t i, hfl_precision t, void *dz,
                                                           const void *dp, const void *p, int T,
                                                           float scale) {
    int q = (int)(i % (size_t)T);
    size_t row = i * T;
    float a[HFL_LM_LANES];
    hfl_lm_lanes_zero(a);
    for (int s0 = 0; s0 <= q; s0 += HFL_LM_LANES)
        for (int l = 0; l < hfl_lm_lanes_at(s0, q + 1); l++) a[l] += hfl_lm_sm_dot(t, dp, p, row + s0 + l);
    float dot = hfl_lm_tree_sum(a);
    for (int s = 0; s < T; s++) hfl_lm_sm_bwd_store(t, dz, dp, p, row, s, q, scale, dot);
}

#endif
