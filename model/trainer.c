/* trainer.c: one model's training state on one backend, and the training step.
 *
 * The trainer drives layers only through their ops tables (layers.h). Every
 * buffer a step touches is sized in trainer_layout() from the spec, the
 * tables and max_batch, and carved out of ONE be->alloc (llm.c style); a
 * step allocates nothing. The layout, each piece 64-byte aligned:
 *
 *   params[P] grads[P] momentum[P]
 *   act[0] = input staging [max_batch, in_dim]
 *   act[l+1] = output of layer l [max_batch, out]; a layer whose forward may
 *              run in place (ReLU) writes over its input instead, when
 *              neither it nor the layer before keeps that tensor for
 *              backward (ReLU keeps only its output, so a dense, conv or
 *              pool output feeding a ReLU is overwritten by the ReLU's)
 *   dbuf[2] [max_batch, widest activation]  gradient ping-pong; dlogits is
 *              dbuf[0]; a layer whose backward may run in place (ReLU)
 *              stays on the same buffer
 *   workspace  the largest forward or backward workspace of any layer
 *   labels [max_batch] int32 staging
 *
 * Backward stops at the first layer with parameters, which gets din = NULL
 * (nothing below it needs a gradient), so its largest GEMM is skipped. A
 * later memory planner replaces this fixed layout with one that knows each
 * buffer's lifetime; the per-layer facts it needs all come from the tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/model.h"
#include "util/util.h"

#define TRAINER_ALIGN 64

struct hfl_trainer {
    hfl_model_spec spec;
    const hfl_layer_ops *ops[HFL_MAX_LAYERS];
    const hfl_backend *be;
    int max_batch;
    int first_param; /* index of the first layer with parameters */
    void *arena;
    size_t arena_bytes;
    float *params, *grads, *momentum;
    float *act[HFL_MAX_LAYERS + 1];
    float *dbuf[2];
    void *workspace;
    int32_t *labels;
};

static size_t align_up(size_t x) { return (x + TRAINER_ALIGN - 1) / TRAINER_ALIGN * TRAINER_ALIGN; }

/* Whether layer l's forward writes over its input (see the header comment). */
static int runs_in_place(const hfl_trainer *t, int l) {
    const hfl_layer_ops *ops = t->ops[l];
    if (!ops->fwd_in_place || (ops->keeps & HFL_KEEP_INPUT)) return 0;
    return l == 0 || !(t->ops[l - 1]->keeps & HFL_KEEP_OUTPUT);
}

/* Computes every offset (in bytes from the arena start) and the total. With
 * base == NULL it only sizes; otherwise it also sets the trainer's pointers. */
static size_t trainer_layout(hfl_trainer *t, char *base) {
    const hfl_model_spec *s = &t->spec;
    size_t B = (size_t)t->max_batch, off = 0, pbytes = align_up(s->n_params * sizeof(float));
    size_t widest = (size_t)s->in_dim, ws = 0;
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer *ly = &s->layers[l];
        if ((size_t)ly->out > widest) widest = (size_t)ly->out;
        size_t f = t->ops[l]->fwd_workspace_bytes(ly, t->max_batch);
        size_t b = t->ops[l]->bwd_workspace_bytes(ly, t->max_batch);
        if (f > ws) ws = f;
        if (b > ws) ws = b;
    }

    float **pslots[3] = {&t->params, &t->grads, &t->momentum};
    for (int i = 0; i < 3; i++) {
        if (base) *pslots[i] = (float *)(base + off);
        off += pbytes;
    }
    if (base) t->act[0] = (float *)(base + off);
    off += align_up(B * s->in_dim * sizeof(float));
    for (int l = 0; l < s->n_layers; l++) {
        if (runs_in_place(t, l)) {
            if (base) t->act[l + 1] = t->act[l];
            continue;
        }
        if (base) t->act[l + 1] = (float *)(base + off);
        off += align_up(B * s->layers[l].out * sizeof(float));
    }
    for (int i = 0; i < 2; i++) {
        if (base) t->dbuf[i] = (float *)(base + off);
        off += align_up(B * widest * sizeof(float));
    }
    if (base) t->workspace = ws ? base + off : NULL;
    off += align_up(ws);
    if (base) t->labels = (int32_t *)(base + off);
    off += align_up(B * sizeof(int32_t));
    return off;
}

