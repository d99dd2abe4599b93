/* conv.c: the 2-D convolution layer as im2col + gemm with a bias, over
 * chunks of samples.
 *
 * Weight w[out_c, in_c, k, k] (PyTorch's nn.Conv2d layout) then bias
 * b[out_c]. A chunk of cn samples (ly->chunk, 0 or 1: one; plan/planner.h,
 * cfg.conv_chunk) is unfolded at once into columns cols[C*k*k, cn*ho*wo] in
 * the workspace: the chunk layout of kernels/backend.h, a row per tap with
 * the samples' positions side by side. Forward is one strided batched GEMM
 * per chunk, y_s[out_c, hw] = w[out_c, C*k*k] x (sample s's block of the
 * columns) + b, already the output's CHW layout. Backward keeps only the
 * input: it unfolds it again (rather than keeping every sample's columns,
 * which are k*k times larger), transposes the chunk's dy [cn, out_c, hw] to
 * dyT [out_c, cn*hw] (im2col with a 1x1 window; not needed for one sample),
 * and takes the weight gradient as ONE GEMM per chunk,
 * dW (+)= dyT x cols^T with K = cn*hw; then dcols = w^T dy_s (one strided
 * batched GEMM) overwrite the columns, and col2im folds them into dx. The
 * bias gradient is channel_bias_grad over the whole batch (a fixed tree,
 * kernels/ops_hd.h). A GPU so launches a few ops per chunk, not per sample.
 *
 * NUMERICS of the one-GEMM dW. Before, dW accumulated sample by
 * sample: C = C + dy_s cols_s^T with beta = 1, each sample's K = hw products
 * summed by the BLAS and then added onto C. Now one GEMM sums the chunk's
 * cn*hw products in the BLAS's own blocked order (and adds the previous
 * chunks' C once). Both are fp32 evaluations of the same sum in different
 * orders, each within gamma_(K + 2) * sum|dy cols| of the exact value
 * (Higham, ASNA 2nd ed., 3.1), K = batch*hw products in all, so they differ
 * by at most twice that: tests/model/test_conv.c holds the new dW against
 * the per-sample form to this bound. With one sample per chunk the GEMM is
 * the per-sample one and the bits are the old ones.
 *
 * In every storage type t: im2col copies the input (and dy) into columns of
 * its type (exact, and cuBLAS's GemmEx wants A and B of one type), the gemm
 * reads the weights, dy and columns (in a 2-byte type through the fp32
 * staging the CPU backend needs, placed last), adds the bias and rounds the
 * output once; dW is fp32. Backward's columns buffer is fp32-sized: the
 * columns feed dW, then dcols = w^T dy overwrite them in fp32 and col2im
 * rounds each dx element once. */
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

/* Samples of the largest chunk a batch unfolds at once. */
static int conv_chunk_of(const hfl_layer *ly, int batch) {
    return batch < conv_chunk(ly) ? batch : conv_chunk(ly);
}

/* Bytes of the columns of the chunk a batch unfolds at once, in type t. */
static size_t conv_cols_bytes(const hfl_layer *ly, hfl_precision t, int batch) {
    hfl_window_geom g = hfl_layer_geom(ly);
    return (size_t)conv_chunk_of(ly, batch) * conv_patch(ly) * g.ho * g.wo * hfl_precision_bytes(t);
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

/* Backward's dyT [out_c, chunk*hw] of type t, none for one-sample chunks
 * (dy_s is its own transpose); a 2-byte region rounded to 64 bytes so the
 * staging after it stays aligned. */
static size_t conv_dyt_bytes(const hfl_layer *ly, hfl_precision t, int batch) {
    int cn = conv_chunk_of(ly, batch);
    if (cn <= 1) return 0;
    return hfl_region_bytes(t, (size_t)ly->units * cn * ly->out_shape.h * ly->out_shape.w *
                                   hfl_precision_bytes(t));
}

/* Backward's: the columns, fp32-sized (dcols overwrite them), dyT, then the
 * larger staging of its two gemms. */
static size_t conv_bwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    size_t dw = hfl_gemm_ws_bytes(t, HFL_GEMM_C_F32, ly->units, ckk, conv_chunk_of(ly, batch) * hw);
    size_t dcols = hfl_gemm_ws_bytes(t, HFL_GEMM_C_F32, ckk, hw, ly->units);
    return conv_cols_bytes(ly, HFL_PREC_FP32, batch) + conv_dyt_bytes(ly, t, batch) +
           (dw > dcols ? dw : dcols);
}

static void conv_forward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                         const void *params, const void *in, void *out, void *saved,
                         void *workspace, int batch) {
    (void)saved;
    hfl_window_geom g = hfl_layer_geom(ly);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    void *cols = workspace, *stage = (char *)workspace + conv_fwd_stage_at(ly, t, batch);
    const void *b = hfl_at(t, params, (size_t)ly->units * ckk);
    for (int i = 0; i < batch; i += conv_chunk(ly)) {
        int cn = chunk_at(ly, i, batch);
        be->im2col(t, cols, hfl_at(t, in, (size_t)i * ly->in), cn, g);
        /* y_s[out_c, hw] = w[out_c, ckk] cols[ckk, s*hw ..][hw] + b for each sample s */
        be->gemm_strided(t, 0, 0, 0, ly->units, hw, ckk, 1.0f, params, ckk, 0, cols, cn * hw, hw,
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
    /* dy [cn, out_c, hw] as columns of a 1x1 window: dyT [out_c, cn*hw] */
    hfl_window_geom gy = hfl_window_geom_make(ly->units, g.ho, g.wo, 1, 1, 0);
    int ckk = (int)conv_patch(ly), hw = g.ho * g.wo;
    /* the columns (type t), overwritten by dcols (fp32) once dW is done */
    size_t cols_bytes = conv_cols_bytes(ly, HFL_PREC_FP32, batch);
    void *cols = workspace, *dyt_buf = (char *)workspace + cols_bytes;
    void *stage = (char *)dyt_buf + conv_dyt_bytes(ly, t, batch);
    float *dcols = workspace, *db = dparams + (size_t)ly->units * ckk;
    be->channel_bias_grad(t, db, dout, batch, ly->units, hw, accumulate); /* overwrites unless accumulating */
    for (int i = 0; i < batch; i += conv_chunk(ly)) {
        int cn = chunk_at(ly, i, batch), k = cn * hw;
        const void *dy = hfl_at(t, dout, (size_t)i * ly->out), *dyt = dy;
        be->im2col(t, cols, hfl_at(t, in, (size_t)i * ly->in), cn, g);
        if (cn > 1) {
            be->im2col(t, dyt_buf, dy, cn, gy);
            dyt = dyt_buf;
        }
        /* dW[out_c, ckk] (+)= dyT[out_c, cn*hw] cols[ckk, cn*hw]^T, one GEMM for
         * the chunk; the first chunk overwrites unless accumulating. */
        be->gemm(t, HFL_GEMM_C_F32, 0, 1, ly->units, ckk, k, 1.0f, dyt, k, cols, k,
                 i || accumulate ? 1.0f : 0.0f, dparams, ckk, NULL, HFL_BIAS_NONE, stage);
        if (!din) continue;
        /* dcols_s[ckk, hw] = w^T dy_s into sample s's block of the columns buffer,
         * now that dW is done. */
        be->gemm_strided(t, HFL_GEMM_C_F32, 1, 0, ckk, hw, ly->units, 1.0f, params, ckk, 0, dy, hw,
                         ly->out, 0.0f, dcols, k, hw, cn, NULL, HFL_BIAS_NONE, stage);
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
