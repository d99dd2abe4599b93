/* conv.c: the 2-D convolution layer as im2col + sgemm + bias, over chunks of
 * samples.
 *
 * Weight w[out_c, in_c, k, k] (PyTorch's nn.Conv2d layout) then bias
 * b[out_c]. Per sample the input [C, H, W] is unfolded into columns
 * cols[C*k*k, ho*wo] in the workspace, and y = w[out_c, C*k*k] x cols is
 * already the output's CHW layout, so no transpose follows. Backward keeps
 * only the input: it unfolds it again (rather than keeping every sample's
 * columns, which are k*k times larger), accumulates dW += dy_i cols^T, then
 * reuses the same columns buffer for dcols = w^T dy_i, which col2im folds
 * into dx. The workspace is one chunk's columns for both passes, whatever
 * the batch: ly->chunk samples (0 or 1: one; model/planner.h, cfg.conv_chunk)
 * are unfolded at once and multiplied by one strided batched GEMM (the
 * weights shared, stride 0), so a GPU launches per chunk, not per sample.
 * dW still accumulates sample by sample (beta = 1 after the first), so the
 * sum runs in one order whatever the chunk, and on the CPU, whose batched
 * GEMM is a loop of the same sgemms, every chunk gives the same bits.
 *
 * bf16/fp16 (the _lp functions): im2col copies the 2-byte input into
 * 2-byte columns (exact, and cuBLAS's GemmEx wants A and B of one type),
 * gemm_lp reads the 2-byte weights, dy and columns through the fp32 staging
 * the CPU backend needs (placed after the columns), adds the bias and rounds
 * the output once; dW is fp32. Backward's columns buffer is fp32-sized: the
 * 2-byte columns feed dW, then dcols = w^T dy overwrite them in fp32 and
 * col2im_lp rounds each dx element once. */
#include "model/layers.h"
#include "util/util.h"

static int conv_infer_shape(hfl_layer *ly, char *err) {
    if (ly->units < 1 || ly->units > HFL_MODEL_MAX_DIM)
        return hfl_errf(err, "out %d outside [1, %d]", ly->units, HFL_MODEL_MAX_DIM);
    /* pad < kernel: a wider pad would only add windows of pure padding. */
    int max_pad = ly->kernel > 0 ? ly->kernel - 1 : 0;
    return hfl_layer_window_shape(ly, ly->units, max_pad, err);
}

static size_t conv_patch(const hfl_layer *ly) {
    return (size_t)ly->in_shape.c * ly->kernel * ly->kernel;
}

static int conv_param_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    size_t nw = (size_t)ly->units * conv_patch(ly);
    out[0] = (hfl_param_tensor){"weight", 0, nw, (int)conv_patch(ly), HFL_INIT_FAN_IN, 0.0f, 0};
    out[1] = (hfl_param_tensor){"bias", nw, (size_t)ly->units, (int)conv_patch(ly), HFL_INIT_FAN_IN, 0.0f, 0};
    return 2;
}

/* Samples per chunk, and the samples of the chunk starting at i. */
static int conv_chunk(const hfl_layer *ly) { return ly->chunk > 1 ? ly->chunk : 1; }
static int chunk_at(const hfl_layer *ly, int i, int batch) {
    return batch - i < conv_chunk(ly) ? batch - i : conv_chunk(ly);
}

static void conv_forward(const hfl_backend *be, const hfl_layer *ly, const float *params,
                         const float *in, float *out, void *saved, void *workspace, int batch) {
    (void)saved;
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    long long col_size = (long long)ckk * hw;
    float *cols = workspace;
    const float *b = params + (size_t)ly->units * ckk;
    for (int i = 0; i < batch; i += conv_chunk(ly)) {
        int cn = chunk_at(ly, i, batch);
        be->im2col(cols, in + (size_t)i * ly->in, cn, g);
        /* y_s[out_c, hw] = w[out_c, ckk] cols_s[ckk, hw] for each sample s of the chunk */
        be->sgemm_strided(0, 0, ly->units, hw, ckk, 1.0f, params, ckk, 0, cols, hw, col_size, 0.0f,
                          out + (size_t)i * ly->out, hw, ly->out, cn);
    }
    be->channel_bias_add(out, b, batch, ly->units, hw);
}

