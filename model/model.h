/* model.h: sequential models, their parameters, and one training step.
 *
 * A model is a chain of layers over tensors laid out [batch, features]
 * row-major, where a sample's features are a C x H x W volume in CHW order
 * (so flattening before a dense layer is implicit and matches PyTorch's
 * nn.Flatten). All parameters live in one contiguous float vector, layer
 * after layer, each layer's block being its weight then its bias in
 * PyTorch's layout (dense: w[out, in]; conv2d: w[out_c, in_c, k, k]), so the
 * wire format, the codecs and the aggregator see a single tensor.
 *
 * Built-ins (FedAvg paper, McMahan et al. 2017):
 *   mlp: the 2NN, 784-200-200-10 with ReLU, 199,210 parameters;
 *   cnn: conv 5x5x32 'same' + ReLU, maxpool 2, conv 5x5x64 'same' + ReLU,
 *        maxpool 2, dense 3136->512 + ReLU, dense 512->10, on 1x28x28 input,
 *        1,663,370 parameters.
 * Any other chain can come from a JSON spec (model/spec_json.c). The last
 * layer is dense (its outputs are the logits of a softmax cross-entropy, and
 * its width is the number of classes) or, for a language model, lm_head.
 *
 * LANGUAGE MODELS: embedding, gpt_block x L, lm_head, GPT-2's
 * shape (model/gpt.h). A sample is T token ids (the input, [T], as floats)
 * and T labels (the next token at each position), so label_rows = T and the
 * loss is the mean over n*T rows of V logits. Tensors between the layers are
 * [n, T, C] as shape (T, 1, C); lm_head's output is (T, 1, V). embedding must
 * be layer 0 and lm_head the last layer, and one needs the other: the head's
 * weight is the embedding's wte (tie_off), whose gradient both backward
 * passes add to (the head runs first and writes it).
 *
 * LoRA (model/lora.h; Hu et al. 2021): a language model's spec may carry
 * adapters of rank lora_rank (scale lora_alpha / lora_rank) on every
 * block's four projections. Their blocks (16 r C floats each, block order)
 * follow every layer's block in the parameter vector, from train_off on,
 * and they are all that trains: n_trainable = n_params - train_off floats
 * have gradients, optimizer state and updates; everything before train_off
 * is frozen. Without LoRA, train_off = 0 and n_trainable = n_params.
 *
 * What each layer kind computes and which tensors its backward keeps is in
 * model/layers.h; a trainer runs a memory plan (plan/planner.h: every
 * buffer of a step, its lifetime and its offset, under a checkpoint
 * schedule) inside one allocation of the plan's arena_bytes (llm.c style). */
#ifndef HFL_MODEL_H
#define HFL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#define HFL_MAX_LAYERS 32
#define HFL_MODEL_NAME_LEN 32

typedef enum {
    HFL_LAYER_DENSE = 1,
    HFL_LAYER_RELU = 2,
    HFL_LAYER_CONV2D = 3,
    HFL_LAYER_MAXPOOL2D = 4,
    HFL_LAYER_EMBED = 5,     /* token + position embeddings (model/lm_layers.c) */
    HFL_LAYER_GPT_BLOCK = 6, /* a pre-norm transformer block (model/gpt.h) */
    HFL_LAYER_LM_HEAD = 7,   /* final layer norm and the output projection tied to wte */
} hfl_layer_kind;

/* One sample's tensor: c channels of h x w; a flat vector of n features is (n, 1, 1). */
typedef struct {
    int c, h, w;
} hfl_shape;

/* A layer: its kind and hyperparameters (set by whoever builds the spec),
 * then the shapes and parameter block that hfl_model_spec_finish derives. */
