/* relu.c: the ReLU layer, y = max(x, 0), elementwise over any shape.
 *
 * Backward reads only the output (y > 0 exactly when x > 0), so the
 * pre-activation need not be kept and both passes may run in place: the
 * trainer lets forward overwrite its input when nothing else reads it. In
 * every storage type both passes are exact (the element or zero). */
#include "model/layers.h"
#include "util/util.h"

static int relu_infer_shape(hfl_layer *ly, char *err) {
    if (ly->units || ly->kernel || ly->stride || ly->pad)
        return hfl_errf(err, "takes no out, kernel, stride or pad");
    ly->out_shape = ly->in_shape;
    return 0;
}

static int relu_param_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    (void)ly, (void)out;
    return 0;
}

static void relu_forward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                         const void *params, const void *in, void *out, void *saved,
                         void *workspace, int batch) {
    (void)params, (void)saved, (void)workspace;
    be->relu_fwd(t, out, in, (size_t)batch * ly->out);
}

/* No parameters, so nothing to accumulate. */
static void relu_backward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                          const void *params, const void *in, const void *out, const void *dout,
                          void *din, float *dparams, const void *saved, void *workspace, int batch,
                          int accumulate) {
    (void)params, (void)in, (void)dparams, (void)saved, (void)workspace, (void)accumulate;
    if (din) be->relu_bwd(t, din, dout, out, (size_t)batch * ly->out);
}

static uint64_t relu_flops(const hfl_layer *ly) { return (uint64_t)ly->out; }

const hfl_layer_ops hfl_relu_ops = {
    .name = "relu",
    .infer_shape = relu_infer_shape,
    .param_tensors = relu_param_tensors,
    .forward = relu_forward,
    .backward = relu_backward,
    .fwd_workspace_bytes = hfl_layer_no_workspace,
    .bwd_workspace_bytes = hfl_layer_no_workspace,
    .keeps = HFL_KEEP_OUTPUT,
    .fwd_in_place = 1,
    .bwd_in_place = 1,
    .flops = relu_flops,
};
