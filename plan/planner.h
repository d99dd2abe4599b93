/* planner.h: the memory plan of one training step, laid out in one arena.
 *
 * docs/architecture.md, "The memory promise": for a model spec, a batch, a
 * checkpoint schedule (plan/checkpoint.h) and an optimizer, the planner
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
 * and the flags of AGAINST checkpoint.h's ACCOUNTING below. Layer 0 never runs in
 * place (the input batch must survive for backward and recomputation), so a
 * model starting with ReLU gets a separate buffer for it.
 *
 * SAVED ACTIVATIONS (layers.h's saved_bytes: a transformer block's
 * internals). Each forward op of such a layer writes a buffer of its own,
 * "s<layer>" (or "s<layer>.re" when it recomputes), category activations,
 * which the layer's backward op reads: the forward pass's copy when the
 * stage's output is stored, the recompute's otherwise; a copy nobody reads
 * (the forward pass of a dropped stage) lives for its one op. The chain
 * states them as each stage's saved_bytes (checkpoint.h), so chain_peak =
 * ckpt.peak still holds and `optimal` weighs them.
 *
 * LABELS. spec->label_rows labels per sample (1, or T for a language model);
 * the LOSS op runs over batch * label_rows rows of n_classes logits.
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
 *              backward stops at the first layer that trains (its input
 *              gradient is not computed), and segments wholly below it run
 *              neither recomputation nor backward;
 *   OPTIMIZER  SGD over the trainable part of the parameter vector (all of
 *              it, or a LoRA spec's adapters: model.h; with momentum if
 *              planned), or AdamW (its moments planned). Gradients and
 *              optimizer state cover that part alone.
 * A buffer's lifetime is [first op that touches it, last op that touches it],
 * where a backward op touches its layer's input only when the layer keeps its
 * input and its output only when it keeps its output (the trainer passes NULL
 * for the others). Parameters, parameter gradients and optimizer state persist
 * across steps and live over the whole timeline. Workspaces live for their
 * one op. Evaluation runs the ops up to LOSS (without dlogits), a prefix of
 * the same timeline, so it fits in the same arena; a trainer made for
 * evaluation alone uses a forward-only plan (below), which is smaller.
 *
 * BORROWED WEIGHTS (cfg.borrow_params, forward-only fp32 plans on host
 * memory; hfl_trainer_create_eval on the CPU). The weights are not placed
 * in the arena: the layers read the caller's fp32 vector where it lies, so
 * the coordinator evaluates its global model without a second copy (328
 * MiB at GPT-2 small). A device cannot read host memory, and a 2-byte plan
 * reads a rounded copy, so neither borrows.
 *
 * FORWARD ONLY (cfg.forward_only; hfl_trainer_create_eval). The plan of what
 * evaluation runs: LOAD, the forward pass and LOSS without dlogits (its
 * `out` is -1), nothing after. No gradient buffer (plan->grads -1), no g_n,
 * no optimizer state (momentum, anchor or AdamW asked with it is an error),
 * no OPTIMIZER op (optimizer_op -1). The same pass emits the ops and the
 * same rule gives the lifetimes, so each stage output lives from its
 * forward op to its one reader (the next stage's first op, or LOSS) and a
 * layer's saved activations, which no backward reads, for their one op;
 * placement then reuses the space: the arena is about the weights, the
 * labels and the worst forward op's input, output, saved activations and
 * workspace (tests/model/test_model.c bounds it so). GPT-2 small at T =
 * 1,024, batch 1: 457,422,848 bytes, 1.33 fp32 models, where the training
 * plan takes 1,981,407,232, 5.76 (docs/benchmarks.md). The checkpoint
 * schedule must be `none` and is not what runs: plan->ckpt is the training
 * step's, and chain_peak is the forward pass's. bf16/fp16
 * keep the master weights, through which the trainer stages the weights
 * (model/trainer.c). A trainer running such a plan evaluates; asked to
 * train it prints one line and returns an error (model/model.h).
 *
 * AGAINST checkpoint.h's ACCOUNTING. The chain handed to hfl_ckpt_schedule
 * states this execution exactly: per stage, needs_input = its first layer
 * keeps its input, needs_output = its last layer keeps its output,
 * output_first = that last layer is not the first (an in-place ReLU whose
 * backward op reads a_j before the first layer's op writes g_{j-1}),
 * grad_in_place = the first layer's backward writes g_{j-1} over g_j, and
 * first_backward = the stage of the first layer that trains (unfrozen
 * parameters or LoRA adapters). So
 * chain_peak, the largest sum over ops of the live activation,
 * activation-gradient and input-batch (a_0) bytes, equals ckpt.peak for
 * every plan, and the DP minimises the activation part of the step's real
 * peak. Labels (int32 per sample), workspaces and the parameter-sized
 * buffers are outside the chain: live_peak is at most chain_peak plus the
 * most of those alive at one op, and arena_bytes can exceed live_peak by
 * placement gaps (PLACEMENT; at most 3.1% over mlp and cnn's plans, only
 * alignment for cnn at batch 128; docs/benchmarks.md).
 *
 * PLACEMENT (planner_place.c): buffers alive at every op are stacked at the
 * bottom; the rest are placed at 64-byte-aligned offsets clear of every
 * placed buffer whose lifetime overlaps, in six orders with first fit and
 * with best fit, keeping the smallest arena; then a budgeted local search
 * moves one buffer later in the order at a time while the arena shrinks,
 * stopping at the lower bound (the most aligned bytes alive at one op).
 * arena_bytes is the end of the highest buffer, rounded up to the allocation
 * granularity (below); it is at least live_peak.
 *
 * PRECISION (cfg.precision; model/model.h, kernels/backend.h). fp32: the
 * weights, gradients, momentum, activations, activation gradients and input
 * batch are 4 bytes an element, and there are no master weights. bf16 and
 * fp16 (mixed precision, Micikevicius et al. 2018): the working weights
 * (category "weights", what the layers read) are 2 bytes an element beside
 * fp32 master weights ("master_weights", what the optimizer updates; with
 * LoRA the adapters' only, the frozen base being its 2-byte copy); the
 * activations, activation gradients and input batch are 2 bytes; gradients
 * and momentum stay fp32; the layers' workspaces are their sizes in the type, which
 * include the fp32 staging the CPU backend needs to run sgemm on 2-byte data,
 * and the LOSS op gets a workspace of two logit rows in fp32 (ws.loss).
 * Master weights live over the whole timeline, like the weights.
 * cfg.act_elem_bytes: 0 derives it from the precision (4 for fp32, 2 for
 * bf16/fp16); 2 or 4 must match, except that fp32 with 2 plans a what-if of
 * fp32 weights around 2-byte activations, which the trainer refuses.
 *
 * DEVICE BUFFERS (cfg.blas_ws_bytes, prefetch, device_scalars; all zero on
 * the CPU backend). A GPU step also needs cuBLAS's workspace (a whole-step
 * "ws.blas", handed to the library by the trainer), a second input slot and
 * its labels ("a0.next", "labels.next"; with it both slots live over the
 * whole step, since one is being filled while the other is read) and the
 * 64-byte step scalars the loss and loss-scale ops write ("scalars",
 * whole-step; on the CPU backend the trainer keeps them in host memory).
 * cfg.conv_chunk > 1 lets each conv layer unfold that many samples into its
 * workspace and run one strided batched GEMM over them (a GPU would
 * otherwise launch per sample); its workspaces grow by that factor. The
 * planner records it in plan->spec's conv layers (hfl_layer.chunk), which the
 * trainer copies into its own.
 *
 * ALLOCATION GRANULARITY (cfg.alloc_granularity). A GPU maps device memory
 * in granules (2 MiB on current NVIDIA GPUs; hfl_backend.alloc_granularity,
 * which the CUDA backend asks the driver for), so one cudaMalloc of the
 * arena takes its size rounded up to a whole number of them. The plan's arena_bytes is that
 * rounded size: the trainer allocates it, the budget reserves it, and a
 * prediction (arena + learned overhead, plan/overhead.h) counts it, so
 * the rounding is no longer noise of 0-2 MiB in the learned overhead. On
 * the CPU backend it is 1 (kernels/backend.h says why). */
