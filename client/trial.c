/* trial.c: hfl-client --plan --trial-step: the memory promise for one
 * configuration, end to end, without a coordinator.
 *
 * It does what a client does between its welcome and its first update, on
 * synthetic data of the model's shape: chooses and verifies its plan for the
 * run's batch (--batch, default 32) under --memory-budget from --state-dir
 * (client_choose_plan: calibration, overhead model, measurements before it
 * commits), allocates the model copies a round holds (the weights, decoded
 * into in place, and the trainable part's result and residual), and trains one optimizer step of the
 * run's batch (client_train_round: the real staging, accumulation and budget
 * checks). The answer (with --json, one object) says whether it trained and
 * within what, or why it was refused up front; a breach of the budget is an
 * error. bench/memory_sweep.py runs it over random draws.
 *
 * With --profile the trainer runs on kernels/profile.h's counting table,
 * and after the trial step TRIAL_PROFILE_STEPS more optimizer steps of the
 * same batch (micro-batches and all) are profiled: per op the calls and time
 * per step, the ops and host synchronisations per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client/client.h"
#include "compress/codec.h"
#include "kernels/profile.h"
#include "util/util.h"

#define TRIAL_MOMENTUM 0.9 /* planned, so the step carries the momentum buffer */
#define TRIAL_PROFILE_STEPS 3

/* One optimizer step's rows of synthetic data in the model's shape. */
static void trial_data(const hfl_model_spec *spec, int rows, hfl_dataset *d) {
    d->n = rows;
    d->dim = spec->in_dim;
    d->n_classes = spec->n_classes;
    d->label_rows = spec->label_rows;
    d->x = hfl_malloc(sizeof(float) * (size_t)rows * spec->in_dim);
    d->y = hfl_malloc(sizeof(int32_t) * (size_t)rows * spec->label_rows);
    hfl_synthetic_batch(spec, rows, d->x, d->y);
}

/* TRIAL_PROFILE_STEPS optimizer steps of the trial's batch as the round
 * ran them (micro-batches of the trainer's batch accumulated to the run's
 * when the plan accumulates, else the trainer's batch), profiled. */
static void trial_profile(client_state *s, const client_task *task, hfl_profile_report *rep) {
    int micro = s->trainer_batch < task->batch ? s->trainer_batch : task->batch;
    int step = s->chosen.accum > 1 ? task->batch : micro;
    int dim = s->data.dim, r = s->data.label_rows ? s->data.label_rows : 1;
    hfl_profile_begin();
    for (int k = 0; k < TRIAL_PROFILE_STEPS; k++) {
        for (int row = 0; row < step; row += micro) {
            int size = step - row < micro ? step - row : micro;
            hfl_trainer_stage(s->trainer, s->data.x + (size_t)row * dim, s->data.y + (size_t)row * r, size);
            hfl_trainer_grads_staged(s->trainer, row == 0, row + size >= step, step);
        }
        hfl_trainer_apply(s->trainer, (float)task->lr, (float)task->momentum, 0.0f);
    }
    hfl_profile_end(TRIAL_PROFILE_STEPS, rep);
}

static cJSON *profile_json(const hfl_profile_report *p, const char *clock) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "steps", p->steps);
    cJSON_AddStringToObject(j, "clock", clock);
    cJSON_AddBoolToObject(j, "timed", p->timed);
    cJSON_AddNumberToObject(j, "ops_per_step", p->ops_per_step);
    cJSON_AddNumberToObject(j, "syncs_per_step", p->syncs_per_step);
    cJSON_AddNumberToObject(j, "ms_per_step", p->ms_per_step);
    cJSON *ops = cJSON_AddArrayToObject(j, "ops");
    for (int i = 0; i < p->n_rows; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", p->rows[i].name);
        cJSON_AddNumberToObject(o, "count", p->rows[i].count);
        cJSON_AddNumberToObject(o, "ms", p->rows[i].ms);
        cJSON_AddItemToArray(ops, o);
    }
    return j;
}

