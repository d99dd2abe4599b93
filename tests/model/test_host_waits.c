/* test_host_waits.c: no host synchronisation inside a training step
 * (kernels/backend.h, HOST WAITS).
 *
 * For every model (mlp, cnn and gpt-kjv, the language model of
 * scenarios/models/gpt-kjv.json, given as argv[1]) x precision (fp32, bf16,
 * fp16) x optimizer (SGD with momentum, AdamW), a trainer is driven the way
 * client/train.c drives one: batches staged ahead as far as the trainer has
 * input slots, then grads_staged and apply, here over three optimizer
 * steps (a full batch; two micro-batches accumulated; a short batch). fp16's
 * first step overflows (a loss scale of 1e30) and is skipped, and the scale
 * is set back between steps, so a skipped step is among those counted.
 *
 * Oracle: the backend's own count of the calls that make the host wait on
 * a GPU (hfl_backend.host_waits), read around every grads_staged and apply
 * call. Each of downloads, uploads, syncs and stage_waits must stay where
 * it was. The CPU backend counts the same calls the CUDA backend waits in,
 * and the test runs two forms: the CPU backend as a CPU client gets it, and
 * the CPU backend dressed as a device (host_memory 0), so the trainer takes
 * the CUDA backend's path (a plan with device scalars and two input slots,
 * staging through pinned memory and prefetch copies).
 *
 * The counters must also count: staging a batch on the device form is one
 * stage_wait and nothing else (back-pressure, between steps), and
 * take_loss after the steps is exactly one download (the epoch's sums) and
 * one upload (zeroing them). fp16 then reports its one skipped step, read
 * outside the steps. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "kernels/blas.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

#define B 4 /* rows of a (micro-)batch: small, the test counts calls */

static hfl_backend device_like; /* the CPU backend dressed as a device */

typedef struct {
    const char *model; /* mlp, cnn or the language model's name */
    const char *prec, *optim, *form;
} run_id;

/* One micro-batch of an optimizer step: its rows, and where it stands in the step. */
typedef struct {
    int n, first, last, total_rows;
} micro;

/* The three optimizer steps: B rows; 2 x B rows accumulated; B - 1 rows. */
static const micro micros[] = {
    {B, 1, 1, B}, {B, 1, 0, 2 * B}, {B, 0, 1, 2 * B}, {B - 1, 1, 1, B - 1},
};
#define N_MICROS (int)(sizeof micros / sizeof micros[0])

/* The waits since `before`, which must be `want` (one line naming the call when not). */
static void expect_waits(const hfl_backend *be, const hfl_host_waits *before,
                         const hfl_host_waits *want, const run_id *id, const char *call, int step) {
    hfl_host_waits now;
    be->host_waits(&now);
    hfl_host_waits d = {now.downloads - before->downloads, now.uploads - before->uploads,
                        now.syncs - before->syncs, now.stage_waits - before->stage_waits};
    CHECK_MSG(memcmp(&d, want, sizeof d) == 0,
              "%s %s %s on the %s form: %s (step %d) made %llu downloads, %llu uploads, %llu "
              "syncs, %llu stage_waits (want %llu, %llu, %llu, %llu)",
              id->model, id->prec, id->optim, id->form, call, step,
              (unsigned long long)d.downloads, (unsigned long long)d.uploads,
              (unsigned long long)d.syncs, (unsigned long long)d.stage_waits,
              (unsigned long long)want->downloads, (unsigned long long)want->uploads,
              (unsigned long long)want->syncs, (unsigned long long)want->stage_waits);
}

/* Micro-batch k's inputs and labels: pixels in [0, 1) for the image models,
 * token ids for a language model (label_rows > 1), labels < n_classes. */
static void make_batch(const hfl_model_spec *s, int k, float *x, int32_t *y) {
    int lm = s->label_rows > 1;
    for (size_t i = 0; i < (size_t)B * s->in_dim; i++) {
        uint32_t u = hfl_philox_u32(11, (uint64_t)k, 0, 0, 0, i);
        x[i] = lm ? (float)(u % (uint32_t)s->n_classes) : hfl_u01(u);
    }
    for (size_t i = 0; i < (size_t)B * s->label_rows; i++)
        y[i] = (int32_t)(hfl_philox_u32(11, (uint64_t)k, 0, 0, 1, i) % (uint32_t)s->n_classes);
}

static hfl_trainer *make_trainer(const hfl_model_spec *spec, const hfl_backend *be,
                                 hfl_precision prec, int adamw) {
    hfl_plan_config cfg = {.batch = B, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = !adamw, .adamw = adamw, .precision = prec,
                           .act_elem_bytes = hfl_precision_bytes(prec)};
    hfl_plan_config_for_backend(&cfg, be);
    static hfl_plan plan;
    char err[HFL_ERR_LEN];
    hfl_trainer *t = NULL;
    if (hfl_plan_make(spec, &cfg, &plan, err) == 0) t = hfl_trainer_create_plan(spec, be, &plan, err);
    if (!t) {
        fprintf(stderr, "test_host_waits: %s: %s\n", spec->name, err);
        return NULL;
    }
    float *w = malloc(spec->n_params * sizeof(float));
    hfl_model_init_params(spec, w, 3);
    hfl_trainer_set_params(t, w);
    free(w);
    if (adamw) hfl_trainer_set_adamw(t, 0.9f, 0.95f, 1e-8f);
    if (prec == HFL_PREC_FP16) hfl_trainer_set_loss_scale(t, 1e30f); /* step 1 overflows */
    return t;
}

