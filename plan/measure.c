/* measure.c: one training step's peak memory: RSS in a forked child on the
 * CPU, free device memory (and this process's own, from NVML) in-process on
 * a GPU; with the step the tail shapes an epoch also runs (see measure.h). */
#include "plan/measure.h"

#include <malloc.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/budget.h"
#include "kernels/select.h"
#include "util/memmeter.h"
#include "util/util.h"

typedef struct {
    int ok;
    hfl_step_measure m;
    char err[HFL_ERR_LEN];
} measure_result;

int hfl_measure_tails(int batch, int step_batch, int64_t n, int tails[HFL_MEASURE_TAILS]) {
    int found = 0, step = step_batch > batch ? step_batch : batch;
    /* a whole step's last micro-batch, where the epoch has a whole step */
    int64_t want[HFL_MEASURE_TAILS] = {n <= 0 || n >= step ? step % batch : 0, n > 0 ? n % step % batch : batch - 1};
    for (int k = 0; k < HFL_MEASURE_TAILS; k++) {
        int t = (int)want[k];
        if (t <= 0 || t >= batch || (found && tails[0] == t)) continue;
        tails[found++] = t;
    }
    return found;
}

/* One optimizer step of `rows` rows of x, y on t, through the staged form a
 * client's loop uses. */
static void measure_one_step(hfl_trainer *t, const float *x, const int32_t *y, int rows, int momentum) {
    hfl_trainer_stage(t, x, y, rows);
    hfl_trainer_step_staged(t, 0.05f, momentum ? 0.9f : 0.0f, 0.0f);
}

/* The full batch, then each tail; the rows they trained, as the trainer's
 * own loss counters have them (one sync). */
static int64_t measure_steps(hfl_trainer *t, const hfl_plan *plan, const float *x, const int32_t *y,
                             const int *tails, int n_tails) {
    hfl_trainer_take_loss(t, NULL, NULL, NULL); /* the counters from zero */
    measure_one_step(t, x, y, plan->cfg.batch, plan->cfg.momentum);
    for (int k = 0; k < n_tails; k++)
        if (tails[k] >= 1 && tails[k] < plan->cfg.batch) measure_one_step(t, x, y, tails[k], plan->cfg.momentum);
    int64_t rows = 0;
    hfl_trainer_take_loss(t, NULL, &rows, NULL);
    return rows;
}

static void measure_child(const hfl_model_spec *spec, const hfl_plan *plan, const float *params,
                          const float *x, const int32_t *y, const int *tails, int n_tails, measure_result *r) {
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
    int64_t rows = measure_steps(t, plan, xs, ys, tails, n_tails);
    if (hfl_mem_window_growth(&w, &growth, r->err) == 0) {
        r->ok = 1;
        r->m.growth = growth;
        r->m.backend_peak = hfl_budget_peak_bytes();
        r->m.rows = rows;
    }
    hfl_trainer_free(t);
    free(xs);
    free(ys);
}

/* A host backend's measurement (hfl_measure_step_on), in a forked child. */
static int measure_forked(const hfl_model_spec *spec, const hfl_plan *plan, const float *params, const float *x,
                          const int32_t *y, const int *tails, int n_tails, hfl_step_measure *out, char *err) {
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
        measure_child(spec, plan, params, x, y, tails, n_tails, &r);
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
                        const float *params, const float *x, const int32_t *y, const int *tails, int n_tails,
                        hfl_step_measure *out, char *err) {
    uint64_t free0, free1, total;
    memset(out, 0, sizeof *out);
    if (be->host_memory || be->mem_info(&free0, &total) != 0)
        return measure_forked(spec, plan, params, x, y, tails, n_tails, out, err);
    hfl_budget_reset_peak();
    hfl_trainer *t = hfl_trainer_create_plan(spec, be, plan, err);
    if (!t) return -1;
    hfl_trainer_set_params(t, params);
    out->rows = measure_steps(t, plan, x, y, tails, n_tails);
    float acc;
    hfl_trainer_evaluate(t, x, y, plan->cfg.batch, &acc);
    be->sync();
    int rc = be->mem_info(&free1, &total);
    if (hfl_backend_process_bytes(be, &out->process_bytes, NULL) != 0) out->process_bytes = 0;
    out->backend_peak = hfl_budget_peak_bytes();
    hfl_trainer_free(t);
    if (rc != 0) return hfl_errf(err, "cannot measure: %s backend lost its memory figures", be->name);
    out->growth = free0 > free1 ? free0 - free1 : 0;
    return 0;
}