#ifndef HFL_MODEL_PLANNER_H
#define HFL_MODEL_PLANNER_H

#include <stddef.h>

#include "plan/checkpoint.h"
#include "model/model.h"

#define HFL_PLAN_ALIGN 64
#define HFL_PLAN_NAME_LEN 16
/* params, master, grads, momentum, anchor, adam.m, adam.v, input, labels,
 * ws.loss, a0.next, labels.next, scalars, ws.blas; per stage: a_j, its recompute instance, g_j;
 * per layer: fwd, recompute and bwd workspace, saved activations and their
 * recompute instance. */
#define HFL_PLAN_MAX_BUFFERS (14 + 8 * HFL_MAX_LAYERS + 1)

/* Optimizer state a plan keeps besides weights and gradients: the bits of
 * hfl_chooser_input.opt_state and of hfl_candidate_config's argument. */
#define HFL_OPT_MOMENTUM 1u /* SGD momentum */
#define HFL_OPT_ANCHOR 2u   /* FedProx's anchor: the round's global weights (model.h) */
#define HFL_OPT_ADAMW 4u    /* AdamW's two fp32 moments (model.h, OPTIMIZERS) */
/* LOAD, LOSS, OPTIMIZER; per layer forward, recompute, backward. */
#define HFL_PLAN_MAX_OPS (3 + 3 * HFL_MAX_LAYERS)