typedef struct {
    hfl_layer_kind kind;
    int units;        /* dense: output features; conv2d: output channels; others 0 */
    int kernel;       /* conv2d, maxpool2d: window size k (k x k) */
    int stride;       /* conv2d, maxpool2d: window step */
    int pad;          /* conv2d: zeros on each side; maxpool2d: 0 */
    hfl_shape in_shape, out_shape;
    int in, out;      /* in_shape and out_shape as feature counts c*h*w */
    size_t param_off; /* offset of this layer's block in the parameter vector */
    size_t n_params;  /* dense: out*in + out; conv2d: units*c*k*k + units; others 0 */
    int vocab;        /* embedding: vocabulary V; lm_head: the embedding's (derived) */
    int heads;        /* gpt_block: attention heads H (units is unused: C is the input's) */
    size_t tie_off;   /* lm_head: offset of the embedding's wte in the parameter vector
                         (derived; the head's weight is that tensor, GPT-2's tying) */
    int lora_rank;    /* gpt_block: its adapters' rank r (the spec's; 0: none) */
    float lora_scale; /* gpt_block: alpha / r */
    size_t lora_off;  /* gpt_block with adapters: their block's offset in the parameter vector */
    int frozen;       /* its own parameters do not train (the spec has LoRA) */
    int chunk;        /* conv2d: samples unfolded per batched GEMM in the plan this layer
                         runs under (the planner sets it from cfg.conv_chunk; 0 = 1); not
                         part of the model: specs, JSON and the wire never carry it */
} hfl_layer;

typedef struct {
    char name[HFL_MODEL_NAME_LEN];
    hfl_shape input;
    int n_layers;
    hfl_layer layers[HFL_MAX_LAYERS];
    int in_dim, n_classes; /* input features c*h*w; the last dense layer's width (or V) */
    int label_rows;        /* labels (rows of n_classes logits) per sample: 1, or T for a
                              language model (one next token per position) */
    size_t n_params;
    int lora_rank;         /* LoRA adapters' rank (0: none) and alpha (LANGUAGE MODELS) */
    float lora_alpha;
    size_t train_off;      /* the trainable part of the parameter vector: [train_off, n_params) */
    size_t n_trainable;
} hfl_model_spec;

/* Fills spec for a built-in model ("mlp" or "cnn"). Returns -1 with err for an unknown name. */
int hfl_model_builtin(const char *name, hfl_model_spec *spec, char *err);

/* Fills spec with a dense/ReLU chain dims[0]-dims[1]-...-dims[n_dims-1] (ReLU
 * after every dense layer but the last), e.g. {784, 200, 200, 10} is `mlp`.
 * Returns -1 with err when n_dims < 2, a width is < 1 or the chain is too long. */
int hfl_model_spec_mlp(hfl_model_spec *spec, const char *name, const int *dims, int n_dims,
                       char *err);

/* Derives every layer's shapes, feature counts and parameter block, and the
 * spec's in_dim, n_classes and n_params, from name, input, n_layers and each
 * layer's kind and hyperparameters. Rejects (-1, err naming the layer index)
 * an empty or too long chain, sizes out of range, a window that does not fit,
 * a last layer that is neither dense with >= 2 outputs nor lm_head (LANGUAGE
 * MODELS above, with their order rules), and models over
 * HFL_MODEL_MAX_PARAMS parameters. */
int hfl_model_spec_finish(hfl_model_spec *spec, char *err);

/* 0 when spec is exactly what hfl_model_spec_finish makes of it (shapes and
 * parameter blocks consistent), else -1 with err. Trainers check this. */
int hfl_model_spec_check(const hfl_model_spec *spec, char *err);

/* Limits a spec must respect (so every size fits an int and a batch's
 * activations a size_t): each of c, h, w and a layer's units at most
 * HFL_MODEL_MAX_DIM, a tensor at most HFL_MODEL_MAX_FEATURES features, a
 * window at most HFL_MODEL_MAX_KERNEL, stride at most the kernel. */
#define HFL_MODEL_MAX_DIM 65536
#define HFL_MODEL_MAX_FEATURES (1 << 24)
#define HFL_MODEL_MAX_KERNEL 32
#define HFL_MODEL_MAX_PARAMS ((size_t)1 << 30)

