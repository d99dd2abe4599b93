/* op_cost.h: a training step's time predicted op by op, from costs per op
 * kind timed once per device on synthetic shapes.
 *
 * A step is the list of backend ops it issues (plan/step_ops.h); its time
 * is the sum of each op's cost:
 *   a GEMM (each of a strided call's count)
 *       g0 + g1 * 2mnk + g2 * (mk + kn + mn)
 *     a per-call cost, a rate, and a per-element cost of the operands (the
 *     packing and the cache misses that make a 16 x 784 x 128 GEMM run at
 *     a fraction of a 256^3 one's rate), fitted by least squares in
 *     relative error on timed GEMMs of fixed synthetic shapes;
 *   any other op  fixed + per_unit * work
 *     its `work` as step_ops.h defines it; fixed and per_unit from the op
 *     timed at two sizes of that work (OP_COST_SMALL and OP_COST_LARGE
 *     elements in op_cost.c) on a fixed synthetic geometry.
 * Each op kind is timed by itself because their costs per element differ by
 * 10x and more (a copy, a gather, a tanh per element), and every model
 * mixes them differently: one rate per byte fitted on one model's steps
 * mispriced another's 3-4.6x (docs/benchmarks.md). Nothing here depends on
 * the model trained: the shapes are the calibration's own, so a prediction
 * for one model is never learnt from another's timings.
 *
 * Costs are per precision (2-byte storage is widened around fp32 GEMMs on
 * the CPU, at a cost of its own). The chooser (plan/chooser.h) falls back
 * to its FLOP model for a precision with no costs. */
#ifndef HFL_PLAN_OP_COST_H
#define HFL_PLAN_OP_COST_H

#include <cjson/cJSON.h>

#include "plan/step_ops.h"

typedef struct {
    double gemm[3];                 /* g0 (s), g1 (s per FLOP), g2 (s per operand element) */
    double fixed[HFL_OPK_COUNT];    /* s per call */
    double per_unit[HFL_OPK_COUNT]; /* s per element of work */
} hfl_op_cost_table;

typedef struct {
    unsigned precisions; /* bit 1 << hfl_precision for each precision costed (0: none) */
    hfl_op_cost_table p[3];
} hfl_op_costs;

/* Seconds for one recorded op (a strided GEMM: all of its count). */
double hfl_op_cost_s(const hfl_op_cost_table *c, const hfl_step_op *op);
/* Seconds for one optimizer step of step_batch rows of plan (as
 * hfl_step_ops walks it), or 0 when costs has no table for the plan's
 * precision. */
double hfl_step_time_s(const hfl_op_costs *costs, const hfl_plan *plan, int step_batch, int opt_prox);

/* Times every op kind on be for each precision in `precisions`, in this
 * process (hfl_chooser_calibrate_ops runs it in a forked child on the CPU):
 * out->precisions says which precisions it costed (none where memory for
 * the buffers could not be had). Some 0.1 s per precision on the CPU. */
void hfl_op_costs_measure(const hfl_backend *be, unsigned precisions, hfl_op_costs *out);

/* The calibration's fits (exposed for tests/plan/test_step_ops.c):
 * the GEMM coefficients g by least squares of secs ~ g0 + g1 feat[i][1] +
 * g2 feat[i][2] (feat[i][0] = 1) in relative error, with every coefficient
 * non-negative (a term fitted negative is dropped and the rest refitted: a
 * negative cost has no physical meaning); and an op's line through its two
 * timings (work ws in ts seconds, wl in tl), its slope 0 when the larger
 * call was not slower and its intercept never below 0. */
void hfl_op_cost_fit_gemm(const double feat[][3], const double *secs, int n, double g[3]);
void hfl_op_cost_fit_line(double ws, double ts, double wl, double tl, double *fixed, double *per_unit);

/* {"fp32": {"gemm": [g0, g1, g2], "ops": {"relu_fwd": [fixed, per_unit], ...}}, ...}
 * for the precisions costed. */
cJSON *hfl_op_costs_json(const hfl_op_costs *c);
/* The reverse: 0 when o has a complete table (every op kind, finite
 * non-negative figures) for each precision in `precisions`; -1 with err
 * naming what is missing or bad otherwise. */
int hfl_op_costs_parse(const cJSON *o, unsigned precisions, hfl_op_costs *out, char *err);

#endif
