/* profile.c: the counting table of kernels/profile.h. Each wrapper names
 * its op and calls op_enter, the one place an op is counted and marked,
 * then the wrapped backend's op with the same arguments. */
#include <string.h>

#include "kernels/lm.h"
#include "kernels/profile.h"

static const char *const op_names[HFL_OPK_COUNT] = {
    "copy", "upload", "download", "prefetch",
    "gemm", "gemm_strided", "bias_grad", "relu_fwd", "relu_bwd", "softmax_xent",
    "sgd_step", "adamw_step", "prox_grad", "fill", "convert", "im2col", "col2im",
    "maxpool_fwd", "maxpool_bwd", "channel_bias_grad", "unscale_grads", "scaler_update",
    "lm.embed_fwd", "lm.embed_bwd", "lm.layernorm_fwd", "lm.layernorm_bwd", "lm.gelu_fwd",
    "lm.gelu_bwd", "lm.heads_gather", "lm.heads_scatter", "lm.causal_softmax",
    "lm.causal_softmax_bwd",
};
_Static_assert(HFL_OPK_COUNT <= HFL_PROFILE_MAX_OPS, "HFL_PROFILE_MAX_OPS holds every op");

const char *hfl_op_kind_name(hfl_op_kind k) { return k >= 0 && k < HFL_OPK_COUNT ? op_names[k] : "?"; }

static const hfl_backend *inner;
static hfl_backend wrapped;
static hfl_lm_ops wrapped_lm;

static struct {
    int on;
    long calls[HFL_OPK_COUNT];
    long n_ops;        /* ops counted since begin */
    int marks;         /* marks recorded: one before each op while they fit */
    short op_at[HFL_PROFILE_MARKS]; /* the op each mark precedes */
    hfl_host_waits waits_before;
} prof;

static int can_time(void) { return inner->mark && inner->mark_ms; }

/* Counts op `id` and marks its start (the one place ops are counted). */
static void op_enter(int id) {
    if (!prof.on) return;
    prof.calls[id]++;
    prof.n_ops++;
    if (can_time() && prof.marks < HFL_PROFILE_MARKS - 1) {
        prof.op_at[prof.marks] = (short)id;
        inner->mark(prof.marks++);
    }
}

/* ---- the wrappers: count, then the wrapped op ---- */

