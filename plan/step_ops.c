/* step_ops.c: a step's backend ops with their shapes, recorded by walking
 * the plan through a backend table that only records (step_ops.h). */
#include "plan/step_ops.h"

#include <string.h>

#include "kernels/lm.h"
#include "model/layers.h"

/* The ops have no context: one recording at a time (the chooser's thread). */
static struct {
    hfl_step_op_sink sink;
    void *ctx;
} rec;

static void emit(hfl_op_kind kind, hfl_precision t, double work) {
    hfl_step_op op = {.kind = kind, .t = t, .count = 1, .work = work};
    rec.sink(rec.ctx, &op);
}

static void emit_gemm(hfl_op_kind kind, hfl_precision t, int ta, int tb, int m, int n, int k, int count) {
    hfl_step_op op = {.kind = kind, .t = t, .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .count = count};
    rec.sink(rec.ctx, &op);
}

static void r_copy(void *d, const void *s, size_t b) { (void)d, (void)s, emit(HFL_OPK_COPY, HFL_PREC_FP32, b / 4.0); }
static void r_upload(void *d, const void *s, size_t b) { (void)d, (void)s, emit(HFL_OPK_UPLOAD, HFL_PREC_FP32, b / 4.0); }
static void r_download(void *d, const void *s, size_t b) {
    (void)d, (void)s, emit(HFL_OPK_DOWNLOAD, HFL_PREC_FP32, b / 4.0);
}
static void r_prefetch(void *d, const void *s, size_t b, int slot) {
    (void)d, (void)s, (void)slot, emit(HFL_OPK_PREFETCH, HFL_PREC_FP32, b / 4.0);
}
static void r_gemm(hfl_precision t, unsigned f, int ta, int tb, int m, int n, int k, float alpha, const void *a,
                   int lda, const void *b, int ldb, float beta, void *c, int ldc, const void *bias, int axis,
                   void *ws) {
    (void)f, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc, (void)bias;
    (void)axis, (void)ws;
    emit_gemm(HFL_OPK_GEMM, t, ta, tb, m, n, k, 1);
}
static void r_gemm_strided(hfl_precision t, unsigned f, int ta, int tb, int m, int n, int k, float alpha,
                           const void *a, int lda, long long sa, const void *b, int ldb, long long sb, float beta,
                           void *c, int ldc, long long sc, int count, const void *bias, int axis, void *ws) {
    (void)f, (void)alpha, (void)a, (void)lda, (void)sa, (void)b, (void)ldb, (void)sb, (void)beta, (void)c;
    (void)ldc, (void)sc, (void)bias, (void)axis, (void)ws;
    emit_gemm(HFL_OPK_GEMM_STRIDED, t, ta, tb, m, n, k, count);
}
static void r_bias_grad(hfl_precision t, float *db, const void *dy, int rows, int cols, int acc) {
    (void)db, (void)dy, (void)acc, emit(HFL_OPK_BIAS_GRAD, t, (double)rows * cols);
}
static void r_relu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    (void)y, (void)x, emit(HFL_OPK_RELU_FWD, t, (double)n);
}
static void r_relu_bwd(hfl_precision t, void *dx, const void *dy, const void *y, size_t n) {
    (void)dx, (void)dy, (void)y, emit(HFL_OPK_RELU_BWD, t, (double)n);
}
static void r_softmax_xent(hfl_precision t, const void *l, const int32_t *y, void *dl, int rows, int cols,
                           int mean_rows, hfl_step_scalars *sc, float *ws) {
    (void)l, (void)y, (void)dl, (void)mean_rows, (void)sc, (void)ws;
    emit(HFL_OPK_SOFTMAX_XENT, t, (double)rows * cols);
}
static void r_sgd_step(hfl_precision t, float *master, float *v, const float *g, void *w, size_t n, float lr,
                       float mom, float wd, const hfl_step_scalars *skip) {
    (void)master, (void)v, (void)g, (void)w, (void)lr, (void)mom, (void)wd, (void)skip;
    emit(HFL_OPK_SGD_STEP, t, (double)n);
}
static void r_adamw_step(hfl_precision t, float *master, float *m, float *v, const float *g, void *w, size_t n,
                         hfl_adamw_args a, const hfl_step_scalars *skip) {
    (void)master, (void)m, (void)v, (void)g, (void)w, (void)a, (void)skip;
    emit(HFL_OPK_ADAMW_STEP, t, (double)n);
}
static void r_prox_grad(float *g, const float *w, const float *an, size_t n, float mu) {
    (void)g, (void)w, (void)an, (void)mu, emit(HFL_OPK_PROX_GRAD, HFL_PREC_FP32, (double)n);
}
static void r_fill(float *p, float v, size_t n) { (void)p, (void)v, emit(HFL_OPK_FILL, HFL_PREC_FP32, (double)n); }
static void r_convert(hfl_precision t, void *d, const float *s, size_t n) {
    (void)d, (void)s, emit(HFL_OPK_CONVERT, t, (double)n);
}
static double window_reads(int n, hfl_window_geom g) { return (double)n * g.c * g.k * g.k * g.ho * g.wo; }
static void r_im2col(hfl_precision t, void *cols, const void *x, int n, hfl_window_geom g) {
    (void)cols, (void)x, emit(HFL_OPK_IM2COL, t, window_reads(n, g));
}
static void r_col2im(hfl_precision t, void *dx, const float *cols, int n, hfl_window_geom g) {
    (void)dx, (void)cols, emit(HFL_OPK_COL2IM, t, window_reads(n, g));
}
static void r_maxpool_fwd(hfl_precision t, void *y, const void *x, int n, hfl_window_geom g) {
    (void)y, (void)x, emit(HFL_OPK_MAXPOOL_FWD, t, window_reads(n, g));
}
static void r_maxpool_bwd(hfl_precision t, void *dx, const void *dy, const void *x, int n, hfl_window_geom g) {
    (void)dx, (void)dy, (void)x, emit(HFL_OPK_MAXPOOL_BWD, t, window_reads(n, g));
}
static void r_channel_bias_grad(hfl_precision t, float *db, const void *dy, int n, int c, int hw, int acc) {
    (void)db, (void)dy, (void)acc, emit(HFL_OPK_CHANNEL_BIAS_GRAD, t, (double)n * c * hw);
}
static void r_unscale_grads(float *g, size_t n, hfl_step_scalars *sc) {
    (void)g, (void)sc, emit(HFL_OPK_UNSCALE_GRADS, HFL_PREC_FP32, (double)n);
}
static void r_scaler_update(hfl_step_scalars *sc, int interval) {
    (void)sc, (void)interval, emit(HFL_OPK_SCALER_UPDATE, HFL_PREC_FP32, 1);
}

