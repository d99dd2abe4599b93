/* backend.h: the device layer's one interface, implemented by cpu/ (OpenBLAS,
 * always built in) and cuda/ (cuBLAS, a module loaded at run time by
 * kernels/select.c when the machine has a usable NVIDIA GPU).
 *
 * All float pointers passed to the ops are device pointers obtained from
 * `alloc` (on the CPU backend, ordinary host memory). Matrices are row-major.
 * The per-element arithmetic of every op lives in `kernels/ops_hd.h` so both
 * backends run the same formulas.
 *
 * ASYNCHRONY. Ops are enqueued in order on the backend's one compute stream
 * and may return before they ran (the CPU backend runs them at once). Only
 * `download` and `sync` wait for the device; nothing else returns a value
 * the device computed. What a training step computes for the host (the summed
 * loss, the correct count, fp16's finite flag and loss scale) lands in a
 * device-side hfl_step_scalars that the host downloads when it wants it.
 * `upload` returns once src may be reused (from pageable memory it may wait);
 * the input pipeline below is the asynchronous way in.
 *
 * HOST WAITS. Each backend counts, from the process's start, the calls that
 * make the host wait for the device on the CUDA backend (host_waits reads
 * them): download (waits for every op enqueued before it), upload (waits
 * until src may be reused), sync, and free and host_free (cudaFree and
 * cudaFreeHost wait for the whole device) as syncs; and, apart,
 * stage_wait. The CPU backend counts the same calls, though none of them
 * waits there, so a test on any machine sees what a GPU run would wait for.
 * A training step (model/model.h: grads_staged, apply, step_staged) makes
 * none of them: a host wait inside a step drains the compute stream, and the
 * GPU idles while the host enqueues the next step's few hundred ops. What a
 * step needs to know from the step before (fp16's finite flag and loss
 * scale, AdamW's step count) the device keeps in hfl_step_scalars. The host
 * waits between steps only: take_loss once an epoch, parameters once a
 * round, and stage_wait in stage(), which is back-pressure rather than a
 * sync: staging into a slot waits for the slot's previous copy, which
 * itself waited for the step that last read the slot. With two slots,
 * staging the batch of step i + 4 (after step i + 2 was enqueued) waits for
 * step i to end, and the device still has steps i + 1 and i + 2 to run: the
 * host is held two steps ahead, the device does not idle
 * (tests/model/test_host_waits.c checks all of this on the CPU).
 *
 * INPUT PIPELINE. A trainer with two input slots (plan cfg.prefetch) copies
 * batch i+1 in while step i runs: the host fills pinned memory from
 * host_alloc (after stage_wait(slot) says the slot's last copy has left it),
 * prefetch(slot) copies it on a second stream once the slot's previous step
 * released it (release_input), and await_prefetch(slot) makes the compute
 * stream wait for that copy. On the CPU backend all of these are plain
 * copies or nothing.
 *
 * Convolution and pooling ops take n samples laid out [n, C, H, W] (row-major,
 * CHW within a sample) and the window geometry g of kernels/geom.h. A
 * convolution is im2col + gemm with a row bias; its backward is gemm
 * against the columns (dW), channel_bias_grad (db) and gemm + col2im (dX).
 *
 * STORAGE TYPES. Every op that reads or writes activations takes their
 * storage type t (hfl_precision): fp32 (float) or bf16 / fp16 (2-byte
 * values, uint16_t bit patterns), passed as void pointers. A 2-byte operand
 * is widened exactly and the arithmetic is the fp32 op's; each 2-byte result
 * is rounded once, to nearest even (kernels/ops_hd.h's hfl_ld and hfl_st),
 * as a GPU's fp32-accumulating kernels do, so in fp32 an op computes exactly
 * what it always did. Parameter gradients, master weights and optimizer
 * state are fp32 in every type. A gemm's two inputs A and B are of one type
 * (both fp32 or both t), as cuBLAS requires. The CPU backend feeds OpenBLAS
 * sgemm through fp32 staging tiles for 2-byte operands, in a caller-given
 * workspace of hfl_gemm_ws_bytes (planned like any workspace; 0 for fp32);
 * the CUDA backend uses the cuBLAS workspace the plan gives it instead
 * (blas_ws_bytes, set_blas_workspace), and the caller's only for a 2-byte C
 * with a bias and beta != 0. */