static void w_copy(void *d, const void *s, size_t b) { op_enter(HFL_OPK_COPY); inner->copy(d, s, b); }
static void w_upload(void *d, const void *s, size_t b) { op_enter(HFL_OPK_UPLOAD); inner->upload(d, s, b); }
static void w_download(void *d, const void *s, size_t b) {
    op_enter(HFL_OPK_DOWNLOAD);
    inner->download(d, s, b);
}
static void w_prefetch(void *d, const void *s, size_t b, int slot) {
    op_enter(HFL_OPK_PREFETCH);
    inner->prefetch(d, s, b, slot);
}
static void w_gemm(hfl_precision t, unsigned f, int ta, int tb, int m, int n, int k, float alpha,
                   const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc,
                   const void *bias, int axis, void *ws) {
    op_enter(HFL_OPK_GEMM);
    inner->gemm(t, f, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, axis, ws);
}
static void w_gemm_strided(hfl_precision t, unsigned f, int ta, int tb, int m, int n, int k,
                           float alpha, const void *a, int lda, long long sa, const void *b,
                           int ldb, long long sb, float beta, void *c, int ldc, long long sc,
                           int count, const void *bias, int axis, void *ws) {
    op_enter(HFL_OPK_GEMM_STRIDED);
    inner->gemm_strided(t, f, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                        count, bias, axis, ws);
}
static void w_bias_grad(hfl_precision t, float *db, const void *dy, int rows, int cols, int accumulate) {
    op_enter(HFL_OPK_BIAS_GRAD);
    inner->bias_grad(t, db, dy, rows, cols, accumulate);
}
static void w_relu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    op_enter(HFL_OPK_RELU_FWD);
    inner->relu_fwd(t, y, x, n);
}
static void w_relu_bwd(hfl_precision t, void *dx, const void *dy, const void *y, size_t n) {
    op_enter(HFL_OPK_RELU_BWD);
    inner->relu_bwd(t, dx, dy, y, n);
}
static void w_softmax_xent(hfl_precision t, const void *logits, const int32_t *labels,
                           void *dlogits, int rows, int cols, int mean_rows, hfl_step_scalars *sc,
                           float *ws) {
    op_enter(HFL_OPK_SOFTMAX_XENT);
    inner->softmax_xent(t, logits, labels, dlogits, rows, cols, mean_rows, sc, ws);
}
static void w_sgd_step(hfl_precision t, float *master, float *v, const float *g, void *w, size_t n,
                       float lr, float momentum, float wd, const hfl_step_scalars *skip) {
    op_enter(HFL_OPK_SGD_STEP);
    inner->sgd_step(t, master, v, g, w, n, lr, momentum, wd, skip);
}
static void w_adamw_step(hfl_precision t, float *master, float *m, float *v, const float *g,
                         void *w, size_t n, hfl_adamw_args a, const hfl_step_scalars *skip) {
    op_enter(HFL_OPK_ADAMW_STEP);
    inner->adamw_step(t, master, m, v, g, w, n, a, skip);
}
static void w_prox_grad(float *g, const float *w, const float *anchor, size_t n, float mu) {
    op_enter(HFL_OPK_PROX_GRAD);
    inner->prox_grad(g, w, anchor, n, mu);
}
static void w_fill(float *p, float value, size_t n) { op_enter(HFL_OPK_FILL); inner->fill(p, value, n); }
static void w_convert(hfl_precision t, void *dst, const float *src, size_t n) {
    op_enter(HFL_OPK_CONVERT);
    inner->convert(t, dst, src, n);
}
static void w_im2col(hfl_precision t, void *cols, const void *x, int n, hfl_window_geom g) {
    op_enter(HFL_OPK_IM2COL);
    inner->im2col(t, cols, x, n, g);
}
static void w_col2im(hfl_precision t, void *dx, const float *cols, int n, hfl_window_geom g) {
    op_enter(HFL_OPK_COL2IM);
    inner->col2im(t, dx, cols, n, g);
}
static void w_maxpool_fwd(hfl_precision t, void *y, const void *x, int n, hfl_window_geom g) {
    op_enter(HFL_OPK_MAXPOOL_FWD);
    inner->maxpool_fwd(t, y, x, n, g);
}
static void w_maxpool_bwd(hfl_precision t, void *dx, const void *dy, const void *x, int n,
                          hfl_window_geom g) {
    op_enter(HFL_OPK_MAXPOOL_BWD);
    inner->maxpool_bwd(t, dx, dy, x, n, g);
}
static void w_channel_bias_grad(hfl_precision t, float *db, const void *dy, int n, int c, int hw,
                                int accumulate) {
    op_enter(HFL_OPK_CHANNEL_BIAS_GRAD);
    inner->channel_bias_grad(t, db, dy, n, c, hw, accumulate);
}
static void w_unscale_grads(float *g, size_t n, hfl_step_scalars *sc) {
    op_enter(HFL_OPK_UNSCALE_GRADS);
    inner->unscale_grads(g, n, sc);
}
static void w_scaler_update(hfl_step_scalars *sc, int interval) {
    op_enter(HFL_OPK_SCALER_UPDATE);
    inner->scaler_update(sc, interval);
}

/* ---- the language model's table ---- */

static void w_embed_fwd(hfl_precision t, void *y, const void *tok, const void *wte, const void *wpe,
                        int rows, int T, int C, int V) {
    op_enter(HFL_OPK_EMBED_FWD);
    inner->lm->embed_fwd(t, y, tok, wte, wpe, rows, T, C, V);
}
static void w_embed_bwd(hfl_precision t, float *dwte, float *dwpe, const void *dy, const void *tok,
                        int rows, int T, int C, int V, int accumulate) {
    op_enter(HFL_OPK_EMBED_BWD);
    inner->lm->embed_bwd(t, dwte, dwpe, dy, tok, rows, T, C, V, accumulate);
}
static void w_layernorm_fwd(hfl_precision t, void *y, float *mean, float *rstd, const void *x,
                            const void *w, const void *b, int rows, int C) {
    op_enter(HFL_OPK_LAYERNORM_FWD);
    inner->lm->layernorm_fwd(t, y, mean, rstd, x, w, b, rows, C);
}
static void w_layernorm_bwd(hfl_precision t, void *dx, float *dw, float *db, const void *dy,
                            const void *x, const void *w, const float *mean, const float *rstd,
                            int rows, int C, int accumulate, int dx_add) {
    op_enter(HFL_OPK_LAYERNORM_BWD);
    inner->lm->layernorm_bwd(t, dx, dw, db, dy, x, w, mean, rstd, rows, C, accumulate, dx_add);
}
static void w_gelu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    op_enter(HFL_OPK_GELU_FWD);
    inner->lm->gelu_fwd(t, y, x, n);
}
static void w_gelu_bwd(hfl_precision t, void *dx, const void *dy, const void *x, size_t n) {
    op_enter(HFL_OPK_GELU_BWD);
    inner->lm->gelu_bwd(t, dx, dy, x, n);
}
static void w_heads_gather(hfl_precision t, void *heads, const void *rows, int n, int T, int H,
                           int hs, int ld) {
    op_enter(HFL_OPK_HEADS_GATHER);
    inner->lm->heads_gather(t, heads, rows, n, T, H, hs, ld);
}
static void w_heads_scatter(hfl_precision t, void *rows, const void *heads, int n, int T, int H,
                            int hs, int ld) {
    op_enter(HFL_OPK_HEADS_SCATTER);
    inner->lm->heads_scatter(t, rows, heads, n, T, H, hs, ld);
}
static void w_causal_softmax(hfl_precision t, void *p, const void *z, size_t n_rows, int T,
                             float scale) {
    op_enter(HFL_OPK_CAUSAL_SOFTMAX);
    inner->lm->causal_softmax(t, p, z, n_rows, T, scale);
}
static void w_causal_softmax_bwd(hfl_precision t, void *dz, const void *dp, const void *p,
                                 size_t n_rows, int T, float scale) {
    op_enter(HFL_OPK_CAUSAL_SOFTMAX_BWD);
    inner->lm->causal_softmax_bwd(t, dz, dp, p, n_rows, T, scale);
}

