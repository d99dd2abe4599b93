/* lm_cpu.c: the CPU backend's transformer ops (kernels/lm.h): loops over the
 * thread bodies of kernels/lm_hd.h, in index order, and over its row bodies
 * (hfl_lm_row_*, hfl_lm_cols_*), which run a CUDA warp's lane tree on the CPU.
 *
 * The token embedding's gradient scatters: it walks rows r = 0, 1, ... and
 * adds each into its token's row, which sums every output in the order of
 * lm_hd.h's buckets (and so of the CUDA kernel, a block per token), over
 * widened values in a 2-byte type. The head gather and scatter are plain copies, done as one memcpy
 * per head row. Each loop over a storage type is an always-inline function
 * of t (*_in) that its op calls with t a constant of each type, so that it
 * is compiled once per type (as in backend_cpu.c). */
#include <string.h>

#include "kernels/lm.h"

static inline __attribute__((always_inline)) void embed_fwd_in(hfl_precision t, void *y,
                                                               const void *tokens, const void *wte,
                                                               const void *wpe, int rows, int T,
                                                               int C, int V) {
    size_t n = (size_t)rows * C;
    for (size_t i = 0; i < n; i++) hfl_lm_thread_embed_fwd(i, t, y, tokens, wte, wpe, T, C, V);
}
static void cpu_embed_fwd(hfl_precision t, void *y, const void *tokens, const void *wte,
                          const void *wpe, int rows, int T, int C, int V) {
    if (t == HFL_PREC_FP32) embed_fwd_in(HFL_PREC_FP32, y, tokens, wte, wpe, rows, T, C, V);
    else if (t == HFL_PREC_BF16) embed_fwd_in(HFL_PREC_BF16, y, tokens, wte, wpe, rows, T, C, V);
    else embed_fwd_in(HFL_PREC_FP16, y, tokens, wte, wpe, rows, T, C, V);
}

static inline __attribute__((always_inline)) void embed_bwd_in(hfl_precision t, float *dwte,
                                                               float *dwpe, const void *dy,
                                                               const void *tokens, int rows, int T,
                                                               int C, int V, int accumulate) {
    if (!accumulate) memset(dwte, 0, (size_t)V * C * sizeof *dwte);
    for (int r = 0; r < rows; r++) {
        float *d = dwte + (size_t)hfl_lm_token(hfl_ld(t, tokens, (size_t)r), V) * C;
        for (int c = 0; c < C; c++) d[c] += hfl_ld(t, dy, (size_t)r * C + c);
    }
    for (size_t i = 0; i < (size_t)T * C; i++)
        hfl_lm_thread_embed_bwd_wpe(i, t, dwpe, dy, rows, T, C, accumulate);
}
static void cpu_embed_bwd(hfl_precision t, float *dwte, float *dwpe, const void *dy,
                          const void *tokens, int rows, int T, int C, int V, int accumulate) {
    if (t == HFL_PREC_FP32)
        embed_bwd_in(HFL_PREC_FP32, dwte, dwpe, dy, tokens, rows, T, C, V, accumulate);
    else if (t == HFL_PREC_BF16)
        embed_bwd_in(HFL_PREC_BF16, dwte, dwpe, dy, tokens, rows, T, C, V, accumulate);
    else embed_bwd_in(HFL_PREC_FP16, dwte, dwpe, dy, tokens, rows, T, C, V, accumulate);
}

static inline __attribute__((always_inline)) void layernorm_fwd_in(hfl_precision t, void *y,
                                                                   float *mean, float *rstd,
                                                                   const void *x, const void *w,
                                                                   const void *b, int rows, int C) {
    for (size_t i = 0; i < (size_t)rows; i++)
        hfl_lm_row_layernorm_fwd(i, t, y, mean, rstd, x, w, b, C);
}
static void cpu_layernorm_fwd(hfl_precision t, void *y, float *mean, float *rstd, const void *x,
                              const void *w, const void *b, int rows, int C) {
    if (t == HFL_PREC_FP32) layernorm_fwd_in(HFL_PREC_FP32, y, mean, rstd, x, w, b, rows, C);
    else if (t == HFL_PREC_BF16) layernorm_fwd_in(HFL_PREC_BF16, y, mean, rstd, x, w, b, rows, C);
    else layernorm_fwd_in(HFL_PREC_FP16, y, mean, rstd, x, w, b, rows, C);
}

