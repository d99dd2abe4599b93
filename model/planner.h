/* planner.h: the memory plan of one training step, laid out in one arena.
 *
 * DESIGN.md, "Plan memory, don't discover it": for a model spec, a batch, a
 * checkpoint schedule (model/checkpoint.h) and an optimizer, the planner
 * lists every buffer one training step touches, gives each a lifetime over a
 * timeline of ops, and places them in one arena so that buffers alive at the
 * same op never share a byte. The trainer (model/trainer.c) makes one
 * allocation of arena_bytes and runs plan->ops with offsets into it; the
 * planner's arena_bytes is therefore what the step's buffers take.
 *
 * STAGES. A layer that runs in place (forward and backward both may alias,
 * it keeps no input, the layer before keeps no output: ReLU after dense,
 * conv or pool) writes over its predecessor's output, so that output never
 * exists on its own and cannot be a checkpoint. The planner merges such
 * layers into the stage of the layer before them; the checkpoint chain
 * (hfl_ckpt_chain) has one entry per stage: cost = the stage's forward FLOPs
 * times the batch, out_bytes = its output at this batch and element size,
 * needs_output = its last layer keeps its output. Layer 0 never runs in
 * place (the input batch must survive for backward and recomputation), so a
 * model starting with ReLU gets a separate buffer for it.
 *
 * THE OPS, in order (what the trainer executes):
 *   LOAD       input batch and labels from the host;
 *   FORWARD    layer by layer; stage j's output a_j is a stored checkpoint or
 *              an internal activation (freed once the next stage has read it);
 *   LOSS       softmax cross-entropy of the logits, writing dlogits (g_n);
 *   then, segments (s, e] of the schedule last to first:
 *   FORWARD    (recompute = 1) stages s+1..e-1 from a_s into separate
 *              recompute instances of their outputs;
 *   BACKWARD   stages e..s+1, each stage's layers last to first; a stage's
 *              first layer writes g_{j-1}, its in-place layers work on g_j;
 *              backward stops at the first layer with parameters (its input
 *              gradient is not computed), and segments wholly below it run
 *              neither recomputation nor backward;
 *   OPTIMIZER  SGD over the whole parameter vector (with momentum if planned).
 * A buffer's lifetime is [first op that touches it, last op that touches it],
 * where a backward op touches its layer's input only when the layer keeps its
 * input and its output only when it keeps its output (the trainer passes NULL
 * for the others). Parameters, parameter gradients and momentum persist
 * across steps and live over the whole timeline. Workspaces live for their
 * one op. Evaluation runs the ops up to LOSS (without dlogits), a prefix of
 * the same timeline, so it fits in the same arena.
 *
 * AGAINST checkpoint.h's ACCOUNTING. chain_peak, the largest sum over ops of
 * the live activation, activation-gradient and input-batch (a_0) bytes, is
 * at most ckpt.peak, and below it by exactly what this execution frees
 * earlier than the model there: (1) a stored checkpoint dies after its last
 * read instead of at the end of backward (the logits right after LOSS);
 * (2) a stage's output read only by its in-place ReLU's backward dies before
 * the stage's first layer allocates g_{j-1} (checkpoint.h holds a_i for the
 * whole step i); (3) no gradient is made for stages below the first layer
 * with parameters, nor for the input; (4) a stage whose first layer keeps no
 * input does not hold it during backward. Labels (int32 per sample) are
 * input-batch bytes outside the chain.
 *
 * With cfg.hold_checkpoints the stored activations (a_0 included) instead
 * live to the last backward op, checkpoint.h's execution model itself: then
 * chain_peak differs from ckpt.peak only by (2) to (4). That costs memory
 * under every schedule; its use is that checkpoint.c's DP minimises exactly
 * that model, so the schedules rank as it says (full < sqrt < none). Freeing
 * after the last read, the default, needs less under every schedule but the
 * DP's choice may then save nothing: for cnn the early activations live to
 * the end of backward anyway, and `full` peaks where `none` does.
 *
 * PLACEMENT (planner_place.c): first fit at 64-byte-aligned offsets clear of
 * every placed buffer whose lifetime overlaps, in two orders (by size, by
 * first op), keeping the smaller arena.
 * arena_bytes is the end of the highest buffer; it is at least live_peak.
 *
 * Element size: activations, activation gradients and the input batch are
 * act_elem_bytes per element (4 today; bf16/fp16 storage later); parameters,
 * gradients and momentum are fp32; workspaces are what the ops table says. */
#ifndef HFL_MODEL_PLANNER_H
#define HFL_MODEL_PLANNER_H

#include <stddef.h>

#include "model/checkpoint.h"
#include "model/model.h"

#define HFL_PLAN_ALIGN 64
#define HFL_PLAN_NAME_LEN 16
/* params, grads, momentum, input, labels; per stage: a_j, its recompute
 * instance, g_j; per layer: fwd, recompute and bwd workspace. */
#define HFL_PLAN_MAX_BUFFERS (5 + 6 * HFL_MAX_LAYERS + 1)
/* LOAD, LOSS, OPTIMIZER; per layer forward, recompute, backward. */
#define HFL_PLAN_MAX_OPS (3 + 3 * HFL_MAX_LAYERS)

