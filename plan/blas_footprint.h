/* blas_footprint.h: how much of OpenBLAS's GEMM buffer a training step
 * touches, from the step's GEMM shapes and the running core's blocking.
 *
 * OpenBLAS maps one large buffer at first use (BUFFER_SIZE, 128 MiB or
 * more) and, for every single-threaded level-3 call, packs a block of A at
 * its start and panels of B at a fixed offset after it (sa, sb in
 * interface/gemm.c). Only the pages a call writes become resident, so a
 * step's share of the process's peak is the largest A block plus the
 * largest B region of any of its GEMMs. The blocking (driver/level3/level3.c
 * of OpenBLAS 0.3.21, the single-threaded path), for a column-major call
 * of M x N x K (a row-major m x n x k call is M = n, N = m):
 *   min_l = K >= 2Q ? Q : K > Q ? roundup(K / 2, UM) : K
 *   min_i = M >= 2P ? P : M > P ? roundup(M / 2, UM) : M
 *   A = min_i * min_l floats
 *   B = min_l * N floats when M > P (each panel of N has its own slot),
 *       min_l * min(N, JJ) otherwise (every panel reuses the first slot;
 *       JJ = 3 UN, or UN for 4 < N < 12: the min_jj rule)
 * This is what the overhead model (plan/overhead.h) uses to tell a GPT's
 * small GEMMs from an mlp's 784-wide ones: measured here, the extra outside
 * the arena is this footprint plus ~40 KiB, to a few KiB (docs/benchmarks.md).
 *
 * On SkylakeX and Cooperlake (AVX-512) a call small enough for the
 * small-matrix kernels (M N K <= 100^3, with limits on K and M N for
 * transposed A) touches no buffer at all.
 *
 * Only cores whose sgemm blocking is written in blas_footprint.c are
 * modelled (Haswell and Zen: P = Q = 320, UM 8; SkylakeX: P = Q = 448, UM 16;
 * Cooperlake: P 640, Q 320, UM 16; all UN 4), each checked against the
 * resident growth of single calls (docs/benchmarks.md); on any other core,
 * or with more than one BLAS thread, the footprint is unknown (0) and the
 * overhead model falls back to one median per precision class. */
#ifndef HFL_MODEL_BLAS_FOOTPRINT_H
#define HFL_MODEL_BLAS_FOOTPRINT_H

#include <stdint.h>

#include "model/model.h"

typedef struct {
    int p, q;            /* GEMM_P (rows of A per block), GEMM_Q (its depth) */
    int unroll_m, unroll_n;
    uint64_t b_offset;   /* bytes from sa to sb */
    int small_matrix;    /* SkylakeX's small-matrix kernels take small calls, no buffer */
} hfl_blas_blocking;

/* The blocking of an OpenBLAS core by the name hfl_blas_core_name()
 * gives; -1 (b zeroed) for a core not modelled. */
int hfl_blas_blocking_for(const char *core, hfl_blas_blocking *b);

typedef struct {
    const hfl_blas_blocking *b;
    uint64_t a_max, b_max; /* bytes of the largest A block and B region so far */
} hfl_blas_footprint;

/* Takes one row-major sgemm call of m x n x k into f (ta, tb: A, B
 * transposed, which decide the small-matrix path). */
void hfl_blas_footprint_gemm(hfl_blas_footprint *f, int ta, int tb, int m, int n, int k);
/* Resident bytes: both regions rounded up to whole 4 KiB pages. */
uint64_t hfl_blas_footprint_bytes(const hfl_blas_footprint *f);

/* Every sgemm call (transposes and row-major m, n, k) one training step of spec at a
 * micro-batch of `batch` rows calls, forward and backward, as sink calls
 * (a shape may come more than once). In precision p other than fp32 the
 * calls are the backend's fp32 tiles (kernels/backend.h's gemm: at most
 * HFL_GEMM_TILE x HFL_GEMM_TILE x HFL_GEMM_TILE_K each, and the remainders),
 * which is what reaches OpenBLAS. Recomputation under a checkpoint schedule repeats
 * forward shapes, so the schedule does not change the set. */
void hfl_step_gemms(const hfl_model_spec *spec, int batch, hfl_precision p,
                    void (*sink)(void *ctx, int ta, int tb, int m, int n, int k), void *ctx);

/* The footprint of one step (0 when b is NULL: unknown). */
uint64_t hfl_blas_step_footprint(const hfl_model_spec *spec, int batch, hfl_precision p,
                                 const hfl_blas_blocking *b);

#endif
