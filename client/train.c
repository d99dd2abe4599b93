/* train.c: one round of local training on a client.
 *
 * The data order of each epoch is a Fisher-Yates shuffle drawn from philox
 * keyed by (seed, round, client, epoch), where the client is the hash of its
 * name rather than its arrival-order id, so a client's run is reproducible.
 * The optimizer state starts fresh each round (as Flower's and the FedAvg
 * paper's clients do). The update is local - global, compressed with the
 * client's error-feedback residual. */
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

/* The trainer runs the chosen plan in one arena; its creation and first step
 * are measured (peak RSS growth) so the client learns its overhead. */
static int ensure_trainer(client_state *s, uint64_t *rss0, char *err) {
    if (s->trainer) return 0;
    int batch = s->plan->cfg.batch;
    if (hfl_mem_reset_peak(NULL) != 0 || hfl_mem_read(rss0, NULL, NULL) != 0) *rss0 = 0;
    s->xbuf = hfl_malloc(sizeof(float) * (size_t)batch * (size_t)s->data.dim);
    s->ybuf = hfl_malloc(sizeof(int32_t) * (size_t)batch);
    s->trainer = hfl_trainer_create_plan(&s->spec, hfl_backend_cpu(), s->plan, err);
    s->trainer_batch = batch;
    return s->trainer ? 0 : -1;
}

uint8_t *client_train_round(client_state *s, const client_task *task, const float *weights,
                            size_t *len, double *loss, double *seconds, char *err) {
    double t0 = hfl_now();
    size_t n_params = s->spec.n_params;
    uint64_t rss0 = 0;
    int first = s->trainer == NULL;
    if (ensure_trainer(s, &rss0, err) != 0) return NULL;
    /* the run's batch, unless this device had to plan a smaller one */
    int n = s->data.n, dim = s->data.dim, batch = task->batch < s->trainer_batch ? task->batch : s->trainer_batch;
    memcpy(s->global, weights, n_params * sizeof(float));
    hfl_trainer_set_params(s->trainer, weights);
    hfl_trainer_reset_optimizer(s->trainer);

    int *order = hfl_malloc(sizeof(int) * (size_t)n);
    double epoch_loss = 0;
    for (int e = 0; e < task->local_epochs; e++) {
        shuffle(order, n, task->seed, task->round, (int)s->stream, e);
        double sum = 0;
        for (int start = 0; start < n; start += batch) {
            int b = n - start < batch ? n - start : batch;
            for (int i = 0; i < b; i++) {
                int k = order[start + i];
                memcpy(s->xbuf + (size_t)i * dim, s->data.x + (size_t)k * dim, sizeof(float) * (size_t)dim);
                s->ybuf[i] = s->data.y[k];
            }
            float l = hfl_trainer_step(s->trainer, s->xbuf, s->ybuf, b, (float)task->lr,
                                       (float)task->momentum, (float)task->weight_decay);
            sum += (double)l * b;
            if (first) {
                uint64_t peak;
                if (rss0 && hfl_mem_read(NULL, &peak, NULL) == 0 && peak > rss0) {
                    s->measured_peak = peak - rss0;
                    s->measured_batch = b;
                }
                first = 0;
            }
        }
        epoch_loss = sum / n;
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
