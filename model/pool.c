/* pool.c: the 2-D max-pooling layer (window k, stride s, no padding).
 *
 * No parameters and no workspace. Backward keeps only the input: the
 * backend recomputes each window's first maximum from it (a k*k scan per
 * window, cheap next to a convolution) instead of keeping the output or an
 * index map, so a ReLU -> maxpool pair keeps one tensor, the ReLU output.
 * Forward is exact in every storage type; backward sums each input's dy in
 * fp32 and rounds it once to the type. */
#include "model/layers.h"
#include "util/util.h"

static int pool_infer_shape(hfl_layer *ly, char *err) {
    if (ly->units || ly->pad) return hfl_errf(err, "takes no out or pad");
    return hfl_layer_window_shape(ly, ly->in_shape.c, 0, err);
}

static int pool_param_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    (void)ly, (void)out;
    return 0;
}

static void pool_forward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                         const void *params, const void *in, void *out, void *saved,
                         void *workspace, int batch) {
    (void)params, (void)saved, (void)workspace;
    be->maxpool_fwd(t, out, in, batch, hfl_layer_geom(ly));
}

/* No parameters, so nothing to accumulate. */
static void pool_backward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                          const void *params, const void *in, const void *out, const void *dout,
                          void *din, float *dparams, const void *saved, void *workspace, int batch,
                          int accumulate) {
    (void)params, (void)out, (void)dparams, (void)saved, (void)workspace, (void)accumulate;
    if (din) be->maxpool_bwd(t, din, dout, in, batch, hfl_layer_geom(ly));
}

/* One comparison per window tap. */
static uint64_t pool_flops(const hfl_layer *ly) {
    return (uint64_t)ly->out * ly->kernel * ly->kernel;
}

const hfl_layer_ops hfl_maxpool2d_ops = {
    .name = "maxpool2d",
    .infer_shape = pool_infer_shape,
    .param_tensors = pool_param_tensors,
    .forward = pool_forward,
    .backward = pool_backward,
    .fwd_workspace_bytes = hfl_layer_no_workspace,
    .bwd_workspace_bytes = hfl_layer_no_workspace,
    .keeps = HFL_KEEP_INPUT,
    .fwd_in_place = 0,
    .bwd_in_place = 0,
    .flops = pool_flops,
};
