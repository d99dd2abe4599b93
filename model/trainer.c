/* trainer.c: one model's training state on one backend, running a memory
 * plan (plan/planner.h) inside one allocation.
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
 * STAGING AND SCALARS. A batch enters through hfl_trainer_stage: on a
 * backend whose memory is the host's (the CPU) it is written straight into
 * the arena's input slot (rounded to the 2-byte type in bf16/fp16); else it
 * is written into pinned host memory (be->host_alloc, one slot per planned
 * input slot, made at creation) and copied in on the backend's copy stream
 * (be->prefetch), which the step's LOAD op waits for. With a plan of two
 * input slots (cfg.prefetch) batch i+1 is staged while step i runs. What a
 * step computes for the host (summed loss, correct rows, fp16's finite flag,
 * loss scale and skipped count) or keeps between steps (AdamW's step count
 * and bias-correction powers) stays in the step scalars (the plan's
 * "scalars" buffer, or trainer-held host memory on the CPU backend) until
 * the caller asks: hfl_trainer_take_loss once per epoch, or the synchronous
 * wrappers (hfl_trainer_step, accumulate, evaluate), which read them
 * after each call and so return the same loss bits as before scalars. A
 * step itself (grads_staged, apply, step_staged) makes none of the calls
 * that wait for the device (kernels/backend.h, HOST WAITS).
 *
 * PRECISION (model/model.h). The layers and the loss run in the plan's
 * precision, their storage type (kernels/backend.h, STORAGE TYPES), on the
 * working weights (plan->params) and activations of that type. In fp32 the
 * working weights are the fp32 weights that train; in bf16/fp16 those are
 * the fp32 master weights (plan->master), and after backward the fp32
 * gradients are divided by the loss scale in place and checked for
 * Inf/NaN (one pass, be->unscale_grads, which sets the scalars' finite
 * flag), so get_grads always returns unscaled gradients. The OPTIMIZER op
 * updates the masters and rounds the working copy from them; in fp16 it
 * does nothing when the flag is 0, and be->scaler_update halves the scale
 * after a skipped step or doubles it after HFL_LOSS_SCALE_INTERVAL clean
 * ones, all on the device (Micikevicius et al. 2018; PyTorch's GradScaler
 * with init_scale 2^16, growth_interval 2000, growth/backoff 2 and 1/2). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops_hd.h"
#include "model/layers.h"
#include "model/model.h"
#include "plan/planner.h"
#include "util/util.h"

struct hfl_trainer {
    hfl_model_spec spec;
    const hfl_layer_ops *ops[HFL_MAX_LAYERS];
    const hfl_backend *be;
    hfl_plan *plan;
    char *arena;
    void *params;            /* the working weights the layers read, of type prec (plan->params) */
    float *master;           /* the fp32 weights that train: the trainable part of params in fp32,
                        else the master weights (which hold only those) */
    float *grads, *momentum; /* momentum NULL when the plan has none */
    float *anchor;   /* FedProx's anchor; NULL when the plan has none */
    float *adam_m, *adam_v; /* AdamW's moments; NULL when the plan has none */
    int adamw;              /* nonzero once set_adamw turned it on */
    float beta1, beta2, eps; /* (the step count and its powers live in the step scalars) */
    float prox_mu;           /* FedProx's mu; 0: off */
    hfl_precision prec;
    hfl_step_scalars *sc;      /* device: the plan's "scalars", or &host_sc */
    hfl_step_scalars host_sc;  /* the CPU backend's scalars (host memory is its device memory) */
    int n_slots;               /* input slots: 2 with a prefetch plan, else 1 */
    void *pinned[HFL_INPUT_SLOTS]; /* device backends: a batch and its labels, staged */
    int queue_slot[HFL_INPUT_SLOTS], queue_n[HFL_INPUT_SLOTS]; /* staged batches, oldest first */
    int queued, next_slot;
    int slot;                  /* the input slot the running ops read */
};

