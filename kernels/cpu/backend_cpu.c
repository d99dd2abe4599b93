/* backend_cpu.c: the reference backend: host memory, OpenBLAS sgemm, and
 * loops over the per-element formulas of kernels/ops_hd.h.
 *
 * "Device" memory is ordinary 64-byte aligned host memory, so upload,
 * download and copy are memcpy, ops run when called (sync is a no-op) and
 * the input pipeline's prefetch is a memcpy. The calls that wait for the
 * device on CUDA are counted all the same (kernels/backend.h, HOST WAITS). The allocator reserves every
 * block against the process-wide budget of kernels/budget.h: try_alloc
 * refuses with a one-line error, alloc prints it and exits. Memory is not touched at allocation, so pages
 * become resident (and visible to util/memmeter.h) only when written.
 * Every op is a plain loop calling the HFL_HD body; the CUDA backend runs
 * the same bodies one per thread. The number of OpenBLAS threads is left to
 * the caller (OPENBLAS_NUM_THREADS or openblas_set_num_threads): small GEMMs
 * are often faster on one.
 * Convolution and pooling loops walk samples, channels and positions in
 * memory order and call the bodies of ops_hd.h per element; col2im and the
 * max-pool backward scatter (cheaper on one core) in an order that sums
 * each element exactly as the gather-form bodies a GPU runs would, where
 * the sums stay in fp32 (a 2-byte dx gathers, each element rounded once).
 * Ops take their storage type (kernels/backend.h, STORAGE TYPES). An op's
 * loop over its type is an always-inline function of t (*_in) that the op
 * calls with t a constant of each type (its three-way if), so the loop is
 * compiled once per type, the fp32 one vectorised as if written for floats,
 * instead of testing t at every element. A 2-byte
 * gemm stages its 2-byte operands as fp32 tiles (HFL_GEMM_TILE rows of
 * op(A) or columns of op(B), HFL_GEMM_TILE_K deep) in the caller's
 * workspace and calls sgemm per tile, accumulating over k in fp32; a 2-byte
 * C goes through an fp32 tile that takes the bias, then is rounded once.
 * Tiling k keeps the staging a few hundred KB even for cnn's 3136-wide
 * dense layer. An fp32 gemm is one sgemm. */
#include <cblas.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/budget.h"
#include "kernels/cpu/agg_cpu.h"
#include "kernels/lm.h"
#include "kernels/ops_hd.h"
#include "kernels/thread_hd.h"
#include "util/util.h"

/* Under AddressSanitizer a freed block is poisoned, and reading its header
 * would be reported as a use after free before cpu_free could name the
 * mistake; cpu_block_live asks ASan instead. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(CPU_ASAN)
#define CPU_ASAN 1
#endif
#ifdef CPU_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define CPU_ALIGN 64
/* Each block starts with one CPU_ALIGN-sized header holding the size asked
 * for (for the accounting on free) and a magic word (to catch a double or
 * foreign free); the caller gets the aligned memory after it. */
#define CPU_HEADER CPU_ALIGN
#define CPU_MAGIC_LIVE 0x68666c616c6c6f63ull /* "hflalloc" */
#define CPU_MAGIC_FREED 0x68666c6672656564ull /* "hflfreed" */

typedef struct {
    uint64_t bytes;
    uint64_t magic;
} cpu_block_header;

static void *cpu_try_alloc(size_t bytes, char *err) {
    /* Larger than any address space: refuse before it can wrap the counters. */
    if (bytes > SIZE_MAX / 2) {
        hfl_errf(err, "cpu backend: out of memory allocating %zu bytes (%llu bytes live)", bytes,
                 (unsigned long long)hfl_budget_live_bytes());
        return NULL;
    }
    if (hfl_budget_reserve(bytes, "cpu", err) != 0) return NULL;
    /* aligned_alloc wants a multiple of the alignment; never ask for 0 bytes. */
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    char *base = aligned_alloc(CPU_ALIGN, CPU_HEADER + rounded);
    if (!base) {
        hfl_budget_release(bytes);
        hfl_errf(err, "cpu backend: out of memory allocating %zu bytes (%llu bytes live)", bytes,
                 (unsigned long long)hfl_budget_live_bytes());
        return NULL;
    }
    cpu_block_header *h = (cpu_block_header *)base;
    h->bytes = bytes;
    h->magic = CPU_MAGIC_LIVE;
    hfl_budget_commit();
    return base + CPU_HEADER;
}

