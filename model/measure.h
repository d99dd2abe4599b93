/* measure.h: the real peak memory of one training step, measured outside
 * the planner.
 *
 * In a forked child (so each measurement starts from the same process state:
 * glibc keeps freed memory and moves its mmap threshold, which would leak one
 * measurement into the next) it resets the peak RSS (util/memmeter), creates
 * a trainer from the plan, gathers the batch into host staging (as a client
 * does; model/overhead.h counts it), runs one full-batch step, and reads the
 * growth of its private resident memory (util/memmeter.h's window: library
 * code mapped in is shared and reclaimable, and not counted): the arena, the
 * staging, and whatever libraries took for themselves during the step. Warm
 * OpenBLAS up in the parent first if its first-use buffers are not to be
 * counted. */
#ifndef HFL_MODEL_MEASURE_H
#define HFL_MODEL_MEASURE_H

#include <stdint.h>

#include "model/planner.h"

typedef struct {
    uint64_t growth;       /* peak RSS growth over the step, bytes */
    uint64_t backend_peak; /* the backend allocator's live-bytes peak */
} hfl_step_measure;

/* x: plan->cfg.batch samples of spec->in_dim floats; y: their labels (batch x spec->label_rows). -1 with err.
 * On the CPU backend. */
int hfl_measure_step(const hfl_model_spec *spec, const hfl_plan *plan, const float *params,
                     const float *x, const int32_t *y, hfl_step_measure *out, char *err);
/* The same on backend be. A device backend (one whose mem_info works) is
 * measured in-process, as free device memory before creating the trainer
 * minus free memory after its first step and first evaluation: the arena
 * plus what the library took lazily (cuBLAS handles and workspaces, kernel
 * modules loaded on first launch, allocation granularity). No fork: CUDA
 * cannot be used in a child forked after the parent initialised it. */
int hfl_measure_step_on(const hfl_backend *be, const hfl_model_spec *spec, const hfl_plan *plan,
                        const float *params, const float *x, const int32_t *y,
                        hfl_step_measure *out, char *err);

#endif
