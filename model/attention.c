/* attention.c: causal multi-head self-attention on any backend (attention.h). */
#include <math.h>

#include "kernels/lm.h"
#include "model/attention.h"

size_t hfl_attention_fwd_ws_bytes(int n, int T, int C, int H) {
    (void)H;
    return 3 * (size_t)n * T * C * sizeof(float);
}

size_t hfl_attention_bwd_ws_bytes(int n, int T, int C, int H) {
    return (4 * (size_t)n * T * C + (size_t)n * H * T * T) * sizeof(float);
}

void hfl_attention_forward(const hfl_backend *be, float *y, float *att, const float *qkv, float *ws,
                           int n, int T, int C, int H) {
    const hfl_lm_ops *lm = be->lm;
    int hs = C / H, heads = n * H;
    size_t per = (size_t)n * T * C;
    float *q = ws, *k = ws + per, *v = ws + 2 * per;
    lm->heads_gather(q, qkv, n, T, H, hs, 3 * C);
    lm->heads_gather(k, qkv + C, n, T, H, hs, 3 * C);
    lm->heads_gather(v, qkv + 2 * C, n, T, H, hs, 3 * C);
    long long sh = (long long)T * hs, st = (long long)T * T;
    be->sgemm_strided(0, 1, T, T, hs, 1.0f, q, hs, sh, k, hs, sh, 0.0f, att, T, st, heads);
    lm->causal_softmax(att, att, (size_t)heads * T, T, 1.0f / sqrtf((float)hs));
    be->sgemm_strided(0, 0, T, hs, T, 1.0f, att, T, st, v, hs, sh, 0.0f, q, hs, sh, heads);
    lm->heads_scatter(y, q, n, T, H, hs, C);
}

void hfl_attention_backward(const hfl_backend *be, float *dqkv, const float *dy, const float *qkv,
                            const float *att, float *ws, int n, int T, int C, int H) {
    const hfl_lm_ops *lm = be->lm;
    int hs = C / H, heads = n * H;
    size_t per = (size_t)n * T * C;
    float *q = ws, *k = ws + per, *v = ws + 2 * per, *d = ws + 3 * per, *datt = ws + 4 * per;
    lm->heads_gather(q, qkv, n, T, H, hs, 3 * C);
    lm->heads_gather(k, qkv + C, n, T, H, hs, 3 * C);
    lm->heads_gather(v, qkv + 2 * C, n, T, H, hs, 3 * C);
    lm->heads_gather(d, dy, n, T, H, hs, C);
    long long sh = (long long)T * hs, st = (long long)T * T;
    be->sgemm_strided(0, 1, T, T, hs, 1.0f, d, hs, sh, v, hs, sh, 0.0f, datt, T, st, heads);
    be->sgemm_strided(1, 0, T, hs, T, 1.0f, att, T, st, d, hs, sh, 0.0f, v, hs, sh, heads); /* dv */
    lm->causal_softmax_bwd(datt, datt, att, (size_t)heads * T, T, 1.0f / sqrtf((float)hs));
    be->sgemm_strided(0, 0, T, hs, T, 1.0f, datt, T, st, k, hs, sh, 0.0f, d, hs, sh, heads); /* dq */
    be->sgemm_strided(1, 0, T, hs, T, 1.0f, datt, T, st, q, hs, sh, 0.0f, k, hs, sh, heads); /* dk */
    lm->heads_scatter(dqkv, d, n, T, H, hs, 3 * C);
    lm->heads_scatter(dqkv + C, k, n, T, H, hs, 3 * C);
    lm->heads_scatter(dqkv + 2 * C, v, n, T, H, hs, 3 * C);
}

/* ---- 2-byte storage ---- */

/* Workspace regions start 64-byte aligned. */
static size_t al(size_t bytes) { return (bytes + 63) / 64 * 64; }

/* gemm_lp's staging for the attention GEMMs (all operands 2-byte): the
 * larger of T x T x hs and T x hs x T. */
static size_t att_gemm_ws(int T, int C, int H) {
    int hs = C / H;
    size_t a = hfl_gemm_lp_ws_bytes(0, T, T, hs), b = hfl_gemm_lp_ws_bytes(0, T, hs, T);
    return al(a > b ? a : b);
}

size_t hfl_attention_fwd_ws_bytes_lp(int n, int T, int C, int H) {
    return 3 * al((size_t)n * T * C * 2) + att_gemm_ws(T, C, H);
}

