/* planner.c: the buffers and the op timeline of one training step, and their
 * lifetimes (the execution model is in planner.h; placement is in
 * planner_place.c), and the trainers made with a plan of their own
 * (hfl_trainer_create; hfl_trainer_create_eval, which runs a forward-only
 * plan: planner.h, FORWARD ONLY).
 *
 * The plan is built in three passes: group the layers into stages and ask
 * checkpoint.c for the schedule over them; emit the ops, creating each
 * buffer as the op that first writes it is emitted; then derive lifetimes
 * from the ops (first and last op naming a buffer), so a lifetime can never
 * disagree with what the trainer actually reads and writes. */
#include "plan/planner.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "util/util.h"

typedef struct {
    hfl_plan *p;
    const hfl_model_spec *s;
    const hfl_layer_ops *ops[HFL_MAX_LAYERS];
    size_t batch, esize;
    hfl_precision prec;             /* HFL_PREC_FP32: fp32 layer workspaces and weights */
    int first_param;                /* the first layer that trains (backward stops there) */
    int act[HFL_MAX_LAYERS + 1];    /* a_j as written by the forward pass */
    int re[HFL_MAX_LAYERS + 1];     /* a_j as recomputed during backward, or -1 */
    int grad[HFL_MAX_LAYERS + 1];   /* g_j, or -1 */
    int saved[HFL_MAX_LAYERS];      /* layer l's saved activations from the forward pass, or -1 */
    int saved_re[HFL_MAX_LAYERS];   /* the same from its recomputation, or -1 */
    int stage_of[HFL_MAX_LAYERS];   /* 1-based stage of each layer */
} builder;

static const char *const category_names[HFL_BUF_N_CATEGORIES] = {
    "weights", "master_weights", "gradients", "optimizer", "activations", "workspace", "input"};
static const char *const op_names[] = {"load", "forward", "loss", "backward", "optimizer"};

const char *hfl_plan_category_name(hfl_buf_category c) {
    return (unsigned)c < HFL_BUF_N_CATEGORIES ? category_names[c] : "?";
}

const char *hfl_plan_op_name(hfl_plan_op_kind k) {
    return (unsigned)k <= HFL_OP_OPTIMIZER ? op_names[k] : "?";
}

/* Whether layer l joins the stage of layer l - 1 (planner.h, STAGES). */
static int joins_previous(const builder *b, int l) {
    if (l == 0) return 0;
    const hfl_layer_ops *o = b->ops[l];
    const hfl_layer *ly = &b->s->layers[l];
    return o->fwd_in_place && o->bwd_in_place && !(o->keeps & HFL_KEEP_INPUT) &&
           !(b->ops[l - 1]->keeps & HFL_KEEP_OUTPUT) && ly->in == ly->out;
}

static int add_buffer(builder *b, hfl_buf_category cat, int layer, size_t count, size_t elem,
                      const char *fmt, int idx) {
    hfl_plan *p = b->p;
    hfl_plan_buffer *buf = &p->buffers[p->n_buffers];
    memset(buf, 0, sizeof *buf);
    snprintf(buf->name, sizeof buf->name, fmt, idx);
    buf->category = cat;
    buf->layer = layer;
    buf->count = count;
    buf->elem_bytes = elem;
    buf->bytes = count * elem;
    buf->first_op = buf->last_op = -1;
    return p->n_buffers++;
}

static hfl_plan_op *add_op(builder *b, hfl_plan_op_kind kind, int layer) {
    hfl_plan_op *op = &b->p->ops[b->p->n_ops++];
    *op = (hfl_plan_op){kind, layer, 0, -1, -1, -1, -1, -1, -1, -1};
    return op;
}

/* Stage j's output bytes per element count: batch x the last layer's width. */
static size_t stage_count(const builder *b, int j) {
    if (j == 0) return b->batch * (size_t)b->s->in_dim;
    return b->batch * (size_t)b->s->layers[b->p->stage_first[j] - 1].out;
}