#ifndef HFL_BACKEND_H
#define HFL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/geom.h"

/* Storage type of a tensor: fp32, or 2-byte bfloat16 / IEEE binary16 held as
 * uint16_t bit patterns. Also the training precision (model/model.h). */
typedef enum { HFL_PREC_FP32, HFL_PREC_BF16, HFL_PREC_FP16 } hfl_precision;

/* Bytes of one element of type t. */
static inline size_t hfl_precision_bytes(hfl_precision t) { return t == HFL_PREC_FP32 ? 4 : 2; }

/* gemm operand flags: which of A, B, C are fp32 (float *) whatever the type t. */
enum { HFL_GEMM_A_F32 = 1, HFL_GEMM_B_F32 = 2, HFL_GEMM_C_F32 = 4 };
/* gemm bias: none, bias[j] added to column j, bias[i] added to row i. */
enum { HFL_BIAS_NONE, HFL_BIAS_COL, HFL_BIAS_ROW };

/* Bytes of fp32 staging gemm needs for these operand types and sizes on
 * the CPU backend: nothing in fp32; else for each 2-byte operand a tile of
 * at most HFL_GEMM_TILE rows of op(A) or columns of op(B) by HFL_GEMM_TILE_K
 * of k, and one HFL_GEMM_TILE-square output tile for a 2-byte C (at most
 * 320 KiB in all). Monotone in m, n and k, so a plan for batch b covers any
 * smaller batch. */
#define HFL_GEMM_TILE 128
#define HFL_GEMM_TILE_K 256
static inline size_t hfl_gemm_ws_bytes(hfl_precision t, unsigned f32_mask, int m, int n, int k) {
    if (t == HFL_PREC_FP32) return 0;
    size_t mt = (size_t)m < HFL_GEMM_TILE ? (size_t)m : HFL_GEMM_TILE;
    size_t nt = (size_t)n < HFL_GEMM_TILE ? (size_t)n : HFL_GEMM_TILE;
    size_t kt = (size_t)k < HFL_GEMM_TILE_K ? (size_t)k : HFL_GEMM_TILE_K, floats = 0;
    if (!(f32_mask & HFL_GEMM_A_F32)) floats += mt * kt;
    if (!(f32_mask & HFL_GEMM_B_F32)) floats += kt * nt;
    if (!(f32_mask & HFL_GEMM_C_F32)) floats += mt * nt;
    return floats * sizeof(float);
}

/* What a training step computes for the host, or keeps from step to step,
 * on the device (one 64-byte block, a plan buffer or trainer-held memory on
 * the CPU backend). The loss ops add to loss_sum, correct and rows;
 * unscale_grads sets finite; fp16's loss scaler (scaler_update,
 * hfl_op_scaler_update in kernels/ops_hd.h) reads finite and updates
 * loss_scale, clean_steps and skipped; AdamW (adamw_step with args.sc)
 * counts its steps and keeps its bias corrections' powers here
 * (hfl_op_adamw_count and hfl_op_adamw_bias in kernels/ops_hd.h), so that
 * no step needs the host to tell it its step number. */
typedef struct hfl_step_scalars {
    double loss_sum;     /* summed row losses (each row's, not the mean) since reset */
    int64_t correct;     /* rows whose first argmax is the label */
    int64_t rows;        /* rows summed into loss_sum */
    int64_t skipped;     /* fp16 steps skipped for non-finite gradients */
    float loss_scale;    /* fp16's dynamic loss scale S; 1 otherwise */
    int32_t finite;      /* 1 when the last unscale_grads saw only finite gradients */
    int32_t clean_steps; /* finite steps since S last changed */
    int32_t adam_steps;  /* AdamW steps taken (fp16's skipped ones not) since its reset */
    double adam_beta1_pow; /* beta1^adam_steps and beta2^adam_steps, by repeated */
    double adam_beta2_pow; /* multiplication in double; 1 at the reset */
} hfl_step_scalars;
#ifdef __cplusplus
static_assert(sizeof(hfl_step_scalars) == 64, "hfl_step_scalars is one 64-byte block");
#else
_Static_assert(sizeof(hfl_step_scalars) == 64, "hfl_step_scalars is one 64-byte block");
#endif
#define HFL_INPUT_SLOTS 2
#define HFL_PROFILE_MARKS 4096 /* timing marks a backend keeps (mark, mark_ms) */

