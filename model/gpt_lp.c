/* gpt_lp.c: the transformer block and the tied head in 2-byte storage
 * (gpt.h, "2-byte storage"): gpt.c's steps on uint16_t of lp. */
#include "kernels/lm.h"
#include "model/attention.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "model/lora.h"

static size_t al(size_t bytes) { return (bytes + 63) / 64 * 64; }
static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

hfl_gpt_block_params_lp hfl_gpt_block_view_lp(uint16_t *b, int C) {
    size_t o[12];
    hfl_gpt_block_offsets(C, o);
    return (hfl_gpt_block_params_lp){b + o[0], b + o[1], b + o[2], b + o[3], b + o[4], b + o[5],
                                     b + o[6], b + o[7], b + o[8], b + o[9], b + o[10], b + o[11]};
}

/* Regions, each 64-byte aligned: h1, ya, x2, h2 (C per row), qkv (3C),
 * f, g (4C) at 2 bytes; att (n H T T) at 2 bytes; four fp32 statistics per
 * row; then, with adapters (r > 0), LoRA's four u (r per row) at 2 bytes. */
size_t hfl_gpt_block_saved_bytes_lp(int n, int T, int C, int H, int r) {
    size_t rows = (size_t)n * T, rc = rows * C * 2;
    return 4 * al(rc) + al(3 * rc) + 2 * al(4 * rc) + al((size_t)n * H * T * T * 2) + 4 * al(rows * 4) +
           (r ? 4 * al(rows * r * 2) : 0);
}

hfl_gpt_block_saved_lp hfl_gpt_block_saved_view_lp(void *base, int n, int T, int C, int H, int r) {
    size_t rows = (size_t)n * T, rc = rows * C * 2, ru = al(rows * r * 2);
    char *b = base;
    hfl_gpt_block_saved_lp s;
    s.h1 = (uint16_t *)b, b += al(rc);
    s.ya = (uint16_t *)b, b += al(rc);
    s.x2 = (uint16_t *)b, b += al(rc);
    s.h2 = (uint16_t *)b, b += al(rc);
    s.qkv = (uint16_t *)b, b += al(3 * rc);
    s.f = (uint16_t *)b, b += al(4 * rc);
    s.g = (uint16_t *)b, b += al(4 * rc);
    s.att = (uint16_t *)b, b += al((size_t)n * H * T * T * 2);
    s.mean1 = (float *)b, b += al(rows * 4);
    s.rstd1 = (float *)b, b += al(rows * 4);
    s.mean2 = (float *)b, b += al(rows * 4);
    s.rstd2 = (float *)b, b += al(rows * 4);
    s.u_qkv = r ? (uint16_t *)b : NULL, s.u_proj = r ? (uint16_t *)(b + ru) : NULL;
    s.u_fc = r ? (uint16_t *)(b + 2 * ru) : NULL, s.u_fcp = r ? (uint16_t *)(b + 3 * ru) : NULL;
    return s;
}

/* gemm_lp's staging for the block's dense GEMMs (forward, and backward when
 * asked) and, with adapters, their GEMMs. */
static size_t dense_ws(int rows, int C, int r, int backward) {
    size_t w = 0;
    int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}; /* in, out */
    for (int i = 0; i < 4; i++) {
        w = mx(w, hfl_dense_workspace_bytes_lp(rows, shapes[i][0], shapes[i][1], 0));
        if (backward) w = mx(w, hfl_dense_workspace_bytes_lp(rows, shapes[i][0], shapes[i][1], 1));
        if (r) w = mx(w, hfl_lora_ws_bytes_lp(rows, shapes[i][0], shapes[i][1], r));
    }
    return al(w);
}

/* Backward: A (4C per row: dg, df, then dqkv), B and D (C per row), all
 * 2-byte; then the larger of attention's workspace and the dense staging;
 * then, with adapters, du (r per row, 2-byte) and the fp32 2C-float
 * layer-norm scratch (gpt.h). The forward has a workspace of its own. */
static size_t tail_bytes(int n, int T, int C, int H, int r) {
    return mx(hfl_attention_bwd_ws_bytes_lp(n, T, C, H), dense_ws(n * T, C, r, 1));
}

/* Forward (and recompute): attention's forward workspace or the dense
 * staging, from the workspace's start. It is a buffer of its own in a plan,
 * so the backward's larger prefix is not reserved (and left untouched) there. */
size_t hfl_gpt_block_fwd_ws_bytes_lp(int n, int T, int C, int H, int r) {
    return al(mx(hfl_attention_fwd_ws_bytes_lp(n, T, C, H), dense_ws(n * T, C, r, 0)));
}

size_t hfl_gpt_block_ws_bytes_lp(int n, int T, int C, int H, int r) {
    size_t rows = (size_t)n * T, rc = rows * C * 2;
    return al(4 * rc) + 2 * al(rc) + tail_bytes(n, T, C, H, r) +
           (r ? al(rows * r * 2) + al(2 * (size_t)C * 4) : 0);
}

