/* conv.c: the 2-D convolution layer as im2col + gemm with a bias, over
 * chunks of samples.
 *
 * Weight w[out_c, in_c, k, k] (PyTorch's nn.Conv2d layout) then bias
 * b[out_c]. Per sample the input [C, H, W] is unfolded into columns
 * cols[C*k*k, ho*wo] in the workspace, and y = w[out_c, C*k*k] x cols is
 * already the output's CHW layout, so no transpose follows. Backward keeps
 * only the input: it unfolds it again (rather than keeping every sample's
 * columns, which are k*k times larger), accumulates dW += dy_i cols^T, then
 * reuses the same columns buffer for dcols = w^T dy_i, which col2im folds
 * into dx. The workspace is one chunk's columns for both passes, whatever
 * the batch: ly->chunk samples (0 or 1: one; plan/planner.h, cfg.conv_chunk)
 * are unfolded at once and multiplied by one strided batched GEMM (the
 * weights shared, stride 0), so a GPU launches per chunk, not per sample.
 * dW still accumulates sample by sample (beta = 1 after the first), so the
 * sum runs in one order whatever the chunk, and on the CPU, whose batched
 * GEMM is a loop of the same sgemms, every chunk gives the same bits.
 *
 * In every storage type t: im2col copies the input into columns of its type
 * (exact, and cuBLAS's GemmEx wants A and B of one type), the gemm reads
 * the weights, dy and columns (in a 2-byte type through the fp32 staging
 * the CPU backend needs, placed after the columns), adds the bias and
 * rounds the output once; dW is fp32. Backward's columns buffer is
 * fp32-sized: the columns feed dW, then dcols = w^T dy overwrite them in
 * fp32 and col2im rounds each dx element once. */
#include "kernels/ops_hd.h"
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

/* Bytes of the columns of the chunk a batch unfolds at once, in type t. */
static size_t conv_cols_bytes(const hfl_layer *ly, hfl_precision t, int batch) {
    hfl_window_geom g = hfl_layer_geom(ly);
    int chunk = batch < conv_chunk(ly) ? batch : conv_chunk(ly);
    return (size_t)chunk * conv_patch(ly) * g.ho * g.wo * hfl_precision_bytes(t);
}

/* Forward's workspace: the columns, then (in a 2-byte type) the gemm's
 * staging after them, the columns rounded up to 16 bytes so that it stays
 * aligned for vector loads. */
static size_t conv_fwd_stage_at(const hfl_layer *ly, hfl_precision t, int batch) {
    return (conv_cols_bytes(ly, t, batch) + 15) / 16 * 16;
}

static size_t conv_fwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    hfl_window_geom g = hfl_layer_geom(ly);
    size_t stage = hfl_gemm_ws_bytes(t, 0, ly->units, g.ho * g.wo, (int)conv_patch(ly));
    return stage ? conv_fwd_stage_at(ly, t, batch) + stage : conv_cols_bytes(ly, t, batch);
}

/* Backward's: the columns, fp32-sized (dcols overwrite them), then the
 * larger staging of its two gemms. */
static size_t conv_bwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    size_t dw = hfl_gemm_ws_bytes(t, HFL_GEMM_C_F32, ly->units, ckk, hw);
    size_t dcols = hfl_gemm_ws_bytes(t, HFL_GEMM_C_F32, ckk, hw, ly->units);
    return conv_cols_bytes(ly, HFL_PREC_FP32, batch) + (dw > dcols ? dw : dcols);
}

static void conv_forward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                         const void *params, const void *in, void *out, void *saved,
                         void *workspace, int batch) {
    (void)saved;
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    long long col_size = (long long)ckk * hw;
    void *cols = workspace, *stage = (char *)workspace + conv_fwd_stage_at(ly, t, batch);
    const void *b = hfl_at(t, params, (size_t)ly->units * ckk);
    for (int i = 0; i < batch; i += conv_chunk(ly)) {
        int cn = chunk_at(ly, i, batch);
        be->im2col(t, cols, hfl_at(t, in, (size_t)i * ly->in), cn, g);
        /* y_s[out_c, hw] = w[out_c, ckk] cols_s[ckk, hw] + b for each sample s of the chunk */
        be->gemm_strided(t, 0, 0, 0, ly->units, hw, ckk, 1.0f, params, ckk, 0, cols, hw, col_size,
                         0.0f, hfl_at(t, out, (size_t)i * ly->out), hw, ly->out, cn, b,
                         HFL_BIAS_ROW, stage);
    }
}

static void conv_backward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                          const void *params, const void *in, const void *out, const void *dout,
                          void *din, float *dparams, const void *saved, void *workspace, int batch,
                          int accumulate) {
    (void)saved, (void)out;
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    size_t col_size = (size_t)ckk * hw;
    /* the columns (type t), overwritten by dcols (fp32) once dW is done */
    void *cols = workspace, *stage = (char *)workspace + conv_cols_bytes(ly, HFL_PREC_FP32, batch);
    float *dcols = workspace, *db = dparams + (size_t)ly->units * ckk;
    if (!accumulate) be->fill(db, 0.0f, (size_t)ly->units);
    be->channel_bias_grad(t, db, dout, batch, ly->units, hw);
    for (int i = 0; i < batch; i += conv_chunk(ly)) {
        int cn = chunk_at(ly, i, batch);
        const void *dy = hfl_at(t, dout, (size_t)i * ly->out);
        be->im2col(t, cols, hfl_at(t, in, (size_t)i * ly->in), cn, g);
        /* dW[out_c, ckk] (+)= dy_s[out_c, hw] cols_s^T; the first sample
         * overwrites unless accumulating. */
        for (int s = 0; s < cn; s++)
            be->gemm(t, HFL_GEMM_C_F32, 0, 1, ly->units, ckk, hw, 1.0f,
                     hfl_at(t, dy, (size_t)s * ly->out), hw, hfl_at(t, cols, s * col_size), hw,
                     i + s || accumulate ? 1.0f : 0.0f, dparams, ckk, NULL, HFL_BIAS_NONE, stage);
        if (!din) continue;
        /* dcols_s[ckk, hw] = w^T dy_s, into the columns buffer now that dW is done. */
        be->gemm_strided(t, HFL_GEMM_C_F32, 1, 0, ckk, hw, ly->units, 1.0f, params, ckk, 0, dy, hw,
                         ly->out, 0.0f, dcols, hw, (long long)col_size, cn, NULL, HFL_BIAS_NONE,
                         stage);
        be->col2im(t, hfl_at(t, din, (size_t)i * ly->in), dcols, cn, g);
    }
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
    .fwd_workspace_bytes = conv_fwd_ws,
    .bwd_workspace_bytes = conv_bwd_ws,
    .keeps = HFL_KEEP_INPUT,
    .fwd_in_place = 0,
    .bwd_in_place = 0,
    .flops = conv_flops,
};
