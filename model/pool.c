/* pool.c: the 2-D max-pooling layer (window k, stride s, no padding).
 *
 * No parameters and no workspace. Backward keeps only the input: the
 * backend recomputes each window's first maximum from it (a k*k scan per
 * window, cheap next to a convolution) instead of keeping the output or an
 * index map, so a ReLU -> maxpool pair keeps one tensor, the ReLU output.
 * In bf16/fp16 forward is exact; backward sums each input's dy in fp32 and
 * rounds once (gather form, no workspace). */
#include "model/layers.h"
#include "util/util.h"

static int pool_infer_shape(hfl_layer *ly, char *err) {
    if (ly->units || ly->pad) return hfl_errf(err, "takes no out or pad");
    return hfl_layer_window_shape(ly, ly->in_shape.c, 0, err);
}

static int pool_param_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    (void)ly;
    (void)out;
    return 0;
}

static void pool_forward(const hfl_backend *be, const hfl_layer *ly, const float *params,
                         const float *in, float *out, void *saved, void *workspace, int batch) {
    (void)saved;
    (void)params;
    (void)workspace;
    be->maxpool_fwd(out, in, batch, hfl_layer_geom(ly));
}

static void pool_backward(const hfl_backend *be, const hfl_layer *ly, const float *params,
                          const float *in, const float *out, const float *dout, float *din,
                          float *dparams, const void *saved, void *workspace, int batch, int accumulate) {
    (void)saved;
    (void)accumulate; /* no parameters */
    (void)params;
    (void)out;
    (void)dparams;
    (void)workspace;
    if (din) be->maxpool_bwd(din, dout, in, batch, hfl_layer_geom(ly));
}

static void pool_forward_lp(const hfl_backend *be, hfl_precision lp, const hfl_layer *ly,
                            const uint16_t *params, const uint16_t *in, uint16_t *out,
                            void *saved, void *workspace, int batch) {
    (void)saved;
    (void)params;
    (void)workspace;
    be->maxpool_fwd_lp(lp, out, in, batch, hfl_layer_geom(ly));
}

static void pool_backward_lp(const hfl_backend *be, hfl_precision lp, const hfl_layer *ly,
                             const uint16_t *params, const uint16_t *in, const uint16_t *out,
                             const uint16_t *dout, uint16_t *din, float *dparams, const void *saved, void *workspace,
                             int batch, int accumulate) {
    (void)saved;
    (void)accumulate;
    (void)params;
    (void)out;
    (void)dparams;
    (void)workspace;
    if (din) be->maxpool_bwd_lp(lp, din, dout, in, batch, hfl_layer_geom(ly));
}

static size_t pool_no_workspace(const hfl_layer *ly, int batch) {
    (void)ly;
    (void)batch;
    return 0;
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
    .fwd_workspace_bytes = pool_no_workspace,
    .bwd_workspace_bytes = pool_no_workspace,
    .keeps = HFL_KEEP_INPUT,
    .fwd_in_place = 0,
    .bwd_in_place = 0,
    .flops = pool_flops,
    .forward_lp = pool_forward_lp,
    .backward_lp = pool_backward_lp,
    .fwd_workspace_bytes_lp = pool_no_workspace,
    .bwd_workspace_bytes_lp = pool_no_workspace,
};