/* Layer l's forward or backward workspace at the plan's batch and precision. */
static size_t layer_ws(const builder *b, int l, int backward) {
    const hfl_layer_ops *o = b->ops[l];
    const hfl_layer *ly = &b->s->layers[l];
    int n = (int)b->batch;
    return backward ? o->bwd_workspace_bytes(ly, b->prec, n)
                    : o->fwd_workspace_bytes(ly, b->prec, n);
}

/* Layer l's saved activations at the plan's batch and precision (0: none). */
static size_t layer_saved(const builder *b, int l) {
    const hfl_layer_ops *o = b->ops[l];
    const hfl_layer *ly = &b->s->layers[l];
    return o->saved_bytes ? o->saved_bytes(ly, b->prec, (int)b->batch) : 0;
}

/* A workspace buffer for one op of layer l, or -1 when it needs none. */
static int workspace(builder *b, int l, size_t bytes, const char *fmt) {
    return bytes ? add_buffer(b, HFL_BUF_WORKSPACE, l, bytes, 1, fmt, l) : -1;
}

/* Forward of stage j, from a_{j-1} in `src` into a new buffer (returned). */
static int emit_stage_forward(builder *b, int j, int src, int recompute) {
    const hfl_plan *p = b->p;
    int last = p->stage_first[j] - 1;
    int dst = add_buffer(b, HFL_BUF_ACTIVATIONS, last, stage_count(b, j), b->esize,
                         recompute ? "a%d.re" : "a%d", j);
    for (int l = p->stage_first[j - 1]; l <= last; l++) {
        size_t ws = layer_ws(b, l, 0);
        int w = workspace(b, l, ws, recompute ? "ws.r%d" : "ws.f%d");
        size_t sb = layer_saved(b, l);
        int sv = sb ? add_buffer(b, HFL_BUF_ACTIVATIONS, l, sb, 1, recompute ? "s%d.re" : "s%d", l)
                    : -1;
        if (recompute) b->saved_re[l] = sv;
        else b->saved[l] = sv;
        hfl_plan_op *op = add_op(b, HFL_OP_FORWARD, l);
        op->recompute = recompute;
        op->saved = sv;
        op->in = l == p->stage_first[j - 1] ? src : dst;
        op->out = dst;
        op->ws = w;
    }
    return dst;
}

/* The buffer holding a_j during backward. */
static int act_for_backward(const builder *b, int j) {
    return b->p->ckpt.stored[j] ? b->act[j] : b->re[j];
}

/* Backward of stage j: its layers last to first, down to the first layer
 * with parameters. */
static void emit_stage_backward(builder *b, int j) {
    const hfl_plan *p = b->p;
    int first = p->stage_first[j - 1];
    for (int l = p->stage_first[j] - 1; l >= first && l >= b->first_param; l--) {
        const hfl_layer_ops *o = b->ops[l];
        size_t ws = layer_ws(b, l, 1);
        int w = workspace(b, l, ws, "ws.b%d");
        int din = -1;
        if (l > b->first_param) {
            if (l > first) {
                din = b->grad[j]; /* in place within the stage */
            } else if (o->bwd_in_place && b->s->layers[l].in == b->s->layers[l].out) {
                din = b->grad[j - 1] = b->grad[j];
            } else {
                din = b->grad[j - 1] = add_buffer(b, HFL_BUF_ACTIVATIONS, l - 1,
                                                  stage_count(b, j - 1), b->esize, "g%d", j - 1);
            }
        }
        hfl_plan_op *op = add_op(b, HFL_OP_BACKWARD, l);
        if (o->keeps & HFL_KEEP_INPUT)
            op->in = l > first ? act_for_backward(b, j) : act_for_backward(b, j - 1);
        if (o->keeps & HFL_KEEP_OUTPUT) op->out = act_for_backward(b, j);
        op->saved = p->ckpt.stored[j] ? b->saved[l] : b->saved_re[l];
        op->dout = b->grad[j];
        op->din = din;
        op->ws = w;
    }
}