size_t hfl_attention_bwd_ws_bytes_lp(int n, int T, int C, int H) {
    return 4 * al((size_t)n * T * C * 2) + al((size_t)n * H * T * T * 2) + att_gemm_ws(T, C, H);
}

void hfl_attention_forward_lp(const hfl_backend *be, hfl_precision lp, uint16_t *y, uint16_t *att,
                              const uint16_t *qkv, void *ws, int n, int T, int C, int H) {
    const hfl_lm_ops *lm = be->lm;
    int hs = C / H, heads = n * H;
    size_t per = al((size_t)n * T * C * 2);
    char *w = ws;
    uint16_t *q = (uint16_t *)w, *k = (uint16_t *)(w + per), *v = (uint16_t *)(w + 2 * per);
    void *gws = w + 3 * per;
    lm->heads_gather_lp(q, qkv, n, T, H, hs, 3 * C);
    lm->heads_gather_lp(k, qkv + C, n, T, H, hs, 3 * C);
    lm->heads_gather_lp(v, qkv + 2 * C, n, T, H, hs, 3 * C);
    long long sh = (long long)T * hs, st = (long long)T * T;
    be->gemm_lp_strided(lp, 0, 0, 1, T, T, hs, 1.0f, q, hs, sh, k, hs, sh, 0.0f, att, T, st, heads,
                        NULL, HFL_BIAS_NONE, gws);
    lm->causal_softmax_lp(lp, att, att, (size_t)heads * T, T, 1.0f / sqrtf((float)hs));
    be->gemm_lp_strided(lp, 0, 0, 0, T, hs, T, 1.0f, att, T, st, v, hs, sh, 0.0f, q, hs, sh, heads,
                        NULL, HFL_BIAS_NONE, gws);
    lm->heads_scatter_lp(y, q, n, T, H, hs, C);
}

void hfl_attention_backward_lp(const hfl_backend *be, hfl_precision lp, uint16_t *dqkv,
                               const uint16_t *dy, const uint16_t *qkv, const uint16_t *att,
                               void *ws, int n, int T, int C, int H) {
    const hfl_lm_ops *lm = be->lm;
    int hs = C / H, heads = n * H;
    size_t per = al((size_t)n * T * C * 2);
    char *w = ws;
    uint16_t *q = (uint16_t *)w, *k = (uint16_t *)(w + per), *v = (uint16_t *)(w + 2 * per);
    uint16_t *d = (uint16_t *)(w + 3 * per), *datt = (uint16_t *)(w + 4 * per);
    void *gws = w + 4 * per + al((size_t)n * H * T * T * 2);
    lm->heads_gather_lp(q, qkv, n, T, H, hs, 3 * C);
    lm->heads_gather_lp(k, qkv + C, n, T, H, hs, 3 * C);
    lm->heads_gather_lp(v, qkv + 2 * C, n, T, H, hs, 3 * C);
    lm->heads_gather_lp(d, dy, n, T, H, hs, C);
    long long sh = (long long)T * hs, st = (long long)T * T;
    be->gemm_lp_strided(lp, 0, 0, 1, T, T, hs, 1.0f, d, hs, sh, v, hs, sh, 0.0f, datt, T, st, heads,
                        NULL, HFL_BIAS_NONE, gws);
    be->gemm_lp_strided(lp, 0, 1, 0, T, hs, T, 1.0f, att, T, st, d, hs, sh, 0.0f, v, hs, sh, heads,
                        NULL, HFL_BIAS_NONE, gws); /* dv */
    lm->causal_softmax_bwd_lp(lp, datt, datt, att, (size_t)heads * T, T, 1.0f / sqrtf((float)hs));
    be->gemm_lp_strided(lp, 0, 0, 0, T, hs, T, 1.0f, datt, T, st, k, hs, sh, 0.0f, d, hs, sh, heads,
                        NULL, HFL_BIAS_NONE, gws); /* dq */
    be->gemm_lp_strided(lp, 0, 1, 0, T, hs, T, 1.0f, datt, T, st, q, hs, sh, 0.0f, k, hs, sh, heads,
                        NULL, HFL_BIAS_NONE, gws); /* dk */
    lm->heads_scatter_lp(dqkv, d, n, T, H, hs, 3 * C);
    lm->heads_scatter_lp(dqkv + C, k, n, T, H, hs, 3 * C);
    lm->heads_scatter_lp(dqkv + 2 * C, v, n, T, H, hs, 3 * C);
}
