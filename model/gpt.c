/* gpt.c: the transformer block and the tied head on any backend, in any
 * storage type (gpt.h). */
#include "model/gpt.h"

#include "kernels/lm.h"
#include "model/attention.h"
#include "model/layers.h"
#include "model/lora.h"

static size_t al(size_t bytes) { return (bytes + 63) / 64 * 64; }
static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

size_t hfl_gpt_block_n_params(int C) { return 12 * (size_t)C * C + 13 * (size_t)C; }

/* Element offsets of a block's 12 tensors, in gpt.h's order (the struct's). */
void hfl_gpt_block_offsets(int C, size_t off[12]) {
    size_t c = (size_t)C, count[12] = {c, c, 3 * c * c, 3 * c, c * c, c, c, c, 4 * c * c, 4 * c, 4 * c * c, c};
    for (int i = 0; i < 12; i++) off[i] = i ? off[i - 1] + count[i - 1] : 0;
}

hfl_gpt_block_params hfl_gpt_block_view(hfl_precision t, void *b, int C) {
    size_t o[12];
    hfl_gpt_block_offsets(C, o);
    hfl_gpt_block_params p;
    void **at[12] = {&p.ln1_w, &p.ln1_b, &p.qkv_w, &p.qkv_b, &p.proj_w, &p.proj_b,
                     &p.ln2_w, &p.ln2_b, &p.fc_w,  &p.fc_b,  &p.fcp_w,  &p.fcp_b};
    for (int i = 0; i < 12; i++) *at[i] = hfl_at(t, b, o[i]);
    return p;
}

/* Regions (hfl_region_bytes): h1, ya, x2, h2 (C per row), qkv (3C), f, g
 * (4C) and att (n H T T) of type t; four fp32 statistics per row; then,
 * with adapters (r > 0), LoRA's four u (r per row) of type t. */
size_t hfl_gpt_block_saved_bytes(hfl_precision t, int n, int T, int C, int H, int r) {
    size_t rows = (size_t)n * T, es = hfl_precision_bytes(t);
    return 4 * hfl_region_bytes(t, rows * C * es) + hfl_region_bytes(t, 3 * rows * C * es) +
           2 * hfl_region_bytes(t, 4 * rows * C * es) +
           hfl_region_bytes(t, (size_t)n * H * T * T * es) + 4 * hfl_region_bytes(t, rows * 4) +
           (r ? 4 * hfl_region_bytes(t, rows * r * es) : 0);
}

hfl_gpt_block_saved hfl_gpt_block_saved_view(hfl_precision t, void *base, int n, int T, int C,
                                             int H, int r) {
    size_t rows = (size_t)n * T, es = hfl_precision_bytes(t);
    size_t rc = hfl_region_bytes(t, rows * C * es), ru = hfl_region_bytes(t, rows * r * es);
    size_t st = hfl_region_bytes(t, rows * 4);
    char *b = base;
    hfl_gpt_block_saved s;
    s.h1 = b, b += rc;
    s.ya = b, b += rc;
    s.x2 = b, b += rc;
    s.h2 = b, b += rc;
    s.qkv = b, b += hfl_region_bytes(t, 3 * rows * C * es);
    s.f = b, b += hfl_region_bytes(t, 4 * rows * C * es);
    s.g = b, b += hfl_region_bytes(t, 4 * rows * C * es);
    s.att = b, b += hfl_region_bytes(t, (size_t)n * H * T * T * es);
    s.mean1 = (float *)b, b += st;
    s.rstd1 = (float *)b, b += st;
    s.mean2 = (float *)b, b += st;
    s.rstd2 = (float *)b, b += st;
    s.u_qkv = r ? b : NULL, s.u_proj = r ? b + ru : NULL;
    s.u_fc = r ? b + 2 * ru : NULL, s.u_fcp = r ? b + 3 * ru : NULL;
    return s;
}

/* The gemm's staging for the block's dense GEMMs (forward, and backward
 * when asked) and, with adapters, their GEMMs (0 in fp32). */
