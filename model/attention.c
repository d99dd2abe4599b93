/* attention.c: causal multi-head self-attention on any backend, in any
 * storage type (attention.h). */
#include <math.h>

#include "kernels/lm.h"
#include "model/attention.h"
#include "model/layers.h"

/* The gemm's staging for the attention GEMMs (all operands of type t): the
 * larger of T x T x hs and T x hs x T, 64-byte rounded (0 in fp32). */
static size_t att_gemm_ws(hfl_precision t, int T, int C, int H) {
    int hs = C / H;
    size_t a = hfl_gemm_ws_bytes(t, 0, T, T, hs), b = hfl_gemm_ws_bytes(t, 0, T, hs, T);
    return ((a > b ? a : b) + 63) / 64 * 64;
}

/* Bytes of one head tensor [n, H, T, hs] and of the n H T x T scores. */
static size_t heads_bytes(hfl_precision t, int n, int T, int C) {
    return hfl_region_bytes(t, (size_t)n * T * C * hfl_precision_bytes(t));
}
static size_t scores_bytes(hfl_precision t, int n, int T, int H) {
    return hfl_region_bytes(t, (size_t)n * H * T * T * hfl_precision_bytes(t));
}

size_t hfl_attention_fwd_ws_bytes(hfl_precision t, int n, int T, int C, int H) {
    return 3 * heads_bytes(t, n, T, C) + att_gemm_ws(t, T, C, H);
}

size_t hfl_attention_bwd_ws_bytes(hfl_precision t, int n, int T, int C, int H) {
    return 4 * heads_bytes(t, n, T, C) + scores_bytes(t, n, T, H) + att_gemm_ws(t, T, C, H);
}

void hfl_attention_forward(const hfl_backend *be, hfl_precision t, void *y, void *att,
                           const void *qkv, void *ws, int n, int T, int C, int H) {
    const hfl_lm_ops *lm = be->lm;
    int hs = C / H, heads = n * H;
    size_t per = heads_bytes(t, n, T, C);
    char *w = ws, *q = w, *k = w + per, *v = w + 2 * per, *gws = w + 3 * per;
    lm->heads_gather(t, q, qkv, n, T, H, hs, 3 * C);
    lm->heads_gather(t, k, hfl_at(t, qkv, (size_t)C), n, T, H, hs, 3 * C);
    lm->heads_gather(t, v, hfl_at(t, qkv, 2 * (size_t)C), n, T, H, hs, 3 * C);
    long long sh = (long long)T * hs, st = (long long)T * T;
    be->gemm_strided(t, 0, 0, 1, T, T, hs, 1.0f, q, hs, sh, k, hs, sh, 0.0f, att, T, st, heads,
                     NULL, HFL_BIAS_NONE, gws);
    lm->causal_softmax(t, att, att, (size_t)heads * T, T, 1.0f / sqrtf((float)hs));
    be->gemm_strided(t, 0, 0, 0, T, hs, T, 1.0f, att, T, st, v, hs, sh, 0.0f, q, hs, sh, heads,
                     NULL, HFL_BIAS_NONE, gws);
    lm->heads_scatter(t, y, q, n, T, H, hs, C);
}

void hfl_attention_backward(const hfl_backend *be, hfl_precision t, void *dqkv, const void *dy,
                            const void *qkv, const void *att, void *ws, int n, int T, int C,
                            int H) {
    const hfl_lm_ops *lm = be->lm;
    int hs = C / H, heads = n * H;
    size_t per = heads_bytes(t, n, T, C);
    char *w = ws, *q = w, *k = w + per, *v = w + 2 * per, *d = w + 3 * per, *datt = w + 4 * per;
    char *gws = datt + scores_bytes(t, n, T, H);
    lm->heads_gather(t, q, qkv, n, T, H, hs, 3 * C);
    lm->heads_gather(t, k, hfl_at(t, qkv, (size_t)C), n, T, H, hs, 3 * C);
    lm->heads_gather(t, v, hfl_at(t, qkv, 2 * (size_t)C), n, T, H, hs, 3 * C);
    lm->heads_gather(t, d, dy, n, T, H, hs, C);
    long long sh = (long long)T * hs, st = (long long)T * T;
    be->gemm_strided(t, 0, 0, 1, T, T, hs, 1.0f, d, hs, sh, v, hs, sh, 0.0f, datt, T, st, heads,
                     NULL, HFL_BIAS_NONE, gws);
    be->gemm_strided(t, 0, 1, 0, T, hs, T, 1.0f, att, T, st, d, hs, sh, 0.0f, v, hs, sh, heads,
                     NULL, HFL_BIAS_NONE, gws); /* dv */
    lm->causal_softmax_bwd(t, datt, datt, att, (size_t)heads * T, T, 1.0f / sqrtf((float)hs));
    be->gemm_strided(t, 0, 0, 0, T, hs, T, 1.0f, datt, T, st, k, hs, sh, 0.0f, d, hs, sh, heads,
                     NULL, HFL_BIAS_NONE, gws); /* dq */
    be->gemm_strided(t, 0, 1, 0, T, hs, T, 1.0f, datt, T, st, q, hs, sh, 0.0f, k, hs, sh, heads,
                     NULL, HFL_BIAS_NONE, gws); /* dk */
    lm->heads_scatter(t, dqkv, d, n, T, H, hs, 3 * C);
    lm->heads_scatter(t, hfl_at(t, dqkv, (size_t)C), k, n, T, H, hs, 3 * C);
    lm->heads_scatter(t, hfl_at(t, dqkv, 2 * (size_t)C), v, n, T, H, hs, 3 * C);
}