static void *cpu_alloc(size_t bytes) {
    char err[HFL_ERR_LEN];
    void *p = cpu_try_alloc(bytes, err);
    if (!p) {
        fprintf(stderr, "hfl: %s\n", err);
        exit(1);
    }
    return p;
}

/* 1 when h heads a block alloc gave and free has not taken back. */
static int cpu_block_live(const cpu_block_header *h) {
#ifdef CPU_ASAN
    if (__asan_region_is_poisoned((void *)(uintptr_t)h, sizeof *h)) return 0;
#endif
    return h->magic == CPU_MAGIC_LIVE;
}

/* ---- host waits (kernels/backend.h): counted, though none waits here ---- */

static _Atomic uint64_t n_downloads, n_uploads, n_syncs, n_stage_waits;

static void count_wait(_Atomic uint64_t *counter) {
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static void cpu_host_waits(hfl_host_waits *out) {
    out->downloads = atomic_load_explicit(&n_downloads, memory_order_relaxed);
    out->uploads = atomic_load_explicit(&n_uploads, memory_order_relaxed);
    out->syncs = atomic_load_explicit(&n_syncs, memory_order_relaxed);
    out->stage_waits = atomic_load_explicit(&n_stage_waits, memory_order_relaxed);
}

static void cpu_free(void *p) {
    if (!p) return;
    count_wait(&n_syncs); /* cudaFree waits for the device */
    char *base = (char *)p - CPU_HEADER;
    cpu_block_header *h = (cpu_block_header *)base;
    if (!cpu_block_live(h)) {
        /* Freeing twice or freeing memory alloc never gave: the accounting
         * (and likely the heap) is already wrong, so stop here. */
        fprintf(stderr, "hfl: cpu backend: free of %p, which is not a live backend block\n", p);
        abort();
    }
    h->magic = CPU_MAGIC_FREED;
    hfl_budget_release(h->bytes);
    free(base);
}

static void cpu_memcpy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

/* upload and download of 0 bytes return at once on CUDA too: not counted. */
static void cpu_upload(void *dst, const void *src, size_t bytes) {
    if (bytes) count_wait(&n_uploads);
    cpu_memcpy(dst, src, bytes);
}

static void cpu_download(void *dst, const void *src, size_t bytes) {
    if (bytes) count_wait(&n_downloads);
    cpu_memcpy(dst, src, bytes);
}

static void (*gemm_observer)(void *ctx, int ta, int tb, int m, int n, int k);
static void *gemm_observer_ctx;

void hfl_backend_cpu_observe_gemms(void (*fn)(void *ctx, int ta, int tb, int m, int n, int k), void *ctx) {
    gemm_observer = fn;
    gemm_observer_ctx = ctx;
}

static void cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (gemm_observer) gemm_observer(gemm_observer_ctx, trans_a, trans_b, m, n, k);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
}

static size_t cpu_min(size_t a, size_t b) { return a < b ? a : b; }

/* dst[r * cols + c] = widen(src[r * ld + c]) for r < rows, c < cols (src
 * 2-byte). The type is tested once, outside the loops, so each inner loop
 * vectorises. */
static void cpu_widen_block(hfl_precision lp, float *dst, const uint16_t *src, size_t ld,
                            size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        const uint16_t *s = src + r * ld;
        float *d = dst + r * cols;
        if (lp == HFL_PREC_FP16)
            for (size_t c = 0; c < cols; c++) d[c] = hfl_op_widen(HFL_PREC_FP16, s[c]);
        else
            for (size_t c = 0; c < cols; c++) d[c] = hfl_op_widen(HFL_PREC_BF16, s[c]);
    }
}

/* The tile of op(X) with rows [r0, r0 + rn) and k-range [k0, k0 + kn) for A
 * (is_b = 0), or k-range x columns [r0, r0 + rn) for B (is_b = 1). Returns
 * the fp32 pointer and leading dimension sgemm should read, staging 2-byte
 * data into `stage` in its stored orientation (sgemm still transposes). */