/* JSON specs (model/spec_json.c), e.g.
 *   {"name": "small-cnn", "input": [1, 28, 28],
 *    "layers": [{"type": "conv2d", "out": 8, "kernel": 5, "pad": 2},
 *               {"type": "relu"}, {"type": "maxpool2d", "size": 2},
 *               {"type": "dense", "out": 10}]}
 * Keys: "name" (1..31 of [A-Za-z0-9._-]), "input" ([C, H, W] or [features]),
 * "layers" (1..HFL_MAX_LAYERS objects). Per layer "type" and:
 *   dense: "out";  relu: nothing;
 *   conv2d: "out", "kernel", optional "pad" (default 0), "stride" (default 1);
 *   maxpool2d: "size", optional "stride" (default size);
 *   embedding: "vocab", "width";  gpt_block: "heads";  lm_head: nothing.
 * A language model may add "lora": {"rank": r, "alpha": a} (a optional,
 * default r; r from 1 to the width): adapters on every block, the rest frozen.
 * e.g. {"name": "gpt-tiny", "input": [64], "layers": [{"type": "embedding",
 * "vocab": 256, "width": 64}, {"type": "gpt_block", "heads": 4},
 * {"type": "gpt_block", "heads": 4}, {"type": "lm_head"}]}.
 * Parsing is strict: keys are case-sensitive, an unknown or repeated key, a
 * non-integer or out-of-range number, trailing text, or anything
 * hfl_model_spec_finish rejects is an error (-1, one line in err naming the
 * layer index). */
int hfl_model_spec_from_json(const char *text, size_t len, hfl_model_spec *spec, char *err);
/* Reads and parses a JSON spec file; err starts with the path. */
int hfl_model_spec_load(const char *path, hfl_model_spec *spec, char *err);
/* A built-in name ("mlp", "cnn") or, failing that, a JSON spec file. */
int hfl_model_resolve(const char *name_or_path, hfl_model_spec *spec, char *err);
/* The spec as compact JSON with every key explicit (parses back to an equal
 * spec). Returns a malloc'ed string the caller frees, or NULL (with err) for
 * a spec that fails hfl_model_spec_check. */
char *hfl_model_spec_to_json(const hfl_model_spec *spec, char *err);

/* Deterministic initialisation of a host parameter vector, PyTorch's default
 * for nn.Linear and nn.Conv2d: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights
 * and biases (fan_in = in for dense, in_c*k*k for conv2d), from philox. */
void hfl_model_init_params(const hfl_model_spec *spec, float *params, uint64_t seed);

/* For a language model (layer 0 an embedding): 0 when every one of the n
 * inputs is a whole token id below the vocabulary and the data was not read
 * as pixels (uint8 x), else -1 with one line. 0 for other models. */
int hfl_model_check_tokens(const hfl_model_spec *spec, const float *x, size_t n, int pixels,
                           char *err);

/* Forward FLOPs of one sample (multiply-add = 2), summed over the layers. */
uint64_t hfl_model_forward_flops(const hfl_model_spec *spec);

/* Training precision (hfl_precision, kernels/backend.h; model/precision.c).
 * fp32 runs everything in fp32. bf16 and fp16 are mixed precision after
 * Micikevicius et al. 2018 ("Mixed Precision Training", ICLR): activations,
 * activation gradients and working weights are stored in the 2-byte type,
 * arithmetic is fp32 with each stored result rounded to nearest even, and the
 * optimizer updates fp32 master weights from fp32 gradients, then rounds
 * them into the working copy. fp16 adds dynamic loss scaling: the loss
 * gradient is multiplied by a scale S (initially HFL_LOSS_SCALE_INIT) so
 * small gradients survive fp16's range, the parameter gradients are divided
 * by S, and a step whose gradients hold an Inf or NaN is skipped (master
 * weights and momentum untouched) and halves S; HFL_LOSS_SCALE_INTERVAL
 * clean steps in a row double it. bf16 has fp32's exponent range and runs
 * with S = 1, never skipping. */
int hfl_precision_parse(const char *name, hfl_precision *prec, char *err); /* "fp32", "bf16", "fp16" */
const char *hfl_precision_name(hfl_precision prec);

/* A client's local optimizer (model/optimizer.c; OPTIMIZERS below): "sgd"
 * (with the run's momentum) or "adamw" (betas and eps default to
 * torch.optim.AdamW's; weight decay is the run's, default 0, not torch's 0.01). */
typedef enum { HFL_OPTIM_SGD, HFL_OPTIM_ADAMW } hfl_optimizer;
#define HFL_ADAMW_BETA1 0.9
#define HFL_ADAMW_BETA2 0.999
#define HFL_ADAMW_EPS 1e-8
int hfl_optimizer_parse(const char *name, hfl_optimizer *opt, char *err);
const char *hfl_optimizer_name(hfl_optimizer opt);

#define HFL_LOSS_SCALE_INIT 65536.0f
#define HFL_LOSS_SCALE_INTERVAL 2000