/* The client's loop (client/train.c) over micros[], counting around each call. */
static void run(const hfl_model_spec *spec, const hfl_backend *be, hfl_precision prec, int adamw,
                const char *form) {
    run_id id = {spec->name, hfl_precision_name(prec), adamw ? "adamw" : "sgd", form};
    hfl_trainer *t = make_trainer(spec, be, prec, adamw);
    CHECK(t != NULL);
    if (!t) return;
    float *x = malloc((size_t)B * spec->in_dim * sizeof(float));
    int32_t *y = malloc((size_t)B * spec->label_rows * sizeof(int32_t));
    float lr = adamw ? 1e-3f : 0.05f, momentum = adamw ? 0.0f : 0.9f, wd = adamw ? 0.1f : 1e-4f;
    int ahead = hfl_trainer_stage_slots(t), staged = 0, step = 1;
    const hfl_host_waits none = {0, 0, 0, 0}, one_stage_wait = {0, 0, 0, !be->host_memory};
    hfl_host_waits before;
    hfl_trainer_take_loss(t, NULL, NULL, NULL); /* the sums start from zero */
    for (int k = 0; k < N_MICROS; k++) {
        for (; staged < N_MICROS && staged - k < ahead; staged++) {
            make_batch(spec, staged, x, y);
            be->host_waits(&before);
            hfl_trainer_stage(t, x, y, micros[staged].n);
            expect_waits(be, &before, &one_stage_wait, &id, "staging", step);
        }
        const micro *mb = &micros[k];
        be->host_waits(&before);
        hfl_trainer_grads_staged(t, mb->first, mb->last, mb->total_rows);
        expect_waits(be, &before, &none, &id, "grads_staged", step);
        if (!mb->last) continue;
        be->host_waits(&before);
        hfl_trainer_apply(t, lr, momentum, wd);
        expect_waits(be, &before, &none, &id, "apply", step);
        if (prec == HFL_PREC_FP16 && step == 1) hfl_trainer_set_loss_scale(t, 1024.0f);
        step++;
    }
    be->host_waits(&before);
    double sum = 0.0;
    int64_t rows = 0;
    hfl_trainer_take_loss(t, &sum, &rows, NULL);
    const hfl_host_waits take = {1, 1, 0, 0};
    expect_waits(be, &before, &take, &id, "take_loss after the steps", step - 1);
    int64_t want_rows = 0;
    for (int k = 0; k < N_MICROS; k++) want_rows += (int64_t)micros[k].n * spec->label_rows;
    CHECK(rows == want_rows);
    if (prec == HFL_PREC_FP16) CHECK(hfl_trainer_skipped_steps(t) == 1);
    hfl_trainer_free(t);
    free(x);
    free(y);
}

static hfl_model_spec specs[3]; /* mlp, cnn and the GPT spec named on the command line */

/* One model in every precision and optimizer, on the CPU and device forms. */
static void run_model(int m) {
    static const hfl_precision precs[] = {HFL_PREC_FP32, HFL_PREC_BF16, HFL_PREC_FP16};
    int failures = check_failures;
    for (int p = 0; p < 3; p++)
        for (int adamw = 0; adamw < 2; adamw++) {
            run(&specs[m], hfl_backend_cpu(), precs[p], adamw, "cpu");
            run(&specs[m], &device_like, precs[p], adamw, "device");
        }
    if (check_failures == failures)
        printf("%s: fp32, bf16, fp16 x SGD (momentum), AdamW x the CPU and device forms: no "
               "host wait inside 3 optimizer steps\n", specs[m].name);
}

static void case_mlp(void) { run_model(0); }
static void case_cnn(void) { run_model(1); }
static void case_gpt(void) { run_model(2); }

static const check_case cases[] = {
    {"mlp", case_mlp},
    {"cnn", case_cnn},
    {"gpt", case_gpt},
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_host_waits GPT_SPEC.json\n");
        return 2;
    }
    hfl_blas_set_threads(1);
    device_like = *hfl_backend_cpu();
    device_like.host_memory = 0;
    char err[HFL_ERR_LEN];
    if (hfl_model_builtin("mlp", &specs[0], err) != 0 || hfl_model_builtin("cnn", &specs[1], err) != 0 ||
        hfl_model_spec_load(argv[1], &specs[2], err) != 0) {
        fprintf(stderr, "test_host_waits: %s\n", err);
        return 1;
    }
    /* argv holds the spec's path, not case names: argc 0, cases from HFL_TEST_CASE */
    return check_run("test_host_waits", cases, CHECK_CASES(cases), 0, argv);
}
