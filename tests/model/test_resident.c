/* test_resident.c: evaluation from a data set resident in the backend's
 * memory (hfl_trainer_upload_set, hfl_trainer_evaluate_resident: the
 * coordinator's test set on its GPU) gives hfl_trainer_evaluate's figures
 * bit for bit: loss and accuracy, for mlp and cnn, in fp32 and bf16, with
 * a last short batch, on the CPU backend and on the CPU backend dressed as a
 * device (host_memory 0: the trainer's device path, input slots and scalars
 * in its arena), and an epoch's running loss in the scalars survives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

static void check_model(const char *name, const hfl_backend *be, hfl_precision p) {
    enum { N = 203, BATCH = 64 };
    hfl_model_spec s;
    char err[HFL_ERR_LEN];
    REQUIRE(hfl_model_builtin(name, &s, err) == 0);
    hfl_plan plan;
    hfl_plan_config cfg = {.batch = BATCH, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .precision = p};
    hfl_plan_config_for_backend(&cfg, be);
    REQUIRE_MSG(hfl_plan_make(&s, &cfg, &plan, err) == 0, "%s", err);
    hfl_trainer *t = hfl_trainer_create_plan(&s, be, &plan, err);
    REQUIRE_MSG(t != NULL, "%s", err);
    float *w = hfl_malloc(sizeof(float) * s.n_params), *x = hfl_malloc(sizeof(float) * N * s.in_dim);
    int32_t *y = hfl_malloc(sizeof(int32_t) * N);
    hfl_model_init_params(&s, w, 3);
    hfl_trainer_set_params(t, w);
    for (size_t i = 0; i < (size_t)N * s.in_dim; i++) x[i] = hfl_u01(hfl_philox_u32(5, 0, 0, 0, 0, i));
    for (int i = 0; i < N; i++) y[i] = (int32_t)(hfl_philox_u32(6, 0, 0, 0, 0, (uint64_t)i) % s.n_classes);
    hfl_trainer_stage(t, x, y, BATCH); /* a staged step leaves its loss running in the scalars */
    hfl_trainer_grads_staged(t, 1, 1, BATCH);
    double run0;
    int64_t rows0;
    float acc_h, acc_r;
    float loss_h = hfl_trainer_evaluate(t, x, y, N, &acc_h);
    hfl_resident_set *r = hfl_trainer_upload_set(t, x, y, N, err);
    REQUIRE_MSG(r != NULL, "%s", err);
    float loss_r = hfl_trainer_evaluate_resident(t, r, &acc_r);
    hfl_trainer_take_loss(t, &run0, &rows0, NULL);
    CHECK_MSG(memcmp(&loss_h, &loss_r, sizeof loss_h) == 0 && memcmp(&acc_h, &acc_r, sizeof acc_h) == 0,
              "%s %s on %s (host_memory %d): resident %.9g / %.6f, staged %.9g / %.6f", name,
              hfl_precision_name(p), be->name, be->host_memory, (double)loss_r, (double)acc_r, (double)loss_h,
              (double)acc_h);
    CHECK_MSG(rows0 == BATCH, "%s: the running loss's rows %lld after evaluating, not %d", name, (long long)rows0,
              BATCH);
    hfl_resident_set_free(t, r);
    hfl_trainer_free(t);
    free(w), free(x), free(y);
}

/* mlp and cnn in fp32 and bf16 on one backend. */
static void check_models(const hfl_backend *be) {
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_BF16; p++) {
        check_model("mlp", be, (hfl_precision)p);
        check_model("cnn", be, (hfl_precision)p);
    }
    printf("resident evaluation equals staged evaluation: mlp and cnn, fp32 and bf16, %s path\n",
           be->host_memory ? "host" : "device");
}

static void case_host(void) { check_models(hfl_backend_cpu()); }
static void case_device(void) {
    static hfl_backend device;
    device = *hfl_backend_cpu();
    device.host_memory = 0; /* the trainer's device path on host memory */
    check_models(&device);
}

static const check_case cases[] = {
    {"host", case_host},
    {"device", case_device},
};

int main(int argc, char **argv) {
    return check_run("test_resident", cases, CHECK_CASES(cases), argc, argv);
}
