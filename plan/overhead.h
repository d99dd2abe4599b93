/* overhead.h: the memory a training step takes outside its planned arena,
 * predicted from measurements on the same device.
 *
 * A step's real peak (peak RSS growth on the CPU, used device memory on a
 * GPU) is the arena, plus on the CPU the host staging of one batch (the
 * client gathers each batch into batch * (in_dim + label_rows) * 4 bytes before the
 * trainer copies it in; known exactly), plus what libraries take for
 * themselves: BLAS packing buffers and code pages, allocator slack; on a GPU
 * cuBLAS's state and lazily loaded kernels (where NVML describes the process,
 * what it holds beyond its per-process cost, plan/device_cost.h; elsewhere
 * the fall of free device memory over the step). That last part,
 * the EXTRA, is what is learned: each measurement gives one
 * extra = measured - arena - staging.
 *
 * On the CPU most of the extra is OpenBLAS's packing buffer as far as the
 * step's GEMMs touch it (plan/blas_footprint.h), which follows the GEMM
 * shapes: 0.07-0.97 MiB over mlp, cnn and two GPTs at batches 1-512. Where
 * the core's blocking is known, each record keeps the footprint of its own
 * configuration and the model predicts
 *   extra = footprint(configuration) + median(extra - footprint)
 * over the records of the precision class; measured here, extra - footprint
 * is 24-38 KiB for every configuration of all four models, both classes
 * (docs/benchmarks.md), so one model predicts another it never measured.
 * Elsewhere (a GPU, another core) the footprint is 0 and this is one median
 * extra per precision class (fp32; and 2-byte storage, whose GEMMs run in
 * fixed tiles). With no measurement in the class it takes the other class's
 * median, then the fleet's estimate, then a conservative prior no real
 * configuration exceeds (8 MiB on the CPU, where the largest extra seen is
 * 2.1 MiB and OpenBLAS's one-thread buffer touches at most ~6 MiB; 1 GiB on
 * a GPU, whose context alone is a few hundred MiB). */
#ifndef HFL_MODEL_OVERHEAD_H
#define HFL_MODEL_OVERHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "plan/blas_footprint.h"
#include "plan/checkpoint.h"
#include "model/model.h"

#define HFL_OVERHEAD_MAX 4096
#define HFL_OVERHEAD_PRIOR_HOST (8ull << 20)
#define HFL_OVERHEAD_PRIOR_DEVICE (1ull << 30)

typedef struct {
    hfl_precision precision;
    int batch;
    double extra; /* measured - arena - staging, bytes (may be negative: noise) */
    double blas;  /* the configuration's BLAS footprint, bytes (0: unknown) */
} hfl_overhead_rec;

typedef struct {
    int n;
    hfl_overhead_rec rec[HFL_OVERHEAD_MAX];
    int host_memory; /* 1: the CPU backend (staging counts, the host prior) */
    size_t in_dim;   /* features per sample, for the staging term */
    int label_rows;  /* labels per sample (T for a language model), likewise */
    double fleet;    /* the coordinator's estimate of the whole overhead, 0: none */
    const hfl_model_spec *spec;  /* the model predicted, for its footprint (NULL: none) */
    hfl_blas_blocking blocking;  /* the running core's; p = 0: not known */
} hfl_overhead_model;

/* An empty model for a backend and an input size. */
void hfl_overhead_init(hfl_overhead_model *m, int host_memory, size_t in_dim, int label_rows,
                       double fleet);
/* Predictions for spec add each configuration's BLAS footprint under b
 * (NULL: unknown; records then count whole). */
void hfl_overhead_set_footprint(hfl_overhead_model *m, const hfl_model_spec *spec,
                                const hfl_blas_blocking *b);
/* The footprint of spec's configuration (0 without a spec and blocking). */
uint64_t hfl_overhead_footprint(const hfl_overhead_model *m, hfl_precision p, int batch);
/* Host staging of one batch: batch * (in_dim + label_rows) * 4 bytes on the
 * CPU (its inputs and int32 labels), 0 on a device (its staging is pinned
 * host memory, outside the device budget). */
uint64_t hfl_overhead_staging(int host_memory, int batch, size_t in_dim, int label_rows);
/* Adds one measurement of a configuration whose arena, staging and BLAS
 * footprint (of its own model: records of other models count too) are
 * given; the oldest goes once HFL_OVERHEAD_MAX are held. */
void hfl_overhead_add(hfl_overhead_model *m, hfl_precision p, int batch, double arena,
                      double staging, double blas, double measured);
/* Predicted bytes outside the arena for a configuration of the model set by
 * hfl_overhead_set_footprint: staging + footprint + the class's median of
 * (extra - footprint). */
uint64_t hfl_overhead_predict(const hfl_overhead_model *m, hfl_precision p, int batch);
/* Where the extra of precision p comes from: "class", "other-class",
 * "fleet" or "prior". */
const char *hfl_overhead_source(const hfl_overhead_model *m, hfl_precision p);

#endif