typedef enum {
    HFL_BUF_WEIGHTS,     /* the working parameter vector the layers read (fp32, bf16 or fp16) */
    HFL_BUF_MASTER,      /* fp32 master weights (bf16/fp16 training; none in fp32) */
    HFL_BUF_GRADS,       /* parameter gradients */
    HFL_BUF_OPTIMIZER,   /* momentum, FedProx's anchor, AdamW's moments */
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
    HFL_OP_FORWARD,   /* layer: in -> out (and saved) with ws; in == out when in place */
    HFL_OP_LOSS,      /* in = logits, labels; out = dlogits; ws (bf16/fp16 only) */
    HFL_OP_BACKWARD,  /* layer: in, out (each -1 when not kept), saved, dout -> din (-1: none), ws */
    HFL_OP_OPTIMIZER, /* plan->params, master, grads, momentum, anchor, adam_m, adam_v */
} hfl_plan_op_kind;

typedef struct {
    hfl_plan_op_kind kind;
    int layer;     /* FORWARD, BACKWARD: the spec layer; else -1 */
    int recompute; /* FORWARD: 1 when it recomputes a dropped activation during backward */
    int in, out, dout, din, ws, labels; /* buffer indices, -1 for none */
    int saved;     /* FORWARD writes, BACKWARD reads the layer's saved activations; -1: none */
} hfl_plan_op;

typedef struct {
    int batch;             /* samples per step, >= 1 */
    hfl_ckpt_kind ckpt;    /* which activations to store */
    size_t ckpt_budget;    /* optimal: bound on the chain's peak (checkpoint.h); SIZE_MAX: none */
    int momentum;          /* nonzero: SGD with momentum (plans the momentum buffer) */
    int anchor;            /* nonzero: FedProx (plans the fp32 "anchor", n_trainable floats) */
    int adamw;             /* nonzero: AdamW (plans "adam.m" and "adam.v", n_trainable floats each) */
    size_t act_elem_bytes; /* bytes per activation element: 0 = from precision (PRECISION) */
    hfl_precision precision; /* HFL_PREC_FP32 (the zero value), BF16 or FP16 */
    /* What a device backend needs (DEVICE BUFFERS); 0 for the CPU backend,
     * which reproduces the plans made before these existed byte for byte.
     * hfl_plan_config_for_backend sets them from a backend. */
    size_t blas_ws_bytes;  /* a whole-step BLAS workspace "ws.blas" of this many bytes */
    int prefetch;          /* two input slots "a0"/"a0.next" and their labels */
    int device_scalars;    /* the step scalars (kernels/backend.h) as a 64-byte "scalars" */
    int conv_chunk;        /* samples a conv layer unfolds per batched GEMM (0 or 1: one;
                              hfl_plan_config_for_backend makes a 0 the backend's) */
    size_t alloc_granularity; /* arena_bytes rounded up to a multiple of it (0 or 1: none) */
    int forward_only;      /* nonzero: evaluation's plan, LOAD, FORWARD and LOSS alone (FORWARD ONLY) */
    int borrow_params;     /* with forward_only, fp32, on host memory (prefetch 0): no "params" in
                              the arena (plan->params -1); the trainer reads the caller's weights
                              where they lie (hfl_trainer_set_params, BORROWED WEIGHTS) */
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
    int params, grads, momentum, input, labels; /* buffer indices; momentum -1 without, grads -1
                                                   when forward-only */
    int anchor;                                  /* FedProx's anchor; -1 without */
    int adam_m, adam_v;                          /* AdamW's moments; -1 without */
    int master;                                  /* fp32 master weights; -1 in fp32 */
    int input_next, labels_next, scalars, blas_ws; /* DEVICE BUFFERS; -1 when not planned */
    int loss_op, optimizer_op;                   /* op indices; optimizer_op -1 when forward-only */
    size_t arena_bytes; /* the one allocation: every buffer's offset + bytes fits; a multiple of
                           cfg.alloc_granularity */
    size_t live_peak;   /* max over ops of the bytes of the buffers live at it */
    int peak_op;        /* the first op attaining live_peak */
    size_t breakdown[HFL_BUF_N_CATEGORIES]; /* live bytes at peak_op by category */
    size_t chain_peak;  /* max over ops of live activation + a_0 bytes (== ckpt.peak) */
} hfl_plan;

