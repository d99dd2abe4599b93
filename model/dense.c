/* dense.c: the fully connected layer, y = x w^T + b, as backend sgemm calls.
 *
 * Weight w[out, in] (PyTorch's nn.Linear layout) then bias b[out]. The input
 * may be any [C, H, W] volume: its CHW features are the `in` columns, which
 * is PyTorch's flatten. Backward keeps only the input (dw = dy^T x,
 * dx = dy w) and needs no workspace. In bf16/fp16 (the _lp functions) the
 * same GEMMs run through the backend's gemm_lp, the bias fused before the
 * output's one rounding; the workspace is gemm_lp's fp32 staging. */
#include <stdio.h>

#include "model/layers.h"
#include "util/util.h"

void hfl_dense_forward(const hfl_backend *be, const float *w, const float *b, const float *x,
                       float *y, int n, int in, int out) {
    /* y[n,out] = x[n,in] * w[out,in]^T */
    be->sgemm(0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    be->bias_add(y, b, n, out);
}

void hfl_dense_backward(const hfl_backend *be, const float *w, const float *x, const float *dy,
                        float *dw, float *db, float *dx, int n, int in, int out, int accumulate) {
    /* dw[out,in] (+)= dy[n,out]^T * x[n,in]; beta 0 overwrites, so the
     * gradient buffer needs no clearing pass. */
    be->sgemm(1, 0, out, in, n, 1.0f, dy, out, x, in, accumulate ? 1.0f : 0.0f, dw, in);
    /* bias_grad accumulates, so clear the (short) bias gradient first. */
    if (!accumulate) be->fill(db, 0.0f, (size_t)out);
    be->bias_grad(db, dy, n, out);
    /* dx[n,in] = dy[n,out] * w[out,in] */
    if (dx) be->sgemm(0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}

size_t hfl_dense_workspace_bytes_lp(int n, int in, int out, int backward) {
    if (!backward) return hfl_gemm_lp_ws_bytes(0, n, out, in);
    size_t dw = hfl_gemm_lp_ws_bytes(HFL_GEMM_C_F32, out, in, n);
    size_t dx = hfl_gemm_lp_ws_bytes(0, n, in, out);
    return dw > dx ? dw : dx;
}

void hfl_dense_forward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *w,
                          const uint16_t *b, const uint16_t *x, uint16_t *y, int n, int in,
                          int out, void *ws) {
    be->gemm_lp(lp, 0, 0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out, b, HFL_BIAS_COL, ws);
}

void hfl_dense_backward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *w,
                           const uint16_t *x, const uint16_t *dy, float *dw, float *db,
                           uint16_t *dx, int n, int in, int out, void *ws, int accumulate) {
    be->gemm_lp(lp, HFL_GEMM_C_F32, 1, 0, out, in, n, 1.0f, dy, out, x, in,
                accumulate ? 1.0f : 0.0f, dw, in, NULL, HFL_BIAS_NONE, ws);
    if (!accumulate) be->fill(db, 0.0f, (size_t)out);
    be->bias_grad_lp(lp, db, dy, n, out);
    if (dx)
        be->gemm_lp(lp, 0, 0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, NULL,
                    HFL_BIAS_NONE, ws);
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

static void dense_forward(const hfl_backend *be, const hfl_layer *ly, const float *params,
                          const float *in, float *out, void *saved, void *workspace, int batch) {
    (void)saved;
    (void)workspace;
    hfl_dense_forward(be, params, params + (size_t)ly->out * ly->in, in, out, batch, ly->in,
                      ly->out);
}

static void dense_backward(const hfl_backend *be, const hfl_layer *ly, const float *params,
                           const float *in, const float *out, const float *dout, float *din,
                           float *dparams, const void *saved, void *workspace, int batch, int accumulate) {
    (void)saved;
    (void)out;
    (void)workspace;
    size_t nw = (size_t)ly->out * ly->in;
    hfl_dense_backward(be, params, in, dout, dparams, dparams + nw, din, batch, ly->in, ly->out,
                       accumulate);
}

static size_t dense_no_workspace(const hfl_layer *ly, int batch) {
    (void)ly;
    (void)batch;
    return 0;
}

static void dense_forward_lp(const hfl_backend *be, hfl_precision lp, const hfl_layer *ly,
                             const uint16_t *params, const uint16_t *in, uint16_t *out,
                             void *saved, void *workspace, int batch) {
    (void)saved;
    hfl_dense_forward_lp(be, lp, params, params + (size_t)ly->out * ly->in, in, out, batch,
                         ly->in, ly->out, workspace);
}

static void dense_backward_lp(const hfl_backend *be, hfl_precision lp, const hfl_layer *ly,
                              const uint16_t *params, const uint16_t *in, const uint16_t *out,
                              const uint16_t *dout, uint16_t *din, float *dparams, const void *saved, void *workspace,
                              int batch, int accumulate) {
    (void)saved;
    (void)out;
    size_t nw = (size_t)ly->out * ly->in;
    hfl_dense_backward_lp(be, lp, params, in, dout, dparams, dparams + nw, din, batch, ly->in,
                          ly->out, workspace, accumulate);
}

static size_t dense_fwd_ws_lp(const hfl_layer *ly, int batch) {
    return hfl_dense_workspace_bytes_lp(batch, ly->in, ly->out, 0);
}

static size_t dense_bwd_ws_lp(const hfl_layer *ly, int batch) {
    return hfl_dense_workspace_bytes_lp(batch, ly->in, ly->out, 1);
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
    .fwd_workspace_bytes = dense_no_workspace,
    .bwd_workspace_bytes = dense_no_workspace,
    .keeps = HFL_KEEP_INPUT,
    .fwd_in_place = 0,
    .bwd_in_place = 0,
    .flops = dense_flops,
    .forward_lp = dense_forward_lp,
    .backward_lp = dense_backward_lp,
    .fwd_workspace_bytes_lp = dense_fwd_ws_lp,
    .bwd_workspace_bytes_lp = dense_bwd_ws_lp,
};