/* y = round(r + x w^T + b) with r already in y (2-byte): the residual branch. */
static void dense_onto_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *w,
                          const uint16_t *b, const uint16_t *x, uint16_t *y, int rows, int in,
                          int out, void *ws) {
    be->gemm_lp(lp, 0, 0, 1, rows, out, in, 1.0f, x, in, w, in, 1.0f, y, out, b, HFL_BIAS_COL, ws);
}

void hfl_gpt_block_forward_lp(const hfl_backend *be, hfl_precision lp,
                              const hfl_gpt_block_params_lp *p, const hfl_gpt_lora *lo,
                              const uint16_t *x, uint16_t *out, const hfl_gpt_block_saved_lp *s,
                              void *ws, int n, int T, int C, int H) {
    const hfl_lm_ops *lm = be->lm;
    int rows = n * T, r = lo ? lo->r : 0;
    float sc = lo ? lo->scale : 0.0f;
    size_t rc = (size_t)rows * C;
    char *tail = ws; /* hfl_gpt_block_fwd_ws_bytes_lp */
    lm->layernorm_fwd_lp(lp, s->h1, s->mean1, s->rstd1, x, p->ln1_w, p->ln1_b, rows, C);
    hfl_dense_forward_lp(be, lp, p->qkv_w, p->qkv_b, s->h1, s->qkv, rows, C, 3 * C, tail);
    if (lo)
        hfl_lora_forward_lp(be, lp, lo->w_lp.qkv_a, lo->w_lp.qkv_b, s->h1, s->u_qkv, s->qkv, rows, C,
                            3 * C, r, sc, tail);
    hfl_attention_forward_lp(be, lp, s->ya, s->att, s->qkv, tail, n, T, C, H);
    be->copy(s->x2, x, rc * 2);
    dense_onto_lp(be, lp, p->proj_w, p->proj_b, s->ya, s->x2, rows, C, C, tail);
    if (lo)
        hfl_lora_forward_lp(be, lp, lo->w_lp.proj_a, lo->w_lp.proj_b, s->ya, s->u_proj, s->x2, rows,
                            C, C, r, sc, tail);
    lm->layernorm_fwd_lp(lp, s->h2, s->mean2, s->rstd2, s->x2, p->ln2_w, p->ln2_b, rows, C);
    hfl_dense_forward_lp(be, lp, p->fc_w, p->fc_b, s->h2, s->f, rows, C, 4 * C, tail);
    if (lo)
        hfl_lora_forward_lp(be, lp, lo->w_lp.fc_a, lo->w_lp.fc_b, s->h2, s->u_fc, s->f, rows, C,
                            4 * C, r, sc, tail);
    lm->gelu_fwd_lp(lp, s->g, s->f, 4 * rc);
    be->copy(out, s->x2, rc * 2);
    dense_onto_lp(be, lp, p->fcp_w, p->fcp_b, s->g, out, rows, 4 * C, C, tail);
    if (lo)
        hfl_lora_forward_lp(be, lp, lo->w_lp.fcp_a, lo->w_lp.fcp_b, s->g, s->u_fcp, out, rows,
                            4 * C, C, r, sc, tail);
}

/* A projection's backward, as gpt.c's proj_backward: dense.c's without
 * adapters; with them the frozen dx = dy W alone, then the adapter's. */
static void proj_backward_lp(const hfl_backend *be, hfl_precision lp, const hfl_gpt_lora *lo,
                             const uint16_t *w, float *dw, float *db, const uint16_t *la,
                             const uint16_t *lb, float *dla, float *dlb, const uint16_t *u,
                             const uint16_t *x, const uint16_t *dy, uint16_t *dx, uint16_t *du,
                             int rows, int in, int out, void *ws, int accumulate) {
    if (!lo) {
        hfl_dense_backward_lp(be, lp, w, x, dy, dw, db, dx, rows, in, out, ws, accumulate);
        return;
    }
    if (dx)
        be->gemm_lp(lp, 0, 0, 0, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, NULL,
                    HFL_BIAS_NONE, ws);
    hfl_lora_backward_lp(be, lp, la, lb, x, u, dy, dla, dlb, du, dx, rows, in, out, lo->r,
                         lo->scale, accumulate, ws);
}