static size_t dense_ws(hfl_precision t, int rows, int C, int r, int backward) {
    size_t w = 0;
    int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}; /* in, out */
    for (int i = 0; i < 4; i++) {
        w = mx(w, hfl_dense_workspace_bytes(t, rows, shapes[i][0], shapes[i][1], 0));
        if (backward) w = mx(w, hfl_dense_workspace_bytes(t, rows, shapes[i][0], shapes[i][1], 1));
        if (r) w = mx(w, hfl_lora_ws_bytes(t, rows, shapes[i][0], shapes[i][1], r));
    }
    return al(w);
}

/* Backward: A (4C per row: dg, df, then dqkv), B and D (C per row), of type
 * t; then the tail, the larger of attention's workspace and the dense
 * staging; then, with adapters, du (r per row, of type t) and the fp32
 * 2C-float layer-norm scratch (gpt.h), the tail 64-byte rounded before them.
 * The forward has a workspace of its own. */
static size_t tail_bytes(hfl_precision t, int n, int T, int C, int H, int r) {
    return mx(hfl_attention_bwd_ws_bytes(t, n, T, C, H), dense_ws(t, n * T, C, r, 1));
}
static size_t tail_at(hfl_precision t, int n, int T, int C) {
    size_t rc = (size_t)n * T * C * hfl_precision_bytes(t);
    return hfl_region_bytes(t, 4 * rc) + 2 * hfl_region_bytes(t, rc);
}

/* Forward (and recompute): attention's forward workspace or the dense
 * staging, from the workspace's start. It is a buffer of its own in a plan,
 * so the backward's larger prefix is not reserved (and left untouched) there. */
size_t hfl_gpt_block_fwd_ws_bytes(hfl_precision t, int n, int T, int C, int H, int r) {
    return hfl_region_bytes(
        t, mx(hfl_attention_fwd_ws_bytes(t, n, T, C, H), dense_ws(t, n * T, C, r, 0)));
}

size_t hfl_gpt_block_ws_bytes(hfl_precision t, int n, int T, int C, int H, int r) {
    size_t tail = tail_bytes(t, n, T, C, H, r), rows = (size_t)n * T;
    if (!r) return tail_at(t, n, T, C) + tail;
    return tail_at(t, n, T, C) + al(tail) + hfl_region_bytes(t, rows * r * hfl_precision_bytes(t)) +
           hfl_region_bytes(t, 2 * (size_t)C * sizeof(float));
}

/* y = r + x w^T + b with r already in y: the residual branch as a gemm with
 * beta 1 (in a 2-byte type, residual + product + bias rounded once). */
static void dense_onto(const hfl_backend *be, hfl_precision t, const void *w, const void *b,
                       const void *x, void *y, int rows, int in, int out, void *ws) {
    be->gemm(t, 0, 0, 1, rows, out, in, 1.0f, x, in, w, in, 1.0f, y, out, b, HFL_BIAS_COL, ws);
}