/* 2-byte: the working weights from host fp32 values (zeros for NULL). The
 * frozen head [0, train_off) has no masters, so it is staged through the
 * master buffer a chunk of n_trainable floats at a time and rounded; then
 * the trainable tail's masters are set and rounded. */
static void lp_set_params(hfl_trainer *t, const float *host) {
    const hfl_backend *be = t->be;
    size_t off = t->spec.train_off, cap = t->spec.n_trainable;
    for (size_t i = 0; i < off + cap;) { /* frozen chunks, then the tail (the masters keep it) */
        size_t n = i < off && off - i < cap ? off - i : cap;
        if (host) be->upload(t->master, host + i, n * sizeof(float));
        else be->fill(t->master, 0.0f, n);
        be->convert(t->prec, hfl_at(t->prec, t->params, (ptrdiff_t)i), t->master, n);
        i += n;
    }
}

/* Where layer ly's backward writes its parameter gradients: its block of
 * the gradient buffer, its adapters' with LoRA, NULL for a frozen layer. */
static float *layer_grads(const hfl_trainer *t, const hfl_layer *ly) {
    if (!ly->frozen) return t->grads + ly->param_off;
    return ly->lora_rank ? t->grads + (ly->lora_off - t->spec.train_off) : NULL;
}

/* A buffer's address, or NULL for index -1. The input batch and labels are
 * those of the slot the running step reads. */
static void *buf(const hfl_trainer *t, int i) {
    if (i < 0) return NULL;
    if (t->slot == 1 && i == t->plan->input) i = t->plan->input_next;
    else if (t->slot == 1 && i == t->plan->labels) i = t->plan->labels_next;
    return t->arena + t->plan->buffers[i].offset;
}

/* Bytes of one staged batch's inputs (element size of the precision) and
 * where its labels start in a pinned slot (64-byte aligned). */
static size_t input_bytes(const hfl_trainer *t, int n) {
    return (size_t)n * t->spec.in_dim * hfl_precision_bytes(t->prec);
}
static size_t label_bytes(const hfl_trainer *t, int n) {
    return (size_t)n * t->spec.label_rows * sizeof(int32_t);
}
static size_t labels_off(const hfl_trainer *t) {
    return (input_bytes(t, t->plan->cfg.batch) + 63) / 64 * 64;
}

static void scalars_read(const hfl_trainer *t, hfl_step_scalars *out) {
    t->be->download(out, t->sc, sizeof *out);
}
static void scalars_write(hfl_trainer *t, const hfl_step_scalars *in) {
    t->be->upload(t->sc, in, sizeof *in);
}
/* Zeroes the loss accumulators (loss_sum, correct, rows), keeping the rest. */
static void scalars_reset_loss(hfl_trainer *t) {
    static const hfl_step_scalars zero;
    t->be->upload(t->sc, &zero, offsetof(hfl_step_scalars, skipped));
}
/* AdamW's step count 0 and its powers 1, keeping the rest (the block's tail). */
static const hfl_step_scalars adamw_start = {.adam_beta1_pow = 1.0, .adam_beta2_pow = 1.0};
static void scalars_reset_adamw(hfl_trainer *t) {
    size_t at = offsetof(hfl_step_scalars, adam_steps);
    t->be->upload((char *)t->sc + at, (const char *)&adamw_start + at, sizeof adamw_start - at);
}