typedef struct hfl_trainer hfl_trainer;
typedef struct hfl_plan hfl_plan; /* plan/planner.h */

/* A trainer running `plan` (made by hfl_plan_make for this spec; copied):
 * ONE be->try_alloc of plan->arena_bytes, nothing allocated afterwards.
 * Batches of up to plan->cfg.batch samples; step() with a nonzero momentum
 * needs a plan with momentum. The precision is the plan's (cfg.precision).
 * NULL with err when the plan was made for another spec, its activation
 * element size does not match its precision, or the backend refuses. */
hfl_trainer *hfl_trainer_create_plan(const hfl_model_spec *spec, const hfl_backend *be,
                                     const hfl_plan *plan, char *err);
void hfl_trainer_free(hfl_trainer *t);
size_t hfl_trainer_device_bytes(const hfl_trainer *t); /* what the one allocation took */
const hfl_plan *hfl_trainer_plan(const hfl_trainer *t); /* the trainer's copy of its plan */

/* Parameters are fp32 in every precision: set writes the master weights (and
 * rounds the working copy from them), get reads the master weights. With
 * LoRA in bf16/fp16 only the trainable part has masters: the frozen weights
 * are their 2-byte working copy, which get returns widened. Gradients
 * are fp32 and unscaled (d(mean loss)/d(params), whatever the loss scale),
 * n_trainable of them: those of [train_off, n_params) (all, without LoRA). */
void hfl_trainer_set_params(hfl_trainer *t, const float *host_params);
/* (A trainer whose plan borrows its weights, planner.h's BORROWED WEIGHTS,
 * keeps the pointer instead: host_params must then stay alive and unchanged
 * while the trainer evaluates, until the next set_params.) */
void hfl_trainer_get_params(const hfl_trainer *t, float *host_params);
/* The trainable part alone, n_trainable fp32 values (those of [train_off,
 * n_params)): what an update is made of, without reading the frozen rest. */
void hfl_trainer_get_trainable(const hfl_trainer *t, float *host_trainable);
/* On a backend whose memory is the host's, the trainable part's fp32
 * masters where they lie (NULL elsewhere, or before any weights were set):
 * a client makes its round's delta there instead of in a copy. Whatever the
 * caller writes there is what the trainer would train on from, so it must
 * set_params before the next step. */
float *hfl_trainer_trainable_host(hfl_trainer *t);
/* A trainer of a forward-only plan (hfl_trainer_create_eval; plan/planner.h,
 * FORWARD ONLY) only evaluates: get_grads, step_staged, grads_staged and
 * apply print one line and return -1 without touching anything, step and
 * accumulate the same and return NAN; the others return 0. */
int hfl_trainer_get_grads(const hfl_trainer *t, float *host_grads);
/* OPTIMIZERS. SGD (kernels/ops_hd.h: PyTorch's form, momentum and weight
 * decay per step) unless set_adamw turned on AdamW (kernels/lm_hd.h:
 * torch.optim.AdamW, decoupled weight decay, fp32 moments; Loshchilov &
 * Hutter 2019), which needs a plan with cfg.adamw (asked of one without, it
 * prints a line and aborts) and then takes the step's lr and weight decay,
 * with momentum 0. reset_optimizer zeroes momentum, or AdamW's moments and
 * its step count (a round's first step is step 1 of its bias corrections,
 * as a new torch optimizer per round), and goes back to SGD: a round that
 * trains with AdamW calls set_adamw after it. */
void hfl_trainer_reset_optimizer(hfl_trainer *t);
void hfl_trainer_set_adamw(hfl_trainer *t, float beta1, float beta2, float eps);
/* FedProx (kernels/ops_hd.h): with mu != 0 every later optimizer step first
 * adds mu * (w - anchor) to the gradients, the anchor being the fp32 weights
 * as they are now (call it right after set_params with the round's global
 * model); mu = 0 turns it off. A nonzero mu needs a plan with an anchor
 * (cfg.anchor): asked of one without, it prints a line and aborts. */
void hfl_trainer_set_prox(hfl_trainer *t, float mu);

hfl_precision hfl_trainer_precision(const hfl_trainer *t);
/* fp16's dynamic loss scale S (1 in fp32 and bf16); set replaces it (> 0)
 * and restarts the count of clean steps. */