static void emit_ops(builder *b) {
    hfl_plan *p = b->p;
    int n = p->n_stages;
    hfl_plan_op *op = add_op(b, HFL_OP_LOAD, -1);
    op->out = p->input;
    op->labels = p->labels;
    b->act[0] = p->input;
    for (int j = 1; j <= n; j++) b->act[j] = emit_stage_forward(b, j, b->act[j - 1], 0);

    /* Forward-only: the loss and accuracy without dlogits, and nothing after. */
    if (!p->cfg.forward_only)
        b->grad[n] = add_buffer(b, HFL_BUF_ACTIVATIONS, -1, stage_count(b, n), b->esize, "g%d", n);
    p->loss_op = p->n_ops;
    op = add_op(b, HFL_OP_LOSS, -1);
    op->in = b->act[n];
    op->labels = p->labels;
    op->out = b->grad[n];
    /* bf16/fp16: one logit row and its gradient widened to fp32. */
    if (b->prec != HFL_PREC_FP32)
        op->ws = add_buffer(b, HFL_BUF_WORKSPACE, -1, 2 * (size_t)b->s->n_classes, sizeof(float),
                            "ws.loss", 0);
    if (p->cfg.forward_only) {
        p->optimizer_op = -1;
        return;
    }

    int first_stage = b->stage_of[b->first_param];
    for (int k = p->ckpt.n_segments - 1; k >= 0; k--) {
        int s = p->ckpt.bound[k], e = p->ckpt.bound[k + 1];
        if (e < first_stage) break; /* nothing below needs a backward pass */
        for (int j = s + 1; j < e; j++)
            b->re[j] = emit_stage_forward(b, j, j == s + 1 ? b->act[s] : b->re[j - 1], 1);
        for (int j = e; j > s && j >= first_stage; j--) emit_stage_backward(b, j);
    }
    p->optimizer_op = p->n_ops;
    add_op(b, HFL_OP_OPTIMIZER, -1);
}

static void touch(hfl_plan *p, int buf, int op) {
    if (buf < 0) return;
    hfl_plan_buffer *x = &p->buffers[buf];
    if (x->first_op < 0 || op < x->first_op) x->first_op = op;
    if (op > x->last_op) x->last_op = op;
}

static void set_lifetimes(hfl_plan *p) {
    for (int i = 0; i < p->n_ops; i++) {
        const hfl_plan_op *op = &p->ops[i];
        int bufs[7] = {op->in, op->out, op->dout, op->din, op->ws, op->labels, op->saved};
        for (int k = 0; k < 7; k++) touch(p, bufs[k], i);
    }
    int whole[9] = {p->params, p->master, p->grads, p->momentum, p->anchor, p->adam_m, p->adam_v,
                    p->scalars, p->blas_ws};
    for (int k = 0; k < 9; k++) {
        touch(p, whole[k], 0);
        touch(p, whole[k], p->n_ops - 1);
    }
}

size_t hfl_plan_live_bytes(const hfl_plan *p, int op) {
    size_t sum = 0;
    for (int i = 0; i < p->n_buffers; i++)
        if (p->buffers[i].first_op <= op && op <= p->buffers[i].last_op) sum += p->buffers[i].bytes;
    return sum;
}

/* live_peak, peak_op, the breakdown at it, and chain_peak. */
static void set_peaks(hfl_plan *p) {
    p->live_peak = 0;
    p->peak_op = 0;
    p->chain_peak = 0;
    for (int i = 0; i < p->n_ops; i++) {
        size_t live = hfl_plan_live_bytes(p, i), chain = 0;
        for (int k = 0; k < p->n_buffers; k++) {
            const hfl_plan_buffer *x = &p->buffers[k];
            if (x->first_op <= i && i <= x->last_op &&
                (x->category == HFL_BUF_ACTIVATIONS || k == p->input))
                chain += x->bytes;
        }
        if (live > p->live_peak) p->live_peak = live, p->peak_op = i;
        if (chain > p->chain_peak) p->chain_peak = chain;
    }
    memset(p->breakdown, 0, sizeof p->breakdown);
    for (int k = 0; k < p->n_buffers; k++) {
        const hfl_plan_buffer *x = &p->buffers[k];
        if (x->first_op <= p->peak_op && p->peak_op <= x->last_op) p->breakdown[x->category] += x->bytes;
    }
}