static const float *cpu_gemm_operand(hfl_precision lp, int is_f32, int trans, int is_b,
                                     const void *x, int ld, size_t r0, size_t rn, size_t k0,
                                     size_t kn, float *stage, int *ld_out) {
    /* A untransposed / B transposed store the tile as rn rows of k; else k rows of rn. */
    int rows_are_tile = is_b ? trans : !trans;
    size_t off = rows_are_tile ? r0 * (size_t)ld + k0 : k0 * (size_t)ld + r0;
    if (is_f32) {
        *ld_out = ld;
        return (const float *)x + off;
    }
    const uint16_t *h = (const uint16_t *)x + off;
    if (rows_are_tile) {
        cpu_widen_block(lp, stage, h, (size_t)ld, rn, kn);
        *ld_out = (int)kn;
    } else {
        cpu_widen_block(lp, stage, h, (size_t)ld, kn, rn);
        *ld_out = (int)rn;
    }
    return stage;
}

/* The bias of rows [r0, r0 + mi) and columns [c0, c0 + nj) added to the fp32
 * tile pc (leading dimension lc); a 2-byte C's rows then rounded into c. */
static inline __attribute__((always_inline)) void
cpu_gemm_finish(hfl_precision t, int c32, float *pc, int lc, size_t r0, size_t mi, size_t c0,
                size_t nj, const void *bias, int bias_axis, void *c, int ldc) {
    for (size_t r = 0; r < mi; r++) {
        float *row = pc + r * (size_t)lc;
        if (bias_axis == HFL_BIAS_COL)
            for (size_t q = 0; q < nj; q++)
                row[q] = hfl_op_bias_add(row[q], hfl_ld(t, bias, c0 + q));
        else if (bias_axis == HFL_BIAS_ROW)
            for (size_t q = 0; q < nj; q++)
                row[q] = hfl_op_bias_add(row[q], hfl_ld(t, bias, r0 + r));
        if (!c32)
            for (size_t q = 0; q < nj; q++) hfl_st(t, c, (r0 + r) * (size_t)ldc + c0 + q, row[q]);
    }
}

/* fp32: one sgemm, then the bias. 2-byte: tiles of C (mt x nt), each summed
 * over k in chunks of HFL_GEMM_TILE_K in fp32 (in C itself when C is fp32,
 * else in the staging tile, then bias and one rounding). The tiling depends
 * only on (m, n, k), so a call is deterministic whatever the buffers'
 * addresses. */
static void cpu_gemm(hfl_precision t, unsigned f32_mask, int trans_a, int trans_b, int m, int n,
                     int k, float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                     void *c, int ldc, const void *bias, int bias_axis, void *ws) {
    if (m <= 0 || n <= 0) return;
    if (bias_axis != HFL_BIAS_NONE && !bias) bias_axis = HFL_BIAS_NONE;
    if (t == HFL_PREC_FP32) {
        cpu_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        if (bias_axis != HFL_BIAS_NONE)
            cpu_gemm_finish(HFL_PREC_FP32, 1, c, ldc, 0, (size_t)m, 0, (size_t)n, bias, bias_axis,
                            c, ldc);
        return;
    }
    size_t mt = cpu_min((size_t)m, HFL_GEMM_TILE), nt = cpu_min((size_t)n, HFL_GEMM_TILE);
    size_t kt = cpu_min((size_t)k, HFL_GEMM_TILE_K);
    int a32 = (f32_mask & HFL_GEMM_A_F32) != 0, b32 = (f32_mask & HFL_GEMM_B_F32) != 0;
    int c32 = (f32_mask & HFL_GEMM_C_F32) != 0;
    float *sa = ws, *sb = sa + (a32 ? 0 : mt * kt), *sc = sb + (b32 ? 0 : kt * nt);
    for (size_t i0 = 0; i0 < (size_t)m; i0 += mt) {
        size_t mi = cpu_min(mt, (size_t)m - i0);
        for (size_t j0 = 0; j0 < (size_t)n; j0 += nt) {
            size_t nj = cpu_min(nt, (size_t)n - j0);
            float *pc;
            int lc;
            if (c32) {
                pc = (float *)c + i0 * (size_t)ldc + j0;
                lc = ldc;
            } else {
                pc = sc;
                lc = (int)nj;
                if (beta != 0.0f)
                    cpu_widen_block(t, sc, (const uint16_t *)c + i0 * (size_t)ldc + j0, (size_t)ldc,
                                    mi, nj);
            }
            if (k <= 0) { /* C = beta C, as sgemm would do (beta 0 never reads C) */
                for (size_t r = 0; r < mi; r++)
                    for (size_t q = 0; q < nj; q++)
                        pc[r * (size_t)lc + q] = beta == 0.0f ? 0.0f : pc[r * (size_t)lc + q] * beta;
            }
            for (size_t k0 = 0; k0 < (size_t)(k > 0 ? k : 0); k0 += kt) {
                size_t kn = cpu_min(kt, (size_t)k - k0);
                int la, lb;
                if (gemm_observer) gemm_observer(gemm_observer_ctx, trans_a, trans_b, (int)mi, (int)nj, (int)kn);
                const float *pa =
                    cpu_gemm_operand(t, a32, trans_a, 0, a, lda, i0, mi, k0, kn, sa, &la);
                const float *pb =
                    cpu_gemm_operand(t, b32, trans_b, 1, b, ldb, j0, nj, k0, kn, sb, &lb);
                cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                            trans_b ? CblasTrans : CblasNoTrans, (int)mi, (int)nj, (int)kn, alpha,
                            pa, la, pb, lb, k0 ? 1.0f : beta, pc, lc);
            }
            cpu_gemm_finish(t, c32, pc, lc, i0, mi, j0, nj, bias, bias_axis, c, ldc);
        }
    }
}

