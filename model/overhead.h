/* overhead.h: the memory a training step takes outside its planned arena,
 * predicted from measurements on the same device.
 *
 * A step's real peak (peak RSS growth on the CPU, used device memory on a
 * GPU) is the arena, plus on the CPU the host staging of one batch (the
 * client gathers each batch into batch * (in_dim + label_rows) * 4 bytes before the
 * trainer copies it in; known exactly), plus what libraries take for
 * themselves: BLAS packing buffers and code pages, allocator slack, on a GPU
 * the CUDA context, cuBLAS handles and lazily loaded kernels. That last part,
 * the EXTRA, is what is learned: each measurement gives one
 * extra = measured - arena - staging.
 *
 * The model is one figure per precision class on a device, fitted across
 * every configuration, batch and model measured there: the median extra of
 * the class (fp32; and 2-byte storage, whose GEMMs run in fixed tiles so its
 * BLAS use does not grow with the batch). Measured here (docs/benchmarks.md)
 * the extra is 1.29-1.31 MiB for every 2-byte configuration of mlp and cnn
 * and 1.41-2.11 MiB for fp32 (OpenBLAS packs larger panels for larger
 * GEMMs), so one median per class predicts a model it never measured within
 * max(1%, 256 KiB) (tests/integration/test_plan_cli.c checks exactly that,
 * leaving the predicted model's measurements out). With no measurement in
 * the class it takes the other class's median, then the fleet's estimate,
 * then a conservative prior no real configuration exceeds (8 MiB on the CPU,
 * where the largest extra seen is 2.1 MiB and OpenBLAS's one-thread buffer
 * touches at most ~6 MiB; 1 GiB on a GPU, whose context alone is a few
 * hundred MiB). */
#ifndef HFL_MODEL_OVERHEAD_H
#define HFL_MODEL_OVERHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "model/checkpoint.h"
#include "model/model.h"

#define HFL_OVERHEAD_MAX 4096
#define HFL_OVERHEAD_PRIOR_HOST (8ull << 20)
#define HFL_OVERHEAD_PRIOR_DEVICE (1ull << 30)

typedef struct {
    hfl_precision precision;
    int batch;
    double extra; /* measured - arena - staging, bytes (may be negative: noise) */
} hfl_overhead_rec;

typedef struct {
    int n;
    hfl_overhead_rec rec[HFL_OVERHEAD_MAX];
    int host_memory; /* 1: the CPU backend (staging counts, the host prior) */
    size_t in_dim;   /* features per sample, for the staging term */
    int label_rows;  /* labels per sample (T for a language model), likewise */
    double fleet;    /* the coordinator's estimate of the whole overhead, 0: none */
} hfl_overhead_model;

/* An empty model for a backend and an input size. */
void hfl_overhead_init(hfl_overhead_model *m, int host_memory, size_t in_dim, int label_rows,
                       double fleet);
/* Host staging of one batch: batch * (in_dim + label_rows) * 4 bytes on the
 * CPU (its inputs and int32 labels), 0 on a device (its staging is pinned
 * host memory, outside the device budget). */
uint64_t hfl_overhead_staging(int host_memory, int batch, size_t in_dim, int label_rows);
/* Adds one measurement of a configuration whose arena and staging (of its own
 * model: records of other models count too) are given; the oldest goes once
 * HFL_OVERHEAD_MAX are held. */
void hfl_overhead_add(hfl_overhead_model *m, hfl_precision p, int batch, double arena,
                      double staging, double measured);
/* Predicted bytes outside the arena for a configuration: staging + extra. */
uint64_t hfl_overhead_predict(const hfl_overhead_model *m, hfl_precision p, int batch);
/* Where the extra of precision p comes from: "class", "other-class",
 * "fleet" or "prior". */
const char *hfl_overhead_source(const hfl_overhead_model *m, hfl_precision p);
/* hfl_chooser_input's overhead callback over a model (ctx). */
uint64_t hfl_overhead_fn(void *ctx, hfl_precision p, int batch, hfl_ckpt_kind ckpt);

#endif
