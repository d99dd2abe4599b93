/* lm_cpu.c: the CPU backend's transformer ops (kernels/lm.h): loops over the
 * thread bodies of kernels/lm_hd.h, in index order.
 *
 * Two ops scatter instead of calling their gather body per index, because
 * the gather costs a pass over every row per output: the token embedding's
 * gradient and layer norm's weight gradients walk rows r = 0, 1, ... and add
 * each into its column, which sums every output in the order the gather
 * bodies (and so the CUDA kernels) do. The 2-byte forms (*_lp) do the same
 * over widened values. The head gather and scatter are plain copies, done
 * as one memcpy per head row. */
#include <string.h>

#include "kernels/lm.h"

static void cpu_embed_fwd(float *y, const float *tokens, const float *wte, const float *wpe,
                          int rows, int T, int C, int V) {
    size_t n = (size_t)rows * C;
    for (size_t i = 0; i < n; i++) hfl_lm_thread_embed_fwd(i, y, tokens, wte, wpe, T, C, V);
}

static void cpu_embed_bwd(float *dwte, float *dwpe, const float *dy, const float *tokens,
                          int rows, int T, int C, int V, int accumulate) {
    if (!accumulate) memset(dwte, 0, (size_t)V * C * sizeof *dwte);
    for (int r = 0; r < rows; r++) {
        float *d = dwte + (size_t)hfl_lm_token(tokens[r], V) * C;
        const float *g = dy + (size_t)r * C;
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
    for (size_t i = 0; i < (size_t)T * C; i++) hfl_lm_thread_embed_bwd_wpe(i, dwpe, dy, rows, T, C, accumulate);
}

static void cpu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int rows, int C) {
    for (size_t i = 0; i < (size_t)rows; i++) hfl_lm_thread_layernorm_fwd(i, y, mean, rstd, x, w, b, C);
}

static void cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const float *mean, const float *rstd, int rows, int C,
                              int accumulate, int dx_add) {
    if (!accumulate) {
        memset(dw, 0, (size_t)C * sizeof *dw);
        memset(db, 0, (size_t)C * sizeof *db);
    }
    for (int r = 0; r < rows; r++) {
        const float *g = dy + (size_t)r * C, *xr = x + (size_t)r * C;
        for (int c = 0; c < C; c++) {
            dw[c] += g[c] * (xr[c] - mean[r]) * rstd[r];
            db[c] += g[c];
        }
    }
    for (size_t i = 0; i < (size_t)rows; i++) hfl_lm_thread_layernorm_bwd_dx(i, dx, dy, x, w, mean, rstd, C, dx_add);
}

static void cpu_gelu_fwd(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_lm_thread_gelu_fwd(i, y, x);
}

static void cpu_gelu_bwd(float *dx, const float *dy, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_lm_thread_gelu_bwd(i, dx, dy, x);
}

/* Heads are copies: one memcpy of hs elements per (sequence, head, token),
 * the same elements hfl_lm_head_src maps (a quarter of the block's step went
 * to its per-element divisions). to_heads: rows -> heads, else back. */
static void cpu_heads_copy(void *heads, void *rows, size_t esize, int n, int T, int H, int hs, int ld,
                           int to_heads) {
    size_t run = (size_t)hs * esize;
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                char *hp = (char *)heads + ((((size_t)b * H + h) * T + t) * hs) * esize;
                char *rp = (char *)rows + (((size_t)b * T + t) * ld + (size_t)h * hs) * esize;
                if (to_heads) memcpy(hp, rp, run);
                else memcpy(rp, hp, run);
            }
}

static void cpu_heads_gather(float *heads, const float *rows, int n, int T, int H, int hs, int ld) {
    cpu_heads_copy(heads, (void *)rows, sizeof(float), n, T, H, hs, ld, 1);
}

static void cpu_heads_scatter(float *rows, const float *heads, int n, int T, int H, int hs, int ld) {
    cpu_heads_copy((void *)heads, rows, sizeof(float), n, T, H, hs, ld, 0);
}

static void cpu_causal_softmax(float *p, const float *z, size_t n_rows, int T, float scale) {
    for (size_t i = 0; i < n_rows; i++) hfl_lm_thread_causal_softmax(i, p, z, T, scale);
}

static void cpu_causal_softmax_bwd(float *dz, const float *dp, const float *p, size_t n_rows, int T,
                                   float scale) {
    for (size_t i = 0; i < n_rows; i++) hfl_lm_thread_causal_softmax_bwd(i, dz, dp, p, T, scale);
}

/* With a.sc: the step counted and its bias corrections read on the
 * "device", as the CUDA kernels do (lm_hd.h). */
static hfl_adamw_args cpu_adamw_count(hfl_adamw_args a, const hfl_step_scalars *skip_if_nonfinite) {
    if (a.sc) {
        hfl_lm_adamw_count(a.sc, a.beta1, a.beta2, skip_if_nonfinite);
        hfl_lm_adamw_bias(a.sc, &a);
    }
    return a;
}

static void cpu_adamw_step(float *w, float *m, float *v, const float *g, size_t n, hfl_adamw_args a) {
    a = cpu_adamw_count(a, NULL);
    for (size_t i = 0; i < n; i++) hfl_lm_thread_adamw(i, w, m, v, g, a);
}

/* ---- 2-byte storage ---- */

static void cpu_embed_fwd_lp(hfl_precision lp, uint16_t *y, const uint16_t *tokens,
                             const uint16_t *wte, const uint16_t *wpe, int rows, int T, int C, int V) {
    size_t n = (size_t)rows * C;
    for (size_t i = 0; i < n; i++) hfl_lm_thread_embed_fwd_lp(i, lp, y, tokens, wte, wpe, T, C, V);
}

