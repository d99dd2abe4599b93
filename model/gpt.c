/* gpt.c: the transformer block and the tied head on any backend (gpt.h). */
#include "model/gpt.h"

#include "kernels/lm.h"
#include "model/attention.h"
#include "model/layers.h"
#include "model/lora.h"

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

size_t hfl_gpt_block_saved_floats(int n, int T, int C, int H, int r) {
    size_t rows = (size_t)n * T;
    /* h1, qkv (3), ya, x2, h2, f (4), g (4): 15 C per row; 4 LN statistics; att;
     * then LoRA's four u (r per row) */
    return rows * (15 * (size_t)C + 4) + (size_t)n * H * T * T + 4 * rows * (size_t)r;
}

hfl_gpt_block_saved hfl_gpt_block_saved_view(float *b, int n, int T, int C, int H, int r) {
    size_t rows = (size_t)n * T, rc = rows * C, ru = rows * (size_t)r;
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
    s.att = b, b += (size_t)n * H * T * T;
    s.u_qkv = r ? b : NULL, s.u_proj = r ? b + ru : NULL;
    s.u_fc = r ? b + 2 * ru : NULL, s.u_fcp = r ? b + 3 * ru : NULL;
    return s;
}

/* Backward: A (4C per row: dg, df, then dqkv), B and D (C per row), then
 * attention's backward workspace; forward needs only attention's. With
 * adapters (r > 0), past attention's (rounded up to 64 bytes): du (r per
 * row) and the 2C-float layer-norm scratch (gpt.h). */
static size_t lora_ws_offset(int n, int T, int C, int H) {
    size_t rc = (size_t)n * T * C;
    return 6 * rc + (hfl_attention_bwd_ws_bytes(n, T, C, H) + 63) / 64 * 16; /* floats */
}

size_t hfl_gpt_block_ws_bytes(int n, int T, int C, int H, int r) {
    size_t rc = (size_t)n * T * C;
    if (r) return (lora_ws_offset(n, T, C, H) + (size_t)n * T * r + 2 * (size_t)C) * sizeof(float);
    return 6 * rc * sizeof(float) + hfl_attention_bwd_ws_bytes(n, T, C, H);
}

/* y = r + x w^T + b with r already in y: the residual branch as a GEMM with beta 1. */
static void dense_onto(const hfl_backend *be, const float *w, const float *b, const float *x,
                       float *y, int rows, int in, int out) {
    be->sgemm(0, 1, rows, out, in, 1.0f, x, in, w, in, 1.0f, y, out);
    be->bias_add(y, b, rows, out);
}

void hfl_gpt_block_forward(const hfl_backend *be, const hfl_gpt_block_params *p,
                           const hfl_gpt_lora *lo, const float *x, float *out,
                           const hfl_gpt_block_saved *s, void *ws, int n, int T, int C, int H) {
    const hfl_lm_ops *lm = be->lm;
    int rows = n * T, r = lo ? lo->r : 0;
    float sc = lo ? lo->scale : 0.0f;
    size_t rc = (size_t)rows * C;
    lm->layernorm_fwd(s->h1, s->mean1, s->rstd1, x, p->ln1_w, p->ln1_b, rows, C);
    hfl_dense_forward(be, p->qkv_w, p->qkv_b, s->h1, s->qkv, rows, C, 3 * C);
    if (lo) hfl_lora_forward(be, lo->w.qkv_a, lo->w.qkv_b, s->h1, s->u_qkv, s->qkv, rows, C, 3 * C, r, sc);
    hfl_attention_forward(be, s->ya, s->att, s->qkv, ws, n, T, C, H);
    be->copy(s->x2, x, rc * sizeof(float));
    dense_onto(be, p->proj_w, p->proj_b, s->ya, s->x2, rows, C, C);
    if (lo) hfl_lora_forward(be, lo->w.proj_a, lo->w.proj_b, s->ya, s->u_proj, s->x2, rows, C, C, r, sc);
    lm->layernorm_fwd(s->h2, s->mean2, s->rstd2, s->x2, p->ln2_w, p->ln2_b, rows, C);
    hfl_dense_forward(be, p->fc_w, p->fc_b, s->h2, s->f, rows, C, 4 * C);
    if (lo) hfl_lora_forward(be, lo->w.fc_a, lo->w.fc_b, s->h2, s->u_fc, s->f, rows, C, 4 * C, r, sc);
    lm->gelu_fwd(s->g, s->f, 4 * rc);
    be->copy(out, s->x2, rc * sizeof(float));
    dense_onto(be, p->fcp_w, p->fcp_b, s->g, out, rows, 4 * C, C);
    if (lo) hfl_lora_forward(be, lo->w.fcp_a, lo->w.fcp_b, s->g, s->u_fcp, out, rows, 4 * C, C, r, sc);
}

