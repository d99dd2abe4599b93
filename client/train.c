/* train.c: one round of local training on a client.
 *
 * The data order of each epoch is a Fisher-Yates shuffle drawn from philox
 * keyed by (seed, round, client, epoch), where the client is the hash of its
 * name rather than its arrival-order id, so a client's run is reproducible.
 * The optimizer state starts fresh each round (as Flower's and the FedAvg
 * paper's clients do). The update is local - global, compressed with the
 * client's error-feedback residual.
 *
 * The loop uses the trainer's staged form: each gathered batch is staged as
 * many steps ahead as the plan has input slots (two on a GPU, so batch i+1
 * is copied in while step i runs), and the loss is read once per epoch, so
 * nothing inside an epoch waits for the device.
 *
 * THE BUDGET (--memory-budget) is checked, not assumed. The first step's
 * memory is the step's real footprint: on the CPU the growth of peak RSS
 * from before the trainer existed; on a GPU what the process holds beyond
 * its per-process cost (hfl_held_bytes: NVML's figure for this process,
 * so kernels loaded late, library pools and whole granules all count, and
 * other processes do not), or where NVML cannot say, the fall of free
 * device memory. Every epoch then adds what grew during it: the peak RSS
 * since the epoch began over the RSS then; on a GPU what the process holds
 * beyond its cost now over the footprint, or where NVML cannot say, hfl's
 * allocator's peak beyond the arena (free memory is shared with other
 * processes). Footprint plus growth over the budget ends the round with
 * one line naming both figures (s->budget, plan/choose.h: breached), on
 * either device; main.c then re-plans and declines the round, or after
 * repeated breaches leaves with a BYE (client/replan.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "kernels/budget.h"
#include "kernels/philox.h"
#include "util/memmeter.h"
#include "util/util.h"

static void shuffle(int *idx, int n, uint64_t seed, int round, int stream, int epoch) {
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = n - 1; i > 0; i--) {
        uint32_t u = hfl_philox_u32(seed, HFL_STREAM_SHUFFLE, (uint32_t)round, (uint32_t)stream,
                                    (uint32_t)epoch, (uint64_t)i);
        int j = (int)(((uint64_t)u * (uint64_t)(i + 1)) >> 32);
        int t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

/* What the first step is measured from: peak RSS on the CPU; on a device
 * backend what the process holds (NVML), else free device memory (no fork:
 * CUDA is initialised). */
typedef struct {
    int device;        /* 1: a device backend; 0: private peak RSS */
    int held;          /* a device whose per-process cost is known: hfl_held_bytes */
    int known;         /* 0: no figure to measure from */
    uint64_t before;   /* device: free bytes before the trainer existed */
    hfl_mem_window w;  /* host: the window opened before the trainer existed */
} first_measure;

/* The trainer runs the chosen plan in one arena; its creation and first step
 * are measured so the client learns its overhead. */
static int ensure_trainer(client_state *s, first_measure *m, char *err) {
    if (s->trainer) return 0;
    const hfl_backend *be = s->be ? s->be : hfl_backend_cpu();
    int batch = s->plan->cfg.batch;
    uint64_t total;
    m->device = !be->host_memory && be->mem_info(&m->before, &total) == 0;
    m->held = m->device && s->cost.known;
    /* after a re-plan the process holds what the old trainer freed (pages
     * the allocator kept), so a new step's growth would read low: its
     * footprint is the verified prediction, and nothing is learned */
    m->known = !s->replanned && (m->device || hfl_mem_window_begin(&m->w, NULL) == 0);
    char rss_err[HFL_ERR_LEN];
    if (be->host_memory && hfl_mem_read(&s->rss_base, NULL, rss_err) != 0) s->rss_base = 0;
    s->xbuf = hfl_malloc(sizeof(float) * (size_t)batch * (size_t)s->data.dim);
    s->ybuf = hfl_malloc(sizeof(int32_t) * (size_t)batch * hfl_dataset_label_rows(&s->data));
    s->trainer = hfl_trainer_create_plan(&s->spec, be, s->plan, err);
    s->trainer_batch = batch;
    return s->trainer ? 0 : -1;
}