void hfl_gpt_block_forward(const hfl_backend *be, hfl_precision t, const hfl_gpt_block_params *p,
                           const hfl_gpt_lora *lo, const void *x, void *out,
                           const hfl_gpt_block_saved *s, void *ws, int n, int T, int C, int H) {
    const hfl_lm_ops *lm = be->lm;
    int rows = n * T, r = lo ? lo->r : 0;
    float sc = lo ? lo->scale : 0.0f;
    size_t bytes = (size_t)rows * C * hfl_precision_bytes(t);
    lm->layernorm_fwd(t, s->h1, s->mean1, s->rstd1, x, p->ln1_w, p->ln1_b, rows, C);
    hfl_dense_forward(be, t, p->qkv_w, p->qkv_b, s->h1, s->qkv, rows, C, 3 * C, ws);
    if (lo)
        hfl_lora_forward(be, t, lo->w.qkv_a, lo->w.qkv_b, s->h1, s->u_qkv, s->qkv, rows, C, 3 * C,
                         r, sc, ws);
    hfl_attention_forward(be, t, s->ya, s->att, s->qkv, ws, n, T, C, H);
    be->copy(s->x2, x, bytes);
    dense_onto(be, t, p->proj_w, p->proj_b, s->ya, s->x2, rows, C, C, ws);
    if (lo)
        hfl_lora_forward(be, t, lo->w.proj_a, lo->w.proj_b, s->ya, s->u_proj, s->x2, rows, C, C, r,
                         sc, ws);
    lm->layernorm_fwd(t, s->h2, s->mean2, s->rstd2, s->x2, p->ln2_w, p->ln2_b, rows, C);
    hfl_dense_forward(be, t, p->fc_w, p->fc_b, s->h2, s->f, rows, C, 4 * C, ws);
    if (lo)
        hfl_lora_forward(be, t, lo->w.fc_a, lo->w.fc_b, s->h2, s->u_fc, s->f, rows, C, 4 * C, r, sc,
                         ws);
    lm->gelu_fwd(t, s->g, s->f, 4 * (size_t)rows * C);
    be->copy(out, s->x2, bytes);
    dense_onto(be, t, p->fcp_w, p->fcp_b, s->g, out, rows, 4 * C, C, ws);
    if (lo)
        hfl_lora_forward(be, t, lo->w.fcp_a, lo->w.fcp_b, s->g, s->u_fcp, out, rows, 4 * C, C, r,
                         sc, ws);
}

/* A projection's backward (x [rows, in], dy [rows, out], dx [rows, in]
 * overwritten): without adapters dense.c's (dW, db and dx); with them the
 * frozen base's dx = dy W alone (dense.c would write dW and db), then the
 * adapter's gradients and dx term (lora.c), du [rows, r] as workspace. */
static void proj_backward(const hfl_backend *be, hfl_precision t, const hfl_gpt_lora *lo,
                          const void *w, float *dw, float *db, const void *la, const void *lb,
                          float *dla, float *dlb, const void *u, const void *x, const void *dy,
                          void *dx, void *du, int rows, int in, int out, void *ws, int accumulate) {
    if (!lo) {
        hfl_dense_backward(be, t, w, x, dy, dw, db, dx, rows, in, out, ws, accumulate);
        return;
    }
    if (dx)
        be->gemm(t, 0, 0, 0, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, NULL, HFL_BIAS_NONE,
                 ws);
    hfl_lora_backward(be, t, la, lb, x, u, dy, dla, dlb, du, dx, rows, in, out, lo->r, lo->scale,
                      accumulate, ws);
}