const hfl_backend *hfl_profile_wrap(const hfl_backend *be) {
    inner = be;
    wrapped = *be;
    wrapped.copy = w_copy, wrapped.upload = w_upload, wrapped.download = w_download;
    wrapped.prefetch = w_prefetch;
    wrapped.gemm = w_gemm, wrapped.gemm_strided = w_gemm_strided;
    wrapped.bias_grad = w_bias_grad, wrapped.relu_fwd = w_relu_fwd, wrapped.relu_bwd = w_relu_bwd;
    wrapped.softmax_xent = w_softmax_xent, wrapped.sgd_step = w_sgd_step;
    wrapped.adamw_step = w_adamw_step, wrapped.prox_grad = w_prox_grad, wrapped.fill = w_fill;
    wrapped.convert = w_convert, wrapped.im2col = w_im2col, wrapped.col2im = w_col2im;
    wrapped.maxpool_fwd = w_maxpool_fwd, wrapped.maxpool_bwd = w_maxpool_bwd;
    wrapped.channel_bias_grad = w_channel_bias_grad, wrapped.unscale_grads = w_unscale_grads;
    wrapped.scaler_update = w_scaler_update;
    if (be->lm) {
        wrapped_lm = (hfl_lm_ops){
            .embed_fwd = w_embed_fwd, .embed_bwd = w_embed_bwd,
            .layernorm_fwd = w_layernorm_fwd, .layernorm_bwd = w_layernorm_bwd,
            .gelu_fwd = w_gelu_fwd, .gelu_bwd = w_gelu_bwd,
            .heads_gather = w_heads_gather, .heads_scatter = w_heads_scatter,
            .causal_softmax = w_causal_softmax, .causal_softmax_bwd = w_causal_softmax_bwd,
        };
        wrapped.lm = &wrapped_lm;
    }
    return &wrapped;
}

void hfl_profile_begin(void) {
    memset(&prof, 0, sizeof prof);
    inner->host_waits(&prof.waits_before);
    prof.on = 1;
}

void hfl_profile_end(int steps, hfl_profile_report *out) {
    hfl_host_waits after;
    inner->host_waits(&after); /* before the marks are read: their wait is the profile's own */
    prof.on = 0;
    if (steps < 1) steps = 1;
    memset(out, 0, sizeof *out);
    out->steps = steps;
    out->ops_per_step = (double)prof.n_ops / steps;
    out->syncs_per_step = (double)((after.downloads - prof.waits_before.downloads) +
                                   (after.uploads - prof.waits_before.uploads) +
                                   (after.syncs - prof.waits_before.syncs)) / steps;
    double ms[HFL_OPK_COUNT] = {0};
    out->timed = can_time() && prof.marks == prof.n_ops;
    if (can_time() && prof.marks > 0) {
        inner->mark(prof.marks); /* after the last op */
        for (int i = 0; i < prof.marks; i++) ms[prof.op_at[i]] += inner->mark_ms(i, i + 1);
        out->ms_per_step = inner->mark_ms(0, prof.marks) / steps;
    }
    for (int id = 0; id < HFL_OPK_COUNT; id++)
        if (prof.calls[id])
            out->rows[out->n_rows++] = (hfl_profile_row){op_names[id], (double)prof.calls[id] / steps,
                                                         ms[id] / steps};
}

void hfl_profile_print(FILE *f, const hfl_profile_report *p, const char *clock) {
    fprintf(f, "profile of %d steps (%s), per optimizer step:\n", p->steps, clock);
    fprintf(f, "  %-24s %8s %10s\n", "op", "calls", "ms");
    for (int i = 0; i < p->n_rows; i++)
        fprintf(f, "  %-24s %8.1f %10.3f\n", p->rows[i].name, p->rows[i].count, p->rows[i].ms);
    fprintf(f, "  ops_per_step %.1f, syncs_per_step %.1f, %.3f ms per step%s\n", p->ops_per_step,
            p->syncs_per_step, p->ms_per_step, p->timed ? "" : " (not every op timed)");
}