/* After the first step: its growth, or 0 when unknown. */
static uint64_t first_growth(client_state *s, const first_measure *m) {
    uint64_t now = 0, total;
    if (!m->known) return 0;
    if (m->device) s->be->sync();
    if (m->held && hfl_held_bytes(s->be, &s->cost, &now, &s->process_bytes) == 0) return now;
    if (m->device) {
        if (s->be->mem_info(&now, &total) != 0) return 0;
        uint64_t growth = m->before > now ? m->before - now : 0;
        /* Free memory is device-wide: less than our own arena means another
         * process freed memory meanwhile, and the figure is not ours to learn. */
        return growth >= hfl_trainer_device_bytes(s->trainer) ? growth : 0;
    }
    return hfl_mem_window_growth(&m->w, &now, NULL) == 0 ? now : 0;
}

/* Memory growth during an epoch (see the header). */
typedef struct {
    int device;
    int held;         /* a device whose per-process cost is known: hfl_held_bytes */
    int known;        /* CPU: 0 when the window could not be opened */
    hfl_mem_window w; /* CPU: opened when the epoch began */
} epoch_meter;

static void epoch_begin(const client_state *s, epoch_meter *e) {
    e->device = !s->be->host_memory;
    e->held = e->device && s->cost.known;
    e->known = !e->device && hfl_mem_window_begin(&e->w, NULL) == 0;
}

static uint64_t epoch_growth(const client_state *s, const epoch_meter *e) {
    uint64_t held;
    if (e->held && hfl_held_bytes(s->be, &s->cost, &held, NULL) == 0)
        return held > s->budget.footprint ? held - s->budget.footprint : 0;
    if (e->device) {
        uint64_t peak = hfl_budget_peak_bytes(), arena = hfl_trainer_device_bytes(s->trainer);
        return peak > arena ? peak - arena : 0;
    }
    uint64_t growth = 0;
    return e->known && hfl_mem_window_growth(&e->w, &growth, NULL) == 0 ? growth : 0;
}

/* Gathers samples order[start .. start+b) into the batch buffers and stages them. */
static void stage_batch(client_state *s, const int *order, int start, int b) {
    int dim = s->data.dim;
    size_t r = (size_t)hfl_dataset_label_rows(&s->data);
    for (int i = 0; i < b; i++) {
        int k = order[start + i];
        memcpy(s->xbuf + (size_t)i * dim, s->data.x + (size_t)k * dim, sizeof(float) * (size_t)dim);
        memcpy(s->ybuf + (size_t)i * r, s->data.y + (size_t)k * r, sizeof(int32_t) * r);
    }
    hfl_trainer_stage(s->trainer, s->xbuf, s->ybuf, b);
}

/* An epoch's micro-batches in order: optimizer steps of `step` rows (the
 * last one shorter), each staged as micro-batches of at most `micro` rows. */
typedef struct {
    int n, step, micro;
    int start;  /* the current optimizer step's first row */
    int offset; /* the current micro-batch's first row within that step */
} micro_cursor;

/* The cursor's micro-batch: its first row and size (0 when the epoch is done),
 * and whether it begins or ends its optimizer step. */
static int micro_at(const micro_cursor *c, int *row, int *first, int *last, int *step_rows) {
    if (c->start >= c->n) return 0;
    int rows = c->n - c->start < c->step ? c->n - c->start : c->step;
    int size = rows - c->offset < c->micro ? rows - c->offset : c->micro;
    *row = c->start + c->offset;
    *first = c->offset == 0;
    *last = c->offset + size >= rows;
    *step_rows = rows;
    return size;
}

static void micro_next(micro_cursor *c) {
    int row, first, last, rows, size = micro_at(c, &row, &first, &last, &rows);
    if (!size) return;
    if (last) c->start += rows, c->offset = 0;
    else c->offset += size;
}