void hfl_gpt_block_backward_lp(const hfl_backend *be, hfl_precision lp,
                               const hfl_gpt_block_params_lp *p, const hfl_gpt_block_params *d,
                               const hfl_gpt_lora *lo, const uint16_t *x,
                               const hfl_gpt_block_saved_lp *s, const uint16_t *dout, uint16_t *dx,
                               void *ws, int n, int T, int C, int H, int accumulate) {
    const hfl_lm_ops *lm = be->lm;
    int rows = n * T;
    size_t rc = (size_t)rows * C;
    char *w = ws;
    uint16_t *A = (uint16_t *)w, *B = (uint16_t *)(w + al(4 * rc * 2));
    uint16_t *D = (uint16_t *)(w + al(4 * rc * 2) + al(rc * 2));
    char *tail = w + al(4 * rc * 2) + 2 * al(rc * 2);
    /* with adapters: du, the LN scratch past the tail; the base's gradients unused */
    char *lw_ws = lo ? tail + tail_bytes(n, T, C, H, lo->r) : NULL;
    uint16_t *du = (uint16_t *)lw_ws;
    float *lnw = lo ? (float *)(lw_ws + al((size_t)rows * lo->r * 2)) : NULL, *lnb = lo ? lnw + C : NULL;
    hfl_gpt_block_params none = {0}, g = lo || !d ? none : *d;
    hfl_gpt_lora_params_lp lwt = lo ? lo->w_lp : (hfl_gpt_lora_params_lp){0};
    hfl_gpt_lora_params ld = lo ? lo->d : (hfl_gpt_lora_params){0};
    int ln_acc = lo ? 0 : accumulate;
    proj_backward_lp(be, lp, lo, p->fcp_w, g.fcp_w, g.fcp_b, lwt.fcp_a, lwt.fcp_b, ld.fcp_a,
                     ld.fcp_b, s->u_fcp, s->g, dout, A, du, rows, 4 * C, C, tail, accumulate);
    lm->gelu_bwd_lp(lp, A, A, s->f, 4 * rc);
    proj_backward_lp(be, lp, lo, p->fc_w, g.fc_w, g.fc_b, lwt.fc_a, lwt.fc_b, ld.fc_a, ld.fc_b,
                     s->u_fc, s->h2, A, B, du, rows, C, 4 * C, tail, accumulate);
    be->copy(D, dout, rc * 2);
    lm->layernorm_bwd_lp(lp, D, lo ? lnw : g.ln2_w, lo ? lnb : g.ln2_b, B, s->x2, p->ln2_w,
                         s->mean2, s->rstd2, rows, C, ln_acc, 1);
    proj_backward_lp(be, lp, lo, p->proj_w, g.proj_w, g.proj_b, lwt.proj_a, lwt.proj_b,
                     ld.proj_a, ld.proj_b, s->u_proj, s->ya, D, B, du, rows, C, C, tail, accumulate);
    hfl_attention_backward_lp(be, lp, A, B, s->qkv, s->att, tail, n, T, C, H);
    proj_backward_lp(be, lp, lo, p->qkv_w, g.qkv_w, g.qkv_b, lwt.qkv_a, lwt.qkv_b, ld.qkv_a,
                     ld.qkv_b, s->u_qkv, s->h1, A, dx ? B : NULL, du, rows, C, 3 * C, tail, accumulate);
    if (!dx) return; /* nothing below trains (LoRA's first block) */
    be->copy(dx, D, rc * 2);
    lm->layernorm_bwd_lp(lp, dx, lo ? lnw : g.ln1_w, lo ? lnb : g.ln1_b, B, x, p->ln1_w,
                         s->mean1, s->rstd1, rows, C, ln_acc, 1);
}

size_t hfl_gpt_head_ws_bytes_lp(int rows, int C, int V) {
    size_t f = hfl_gemm_lp_ws_bytes(0, rows, V, C);
    f = mx(f, hfl_gemm_lp_ws_bytes(HFL_GEMM_C_F32, V, C, rows));
    return al(mx(f, hfl_gemm_lp_ws_bytes(0, rows, C, V)));
}

void hfl_gpt_head_forward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *x,
                             const uint16_t *lnf_w, const uint16_t *lnf_b, const uint16_t *wte,
                             uint16_t *hf, float *mean, float *rstd, uint16_t *logits, void *ws,
                             int rows, int C, int V) {
    be->lm->layernorm_fwd_lp(lp, hf, mean, rstd, x, lnf_w, lnf_b, rows, C);
    be->gemm_lp(lp, 0, 0, 1, rows, V, C, 1.0f, hf, C, wte, C, 0.0f, logits, V, NULL, HFL_BIAS_NONE, ws);
}

void hfl_gpt_head_backward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *x,
                              const uint16_t *lnf_w, const uint16_t *wte, const uint16_t *hf,
                              const float *mean, const float *rstd, const uint16_t *dlogits,
                              float *dwte, float *dlnf_w, float *dlnf_b, uint16_t *dx,
                              uint16_t *dhf, void *ws, int rows, int C, int V, int accumulate) {
    if (dwte) /* NULL: wte frozen (LoRA) */
        be->gemm_lp(lp, HFL_GEMM_C_F32, 1, 0, V, C, rows, 1.0f, dlogits, V, hf, C,
                    accumulate ? 1.0f : 0.0f, dwte, C, NULL, HFL_BIAS_NONE, ws);
    be->gemm_lp(lp, 0, 0, 0, rows, C, V, 1.0f, dlogits, V, wte, C, 0.0f, dhf, C, NULL, HFL_BIAS_NONE, ws);
    be->lm->layernorm_bwd_lp(lp, dx, dlnf_w, dlnf_b, dhf, x, lnf_w, mean, rstd, rows, C, accumulate, 0);
}