static void r_embed_fwd(hfl_precision t, void *y, const void *tok, const void *wte, const void *wpe, int rows,
                        int T, int C, int V) {
    (void)y, (void)tok, (void)wte, (void)wpe, (void)T, (void)V, emit(HFL_OPK_EMBED_FWD, t, (double)rows * C);
}
static void r_embed_bwd(hfl_precision t, float *dwte, float *dwpe, const void *dy, const void *tok, int rows, int T,
                        int C, int V, int acc) {
    (void)dwte, (void)dwpe, (void)dy, (void)tok, (void)T, (void)V, (void)acc;
    emit(HFL_OPK_EMBED_BWD, t, (double)rows * C);
}
static void r_layernorm_fwd(hfl_precision t, void *y, float *mean, float *rstd, const void *x, const void *w,
                            const void *b, int rows, int C) {
    (void)y, (void)mean, (void)rstd, (void)x, (void)w, (void)b, emit(HFL_OPK_LAYERNORM_FWD, t, (double)rows * C);
}
static void r_layernorm_bwd(hfl_precision t, void *dx, float *dw, float *db, const void *dy, const void *x,
                            const void *w, const float *mean, const float *rstd, int rows, int C, int acc,
                            int dx_add) {
    (void)dx, (void)dw, (void)db, (void)dy, (void)x, (void)w, (void)mean, (void)rstd, (void)acc, (void)dx_add;
    emit(HFL_OPK_LAYERNORM_BWD, t, (double)rows * C);
}
static void r_gelu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    (void)y, (void)x, emit(HFL_OPK_GELU_FWD, t, (double)n);
}
static void r_gelu_bwd(hfl_precision t, void *dx, const void *dy, const void *x, size_t n) {
    (void)dx, (void)dy, (void)x, emit(HFL_OPK_GELU_BWD, t, (double)n);
}
static void r_heads_gather(hfl_precision t, void *dst, const void *src, int n, int T, int H, int hs, int ld) {
    (void)dst, (void)src, (void)ld, emit(HFL_OPK_HEADS_GATHER, t, (double)n * T * H * hs);
}
static void r_heads_scatter(hfl_precision t, void *dst, const void *src, int n, int T, int H, int hs, int ld) {
    (void)dst, (void)src, (void)ld, emit(HFL_OPK_HEADS_SCATTER, t, (double)n * T * H * hs);
}
static void r_causal_softmax(hfl_precision t, void *p, const void *z, size_t rows, int T, float scale) {
    (void)p, (void)z, (void)scale, emit(HFL_OPK_CAUSAL_SOFTMAX, t, (double)rows * T);
}
static void r_causal_softmax_bwd(hfl_precision t, void *dz, const void *dp, const void *p, size_t rows, int T,
                                 float scale) {
    (void)dz, (void)dp, (void)p, (void)scale, emit(HFL_OPK_CAUSAL_SOFTMAX_BWD, t, (double)rows * T);
}