uint8_t *client_train_round(client_state *s, const client_task *task, const float *weights,
                            size_t *len, double *loss, double *seconds, char *err) {
    double t0 = hfl_now();
    size_t n_params = s->spec.n_params;
    first_measure m = {0};
    int first = s->trainer == NULL;
    int n = s->data.n;
    if (task->momentum != 0 && s->plan->momentum < 0) {
        hfl_errf(err, "the task asks for momentum %g, but the welcome said none, so no momentum buffer "
                 "was planned", task->momentum);
        return NULL;
    }
    if (task->prox_mu != 0 && s->plan->anchor < 0) {
        hfl_errf(err, "the task asks for FedProx mu %g, but the welcome said none, so no anchor "
                 "was planned", task->prox_mu);
        return NULL;
    }
    if (task->optimizer == HFL_OPTIM_ADAMW && task->momentum != 0) {
        hfl_errf(err, "the task asks for AdamW with SGD's momentum %g", task->momentum);
        return NULL;
    }
    if (task->optimizer == HFL_OPTIM_ADAMW && s->plan->adam_m < 0) {
        hfl_errf(err, "the task asks for AdamW, but the welcome said SGD, so no moments were planned");
        return NULL;
    }
    int *order = hfl_malloc(sizeof(int) * (size_t)n); /* before the footprint is measured */
    if (!s->trainer) s->optimizer_kept = 0; /* a new trainer's optimizer starts from zero */
    if (ensure_trainer(s, &m, err) != 0) {
        free(order);
        return NULL;
    }
    /* Optimizer steps of the run's batch, as micro-batches when the plan
     * accumulates; with --allow-smaller-batch a smaller real batch, with the
     * learning rate scaled by batch / run batch (chooser.h). */
    int micro = s->trainer_batch < task->batch ? s->trainer_batch : task->batch;
    int step = s->chosen.accum > 1 ? task->batch : micro;
    double lr = task->lr * (double)step / (double)task->batch;
    int ahead = hfl_trainer_stage_slots(s->trainer);
    if (weights != s->global) memcpy(s->global, weights, n_params * sizeof(float)); /* a round's are there already */
    hfl_trainer_set_params(s->trainer, weights);
    hfl_trainer_set_prox(s->trainer, (float)task->prox_mu); /* the anchor: this round's global model */
    /* --keep-local-optimizer (DiLoCo's workers): the optimizer goes on from
     * the state the last round this trainer finished left, where it ran the
     * same optimizer; else from zero, as a new PyTorch optimizer would */
    int keep = task->keep_optimizer && s->optimizer_kept == 1 + (int)task->optimizer;
    s->optimizer_from_round = keep ? s->optimizer_kept_round : 0;
    s->optimizer_kept = 0; /* until this round is trained */
    if (!keep) hfl_trainer_reset_optimizer(s->trainer);
    if (task->optimizer == HFL_OPTIM_ADAMW)
        hfl_trainer_set_adamw(s->trainer, (float)task->beta1, (float)task->beta2, (float)HFL_ADAMW_EPS);

    double epoch_loss = 0;
    int breached = 0, steps = 0, staged = 0; /* optimizer steps taken and staged, against task->local_steps */
    double lr_first = 0, lr_last = 0;
    int64_t trained = 0;
    hfl_trainer_take_loss(s->trainer, NULL, NULL, NULL); /* start the sums from zero */
    /* capacity-aware work: epochs (each reshuffled) until local_steps steps are done */
    for (int e = 0; !breached && (task->local_steps > 0 ? steps < task->local_steps : e < task->local_epochs); e++) {
        epoch_meter em = {0};
        if (!first) epoch_begin(s, &em); /* the first epoch's meter starts after step 1 */
        shuffle(order, n, task->seed, task->round, (int)s->stream, e);
        micro_cursor run = {n, step, micro, 0, 0}, fill = run;
        int queued = 0; /* micro-batches staged ahead of the running one */
        int row, begins, ends, step_rows, size;
        while ((size = micro_at(&run, &row, &begins, &ends, &step_rows)) > 0) {
            int frow, fb, fe, frows, fsize;
            while (queued < ahead && (task->local_steps <= 0 || staged < task->local_steps) &&
                   (fsize = micro_at(&fill, &frow, &fb, &fe, &frows)) > 0) {
                stage_batch(s, order, frow, fsize);
                micro_next(&fill);
                queued++;
                staged += fe; /* nothing is staged past the last step */
            }
            hfl_trainer_grads_staged(s->trainer, begins, ends, step_rows);
            queued--;
            micro_next(&run);
            if (!ends) continue;
            double lr_now = hfl_lr_at(&task->lr_schedule, lr, task->lr_step0 + steps); /* lr when constant */
            hfl_trainer_apply(s->trainer, (float)lr_now, (float)task->momentum, (float)task->weight_decay);
            if (steps == 0) lr_first = lr_now;
            lr_last = lr_now;
            steps++;
            trained += step_rows;
            if (first) {
                uint64_t growth = first_growth(s, &m);
                if (growth) {
                    s->budget.measured_peak = growth;
                    s->measured_batch = step_rows < micro ? step_rows : micro; /* its first micro-batch */
                }
                s->budget.footprint = growth ? growth : s->chosen.predicted;
                first = 0;
                if (hfl_mem_budget_check(&s->budget, s->budget.footprint, "in the first step", err) != 0) {
                    breached = 1;
                    break;
                }
                epoch_begin(s, &em);
            }
            if (task->local_steps > 0 && steps >= task->local_steps) break;
        }
        double sum = 0;
        int64_t rows = 0;
        hfl_trainer_take_loss(s->trainer, &sum, &rows, NULL); /* the epoch's one sync */
        epoch_loss = rows ? sum / (double)rows : 0.0;
        if (!breached) {
            char when[48];
            snprintf(when, sizeof when, "in round %d epoch %d", task->round, e + 1);
            breached = hfl_mem_budget_check(&s->budget, s->budget.footprint + epoch_growth(s, &em), when, err) != 0;
        }
    }
    free(order);
    if (breached) return NULL;
    s->optimizer_kept = 1 + (int)task->optimizer, s->optimizer_kept_round = task->round;

    /* The update is the change of the trainable part (model.h: all of it, or
     * LoRA's adapters): nt floats from train_off, so a LoRA client sends its
     * adapters' change alone. */
    size_t off = s->spec.train_off, nt = s->spec.n_trainable;
    /* on the CPU the delta is made in the trainer's own masters, which the
     * next round's set_params writes again: no third model-sized array (a
     * device's are read back into s->local, made at the first round) */
    float *delta = hfl_trainer_trainable_host(s->trainer);
    if (!delta) {
        if (!s->local) s->local = hfl_malloc(nt * sizeof(float));
        hfl_trainer_get_trainable(s->trainer, s->local); /* the frozen rest is not read back */
        delta = s->local;
    }
    for (size_t i = 0; i < nt; i++) delta[i] -= s->global[off + i];
    if (s->attack_scale != 0) /* --attack: a Byzantine client in a simulation */
        for (size_t i = 0; i < nt; i++) delta[i] = (float)(delta[i] * s->attack_scale);
    uint8_t *out;
    if (task->secagg) { /* clipped and rounded by client_secagg_payload, exactly, without a codec */
        out = hfl_malloc(nt * sizeof(float));
        memcpy(out, delta, nt * sizeof(float));
        *len = nt * sizeof(float);
    } else {
        out = hfl_malloc(hfl_codec_max_bytes(task->codec, nt, task->block));
        hfl_rng_key key = {task->seed, (uint32_t)task->round, s->stream, 0};
        *len = hfl_codec_encode(task->codec, delta, s->residual, nt, task->block, &key, 1, out);
    }
    *loss = epoch_loss;
    *seconds = hfl_now() - t0;
    s->trained = trained;
    /* the rates the first and last step took, said in the update only where a schedule moves them */
    s->lr_first = task->lr_schedule.cosine ? lr_first : 0;
    s->lr_last = task->lr_schedule.cosine ? lr_last : 0;
    return out;
}

uint64_t client_peak_rss(void) {
    uint64_t peak = 0;
    return hfl_mem_read(NULL, &peak, NULL) == 0 ? peak : 0;
}
