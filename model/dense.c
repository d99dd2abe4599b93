/* dense.c: the fully connected layer, y = x w^T + b, as backend gemm calls.
 *
 * Weight w[out, in] (PyTorch's nn.Linear layout) then bias b[out]. The input
 * may be any [C, H, W] volume: its CHW features are the `in` columns, which
 * is PyTorch's flatten. Backward keeps only the input (dw = dy^T x,
 * dx = dy w). The GEMMs run through the backend's gemm in the step's type,
 * the bias fused before the output's one rounding; the workspace is the
 * gemm's fp32 staging in a 2-byte type (none in fp32). */
#include "kernels/ops_hd.h"
#include "model/layers.h"
#include "util/util.h"

void hfl_dense_forward(const hfl_backend *be, hfl_precision t, const void *w, const void *b,
                       const void *x, void *y, int n, int in, int out, void *ws) {
    /* y[n,out] = x[n,in] * w[out,in]^T + b */
    be->gemm(t, 0, 0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out, b, HFL_BIAS_COL, ws);
}

void hfl_dense_backward(const hfl_backend *be, hfl_precision t, const void *w, const void *x,
                        const void *dy, float *dw, float *db, void *dx, int n, int in, int out,
                        void *ws, int accumulate) {
    /* dw[out,in] (+)= dy[n,out]^T * x[n,in]; beta 0 overwrites, so the
     * gradient buffer needs no clearing pass. */
    be->gemm(t, HFL_GEMM_C_F32, 1, 0, out, in, n, 1.0f, dy, out, x, in, accumulate ? 1.0f : 0.0f,
             dw, in, NULL, HFL_BIAS_NONE, ws);
    /* db (+)= the column sums: overwrites when not accumulating, so no clearing op */
    be->bias_grad(t, db, dy, n, out, accumulate);
    /* dx[n,in] = dy[n,out] * w[out,in] */
    if (dx)
        be->gemm(t, 0, 0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, NULL, HFL_BIAS_NONE,
                 ws);
}

size_t hfl_dense_workspace_bytes(hfl_precision t, int n, int in, int out, int backward) {
    if (!backward) return hfl_gemm_ws_bytes(t, 0, n, out, in);
    size_t dw = hfl_gemm_ws_bytes(t, HFL_GEMM_C_F32, out, in, n);
    size_t dx = hfl_gemm_ws_bytes(t, 0, n, in, out);
    return dw > dx ? dw : dx;
}

static int dense_infer_shape(hfl_layer *ly, char *err) {
    if (ly->units < 1 || ly->units > HFL_MODEL_MAX_DIM)
        return hfl_errf(err, "out %d outside [1, %d]", ly->units, HFL_MODEL_MAX_DIM);
    if (ly->kernel || ly->stride || ly->pad)
        return hfl_errf(err, "kernel, stride and pad must be 0, got %d, %d, %d", ly->kernel,
                        ly->stride, ly->pad);
    ly->out_shape = (hfl_shape){ly->units, 1, 1};
    return 0;
}

static int dense_param_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    size_t nw = (size_t)ly->units * ly->in;
    out[0] = (hfl_param_tensor){"weight", 0, nw, ly->in, HFL_INIT_FAN_IN, 0.0f, 0};
    out[1] = (hfl_param_tensor){"bias", nw, (size_t)ly->units, ly->in, HFL_INIT_FAN_IN, 0.0f, 0};
    return 2;
}

static void dense_forward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                          const void *params, const void *in, void *out, void *saved,
                          void *workspace, int batch) {
    (void)saved;
    hfl_dense_forward(be, t, params, hfl_at(t, params, (size_t)ly->out * ly->in), in, out, batch,
                      ly->in, ly->out, workspace);
}

static void dense_backward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                           const void *params, const void *in, const void *out, const void *dout,
                           void *din, float *dparams, const void *saved, void *workspace, int batch,
                           int accumulate) {
    (void)saved, (void)out;
    size_t nw = (size_t)ly->out * ly->in;
    hfl_dense_backward(be, t, params, in, dout, dparams, dparams + nw, din, batch, ly->in, ly->out,
                       workspace, accumulate);
}

static size_t dense_fwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    return hfl_dense_workspace_bytes(t, batch, ly->in, ly->out, 0);
}

static size_t dense_bwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    return hfl_dense_workspace_bytes(t, batch, ly->in, ly->out, 1);
}

static uint64_t dense_flops(const hfl_layer *ly) {
    return 2 * (uint64_t)ly->in * ly->out + (uint64_t)ly->out;
}

const hfl_layer_ops hfl_dense_ops = {
    .name = "dense",
    .infer_shape = dense_infer_shape,
    .param_tensors = dense_param_tensors,
    .forward = dense_forward,
    .backward = dense_backward,
    .fwd_workspace_bytes = dense_fwd_ws,
    .bwd_workspace_bytes = dense_bwd_ws,
    .keeps = HFL_KEEP_INPUT,
    .fwd_in_place = 0,
    .bwd_in_place = 0,
    .flops = dense_flops,
};