static void conv_backward(const hfl_backend *be, const hfl_layer *ly, const float *params,
                          const float *in, const float *out, const float *dout, float *din,
                          float *dparams, const void *saved, void *workspace, int batch, int accumulate) {
    (void)saved;
    (void)out;
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    size_t col_size = (size_t)ckk * hw;
    float *cols = workspace, *db = dparams + (size_t)ly->units * ckk;
    if (!accumulate) be->fill(db, 0.0f, (size_t)ly->units);
    be->channel_bias_grad(db, dout, batch, ly->units, hw);
    for (int i = 0; i < batch; i += conv_chunk(ly)) {
        int cn = chunk_at(ly, i, batch);
        const float *dy = dout + (size_t)i * ly->out;
        be->im2col(cols, in + (size_t)i * ly->in, cn, g);
        /* dW[out_c, ckk] (+)= dy_s[out_c, hw] cols_s^T; the first sample
         * overwrites unless accumulating. */
        for (int s = 0; s < cn; s++)
            be->sgemm(0, 1, ly->units, ckk, hw, 1.0f, dy + (size_t)s * ly->out, hw,
                      cols + s * col_size, hw, i + s || accumulate ? 1.0f : 0.0f, dparams, ckk);
        if (!din) continue;
        /* dcols_s[ckk, hw] = w^T dy_s, into the columns buffer now that dW is done. */
        be->sgemm_strided(1, 0, ckk, hw, ly->units, 1.0f, params, ckk, 0, dy, hw, ly->out, 0.0f,
                          cols, hw, (long long)col_size, cn);
        be->col2im(din + (size_t)i * ly->in, cols, cn, g);
    }
}

/* Samples unfolded at once for a batch: the chunk, or the batch if smaller. */
static size_t conv_chunk_for(const hfl_layer *ly, int batch) {
    return (size_t)(batch < conv_chunk(ly) ? batch : conv_chunk(ly));
}

static size_t conv_workspace_bytes(const hfl_layer *ly, int batch) {
    hfl_window_geom g = hfl_layer_geom(ly);
    return conv_chunk_for(ly, batch) * conv_patch(ly) * g.ho * g.wo * sizeof(float);
}

static size_t conv_cols_bytes(const hfl_layer *ly) {
    hfl_window_geom g = hfl_layer_geom(ly);
    return conv_patch(ly) * g.ho * g.wo * sizeof(float);
}

/* Bytes of one chunk's columns in 2-byte storage (16-byte rounded, so the
 * staging after it stays aligned for vector loads). */
static size_t conv_cols_bytes_lp(const hfl_layer *ly, int batch) {
    size_t bytes = conv_chunk_for(ly, batch) * conv_cols_bytes(ly) / 2;
    return (bytes + 15) / 16 * 16;
}

static void conv_forward_lp(const hfl_backend *be, hfl_precision lp, const hfl_layer *ly,
                            const uint16_t *params, const uint16_t *in, uint16_t *out,
                            void *saved, void *workspace, int batch) {
    (void)saved;
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    long long col_size = (long long)ckk * hw;
    uint16_t *cols = workspace;
    void *stage = (char *)workspace + conv_cols_bytes_lp(ly, batch);
    const uint16_t *b = params + (size_t)ly->units * ckk;
    for (int i = 0; i < batch; i += conv_chunk(ly)) {
        int cn = chunk_at(ly, i, batch);
        be->im2col_lp(lp, cols, in + (size_t)i * ly->in, cn, g);
        be->gemm_lp_strided(lp, 0, 0, 0, ly->units, hw, ckk, 1.0f, params, ckk, 0, cols, hw,
                            col_size, 0.0f, out + (size_t)i * ly->out, hw, ly->out, cn, b,
                            HFL_BIAS_ROW, stage);
    }
}