/* The plan was made for this spec: every layer's kind, sizes and parameter block. */
static int plan_fits_spec(const hfl_plan *p, const hfl_model_spec *s, char *err) {
    const hfl_model_spec *q = &p->spec;
    if (q->n_layers != s->n_layers || q->n_params != s->n_params || q->in_dim != s->in_dim ||
        q->n_classes != s->n_classes || q->label_rows != s->label_rows ||
        q->train_off != s->train_off || q->n_trainable != s->n_trainable)
        return hfl_errf(err, "trainer: the plan was made for model %s, not %s", q->name, s->name);
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer *a = &q->layers[l], *b = &s->layers[l];
        if (a->kind != b->kind || a->in != b->in || a->out != b->out ||
            a->param_off != b->param_off || a->n_params != b->n_params || a->kernel != b->kernel ||
            a->stride != b->stride || a->pad != b->pad || a->in_shape.c != b->in_shape.c ||
            a->in_shape.h != b->in_shape.h || a->vocab != b->vocab || a->heads != b->heads ||
            a->tie_off != b->tie_off || a->lora_rank != b->lora_rank ||
            a->lora_scale != b->lora_scale || a->lora_off != b->lora_off || a->frozen != b->frozen)
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
    if (!be->host_memory && plan->scalars < 0) {
        hfl_errf(err, "trainer: the %s backend needs a plan with device scalars "
                      "(hfl_plan_config_for_backend)", be->name);
        return NULL;
    }
    if (!be->host_memory && plan->params < 0) {
        hfl_errf(err, "trainer: the %s backend cannot read borrowed host weights (planner.h, BORROWED WEIGHTS)",
                 be->name);
        return NULL;
    }
    void *arena = be->try_alloc(plan->arena_bytes, err);
    if (!arena) return NULL;
    hfl_trainer *t = hfl_calloc(1, sizeof *t);
    t->spec = *spec;
    for (int l = 0; l < spec->n_layers; l++) t->spec.layers[l].chunk = plan->spec.layers[l].chunk;
    t->be = be;
    t->plan = hfl_malloc(sizeof *plan);
    memcpy(t->plan, plan, sizeof *plan);
    t->arena = arena;
    for (int l = 0; l < spec->n_layers; l++) t->ops[l] = hfl_layer_ops_for(spec->layers[l].kind);
    t->prec = plan->cfg.precision;
    t->sc = plan->scalars >= 0 ? buf(t, plan->scalars) : &t->host_sc;
    hfl_step_scalars sc0 = adamw_start;
    sc0.loss_scale = t->prec == HFL_PREC_FP16 ? HFL_LOSS_SCALE_INIT : 1.0f;
    sc0.finite = 1;
    scalars_write(t, &sc0);
    t->n_slots = plan->input_next >= 0 ? 2 : 1;
    if (!be->host_memory)
        for (int k = 0; k < t->n_slots; k++) {
            size_t bytes = labels_off(t) + label_bytes(t, plan->cfg.batch);
            if (!(t->pinned[k] = be->host_alloc(bytes))) {
                hfl_errf(err, "trainer: the %s backend cannot pin %zu bytes of host memory for "
                              "input staging", be->name, bytes);
                hfl_trainer_free(t);
                return NULL;
            }
        }
    t->grads = buf(t, plan->grads);
    t->momentum = buf(t, plan->momentum);
    t->anchor = buf(t, plan->anchor);
    t->adam_m = buf(t, plan->adam_m);
    t->adam_v = buf(t, plan->adam_v);
    t->params = buf(t, plan->params); /* NULL: borrowed, until set_params */
    if (!t->params && t->prec == HFL_PREC_FP32) {
        t->master = NULL;
    } else if (t->prec == HFL_PREC_FP32) {
        t->master = (float *)t->params + spec->train_off;
        be->fill(t->params, 0.0f, spec->n_params);
    } else {
        t->master = buf(t, plan->master);
        lp_set_params(t, NULL);
    }
    if (t->grads) be->fill(t->grads, 0.0f, spec->n_trainable); /* NULL: a forward-only plan */
    if (t->momentum) be->fill(t->momentum, 0.0f, spec->n_trainable);
    /* Written now, not first when a round sets it: a measured step (what a
     * client verifies its plan with) then pays for the anchor's pages. */
    if (t->anchor) be->fill(t->anchor, 0.0f, spec->n_trainable);
    if (t->adam_m) hfl_trainer_reset_optimizer(t);
    return t;
}

