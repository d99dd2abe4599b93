/* layers.h: the layer kinds behind one ops table, written against the
 * backend interface so they run unchanged on the CPU and on a GPU.
 *
 * Tensors are [batch, features] row-major with a sample's features in CHW
 * order; parameters are the layer's block of the one parameter vector
 * (weight, then bias). The trainer drives every layer only through
 * hfl_layer_ops, so a memory planner can list every buffer of a step from
 * this table: per layer its output activation, the activations its backward
 * keeps (`keeps`), its workspace, and its parameter and gradient blocks.
 *
 * Per kind (files model/dense.c, relu.c, conv.c, pool.c, lm_layers.c):
 *
 *   kind       keeps         fwd ws / bwd ws                in place
 *   dense      input         0 / 0                          -
 *   relu       output        0 / 0                          fwd and bwd
 *   conv2d     input         C*k*k*ho*wo floats (1 sample)  -
 *              (backward redoes im2col of the input; the bwd columns buffer
 *               is reused for dcols once dW is done)
 *   maxpool2d  input         0 / 0                          -
 *              (backward recomputes each window's argmax from the input)
 *   embedding  input (ids)   0 / 0                          -
 *   gpt_block  input, saved  attention + backward temps     bwd
 *              (saved: LN outputs and statistics, qkv, the T x T
 *               probabilities, the MLP's 4C activations: gpt.h)
 *   lm_head    input, saved  0 / dhf (+ 2-byte staging)     -
 *              (saved: LN_f's output and statistics)
 *
 * "fwd in place" means forward may run with out == in (the trainer does so
 * when nothing else needs that input); "bwd in place" that din may alias
 * dout. Backward overwrites din and dparams (never accumulates), and din may
 * be NULL (the first parametric layer: nobody needs it).
 *
 * Storage type (kernels/backend.h, STORAGE TYPES): each pass takes the
 * step's type t, in which the layer's working weights, its input, output
 * and their gradients are stored (fp32, or 2-byte bf16/fp16), and writes
 * fp32 parameter gradients. In a 2-byte type it computes in fp32 and rounds
 * each 2-byte output once; its workspace then includes the fp32 staging the
 * backend's gemm needs, so the planner accounts for it. The keeps, in-place
 * rules and call order are the same in every type. */
#ifndef HFL_LAYERS_H
#define HFL_LAYERS_H

#include <stdint.h>

#include "kernels/backend.h"
#include "model/model.h"

enum {
    HFL_KEEP_INPUT = 1,  /* backward reads the layer's forward input */
    HFL_KEEP_OUTPUT = 2, /* backward reads the layer's forward output */
};

/* How a parameter tensor starts (hfl_model_init_params). */
enum {
    HFL_INIT_FAN_IN = 0, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's nn.Linear, nn.Conv2d */
    HFL_INIT_NORMAL = 1, /* N(0, value^2): GPT-2's 0.02 for projections and embeddings */
    HFL_INIT_CONST = 2,  /* every element = value: layer norm's 1 and 0, GPT-2's zero biases */
};

/* One tensor in a layer's parameter block. */
typedef struct {
    const char *name; /* "weight", "bias", "wte", "attn.c_attn.weight", ... */
    size_t offset;    /* from the start of the layer's block */
    size_t count;
    int fan_in;       /* HFL_INIT_FAN_IN's fan-in */
    int init;         /* HFL_INIT_* (the zero value is HFL_INIT_FAN_IN) */
    float value;      /* HFL_INIT_NORMAL's standard deviation, HFL_INIT_CONST's value */
    int cols;         /* a matrix [count / cols, cols] (a language model's files name and shape
                         it so); 0: a vector, or a dense/conv tensor (safetensors.c shapes those) */
} hfl_param_tensor;

#define HFL_MAX_PARAM_TENSORS 12