/* AdamW's hyperparameters and this step's bias corrections (step_size,
 * bc2_sqrt), or sc, the step scalars they are counted and taken from on the
 * device (kernels/ops_hd.h, AdamW). */
typedef struct {
    float lr, beta1, beta2, eps, wd;
    float step_size, bc2_sqrt;
    hfl_step_scalars *sc;
} hfl_adamw_args;

/* Calls counted by a backend since the process started (HOST WAITS above). */
typedef struct hfl_host_waits {
    uint64_t downloads;   /* download */
    uint64_t uploads;     /* upload */
    uint64_t syncs;       /* sync, free and host_free */
    uint64_t stage_waits; /* stage_wait: back-pressure, not a sync */
} hfl_host_waits;

/* The most samples a convolution unfolds at once (hfl_backend.conv_chunk,
 * the planner's cfg.conv_chunk): CUDA's setting, the whole of any batch a
 * plan takes. */
#define HFL_CONV_CHUNK_MAX 4096

typedef struct hfl_backend {
    const char *name; /* "cpu", "cuda" */
    int host_memory;  /* 1: device pointers are host pointers (the CPU backend), so the host
                         may write a buffer directly instead of staging and uploading */
    size_t blas_ws_bytes; /* the BLAS workspace a plan should give it (0: none) */
    int conv_chunk;       /* samples a convolution should unfold per batched GEMM (plan
                             cfg.conv_chunk; 0 or 1: one sample at a time) */
    size_t alloc_granularity; /* device memory is taken in multiples of it, so a plan's arena
                                 is rounded up to it (plan cfg.alloc_granularity). 0 or 1:
                                 none, the CPU backend's: its memory is measured as the
                                 resident pages a step touches (util/memmeter.h), which
                                 depend on what the step writes and where malloc put the
                                 arena, not on a granule of allocation */

    /* A buffer of `bytes` (64-byte aligned on the CPU). try_alloc returns NULL
     * with one line in err (may be NULL) when the memory budget or the system
     * refuses; alloc prints that line and exits(1) instead. free(NULL) is a no-op. */
    void *(*alloc)(size_t bytes);
    void *(*try_alloc)(size_t bytes, char *err);
    void (*free)(void *p);
    void (*upload)(void *dst_dev, const void *src_host, size_t bytes);
    void (*download)(void *dst_host, const void *src_dev, size_t bytes);
    void (*copy)(void *dst_dev, const void *src_dev, size_t bytes);
    /* Waits until every op enqueued so far has run. */
    void (*sync)(void);
    /* The counts of HOST WAITS (header comment) so far, into *out; safe to
     * call from any thread (the counters are atomic). */
    void (*host_waits)(hfl_host_waits *out);
    /* Free and total device memory now (CUDA: cudaMemGetInfo). -1 where the
     * backend cannot tell (the CPU backend: util/memmeter.h measures RSS). */
    int (*mem_info)(uint64_t *free_bytes, uint64_t *total_bytes);
    /* The BLAS workspace for every later GEMM: `bytes` (>= blas_ws_bytes) at p,
     * a planned buffer alive for the whole step. NULL: the library's default. */
    void (*set_blas_workspace)(void *p, size_t bytes);

    /* Host memory the device copies from asynchronously (pinned on CUDA;
     * plain on the CPU), or NULL when it cannot be had. Not counted against
     * the memory budget. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* Input pipeline (header comment); slot < HFL_INPUT_SLOTS. */
    void (*stage_wait)(int slot);
    void (*prefetch)(void *dst_dev, const void *src_host, size_t bytes, int slot);
    void (*await_prefetch)(int slot);
    void (*release_input)(int slot);

    /* C[m,n] = alpha op(A) op(B) + beta C (+ bias) in fp32, row-major; op(X) =
     * X^T when trans_x. Operands flagged in f32_mask are float, the others of
     * type t (all float when t is fp32); a 2-byte C is rounded once, after the
     * bias. bias (of type t, or NULL with HFL_BIAS_NONE) is added per column
     * or per row after alpha op(A) op(B) + beta C. ws holds
     * hfl_gemm_ws_bytes(t, f32_mask, m, n, k) bytes. */
    void (*gemm)(hfl_precision t, unsigned f32_mask, int trans_a, int trans_b, int m, int n, int k,
                 float alpha, const void *a, int lda, const void *b, int ldb, float beta, void *c,
                 int ldc, const void *bias, int bias_axis, void *ws);
    /* `count` independent gemms: number s reads a + s*stride_a and b +
     * s*stride_b and writes c + s*stride_c (strides in elements of each
     * operand's type; 0 shares an operand), each with the same bias, each
     * computed as gemm would (the CPU runs them in order; cuBLAS as one
     * strided batched GEMM); ws as for one. */
    void (*gemm_strided)(hfl_precision t, unsigned f32_mask, int trans_a, int trans_b, int m, int n,
                         int k, float alpha, const void *a, int lda, long long stride_a,
                         const void *b, int ldb, long long stride_b, float beta, void *c, int ldc,
                         long long stride_c, int count, const void *bias, int bias_axis, void *ws);
    /* dbias[c] (+)= sum_r dy[r, c], summed in fp32 row by row (dbias is fp32);
     * accumulate 0 starts each sum from +0 instead of dbias[c]: the bits of a
     * fill with 0 then an accumulating call, one op fewer. */
    void (*bias_grad)(hfl_precision t, float *dbias, const void *dy, int rows, int cols, int accumulate);
    void (*relu_fwd)(hfl_precision t, void *y, const void *x, size_t n);
    /* dx = dy * (y > 0); dx may alias dy */
    void (*relu_bwd)(hfl_precision t, void *dx, const void *dy, const void *y, size_t n);
    /* Softmax cross-entropy of logits[rows, cols] against labels: adds the
     * rows' summed loss (in double; rows in order on the CPU, a fixed tree on
     * the GPU) to sc->loss_sum, the rows whose argmax equals the label to
     * sc->correct and rows to sc->rows; writes dlogits = sc->loss_scale *
     * d(summed loss / mean_rows)/d(logits) when dlogits != NULL, rounded once
     * to t: mean_rows = rows for the batch's mean loss, or the rows of the
     * whole step when this is one micro-batch of an accumulated step; the
     * loss scale is fp16's (1 otherwise). ws: for a 2-byte t, 2 * cols floats
     * (the CPU's staging of one row); NULL for fp32. */
    void (*softmax_xent)(hfl_precision t, const void *logits, const int32_t *labels, void *dlogits,
                         int rows, int cols, int mean_rows, hfl_step_scalars *sc, float *ws);
    /* SGD with momentum and decoupled-from-nothing (L2) weight decay, PyTorch's form,
     * on the fp32 master weights: g' = g + wd*master; v = momentum*v + g';
     * master -= lr*v (v unused when momentum == 0); then w[i] = master[i] as
     * type t (rounded to a 2-byte type; in fp32 w may be master itself). Does
     * nothing when skip_if_nonfinite is given and its finite flag is 0
     * (fp16's skipped step). */
    void (*sgd_step)(hfl_precision t, float *master, float *v, const float *g, void *w, size_t n,
                     float lr, float momentum, float wd, const hfl_step_scalars *skip_if_nonfinite);
    /* AdamW (torch.optim.AdamW's step, kernels/ops_hd.h) on the fp32 master
     * weights and moments, then w[i] = master[i] as type t, as sgd_step;
     * with a.sc, first counts the step in a.sc and takes the bias
     * corrections from it (one thread on the GPU, then the update). Nothing,
     * the count included, when skip_if_nonfinite is given and its finite
     * flag is 0 (fp16's skipped step). */
    void (*adamw_step)(hfl_precision t, float *master, float *m, float *v, const float *g, void *w,
                       size_t n, hfl_adamw_args a, const hfl_step_scalars *skip_if_nonfinite);
    /* FedProx's proximal gradient: g[i] += mu * (w[i] - anchor[i]) (kernels/ops_hd.h),
     * run on the fp32 (master) weights before sgd_step or adamw_step. */
    void (*prox_grad)(float *g, const float *w, const float *anchor, size_t n, float mu);
    void (*fill)(float *p, float value, size_t n);
    /* dst[i] = src[i] as type t (rounded to nearest even for a 2-byte type,
     * overflow giving Inf; a copy for fp32). */
    void (*convert)(hfl_precision t, void *dst, const float *src, size_t n);

    /* cols[(ci*k + ky)*k + kx, i*ho*wo + oy*wo + ox] = x[i, ci, oy*s - p + ky, ox*s - p + kx],
     * 0 where that falls in the padding; cols is [C*k*k, n*ho*wo], the chunk
     * layout: a row per tap with the n samples' positions side by side, so
     * that one GEMM over K = n*ho*wo takes a convolution's weight gradient
     * for all n samples (model/conv.c). For n = 1 it is the per-sample
     * [C*k*k, ho*wo]. With a 1x1 window (k = 1, s = 1, p = 0) it transposes
     * [n, C, hw] to [C, n*hw]. A copy: cols and x are both of type t. */
    void (*im2col)(hfl_precision t, void *cols, const void *x, int n, hfl_window_geom g);
    /* The adjoint of im2col: dx[i, ci, iy, ix] = the sum of the (fp32) cols
     * entries (chunk layout [C*k*k, n*ho*wo]) im2col copied from that
     * element, summed in fp32 in (ky, kx) order and rounded once to t.
     * Overwrites dx [n, C, H, W]. */
    void (*col2im)(hfl_precision t, void *dx, const float *cols, int n, hfl_window_geom g);
    /* y[i, c, oy, ox] = max of window (oy, ox) of x[i, c] (padding never wins). */
    void (*maxpool_fwd)(hfl_precision t, void *y, const void *x, int n, hfl_window_geom g);
    /* dx[i, c] = dy routed to the first maximum of each window, recomputed from
     * x (so neither y nor an index map is needed), each dx element summed in
     * fp32 and rounded once. Overwrites dx. */
    void (*maxpool_bwd)(hfl_precision t, void *dx, const void *dy, const void *x, int n,
                        hfl_window_geom g);
    /* dbias[ch] (+)= sum over i and j of dy[i, ch, j] (dy [n, c, hw] of type t;
     * summed in fp32 by the fixed lane tree of kernels/ops_hd.h, a block per
     * channel on the GPU, the same bits on the CPU) */
    void (*channel_bias_grad)(hfl_precision t, float *dbias, const void *dy, int n, int c, int hw,
                              int accumulate);

    /* g[i] *= 1 / sc->loss_scale; sc->finite = every result is finite. */
    void (*unscale_grads)(float *g, size_t n, hfl_step_scalars *sc);
    /* fp16's loss scaler after a step: hfl_op_scaler_update(sc, interval). */
    void (*scaler_update)(hfl_step_scalars *sc, int interval);

    /* PROFILING (kernels/profile.h, only while a profile is on, so a normal
     * step records nothing): mark(i) records timing mark i < HFL_PROFILE_MARKS
     * after every op enqueued so far (a cudaEvent on the compute stream; the
     * clock on the CPU, whose ops ran already); mark_ms(a, b) is the
     * milliseconds from mark a to mark b, waiting for b. NULL: the backend
     * cannot time (the profile then counts only). */
    void (*mark)(int i);
    double (*mark_ms)(int a, int b);

    /* The transformer language model's ops (kernels/lm.h); NULL: none. */
    const struct hfl_lm_ops *lm;
    /* The coordinator's aggregation ops (kernels/agg.h); NULL: none. */
    const struct hfl_agg_ops *agg;
} hfl_backend;

const hfl_backend *hfl_backend_cpu(void);
/* The CPU backend calls fn(ctx, ta, tb, m, n, k) before each OpenBLAS sgemm it makes
 * (transposes and row-major shape; a 2-byte gemm's fp32 tiles included); fn NULL: none. Tests use
 * it to check plan/blas_footprint.c's list of a step's GEMMs against the
 * calls really made. */
void hfl_backend_cpu_observe_gemms(void (*fn)(void *ctx, int ta, int tb, int m, int n, int k), void *ctx);
/* Both backends' allocations are counted against one process-wide budget:
 * kernels/budget.h. Choosing a backend at run time: kernels/select.h. */

#endif