/* Element s*stride of operand x (fp32 when is_f32, else of type t). */
static const void *cpu_nth(hfl_precision t, const void *x, int is_f32, long long stride, int s) {
    return hfl_at(is_f32 ? HFL_PREC_FP32 : t, x, (size_t)(s * stride));
}

static void cpu_gemm_strided(hfl_precision t, unsigned f32_mask, int trans_a, int trans_b, int m,
                             int n, int k, float alpha, const void *a, int lda, long long stride_a,
                             const void *b, int ldb, long long stride_b, float beta, void *c,
                             int ldc, long long stride_c, int count, const void *bias,
                             int bias_axis, void *ws) {
    for (int s = 0; s < count; s++)
        cpu_gemm(t, f32_mask, trans_a, trans_b, m, n, k, alpha,
                 cpu_nth(t, a, f32_mask & HFL_GEMM_A_F32, stride_a, s), lda,
                 cpu_nth(t, b, f32_mask & HFL_GEMM_B_F32, stride_b, s), ldb, beta,
                 (void *)cpu_nth(t, c, f32_mask & HFL_GEMM_C_F32, stride_c, s), ldc, bias,
                 bias_axis, ws);
}

/* Row by row so the inner loop runs over contiguous memory. */
static inline __attribute__((always_inline)) void bias_grad_in(hfl_precision t, float *dbias,
                                                               const void *dy, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dbias[c] += hfl_ld(t, dy, (size_t)r * cols + c);
}
static void cpu_bias_grad(hfl_precision t, float *dbias, const void *dy, int rows, int cols,
                          int accumulate) {
    if (!accumulate) memset(dbias, 0, (size_t)(cols > 0 ? cols : 0) * sizeof *dbias); /* all +0, as fill */
    if (t == HFL_PREC_FP32) bias_grad_in(HFL_PREC_FP32, dbias, dy, rows, cols);
    else if (t == HFL_PREC_BF16) bias_grad_in(HFL_PREC_BF16, dbias, dy, rows, cols);
    else bias_grad_in(HFL_PREC_FP16, dbias, dy, rows, cols);
}

static inline __attribute__((always_inline)) void relu_fwd_in(hfl_precision t, void *y,
                                                              const void *x, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_thread_relu_fwd(i, t, y, x);
}
static void cpu_relu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    if (t == HFL_PREC_FP32) relu_fwd_in(HFL_PREC_FP32, y, x, n);
    else if (t == HFL_PREC_BF16) relu_fwd_in(HFL_PREC_BF16, y, x, n);
    else relu_fwd_in(HFL_PREC_FP16, y, x, n);
}

static inline __attribute__((always_inline)) void
relu_bwd_in(hfl_precision t, void *dx, const void *dy, const void *y, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_thread_relu_bwd(i, t, dx, dy, y);
}
static void cpu_relu_bwd(hfl_precision t, void *dx, const void *dy, const void *y, size_t n) {
    if (t == HFL_PREC_FP32) relu_bwd_in(HFL_PREC_FP32, dx, dy, y, n);
    else if (t == HFL_PREC_BF16) relu_bwd_in(HFL_PREC_BF16, dx, dy, y, n);
    else relu_bwd_in(HFL_PREC_FP16, dx, dy, y, n);
}

/* Adds one batch's summed loss, hits and rows to the step scalars. The batch
 * is summed on its own first (from 0, rows in order), so a caller that reset
 * loss_sum reads exactly the batch's total. */