/* Plans one training step of spec under cfg into *plan (placement included).
 * -1 with err for a spec failing hfl_model_spec_check, batch < 1, an unknown
 * precision, an element size other than 0, 2 or 4 or one that does not suit
 * the precision, an unknown kind, or sizes overflowing size_t. cfg's
 * act_elem_bytes is stored derived (never 0) in plan->cfg. An
 * `optimal` budget below every schedule is not an error: the plan is the
 * `full` one with ckpt.feasible = 0. */
int hfl_plan_make(const hfl_model_spec *spec, const hfl_plan_config *cfg, hfl_plan *plan,
                  char *err);

/* Sets cfg's DEVICE BUFFERS for backend be: its BLAS workspace, its conv
 * chunk unless cfg has one (a chooser candidate's, plan/chooser.h CONV
 * CHUNK), and for a backend whose memory is not the host's, two input slots
 * and device-side step scalars. Leaves everything else as it was. */
void hfl_plan_config_for_backend(hfl_plan_config *cfg, const hfl_backend *be);

/* Places plan's buffers (planner_place.c): sets every offset and arena_bytes
 * from the sizes and lifetimes. hfl_plan_make calls it. */
void hfl_plan_place(hfl_plan *plan);

/* Bytes of the buffers live at op `op` (brute force over the table). */
size_t hfl_plan_live_bytes(const hfl_plan *plan, int op);

const char *hfl_plan_category_name(hfl_buf_category c); /* "weights", ... */
const char *hfl_plan_op_name(hfl_plan_op_kind k);       /* "load", "forward", ... */

/* Buffers for batches of up to max_batch samples: the plan of
 * hfl_plan_make with batch max_batch, checkpoint schedule `none`, a momentum
 * buffer, fp32 precision and the backend's device buffers. NULL for max_batch < 1 or a spec that fails
 * hfl_model_spec_check; prints one line and exits(1) when the backend refuses
 * the arena (as be->alloc does). */
hfl_trainer *hfl_trainer_create(const hfl_model_spec *spec, const hfl_backend *be, int max_batch);
/* A trainer for evaluation only (hfl_trainer_evaluate; it does not train):
 * the forward-only plan (FORWARD ONLY) at the largest batch up to max_batch
 * whose `none` TRAINING plan's arena fits max_bytes, batch 1 when none
 * does; the batch is hfl_trainer_plan(t)->cfg.batch. The batch is the one
 * evaluation ran at before forward-only plans: the summed loss depends on
 * how the rows are cut into batches (each batch's sum is added to the
 * running one), so a larger batch would move the figures' last bits. The
 * arena, a subset of the training plan's buffers over shorter lifetimes, is
 * below that plan's by the gradients at least (tests/model/test_model.c
 * checks mlp, cnn and gpt-tiny), so within max_bytes but at batch 1. NULL
 * with err when the spec fails its check, max_batch < 1 or the backend
 * refuses the arena. */
hfl_trainer *hfl_trainer_create_eval(const hfl_model_spec *spec, const hfl_backend *be, int max_batch,
                                     size_t max_bytes, char *err);

#endif
