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
 * nothing inside an epoch waits for the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
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

/* What the first step is measured from: peak RSS on the CPU, free device
 * memory on a device backend (no fork: CUDA is initialised). */
typedef struct {
    int device;        /* 1: free device memory; 0: peak RSS */
    uint64_t before;   /* RSS, or free bytes, before the trainer existed; 0: unknown */
} first_measure;

/* The trainer runs the chosen plan in one arena; its creation and first step
 * are measured so the client learns its overhead. */
static int ensure_trainer(client_state *s, first_measure *m, char *err) {
    if (s->trainer) return 0;
    const hfl_backend *be = s->be ? s->be : hfl_backend_cpu();
    int batch = s->plan->cfg.batch;
    uint64_t total;
    m->device = !be->host_memory && be->mem_info(&m->before, &total) == 0;
    if (!m->device && (hfl_mem_reset_peak(NULL) != 0 || hfl_mem_read(&m->before, NULL, NULL) != 0))
        m->before = 0;
    s->xbuf = hfl_malloc(sizeof(float) * (size_t)batch * (size_t)s->data.dim);
    s->ybuf = hfl_malloc(sizeof(int32_t) * (size_t)batch);
    s->trainer = hfl_trainer_create_plan(&s->spec, be, s->plan, err);
    s->trainer_batch = batch;
    return s->trainer ? 0 : -1;
}

/* After the first step: its growth over m->before, or 0 when unknown. */
static uint64_t first_growth(const client_state *s, const first_measure *m) {
    uint64_t now = 0, total;
    if (!m->before) return 0;
    if (m->device) {
        s->be->sync();
        if (s->be->mem_info(&now, &total) != 0) return 0;
        uint64_t growth = m->before > now ? m->before - now : 0;
        /* Free memory is device-wide: less than our own arena means another
         * process freed memory meanwhile, and the figure is not ours to learn. */
        return growth >= hfl_trainer_device_bytes(s->trainer) ? growth : 0;
    }
    return hfl_mem_read(NULL, &now, NULL) == 0 && now > m->before ? now - m->before : 0;
}

/* Gathers samples order[start .. start+b) into the batch buffers and stages them. */
static void stage_batch(client_state *s, const int *order, int start, int b) {
    int dim = s->data.dim;
    for (int i = 0; i < b; i++) {
        int k = order[start + i];
        memcpy(s->xbuf + (size_t)i * dim, s->data.x + (size_t)k * dim, sizeof(float) * (size_t)dim);
        s->ybuf[i] = s->data.y[k];
    }
    hfl_trainer_stage(s->trainer, s->xbuf, s->ybuf, b);
}

uint8_t *client_train_round(client_state *s, const client_task *task, const float *weights,
                            size_t *len, double *loss, double *seconds, char *err) {
    double t0 = hfl_now();
    size_t n_params = s->spec.n_params;
    first_measure m = {0, 0};
    int first = s->trainer == NULL;
    if (ensure_trainer(s, &m, err) != 0) return NULL;
    /* the run's batch, unless this device had to plan a smaller one */
    int n = s->data.n, batch = task->batch < s->trainer_batch ? task->batch : s->trainer_batch;
    int ahead = hfl_trainer_stage_slots(s->trainer);
    memcpy(s->global, weights, n_params * sizeof(float));
    hfl_trainer_set_params(s->trainer, weights);
    hfl_trainer_reset_optimizer(s->trainer);

    int *order = hfl_malloc(sizeof(int) * (size_t)n);
    double epoch_loss = 0;
    hfl_trainer_take_loss(s->trainer, NULL, NULL, NULL); /* start the sums from zero */
    for (int e = 0; e < task->local_epochs; e++) {
        shuffle(order, n, task->seed, task->round, (int)s->stream, e);
        int staged = 0; /* batches of this epoch handed to the trainer */
        for (int start = 0; start < n; start += batch) {
            int step = start / batch;
            while (staged * batch < n && staged - step < ahead) {
                int at = staged * batch;
                stage_batch(s, order, at, n - at < batch ? n - at : batch);
                staged++;
            }
            hfl_trainer_step_staged(s->trainer, (float)task->lr, (float)task->momentum,
                                    (float)task->weight_decay);
            if (first) {
                uint64_t growth = first_growth(s, &m);
                if (growth) {
                    s->measured_peak = growth;
                    s->measured_batch = n - start < batch ? n - start : batch;
                }
                first = 0;
            }
        }
        double sum = 0;
        int64_t rows = 0;
        hfl_trainer_take_loss(s->trainer, &sum, &rows, NULL); /* the epoch's one sync */
        epoch_loss = rows ? sum / (double)rows : 0.0;
    }
    free(order);

    hfl_trainer_get_params(s->trainer, s->local);
    for (size_t i = 0; i < n_params; i++) s->local[i] -= s->global[i]; /* local now holds the delta */
    uint8_t *out = hfl_malloc(hfl_codec_max_bytes(task->codec, n_params, task->block));
    hfl_rng_key key = {task->seed, (uint32_t)task->round, s->stream, 0};
    *len = hfl_codec_encode(task->codec, s->local, s->residual, n_params, task->block, &key, 1, out);
    *loss = epoch_loss;
    *seconds = hfl_now() - t0;
    return out;
}

uint64_t client_peak_rss(void) {
    uint64_t peak = 0;
    return hfl_mem_read(NULL, &peak, NULL) == 0 ? peak : 0;
}