hfl_trainer *hfl_trainer_create(const hfl_model_spec *spec, const hfl_backend *be, int max_batch) {
    if (!spec || !be || max_batch < 1 || hfl_model_spec_check(spec, NULL) != 0) return NULL;
    hfl_trainer *t = hfl_calloc(1, sizeof *t);
    t->spec = *spec;
    t->be = be;
    t->max_batch = max_batch;
    t->first_param = spec->n_layers - 1; /* the last layer is dense */
    for (int l = spec->n_layers - 1; l >= 0; l--) {
        t->ops[l] = hfl_layer_ops_for(spec->layers[l].kind);
        if (spec->layers[l].n_params) t->first_param = l;
    }
    t->arena_bytes = trainer_layout(t, NULL);
    t->arena = be->alloc(t->arena_bytes);
    trainer_layout(t, t->arena);
    be->fill(t->params, 0.0f, spec->n_params);
    be->fill(t->grads, 0.0f, spec->n_params);
    be->fill(t->momentum, 0.0f, spec->n_params);
    return t;
}

void hfl_trainer_free(hfl_trainer *t) {
    if (!t) return;
    t->be->free(t->arena);
    free(t);
}

size_t hfl_trainer_device_bytes(const hfl_trainer *t) { return t->arena_bytes; }

void hfl_trainer_set_params(hfl_trainer *t, const float *host_params) {
    t->be->upload(t->params, host_params, t->spec.n_params * sizeof(float));
}

void hfl_trainer_get_params(const hfl_trainer *t, float *host_params) {
    t->be->download(host_params, t->params, t->spec.n_params * sizeof(float));
}

void hfl_trainer_get_grads(const hfl_trainer *t, float *host_grads) {
    t->be->download(host_grads, t->grads, t->spec.n_params * sizeof(float));
}

void hfl_trainer_reset_optimizer(hfl_trainer *t) { t->be->fill(t->momentum, 0.0f, t->spec.n_params); }

/* A batch larger than the buffers is a caller bug, not an input error. */
static void check_batch(const hfl_trainer *t, int n) {
    if (n < 1 || n > t->max_batch) {
        fprintf(stderr, "hfl: trainer: batch of %d outside [1, %d]\n", n, t->max_batch);
        abort();
    }
}

/* Uploads n samples and runs the forward pass; returns the logits (act[L]). */
static const float *trainer_forward(hfl_trainer *t, const float *x, const int32_t *y, int n) {
    const hfl_backend *be = t->be;
    const hfl_model_spec *s = &t->spec;
    be->upload(t->act[0], x, (size_t)n * s->in_dim * sizeof(float));
    be->upload(t->labels, y, (size_t)n * sizeof(int32_t));
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer *ly = &s->layers[l];
        t->ops[l]->forward(be, ly, t->params + ly->param_off, t->act[l], t->act[l + 1],
                           t->workspace, n);
    }
    return t->act[s->n_layers];
}

float hfl_trainer_forward_backward(hfl_trainer *t, const float *x, const int32_t *y, int n) {
    check_batch(t, n);
    const hfl_backend *be = t->be;
    const hfl_model_spec *s = &t->spec;
    const float *logits = trainer_forward(t, x, y, n);
    int cur = 0;
    float loss = be->softmax_xent(logits, t->labels, t->dbuf[cur], n, s->n_classes, NULL);

    for (int l = s->n_layers - 1; l >= t->first_param; l--) {
        const hfl_layer *ly = &s->layers[l];
        const hfl_layer_ops *ops = t->ops[l];
        float *dout = t->dbuf[cur], *din = NULL;
        if (l > t->first_param) din = ops->bwd_in_place ? dout : t->dbuf[1 - cur];
        ops->backward(be, ly, t->params + ly->param_off, t->act[l], t->act[l + 1], dout, din,
                      t->grads + ly->param_off, t->workspace, n);
        if (din && din != dout) cur = 1 - cur;
    }
    return loss;
}

float hfl_trainer_step(hfl_trainer *t, const float *x, const int32_t *y, int n, float lr,
                       float momentum, float weight_decay) {
    float loss = hfl_trainer_forward_backward(t, x, y, n);
    /* One update over the whole contiguous vector: weights and biases alike
     * (PyTorch's SGD also decays biases unless told otherwise). */
    t->be->sgd_step(t->params, t->momentum, t->grads, t->spec.n_params, lr, momentum, weight_decay);
    return loss;
}

float hfl_trainer_evaluate(hfl_trainer *t, const float *x, const int32_t *y, int n, float *accuracy) {
    const hfl_model_spec *s = &t->spec;
    double loss_sum = 0.0;
    long correct = 0;
    for (int i = 0; i < n; i += t->max_batch) {
        int b = n - i < t->max_batch ? n - i : t->max_batch;
        const float *logits = trainer_forward(t, x + (size_t)i * s->in_dim, y + i, b);
        int c = 0;
        loss_sum += (double)t->be->softmax_xent(logits, t->labels, NULL, b, s->n_classes, &c) * b;
        correct += c;
    }
    if (accuracy) *accuracy = n > 0 ? (float)((double)correct / n) : 0.0f;
    return n > 0 ? (float)(loss_sum / n) : 0.0f;
}
