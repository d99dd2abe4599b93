/* model.c: model specs (the built-ins `mlp` and `cnn`, dense/ReLU chains,
 * deriving and checking shapes) and the deterministic parameter
 * initialisation.
 *
 * A spec only describes shapes and where each layer's parameters sit in the
 * one contiguous vector; the layer kinds' tables (layers.h) say how each
 * shape follows from the one before, and the trainer (trainer.c) owns the
 * buffers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/philox.h"
#include "model/layers.h"
#include "model/lora.h"
#include "model/model.h"
#include "util/util.h"

static size_t shape_features(hfl_shape s) { return (size_t)s.c * s.h * s.w; }

int hfl_model_spec_finish(hfl_model_spec *spec, char *err) {
    const char *name = spec->name;
    if (!name[0]) return hfl_errf(err, "model spec: empty name");
    if (spec->n_layers < 1 || spec->n_layers > HFL_MAX_LAYERS)
        return hfl_errf(err, "model '%s': %d layers outside [1, %d]", name, spec->n_layers,
                        HFL_MAX_LAYERS);
    hfl_shape shape = spec->input;
    if (shape.c < 1 || shape.h < 1 || shape.w < 1 || shape.c > HFL_MODEL_MAX_DIM ||
        shape.h > HFL_MODEL_MAX_DIM || shape.w > HFL_MODEL_MAX_DIM ||
        shape_features(shape) > HFL_MODEL_MAX_FEATURES)
        return hfl_errf(err, "model '%s': input %dx%dx%d outside [1, %d] per side or over %d features",
                        name, shape.c, shape.h, shape.w, HFL_MODEL_MAX_DIM, HFL_MODEL_MAX_FEATURES);
    size_t off = 0;
    for (int l = 0; l < spec->n_layers; l++) {
        hfl_layer *ly = &spec->layers[l];
        const hfl_layer_ops *ops = hfl_layer_ops_for(ly->kind);
        if (!ops) return hfl_errf(err, "model '%s': layer %d: unknown kind %d", name, l, (int)ly->kind);
        ly->in_shape = shape;
        ly->in = (int)shape_features(shape);
        if (ly->kind == HFL_LAYER_EMBED && l != 0)
            return hfl_errf(err, "model '%s': layer %d (embedding): an embedding must be layer 0",
                            name, l);
        if (ly->kind == HFL_LAYER_LM_HEAD) {
            if (l != spec->n_layers - 1 || spec->layers[0].kind != HFL_LAYER_EMBED)
                return hfl_errf(err, "model '%s': layer %d (lm_head): lm_head must be the last "
                                "layer of a model whose layer 0 is an embedding", name, l);
            ly->vocab = spec->layers[0].vocab; /* the tied wte [V, C] starts the embedding's block */
            ly->tie_off = spec->layers[0].param_off;
        }
        char why[HFL_ERR_LEN];
        if (ops->infer_shape(ly, why) != 0)
            return hfl_errf(err, "model '%s': layer %d (%s): %s", name, l, ops->name, why);
        shape = ly->out_shape;
        if (shape_features(shape) > HFL_MODEL_MAX_FEATURES)
            return hfl_errf(err, "model '%s': layer %d (%s): output %dx%dx%d exceeds %d features",
                            name, l, ops->name, shape.c, shape.h, shape.w, HFL_MODEL_MAX_FEATURES);
        ly->out = (int)shape_features(shape);
        hfl_param_tensor pt[HFL_MAX_PARAM_TENSORS];
        int nt = ops->param_tensors(ly, pt);
        ly->param_off = off;
        ly->n_params = 0;
        for (int i = 0; i < nt; i++) ly->n_params += pt[i].count;
        off += ly->n_params;
        if (off > HFL_MODEL_MAX_PARAMS)
            return hfl_errf(err, "model '%s': layer %d (%s): more than %zu parameters", name, l,
                            ops->name, HFL_MODEL_MAX_PARAMS);
    }
    const hfl_layer *last = &spec->layers[spec->n_layers - 1];
    int lm = last->kind == HFL_LAYER_LM_HEAD;
    if (spec->layers[0].kind == HFL_LAYER_EMBED && !lm)
        return hfl_errf(err, "model '%s': layer %d (%s): a model starting with an embedding must "
                        "end with lm_head", name, spec->n_layers - 1,
                        hfl_layer_ops_for(last->kind)->name);
    for (int l = 1; lm && l < spec->n_layers - 1; l++) /* the head ties to wte [V, C]: C throughout */
        if (spec->layers[l].kind != HFL_LAYER_GPT_BLOCK)
            return hfl_errf(err, "model '%s': layer %d (%s): between embedding and lm_head only "
                            "gpt_block layers may stand", name, l,
                            hfl_layer_ops_for(spec->layers[l].kind)->name);
    if (last->kind != HFL_LAYER_DENSE && !lm)
        return hfl_errf(err, "model '%s': layer %d (%s): the last layer must be dense (it gives the logits)",
                        name, spec->n_layers - 1, hfl_layer_ops_for(last->kind)->name);
    if (!lm && last->out < 2)
        return hfl_errf(err, "model '%s': layer %d (dense): the last layer needs at least 2 outputs (classes), got %d",
                        name, spec->n_layers - 1, last->out);
    /* LoRA: the adapters' blocks after every layer's, all that trains (model.h) */
    spec->train_off = spec->lora_rank ? off : 0;
    for (int l = 0; l < spec->n_layers; l++) {
        hfl_layer *ly = &spec->layers[l];
        ly->frozen = spec->lora_rank > 0;
        ly->lora_rank = 0, ly->lora_scale = 0.0f, ly->lora_off = 0;
        if (!spec->lora_rank || ly->kind != HFL_LAYER_GPT_BLOCK) continue;
        ly->lora_rank = spec->lora_rank;
        ly->lora_scale = spec->lora_alpha / (float)spec->lora_rank;
        ly->lora_off = off;
        off += hfl_gpt_lora_n_params(ly->in_shape.w, spec->lora_rank);
    }
    if (spec->lora_rank) {
        int C = spec->layers[0].units;
        if (!lm || spec->n_layers < 3)
            return hfl_errf(err, "model '%s': LoRA adapters need a language model with gpt_block layers", name);
        if (spec->lora_rank < 1 || spec->lora_rank > C)
            return hfl_errf(err, "model '%s': LoRA rank %d outside [1, %d] (the width)", name, spec->lora_rank, C);
        if (!(spec->lora_alpha > 0.0f && spec->lora_alpha <= 65536.0f))
            return hfl_errf(err, "model '%s': LoRA alpha %g outside (0, 65536]", name, (double)spec->lora_alpha);
        if (off > HFL_MODEL_MAX_PARAMS)
            return hfl_errf(err, "model '%s': more than %zu parameters with its adapters", name, HFL_MODEL_MAX_PARAMS);
    } else {
        spec->lora_alpha = 0.0f;
    }
    spec->n_trainable = off - spec->train_off;
    spec->in_dim = (int)shape_features(spec->input);
    spec->label_rows = lm ? last->out_shape.c : 1;
    spec->n_classes = lm ? last->vocab : last->out;
    spec->n_params = off;
    return 0;
}

