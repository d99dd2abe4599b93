/* trainer.c: one model's training state on one backend, running a memory
 * plan (model/planner.h) inside one allocation.
 *
 * A trainer makes exactly one be->alloc (plan->arena_bytes) and executes the
 * plan's ops with pointers computed from the buffers' offsets into it; a
 * step, an evaluation or a parameter transfer allocates nothing. The ops
 * carry everything: which buffer each layer reads and writes (in-place ReLU
 * included), when a dropped activation is recomputed, which gradient buffer
 * a backward writes. A buffer a layer does not keep is passed as NULL, so a
 * layer table that under-reports what its backward reads fails loudly
 * rather than reading memory the planner gave to another buffer.
 *
 * hfl_trainer_create(spec, be, max_batch) plans with the `none` schedule and
 * a momentum buffer (callers pass the momentum per step) and exits on an
 * allocation failure, as be->alloc did before plans existed;
 * hfl_trainer_create_plan runs any plan and reports failures in err.
 * Batches of n < plan batch run the same ops on the first n samples of every
 * buffer. Evaluation runs the plan's prefix up to LOSS (forward only), so it
 * fits in the same arena. Only fp32 activations run here (act_elem_bytes 4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/model.h"
#include "model/planner.h"
#include "util/util.h"

struct hfl_trainer {
    hfl_model_spec spec;
    const hfl_layer_ops *ops[HFL_MAX_LAYERS];
    const hfl_backend *be;
    hfl_plan *plan;
    char *arena;
    float *params, *grads, *momentum; /* momentum NULL when the plan has none */
};

/* A buffer's address, or NULL for index -1. */
static void *buf(const hfl_trainer *t, int i) {
    return i < 0 ? NULL : t->arena + t->plan->buffers[i].offset;
}

/* The plan was made for this spec: every layer's kind, sizes and parameter block. */
static int plan_fits_spec(const hfl_plan *p, const hfl_model_spec *s, char *err) {
    const hfl_model_spec *q = &p->spec;
    if (q->n_layers != s->n_layers || q->n_params != s->n_params || q->in_dim != s->in_dim ||
        q->n_classes != s->n_classes)
        return hfl_errf(err, "trainer: the plan was made for model %s, not %s", q->name, s->name);
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer *a = &q->layers[l], *b = &s->layers[l];
        if (a->kind != b->kind || a->in != b->in || a->out != b->out ||
            a->param_off != b->param_off || a->n_params != b->n_params || a->kernel != b->kernel ||
            a->stride != b->stride || a->pad != b->pad || a->in_shape.c != b->in_shape.c ||
            a->in_shape.h != b->in_shape.h)
            return hfl_errf(err, "trainer: the plan's layer %d differs from the model's", l);
    }
    return 0;
}

hfl_trainer *hfl_trainer_create_plan(const hfl_model_spec *spec, const hfl_backend *be,
                                     const hfl_plan *plan, char *err) {
    if (!spec || !be || !plan) {
        hfl_errf(err, "trainer: NULL argument");
        return NULL;
    }
    if (hfl_model_spec_check(spec, err) != 0 || plan_fits_spec(plan, spec, err) != 0) return NULL;
    if (plan->cfg.act_elem_bytes != sizeof(float)) {
        hfl_errf(err, "trainer: only fp32 activations run (the plan has %zu-byte elements)",
                 plan->cfg.act_elem_bytes);
        return NULL;
    }
    void *arena = be->try_alloc(plan->arena_bytes, err);
    if (!arena) return NULL;
    hfl_trainer *t = hfl_calloc(1, sizeof *t);
    t->spec = *spec;
    t->be = be;
    t->plan = hfl_malloc(sizeof *plan);
    memcpy(t->plan, plan, sizeof *plan);
    t->arena = arena;
    for (int l = 0; l < spec->n_layers; l++) t->ops[l] = hfl_layer_ops_for(spec->layers[l].kind);
    t->params = buf(t, plan->params);
    t->grads = buf(t, plan->grads);
    t->momentum = buf(t, plan->momentum);
    be->fill(t->params, 0.0f, spec->n_params);
    be->fill(t->grads, 0.0f, spec->n_params);
    if (t->momentum) be->fill(t->momentum, 0.0f, spec->n_params);
    return t;
}

hfl_trainer *hfl_trainer_create(const hfl_model_spec *spec, const hfl_backend *be, int max_batch) {
    if (!spec || !be || max_batch < 1 || hfl_model_spec_check(spec, NULL) != 0) return NULL;
    char err[HFL_ERR_LEN];
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_plan_config cfg = {.batch = max_batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = 1, .act_elem_bytes = sizeof(float)};
    hfl_trainer *t = NULL;
    if (hfl_plan_make(spec, &cfg, plan, err) == 0) t = hfl_trainer_create_plan(spec, be, plan, err);
    free(plan);
    if (!t) {
        fprintf(stderr, "hfl: %s\n", err);
        exit(1);
    }
    return t;
}