static void cpu_scalars_add(hfl_step_scalars *sc, double total, int n_correct, int rows) {
    sc->loss_sum += total;
    sc->correct += n_correct;
    sc->rows += rows;
}

/* Row losses summed in double: the mean over a large evaluation batch should
 * not depend on float rounding order. A 2-byte row is widened into ws once
 * (rather than each of the body's three passes widening it) and its
 * gradient rounded from ws: the same bits as the body on the 2-byte row. */
static void cpu_softmax_xent(hfl_precision t, const void *logits, const int32_t *labels,
                             void *dlogits, int rows, int cols, int mean_rows, hfl_step_scalars *sc,
                             float *ws) {
    if (rows <= 0) return;
    double total = 0.0;
    int n_correct = 0;
    float scale = sc->loss_scale / (float)mean_rows;
    for (int r = 0; r < rows; r++) {
        int ok;
        const void *z = hfl_at(t, logits, (size_t)r * cols);
        void *drow = dlogits ? hfl_at(t, dlogits, (size_t)r * cols) : NULL;
        if (t == HFL_PREC_FP32) {
            total += hfl_op_softmax_xent_row(HFL_PREC_FP32, z, labels[r], drow, cols, scale, &ok);
        } else {
            for (int c = 0; c < cols; c++) ws[c] = hfl_ld(t, z, c);
            total += hfl_op_softmax_xent_row(HFL_PREC_FP32, ws, labels[r], drow ? ws + cols : NULL,
                                             cols, scale, &ok);
            for (int c = 0; drow && c < cols; c++) hfl_st(t, drow, c, ws[cols + c]);
        }
        n_correct += ok;
    }
    cpu_scalars_add(sc, total, n_correct, rows);
}

static inline __attribute__((always_inline)) void convert_in(hfl_precision t, void *dst,
                                                             const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) hfl_thread_convert(i, t, dst, src);
}
static void cpu_convert(hfl_precision t, void *dst, const float *src, size_t n) {
    if (t == HFL_PREC_FP32) convert_in(HFL_PREC_FP32, dst, src, n);
    else if (t == HFL_PREC_BF16) convert_in(HFL_PREC_BF16, dst, src, n);
    else convert_in(HFL_PREC_FP16, dst, src, n);
}

/* The optimizers update the fp32 masters in one pass (their bodies in fp32,
 * the working copy the masters themselves: the same values the bodies
 * store in one pass on a GPU), then round a 2-byte working copy from them. */
static void cpu_sgd_step(hfl_precision t, float *master, float *v, const float *g, void *w,
                         size_t n, float lr, float momentum, float wd,
                         const hfl_step_scalars *skip_if_nonfinite) {
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return;
    for (size_t i = 0; i < n; i++)
        hfl_thread_sgd_step(i, HFL_PREC_FP32, master, v, g, master, lr, momentum, wd);
    if (w != master) cpu_convert(t, w, master, n);
}

/* With a.sc: the step counted and its bias corrections read on the
 * "device", as the CUDA kernels do (ops_hd.h, AdamW). */
static void cpu_adamw_step(hfl_precision t, float *master, float *m, float *v, const float *g,
                           void *w, size_t n, hfl_adamw_args a,
                           const hfl_step_scalars *skip_if_nonfinite) {
    if (skip_if_nonfinite && !skip_if_nonfinite->finite) return;
    if (a.sc) {
        hfl_op_adamw_count(a.sc, a.beta1, a.beta2, skip_if_nonfinite);
        hfl_op_adamw_bias(a.sc, &a);
    }
    for (size_t i = 0; i < n; i++)
        hfl_thread_adamw_step(i, HFL_PREC_FP32, master, m, v, g, master, a);
    if (w != master) cpu_convert(t, w, master, n);
}

static void cpu_prox_grad(float *g, const float *w, const float *anchor, size_t n, float mu) {
    for (size_t i = 0; i < n; i++) g[i] = hfl_op_prox_grad(g[i], w[i], anchor[i], mu);
}

static void cpu_fill(float *p, float value, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = value;
}

/* The output columns [*lo, *hi) whose tap kx lands inside the input row
 * (ix = ox*s - p + kx in [0, w)); the rest read padding. */
