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
 * fits in the same arena.
 *
 * PRECISION (model/model.h). fp32 runs the layers' fp32 entries exactly as
 * before mixed precision existed. bf16/fp16 run their *_lp entries on the
 * 2-byte working weights (plan->params) and activations; the input batch is
 * rounded to the 2-byte type straight into the arena when device memory is
 * host memory (the CPU backend), else on the host in a staging buffer made at
 * creation before the upload, so no device memory outside the plan is needed. After
 * backward the fp32 gradients are divided by the loss scale in place and
 * checked for Inf/NaN (one pass, be->unscale_grads), so get_grads always
 * returns unscaled gradients; the OPTIMIZER op then either runs
 * be->sgd_step_lp (master weights, momentum, then the working copy rounded
 * from the masters) or, in fp16 with non-finite gradients, skips the update
 * and halves the scale (Micikevicius et al. 2018; PyTorch's GradScaler with
 * init_scale 2^16, growth_interval 2000, growth/backoff 2 and 1/2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops_hd.h"
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
    /* bf16/fp16: params is NULL, the layers read the 2-byte working weights,
     * the optimizer updates master. */
    hfl_precision prec;
    uint16_t *working;
    float *master;
    uint16_t *xstage;     /* host: one batch of input rounded to prec */
    float loss_scale;     /* fp16's S; 1 otherwise */
    int clean_steps;      /* finite steps since S last changed */
    int grads_finite;     /* from the last backward's unscale pass */
    uint64_t skipped;     /* steps skipped for non-finite gradients */
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
    if (plan->cfg.act_elem_bytes != hfl_precision_bytes(plan->cfg.precision)) {
        hfl_errf(err, "trainer: a %s plan with %zu-byte activations does not run",
                 hfl_precision_name(plan->cfg.precision), plan->cfg.act_elem_bytes);
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
    t->prec = plan->cfg.precision;
    t->loss_scale = t->prec == HFL_PREC_FP16 ? HFL_LOSS_SCALE_INIT : 1.0f;
    t->grads_finite = 1;
    t->grads = buf(t, plan->grads);
    t->momentum = buf(t, plan->momentum);
    if (t->prec == HFL_PREC_FP32) {
        t->params = buf(t, plan->params);
        be->fill(t->params, 0.0f, spec->n_params);
    } else {
        t->working = buf(t, plan->params);
        t->master = buf(t, plan->master);
        /* A device whose memory is not the host's needs a host staging buffer for
         * the rounded input; on the CPU backend the input is rounded straight
         * into the arena, so nothing outside the plan is allocated. */
        if (!be->host_memory) t->xstage = hfl_malloc((size_t)plan->cfg.batch * spec->in_dim * sizeof(uint16_t));
        be->fill(t->master, 0.0f, spec->n_params);
        be->round_lp(t->prec, t->working, t->master, spec->n_params);
    }
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
    free(t->xstage);
    free(t->plan);
    free(t);
}

size_t hfl_trainer_device_bytes(const hfl_trainer *t) { return t->plan->arena_bytes; }

const hfl_plan *hfl_trainer_plan(const hfl_trainer *t) { return t->plan; }

void hfl_trainer_set_params(hfl_trainer *t, const float *host_params) {
    if (t->prec == HFL_PREC_FP32) {
        t->be->upload(t->params, host_params, t->spec.n_params * sizeof(float));
        return;
    }
    t->be->upload(t->master, host_params, t->spec.n_params * sizeof(float));
    t->be->round_lp(t->prec, t->working, t->master, t->spec.n_params);
}

void hfl_trainer_get_params(const hfl_trainer *t, float *host_params) {
    const float *src = t->prec == HFL_PREC_FP32 ? t->params : t->master;
    t->be->download(host_params, src, t->spec.n_params * sizeof(float));
}

void hfl_trainer_get_grads(const hfl_trainer *t, float *host_grads) {
    t->be->download(host_grads, t->grads, t->spec.n_params * sizeof(float));
}

void hfl_trainer_reset_optimizer(hfl_trainer *t) {
    if (t->momentum) t->be->fill(t->momentum, 0.0f, t->spec.n_params);
}

hfl_precision hfl_trainer_precision(const hfl_trainer *t) { return t->prec; }

float hfl_trainer_loss_scale(const hfl_trainer *t) { return t->loss_scale; }

void hfl_trainer_set_loss_scale(hfl_trainer *t, float scale) {
    if (!(scale > 0.0f) || scale - scale != 0.0f) {
        fprintf(stderr, "hfl: trainer: loss scale %g must be finite and > 0\n", (double)scale);
        abort();
    }
    t->loss_scale = scale;
    t->clean_steps = 0;
}

uint64_t hfl_trainer_skipped_steps(const hfl_trainer *t) { return t->skipped; }

/* A batch larger than the buffers is a caller bug, not an input error. */
static void check_batch(const hfl_trainer *t, int n) {
    if (n < 1 || n > t->plan->cfg.batch) {
        fprintf(stderr, "hfl: trainer: batch of %d outside [1, %d]\n", n, t->plan->cfg.batch);
        abort();
    }
}

/* run_ops for bf16/fp16: the same ops on 2-byte storage (header comment). */
static float run_ops_lp(hfl_trainer *t, int end, const float *x, const int32_t *y, int n,
                        int train, int *correct) {
    const hfl_backend *be = t->be;
    const hfl_model_spec *s = &t->spec;
    hfl_precision lp = t->prec;
    float loss = 0.0f;
    for (int i = 0; i < end; i++) {
        const hfl_plan_op *op = &t->plan->ops[i];
        const hfl_layer *ly = op->layer >= 0 ? &s->layers[op->layer] : NULL;
        switch (op->kind) {
        case HFL_OP_LOAD: {
            size_t count = (size_t)n * s->in_dim;
            uint16_t *dst = be->host_memory ? (uint16_t *)buf(t, op->out) : t->xstage;
            for (size_t k = 0; k < count; k++) dst[k] = hfl_op_narrow(lp, x[k]);
            if (!be->host_memory) be->upload(buf(t, op->out), t->xstage, count * sizeof(uint16_t));
            be->upload(buf(t, op->labels), y, (size_t)n * sizeof(int32_t));
            break;
        }
        case HFL_OP_FORWARD:
            t->ops[op->layer]->forward_lp(be, lp, ly, t->working + ly->param_off, buf(t, op->in),
                                          buf(t, op->out), buf(t, op->ws), n);
            break;
        case HFL_OP_LOSS:
            loss = be->softmax_xent_lp(lp, buf(t, op->in), buf(t, op->labels),
                                       train ? buf(t, op->out) : NULL, n, s->n_classes, correct,
                                       t->loss_scale, buf(t, op->ws));
            break;
        case HFL_OP_BACKWARD:
            t->ops[op->layer]->backward_lp(be, lp, ly, t->working + ly->param_off, buf(t, op->in),
                                           buf(t, op->out), buf(t, op->dout), buf(t, op->din),
                                           t->grads + ly->param_off, buf(t, op->ws), n);
            break;
        case HFL_OP_OPTIMIZER:
            break; /* hfl_trainer_step runs it */
        }
    }
    if (train) t->grads_finite = be->unscale_grads(t->grads, s->n_params, 1.0f / t->loss_scale);
    return loss;
}

/* Runs ops [0, end) on n samples; returns the LOSS op's mean loss (with
 * dlogits only when `train`, and the count of correct rows into *correct). */
static float run_ops(hfl_trainer *t, int end, const float *x, const int32_t *y, int n, int train,
                     int *correct) {
    if (t->prec != HFL_PREC_FP32) return run_ops_lp(t, end, x, y, n, train, correct);
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
    if (t->prec == HFL_PREC_FP32) {
        t->be->sgd_step(t->params, t->momentum, t->grads, t->spec.n_params, lr, momentum,
                        weight_decay);
        return loss;
    }
    if (!t->grads_finite && t->prec == HFL_PREC_FP16) {
        t->skipped++;
        t->loss_scale *= 0.5f;
        t->clean_steps = 0;
        return loss;
    }
    t->be->sgd_step_lp(t->prec, t->master, t->momentum, t->grads, t->working, t->spec.n_params,
                       lr, momentum, weight_decay);
    if (t->prec == HFL_PREC_FP16 && ++t->clean_steps == HFL_LOSS_SCALE_INTERVAL) {
        t->loss_scale *= 2.0f;
        t->clean_steps = 0;
    }
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