static int same_shape(hfl_shape a, hfl_shape b) { return a.c == b.c && a.h == b.h && a.w == b.w; }

int hfl_model_spec_check(const hfl_model_spec *spec, char *err) {
    hfl_model_spec want = *spec;
    if (hfl_model_spec_finish(&want, err) != 0) return -1;
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *a = &spec->layers[l], *b = &want.layers[l];
        if (!same_shape(a->in_shape, b->in_shape) || !same_shape(a->out_shape, b->out_shape) ||
            a->in != b->in || a->out != b->out || a->param_off != b->param_off ||
            a->n_params != b->n_params || a->vocab != b->vocab || a->tie_off != b->tie_off ||
            a->lora_rank != b->lora_rank || a->lora_scale != b->lora_scale ||
            a->lora_off != b->lora_off || a->frozen != b->frozen)
            return hfl_errf(err, "model '%s': layer %d: shapes or parameter block inconsistent "
                            "with the layers before it", spec->name, l);
    }
    if (spec->in_dim != want.in_dim || spec->n_classes != want.n_classes ||
        spec->n_params != want.n_params || spec->label_rows != want.label_rows ||
        spec->train_off != want.train_off || spec->n_trainable != want.n_trainable)
        return hfl_errf(err, "model '%s': in_dim, n_classes or n_params inconsistent with its layers",
                        spec->name);
    return 0;
}