static void cpu_tap_range(const hfl_window_geom *g, int kx, int *lo, int *hi) {
    int first = g->p - kx; /* smallest ox*s allowed */
    *lo = first <= 0 ? 0 : (first + g->s - 1) / g->s;
    int last = g->w - 1 + g->p - kx; /* largest ox*s allowed */
    *hi = last < 0 ? 0 : last / g->s + 1;
    if (*hi > g->wo) *hi = g->wo;
    if (*lo > *hi) *lo = *hi;
}

/* Row by row: for each (ci, ky, kx, sample, oy) the valid taps form one run
 * of columns, found once per kx, so the inner loop is a strided copy. The
 * columns are in the chunk layout [C*k*k, n*ho*wo] (kernels/backend.h), which
 * this loop order writes in memory order. The mapping is
 * hfl_op_im2col_src's (the tests compare the two bit for bit). */
static inline __attribute__((always_inline)) void
im2col_in(hfl_precision t, void *cols, const void *x, int n, hfl_window_geom g) {
    size_t in_size = (size_t)g.c * g.h * g.w, at = 0;
    for (int ci = 0; ci < g.c; ci++)
        for (int ky = 0; ky < g.k; ky++)
            for (int kx = 0; kx < g.k; kx++)
                for (int i = 0; i < n; i++) {
                    int lo, hi;
                    cpu_tap_range(&g, kx, &lo, &hi);
                    for (int oy = 0; oy < g.ho; oy++, at += (size_t)g.wo) {
                        int iy = oy * g.s - g.p + ky, l = lo, h = hi;
                        if (iy < 0 || iy >= g.h) l = h = g.wo; /* a row of padding */
                        /* column ox copies input element src + ox * s */
                        long src =
                            (long)((size_t)i * in_size) + ((long)ci * g.h + iy) * g.w - g.p + kx;
                        for (int ox = 0; ox < l; ox++) hfl_st(t, cols, at + ox, 0.0f);
                        for (int ox = l; ox < h; ox++)
                            hfl_cp(t, cols, at + ox, x, (size_t)(src + (long)ox * g.s));
                        for (int ox = h; ox < g.wo; ox++) hfl_st(t, cols, at + ox, 0.0f);
                    }
                }
}

static void cpu_im2col(hfl_precision t, void *cols, const void *x, int n, hfl_window_geom g) {
    if (t == HFL_PREC_FP32) im2col_in(HFL_PREC_FP32, cols, x, n, g);
    else if (t == HFL_PREC_BF16) im2col_in(HFL_PREC_BF16, cols, x, n, g);
    else im2col_in(HFL_PREC_FP16, cols, x, n, g);
}

static inline __attribute__((always_inline)) void
col2im_gather_in(hfl_precision t, void *dx, const float *cols, int n, hfl_window_geom g) {
    size_t count = (size_t)n * g.c * g.h * g.w;
    for (size_t i = 0; i < count; i++) hfl_thread_col2im(i, t, dx, cols, g, n);
}

/* fp32: scatter form, each column entry added to the pixel im2col copied it
 * from. For any one pixel the additions come in (ky, kx) order starting from
 * zero, exactly as hfl_op_col2im (the gather form a GPU thread runs) sums
 * them, so both give the same bits; the scatter skips gather's k*k search.
 * A 2-byte dx takes the gather form (each element summed in fp32, rounded
 * once), so no fp32 image of dx is needed. */
static void cpu_col2im(hfl_precision t, void *dx, const float *cols, int n, hfl_window_geom g) {
    size_t in_size = (size_t)g.c * g.h * g.w;
    if (t != HFL_PREC_FP32) {
        if (t == HFL_PREC_BF16) col2im_gather_in(HFL_PREC_BF16, dx, cols, n, g);
        else col2im_gather_in(HFL_PREC_FP16, dx, cols, n, g);
        return;
    }
    memset(dx, 0, (size_t)n * in_size * sizeof(float));
    for (int ci = 0; ci < g.c; ci++)
        for (int ky = 0; ky < g.k; ky++)
            for (int kx = 0; kx < g.k; kx++)
                for (int i = 0; i < n; i++) {
                    float *d = (float *)dx + (size_t)i * in_size;
                    int lo, hi;
                    cpu_tap_range(&g, kx, &lo, &hi);
                    for (int oy = 0; oy < g.ho; oy++, cols += g.wo) {
                        int iy = oy * g.s - g.p + ky;
                        if (iy < 0 || iy >= g.h) continue;
                        float *dst = d + ((size_t)ci * g.h + iy) * g.w - g.p + kx;
                        for (int ox = lo; ox < hi; ox++) dst[ox * g.s] += cols[ox];
                    }
                }
}