/* Stages, and the checkpoint schedule over them. */
static int plan_schedule(builder *b, char *err) {
    hfl_plan *p = b->p;
    const hfl_model_spec *s = b->s;
    hfl_ckpt_layer chain_layers[HFL_MAX_LAYERS];
    p->n_stages = 0;
    p->stage_first[0] = 0;
    for (int l = 0; l < s->n_layers; l++) {
        const hfl_layer_ops *o = b->ops[l];
        int joins = joins_previous(b, l);
        if (!joins) {
            /* The stage's first layer: it reads a_{j-1} if it keeps its input
             * and writes g_{j-1} (over g_j when it runs in place). */
            hfl_ckpt_layer *c = &chain_layers[p->n_stages++];
            *c = (hfl_ckpt_layer){.cost = 0.0,
                                  .needs_input = (o->keeps & HFL_KEEP_INPUT) != 0,
                                  .grad_in_place = o->bwd_in_place &&
                                                   s->layers[l].in == s->layers[l].out};
        }
        hfl_ckpt_layer *c = &chain_layers[p->n_stages - 1];
        c->cost += (double)o->flops(&s->layers[l]) * (double)b->batch;
        c->out_bytes = b->batch * (size_t)s->layers[l].out * b->esize;
        /* Only the last layer can keep the output (joins_previous); a joined
         * one reads it in its own backward op, before the first layer's. */
        c->needs_output = (o->keeps & HFL_KEEP_OUTPUT) != 0;
        c->output_first = joins;
        c->saved_bytes += layer_saved(b, l);
        p->stage_first[p->n_stages] = l + 1;
        b->stage_of[l] = p->n_stages;
    }
    /* first_param is always a stage's first layer: joined layers are
     * parameter-free in-place ones (ReLU). */
    hfl_ckpt_chain chain = {.n = p->n_stages,
                            .in_bytes = b->batch * (size_t)s->in_dim * b->esize,
                            .layers = chain_layers,
                            .first_backward = b->stage_of[b->first_param]};
    return hfl_ckpt_schedule(&chain, p->cfg.ckpt, p->cfg.ckpt_budget, &p->ckpt, err);
}