float hfl_trainer_loss_scale(const hfl_trainer *t);
void hfl_trainer_set_loss_scale(hfl_trainer *t, float scale);
/* Steps skipped for non-finite gradients since creation (fp16 only). */
uint64_t hfl_trainer_skipped_steps(const hfl_trainer *t);

/* STAGED STEPS (trainer.c, STAGING AND SCALARS): the form a training loop
 * uses so that nothing in it waits for the device. stage() hands over a host
 * batch (n <= max_batch samples, x: n*in_dim floats; both may be reused as
 * soon as it returns); up to hfl_trainer_stage_slots() batches may be staged
 * ahead of the steps (2 with a prefetch plan: stage batch i+1, then step i).
 * step_staged() runs forward, backward and the optimizer on the oldest staged
 * batch and returns at once; its loss is added to the step scalars, which
 * take_loss() reads (the one sync: once per epoch) and resets: the summed
 * row losses, the rows and the correct rows since the last take. */
int hfl_trainer_stage_slots(const hfl_trainer *t);
void hfl_trainer_stage(hfl_trainer *t, const float *x, const int32_t *y, int n);
int hfl_trainer_step_staged(hfl_trainer *t, float lr, float momentum, float weight_decay);
void hfl_trainer_take_loss(hfl_trainer *t, double *loss_sum, int64_t *rows, int64_t *correct);

/* GRADIENT ACCUMULATION: one optimizer step over total_rows rows, more than
 * the plan's batch, run as micro-batches of at most the plan's batch.
 * grads_staged() runs forward and backward on the oldest staged micro-batch;
 * its gradients (those of its summed loss divided by total_rows) overwrite
 * the gradient buffer when `first`, else are added to it, so after the last
 * micro-batch (`last`: in bf16/fp16 the sum is then unscaled and checked for
 * Inf/NaN) the buffer holds d(mean loss over the total_rows rows)/d(params),
 * a full batch's gradients up to fp32 summation order. apply() then runs the
 * optimizer on them. step_staged() is grads_staged(1, 1, n) and apply(). */
int hfl_trainer_grads_staged(hfl_trainer *t, int first, int last, int total_rows);
int hfl_trainer_apply(hfl_trainer *t, float lr, float momentum, float weight_decay);

/* The synchronous forms below stage their own batch (none may be staged),
 * wait for the result and reset the scalars' loss accumulators.
 * Forward and backward on n host samples (x: n*in_dim floats; n may exceed
 * the plan's batch) as micro-batches of `micro` <= max_batch rows, leaving
 * d(mean loss)/d(params) in the trainer's gradient buffer. Returns the mean loss. */
float hfl_trainer_accumulate(hfl_trainer *t, const float *x, const int32_t *y, int n, int micro);

/* Forward and backward on n <= max_batch rows followed by an SGD step; returns the mean loss. In fp16 a
 * step whose gradients are not finite is skipped (hfl_trainer_skipped_steps
 * counts it) and the loss scale halves; see the precision comment above. */
float hfl_trainer_step(hfl_trainer *t, const float *x, const int32_t *y, int n, float lr,
                       float momentum, float weight_decay);

/* Mean loss (row losses summed in double, divided by n) and accuracy over n
 * samples, in batches of max_batch (forward only, inside the same arena); one
 * sync at the end. A running epoch loss in the scalars is kept. */
float hfl_trainer_evaluate(hfl_trainer *t, const float *x, const int32_t *y, int n, float *accuracy);

/* A data set resident in the backend's memory in t's input format (its
 * precision), for evaluating from it round after round without staging it
 * from the host each time (the coordinator's test set on its GPU). */
typedef struct hfl_resident_set hfl_resident_set;
/* n samples uploaded once; NULL with err when the backend's memory is short. */
hfl_resident_set *hfl_trainer_upload_set(hfl_trainer *t, const float *x, const int32_t *y, int n, char *err);
void hfl_resident_set_free(hfl_trainer *t, hfl_resident_set *r);
/* hfl_trainer_evaluate over a resident set: each batch copied device to
 * device into the input buffers (no host staging, no upload); the same
 * figures, bit for bit. */
float hfl_trainer_evaluate_resident(hfl_trainer *t, const hfl_resident_set *r, float *accuracy);

#endif