void hfl_trainer_free(hfl_trainer *t) {
    if (!t) return;
    t->be->sync();
    if (t->plan->blas_ws >= 0) t->be->set_blas_workspace(NULL, 0);
    t->be->free(t->arena);
    for (int k = 0; k < t->n_slots; k++)
        if (t->pinned[k]) t->be->host_free(t->pinned[k]);
    free(t->plan);
    free(t);
}

size_t hfl_trainer_device_bytes(const hfl_trainer *t) { return t->plan->arena_bytes; }

const hfl_plan *hfl_trainer_plan(const hfl_trainer *t) { return t->plan; }

void hfl_trainer_set_params(hfl_trainer *t, const float *host_params) {
    if (t->plan->params < 0) { /* BORROWED WEIGHTS (planner.h): read where they lie */
        t->params = (void *)(uintptr_t)host_params;
        t->master = (float *)t->params + t->spec.train_off;
        return;
    }
    if (t->prec == HFL_PREC_FP32) {
        t->be->upload(t->params, host_params, t->spec.n_params * sizeof(float));
        return;
    }
    lp_set_params(t, host_params);
}

void hfl_trainer_get_trainable(const hfl_trainer *t, float *host_trainable) {
    if (!t->master) { /* borrowing, and never given weights */
        fprintf(stderr, "hfl: trainer: weights asked before any were set\n");
        return;
    }
    t->be->download(host_trainable, t->master, t->spec.n_trainable * sizeof(float));
}

float *hfl_trainer_trainable_host(hfl_trainer *t) { return t->be->host_memory ? t->master : NULL; }

void hfl_trainer_get_params(const hfl_trainer *t, float *host_params) {
    if (!t->params) { /* borrowing, and never given weights */
        fprintf(stderr, "hfl: trainer: weights asked before any were set\n");
        return;
    }
    if (t->prec == HFL_PREC_FP32) {
        t->be->download(host_params, t->params, t->spec.n_params * sizeof(float));
        return;
    }
    size_t off = t->spec.train_off;
    t->be->download(host_params + off, t->master, t->spec.n_trainable * sizeof(float));
    if (!off) return;
    /* The frozen head, widened from its 2-byte working copy: downloaded into
     * the back half of its own host range, then widened front to back (value
     * i's 4 bytes end before 2-byte value i + 1 starts), so nothing is
     * allocated outside the plan. */
    char *h = (char *)(host_params + off) - off * sizeof(uint16_t);
    t->be->download(h, t->params, off * sizeof(uint16_t));
    for (size_t i = 0; i < off; i++) { /* memcpy: the bytes change type under the loop */
        uint16_t v;
        memcpy(&v, h + i * sizeof v, sizeof v);
        host_params[i] = hfl_op_widen(t->prec, v);
    }
}

/* A forward-only plan (planner.h, FORWARD ONLY) has no gradients: a call
 * that needs them prints one line and is refused (-1). */
static int refuse_forward_only(const hfl_trainer *t, const char *what) {
    if (t->grads) return 0;
    fprintf(stderr, "hfl: trainer: %s asked of a forward-only (evaluation) trainer\n", what);
    return -1;
}

int hfl_trainer_get_grads(const hfl_trainer *t, float *host_grads) {
    if (refuse_forward_only(t, "gradients")) return -1;
    t->be->download(host_grads, t->grads, t->spec.n_trainable * sizeof(float));
    return 0;
}

void hfl_trainer_reset_optimizer(hfl_trainer *t) {
    if (t->momentum) t->be->fill(t->momentum, 0.0f, t->spec.n_trainable);
    t->adamw = 0; /* SGD until set_adamw says otherwise */
    if (t->adam_m) {
        t->be->fill(t->adam_m, 0.0f, t->spec.n_trainable);
        t->be->fill(t->adam_v, 0.0f, t->spec.n_trainable);
        scalars_reset_adamw(t);
    }
}

