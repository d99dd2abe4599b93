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