typedef enum {
    HFL_BUF_WEIGHTS,     /* the fp32 parameter vector */
    HFL_BUF_MASTER,      /* fp32 master weights (reduced-precision training; 0 in fp32) */
    HFL_BUF_GRADS,       /* parameter gradients */
    HFL_BUF_OPTIMIZER,   /* momentum */
    HFL_BUF_ACTIVATIONS, /* layer outputs, their recompute instances, activation gradients */
    HFL_BUF_WORKSPACE,   /* per-op kernel workspace */
    HFL_BUF_INPUT,       /* the input batch and its labels */
    HFL_BUF_N_CATEGORIES
} hfl_buf_category;

typedef struct {
    char name[HFL_PLAN_NAME_LEN]; /* "params", "a3", "a3.re", "g3", "ws.f0", "ws.r0", "ws.b0" */
    hfl_buf_category category;
    int layer;         /* the spec layer that writes it (-1: params, grads, momentum, input) */
    size_t count;      /* elements */
    size_t elem_bytes; /* bytes per element */
    size_t bytes;      /* count * elem_bytes */
    int first_op, last_op;
    size_t offset;     /* from the arena start, HFL_PLAN_ALIGN-aligned */
} hfl_plan_buffer;

typedef enum {
    HFL_OP_LOAD,      /* out = input batch, labels = labels */
    HFL_OP_FORWARD,   /* layer: in -> out with ws; in == out when in place */
    HFL_OP_LOSS,      /* in = logits, labels; out = dlogits */
    HFL_OP_BACKWARD,  /* layer: in, out (each -1 when not kept), dout -> din (-1: none), ws */
    HFL_OP_OPTIMIZER, /* plan->params, grads, momentum */
} hfl_plan_op_kind;

typedef struct {
    hfl_plan_op_kind kind;
    int layer;     /* FORWARD, BACKWARD: the spec layer; else -1 */
    int recompute; /* FORWARD: 1 when it recomputes a dropped activation during backward */
    int in, out, dout, din, ws, labels; /* buffer indices, -1 for none */
} hfl_plan_op;

typedef struct {
    int batch;             /* samples per step, >= 1 */
    hfl_ckpt_kind ckpt;    /* which activations to store */
    size_t ckpt_budget;    /* optimal: bound on the chain's peak (checkpoint.h); SIZE_MAX: none */
    int momentum;          /* nonzero: SGD with momentum (plans the momentum buffer) */
    size_t act_elem_bytes; /* bytes per activation element: 4 (fp32) or 2 (bf16/fp16) */
    int hold_checkpoints;  /* nonzero: stored activations live to the end of backward */
} hfl_plan_config;

typedef struct hfl_plan {
    hfl_plan_config cfg;
    hfl_model_spec spec;   /* the spec it was made for (the trainer checks it) */
    int n_stages;
    int stage_first[HFL_MAX_LAYERS + 1]; /* stage j (1..n_stages) is layers
                                            stage_first[j-1] .. stage_first[j]-1 */
    hfl_ckpt_plan ckpt;    /* the schedule over stages; ckpt.stored[j] for a_j */
    int n_buffers;
    hfl_plan_buffer buffers[HFL_PLAN_MAX_BUFFERS];
    int n_ops;
    hfl_plan_op ops[HFL_PLAN_MAX_OPS];
    int params, grads, momentum, input, labels; /* buffer indices; momentum -1 without */
    int loss_op, optimizer_op;                   /* op indices */
    size_t arena_bytes; /* the one allocation: every buffer's offset + bytes fits */
    size_t live_peak;   /* max over ops of the bytes of the buffers live at it */
    int peak_op;        /* the first op attaining live_peak */
    size_t breakdown[HFL_BUF_N_CATEGORIES]; /* live bytes at peak_op by category */
    size_t chain_peak;  /* max over ops of live activation + a_0 bytes (<= ckpt.peak) */
} hfl_plan;

/* Plans one training step of spec under cfg into *plan (placement included).
 * -1 with err for a spec failing hfl_model_spec_check, batch < 1, an element
 * size other than 2 or 4, an unknown kind, or sizes overflowing size_t. An
 * `optimal` budget below every schedule is not an error: the plan is the
 * `full` one with ckpt.feasible = 0. */
int hfl_plan_make(const hfl_model_spec *spec, const hfl_plan_config *cfg, hfl_plan *plan,
                  char *err);

/* Places plan's buffers (planner_place.c): sets every offset and arena_bytes
 * from the sizes and lifetimes. hfl_plan_make calls it. */
void hfl_plan_place(hfl_plan *plan);

/* Bytes of the buffers live at op `op` (brute force over the table). */
size_t hfl_plan_live_bytes(const hfl_plan *plan, int op);

const char *hfl_plan_category_name(hfl_buf_category c); /* "weights", ... */
const char *hfl_plan_op_name(hfl_plan_op_kind k);       /* "load", "forward", ... */

#endif