void hfl_trainer_set_adamw(hfl_trainer *t, float beta1, float beta2, float eps) {
    if (!t->adam_m) {
        fprintf(stderr, "hfl: trainer: AdamW asked of a plan without its moment buffers\n");
        abort();
    }
    t->adamw = 1, t->beta1 = beta1, t->beta2 = beta2, t->eps = eps;
}

void hfl_trainer_set_prox(hfl_trainer *t, float mu) {
    if (mu != 0.0f && !t->anchor) {
        fprintf(stderr, "hfl: trainer: FedProx mu %g asked of a plan without an anchor buffer\n",
                (double)mu);
        abort();
    }
    t->prox_mu = mu;
    if (mu != 0.0f) t->be->copy(t->anchor, t->master, t->spec.n_trainable * sizeof(float));
}

hfl_precision hfl_trainer_precision(const hfl_trainer *t) { return t->prec; }

float hfl_trainer_loss_scale(const hfl_trainer *t) {
    hfl_step_scalars sc;
    scalars_read(t, &sc);
    return sc.loss_scale;
}

void hfl_trainer_set_loss_scale(hfl_trainer *t, float scale) {
    if (!(scale > 0.0f) || scale - scale != 0.0f) {
        fprintf(stderr, "hfl: trainer: loss scale %g must be finite and > 0\n", (double)scale);
        abort();
    }
    hfl_step_scalars sc;
    scalars_read(t, &sc);
    sc.loss_scale = scale;
    sc.clean_steps = 0;
    scalars_write(t, &sc);
}

uint64_t hfl_trainer_skipped_steps(const hfl_trainer *t) {
    hfl_step_scalars sc;
    scalars_read(t, &sc);
    return (uint64_t)sc.skipped;
}

/* A batch larger than the buffers is a caller bug, not an input error. */
static void check_batch(const hfl_trainer *t, int n) {
    if (n < 1 || n > t->plan->cfg.batch) {
        fprintf(stderr, "hfl: trainer: batch of %d outside [1, %d]\n", n, t->plan->cfg.batch);
        abort();
    }
}

int hfl_trainer_stage_slots(const hfl_trainer *t) { return t->n_slots; }

/* x (n * in_dim fp32) as the precision's elements at dst. */
static void stage_input(const hfl_trainer *t, void *dst, const float *x, int n) {
    size_t count = (size_t)n * t->spec.in_dim;
    for (size_t k = 0; k < count; k++) hfl_st(t->prec, dst, k, x[k]);
}

void hfl_trainer_stage(hfl_trainer *t, const float *x, const int32_t *y, int n) {
    check_batch(t, n);
    if (t->queued == t->n_slots) {
        fprintf(stderr, "hfl: trainer: %d batches staged already\n", t->queued);
        abort();
    }
    const hfl_backend *be = t->be;
    int slot = t->next_slot;
    int saved = t->slot;
    t->slot = slot;
    void *din = buf(t, t->plan->input), *dlab = buf(t, t->plan->labels);
    t->slot = saved;
    if (be->host_memory) {
        /* The CPU runs ops at once, so the slot is free: write it directly. */
        stage_input(t, din, x, n);
        memcpy(dlab, y, label_bytes(t, n));
    } else {
        char *pin = t->pinned[slot];
        be->stage_wait(slot); /* the slot's previous copy has left the pinned memory */
        stage_input(t, pin, x, n);
        memcpy(pin + labels_off(t), y, label_bytes(t, n));
        be->prefetch(din, pin, input_bytes(t, n), slot);
        be->prefetch(dlab, pin + labels_off(t), label_bytes(t, n), slot);
    }
    t->queue_slot[t->queued] = slot;
    t->queue_n[t->queued] = n;
    t->queued++;
    t->next_slot = (slot + 1) % t->n_slots;
}

