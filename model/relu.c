/* relu.c: the ReLU layer, y = max(x, 0), elementwise over any shape.
 *
 * Backward reads only the output (y > 0 exactly when x > 0), so the
 * pre-activation need not be kept and both passes may run in place: the
 * trainer lets forward overwrite its input when nothing else reads it. In
 * bf16/fp16 both passes are exact (a 2-byte value or zero). */
#include "model/layers.h"
#include "util/util.h"

static int relu_infer_shape(hfl_layer *ly, char *err) {
    if (ly->units || ly->kernel || ly->stride || ly->pad)
        return hfl_errf(err, "takes no out, kernel, stride or pad");
    ly->out_shape = ly->in_shape;
    return 0;
}

static int relu_param_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    (void)ly;
    (void)out;
    return 0;
}

static void relu_forward(const hfl_backend *be, const hfl_layer *ly, const float *params,
                         const float *in, float *out, void *saved, void *workspace, int batch) {
    (void)saved;
    (void)params;
    (void)workspace;
    be->relu_fwd(out, in, (size_t)batch * ly->out);
}

static void relu_backward(const hfl_backend *be, const hfl_layer *ly, const float *params,
                          const float *in, const float *out, const float *dout, float *din,
                          float *dparams, const void *saved, void *workspace, int batch, int accumulate) {
    (void)saved;
    (void)accumulate; /* no parameters */
    (void)params;
    (void)in;
    (void)dparams;
    (void)workspace;
    if (din) be->relu_bwd(din, dout, out, (size_t)batch * ly->out);
}

static void relu_forward_lp(const hfl_backend *be, hfl_precision lp, const hfl_layer *ly,
                            const uint16_t *params, const uint16_t *in, uint16_t *out,
                            void *saved, void *workspace, int batch) {
    (void)saved;
    (void)params;
    (void)workspace;
    be->relu_fwd_lp(lp, out, in, (size_t)batch * ly->out);
}

static void relu_backward_lp(const hfl_backend *be, hfl_precision lp, const hfl_layer *ly,
                             const uint16_t *params, const uint16_t *in, const uint16_t *out,
                             const uint16_t *dout, uint16_t *din, float *dparams, const void *saved, void *workspace,
                             int batch, int accumulate) {
    (void)saved;
    (void)accumulate;
    (void)params;
    (void)in;
    (void)dparams;
    (void)workspace;
    if (din) be->relu_bwd_lp(lp, din, dout, out, (size_t)batch * ly->out);
}

static size_t relu_no_workspace(const hfl_layer *ly, int batch) {
    (void)ly;
    (void)batch;
    return 0;
}

static uint64_t relu_flops(const hfl_layer *ly) { return (uint64_t)ly->out; }

const hfl_layer_ops hfl_relu_ops = {
    .name = "relu",
    .infer_shape = relu_infer_shape,
    .param_tensors = relu_param_tensors,
    .forward = relu_forward,
    .backward = relu_backward,
    .fwd_workspace_bytes = relu_no_workspace,
    .bwd_workspace_bytes = relu_no_workspace,
    .keeps = HFL_KEEP_OUTPUT,
    .fwd_in_place = 1,
    .bwd_in_place = 1,
    .flops = relu_flops,
    .forward_lp = relu_forward_lp,
    .backward_lp = relu_backward_lp,
    .fwd_workspace_bytes_lp = relu_no_workspace,
    .bwd_workspace_bytes_lp = relu_no_workspace,
};
