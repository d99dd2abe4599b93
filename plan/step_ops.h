/* step_ops.h: the backend ops one optimizer step of a plan issues, each
 * with its shape, listed from the plan without running it (the chooser's
 * per-op step time, plan/op_cost.h).
 *
 * The plan's ops are walked as the trainer runs them (model/trainer.c:
 * run_ops over each micro-batch, finish_grads, hfl_trainer_apply), each
 * layer's forward and backward called through a backend table that only
 * records (no memory is touched: the layers reach memory only through
 * backend ops, model/layers.h). Every call is one record, of the kinds a
 * profile counts (kernels/profile.h), so a step's records and a profile of
 * the same step agree call for call (tests/plan/test_step_ops.c).
 *
 * A record's size: a GEMM's transposes and m, n, k (a strided call's
 * `count` GEMMs of that shape); any other op's `work`, the elements it
 * processes, one definition per kind:
 *   copy, upload, download, prefetch  bytes / 4
 *   bias_grad, softmax_xent           rows x cols
 *   relu, gelu, sgd, adamw, prox,     n
 *   fill, convert, unscale_grads
 *   scaler_update                     1
 *   im2col, col2im                    the column matrix: n C k k ho wo
 *   maxpool_fwd, maxpool_bwd          the windows' reads: n C ho wo k k
 *   channel_bias_grad                 n c hw
 *   embed_fwd, embed_bwd,             rows x C
 *   layernorm_fwd, layernorm_bwd
 *   heads_gather, heads_scatter       n T H hs
 *   causal_softmax(_bwd)              rows x T
 * The per-op calibration (plan/op_cost.c) sizes its timed calls by the same
 * definitions: it records each call it times through this table. */
#ifndef HFL_PLAN_STEP_OPS_H
#define HFL_PLAN_STEP_OPS_H

#include "kernels/profile.h"
#include "plan/planner.h"

typedef struct {
    hfl_op_kind kind;
    hfl_precision t;
    int trans_a, trans_b, m, n, k; /* gemm, gemm_strided: each GEMM's shape */
    int count;                     /* gemm_strided's GEMMs; 1 for every other op */
    double work;                   /* any other op: the elements it processes (above) */
} hfl_step_op;

typedef void (*hfl_step_op_sink)(void *ctx, const hfl_step_op *op);

/* Every op of one optimizer step of step_batch rows of plan (micro-batches
 * of the plan's batch, the last one short, when step_batch is larger; one
 * micro-batch of step_batch rows when it is not larger), in the order the
 * trainer issues them, to sink: on a device plan (cfg.prefetch) each
 * micro-batch's staging first (hfl_trainer_stage: the inputs' and labels'
 * prefetch), then its forward, loss and backward (the layers as
 * plan->spec has them: its conv chunks), then the optimizer's. opt_prox:
 * FedProx's proximal gradient runs (a plan with an anchor and mu != 0). */
void hfl_step_ops(const hfl_plan *plan, int step_batch, int opt_prox, hfl_step_op_sink sink, void *ctx);

/* The recording table itself, for the calibration to size its timed calls:
 * while recording, each op called through it goes to sink. */
const hfl_backend *hfl_step_ops_recorder(hfl_step_op_sink sink, void *ctx);

#endif