void hfl_gpt_block_backward(const hfl_backend *be, hfl_precision t, const hfl_gpt_block_params *p,
                            const hfl_gpt_block_params *d, const hfl_gpt_lora *lo, const void *x,
                            const hfl_gpt_block_saved *s, const void *dout, void *dx, void *ws,
                            int n, int T, int C, int H, int accumulate) {
    const hfl_lm_ops *lm = be->lm;
    int rows = n * T;
    size_t rc = (size_t)rows * C, es = hfl_precision_bytes(t);
    char *A = ws, *B = A + hfl_region_bytes(t, 4 * rc * es), *D = B + hfl_region_bytes(t, rc * es);
    char *tail = A + tail_at(t, n, T, C);
    /* with adapters: du, the LN scratch past the tail; the base's gradients unused (NULL ok) */
    char *du = lo ? tail + al(tail_bytes(t, n, T, C, H, lo->r)) : NULL;
    float *lnw = lo ? (float *)(du + hfl_region_bytes(t, (size_t)rows * lo->r * es)) : NULL;
    float *lnb = lo ? lnw + C : NULL;
    hfl_gpt_block_params none = {0}, g = lo || !d ? none : *d;
    hfl_gpt_lora_params lw = lo ? lo->w : (hfl_gpt_lora_params){0}, ld = lo ? lo->d : lw;
    int ln_acc = lo ? 0 : accumulate;
    /* MLP: dg = dout Wp, df = dg gelu'(f), dh2 = df Wfc */
    proj_backward(be, t, lo, p->fcp_w, g.fcp_w, g.fcp_b, lw.fcp_a, lw.fcp_b, ld.fcp_a, ld.fcp_b,
                  s->u_fcp, s->g, dout, A, du, rows, 4 * C, C, tail, accumulate);
    lm->gelu_bwd(t, A, A, s->f, 4 * rc);
    proj_backward(be, t, lo, p->fc_w, g.fc_w, g.fc_b, lw.fc_a, lw.fc_b, ld.fc_a, ld.fc_b, s->u_fc,
                  s->h2, A, B, du, rows, C, 4 * C, tail, accumulate);
    /* dx2 = dout (residual) + LN2's backward of dh2 */
    be->copy(D, dout, rc * es);
    lm->layernorm_bwd(t, D, lo ? lnw : g.ln2_w, lo ? lnb : g.ln2_b, B, s->x2, p->ln2_w, s->mean2,
                      s->rstd2, rows, C, ln_acc, 1);
    /* attention: dya = dx2 Wo, dqkv, dh1 = dqkv Wqkv */
    proj_backward(be, t, lo, p->proj_w, g.proj_w, g.proj_b, lw.proj_a, lw.proj_b, ld.proj_a,
                  ld.proj_b, s->u_proj, s->ya, D, B, du, rows, C, C, tail, accumulate);
    hfl_attention_backward(be, t, A, B, s->qkv, s->att, tail, n, T, C, H);
    proj_backward(be, t, lo, p->qkv_w, g.qkv_w, g.qkv_b, lw.qkv_a, lw.qkv_b, ld.qkv_a, ld.qkv_b,
                  s->u_qkv, s->h1, A, dx ? B : NULL, du, rows, C, 3 * C, tail, accumulate);
    if (!dx) return; /* nothing below trains (LoRA's first block): no dh1, no LN1 backward */
    /* dx = dx2 (residual) + LN1's backward of dh1 */
    be->copy(dx, D, rc * es);
    lm->layernorm_bwd(t, dx, lo ? lnw : g.ln1_w, lo ? lnb : g.ln1_b, B, x, p->ln1_w, s->mean1,
                      s->rstd1, rows, C, ln_acc, 1);
}

size_t hfl_gpt_head_ws_bytes(hfl_precision t, int rows, int C, int V) {
    size_t f = hfl_gemm_ws_bytes(t, 0, rows, V, C);
    f = mx(f, hfl_gemm_ws_bytes(t, HFL_GEMM_C_F32, V, C, rows));
    return al(mx(f, hfl_gemm_ws_bytes(t, 0, rows, C, V)));
}

void hfl_gpt_head_forward(const hfl_backend *be, hfl_precision t, const void *x, const void *lnf_w,
                          const void *lnf_b, const void *wte, void *hf, float *mean, float *rstd,
                          void *logits, void *ws, int rows, int C, int V) {
    be->lm->layernorm_fwd(t, hf, mean, rstd, x, lnf_w, lnf_b, rows, C);
    be->gemm(t, 0, 0, 1, rows, V, C, 1.0f, hf, C, wte, C, 0.0f, logits, V, NULL, HFL_BIAS_NONE, ws);
}

void hfl_gpt_head_backward(const hfl_backend *be, hfl_precision t, const void *x, const void *lnf_w,
                           const void *wte, const void *hf, const float *mean, const float *rstd,
                           const void *dlogits, float *dwte, float *dlnf_w, float *dlnf_b, void *dx,
                           void *dhf, void *ws, int rows, int C, int V, int accumulate) {
    if (dwte) /* NULL: wte frozen (LoRA) */
        be->gemm(t, HFL_GEMM_C_F32, 1, 0, V, C, rows, 1.0f, dlogits, V, hf, C,
                 accumulate ? 1.0f : 0.0f, dwte, C, NULL, HFL_BIAS_NONE, ws);
    be->gemm(t, 0, 0, 0, rows, C, V, 1.0f, dlogits, V, wte, C, 0.0f, dhf, C, NULL, HFL_BIAS_NONE,
             ws);
    be->lm->layernorm_bwd(t, dx, dlnf_w, dlnf_b, dhf, x, lnf_w, mean, rstd, rows, C, accumulate, 0);
}