static void conv_backward_lp(const hfl_backend *be, hfl_precision lp, const hfl_layer *ly,
                             const uint16_t *params, const uint16_t *in, const uint16_t *out,
                             const uint16_t *dout, uint16_t *din, float *dparams, const void *saved, void *workspace,
                             int batch, int accumulate) {
    (void)saved;
    (void)out;
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    size_t col_size = (size_t)ckk * hw;
    float *dcols = workspace, *db = dparams + (size_t)ly->units * ckk;
    uint16_t *cols = workspace; /* the same bytes, 2-byte columns until dcols overwrite them */
    void *stage = (char *)workspace + conv_chunk_for(ly, batch) * conv_cols_bytes(ly);
    if (!accumulate) be->fill(db, 0.0f, (size_t)ly->units);
    be->channel_bias_grad_lp(lp, db, dout, batch, ly->units, hw);
    for (int i = 0; i < batch; i += conv_chunk(ly)) {
        int cn = chunk_at(ly, i, batch);
        const uint16_t *dy = dout + (size_t)i * ly->out;
        be->im2col_lp(lp, cols, in + (size_t)i * ly->in, cn, g);
        for (int s = 0; s < cn; s++)
            be->gemm_lp(lp, HFL_GEMM_C_F32, 0, 1, ly->units, ckk, hw, 1.0f,
                        dy + (size_t)s * ly->out, hw, cols + s * col_size, hw,
                        i + s || accumulate ? 1.0f : 0.0f, dparams, ckk, NULL, HFL_BIAS_NONE,
                        stage);
        if (!din) continue;
        be->gemm_lp_strided(lp, HFL_GEMM_C_F32, 1, 0, ckk, hw, ly->units, 1.0f, params, ckk, 0, dy,
                            hw, ly->out, 0.0f, dcols, hw, (long long)col_size, cn, NULL,
                            HFL_BIAS_NONE, stage);
        be->col2im_lp(lp, din + (size_t)i * ly->in, dcols, cn, g);
    }
}

static size_t conv_fwd_ws_lp(const hfl_layer *ly, int batch) {
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    return conv_cols_bytes_lp(ly, batch) + hfl_gemm_lp_ws_bytes(0, ly->units, hw, ckk);
}

static size_t conv_bwd_ws_lp(const hfl_layer *ly, int batch) {
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    size_t dw = hfl_gemm_lp_ws_bytes(HFL_GEMM_C_F32, ly->units, ckk, hw);
    size_t dcols = hfl_gemm_lp_ws_bytes(HFL_GEMM_C_F32, ckk, hw, ly->units);
    return conv_chunk_for(ly, batch) * conv_cols_bytes(ly) + (dw > dcols ? dw : dcols);
}

static uint64_t conv_flops(const hfl_layer *ly) {
    return 2 * (uint64_t)ly->out * conv_patch(ly) + (uint64_t)ly->out;
}

const hfl_layer_ops hfl_conv2d_ops = {
    .name = "conv2d",
    .infer_shape = conv_infer_shape,
    .param_tensors = conv_param_tensors,
    .forward = conv_forward,
    .backward = conv_backward,
    .fwd_workspace_bytes = conv_workspace_bytes,
    .bwd_workspace_bytes = conv_workspace_bytes,
    .keeps = HFL_KEEP_INPUT,
    .fwd_in_place = 0,
    .bwd_in_place = 0,
    .flops = conv_flops,
    .forward_lp = conv_forward_lp,
    .backward_lp = conv_backward_lp,
    .fwd_workspace_bytes_lp = conv_fwd_ws_lp,
    .bwd_workspace_bytes_lp = conv_bwd_ws_lp,
};
