/* chooser.h: picking the training configuration that fits a device.
 *
 * For each candidate (batch from a ladder x precision x checkpoint schedule) the planner
 * gives the arena a step needs; the chooser adds what lies outside the arena
 * (the learned overhead: allocator, BLAS buffers, on a GPU the CUDA context)
 * to predict the peak, and predicts samples per second from the step's FLOPs
 * (3x the forward pass, plus what the schedule recomputes) at the GEMM rate
 * measured for that precision on this device at start-up (on the CPU, 2-byte
 * storage is widened to fp32 around OpenBLAS, so it is slower, not faster). It picks the fastest candidate whose
 * peak fits the budget less a headroom; speeds within 5% of each other tie
 * (the rates are measurements: a choice must not flip on their noise), and
 * ties go to the larger batch, then to the wider precision, then the faster,
 * then the smaller peak.
 *
 * THE RUN'S BATCH. With a preferred batch B (the one the coordinator asked
 * for) every candidate takes optimizer steps of B rows: B itself, or a
 * micro-batch m = ceil(B/k) for k = 2, 4, 8, ... (down to 1) accumulating
 * ceil(B/m) micro-batches into one step (model/model.h, GRADIENT
 * ACCUMULATION): the same effective batch, learning rate and number of
 * optimizer steps, in the memory of a step of m. Micro-batch, precision and
 * checkpoint schedule are chosen together by predicted samples/s (smaller
 * micro-batches pay more calls per row, and recomputation its forward ops
 * again; the FLOP model counts no cost for accumulating, so there the
 * largest micro-batch that fits wins a tie, and accumulation beats a
 * schedule that recomputes).
 * With allow_smaller the fallback below B is instead a smaller real batch
 * from the ladder (1, 8, 32, 128, 512), as before accumulation existed: more,
 * noisier optimizer steps, for which the client scales the learning rate by
 * batch/B (Goyal et al. 2017's linear scaling rule). When nothing fits, it
 * says the smallest budget that would.
 *
 * CONV CHUNK. A conv layer unfolds a chunk of samples into its workspace and
 * runs one GEMM over them (model/conv.c): the larger the chunk, the fewer the
 * ops (launches, on a GPU: a cnn at batch 128 takes 34 ops a step with the
 * whole batch as its chunk, 1,302 one sample at a time), and the larger the
 * workspace (its columns grow with the chunk: 80 MB for the cnn's second
 * conv at batch 128). Each candidate first plans the largest chunk allowed
 * (the input's conv_chunk, else the backend's: the whole batch on CUDA, one
 * sample on the CPU, where the whole batch's columns run out of cache and
 * its step was 16-23% slower: docs/benchmarks.md), and when that does not
 * fit, halves it until it does, down to one sample: fewer launches are
 * worth memory only while the memory is there. The least budget a choice
 * names is still the least at one sample: every table holds a row of batch
 * 1, whose chunk is one sample. */
#ifndef HFL_MODEL_CHOOSER_H
#define HFL_MODEL_CHOOSER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "plan/op_cost.h"
#include "plan/planner.h"

/* (the run's batch and up to 16 micro-batches or 5 ladder batches) x 3 precisions x 4 schedules */
#define HFL_CHOOSER_MAX_ROWS 204

typedef struct {
    const hfl_backend *be; /* the backend the plans are for (its DEVICE BUFFERS,
                              plan/planner.h); NULL: the CPU's plans. On a
                              host-memory backend 2-byte storage is emulated, and
                              fp32 is chosen whenever an fp32 candidate fits that
                              steps over the run's batch (with
                              NULL, precisions compete on predicted speed alone) */
    uint64_t budget;     /* bytes this client may use */
    double headroom;     /* fraction of the budget kept free, e.g. 0.05 */
    /* Bytes outside the arena for a configuration, learned from measurements
     * (NULL: none). */
    uint64_t (*overhead)(void *ctx, hfl_precision precision, int batch, hfl_ckpt_kind ckpt);
    void *overhead_ctx;
    double gflops[3];    /* measured GEMM rate per hfl_precision (hfl_chooser_calibrate) */
    const hfl_op_costs *op_costs; /* per-op costs (hfl_chooser_calibrate_ops); NULL, or a
                                     precision without costs: the FLOP model */
    unsigned precisions; /* bit (1 << hfl_precision) for each precision the device may use */
    unsigned opt_state;  /* optimizer state to plan: HFL_OPT_* bits (plan/planner.h) */
    int max_batch;       /* ladder top: 1, 8, 32, 128, 512 up to this */
    int prefer_batch;    /* > 0: the run's batch B; candidates step over B rows (THE RUN'S
                            BATCH above); 0: the ladder, without accumulation */
    int allow_smaller;   /* with prefer_batch: smaller real batches instead of accumulation */
    int conv_chunk;      /* samples a conv layer unfolds at once, at most (CONV CHUNK
                            below); 0: the backend's (be->conv_chunk; one without be) */
} hfl_chooser_input;