/* Takes the oldest staged batch: sets t->slot and returns its size. */
static int take_staged(hfl_trainer *t) {
    if (t->queued == 0) {
        fprintf(stderr, "hfl: trainer: step without a staged batch\n");
        abort();
    }
    int n = t->queue_n[0];
    t->slot = t->queue_slot[0];
    for (int k = 1; k < t->queued; k++) {
        t->queue_slot[k - 1] = t->queue_slot[k];
        t->queue_n[k - 1] = t->queue_n[k];
    }
    t->queued--;
    return n;
}

/* Runs ops [0, end) on the n samples staged in t->slot (dlogits only when
 * `train`, as the gradient of the summed loss over mean_rows; parameter
 * gradients added to the buffer when `accumulate`), adding the LOSS op's
 * loss to the step scalars. */
static void run_ops(hfl_trainer *t, int end, int n, int train, int mean_rows, int accumulate) {
    const hfl_backend *be = t->be;
    const hfl_model_spec *s = &t->spec;
    hfl_precision prec = t->prec;
    if (t->plan->blas_ws >= 0)
        be->set_blas_workspace(buf(t, t->plan->blas_ws), t->plan->buffers[t->plan->blas_ws].bytes);
    for (int i = 0; i < end; i++) {
        const hfl_plan_op *op = &t->plan->ops[i];
        const hfl_layer *ly = op->layer >= 0 ? &s->layers[op->layer] : NULL;
        const void *w = ly ? hfl_at(prec, t->params, (ptrdiff_t)ly->param_off) : NULL;
        switch (op->kind) {
        case HFL_OP_LOAD:
            be->await_prefetch(t->slot);
            break;
        case HFL_OP_FORWARD:
            t->ops[op->layer]->forward(be, prec, ly, w, buf(t, op->in), buf(t, op->out),
                                       buf(t, op->saved), buf(t, op->ws), n);
            break;
        case HFL_OP_LOSS:
            be->softmax_xent(prec, buf(t, op->in), buf(t, op->labels),
                             train ? buf(t, op->out) : NULL, n * s->label_rows, s->n_classes,
                             mean_rows * s->label_rows, t->sc, buf(t, op->ws));
            break;
        case HFL_OP_BACKWARD:
            t->ops[op->layer]->backward(be, prec, ly, w, buf(t, op->in), buf(t, op->out),
                                        buf(t, op->dout), buf(t, op->din), layer_grads(t, ly),
                                        buf(t, op->saved), buf(t, op->ws), n, accumulate);
            break;
        case HFL_OP_OPTIMIZER:
            break; /* run_step runs it: it needs the step's hyperparameters */
        }
    }
}

/* The OPTIMIZER op: one update of the fp32 masters over the trainable part
 * of the vector (model.h: all of it, or LoRA's adapters), weights and
 * biases alike (PyTorch's SGD also decays biases unless told otherwise),
 * after FedProx's proximal gradient when it is on, and the working weights
 * the layers read rounded from them (in fp32 the masters are those). fp16
 * skips a step whose gradients are not finite, then its loss scaler moves
 * (the header comment).
 *
 * AdamW (model.h, OPTIMIZERS): the step number in its bias corrections
 * counts the steps taken since the last reset_optimizer. fp16 skips a step
 * without touching the moments, as GradScaler skips optimizer.step(), so
 * its skipped steps are not counted. Only the device knows whether a step
 * was skipped, so the count and the powers of beta1 and beta2 live in the
 * step scalars and adamw_step counts and reads them there (kernels/ops_hd.h),
 * in every precision: no step waits for the host to learn its number. The
 * powers take set_adamw's betas one step at a time, so betas changed
 * without a reset_optimizer would mix (the client sets them right after
 * each reset). */
