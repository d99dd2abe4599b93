/* test_cuda_profile.c: the per-op profile (kernels/profile.h) of training
 * steps on the GPU (suite gpu; skips, exit 77 saying why, without one).
 *
 * mlp at batch 64 and cnn at batches 32, 128 and 512, fp32, with the CUDA
 * backend's own plan settings (prefetch, device scalars, its conv chunk):
 * the steps make no host synchronisation, every op is timed by cudaEvents
 * (each op's time >= 0, and the ops' times add up to the step's), and the
 * ops counted per name are those the same plan issues on the CPU backend
 * dressed as a device with the same settings (model/conv.c's chunking,
 * dense, pooling: the layers, not the backend, decide the ops). The cnn's
 * op count is then the same at every batch (the whole batch is one chunk)
 * and at most 40, the mlp's at most 22 (2 of them the input
 * prefetch copies); printed with the time per step. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/profile.h"
#include "kernels/select.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

/* The profile of `steps` fp32 SGD steps of `batch` on be, planned with
 * `settings`' plan config. */
static void profile_steps(const hfl_backend *be, const hfl_backend *settings, const char *model,
                          int batch, hfl_profile_report *rep) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin(model, &spec, err) == 0);
    hfl_plan_config cfg = {.batch = batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = 1};
    hfl_plan_config_for_backend(&cfg, settings);
    static hfl_plan plan;
    REQUIRE_MSG(hfl_plan_make(&spec, &cfg, &plan, err) == 0, "%s", err);
    const hfl_backend *wrapped = hfl_profile_wrap(be);
    hfl_trainer *t = hfl_trainer_create_plan(&spec, wrapped, &plan, err);
    REQUIRE_MSG(t != NULL, "%s", err);
    float *w = malloc(spec.n_params * sizeof(float));
    hfl_model_init_params(&spec, w, 3);
    hfl_trainer_set_params(t, w);
    float *x = calloc((size_t)batch * spec.in_dim, sizeof(float));
    int32_t *y = calloc((size_t)batch, sizeof(int32_t));
    for (size_t i = 0; i < (size_t)batch * spec.in_dim; i++) x[i] = (float)(i % 5) * 0.2f;
    hfl_trainer_stage(t, x, y, batch);
    hfl_trainer_step_staged(t, 0.01f, 0.9f, 0.0f); /* warm: cuBLAS picks, events created */
    const int steps = 3;
    hfl_profile_begin();
    for (int s = 0; s < steps; s++) {
        hfl_trainer_stage(t, x, y, batch);
        hfl_trainer_step_staged(t, 0.01f, 0.9f, 0.0f);
    }
    hfl_profile_end(steps, rep);
    hfl_trainer_take_loss(t, NULL, NULL, NULL);
    hfl_trainer_free(t);
    free(w), free(x), free(y);
}

static double count_of(const hfl_profile_report *r, const char *name) {
    for (int i = 0; i < r->n_rows; i++)
        if (!strcmp(r->rows[i].name, name)) return r->rows[i].count;
    return 0.0;
}

static double check_model(const hfl_backend *gpu, const hfl_backend *cpu_like, const char *model,
                          int batch) {
    hfl_profile_report g, c;
    profile_steps(gpu, gpu, model, batch, &g);
    profile_steps(cpu_like, gpu, model, batch, &c);
    CHECK_MSG(g.syncs_per_step == 0, "%s: %.1f host waits per step", model, g.syncs_per_step);
    CHECK_MSG(g.timed && g.ms_per_step > 0, "%s: not every op timed", model);
    double sum = 0;
    for (int i = 0; i < g.n_rows; i++) {
        CHECK(g.rows[i].ms >= 0);
        sum += g.rows[i].ms;
        CHECK_MSG(g.rows[i].count == count_of(&c, g.rows[i].name), "%s: %s %.1f on the GPU, %.1f on the CPU",
                  model, g.rows[i].name, g.rows[i].count, count_of(&c, g.rows[i].name));
    }
    CHECK(g.n_rows == c.n_rows && g.ops_per_step == c.ops_per_step);
    CHECK_CLOSE(sum, g.ms_per_step, 1e-6, 1e-5);
    printf("%s batch %d: %.0f ops per step, %.0f syncs, %.3f ms per step (GPU events)\n", model, batch,
           g.ops_per_step, g.syncs_per_step, g.ms_per_step);
    for (int i = 0; i < g.n_rows; i++)
        printf("    %-20s %6.1f %9.4f ms\n", g.rows[i].name, g.rows[i].count, g.rows[i].ms);
    return g.ops_per_step;
}

int main(void) {
    hfl_device_info info;
    char why[HFL_ERR_LEN], err[HFL_ERR_LEN];
    if (hfl_cuda_probe(&info, why, sizeof why) != 0) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    const hfl_backend *gpu = hfl_backend_select("cuda", &info, why, err);
    REQUIRE_MSG(gpu != NULL, "a GPU is present but the CUDA backend is not: %s", err);
    openblas_set_num_threads(1);
    static hfl_backend cpu_like; /* the CPU dressed as the GPU's plan expects */
    cpu_like = *hfl_backend_cpu();
    cpu_like.host_memory = 0;
    cpu_like.conv_chunk = gpu->conv_chunk;
    cpu_like.blas_ws_bytes = gpu->blas_ws_bytes;
    double mlp = check_model(gpu, &cpu_like, "mlp", 64);
    CHECK_MSG(mlp <= 22, "mlp: %.0f ops per step", mlp);
    double cnn32 = check_model(gpu, &cpu_like, "cnn", 32);
    double cnn128 = check_model(gpu, &cpu_like, "cnn", 128);
    double cnn512 = check_model(gpu, &cpu_like, "cnn", 512);
    CHECK_MSG(cnn32 == cnn128 && cnn128 == cnn512 && cnn128 <= 40, "cnn: %.0f, %.0f, %.0f ops per step",
              cnn32, cnn128, cnn512);
    return check_exit_code("test_cuda_profile");
}