/* Starts a spec: name and input shape, no layers. */
static void spec_begin(hfl_model_spec *spec, const char *name, hfl_shape input) {
    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "%s", name);
    spec->input = input;
}

/* Appends a layer with its hyperparameters (the caller keeps n_layers in range). */
static void spec_add(hfl_model_spec *spec, hfl_layer_kind kind, int units, int kernel, int stride,
                     int pad) {
    hfl_layer *ly = &spec->layers[spec->n_layers++];
    ly->kind = kind;
    ly->units = units;
    ly->kernel = kernel;
    ly->stride = stride;
    ly->pad = pad;
}

int hfl_model_spec_mlp(hfl_model_spec *spec, const char *name, const int *dims, int n_dims,
                       char *err) {
    if (n_dims < 2) return hfl_errf(err, "model '%s': needs at least 2 widths, got %d", name, n_dims);
    /* n_dims - 1 dense layers and n_dims - 2 ReLUs between them. */
    if (2 * n_dims - 3 > HFL_MAX_LAYERS)
        return hfl_errf(err, "model '%s': %d widths exceed %d layers", name, n_dims, HFL_MAX_LAYERS);
    for (int i = 0; i < n_dims; i++)
        if (dims[i] < 1) return hfl_errf(err, "model '%s': width %d is %d", name, i, dims[i]);
    spec_begin(spec, name, (hfl_shape){dims[0], 1, 1});
    for (int i = 0; i + 1 < n_dims; i++) {
        spec_add(spec, HFL_LAYER_DENSE, dims[i + 1], 0, 0, 0);
        if (i + 2 < n_dims) spec_add(spec, HFL_LAYER_RELU, 0, 0, 0, 0);
    }
    return hfl_model_spec_finish(spec, err);
}

/* The FedAvg paper's CNN for 28x28 grey images (see model.h). */
static int spec_cnn(hfl_model_spec *spec, char *err) {
    spec_begin(spec, "cnn", (hfl_shape){1, 28, 28});
    spec_add(spec, HFL_LAYER_CONV2D, 32, 5, 1, 2);
    spec_add(spec, HFL_LAYER_RELU, 0, 0, 0, 0);
    spec_add(spec, HFL_LAYER_MAXPOOL2D, 0, 2, 2, 0);
    spec_add(spec, HFL_LAYER_CONV2D, 64, 5, 1, 2);
    spec_add(spec, HFL_LAYER_RELU, 0, 0, 0, 0);
    spec_add(spec, HFL_LAYER_MAXPOOL2D, 0, 2, 2, 0);
    spec_add(spec, HFL_LAYER_DENSE, 512, 0, 0, 0);
    spec_add(spec, HFL_LAYER_RELU, 0, 0, 0, 0);
    spec_add(spec, HFL_LAYER_DENSE, 10, 0, 0, 0);
    return hfl_model_spec_finish(spec, err);
}

int hfl_model_builtin(const char *name, hfl_model_spec *spec, char *err) {
    if (name && strcmp(name, "mlp") == 0) {
        static const int mlp_dims[] = {784, 200, 200, 10};
        return hfl_model_spec_mlp(spec, "mlp", mlp_dims, 4, err);
    }
    if (name && strcmp(name, "cnn") == 0) return spec_cnn(spec, err);
    return hfl_errf(err, "unknown model '%s' (known: mlp, cnn)", name ? name : "(null)");
}