void hfl_trainer_free(hfl_trainer *t) {
    if (!t) return;
    t->be->free(t->arena);
    free(t->plan);
    free(t);
}

size_t hfl_trainer_device_bytes(const hfl_trainer *t) { return t->plan->arena_bytes; }

const hfl_plan *hfl_trainer_plan(const hfl_trainer *t) { return t->plan; }

void hfl_trainer_set_params(hfl_trainer *t, const float *host_params) {
    t->be->upload(t->params, host_params, t->spec.n_params * sizeof(float));
}

void hfl_trainer_get_params(const hfl_trainer *t, float *host_params) {
    t->be->download(host_params, t->params, t->spec.n_params * sizeof(float));
}

void hfl_trainer_get_grads(const hfl_trainer *t, float *host_grads) {
    t->be->download(host_grads, t->grads, t->spec.n_params * sizeof(float));
}

void hfl_trainer_reset_optimizer(hfl_trainer *t) {
    if (t->momentum) t->be->fill(t->momentum, 0.0f, t->spec.n_params);
}

/* A batch larger than the buffers is a caller bug, not an input error. */
static void check_batch(const hfl_trainer *t, int n) {
    if (n < 1 || n > t->plan->cfg.batch) {
        fprintf(stderr, "hfl: trainer: batch of %d outside [1, %d]\n", n, t->plan->cfg.batch);
        abort();
    }
}

/* Runs ops [0, end) on n samples; returns the LOSS op's mean loss (with
 * dlogits only when `train`, and the count of correct rows into *correct). */
static float run_ops(hfl_trainer *t, int end, const float *x, const int32_t *y, int n, int train,
                     int *correct) {
    const hfl_backend *be = t->be;
    const hfl_model_spec *s = &t->spec;
    float loss = 0.0f;
    for (int i = 0; i < end; i++) {
        const hfl_plan_op *op = &t->plan->ops[i];
        const hfl_layer *ly = op->layer >= 0 ? &s->layers[op->layer] : NULL;
        switch (op->kind) {
        case HFL_OP_LOAD:
            be->upload(buf(t, op->out), x, (size_t)n * s->in_dim * sizeof(float));
            be->upload(buf(t, op->labels), y, (size_t)n * sizeof(int32_t));
            break;
        case HFL_OP_FORWARD:
            t->ops[op->layer]->forward(be, ly, t->params + ly->param_off, buf(t, op->in),
                                       buf(t, op->out), buf(t, op->ws), n);
            break;
        case HFL_OP_LOSS:
            loss = be->softmax_xent(buf(t, op->in), buf(t, op->labels),
                                    train ? buf(t, op->out) : NULL, n, s->n_classes, correct);
            break;
        case HFL_OP_BACKWARD:
            t->ops[op->layer]->backward(be, ly, t->params + ly->param_off, buf(t, op->in),
                                        buf(t, op->out), buf(t, op->dout), buf(t, op->din),
                                        t->grads + ly->param_off, buf(t, op->ws), n);
            break;
        case HFL_OP_OPTIMIZER:
            break; /* hfl_trainer_step runs it: it needs the step's hyperparameters */
        }
    }
    return loss;
}

float hfl_trainer_forward_backward(hfl_trainer *t, const float *x, const int32_t *y, int n) {
    check_batch(t, n);
    return run_ops(t, t->plan->optimizer_op, x, y, n, 1, NULL);
}

float hfl_trainer_step(hfl_trainer *t, const float *x, const int32_t *y, int n, float lr,
                       float momentum, float weight_decay) {
    if (momentum != 0.0f && !t->momentum) {
        fprintf(stderr, "hfl: trainer: momentum %g asked of a plan without a momentum buffer\n",
                (double)momentum);
        abort();
    }
    float loss = hfl_trainer_forward_backward(t, x, y, n);
    /* One update over the whole contiguous vector: weights and biases alike
     * (PyTorch's SGD also decays biases unless told otherwise). */
    t->be->sgd_step(t->params, t->momentum, t->grads, t->spec.n_params, lr, momentum, weight_decay);
    return loss;
}

float hfl_trainer_evaluate(hfl_trainer *t, const float *x, const int32_t *y, int n, float *accuracy) {
    const hfl_model_spec *s = &t->spec;
    int cap = t->plan->cfg.batch;
    double loss_sum = 0.0;
    long correct = 0;
    for (int i = 0; i < n; i += cap) {
        int b = n - i < cap ? n - i : cap, c = 0;
        float l = run_ops(t, t->plan->loss_op + 1, x + (size_t)i * s->in_dim, y + i, b, 0, &c);
        loss_sum += (double)l * b;
        correct += c;
    }
    if (accuracy) *accuracy = n > 0 ? (float)((double)correct / n) : 0.0f;
    return n > 0 ? (float)(loss_sum / n) : 0.0f;
}
