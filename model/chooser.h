/* chooser.h: picking the training configuration that fits a device.
 *
 * For each candidate (batch from a ladder x checkpoint schedule) the planner
 * gives the arena a step needs; the chooser adds what lies outside the arena
 * (the learned overhead: allocator, BLAS buffers, on a GPU the CUDA context)
 * to predict the peak, and predicts samples per second from the step's FLOPs
 * (3x the forward pass, plus what the schedule recomputes) at a GEMM rate
 * measured on this device at start-up. It picks the fastest candidate whose
 * peak fits the budget less a headroom; ties go to the larger batch, then to
 * the smaller peak. A preferred batch (the one the coordinator asked for)
 * wins whenever some schedule makes it fit; smaller batches are the fallback.
 * When nothing fits, it says the smallest budget that would. */
#ifndef HFL_MODEL_CHOOSER_H
#define HFL_MODEL_CHOOSER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "model/planner.h"

#define HFL_CHOOSER_MAX_ROWS 64

typedef struct {
    uint64_t budget;     /* bytes this client may use */
    double headroom;     /* fraction of the budget kept free, e.g. 0.05 */
    uint64_t overhead;   /* bytes outside the arena, learned from measurements */
    double gflops;       /* measured GEMM rate (hfl_chooser_calibrate) */
    int momentum;        /* the optimizer keeps momentum */
    int max_batch;       /* ladder top: 1, 8, 32, 128, 512 up to this */
    int prefer_batch;    /* > 0: also a candidate, and any fitting candidate at this batch
                            wins over other batches (the run's batch keeps its meaning) */
} hfl_chooser_input;

typedef struct {
    int batch;
    hfl_ckpt_kind ckpt;
    size_t ckpt_budget;    /* optimal: the activation budget it was planned under */
    size_t arena;          /* planner's arena bytes */
    uint64_t predicted;    /* arena + overhead */
    double samples_per_s;  /* predicted */
    int fits;
} hfl_candidate;

typedef struct {
    int n;
    hfl_candidate rows[HFL_CHOOSER_MAX_ROWS];
    int chosen;            /* row index, -1 when nothing fits */
    uint64_t min_budget;   /* the smallest budget any candidate fits (with headroom) */
} hfl_choice;

/* Measures sgemm GFLOP/s on be (about 50 ms). */
double hfl_chooser_calibrate(const hfl_backend *be);

/* Plans every candidate and picks one; -1 with err only when planning fails. */
int hfl_choose(const hfl_model_spec *spec, const hfl_chooser_input *in, hfl_choice *out, char *err);

/* Plan config of a candidate (what the trainer is created with). */
void hfl_candidate_config(const hfl_candidate *c, int momentum, hfl_plan_config *cfg);

#endif