typedef struct hfl_layer_ops {
    const char *name; /* the JSON "type": "dense", "relu", ..., "lm_head" */
    /* Sets ly->out_shape from ly->in_shape and the hyperparameters; -1 with err
     * (no layer prefix: the caller adds it) when they are out of range or the
     * window does not fit. */
    int (*infer_shape)(hfl_layer *ly, char *err);
    /* Fills the parameter tensors (weight then bias, contiguous) and returns
     * their number; their counts sum to the layer's n_params. */
    int (*param_tensors)(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]);
    void (*forward)(const hfl_backend *be, hfl_precision t, const hfl_layer *ly, const void *params,
                    const void *in, void *out, void *saved, void *workspace, int batch);
    /* dparams: overwritten, or added to when `accumulate` (gradient
     * accumulation over micro-batches: the sum of each one's gradients). */
    void (*backward)(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                     const void *params, const void *in, const void *out, const void *dout,
                     void *din, float *dparams, const void *saved, void *workspace, int batch,
                     int accumulate);
    /* Workspace bytes of a pass at this batch in type t. */
    size_t (*fwd_workspace_bytes)(const hfl_layer *ly, hfl_precision t, int batch);
    size_t (*bwd_workspace_bytes)(const hfl_layer *ly, hfl_precision t, int batch);
    unsigned keeps;   /* HFL_KEEP_* bits: what backward reads besides dout and params */
    int fwd_in_place; /* forward may run with out == in */
    int bwd_in_place; /* backward may run with din == dout */
    uint64_t (*flops)(const hfl_layer *ly); /* forward FLOPs per sample (multiply-add = 2) */
    /* SAVED ACTIVATIONS (plan/checkpoint.h): bytes a forward writes into
     * `saved` that only this layer's backward reads, in type t; NULL for
     * kinds without (saved is then NULL). */
    size_t (*saved_bytes)(const hfl_layer *ly, hfl_precision t, int batch);
} hfl_layer_ops;

/* The table for a kind, or NULL for an unknown kind. */
const hfl_layer_ops *hfl_layer_ops_for(hfl_layer_kind kind);
/* The table whose name is `name`, or NULL. */
const hfl_layer_ops *hfl_layer_ops_by_name(const char *name);

extern const hfl_layer_ops hfl_dense_ops, hfl_relu_ops, hfl_conv2d_ops, hfl_maxpool2d_ops;
extern const hfl_layer_ops hfl_embed_ops, hfl_gpt_block_ops, hfl_lm_head_ops; /* lm_layers.c */

/* A workspace_bytes entry for kinds that need none. */
size_t hfl_layer_no_workspace(const hfl_layer *ly, hfl_precision t, int batch);

/* Bytes of a region of `bytes` of type t in a layer's saved or workspace
 * buffer: a 2-byte region is rounded up to 64 bytes, so that the fp32
 * statistics or staging after it stay aligned; an fp32 region is packed
 * (what follows it is 4-byte aligned already, and fp32 layouts keep the
 * sizes they always had). */
static inline size_t hfl_region_bytes(hfl_precision t, size_t bytes) {
    return t == HFL_PREC_FP32 ? bytes : (bytes + 63) / 64 * 64;
}

/* Dense as plain functions (the table's entries call these), in type t:
 * y = x w^T + b (the bias added before y's one rounding). */
void hfl_dense_forward(const hfl_backend *be, hfl_precision t, const void *w, const void *b,
                       const void *x, void *y, int n, int in, int out, void *ws);
/* dw = dy^T x and db = colsum(dy) (fp32; overwritten, or added to when
 * `accumulate`); dx = dy w when dx != NULL. */
void hfl_dense_backward(const hfl_backend *be, hfl_precision t, const void *w, const void *x,
                        const void *dy, float *dw, float *db, void *dx, int n, int in, int out,
                        void *ws, int accumulate);
/* The ws of either pass: the backend gemm's staging (0 in fp32). */
size_t hfl_dense_workspace_bytes(hfl_precision t, int n, int in, int out, int backward);

/* The window geometry of a conv2d or maxpool2d layer (from its in_shape). */
hfl_window_geom hfl_layer_geom(const hfl_layer *ly);
/* For window layers: checks kernel and stride in [1, HFL_MODEL_MAX_KERNEL],
 * pad in [0, max_pad] and that the window fits, then sets out_shape to
 * (out_c, ho, wo). -1 with err otherwise. */
int hfl_layer_window_shape(hfl_layer *ly, int out_c, int max_pad, char *err);

#endif