static void cpu_embed_bwd_lp(hfl_precision lp, float *dwte, float *dwpe, const uint16_t *dy,
                             const uint16_t *tokens, int rows, int T, int C, int V, int accumulate) {
    if (!accumulate) memset(dwte, 0, (size_t)V * C * sizeof *dwte);
    for (int r = 0; r < rows; r++) {
        float *d = dwte + (size_t)hfl_lm_token(hfl_op_widen(lp, tokens[r]), V) * C;
        const uint16_t *g = dy + (size_t)r * C;
        for (int c = 0; c < C; c++) d[c] += hfl_op_widen(lp, g[c]);
    }
    for (size_t i = 0; i < (size_t)T * C; i++)
        hfl_lm_thread_embed_bwd_wpe_lp(i, lp, dwpe, dy, rows, T, C, accumulate);
}

static void cpu_layernorm_fwd_lp(hfl_precision lp, uint16_t *y, float *mean, float *rstd,
                                 const uint16_t *x, const uint16_t *w, const uint16_t *b, int rows,
                                 int C) {
    for (size_t i = 0; i < (size_t)rows; i++) hfl_lm_thread_layernorm_fwd_lp(i, lp, y, mean, rstd, x, w, b, C);
}

static void cpu_layernorm_bwd_lp(hfl_precision lp, uint16_t *dx, float *dw, float *db,
                                 const uint16_t *dy, const uint16_t *x, const uint16_t *w,
                                 const float *mean, const float *rstd, int rows, int C,
                                 int accumulate, int dx_add) {
    if (!accumulate) {
        memset(dw, 0, (size_t)C * sizeof *dw);
        memset(db, 0, (size_t)C * sizeof *db);
    }
    for (int r = 0; r < rows; r++) {
        const uint16_t *g = dy + (size_t)r * C, *xr = x + (size_t)r * C;
        for (int c = 0; c < C; c++) {
            float d = hfl_op_widen(lp, g[c]);
            dw[c] += d * (hfl_op_widen(lp, xr[c]) - mean[r]) * rstd[r];
            db[c] += d;
        }
    }
    for (size_t i = 0; i < (size_t)rows; i++)
        hfl_lm_thread_layernorm_bwd_dx_lp(i, lp, dx, dy, x, w, mean, rstd, C, dx_add);
}

static void cpu_gelu_fwd_lp(hfl_precision lp, uint16_t *y, const uint16_t *x, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_lm_thread_gelu_fwd_lp(i, lp, y, x);
}

static void cpu_gelu_bwd_lp(hfl_precision lp, uint16_t *dx, const uint16_t *dy, const uint16_t *x,
                            size_t n) {
    for (size_t i = 0; i < n; i++) hfl_lm_thread_gelu_bwd_lp(i, lp, dx, dy, x);
}

static void cpu_heads_gather_lp(uint16_t *heads, const uint16_t *rows, int n, int T, int H, int hs,
                                int ld) {
    cpu_heads_copy(heads, (void *)rows, sizeof(uint16_t), n, T, H, hs, ld, 1);
}

static void cpu_heads_scatter_lp(uint16_t *rows, const uint16_t *heads, int n, int T, int H, int hs,
                                 int ld) {
    cpu_heads_copy((void *)heads, rows, sizeof(uint16_t), n, T, H, hs, ld, 0);
}

static void cpu_causal_softmax_lp(hfl_precision lp, uint16_t *p, const uint16_t *z, size_t n_rows,
                                  int T, float scale) {
    for (size_t i = 0; i < n_rows; i++) hfl_lm_thread_causal_softmax_lp(i, lp, p, z, T, scale);
}

static void cpu_causal_softmax_bwd_lp(hfl_precision lp, uint16_t *dz, const uint16_t *dp,
                                      const uint16_t *p, size_t n_rows, int T, float scale) {
    for (size_t i = 0; i < n_rows; i++) hfl_lm_thread_causal_softmax_bwd_lp(i, lp, dz, dp, p, T, scale);
}

static void cpu_adamw_step_lp(hfl_precision lp, float *master, float *m, float *v, const float *g,
                              uint16_t *w, size_t n, hfl_adamw_args a,
                              const hfl_step_scalars *skip_if_nonfinite) {
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return;
    a = cpu_adamw_count(a, skip_if_nonfinite);
    for (size_t i = 0; i < n; i++) hfl_lm_thread_adamw_lp(i, lp, master, m, v, g, w, a);
}

const hfl_lm_ops hfl_cpu_lm_ops = {
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .heads_gather = cpu_heads_gather,
    .heads_scatter = cpu_heads_scatter,
    .causal_softmax = cpu_causal_softmax,
    .causal_softmax_bwd = cpu_causal_softmax_bwd,
    .adamw_step = cpu_adamw_step,
    .embed_fwd_lp = cpu_embed_fwd_lp,
    .embed_bwd_lp = cpu_embed_bwd_lp,
    .layernorm_fwd_lp = cpu_layernorm_fwd_lp,
    .layernorm_bwd_lp = cpu_layernorm_bwd_lp,
    .gelu_fwd_lp = cpu_gelu_fwd_lp,
    .gelu_bwd_lp = cpu_gelu_bwd_lp,
    .heads_gather_lp = cpu_heads_gather_lp,
    .heads_scatter_lp = cpu_heads_scatter_lp,
    .causal_softmax_lp = cpu_causal_softmax_lp,
    .causal_softmax_bwd_lp = cpu_causal_softmax_bwd_lp,
    .adamw_step_lp = cpu_adamw_step_lp,
};