/* A projection's backward (x [rows, in], dy [rows, out], dx [rows, in]
 * overwritten): without adapters dense.c's (dW, db and dx); with them the
 * frozen base's dx = dy W alone (dense.c would write dW and db), then the
 * adapter's gradients and dx term (lora.c), du [rows, r] as workspace. */
static void proj_backward(const hfl_backend *be, const hfl_gpt_lora *lo, const float *w,
                          float *dw, float *db, const float *la, const float *lb, float *dla,
                          float *dlb, const float *u, const float *x, const float *dy, float *dx,
                          float *du, int rows, int in, int out, int accumulate) {
    if (!lo) {
        hfl_dense_backward(be, w, x, dy, dw, db, dx, rows, in, out, accumulate);
        return;
    }
    if (dx) be->sgemm(0, 0, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
    hfl_lora_backward(be, la, lb, x, u, dy, dla, dlb, du, dx, rows, in, out, lo->r, lo->scale, accumulate);
}

void hfl_gpt_block_backward(const hfl_backend *be, const hfl_gpt_block_params *p,
                            const hfl_gpt_block_params *d, const hfl_gpt_lora *lo, const float *x,
                            const hfl_gpt_block_saved *s, const float *dout, float *dx, void *ws,
                            int n, int T, int C, int H, int accumulate) {
    const hfl_lm_ops *lm = be->lm;
    int rows = n * T;
    size_t rc = (size_t)rows * C;
    float *A = ws, *B = A + 4 * rc, *D = B + rc, *E = D + rc;
    /* with adapters: du, the LN scratch; the base's gradients unused (NULL ok) */
    float *du = lo ? (float *)ws + lora_ws_offset(n, T, C, H) : NULL;
    float *lnw = lo ? du + (size_t)rows * lo->r : NULL, *lnb = lo ? lnw + C : NULL;
    hfl_gpt_block_params none = {0}, g = lo || !d ? none : *d;
    hfl_gpt_lora_params lw = lo ? lo->w : (hfl_gpt_lora_params){0}, ld = lo ? lo->d : lw;
    int ln_acc = lo ? 0 : accumulate;
    /* MLP: dg = dout Wp, df = dg gelu'(f), dh2 = df Wfc */
    proj_backward(be, lo, p->fcp_w, g.fcp_w, g.fcp_b, lw.fcp_a, lw.fcp_b, ld.fcp_a, ld.fcp_b,
                  s->u_fcp, s->g, dout, A, du, rows, 4 * C, C, accumulate);
    lm->gelu_bwd(A, A, s->f, 4 * rc);
    proj_backward(be, lo, p->fc_w, g.fc_w, g.fc_b, lw.fc_a, lw.fc_b, ld.fc_a, ld.fc_b, s->u_fc,
                  s->h2, A, B, du, rows, C, 4 * C, accumulate);
    /* dx2 = dout (residual) + LN2's backward of dh2 */
    be->copy(D, dout, rc * sizeof(float));
    lm->layernorm_bwd(D, lo ? lnw : g.ln2_w, lo ? lnb : g.ln2_b, B, s->x2, p->ln2_w, s->mean2,
                      s->rstd2, rows, C, ln_acc, 1);
    /* attention: dya = dx2 Wo, dqkv, dh1 = dqkv Wqkv */
    proj_backward(be, lo, p->proj_w, g.proj_w, g.proj_b, lw.proj_a, lw.proj_b, ld.proj_a,
                  ld.proj_b, s->u_proj, s->ya, D, B, du, rows, C, C, accumulate);
    hfl_attention_backward(be, A, B, s->qkv, s->att, E, n, T, C, H);
    proj_backward(be, lo, p->qkv_w, g.qkv_w, g.qkv_b, lw.qkv_a, lw.qkv_b, ld.qkv_a, ld.qkv_b,
                  s->u_qkv, s->h1, A, dx ? B : NULL, du, rows, C, 3 * C, accumulate);
    if (!dx) return; /* nothing below trains (LoRA's first block): no dh1, no LN1 backward */
    /* dx = dx2 (residual) + LN1's backward of dh1 */
    be->copy(dx, D, rc * sizeof(float));
    lm->layernorm_bwd(dx, lo ? lnw : g.ln1_w, lo ? lnb : g.ln1_b, B, x, p->ln1_w, s->mean1,
                      s->rstd1, rows, C, ln_acc, 1);
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
    if (dwte) be->sgemm(1, 0, V, C, rows, 1.0f, dlogits, V, hf, C, accumulate ? 1.0f : 0.0f, dwte, C);
    be->sgemm(0, 0, rows, C, V, 1.0f, dlogits, V, wte, C, 0.0f, dhf, C);
    be->lm->layernorm_bwd(dx, dlnf_w, dlnf_b, dhf, x, lnf_w, mean, rstd, rows, C, accumulate, 0);
}