static inline __attribute__((always_inline)) void
maxpool_fwd_in(hfl_precision t, void *y, const void *x, int n, hfl_window_geom g) {
    size_t planes = (size_t)n * g.c, in_plane = (size_t)g.h * g.w, o = 0;
    for (size_t q = 0; q < planes; q++) {
        const void *xp = hfl_at(t, x, q * in_plane);
        for (int oy = 0; oy < g.ho; oy++)
            for (int ox = 0; ox < g.wo; ox++, o++)
                hfl_cp(t, y, o, xp, (size_t)hfl_op_maxpool_argmax(t, xp, &g, oy, ox));
    }
}

static void cpu_maxpool_fwd(hfl_precision t, void *y, const void *x, int n, hfl_window_geom g) {
    if (t == HFL_PREC_FP32) maxpool_fwd_in(HFL_PREC_FP32, y, x, n, g);
    else if (t == HFL_PREC_BF16) maxpool_fwd_in(HFL_PREC_BF16, y, x, n, g);
    else maxpool_fwd_in(HFL_PREC_FP16, y, x, n, g);
}

/* Scatter form: each window's dy goes to its first maximum. Per input the
 * additions come in window (oy, ox) order from zero, as in the gather form
 * hfl_op_maxpool_bwd, so both give the same bits; the scatter finds each
 * window's argmax once instead of once per input it covers. A 2-byte dx
 * scatters only when windows do not overlap (s >= k: each input gets at
 * most one dy, so 0 + dy is rounded once, and turns -0 into +0 as the
 * gather's sum does); overlapping windows gather, each input summed in fp32
 * and rounded once. */
static inline __attribute__((always_inline)) void
maxpool_bwd_in(hfl_precision t, void *dx, const void *dy, const void *x, int n, hfl_window_geom g) {
    size_t planes = (size_t)n * g.c, in_plane = (size_t)g.h * g.w, out_plane = (size_t)g.ho * g.wo;
    if (t != HFL_PREC_FP32 && g.s < g.k) {
        for (size_t q = 0; q < planes; q++)
            for (int iy = 0; iy < g.h; iy++)
                for (int ix = 0; ix < g.w; ix++)
                    hfl_st(t, dx, q * in_plane + (size_t)iy * g.w + ix,
                           hfl_op_maxpool_bwd(t, hfl_at(t, x, q * in_plane),
                                              hfl_at(t, dy, q * out_plane), &g, iy, ix));
        return;
    }
    memset(dx, 0, planes * in_plane * hfl_precision_bytes(t));
    for (size_t q = 0, o = 0; q < planes; q++) {
        const void *xp = hfl_at(t, x, q * in_plane);
        for (int oy = 0; oy < g.ho; oy++)
            for (int ox = 0; ox < g.wo; ox++, o++) {
                size_t at = q * in_plane + (size_t)hfl_op_maxpool_argmax(t, xp, &g, oy, ox);
                hfl_st(t, dx, at, hfl_ld(t, dx, at) + hfl_ld(t, dy, o));
            }
    }
}

static void cpu_maxpool_bwd(hfl_precision t, void *dx, const void *dy, const void *x, int n,
                            hfl_window_geom g) {
    if (t == HFL_PREC_FP32) maxpool_bwd_in(HFL_PREC_FP32, dx, dy, x, n, g);
    else if (t == HFL_PREC_BF16) maxpool_bwd_in(HFL_PREC_BF16, dx, dy, x, n, g);
    else maxpool_bwd_in(HFL_PREC_FP16, dx, dy, x, n, g);
}

/* The lane tree of kernels/ops_hd.h: each sample's row of the channel is
 * dealt to the lanes in position order (value e to lane e % LANES, e
 * counting on from the previous sample's row), so every lane adds its values
 * in increasing e as hfl_op_channel_lane does, then the same tree levels:
 * hfl_block_channel_bias_grad's bits in one pass over dy. */
