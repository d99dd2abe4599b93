/* gpt.c: the transformer block and the tied head on any backend (gpt.h). */
#include "model/gpt.h"

#include "kernels/lm.h"
#include "model/attention.h"
#include "model/layers.h"

size_t hfl_gpt_block_n_params(int C) { return 12 * (size_t)C * C + 13 * (size_t)C; }

/* Element offsets of a block's 12 tensors, in gpt.h's order (the struct's). */
void hfl_gpt_block_offsets(int C, size_t off[12]) {
    size_t c = (size_t)C, count[12] = {c, c, 3 * c * c, 3 * c, c * c, c, c, c, 4 * c * c, 4 * c, 4 * c * c, c};
    for (int i = 0; i < 12; i++) off[i] = i ? off[i - 1] + count[i - 1] : 0;
}

hfl_gpt_block_params hfl_gpt_block_view(float *b, int C) {
    size_t o[12];
    hfl_gpt_block_offsets(C, o);
    return (hfl_gpt_block_params){b + o[0], b + o[1], b + o[2], b + o[3], b + o[4], b + o[5],
                                  b + o[6], b + o[7], b + o[8], b + o[9], b + o[10], b + o[11]};
}

size_t hfl_gpt_block_saved_floats(int n, int T, int C, int H) {
    size_t rows = (size_t)n * T;
    /* h1, qkv (3), ya, x2, h2, f (4), g (4): 15 C per row; 4 LN statistics; att */
    return rows * (15 * (size_t)C + 4) + (size_t)n * H * T * T;
}

hfl_gpt_block_saved hfl_gpt_block_saved_view(float *b, int n, int T, int C, int H) {
    size_t rows = (size_t)n * T, rc = rows * C;
    hfl_gpt_block_saved s;
    s.h1 = b, b += rc;
    s.qkv = b, b += 3 * rc;
    s.ya = b, b += rc;
    s.x2 = b, b += rc;
    s.h2 = b, b += rc;
    s.f = b, b += 4 * rc;
    s.g = b, b += 4 * rc;
    s.mean1 = b, b += rows;
    s.rstd1 = b, b += rows;
    s.mean2 = b, b += rows;
    s.rstd2 = b, b += rows;
    s.att = b;
    (void)H;
    return s;
}

/* Backward: A (4C per row: dg, df, then dqkv), B and D (C per row), then
 * attention's backward workspace; forward needs only attention's. */
size_t hfl_gpt_block_ws_bytes(int n, int T, int C, int H) {
    size_t rc = (size_t)n * T * C;
    return 6 * rc * sizeof(float) + hfl_attention_bwd_ws_bytes(n, T, C, H);
}

/* y = r + x w^T + b with r already in y: the residual branch as a GEMM with beta 1. */
static void dense_onto(const hfl_backend *be, const float *w, const float *b, const float *x,
                       float *y, int rows, int in, int out) {
    be->sgemm(0, 1, rows, out, in, 1.0f, x, in, w, in, 1.0f, y, out);
    be->bias_add(y, b, rows, out);
}

void hfl_gpt_block_forward(const hfl_backend *be, const hfl_gpt_block_params *p, const float *x,
                           float *out, const hfl_gpt_block_saved *s, void *ws, int n, int T, int C,
                           int H) {
    const hfl_lm_ops *lm = be->lm;
    int rows = n * T;
    size_t rc = (size_t)rows * C;
    lm->layernorm_fwd(s->h1, s->mean1, s->rstd1, x, p->ln1_w, p->ln1_b, rows, C);
    hfl_dense_forward(be, p->qkv_w, p->qkv_b, s->h1, s->qkv, rows, C, 3 * C);
    hfl_attention_forward(be, s->ya, s->att, s->qkv, ws, n, T, C, H);
    be->copy(s->x2, x, rc * sizeof(float));
    dense_onto(be, p->proj_w, p->proj_b, s->ya, s->x2, rows, C, C);
    lm->layernorm_fwd(s->h2, s->mean2, s->rstd2, s->x2, p->ln2_w, p->ln2_b, rows, C);
    hfl_dense_forward(be, p->fc_w, p->fc_b, s->h2, s->f, rows, C, 4 * C);
    lm->gelu_fwd(s->g, s->f, 4 * rc);
    be->copy(out, s->x2, rc * sizeof(float));
    dense_onto(be, p->fcp_w, p->fcp_b, s->g, out, rows, 4 * C, C);
}

