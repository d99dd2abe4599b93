/* test_profile.c: the per-op profile (kernels/profile.h) of a training step
 * on the CPU backend, and on the CPU dressed as a device (host_memory 0:
 * prefetch copies, device scalars), for the mlp and the cnn.
 *
 * The oracle is the model's layer list, not the counter: for each layer
 * kind the ops its forward and backward issue (model/dense.c, relu.c,
 * pool.c, conv.c), times the conv chunks the batch splits into, plus the
 * step's loss, optimizer and input copies. The profile must give exactly
 * those counts per op name, no host synchronisation in a step, and a time
 * for every op; outside a profile nothing is counted. The plan a GPU runs
 * (case gpu_plan) stays within the launch budget a step at PyTorch's pace
 * allows. */
#include <cblas.h>
#include <string.h>

#include "kernels/profile.h"
#include "model/layers.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

enum { E_GEMM, E_GEMM_STRIDED, E_BIAS_GRAD, E_RELU_FWD, E_RELU_BWD, E_SOFTMAX, E_SGD, E_FILL,
       E_IM2COL, E_COL2IM, E_POOL_FWD, E_POOL_BWD, E_CHANNEL_BIAS, E_PREFETCH, E_N };
static const char *const e_names[E_N] = {
    "gemm", "gemm_strided", "bias_grad", "relu_fwd", "relu_bwd", "softmax_xent", "sgd_step",
    "fill", "im2col", "col2im", "maxpool_fwd", "maxpool_bwd", "channel_bias_grad", "prefetch"};

/* The ops one fp32 SGD step of `batch` samples issues, from the layers:
 * a layer's backward writes din only when a parametric layer precedes it
 * (the first one's input gradient is nobody's). */
static void expected_ops(const hfl_model_spec *spec, int batch, int chunk, int device, long e[E_N]) {
    memset(e, 0, sizeof(long) * E_N);
    int params_before = 0;
    for (int l = 0; l < spec->n_layers; l++) {
        int din = params_before;
        switch (spec->layers[l].kind) {
        case HFL_LAYER_DENSE: /* y = x w^T + b; dW, bias_grad (it overwrites: no fill), dX */
            e[E_GEMM] += 2 + din;
            e[E_BIAS_GRAD]++;
            break;
        case HFL_LAYER_RELU:
            e[E_RELU_FWD]++, e[E_RELU_BWD] += din;
            break;
        case HFL_LAYER_MAXPOOL2D:
            e[E_POOL_FWD]++, e[E_POOL_BWD] += din;
            break;
        case HFL_LAYER_CONV2D: /* per chunk: im2col + batched GEMM; backward im2col again,
                                  dy transposed (chunks of more than one sample), dW one
                                  GEMM, dcols batched + col2im; the bias over the batch */
            for (int i = 0; i < batch; i += chunk) {
                int cn = batch - i < chunk ? batch - i : chunk;
                e[E_IM2COL] += 2 + (cn > 1);
                e[E_GEMM_STRIDED] += 1 + din;
                e[E_GEMM]++;
                e[E_COL2IM] += din;
            }
            e[E_CHANNEL_BIAS]++; /* overwrites: no fill */
            break;
        default:
            CHECK_MSG(0, "layer kind %d not in the oracle", spec->layers[l].kind);
        }
        params_before |= spec->layers[l].n_params > 0;
    }
    e[E_SOFTMAX]++, e[E_SGD]++;
    if (device) e[E_PREFETCH] += 2; /* the batch and its labels */
}

static double row_count(const hfl_profile_report *r, const char *name) {
    for (int i = 0; i < r->n_rows; i++)
        if (!strcmp(r->rows[i].name, name)) return r->rows[i].count;
    return 0.0;
}