int hfl_trainer_apply(hfl_trainer *t, float lr, float momentum, float weight_decay) {
    if (refuse_forward_only(t, "an optimizer step")) return -1;
    if (momentum != 0.0f && (!t->momentum || t->adamw)) {
        fprintf(stderr, "hfl: trainer: momentum %g asked of %s\n", (double)momentum,
                !t->momentum ? "a plan without a momentum buffer" : "AdamW");
        abort();
    }
    const hfl_backend *be = t->be;
    size_t n = t->spec.n_trainable;
    void *working = hfl_at(t->prec, t->params, (ptrdiff_t)t->spec.train_off);
    const hfl_step_scalars *skip = t->prec == HFL_PREC_FP16 ? t->sc : NULL;
    if (t->prox_mu != 0.0f) be->prox_grad(t->grads, t->master, t->anchor, n, t->prox_mu);
    if (t->adamw) {
        hfl_adamw_args a = {.lr = lr,
                            .beta1 = t->beta1,
                            .beta2 = t->beta2,
                            .eps = t->eps,
                            .wd = weight_decay,
                            .sc = t->sc};
        be->adamw_step(t->prec, t->master, t->adam_m, t->adam_v, t->grads, working, n, a, skip);
    } else {
        be->sgd_step(t->prec, t->master, t->momentum, t->grads, working, n, lr, momentum,
                     weight_decay, skip);
    }
    if (skip) be->scaler_update(t->sc, HFL_LOSS_SCALE_INTERVAL);
    return 0;
}

/* In bf16/fp16 the gradients are scaled by the loss scale until the step's
 * last micro-batch: one pass divides them and checks them for Inf/NaN. */
static void finish_grads(hfl_trainer *t) {
    if (t->prec != HFL_PREC_FP32) t->be->unscale_grads(t->grads, t->spec.n_trainable, t->sc);
}

int hfl_trainer_grads_staged(hfl_trainer *t, int first, int last, int total_rows) {
    if (refuse_forward_only(t, "a backward pass")) return -1;
    int n = take_staged(t);
    run_ops(t, t->plan->optimizer_op, n, 1, total_rows, !first);
    t->be->release_input(t->slot);
    if (last) finish_grads(t);
    return 0;
}

int hfl_trainer_step_staged(hfl_trainer *t, float lr, float momentum, float weight_decay) {
    if (refuse_forward_only(t, "a training step")) return -1;
    int n = t->queued ? t->queue_n[0] : 0;
    hfl_trainer_grads_staged(t, 1, 1, n);
    return hfl_trainer_apply(t, lr, momentum, weight_decay);
}

void hfl_trainer_take_loss(hfl_trainer *t, double *loss_sum, int64_t *rows, int64_t *correct) {
    hfl_step_scalars sc;
    scalars_read(t, &sc);
    if (loss_sum) *loss_sum = sc.loss_sum;
    if (rows) *rows = sc.rows;
    if (correct) *correct = sc.correct;
    scalars_reset_loss(t);
}

/* The synchronous forms stage one batch themselves (nothing may be staged
 * already) and read the batch's loss back: the loss accumulators start from
 * zero, so loss_sum is exactly the batch's double total. */
static void sync_stage(hfl_trainer *t, const float *x, const int32_t *y, int n) {
    if (t->queued) {
        fprintf(stderr, "hfl: trainer: synchronous call with %d batches staged\n", t->queued);
        abort();
    }
    scalars_reset_loss(t);
    hfl_trainer_stage(t, x, y, n);
}

static float sync_mean_loss(hfl_trainer *t, int n) {
    double sum = 0.0;
    hfl_trainer_take_loss(t, &sum, NULL, NULL);
    return (float)(sum / ((double)n * t->spec.label_rows));
}

float hfl_trainer_accumulate(hfl_trainer *t, const float *x, const int32_t *y, int n, int micro) {
    if (refuse_forward_only(t, "gradient accumulation")) return NAN;
    const hfl_model_spec *s = &t->spec;
    for (int i = 0; i < n; i += micro) {
        int m = n - i < micro ? n - i : micro;
        if (i == 0)
            sync_stage(t, x, y, m);
        else
            hfl_trainer_stage(t, x + (size_t)i * s->in_dim, y + (size_t)i * s->label_rows, m);
        hfl_trainer_grads_staged(t, i == 0, i + m >= n, n);
    }
    return sync_mean_loss(t, n);
}

