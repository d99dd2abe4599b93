/* trainer.c: one model's training state on one backend, and the training step.
 *
 * Every buffer a step touches is sized in trainer_layout() from the spec and
 * max_batch, and carved out of ONE be->alloc (llm.c style); a step allocates
 * nothing. The layout, each piece 64-byte aligned:
 *
 *   params[P] grads[P] momentum[P]
 *   act[0] = input staging [max_batch, in_dim]
 *   act[l+1] = output of layer l [max_batch, out]  (dense layers only: a ReLU
 *              works in place on its input, so act[l+1] == act[l]; its
 *              backward needs only the output, and y > 0 iff x > 0)
 *   dbuf[2] [max_batch, widest layer]  gradient ping-pong; dlogits is dbuf[0]
 *   labels [max_batch] int32 staging
 *
 * Backward runs dense layers as dw = dy^T x, db = colsum dy, dx = dy w, and
 * skips dx for a dense layer with no parameters before it (the first layer),
 * which saves its largest GEMM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/model.h"
#include "util/util.h"

#define TRAINER_ALIGN 64

struct hfl_trainer {
    hfl_model_spec spec;
    const hfl_backend *be;
    int max_batch;
    void *arena;
    size_t arena_bytes;
    float *params, *grads, *momentum;
    float *act[HFL_MAX_LAYERS + 1];
    float *dbuf[2];
    int32_t *labels;
};

static size_t align_up(size_t x) { return (x + TRAINER_ALIGN - 1) / TRAINER_ALIGN * TRAINER_ALIGN; }

/* Checks that the layers chain (each in == previous out, ReLU in == out, the
 * parameter blocks tile the vector) so nothing past here re-checks shapes. */
static int spec_is_valid(const hfl_model_spec *s) {
    if (s->n_layers < 1 || s->n_layers > HFL_MAX_LAYERS || s->in_dim < 1) return 0;
    int width = s->in_dim;
    size_t off = 0;
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer *ly = &s->layers[l];
        if (ly->in != width || ly->out < 1) return 0;
        if (ly->kind == HFL_LAYER_DENSE) {
            if (ly->param_off != off || ly->n_params != (size_t)ly->out * ly->in + ly->out) return 0;
            off += ly->n_params;
        } else if (ly->kind == HFL_LAYER_RELU) {
            if (ly->out != ly->in) return 0;
        } else {
            return 0;
        }
        width = ly->out;
    }
    return width == s->n_classes && off == s->n_params;
}

/* Computes every offset (in bytes from the arena start) and the total. With
 * base == NULL it only sizes; otherwise it also sets the trainer's pointers. */
static size_t trainer_layout(hfl_trainer *t, char *base) {
    const hfl_model_spec *s = &t->spec;
    size_t B = (size_t)t->max_batch, off = 0, pbytes = align_up(s->n_params * sizeof(float));
    int widest = s->in_dim;
    for (int l = 0; l < s->n_layers; l++)
        if (s->layers[l].out > widest) widest = s->layers[l].out;

    float **pslots[3] = {&t->params, &t->grads, &t->momentum};
    for (int i = 0; i < 3; i++) {
        if (base) *pslots[i] = (float *)(base + off);
        off += pbytes;
    }
    if (base) t->act[0] = (float *)(base + off);
    off += align_up(B * s->in_dim * sizeof(float));
    for (int l = 0; l < s->n_layers; l++) {
        if (s->layers[l].kind == HFL_LAYER_RELU) {
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
    if (base) t->labels = (int32_t *)(base + off);
    off += align_up(B * sizeof(int32_t));
    return off;
}

hfl_trainer *hfl_trainer_create(const hfl_model_spec *spec, const hfl_backend *be, int max_batch) {
    if (!spec || !be || max_batch < 1 || !spec_is_valid(spec)) return NULL;
    hfl_trainer *t = hfl_calloc(1, sizeof *t);
    t->spec = *spec;
    t->be = be;
    t->max_batch = max_batch;
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
        if (ly->kind == HFL_LAYER_DENSE) {
            const float *w = t->params + ly->param_off;
            hfl_dense_forward(be, w, w + (size_t)ly->out * ly->in, t->act[l], t->act[l + 1], n,
                              ly->in, ly->out);
        } else {
            be->relu_fwd(t->act[l + 1], t->act[l], (size_t)n * ly->out);
        }
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

    int first_dense = 0;
    while (first_dense < s->n_layers && s->layers[first_dense].kind != HFL_LAYER_DENSE) first_dense++;
    for (int l = s->n_layers - 1; l >= first_dense; l--) {
        const hfl_layer *ly = &s->layers[l];
        float *dy = t->dbuf[cur];
        if (ly->kind == HFL_LAYER_RELU) {
            be->relu_bwd(dy, dy, t->act[l + 1], (size_t)n * ly->out);
            continue;
        }
        const float *w = t->params + ly->param_off;
        float *dw = t->grads + ly->param_off;
        float *dx = l > first_dense ? t->dbuf[1 - cur] : NULL;
        hfl_dense_backward(be, w, t->act[l], dy, dw, dw + (size_t)ly->out * ly->in, dx, n, ly->in,
                           ly->out);
        cur = 1 - cur;
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