/* Element i of layer l's block draws philox counter (seed, HFL_STREAM_INIT,
 * round 0, client 0, tensor l, index i), so any one parameter can be
 * regenerated on its own, on the CPU or on a GPU: a fan-in uniform from one
 * draw; a normal by Box-Muller from the draw at i and the one at index
 * i + 2^32 (a counter no block reaches). */
/* LoRA adapters as PEFT starts them (Hu et al. 2021, section 4.1: A random,
 * B zero, so a new adapter leaves the model as it was): each A from
 * U(-1/sqrt(in), 1/sqrt(in)) (PEFT's kaiming_uniform with a = sqrt(5)), on
 * philox tensor HFL_MAX_LAYERS + l. */
static void init_lora(const hfl_layer *ly, int l, float *params, uint64_t seed) {
    int C = ly->in_shape.w, r = ly->lora_rank;
    size_t off[8], n = hfl_gpt_lora_n_params(C, r);
    hfl_gpt_lora_offsets(C, r, off);
    float *p = params + ly->lora_off;
    for (int t = 0; t < 8; t++) {
        size_t end = t < 7 ? off[t + 1] : n;
        float bound = 1.0f / sqrtf((float)(t == 6 ? 4 * C : C));
        for (size_t i = off[t]; i < end; i++)
            p[i] = t % 2 ? 0.0f
                         : bound * (2.0f * hfl_u01(hfl_philox_u32(seed, HFL_STREAM_INIT, 0, 0,
                                                                  (uint32_t)(HFL_MAX_LAYERS + l), i)) -
                                    1.0f);
    }
}

void hfl_model_init_params(const hfl_model_spec *spec, float *params, uint64_t seed) {
    for (int l = 0; l < spec->n_layers; l++)
        if (spec->layers[l].lora_rank) init_lora(&spec->layers[l], l, params, seed);
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *ly = &spec->layers[l];
        hfl_param_tensor pt[HFL_MAX_PARAM_TENSORS];
        int nt = hfl_layer_ops_for(ly->kind)->param_tensors(ly, pt);
        float *p = params + ly->param_off;
        for (int t = 0; t < nt; t++) {
            float bound = 1.0f / sqrtf((float)pt[t].fan_in);
            for (size_t i = pt[t].offset; i < pt[t].offset + pt[t].count; i++) {
                uint32_t bits = hfl_philox_u32(seed, HFL_STREAM_INIT, 0, 0, (uint32_t)l, i);
                if (pt[t].init == HFL_INIT_CONST) {
                    p[i] = pt[t].value;
                } else if (pt[t].init == HFL_INIT_NORMAL) {
                    uint32_t b2 = hfl_philox_u32(seed, HFL_STREAM_INIT, 0, 0, (uint32_t)l,
                                                 i + ((uint64_t)1 << 32));
                    double r = sqrt(-2.0 * log(hfl_u01_open(bits)));
                    p[i] = (float)(pt[t].value * r * cos(6.283185307179586 * hfl_u01_open(b2)));
                } else {
                    p[i] = bound * (2.0f * hfl_u01(bits) - 1.0f);
                }
            }
        }
    }
}

int hfl_model_check_tokens(const hfl_model_spec *spec, const float *x, size_t n, int pixels,
                           char *err) {
    if (spec->layers[0].kind != HFL_LAYER_EMBED) return 0;
    if (pixels)
        return hfl_errf(err, "model '%s' reads token ids: the data's uint8 x is taken as pixels; "
                        "store the ids as float32 (hfl-data text does)", spec->name);
    for (size_t i = 0; i < n; i++)
        if (!(x[i] >= 0.0f && x[i] < (float)spec->layers[0].vocab && x[i] == (float)(int)x[i]))
            return hfl_errf(err, "model '%s': x[%zu] = %g is not a token id in [0, %d)", spec->name,
                            i, (double)x[i], spec->layers[0].vocab);
    return 0;
}

uint64_t hfl_model_forward_flops(const hfl_model_spec *spec) {
    uint64_t total = 0;
    for (int l = 0; l < spec->n_layers; l++)
        total += hfl_layer_ops_for(spec->layers[l].kind)->flops(&spec->layers[l]);
    return total;
}