static const hfl_lm_ops record_lm = {
    .embed_fwd = r_embed_fwd, .embed_bwd = r_embed_bwd, .layernorm_fwd = r_layernorm_fwd,
    .layernorm_bwd = r_layernorm_bwd, .gelu_fwd = r_gelu_fwd, .gelu_bwd = r_gelu_bwd,
    .heads_gather = r_heads_gather, .heads_scatter = r_heads_scatter, .causal_softmax = r_causal_softmax,
    .causal_softmax_bwd = r_causal_softmax_bwd,
};

static const hfl_backend record_be = {
    .name = "record", .copy = r_copy, .upload = r_upload, .download = r_download, .prefetch = r_prefetch,
    .gemm = r_gemm, .gemm_strided = r_gemm_strided, .bias_grad = r_bias_grad, .relu_fwd = r_relu_fwd,
    .relu_bwd = r_relu_bwd, .softmax_xent = r_softmax_xent, .sgd_step = r_sgd_step,
    .adamw_step = r_adamw_step, .prox_grad = r_prox_grad, .fill = r_fill, .convert = r_convert,
    .im2col = r_im2col, .col2im = r_col2im, .maxpool_fwd = r_maxpool_fwd, .maxpool_bwd = r_maxpool_bwd,
    .channel_bias_grad = r_channel_bias_grad, .unscale_grads = r_unscale_grads,
    .scaler_update = r_scaler_update, .lm = &record_lm,
};

const hfl_backend *hfl_step_ops_recorder(hfl_step_op_sink sink, void *ctx) {
    rec.sink = sink;
    rec.ctx = ctx;
    return &record_be;
}

/* Stands for every buffer: the recorder never reads or writes through it. */
static char any_buffer[64];

/* hfl_trainer_stage's prefetches on a device, then run_ops of
 * model/trainer.c over ops [0, optimizer_op) for n rows (a frozen layer
 * without adapters writes no parameter gradients: layer_grads). */
static void record_micro(const hfl_plan *plan, int n, int accumulate) {
    const hfl_model_spec *s = &plan->spec;
    hfl_precision prec = plan->cfg.precision;
    void *b = any_buffer;
    if (plan->cfg.prefetch) { /* hfl_trainer_stage on a device: inputs, then labels */
        record_be.prefetch(b, b, (size_t)n * s->in_dim * hfl_precision_bytes(prec), 0);
        record_be.prefetch(b, b, (size_t)n * s->label_rows * sizeof(int32_t), 0);
    }
    for (int i = 0; i < plan->optimizer_op; i++) {
        const hfl_plan_op *op = &plan->ops[i];
        const hfl_layer *ly = op->layer >= 0 ? &s->layers[op->layer] : NULL;
        const hfl_layer_ops *lo = ly ? hfl_layer_ops_for(ly->kind) : NULL;
        if (op->kind == HFL_OP_FORWARD)
            lo->forward(&record_be, prec, ly, b, b, b, op->saved >= 0 ? b : NULL, op->ws >= 0 ? b : NULL, n);
        else if (op->kind == HFL_OP_LOSS)
            record_be.softmax_xent(prec, b, (const int32_t *)b, b, n * s->label_rows, s->n_classes,
                                   n * s->label_rows, NULL, NULL);
        else if (op->kind == HFL_OP_BACKWARD)
            lo->backward(&record_be, prec, ly, b, op->in >= 0 ? b : NULL, op->out >= 0 ? b : NULL, b,
                         op->din >= 0 ? b : NULL, ly->frozen && !ly->lora_rank ? NULL : (float *)b,
                         op->saved >= 0 ? b : NULL, op->ws >= 0 ? b : NULL, n, accumulate);
    }
}

void hfl_step_ops(const hfl_plan *plan, int step_batch, int opt_prox, hfl_step_op_sink sink, void *ctx) {
    const hfl_model_spec *spec = &plan->spec;
    hfl_step_ops_recorder(sink, ctx);
    int batch = plan->cfg.batch, rows = step_batch;
    for (int first = 1; rows > 0; first = 0) {
        int n = rows < batch ? rows : batch;
        record_micro(plan, n, !first);
        rows -= n;
    }
    /* finish_grads and hfl_trainer_apply */
    size_t n = spec->n_trainable;
    float *b = (float *)any_buffer;
    hfl_precision prec = plan->cfg.precision;
    if (prec != HFL_PREC_FP32) record_be.unscale_grads(b, n, NULL);
    if (opt_prox) record_be.prox_grad(b, b, b, n, 0.0f);
    if (plan->adam_m >= 0)
        record_be.adamw_step(prec, b, b, b, b, b, n, (hfl_adamw_args){0}, NULL);
    else
        record_be.sgd_step(prec, b, plan->momentum >= 0 ? b : NULL, b, b, n, 0, 0, 0, NULL);
    if (prec == HFL_PREC_FP16) record_be.scaler_update(NULL, 0);
}