float hfl_trainer_step(hfl_trainer *t, const float *x, const int32_t *y, int n, float lr,
                       float momentum, float weight_decay) {
    if (refuse_forward_only(t, "a training step")) return NAN;
    sync_stage(t, x, y, n);
    hfl_trainer_step_staged(t, lr, momentum, weight_decay);
    return sync_mean_loss(t, n);
}

struct hfl_resident_set {
    void *x;    /* n samples in the trainer's input format */
    int32_t *y; /* their labels */
    int n;
};

hfl_resident_set *hfl_trainer_upload_set(hfl_trainer *t, const float *x, const int32_t *y, int n, char *err) {
    hfl_resident_set *r = hfl_calloc(1, sizeof *r);
    size_t xb = input_bytes(t, n), yb = label_bytes(t, n);
    void *staged = hfl_malloc(xb ? xb : 1);
    r->n = n;
    if (!(r->x = t->be->try_alloc(xb ? xb : 1, err)) || !(r->y = t->be->try_alloc(yb ? yb : 1, err))) {
        hfl_resident_set_free(t, r);
        free(staged);
        return NULL;
    }
    stage_input(t, staged, x, n);
    t->be->upload(r->x, staged, xb);
    t->be->upload(r->y, y, yb);
    free(staged);
    return r;
}

void hfl_resident_set_free(hfl_trainer *t, hfl_resident_set *r) {
    if (!r) return;
    t->be->free(r->x);
    t->be->free(r->y);
    free(r);
}

/* evaluate's loop: batches staged from the host (x, y) or copied from a
 * resident set (r, device to device into the next slot's buffers). */
static float evaluate_from(hfl_trainer *t, const float *x, const int32_t *y, const hfl_resident_set *r, int n,
                           float *accuracy) {
    const hfl_model_spec *s = &t->spec;
    int cap = t->plan->cfg.batch;
    if (!t->params) { /* a borrowing trainer that was given no weights */
        fprintf(stderr, "hfl: trainer: evaluation asked before any weights were set\n");
        return NAN;
    }
    hfl_step_scalars before;
    scalars_read(t, &before); /* an epoch's running loss survives an evaluation */
    scalars_reset_loss(t);
    for (int i = 0; i < n; i += cap) {
        int b = n - i < cap ? n - i : cap;
        if (t->queued) {
            fprintf(stderr, "hfl: trainer: evaluation with %d batches staged\n", t->queued);
            abort();
        }
        if (r) {
            t->slot = t->next_slot;
            t->be->copy(buf(t, t->plan->input), (const char *)r->x + input_bytes(t, i), input_bytes(t, b));
            t->be->copy(buf(t, t->plan->labels), r->y + (size_t)i * s->label_rows, label_bytes(t, b));
        } else {
            hfl_trainer_stage(t, x + (size_t)i * s->in_dim, y + (size_t)i * s->label_rows, b);
            take_staged(t);
        }
        run_ops(t, t->plan->loss_op + 1, b, 0, b, 0);
        t->be->release_input(t->slot);
    }
    hfl_step_scalars after;
    scalars_read(t, &after);
    double loss_sum = after.loss_sum;
    int64_t correct = after.correct;
    after.loss_sum = before.loss_sum, after.correct = before.correct, after.rows = before.rows;
    scalars_write(t, &after);
    double rows = (double)n * s->label_rows;
    if (accuracy) *accuracy = n > 0 ? (float)((double)correct / rows) : 0.0f;
    return n > 0 ? (float)(loss_sum / rows) : 0.0f;
}

float hfl_trainer_evaluate(hfl_trainer *t, const float *x, const int32_t *y, int n, float *accuracy) {
    return evaluate_from(t, x, y, NULL, n, accuracy);
}

float hfl_trainer_evaluate_resident(hfl_trainer *t, const hfl_resident_set *r, float *accuracy) {
    return evaluate_from(t, NULL, NULL, r, r->n, accuracy);
}