static inline __attribute__((always_inline)) void
layernorm_bwd_in(hfl_precision t, void *dx, float *dw, float *db, const void *dy, const void *x,
                 const void *w, const float *mean, const float *rstd, int rows, int C,
                 int accumulate, int dx_add) {
    for (int c0 = 0; c0 < C; c0 += HFL_LM_COL_TILE) {
        int n = C - c0 < HFL_LM_COL_TILE ? C - c0 : HFL_LM_COL_TILE;
        hfl_lm_cols_layernorm_dw(c0, n, t, dw, db, dy, x, mean, rstd, rows, C, accumulate);
    }
    for (size_t i = 0; i < (size_t)rows; i++)
        hfl_lm_row_layernorm_bwd_dx(i, t, dx, dy, x, w, mean, rstd, C, dx_add);
}
static void cpu_layernorm_bwd(hfl_precision t, void *dx, float *dw, float *db, const void *dy,
                              const void *x, const void *w, const float *mean, const float *rstd,
                              int rows, int C, int accumulate, int dx_add) {
    if (t == HFL_PREC_FP32)
        layernorm_bwd_in(HFL_PREC_FP32, dx, dw, db, dy, x, w, mean, rstd, rows, C, accumulate,
                         dx_add);
    else if (t == HFL_PREC_BF16)
        layernorm_bwd_in(HFL_PREC_BF16, dx, dw, db, dy, x, w, mean, rstd, rows, C, accumulate,
                         dx_add);
    else
        layernorm_bwd_in(HFL_PREC_FP16, dx, dw, db, dy, x, w, mean, rstd, rows, C, accumulate,
                         dx_add);
}

static inline __attribute__((always_inline)) void gelu_fwd_in(hfl_precision t, void *y,
                                                              const void *x, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_lm_thread_gelu_fwd(i, t, y, x);
}
static void cpu_gelu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    if (t == HFL_PREC_FP32) gelu_fwd_in(HFL_PREC_FP32, y, x, n);
    else if (t == HFL_PREC_BF16) gelu_fwd_in(HFL_PREC_BF16, y, x, n);
    else gelu_fwd_in(HFL_PREC_FP16, y, x, n);
}

static inline __attribute__((always_inline)) void
gelu_bwd_in(hfl_precision t, void *dx, const void *dy, const void *x, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_lm_thread_gelu_bwd(i, t, dx, dy, x);
}
static void cpu_gelu_bwd(hfl_precision t, void *dx, const void *dy, const void *x, size_t n) {
    if (t == HFL_PREC_FP32) gelu_bwd_in(HFL_PREC_FP32, dx, dy, x, n);
    else if (t == HFL_PREC_BF16) gelu_bwd_in(HFL_PREC_BF16, dx, dy, x, n);
    else gelu_bwd_in(HFL_PREC_FP16, dx, dy, x, n);
}

/* Heads are copies: one memcpy of hs elements per (sequence, head, token),
 * the same elements hfl_lm_head_src maps (a quarter of the block's step went
 * to its per-element divisions). to_heads: rows -> heads, else back. */
static void cpu_heads_copy(hfl_precision t, void *heads, void *rows, int n, int T, int H, int hs,
                           int ld, int to_heads) {
    size_t esize = hfl_precision_bytes(t), run = (size_t)hs * esize;
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++)
            for (int q = 0; q < T; q++) {
                char *hp = (char *)heads + ((((size_t)b * H + h) * T + q) * hs) * esize;
                char *rp = (char *)rows + (((size_t)b * T + q) * ld + (size_t)h * hs) * esize;
                if (to_heads) memcpy(hp, rp, run);
                else memcpy(rp, hp, run);
            }
}

static void cpu_heads_gather(hfl_precision t, void *heads, const void *rows, int n, int T, int H,
                             int hs, int ld) {
    cpu_heads_copy(t, heads, (void *)rows, n, T, H, hs, ld, 1);
}

static void cpu_heads_scatter(hfl_precision t, void *rows, const void *heads, int n, int T, int H,
                              int hs, int ld) {
    cpu_heads_copy(t, (void *)heads, rows, n, T, H, hs, ld, 0);
}

static inline __attribute__((always_inline)) void
causal_softmax_in(hfl_precision t, void *p, const void *z, size_t n_rows, int T, float scale) {
    for (size_t i = 0; i < n_rows; i++) hfl_lm_row_causal_softmax(i, t, p, z, T, scale);
}
static void cpu_causal_softmax(hfl_precision t, void *p, const void *z, size_t n_rows, int T,
                               float scale) {
    if (t == HFL_PREC_FP32) causal_softmax_in(HFL_PREC_FP32, p, z, n_rows, T, scale);
    else if (t == HFL_PREC_BF16) causal_softmax_in(HFL_PREC_BF16, p, z, n_rows, T, scale);
    else causal_softmax_in(HFL_PREC_FP16, p, z, n_rows, T, scale);
}

static inline __attribute__((always_inline)) void
causal_softmax_bwd_in(hfl_precision t, void *dz, const void *dp, const void *p, size_t n_rows,
                      int T, float scale) {
    for (size_t i = 0; i < n_rows; i++) hfl_lm_row_causal_softmax_bwd(i, t, dz, dp, p, T, scale);
}
static void cpu_causal_softmax_bwd(hfl_precision t, void *dz, const void *dp, const void *p,
                                   size_t n_rows, int T, float scale) {
    if (t == HFL_PREC_FP32) causal_softmax_bwd_in(HFL_PREC_FP32, dz, dp, p, n_rows, T, scale);
    else if (t == HFL_PREC_BF16) causal_softmax_bwd_in(HFL_PREC_BF16, dz, dp, p, n_rows, T, scale);
    else causal_softmax_bwd_in(HFL_PREC_FP16, dz, dp, p, n_rows, T, scale);
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
};
