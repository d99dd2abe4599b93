/* lm_hd.h: the arithmetic of the transformer language model's ops (issue 13),
 * as thread bodies both backends run.
 *
 * Each `hfl_lm_thread_*` body writes the elements of its own index and
 * nothing else: the CPU backend (cpu/lm_cpu.c) calls it in a loop over the
 * index, a CUDA kernel (cuda/lm.cu) once per thread, so the GPU's indexing
 * and arithmetic are plain C that tests/kernels/test_lm_ops.c runs on every
 * machine. Sums run in one fixed order (rows r = 0, 1, ... for a column;
 * positions 0, 1, ... within a row), so both backends round alike.
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

/* i < V * C: dwte[v, c] (+)= the sum of dy[r, c] over the rows r = 0, 1, ...
 * whose token is v (a gather: the CPU's scatter over rows sums in the same order). */
static inline HFL_TYPED void hfl_lm_thread_embed_bwd_wte(size_t i, hfl_precision t, float *dwte,
                                                         const void *dy, const void *tokens,
                                                         int rows, int C, int V, int accumulate) {
    int v = (int)(i / (size_t)C);
    size_t c = i % (size_t)C;
    float s = accumulate ? dwte[i] : 0.0f;
    for (int r = 0; r < rows; r++)
        if (hfl_lm_token(hfl_ld(t, tokens, (size_t)r), V) == v)
            s += hfl_ld(t, dy, (size_t)r * C + c);
    dwte[i] = s;
}

/* i < T * C: dwpe[t, c] (+)= dy[t, c] + dy[T + t, c] + ... over the sequences */
static inline HFL_TYPED void hfl_lm_thread_embed_bwd_wpe(size_t i, hfl_precision t, float *dwpe,
                                                         const void *dy, int rows, int T, int C,
                                                         int accumulate) {
    float s = accumulate ? dwpe[i] : 0.0f;
    for (size_t at = i; at < (size_t)rows * C; at += (size_t)T * C) s += hfl_ld(t, dy, at);
    dwpe[i] = s;
}

/* ---- layer norm: one row per index, i < rows ---- */

/* y = (x - mean) * rstd * w + b over row i's C features, mean and
 * rstd = 1 / sqrt(var + eps) saved for backward (two passes, biased
 * variance). y may alias x. */
static inline HFL_TYPED void hfl_lm_thread_layernorm_fwd(size_t i, hfl_precision t, void *y,
                                                         float *mean, float *rstd, const void *x,
                                                         const void *w, const void *b, int C) {
    size_t row = i * C;
    float s = 0.0f;
    for (int c = 0; c < C; c++) s += hfl_ld(t, x, row + c);
    float m = s / C, v = 0.0f;
    for (int c = 0; c < C; c++) v += (hfl_ld(t, x, row + c) - m) * (hfl_ld(t, x, row + c) - m);
    float rs = 1.0f / sqrtf(v / C + HFL_LN_EPS);
    for (int c = 0; c < C; c++)
        hfl_st(t, y, row + c, (hfl_ld(t, x, row + c) - m) * rs * hfl_ld(t, w, c) + hfl_ld(t, b, c));
    mean[i] = m;
    rstd[i] = rs;
}

/* dx of row i: with xhat = (x - mean) * rstd and g = dy * w,
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), or dx plus that when
 * `add` (a residual branch's gradient joining the main one). dx may alias dy
 * only without `add`. */
static inline HFL_TYPED void hfl_lm_thread_layernorm_bwd_dx(size_t i, hfl_precision t, void *dx,
                                                            const void *dy, const void *x,
                                                            const void *w, const float *mean,
                                                            const float *rstd, int C, int add) {
    size_t row = i * C;
    float m = mean[i], rs = rstd[i], sg = 0.0f, sgx = 0.0f;
    for (int c = 0; c < C; c++) {
        float g = hfl_ld(t, dy, row + c) * hfl_ld(t, w, c);
        sg += g;
        sgx += g * (hfl_ld(t, x, row + c) - m) * rs;
    }
    sg /= C;
    sgx /= C;
    for (int c = 0; c < C; c++) {
        float g = hfl_ld(t, dy, row + c) * hfl_ld(t, w, c);
        float d = rs * (g - sg - (hfl_ld(t, x, row + c) - m) * rs * sgx);
        hfl_st(t, dx, row + c, add ? hfl_ld(t, dx, row + c) + d : d);
    }
}

/* Column i < C: dw[i] (+)= sum over rows of dy * xhat, db[i] (+)= sum of dy. */
static inline HFL_TYPED void hfl_lm_thread_layernorm_bwd_dw(size_t i, hfl_precision t, float *dw,
                                                            float *db, const void *dy,
                                                            const void *x, const float *mean,
                                                            const float *rstd, int rows, int C,
                                                            int accumulate) {
    float sw = accumulate ? dw[i] : 0.0f, sb = accumulate ? db[i] : 0.0f;
    for (int r = 0; r < rows; r++) {
        float d = hfl_ld(t, dy, (size_t)r * C + i);
        sw += d * (hfl_ld(t, x, (size_t)r * C + i) - mean[r]) * rstd[r];
        sb += d;
    }
    dw[i] = sw;
    db[i] = sb;
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

/* ---- causal softmax: one row of T scores per index, i < n * H * T ---- */

/* Row i is query t = i % T: p[s] = softmax(scale * z)[s] over s <= t, 0 for
 * s > t. Two passes over the scores (the max, then the sum of exps in
 * fp32), then each probability computed again from its score and stored
 * once, so p may alias z. */
static inline HFL_TYPED void hfl_lm_thread_causal_softmax(size_t i, hfl_precision t, void *p,
                                                          const void *z, int T, float scale) {
    int q = (int)(i % (size_t)T);
    size_t row = i * T;
    float zmax = hfl_ld(t, z, row);
    for (int s = 1; s <= q; s++) {
        float v = hfl_ld(t, z, row + s);
        zmax = v > zmax ? v : zmax;
    }
    float sum = 0.0f;
    for (int s = 0; s <= q; s++) sum += expf(scale * (hfl_ld(t, z, row + s) - zmax));
    float inv = 1.0f / sum;
    for (int s = 0; s <= q; s++)
        hfl_st(t, p, row + s, expf(scale * (hfl_ld(t, z, row + s) - zmax)) * inv);
    for (int s = q + 1; s < T; s++) hfl_st(t, p, row + s, 0.0f);
}

/* The scores' gradient from the probabilities' (dz may alias dp):
 * dz[s] = scale * p[s] * (dp[s] - sum_{s' <= t} p[s'] dp[s']), 0 for s > t. */
static inline HFL_TYPED void hfl_lm_thread_causal_softmax_bwd(size_t i, hfl_precision t, void *dz,
                                                              const void *dp, const void *p, int T,
                                                              float scale) {
    int q = (int)(i % (size_t)T);
    size_t row = i * T;
    float dot = 0.0f;
    for (int s = 0; s <= q; s++) dot += hfl_ld(t, p, row + s) * hfl_ld(t, dp, row + s);
    for (int s = 0; s <= q; s++)
        hfl_st(t, dz, row + s, scale * hfl_ld(t, p, row + s) * (hfl_ld(t, dp, row + s) - dot));
    for (int s = q + 1; s < T; s++) hfl_st(t, dz, row + s, 0.0f);
}

#endif