static void trial_report(const client_options *o, const client_state *s,
                         cJSON *plan, int trained, double step_s, const char *error,
                         const hfl_profile_report *prof) {
    const char *clock = s->be->host_memory ? "cpu clock" : "device events";
    if (!o->json) {
        if (trained)
            printf("trained one step of batch %d: measured %.2f MiB, predicted %.2f MiB, budget %.2f MiB\n",
                   o->batch, s->budget.measured_peak / 1048576.0, s->chosen.predicted / 1048576.0,
                   s->budget.planned / 1048576.0);
        if (prof) hfl_profile_print(stdout, prof, clock);
        cJSON_Delete(plan);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", s->spec.name);
    cJSON_AddNumberToObject(root, "batch", o->batch);
    cJSON_AddNumberToObject(root, "budget_bytes", (double)s->budget.planned);
    cJSON_AddBoolToObject(root, "trained", trained);
    cJSON_AddBoolToObject(root, "breached", s->budget.breached);
    if (error) cJSON_AddStringToObject(root, "error", error);
    else cJSON_AddNullToObject(root, "error");
    if (plan) cJSON_AddItemToObject(root, "plan", plan);
    else cJSON_AddNullToObject(root, "plan");
    cJSON_AddNumberToObject(root, "measured_peak_bytes", (double)s->budget.measured_peak);
    if (trained) cJSON_AddNumberToObject(root, "step_s", step_s); /* the one step, page faults and all */
    else cJSON_AddNullToObject(root, "step_s");
    cJSON_AddNumberToObject(root, "footprint_bytes", (double)s->budget.footprint);
    if (prof) cJSON_AddItemToObject(root, "profile", profile_json(prof, clock));
    else if (o->profile) cJSON_AddNullToObject(root, "profile");
    char *text = cJSON_Print(root);
    printf("%s\n", text);
    free(text);
    cJSON_Delete(root);
}

int client_trial_run(const client_options *opts, const hfl_backend *be, const hfl_device_info *dev, char *err) {
    client_options o = *opts;
    if (!o.batch) o.batch = 32;
    if (o.json) o.quiet = 1; /* the JSON is the whole output */
    if (!o.name[0]) snprintf(o.name, sizeof o.name, "hfl-client");
    client_state s;
    memset(&s, 0, sizeof s);
    s.be = o.profile ? hfl_profile_wrap(be) : be;
    s.stream = hfl_hash32("trial");
    s.held_version = -1;
    if (hfl_model_resolve(o.model, &s.spec, err) != 0) return -1;
    client_welcome w;
    memset(&w, 0, sizeof w);
    snprintf(w.model, sizeof w.model, "%s", s.spec.name);
    w.batch = o.batch;
    w.overhead_estimate = -1;
    int adamw = o.optimizer == HFL_OPTIM_ADAMW;
    w.optimizer = o.optimizer;
    w.momentum = adamw ? 0 : TRIAL_MOMENTUM;
    cJSON *plan = client_choose_plan(&o, dev, &s, &w, err);
    if (!plan) {
        trial_report(&o, &s, NULL, 0, 0.0, err, NULL);
        return -1; /* refused up front: err is the one line */
    }
    trial_data(&s.spec, o.batch, &s.data);
    size_t n = s.spec.n_params, nt = s.spec.n_trainable;
    s.global = hfl_malloc(n * sizeof(float));
    s.residual = hfl_malloc(nt * sizeof(float));
    memset(s.residual, 0, nt * sizeof(float));
    hfl_model_init_params(&s.spec, s.global, 1); /* a round's weights are decoded there too (main.c) */
    client_task task = {.round = 1, .local_epochs = 1, .batch = o.batch, .lr = 0.01,
                        .momentum = w.momentum, .optimizer = o.optimizer, .beta1 = HFL_ADAMW_BETA1,
                        .beta2 = HFL_ADAMW_BETA2, .seed = 1, .block = 256};
    int rc = -1;
    double secs = 0.0;
    if ((task.codec = hfl_codec_find("int8", err))) {
        size_t len;
        double loss;
        uint8_t *upd = client_train_round(&s, &task, s.global, &len, &loss, &secs, err);
        rc = upd ? 0 : -1;
        free(upd);
    }
    hfl_profile_report prof;
    if (rc == 0 && o.profile) trial_profile(&s, &task, &prof);
    trial_report(&o, &s, plan, rc == 0, secs, rc == 0 ? NULL : err, rc == 0 && o.profile ? &prof : NULL);
    free(s.global);
    free(s.local);
    free(s.residual);
    free(s.xbuf);
    free(s.ybuf);
    hfl_dataset_free(&s.data);
    if (s.trainer) hfl_trainer_free(s.trainer);
    free(s.plan);
    return rc;
}
