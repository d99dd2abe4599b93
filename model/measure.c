/* measure.c: one training step's peak memory: RSS in a forked child on the
 * CPU, free device memory in-process on a GPU (see measure.h). */
#include "model/measure.h"

#include <malloc.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/budget.h"
#include "util/memmeter.h"
#include "util/util.h"

typedef struct {
    int ok;
    hfl_step_measure m;
    char err[HFL_ERR_LEN];
} measure_result;

static void measure_child(const hfl_model_spec *spec, const hfl_plan *plan, const float *params,
                          const float *x, const int32_t *y, measure_result *r) {
    hfl_mem_window w;
    uint64_t growth = 0;
    hfl_budget_reset_peak();
    if (hfl_mem_window_begin(&w, r->err) != 0) return;
    /* The batch gathered into host staging first, as a client does
     * (hfl_overhead_staging counts it). */
    int b = plan->cfg.batch;
    float *xs = hfl_malloc(sizeof(float) * (size_t)b * spec->in_dim);
    size_t ny = (size_t)b * spec->label_rows;
    int32_t *ys = hfl_malloc(sizeof(int32_t) * ny);
    memcpy(xs, x, sizeof(float) * (size_t)b * spec->in_dim);
    memcpy(ys, y, sizeof(int32_t) * ny);
    hfl_trainer *t = hfl_trainer_create_plan(spec, hfl_backend_cpu(), plan, r->err);
    if (!t) return;
    hfl_trainer_set_params(t, params);
    hfl_trainer_step(t, xs, ys, b, 0.05f, plan->cfg.momentum ? 0.9f : 0.0f, 0.0f);
    if (hfl_mem_window_growth(&w, &growth, r->err) == 0) {
        r->ok = 1;
        r->m.growth = growth;
        r->m.backend_peak = hfl_budget_peak_bytes();
    }
    hfl_trainer_free(t);
    free(xs);
    free(ys);
}

int hfl_measure_step(const hfl_model_spec *spec, const hfl_plan *plan, const float *params,
                     const float *x, const int32_t *y, hfl_step_measure *out, char *err) {
    int fd[2];
    if (pipe(fd) != 0) return hfl_errf(err, "cannot measure: pipe failed");
    fflush(stdout);
    fflush(stderr);
    /* Give freed heap back first: a child reuses whatever resident free heap
     * it inherits, which would make the measurement depend on what this
     * process happened to free before (seen: 40 KiB per 60 records read). */
    malloc_trim(0);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return hfl_errf(err, "cannot measure: fork failed");
    }
    if (pid == 0) {
        close(fd[0]);
        measure_result r;
        memset(&r, 0, sizeof r);
        measure_child(spec, plan, params, x, y, &r);
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    measure_result r;
    memset(&r, 0, sizeof r);
    ssize_t got = read(fd[0], &r, sizeof r);
    close(fd[0]);
    waitpid(pid, NULL, 0);
    if (got != (ssize_t)sizeof r) return hfl_errf(err, "the measuring process died");
    if (!r.ok) return hfl_errf(err, "%s", r.err);
    *out = r.m;
    return 0;
}

int hfl_measure_step_on(const hfl_backend *be, const hfl_model_spec *spec, const hfl_plan *plan,
                        const float *params, const float *x, const int32_t *y,
                        hfl_step_measure *out, char *err) {
    uint64_t free0, free1, total;
    if (be->host_memory || be->mem_info(&free0, &total) != 0)
        return hfl_measure_step(spec, plan, params, x, y, out, err);
    hfl_budget_reset_peak();
    hfl_trainer *t = hfl_trainer_create_plan(spec, be, plan, err);
    if (!t) return -1;
    hfl_trainer_set_params(t, params);
    hfl_trainer_step(t, x, y, plan->cfg.batch, 0.05f, plan->cfg.momentum ? 0.9f : 0.0f, 0.0f);
    float acc;
    hfl_trainer_evaluate(t, x, y, plan->cfg.batch, &acc);
    be->sync();
    int rc = be->mem_info(&free1, &total);
    out->backend_peak = hfl_budget_peak_bytes();
    hfl_trainer_free(t);
    if (rc != 0) return hfl_errf(err, "cannot measure: %s backend lost its memory figures", be->name);
    out->growth = free0 > free1 ? free0 - free1 : 0;
    return 0;
}
