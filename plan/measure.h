/* measure.h: the real peak memory of one training step, measured outside
 * the planner.
 *
 * In a forked child (so each measurement starts from the same process state:
 * glibc keeps freed memory and moves its mmap threshold, which would leak one
 * measurement into the next) it resets the peak RSS (util/memmeter), creates
 * a trainer from the plan, gathers the batch into host staging (as a client
 * does; plan/overhead.h counts it), runs one full-batch step (and the tail
 * shapes asked for, below), and reads the growth of its private resident
 * memory (util/memmeter.h's window: library code mapped in is shared and
 * reclaimable, and not counted): the arena, the staging, and whatever
 * libraries took for themselves during the step. Warm OpenBLAS up in the
 * parent first if its first-use buffers are not to be counted. */
#ifndef HFL_MODEL_MEASURE_H
#define HFL_MODEL_MEASURE_H

#include <stdint.h>

#include "plan/planner.h"

typedef struct {
    uint64_t growth;        /* peak RSS growth over the step (a device: free memory's fall), bytes */
    uint64_t backend_peak;  /* the backend allocator's live-bytes peak */
    uint64_t process_bytes; /* a device: this process's device memory after the steps as NVML
                               says (hfl_backend_process_bytes: context included); 0 unknown */
    int64_t rows;           /* rows trained: the full batch and every tail, as the trainer's
                               own loss counters have them */
} hfl_step_measure;

/* TAIL SHAPES. An epoch does not run only full batches: its last optimizer
 * step has n % step rows, and an accumulated step's last micro-batch
 * step % batch. Other GEMM shapes make cuBLAS pick other kernels, which CUDA
 * loads on their first launch (lazy loading, the default since CUDA 12.2),
 * into device memory a measurement of the full batch alone never sees, and
 * neither does a budget check that reads hfl's allocator. So a measurement
 * also runs one step at each tail shape. hfl_measure_tails lists them, at
 * most HFL_MEASURE_TAILS, distinct, each in [1, batch): step_batch % batch
 * (where the epoch has a whole step) and (n % step_batch) % batch for an
 * epoch of n rows; with n unknown (0, hfl-client --plan) step_batch % batch
 * and batch - 1, standing for the epoch's last partial batch. */
#define HFL_MEASURE_TAILS 2
int hfl_measure_tails(int batch, int step_batch, int64_t n, int tails[HFL_MEASURE_TAILS]);

/* A step on backend be, then a step at each of the n_tails tail shapes
 * (rows; TAIL SHAPES); x: plan->cfg.batch samples of spec->in_dim floats,
 * y: their labels (batch x spec->label_rows). -1 with err. A device backend (one whose
 * mem_info works) is measured in-process, as free device memory before
 * creating the trainer minus free memory after its steps and an evaluation:
 * the arena plus what the library took lazily (cuBLAS handles and
 * workspaces, kernel modules loaded on first launch); and this process's
 * own device memory then (process_bytes). No fork: CUDA cannot be used in a
 * child forked after the parent initialised it. */
int hfl_measure_step_on(const hfl_backend *be, const hfl_model_spec *spec, const hfl_plan *plan,
                        const float *params, const float *x, const int32_t *y, const int *tails, int n_tails,
                        hfl_step_measure *out, char *err);

#endif