int hfl_plan_make(const hfl_model_spec *spec, const hfl_plan_config *cfg, hfl_plan *p, char *err) {
    if (!spec || !cfg || !p) return hfl_errf(err, "planner: NULL argument");
    if (hfl_model_spec_check(spec, err) != 0) return -1;
    if (cfg->batch < 1) return hfl_errf(err, "planner: batch %d must be >= 1", cfg->batch);
    if (cfg->conv_chunk < 0 || cfg->conv_chunk > HFL_CONV_CHUNK_MAX)
        return hfl_errf(err, "planner: conv chunk %d outside [0, %d]", cfg->conv_chunk, HFL_CONV_CHUNK_MAX);
    if ((unsigned)cfg->precision > HFL_PREC_FP16)
        return hfl_errf(err, "planner: unknown precision %d", (int)cfg->precision);
    size_t esize = cfg->act_elem_bytes ? cfg->act_elem_bytes
                                       : cfg->precision == HFL_PREC_FP32 ? sizeof(float) : 2;
    if (esize != 2 && esize != 4)
        return hfl_errf(err, "planner: activation element size %zu (2 or 4 allowed)", esize);
    if (cfg->precision != HFL_PREC_FP32 && esize != 2)
        return hfl_errf(err, "planner: %s activations are 2 bytes an element, not %zu",
                        hfl_precision_name(cfg->precision), esize);
    /* Token ids travel in the input batch's type (kernels/lm.h): integers
     * are exact up to 2^8 in bf16 and 2^11 in fp16. */
    if (cfg->precision != HFL_PREC_FP32 && spec->layers[0].kind == HFL_LAYER_EMBED &&
        spec->layers[0].vocab > (cfg->precision == HFL_PREC_BF16 ? 256 : 2048))
        return hfl_errf(err, "planner: a vocabulary of %d tokens does not fit %s token ids "
                        "(at most %d)", spec->layers[0].vocab, hfl_precision_name(cfg->precision),
                        cfg->precision == HFL_PREC_BF16 ? 256 : 2048);
    if ((unsigned)cfg->ckpt > HFL_CKPT_FULL)
        return hfl_errf(err, "planner: unknown checkpoint kind %d", (int)cfg->ckpt);
    if (cfg->forward_only && (cfg->momentum || cfg->anchor || cfg->adamw))
        return hfl_errf(err, "planner: a forward-only plan keeps no optimizer state "
                             "(momentum, anchor or AdamW asked)");
    if (cfg->borrow_params && (!cfg->forward_only || cfg->precision != HFL_PREC_FP32 || cfg->prefetch))
        return hfl_errf(err, "planner: only a forward-only fp32 plan on host memory borrows its weights");
    if (cfg->forward_only && cfg->ckpt != HFL_CKPT_NONE)
        return hfl_errf(err, "planner: a forward-only plan stores nothing for a backward "
                             "(checkpoint kind %s asked)", hfl_ckpt_name(cfg->ckpt));
    /* Overflow guard: a buffer is a batch of the widest tensor (at most 8
     * bytes an element), a batch of a layer's saved activations or
     * workspace (each at most its one-sample size times the batch, up to
     * alignment), the parameter vector or a per-sample workspace (both under
     * 2^40 bytes), and there are at most HFL_PLAN_MAX_BUFFERS of them. */
    size_t per_sample = 8 * (size_t)spec->in_dim;
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *ly = &spec->layers[l];
        const hfl_layer_ops *o = hfl_layer_ops_for(ly->kind);
        size_t each[4] = {
            8 * (size_t)ly->out, o->saved_bytes ? o->saved_bytes(ly, HFL_PREC_FP32, 1) : 0,
            ly->kind == HFL_LAYER_CONV2D ? 0 : o->bwd_workspace_bytes(ly, HFL_PREC_FP32, 1),
            ly->kind == HFL_LAYER_CONV2D ? 0 : o->bwd_workspace_bytes(ly, HFL_PREC_BF16, 1)};
        for (int k = 0; k < 4; k++)
            if (each[k] > per_sample) per_sample = each[k];
    }
    /* Rows of tokens (batch x T) and of labels index with int in the kernels. */
    if ((size_t)cfg->batch * (size_t)(spec->label_rows > 0 ? spec->label_rows : 1) > INT32_MAX ||
        (spec->layers[0].kind == HFL_LAYER_EMBED &&
         (size_t)cfg->batch * (size_t)spec->layers[0].in_shape.c > INT32_MAX))
        return hfl_errf(err, "planner: batch %d of %d-token samples is too many rows", cfg->batch,
                        spec->layers[0].in_shape.c);
    size_t room = SIZE_MAX / HFL_PLAN_MAX_BUFFERS - ((size_t)1 << 40);
    if ((size_t)cfg->batch > room / per_sample)
        return hfl_errf(err, "planner: batch %d too large to account", cfg->batch);

    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->cfg.act_elem_bytes = esize;
    p->spec = *spec;
    /* A conv layer's workspace (and how it runs) depends on its chunk. */
    for (int l = 0; l < spec->n_layers; l++)
        p->spec.layers[l].chunk = spec->layers[l].kind == HFL_LAYER_CONV2D && cfg->conv_chunk > 1
                                      ? cfg->conv_chunk
                                      : 0;
    spec = &p->spec;
    builder b = {.p = p, .s = spec, .batch = (size_t)cfg->batch, .esize = esize,
                 .prec = cfg->precision};
    /* The first layer that trains: its own parameters, unless frozen, or
     * LoRA's adapters (with LoRA the frozen embedding needs no backward, and
     * the first block none of its input's gradient). */
    b.first_param = spec->n_layers - 1; /* the last layer is dense */
    for (int l = spec->n_layers - 1; l >= 0; l--) {
        const hfl_layer *ly = &spec->layers[l];
        b.ops[l] = hfl_layer_ops_for(ly->kind);
        if ((ly->n_params && !ly->frozen) || ly->lora_rank) b.first_param = l;
    }
    for (int j = 0; j <= HFL_MAX_LAYERS; j++) b.act[j] = b.re[j] = b.grad[j] = -1;
    for (int l = 0; l < HFL_MAX_LAYERS; l++) b.saved[l] = b.saved_re[l] = -1;
    if (plan_schedule(&b, err) != 0) return -1;

    int lp = cfg->precision != HFL_PREC_FP32;
    p->params = cfg->borrow_params ? -1 /* BORROWED WEIGHTS */
                                   : add_buffer(&b, HFL_BUF_WEIGHTS, -1, spec->n_params, lp ? 2 : sizeof(float),
                                                "params", 0);
    /* Master weights, gradients and optimizer state: the trainable part only
     * (all of it without LoRA; the adapters with: frozen weights never change,
     * so their 2-byte working copy is all there is of them). */
    size_t nt = spec->n_trainable;
    p->master = lp ? add_buffer(&b, HFL_BUF_MASTER, -1, nt, sizeof(float), "master", 0) : -1;
    p->grads = cfg->forward_only ? -1 : add_buffer(&b, HFL_BUF_GRADS, -1, nt, sizeof(float), "grads", 0);
    p->momentum = cfg->momentum ? add_buffer(&b, HFL_BUF_OPTIMIZER, -1, nt,
                                             sizeof(float), "momentum", 0)
                                : -1;
    p->anchor = cfg->anchor ? add_buffer(&b, HFL_BUF_OPTIMIZER, -1, nt, sizeof(float),
                                         "anchor", 0)
                            : -1;
    p->adam_m = p->adam_v = -1;
    if (cfg->adamw) {
        p->adam_m = add_buffer(&b, HFL_BUF_OPTIMIZER, -1, nt, sizeof(float), "adam.m", 0);
        p->adam_v = add_buffer(&b, HFL_BUF_OPTIMIZER, -1, nt, sizeof(float), "adam.v", 0);
    }
    p->input = add_buffer(&b, HFL_BUF_INPUT, -1, stage_count(&b, 0), b.esize, "a0", 0);
    size_t label_count = b.batch * (size_t)spec->label_rows;
    p->labels = add_buffer(&b, HFL_BUF_INPUT, -1, label_count, sizeof(int32_t), "labels", 0);
    p->input_next = p->labels_next = p->scalars = p->blas_ws = -1;
    if (cfg->prefetch) {
        p->input_next = add_buffer(&b, HFL_BUF_INPUT, -1, stage_count(&b, 0), b.esize, "a0.next", 0);
        p->labels_next = add_buffer(&b, HFL_BUF_INPUT, -1, label_count, sizeof(int32_t),
                                    "labels.next", 0);
    }
    if (cfg->device_scalars)
        p->scalars = add_buffer(&b, HFL_BUF_WORKSPACE, -1, 1, sizeof(hfl_step_scalars), "scalars", 0);
    if (cfg->blas_ws_bytes)
        p->blas_ws = add_buffer(&b, HFL_BUF_WORKSPACE, -1, cfg->blas_ws_bytes, 1, "ws.blas", 0);
    emit_ops(&b);
    set_lifetimes(p);
    set_peaks(p);
    if (cfg->prefetch) {
        /* Two input slots take turns: while a step reads one, the next batch is
         * copied into the other, so both hold their bytes over the whole step.
         * The checkpoint chain still sees one input batch (chain_peak). */
        size_t chain = p->chain_peak;
        int slots[4] = {p->input, p->labels, p->input_next, p->labels_next};
        for (int k = 0; k < 4; k++) {
            p->buffers[slots[k]].first_op = 0;
            p->buffers[slots[k]].last_op = p->n_ops - 1;
        }
        set_peaks(p);
        p->chain_peak = chain;
    }
    hfl_plan_place(p);
    /* The device takes the arena's memory in whole granules: the plan says so,
     * and the prediction built on arena_bytes counts them (ALLOCATION GRANULARITY). */
    size_t g = cfg->alloc_granularity;
    if (g > 1 && p->arena_bytes % g) {
        if (p->arena_bytes > SIZE_MAX - g) return hfl_errf(err, "planner: arena too large to round");
        p->arena_bytes += g - p->arena_bytes % g;
    }
    return 0;
}