static inline __attribute__((always_inline)) void
channel_bias_grad_in(hfl_precision t, float *dbias, const void *dy, int n, int c, int hw, int accumulate) {
    for (int ch = 0; ch < c; ch++) {
        float p[HFL_CHANNEL_LANES] = {0};
        size_t e = 0;
        for (int i = 0; i < n; i++) {
            size_t row = ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++, e++) p[e % HFL_CHANNEL_LANES] += hfl_ld(t, dy, row + j);
        }
        for (int half = HFL_CHANNEL_LANES / 2; half > 0; half /= 2)
            for (int j = 0; j < half; j++) hfl_op_tree_level(p, j, half);
        dbias[ch] = (accumulate ? dbias[ch] : 0.0f) + p[0];
    }
}
static void cpu_channel_bias_grad(hfl_precision t, float *dbias, const void *dy, int n, int c,
                                  int hw, int accumulate) {
    if (t == HFL_PREC_FP32) channel_bias_grad_in(HFL_PREC_FP32, dbias, dy, n, c, hw, accumulate);
    else if (t == HFL_PREC_BF16) channel_bias_grad_in(HFL_PREC_BF16, dbias, dy, n, c, hw, accumulate);
    else channel_bias_grad_in(HFL_PREC_FP16, dbias, dy, n, c, hw, accumulate);
}

static void cpu_unscale_grads(float *g, size_t n, hfl_step_scalars *sc) {
    int finite = 1;
    float inv_scale = 1.0f / sc->loss_scale;
    for (size_t i = 0; i < n; i++) g[i] = hfl_op_unscale(g[i], inv_scale, &finite);
    sc->finite = finite;
}

static void cpu_scaler_update(hfl_step_scalars *sc, int interval) {
    hfl_op_scaler_update(sc, interval);
}

/* ---- synchronisation and the input pipeline: all immediate on the CPU ---- */

static void cpu_sync(void) { count_wait(&n_syncs); }

static int cpu_mem_info(uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)free_bytes, (void)total_bytes;
    return -1; /* RSS (util/memmeter.h) is the CPU's measure */
}

static void cpu_set_blas_workspace(void *p, size_t bytes) { (void)p, (void)bytes; }

static void *cpu_host_alloc(size_t bytes) { return malloc(bytes ? bytes : 1); }

static void cpu_host_free(void *p) {
    if (p) count_wait(&n_syncs); /* cudaFreeHost waits for the device */
    free(p);
}

static void cpu_stage_wait(int slot) {
    (void)slot;
    count_wait(&n_stage_waits);
}

static void cpu_slot_nop(int slot) { (void)slot; }

static void cpu_prefetch(void *dst, const void *src, size_t bytes, int slot) {
    (void)slot;
    cpu_memcpy(dst, src, bytes);
}

/* ---- profiling marks (kernels/profile.h): the monotonic clock ---- */

static double cpu_marks[HFL_PROFILE_MARKS];

static void cpu_mark(int i) {
    if (i >= 0 && i < HFL_PROFILE_MARKS) cpu_marks[i] = hfl_now();
}

static double cpu_mark_ms(int a, int b) {
    if (a < 0 || b < 0 || a >= HFL_PROFILE_MARKS || b >= HFL_PROFILE_MARKS) return 0.0;
    return (cpu_marks[b] - cpu_marks[a]) * 1e3;
}

extern const hfl_lm_ops hfl_cpu_lm_ops; /* lm_cpu.c */

static const hfl_backend cpu_backend = {
    .name = "cpu",
    .host_memory = 1,
    .alloc = cpu_alloc,
    .try_alloc = cpu_try_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_memcpy,
    .gemm = cpu_gemm,
    .gemm_strided = cpu_gemm_strided,
    .bias_grad = cpu_bias_grad,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .softmax_xent = cpu_softmax_xent,
    .sgd_step = cpu_sgd_step,
    .adamw_step = cpu_adamw_step,
    .prox_grad = cpu_prox_grad,
    .fill = cpu_fill,
    .convert = cpu_convert,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .channel_bias_grad = cpu_channel_bias_grad,
    .unscale_grads = cpu_unscale_grads,
    .scaler_update = cpu_scaler_update,
    .sync = cpu_sync,
    .host_waits = cpu_host_waits,
    .mem_info = cpu_mem_info,
    .set_blas_workspace = cpu_set_blas_workspace,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .stage_wait = cpu_stage_wait,
    .prefetch = cpu_prefetch,
    .await_prefetch = cpu_slot_nop,
    .release_input = cpu_slot_nop,
    .mark = cpu_mark,
    .mark_ms = cpu_mark_ms,
    .lm = &hfl_cpu_lm_ops,
    .agg = &hfl_cpu_agg_ops,
};

const hfl_backend *hfl_backend_cpu(void) { return &cpu_backend; }