typedef struct {
    int batch;             /* rows the arena holds: the (micro-)batch of one forward/backward */
    int accum;             /* micro-batches per optimizer step (1: none) */
    int step_batch;        /* rows per optimizer step: batch, or the run's batch when accum > 1 */
    hfl_precision precision;
    hfl_ckpt_kind ckpt;
    size_t ckpt_budget;    /* optimal: the activation budget it was planned under */
    int conv_chunk;        /* samples its conv layers unfold at once (CONV CHUNK below);
                              0: the backend's, as a model without conv layers plans */
    size_t arena;          /* planner's arena bytes */
    uint64_t predicted;    /* arena + overhead */
    double samples_per_s;  /* predicted */
    int per_op;            /* 1: samples_per_s from the per-op costs; 0: the FLOP model */
    int fits;
} hfl_candidate;

typedef struct {
    int n;
    hfl_candidate rows[HFL_CHOOSER_MAX_ROWS];
    int chosen;            /* row index, -1 when nothing fits */
    uint64_t min_budget;   /* the smallest budget any candidate fits (with headroom) */
    uint64_t min_arena_budget; /* the same for the arena alone: a floor whatever the
                                  overhead prediction (with the prior, the figure to trust) */
} hfl_choice;

/* Measures GEMM GFLOP/s on be for each precision in `precisions` (bits
 * 1 << hfl_precision; about 50 ms each; the others get 0). On the CPU in a
 * forked child: the BLAS library's first-use buffers then stay out of this
 * process, so its first training step pays for them as a fresh client would,
 * and every measurement of a first step sees the same overhead (0s if the
 * child fails). A device backend is timed in-process (CUDA cannot run in a
 * child forked after it started), with a sync around each GEMM, and with a
 * BLAS workspace of its own (blas_ws_bytes, freed after), so cuBLAS creates
 * no pool that would outlive the calibration. The buffers come from
 * try_alloc: where memory is short N is halved, down to 64 (all rates 0 and
 * one line on stderr below that), and the process never exits for it. On
 * the CPU a 2-byte rate above
 * fp32's is capped to it: 2-byte storage is emulated around fp32 GEMMs there,
 * so only memory can make the chooser prefer it. */
void hfl_chooser_calibrate(const hfl_backend *be, unsigned precisions, double gflops[3]);
/* The same, and with ops non-NULL each op kind's costs too (plan/op_cost.h,
 * hfl_op_costs_measure), in the same child on the CPU (ops->precisions 0
 * when they could not be measured). */
void hfl_chooser_calibrate_ops(const hfl_backend *be, unsigned precisions, double gflops[3], hfl_op_costs *ops);
/* "per-op" when every candidate's speed came from per-op costs, "flops"
 * when none did, "mixed" otherwise. */
const char *hfl_choice_speed_model(const hfl_choice *ch);
/* Precisions worth offering on a device (bits 1 << hfl_precision): every one
 * on the CPU; on a GPU fp16 from compute capability 7.5 (tensor cores with
 * fp32 accumulation) and bf16 from 8.0 (Ampere's first bf16 tensor cores;
 * NVIDIA's CUDA C Programming Guide, compute capability tables). */
unsigned hfl_chooser_device_precisions(int is_gpu, int cc_major, int cc_minor);

/* Plans every candidate and picks one; -1 with err only when planning fails. */
int hfl_choose(const hfl_model_spec *spec, const hfl_chooser_input *in, hfl_choice *out, char *err);

/* Plan config of a candidate (what the trainer is created with). */
void hfl_candidate_config(const hfl_candidate *c, unsigned opt_state, hfl_plan_config *cfg);

#endif