void hfl_plan_config_for_backend(hfl_plan_config *cfg, const hfl_backend *be) {
    cfg->blas_ws_bytes = be->blas_ws_bytes;
    if (!cfg->conv_chunk) cfg->conv_chunk = be->conv_chunk; /* a candidate's own chunk stays */
    cfg->prefetch = !be->host_memory;
    cfg->device_scalars = !be->host_memory;
    cfg->alloc_granularity = be->alloc_granularity;
}

hfl_trainer *hfl_trainer_create(const hfl_model_spec *spec, const hfl_backend *be, int max_batch) {
    if (!spec || !be || max_batch < 1 || hfl_model_spec_check(spec, NULL) != 0) return NULL;
    char err[HFL_ERR_LEN];
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_plan_config cfg = {.batch = max_batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .momentum = 1, .act_elem_bytes = sizeof(float)};
    hfl_plan_config_for_backend(&cfg, be);
    hfl_trainer *t = NULL;
    if (hfl_plan_make(spec, &cfg, plan, err) == 0) t = hfl_trainer_create_plan(spec, be, plan, err);
    free(plan);
    if (!t) {
        fprintf(stderr, "hfl: %s\n", err);
        exit(1);
    }
    return t;
}

hfl_trainer *hfl_trainer_create_eval(const hfl_model_spec *spec, const hfl_backend *be, int max_batch,
                                     size_t max_bytes, char *err) {
    if (!spec || !be) {
        hfl_errf(err, "trainer: NULL spec or backend");
        return NULL;
    }
    if (max_batch < 1) {
        hfl_errf(err, "evaluation batch %d is not positive", max_batch);
        return NULL;
    }
    if (hfl_model_spec_check(spec, err) != 0) return NULL;
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_plan_config cfg = {.ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .act_elem_bytes = sizeof(float)};
    hfl_plan_config_for_backend(&cfg, be);
    /* The arena grows with the batch, so bisect for the largest whose
     * training plan fits (the batch evaluation always ran at: planner.h says
     * why it stays); batch 1 is taken whatever it costs (a model cannot be
     * evaluated in less). The forward-only plan at that batch is what runs. */
    int lo = 1, hi = max_batch;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        cfg.batch = mid;
        if (hfl_plan_make(spec, &cfg, plan, NULL) == 0 && plan->arena_bytes <= max_bytes) lo = mid;
        else hi = mid - 1;
    }
    cfg.batch = lo;
    cfg.forward_only = 1;
    cfg.borrow_params = be->host_memory; /* the CPU reads the caller's weights in place */
    hfl_trainer *t = NULL;
    if (hfl_plan_make(spec, &cfg, plan, err) == 0) t = hfl_trainer_create_plan(spec, be, plan, err);
    free(plan);
    return t;
}
