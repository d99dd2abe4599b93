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
 * The *_lp bodies at the end are the same formulas on 2-byte storage (bf16
 * or fp16, kernels/backend.h's REDUCED PRECISION): 2-byte operands widened
 * exactly, fp32 arithmetic in the same order, each 2-byte result rounded
 * once, fp32 parameter gradients and optimizer state. So an _lp op's result
 * is the fp32 op's on the widened inputs, rounded: the tests hold them to
 * that bit for bit.
 *
 * Formulas follow PyTorch's modules, so its autograd is the reference
 * (tests/kernels/lm_torch.py): nn.Embedding plus a learned position
 * embedding, nn.LayerNorm (eps 1e-5, biased variance), nn.GELU(approximate=
 * "tanh") (GPT-2's), causal softmax attention as
 * F.scaled_dot_product_attention(is_causal=True), torch.optim.AdamW. */
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
static inline HFL_HD void hfl_lm_thread_embed_fwd(size_t i, float *y, const float *tokens,
                                                  const float *wte, const float *wpe, int T, int C,
                                                  int V) {
    size_t r = i / (size_t)C, c = i % (size_t)C;
    int v = hfl_lm_token(tokens[r], V);
    y[i] = wte[(size_t)v * C + c] + wpe[(r % (size_t)T) * C + c];
}

/* i < V * C: dwte[v, c] (+)= the sum of dy[r, c] over the rows r = 0, 1, ...
 * whose token is v (a gather: the CPU's scatter over rows sums in the same order). */
static inline HFL_HD void hfl_lm_thread_embed_bwd_wte(size_t i, float *dwte, const float *dy,
                                                      const float *tokens, int rows, int C, int V,
                                                      int accumulate) {
    int v = (int)(i / (size_t)C);
    size_t c = i % (size_t)C;
    float s = accumulate ? dwte[i] : 0.0f;
    for (int r = 0; r < rows; r++)
        if (hfl_lm_token(tokens[r], V) == v) s += dy[(size_t)r * C + c];
    dwte[i] = s;
}

/* i < T * C: dwpe[t, c] (+)= dy[t, c] + dy[T + t, c] + ... over the sequences */
static inline HFL_HD void hfl_lm_thread_embed_bwd_wpe(size_t i, float *dwpe, const float *dy,
                                                      int rows, int T, int C, int accumulate) {
    float s = accumulate ? dwpe[i] : 0.0f;
    for (size_t at = i; at < (size_t)rows * C; at += (size_t)T * C) s += dy[at];
    dwpe[i] = s;
}

/* ---- layer norm: one row per index, i < rows ---- */

/* y = (x - mean) * rstd * w + b over row i's C features, mean and
 * rstd = 1 / sqrt(var + eps) saved for backward (two passes, biased variance). */
static inline HFL_HD void hfl_lm_thread_layernorm_fwd(size_t i, float *y, float *mean, float *rstd,
                                                      const float *x, const float *w,
                                                      const float *b, int C) {
    const float *xr = x + i * C;
    float *yr = y + i * C;
    float s = 0.0f;
    for (int c = 0; c < C; c++) s += xr[c];
    float m = s / C, v = 0.0f;
    for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
    float rs = 1.0f / sqrtf(v / C + HFL_LN_EPS);
    for (int c = 0; c < C; c++) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
    mean[i] = m;
    rstd[i] = rs;
}

/* dx of row i: with xhat = (x - mean) * rstd and g = dy * w,
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), or dx plus that when
 * `add` (a residual branch's gradient joining the main one). dx may alias dy
 * only without `add`. */
static inline HFL_HD void hfl_lm_thread_layernorm_bwd_dx(size_t i, float *dx, const float *dy,
                                                         const float *x, const float *w,
                                                         const float *mean, const float *rstd,
                                                         int C, int add) {
    const float *xr = x + i * C, *dyr = dy + i * C;
    float *dxr = dx + i * C;
    float m = mean[i], rs = rstd[i], sg = 0.0f, sgx = 0.0f;
    for (int c = 0; c < C; c++) {
        float g = dyr[c] * w[c];
        sg += g;
        sgx += g * (xr[c] - m) * rs;
    }
    sg /= C;
    sgx /= C;
    for (int c = 0; c < C; c++) {
        float g = dyr[c] * w[c];
        float d = rs * (g - sg - (xr[c] - m) * rs * sgx);
        dxr[c] = add ? dxr[c] + d : d;
    }
}

/* Column i < C: dw[i] (+)= sum over rows of dy * xhat, db[i] (+)= sum of dy. */
static inline HFL_HD void hfl_lm_thread_layernorm_bwd_dw(size_t i, float *dw, float *db,
                                                         const float *dy, const float *x,
                                                         const float *mean, const float *rstd,
                                                         int rows, int C, int accumulate) {
    float sw = accumulate ? dw[i] : 0.0f, sb = accumulate ? db[i] : 0.0f;
    for (int r = 0; r < rows; r++) {
        float d = dy[(size_t)r * C + i];
        sw += d * (x[(size_t)r * C + i] - mean[r]) * rstd[r];
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

static inline HFL_HD void hfl_lm_thread_gelu_fwd(size_t i, float *y, const float *x) {
    y[i] = hfl_lm_gelu(x[i]);
}

/* dx = dy * gelu'(x), x the forward input; dx may alias dy. */
static inline HFL_HD void hfl_lm_thread_gelu_bwd(size_t i, float *dx, const float *dy,
                                                 const float *x) {
    dx[i] = dy[i] * hfl_lm_gelu_grad(x[i]);
}

/* ---- attention heads: i < n * H * T * hs ---- */

/* The row-layout offset of head element i = ((b*H + h)*T + t)*hs + d:
 * row b*T + t, column h*hs + d, in rows of ld floats. */
static inline HFL_HD size_t hfl_lm_head_src(size_t i, int T, int H, int hs, int ld) {
    size_t d = i % (size_t)hs, q = i / (size_t)hs;
    size_t t = q % (size_t)T, bh = q / (size_t)T;
    size_t h = bh % (size_t)H, b = bh / (size_t)H;
    return (b * T + t) * (size_t)ld + h * hs + d;
}

/* heads[i] = rows[head_src(i)]: q, k or v (rows = qkv + 0, C or 2C, ld = 3C) or dy (ld = C). */
static inline HFL_HD void hfl_lm_thread_heads_gather(size_t i, float *heads, const float *rows,
                                                     int T, int H, int hs, int ld) {
    heads[i] = rows[hfl_lm_head_src(i, T, H, hs, ld)];
}

/* rows[head_src(i)] = heads[i]: the adjoint copy (y, or dq, dk, dv into dqkv). */
static inline HFL_HD void hfl_lm_thread_heads_scatter(size_t i, float *rows, const float *heads,
                                                      int T, int H, int hs, int ld) {
    rows[hfl_lm_head_src(i, T, H, hs, ld)] = heads[i];
}

/* ---- causal softmax: one row of T scores per index, i < n * H * T ---- */

/* Row i is query t = i % T: p[s] = softmax(scale * z)[s] over s <= t, 0 for
 * s > t (the max subtracted first; p may alias z). */
static inline HFL_HD void hfl_lm_thread_causal_softmax(size_t i, float *p, const float *z, int T,
                                                       float scale) {
    int t = (int)(i % (size_t)T);
    const float *zr = z + i * T;
    float *pr = p + i * T;
    float zmax = zr[0];
    for (int s = 1; s <= t; s++) zmax = zr[s] > zmax ? zr[s] : zmax;
    float sum = 0.0f;
    for (int s = 0; s <= t; s++) {
        float e = expf(scale * (zr[s] - zmax));
        pr[s] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int s = 0; s <= t; s++) pr[s] *= inv;
    for (int s = t + 1; s < T; s++) pr[s] = 0.0f;
}

/* The scores' gradient from the probabilities' (dz may alias dp):
 * dz[s] = scale * p[s] * (dp[s] - sum_{s' <= t} p[s'] dp[s']), 0 for s > t. */
static inline HFL_HD void hfl_lm_thread_causal_softmax_bwd(size_t i, float *dz, const float *dp,
                                                           const float *p, int T, float scale) {
    int t = (int)(i % (size_t)T);
    const float *pr = p + i * T, *dpr = dp + i * T;
    float *dzr = dz + i * T;
    float dot = 0.0f;
    for (int s = 0; s <= t; s++) dot += pr[s] * dpr[s];
    for (int s = 0; s <= t; s++) dzr[s] = scale * pr[s] * (dpr[s] - dot);
    for (int s = t + 1; s < T; s++) dzr[s] = 0.0f;
}

/* ---- AdamW: i < n ---- */

/* torch.optim.AdamW's single-tensor step (Loshchilov & Hutter 2019):
 *   w *= 1 - lr*wd;  m += (1 - b1) (g - m);  v = b2 v + (1 - b2) g^2;
 *   w -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
 * with step_size = lr / (1 - b1^step) and bc2_sqrt = sqrt(1 - b2^step),
 * computed in double once per step by hfl_lm_adamw_bias.
 *
 * The step number lives on the device: with sc set (the trainer's form),
 * adamw_step (kernels/lm.h) first counts the step in sc
 * (hfl_lm_adamw_count) and then takes step_size and bc2_sqrt from sc's
 * powers (hfl_lm_adamw_bias), so fp16's skipped steps, which only the device
 * knows of, are left out of the count without the host reading the flag
 * back. With sc NULL, step_size and bc2_sqrt are used as given
 * (hfl_adamw_make, for testing the op at a chosen step). */
typedef struct {
    float lr, beta1, beta2, eps, wd;
    float step_size, bc2_sqrt;
    hfl_step_scalars *sc;
} hfl_adamw_args;

/* One more AdamW step in sc, unless skip_if_nonfinite is given and its
 * finite flag is 0 (fp16's skipped step, which torch's GradScaler does not
 * pass to optimizer.step()). The powers are products in double, one factor a
 * step, rather than pow(): a multiplication rounds the same on every IEEE
 * machine (there is nothing for an FMA to contract), so the CPU and the GPU
 * keep the same bits, while a pow() is each maths library's own. Each
 * product rounds once (unit roundoff u = 2^-53), so beta^t is within t u
 * relative of the exact power of the fp32 beta, and 1 - beta^t, since
 * 1 - b^t >= t (1 - b) b^(t-1), within u b / (1 - b) relative at every t:
 * 1.1e-13 for beta 0.999, 1.1e-12 for 0.9999, some 10^5 times finer than
 * the fp32 rounding of the step_size and bc2_sqrt made from it. */
static inline HFL_HD void hfl_lm_adamw_count(hfl_step_scalars *sc, float beta1, float beta2,
                                             const hfl_step_scalars *skip_if_nonfinite) {
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return;
    sc->adam_steps++;
    sc->adam_beta1_pow *= (double)beta1;
    sc->adam_beta2_pow *= (double)beta2;
}

/* a's step_size and bc2_sqrt from sc's powers (the step just counted), in
 * double and rounded once to fp32, as torch computes its Python floats and
 * hands them to an fp32 kernel. Only one subtraction, division and square
 * root, all correctly rounded in IEEE double on both backends. */
static inline HFL_HD void hfl_lm_adamw_bias(const hfl_step_scalars *sc, hfl_adamw_args *a) {
    a->step_size = (float)((double)a->lr / (1.0 - sc->adam_beta1_pow));
    a->bc2_sqrt = (float)sqrt(1.0 - sc->adam_beta2_pow);
}

static inline HFL_HD void hfl_lm_thread_adamw(size_t i, float *w, float *m, float *v,
                                              const float *g, hfl_adamw_args a) {
    float wi = w[i] * (1.0f - a.lr * a.wd);
    float mi = m[i] + (1.0f - a.beta1) * (g[i] - m[i]);
    float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - a.step_size * mi / (sqrtf(vi) / a.bc2_sqrt + a.eps);
}

/* ---- 2-byte storage (bf16 or fp16; see the header comment) ---- */

#define HFL_W(v) hfl_op_widen(lp, (v))
#define HFL_N(v) hfl_op_narrow(lp, (v))

static inline HFL_HD void hfl_lm_thread_embed_fwd_lp(size_t i, hfl_precision lp, uint16_t *y,
                                                     const uint16_t *tokens, const uint16_t *wte,
                                                     const uint16_t *wpe, int T, int C, int V) {
    size_t r = i / (size_t)C, c = i % (size_t)C;
    int v = hfl_lm_token(HFL_W(tokens[r]), V);
    y[i] = HFL_N(HFL_W(wte[(size_t)v * C + c]) + HFL_W(wpe[(r % (size_t)T) * C + c]));
}

static inline HFL_HD void hfl_lm_thread_embed_bwd_wte_lp(size_t i, hfl_precision lp, float *dwte,
                                                         const uint16_t *dy,
                                                         const uint16_t *tokens, int rows, int C,
                                                         int V, int accumulate) {
    int v = (int)(i / (size_t)C);
    size_t c = i % (size_t)C;
    float s = accumulate ? dwte[i] : 0.0f;
    for (int r = 0; r < rows; r++)
        if (hfl_lm_token(HFL_W(tokens[r]), V) == v) s += HFL_W(dy[(size_t)r * C + c]);
    dwte[i] = s;
}

static inline HFL_HD void hfl_lm_thread_embed_bwd_wpe_lp(size_t i, hfl_precision lp, float *dwpe,
                                                         const uint16_t *dy, int rows, int T,
                                                         int C, int accumulate) {
    float s = accumulate ? dwpe[i] : 0.0f;
    for (size_t at = i; at < (size_t)rows * C; at += (size_t)T * C) s += HFL_W(dy[at]);
    dwpe[i] = s;
}

static inline HFL_HD void hfl_lm_thread_layernorm_fwd_lp(size_t i, hfl_precision lp, uint16_t *y,
                                                         float *mean, float *rstd,
                                                         const uint16_t *x, const uint16_t *w,
                                                         const uint16_t *b, int C) {
    const uint16_t *xr = x + i * C;
    uint16_t *yr = y + i * C;
    float s = 0.0f;
    for (int c = 0; c < C; c++) s += HFL_W(xr[c]);
    float m = s / C, v = 0.0f;
    for (int c = 0; c < C; c++) v += (HFL_W(xr[c]) - m) * (HFL_W(xr[c]) - m);
    float rs = 1.0f / sqrtf(v / C + HFL_LN_EPS);
    for (int c = 0; c < C; c++) yr[c] = HFL_N((HFL_W(xr[c]) - m) * rs * HFL_W(w[c]) + HFL_W(b[c]));
    mean[i] = m;
    rstd[i] = rs;
}

static inline HFL_HD void hfl_lm_thread_layernorm_bwd_dx_lp(size_t i, hfl_precision lp,
                                                            uint16_t *dx, const uint16_t *dy,
                                                            const uint16_t *x, const uint16_t *w,
                                                            const float *mean, const float *rstd,
                                                            int C, int add) {
    const uint16_t *xr = x + i * C, *dyr = dy + i * C;
    uint16_t *dxr = dx + i * C;
    float m = mean[i], rs = rstd[i], sg = 0.0f, sgx = 0.0f;
    for (int c = 0; c < C; c++) {
        float g = HFL_W(dyr[c]) * HFL_W(w[c]);
        sg += g;
        sgx += g * (HFL_W(xr[c]) - m) * rs;
    }
    sg /= C;
    sgx /= C;
    for (int c = 0; c < C; c++) {
        float g = HFL_W(dyr[c]) * HFL_W(w[c]);
        float d = rs * (g - sg - (HFL_W(xr[c]) - m) * rs * sgx);
        dxr[c] = HFL_N(add ? HFL_W(dxr[c]) + d : d);
    }
}

static inline HFL_HD void hfl_lm_thread_layernorm_bwd_dw_lp(size_t i, hfl_precision lp, float *dw,
                                                            float *db, const uint16_t *dy,
                                                            const uint16_t *x, const float *mean,
                                                            const float *rstd, int rows, int C,
                                                            int accumulate) {
    float sw = accumulate ? dw[i] : 0.0f, sb = accumulate ? db[i] : 0.0f;
    for (int r = 0; r < rows; r++) {
        float d = HFL_W(dy[(size_t)r * C + i]);
        sw += d * (HFL_W(x[(size_t)r * C + i]) - mean[r]) * rstd[r];
        sb += d;
    }
    dw[i] = sw;
    db[i] = sb;
}

static inline HFL_HD void hfl_lm_thread_gelu_fwd_lp(size_t i, hfl_precision lp, uint16_t *y,
                                                    const uint16_t *x) {
    y[i] = HFL_N(hfl_lm_gelu(HFL_W(x[i])));
}

static inline HFL_HD void hfl_lm_thread_gelu_bwd_lp(size_t i, hfl_precision lp, uint16_t *dx,
                                                    const uint16_t *dy, const uint16_t *x) {
    dx[i] = HFL_N(HFL_W(dy[i]) * hfl_lm_gelu_grad(HFL_W(x[i])));
}

/* Copies: the same bits whatever the type. */
static inline HFL_HD void hfl_lm_thread_heads_gather_lp(size_t i, uint16_t *heads,
                                                        const uint16_t *rows, int T, int H, int hs,
                                                        int ld) {
    heads[i] = rows[hfl_lm_head_src(i, T, H, hs, ld)];
}

static inline HFL_HD void hfl_lm_thread_heads_scatter_lp(size_t i, uint16_t *rows,
                                                         const uint16_t *heads, int T, int H,
                                                         int hs, int ld) {
    rows[hfl_lm_head_src(i, T, H, hs, ld)] = heads[i];
}

/* Two passes over the scores (max, then the sum of exps in fp32), then each
 * probability computed again and rounded once; p may alias z. */
static inline HFL_HD void hfl_lm_thread_causal_softmax_lp(size_t i, hfl_precision lp, uint16_t *p,
                                                          const uint16_t *z, int T, float scale) {
    int t = (int)(i % (size_t)T);
    const uint16_t *zr = z + i * T;
    uint16_t *pr = p + i * T;
    float zmax = HFL_W(zr[0]);
    for (int s = 1; s <= t; s++) zmax = HFL_W(zr[s]) > zmax ? HFL_W(zr[s]) : zmax;
    float sum = 0.0f;
    for (int s = 0; s <= t; s++) sum += expf(scale * (HFL_W(zr[s]) - zmax));
    float inv = 1.0f / sum;
    for (int s = 0; s <= t; s++) pr[s] = HFL_N(expf(scale * (HFL_W(zr[s]) - zmax)) * inv);
    for (int s = t + 1; s < T; s++) pr[s] = HFL_N(0.0f);
}

static inline HFL_HD void hfl_lm_thread_causal_softmax_bwd_lp(size_t i, hfl_precision lp,
                                                              uint16_t *dz, const uint16_t *dp,
                                                              const uint16_t *p, int T,
                                                              float scale) {
    int t = (int)(i % (size_t)T);
    const uint16_t *pr = p + i * T, *dpr = dp + i * T;
    uint16_t *dzr = dz + i * T;
    float dot = 0.0f;
    for (int s = 0; s <= t; s++) dot += HFL_W(pr[s]) * HFL_W(dpr[s]);
    for (int s = 0; s <= t; s++) dzr[s] = HFL_N(scale * HFL_W(pr[s]) * (HFL_W(dpr[s]) - dot));
    for (int s = t + 1; s < T; s++) dzr[s] = HFL_N(0.0f);
}

/* AdamW on the fp32 master weight, then its 2-byte working copy. */
static inline HFL_HD void hfl_lm_thread_adamw_lp(size_t i, hfl_precision lp, float *master,
                                                 float *m, float *v, const float *g, uint16_t *w,
                                                 hfl_adamw_args a) {
    hfl_lm_thread_adamw(i, master, m, v, g, a);
    w[i] = HFL_N(master[i]);
}

#undef HFL_W
#undef HFL_N

#endif