/* The ops per step the profile counted (0 when the step could not run). */
static double check_step(const char *model, const hfl_backend *inner, int batch, int chunk) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin(model, &spec, err) == 0);
    const hfl_backend *be = hfl_profile_wrap(inner);
    hfl_plan_config cfg = {.batch = batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = 1};
    hfl_plan_config_for_backend(&cfg, inner);
    cfg.conv_chunk = chunk;
    static hfl_plan plan;
    if (!CHECK(hfl_plan_make(&spec, &cfg, &plan, err) == 0)) return 0;
    hfl_trainer *t = hfl_trainer_create_plan(&spec, be, &plan, err);
    if (!CHECK_MSG(t != NULL, "%s", err)) return 0;
    float *x = calloc((size_t)batch * spec.in_dim, sizeof(float));
    int32_t *y = calloc((size_t)batch, sizeof(int32_t));
    for (size_t i = 0; i < (size_t)batch * spec.in_dim; i++) x[i] = (float)(i % 7) * 0.1f;
    hfl_profile_report rep;
    hfl_profile_begin();
    hfl_profile_end(1, &rep);
    CHECK(rep.ops_per_step == 0 && rep.n_rows == 0);
    const int steps = 2;
    hfl_trainer_stage(t, x, y, batch);
    hfl_trainer_step_staged(t, 0.01f, 0.9f, 0.0f); /* unprofiled: counts nothing */
    hfl_profile_begin();
    for (int s = 0; s < steps; s++) {
        hfl_trainer_stage(t, x, y, batch);
        hfl_trainer_step_staged(t, 0.01f, 0.9f, 0.0f);
    }
    hfl_profile_end(steps, &rep);
    long e[E_N], total = 0;
    int device = !inner->host_memory;
    expected_ops(&spec, batch, chunk > 1 ? chunk : 1, device, e);
    for (int k = 0; k < E_N; k++) {
        CHECK_MSG(row_count(&rep, e_names[k]) == (double)e[k], "%s batch %d chunk %d%s: %s %.1f per step, the layers say %ld",
                  model, batch, chunk, device ? " (device-like)" : "", e_names[k], row_count(&rep, e_names[k]), e[k]);
        total += e[k];
    }
    CHECK_MSG(rep.ops_per_step == (double)total, "%s: ops_per_step %.1f, the layers say %ld", model,
              rep.ops_per_step, total);
    CHECK_MSG(rep.syncs_per_step == 0, "%s: %.1f host waits per step", model, rep.syncs_per_step);
    CHECK(rep.steps == steps && rep.timed == 1 && rep.ms_per_step > 0);
    double ms = 0;
    for (int i = 0; i < rep.n_rows; i++) ms += rep.rows[i].ms;
    CHECK_CLOSE(ms, rep.ms_per_step, 1e-9, 1e-9); /* the ops' times tile the step's */
    printf("%s batch %d chunk %d%s: %.0f ops per step, %.3f ms\n", model, batch, chunk,
           device ? " device-like" : "", rep.ops_per_step, rep.ms_per_step);
    free(x);
    free(y);
    hfl_trainer_free(t);
    return rep.ops_per_step;
}

static void case_cpu(void) {
    check_step("mlp", hfl_backend_cpu(), 16, 0);
    check_step("cnn", hfl_backend_cpu(), 8, 0);
    check_step("cnn", hfl_backend_cpu(), 8, 3); /* chunks 3, 3, 2 */
}

static void case_device(void) {
    static hfl_backend device_like;
    device_like = *hfl_backend_cpu();
    device_like.host_memory = 0;
    check_step("mlp", &device_like, 16, 0);
    check_step("cnn", &device_like, 7, 4);
}

/* The plan a GPU trains with (the CUDA backend's whole-batch conv chunk,
 * kernels/backend.h; device memory: prefetch copies and device scalars):
 * at most 40 ops an optimizer step for the cnn, the same count at batch 8,
 * 32 and 128 (any batch up to the chunk is one chunk: 512 is left to
 * gpu-check, a 3 s step here), and at most 20 for the mlp, with no host
 * wait (the GPU's launch count: 318 on the cnn at 128 before the chunked
 * convolution). These are the counts gpu-check's `--trial-step --profile`
 * reads on a GPU at 32, 128 and 512, where the same plan runs through the
 * CUDA table. */
static void case_gpu_plan(void) {
    static hfl_backend gpu_like;
    gpu_like = *hfl_backend_cpu();
    gpu_like.host_memory = 0;
    gpu_like.conv_chunk = HFL_CONV_CHUNK_MAX;
    double cnn[3];
    const int batches[3] = {8, 32, 128};
    for (int i = 0; i < 3; i++) {
        cnn[i] = check_step("cnn", &gpu_like, batches[i], gpu_like.conv_chunk);
        CHECK_MSG(cnn[i] <= 40 && cnn[i] == cnn[0], "cnn batch %d: %.0f ops a step (batch 8: %.0f)", batches[i],
                  cnn[i], cnn[0]);
    }
    double mlp = check_step("mlp", &gpu_like, 128, 0);
    CHECK_MSG(mlp <= 20, "mlp: %.0f ops a step", mlp);
}

static const check_case cases[] = {
    {"cpu", case_cpu},
    {"device", case_device},
    {"gpu_plan", case_gpu_plan},
};

int main(int argc, char **argv) {
    openblas_set_num_threads(1);
    return check_run("test_profile", cases, CHECK_CASES(cases), argc, argv);
}