void hfl_gpt_block_backward(const hfl_backend *be, const hfl_gpt_block_params *p,
                            const hfl_gpt_block_params *d, const float *x,
                            const hfl_gpt_block_saved *s, const float *dout, float *dx, void *ws,
                            int n, int T, int C, int H, int accumulate) {
    const hfl_lm_ops *lm = be->lm;
    int rows = n * T;
    size_t rc = (size_t)rows * C;
    float *A = ws, *B = A + 4 * rc, *D = B + rc, *E = D + rc;
    /* MLP: dg = dout Wp, df = dg gelu'(f), dh2 = df Wfc */
    hfl_dense_backward(be, p->fcp_w, s->g, dout, d->fcp_w, d->fcp_b, A, rows, 4 * C, C, accumulate);
    lm->gelu_bwd(A, A, s->f, 4 * rc);
    hfl_dense_backward(be, p->fc_w, s->h2, A, d->fc_w, d->fc_b, B, rows, C, 4 * C, accumulate);
    /* dx2 = dout (residual) + LN2's backward of dh2 */
    be->copy(D, dout, rc * sizeof(float));
    lm->layernorm_bwd(D, d->ln2_w, d->ln2_b, B, s->x2, p->ln2_w, s->mean2, s->rstd2, rows, C,
                      accumulate, 1);
    /* attention: dya = dx2 Wo, dqkv, dh1 = dqkv Wqkv */
    hfl_dense_backward(be, p->proj_w, s->ya, D, d->proj_w, d->proj_b, B, rows, C, C, accumulate);
    hfl_attention_backward(be, A, B, s->qkv, s->att, E, n, T, C, H);
    hfl_dense_backward(be, p->qkv_w, s->h1, A, d->qkv_w, d->qkv_b, B, rows, C, 3 * C, accumulate);
    /* dx = dx2 (residual) + LN1's backward of dh1 */
    be->copy(dx, D, rc * sizeof(float));
    lm->layernorm_bwd(dx, d->ln1_w, d->ln1_b, B, x, p->ln1_w, s->mean1, s->rstd1, rows, C,
                      accumulate, 1);
}

void hfl_gpt_head_forward(const hfl_backend *be, const float *x, const float *lnf_w,
                          const float *lnf_b, const float *wte, float *hf, float *mean,
                          float *rstd, float *logits, int rows, int C, int V) {
    be->lm->layernorm_fwd(hf, mean, rstd, x, lnf_w, lnf_b, rows, C);
    be->sgemm(0, 1, rows, V, C, 1.0f, hf, C, wte, C, 0.0f, logits, V);
}

void hfl_gpt_head_backward(const hfl_backend *be, const float *x, const float *lnf_w,
                           const float *wte, const float *hf, const float *mean, const float *rstd,
                           const float *dlogits, float *dwte, float *dlnf_w, float *dlnf_b,
                           float *dx, float *dhf, int rows, int C, int V, int accumulate) {
    be->sgemm(1, 0, V, C, rows, 1.0f, dlogits, V, hf, C, accumulate ? 1.0f : 0.0f, dwte, C);
    be->sgemm(0, 0, rows, C, V, 1.0f, dlogits, V, wte, C, 0.0f, dhf, C);
    be->lm->layernorm_bwd(dx, dlnf_w, dlnf_b, dhf, x, lnf_w, mean, rstd, rows, C, accumulate, 0);
}
