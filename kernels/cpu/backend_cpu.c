/* backend_cpu.c: the reference backend: host memory, OpenBLAS sgemm, and
 * loops over the per-element formulas of kernels/ops_hd.h.
 *
 * "Device" memory is ordinary 64-byte aligned host memory, so upload,
 * download and copy are memcpy. The allocator counts live bytes (and their
 * high-water mark) and enforces an optional process-wide budget
 * (hfl_backend_cpu_set_budget): try_alloc refuses with a one-line error,
 * alloc prints it and exits. Memory is not touched at allocation, so pages
 * become resident (and visible to util/memmeter.h) only when written.
 * Every op is a plain loop calling the HFL_HD body; the CUDA backend runs
 * the same bodies one per thread. The number of OpenBLAS threads is left to
 * the caller (OPENBLAS_NUM_THREADS or openblas_set_num_threads): small GEMMs
 * are often faster on one.
 * Convolution and pooling loops walk samples, channels and positions in
 * memory order and call the bodies of ops_hd.h per element; col2im and the
 * max-pool backward scatter (cheaper on one core) in an order that sums
 * each element exactly as the gather-form bodies a GPU runs would. */
#include <cblas.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/ops_hd.h"
#include "util/util.h"

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

/* Process-wide accounting; atomics so any thread may allocate and free. */
static _Atomic uint64_t cpu_budget;
static _Atomic uint64_t cpu_live;
static _Atomic uint64_t cpu_peak;

void hfl_backend_cpu_set_budget(uint64_t bytes) { atomic_store(&cpu_budget, bytes); }
uint64_t hfl_backend_cpu_budget(void) { return atomic_load(&cpu_budget); }
uint64_t hfl_backend_cpu_live_bytes(void) { return atomic_load(&cpu_live); }
uint64_t hfl_backend_cpu_peak_bytes(void) { return atomic_load(&cpu_peak); }
void hfl_backend_cpu_reset_peak(void) { atomic_store(&cpu_peak, atomic_load(&cpu_live)); }

/* Reserves bytes against the budget: a compare-and-swap loop, so two threads
 * racing for the last bytes cannot both get them. On success *live_seen is
 * the live total just after; on refusal *live_seen and *budget_seen hold the
 * figures that refused it, for the message. */
static int cpu_reserve(uint64_t bytes, uint64_t *live_seen, uint64_t *budget_seen) {
    uint64_t live = atomic_load(&cpu_live);
    for (;;) {
        uint64_t budget = atomic_load(&cpu_budget);
        if (budget && (bytes > budget || live > budget - bytes)) {
            *live_seen = live, *budget_seen = budget;
            return -1;
        }
        if (atomic_compare_exchange_weak(&cpu_live, &live, live + bytes)) {
            *live_seen = live + bytes;
            return 0;
        }
    }
}

/* Raises the high-water mark to live (once the memory is really had). */
static void cpu_note_peak(uint64_t live) {
    uint64_t peak = atomic_load(&cpu_peak);
    while (live > peak && !atomic_compare_exchange_weak(&cpu_peak, &peak, live)) {
    }
}

static void *cpu_try_alloc(size_t bytes, char *err) {
    uint64_t live = 0, budget = 0;
    /* Larger than any address space: refuse before it can wrap the counters. */
    if (bytes > SIZE_MAX / 2) {
        hfl_errf(err, "cpu backend: out of memory allocating %zu bytes (%llu bytes live)", bytes,
                 (unsigned long long)atomic_load(&cpu_live));
        return NULL;
    }
    if (cpu_reserve(bytes, &live, &budget) != 0) {
        hfl_errf(err,
                 "cpu backend: allocating %zu bytes would exceed the memory budget: %llu bytes "
                 "live, budget %llu bytes",
                 bytes, (unsigned long long)live, (unsigned long long)budget);
        return NULL;
    }
    /* aligned_alloc wants a multiple of the alignment; never ask for 0 bytes. */
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    char *base = aligned_alloc(CPU_ALIGN, CPU_HEADER + rounded);
    if (!base) {
        atomic_fetch_sub(&cpu_live, (uint64_t)bytes);
        hfl_errf(err, "cpu backend: out of memory allocating %zu bytes (%llu bytes live)", bytes,
                 (unsigned long long)atomic_load(&cpu_live));
        return NULL;
    }
    cpu_block_header *h = (cpu_block_header *)base;
    h->bytes = bytes;
    h->magic = CPU_MAGIC_LIVE;
    cpu_note_peak(live);
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

static void cpu_free(void *p) {
    if (!p) return;
    char *base = (char *)p - CPU_HEADER;
    cpu_block_header *h = (cpu_block_header *)base;
    if (h->magic != CPU_MAGIC_LIVE) {
        /* Freeing twice or freeing memory alloc never gave: the accounting
         * (and likely the heap) is already wrong, so stop here. */
        fprintf(stderr, "hfl: cpu backend: free of %p, which is not a live backend block\n", p);
        abort();
    }
    h->magic = CPU_MAGIC_FREED;
    atomic_fetch_sub(&cpu_live, h->bytes);
    free(base);
}

static void cpu_memcpy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
}

static void cpu_bias_add(float *y, const float *bias, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * cols;
        for (int c = 0; c < cols; c++) row[c] = hfl_op_bias_add(row[c], bias[c]);
    }
}

static void cpu_bias_grad(float *dbias, const float *dy, int rows, int cols) {
    /* Row by row so the inner loop runs over contiguous memory. */
    for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * cols;
        for (int c = 0; c < cols; c++) dbias[c] += row[c];
    }
}

static void cpu_relu_fwd(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = hfl_op_relu(x[i]);
}

static void cpu_relu_bwd(float *dx, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = hfl_op_relu_bwd(dy[i], y[i]);
}

static float cpu_softmax_xent(const float *logits, const int32_t *labels, float *dlogits,
                              int rows, int cols, int *correct) {
    if (rows <= 0) {
        if (correct) *correct = 0;
        return 0.0f;
    }
    /* Sum row losses in double: the mean over a large evaluation batch should
     * not depend on float rounding order. */
    double total = 0.0;
    int n_correct = 0;
    float scale = 1.0f / (float)rows;
    for (int r = 0; r < rows; r++) {
        int ok;
        float *drow = dlogits ? dlogits + (size_t)r * cols : NULL;
        total += hfl_op_softmax_xent_row(logits + (size_t)r * cols, labels[r], drow, cols, scale,
                                         &ok);
        n_correct += ok;
    }
    if (correct) *correct = n_correct;
    return (float)(total / rows);
}

static void cpu_sgd_step(float *w, float *v, const float *g, size_t n, float lr, float momentum,
                         float wd) {
    if (momentum == 0.0f) {
        /* v is unused (and may be NULL) without momentum. */
        float unused = 0.0f;
        for (size_t i = 0; i < n; i++) w[i] = hfl_op_sgd(w[i], &unused, g[i], lr, 0.0f, wd);
        return;
    }
    for (size_t i = 0; i < n; i++) w[i] = hfl_op_sgd(w[i], &v[i], g[i], lr, momentum, wd);
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

/* Row by row: for each (ci, ky, kx, oy) the valid taps form one run of
 * columns, found once per kx, so the inner loop is a strided copy. The
 * mapping is hfl_op_im2col_src's (the tests compare the two bit for bit). */
static void cpu_im2col(float *cols, const float *x, int n, hfl_window_geom g) {
    size_t in_size = (size_t)g.c * g.h * g.w;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * in_size;
        for (int ci = 0; ci < g.c; ci++)
            for (int ky = 0; ky < g.k; ky++)
                for (int kx = 0; kx < g.k; kx++) {
                    int lo, hi;
                    cpu_tap_range(&g, kx, &lo, &hi);
                    for (int oy = 0; oy < g.ho; oy++, cols += g.wo) {
                        int iy = oy * g.s - g.p + ky;
                        if (iy < 0 || iy >= g.h) {
                            memset(cols, 0, (size_t)g.wo * sizeof(float));
                            continue;
                        }
                        const float *src = xi + ((size_t)ci * g.h + iy) * g.w - g.p + kx;
                        for (int ox = 0; ox < lo; ox++) cols[ox] = 0.0f;
                        for (int ox = lo; ox < hi; ox++) cols[ox] = src[ox * g.s];
                        for (int ox = hi; ox < g.wo; ox++) cols[ox] = 0.0f;
                    }
                }
    }
}

/* Scatter form: each column entry is added to the pixel im2col copied it
 * from. For any one pixel the additions come in (ky, kx) order starting from
 * zero, exactly as hfl_op_col2im (the gather form a GPU thread runs) sums
 * them, so both give the same bits; the scatter skips gather's k*k search. */
static void cpu_col2im(float *dx, const float *cols, int n, hfl_window_geom g) {
    size_t in_size = (size_t)g.c * g.h * g.w;
    memset(dx, 0, (size_t)n * in_size * sizeof(float));
    for (int i = 0; i < n; i++) {
        float *d = dx + (size_t)i * in_size;
        for (int ci = 0; ci < g.c; ci++)
            for (int ky = 0; ky < g.k; ky++)
                for (int kx = 0; kx < g.k; kx++) {
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
}

static void cpu_maxpool_fwd(float *y, const float *x, int n, hfl_window_geom g) {
    size_t planes = (size_t)n * g.c, in_plane = (size_t)g.h * g.w;
    for (size_t q = 0; q < planes; q++) {
        const float *xp = x + q * in_plane;
        for (int oy = 0; oy < g.ho; oy++)
            for (int ox = 0; ox < g.wo; ox++) *y++ = xp[hfl_op_maxpool_argmax(xp, &g, oy, ox)];
    }
}

/* Scatter form: each window's dy goes to its first maximum. Per input the
 * additions come in window (oy, ox) order from zero, as in the gather form
 * hfl_op_maxpool_bwd, so both give the same bits; the scatter finds each
 * window's argmax once instead of once per input it covers. */
static void cpu_maxpool_bwd(float *dx, const float *dy, const float *x, int n, hfl_window_geom g) {
    size_t planes = (size_t)n * g.c, in_plane = (size_t)g.h * g.w;
    memset(dx, 0, planes * in_plane * sizeof(float));
    for (size_t q = 0; q < planes; q++) {
        const float *xp = x + q * in_plane;
        float *dxp = dx + q * in_plane;
        for (int oy = 0; oy < g.ho; oy++)
            for (int ox = 0; ox < g.wo; ox++) dxp[hfl_op_maxpool_argmax(xp, &g, oy, ox)] += *dy++;
    }
}

static void cpu_channel_bias_add(float *y, const float *bias, int n, int c, int hw) {
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            float *row = y + ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++) row[j] = hfl_op_bias_add(row[j], bias[ch]);
        }
}

static void cpu_channel_bias_grad(float *dbias, const float *dy, int n, int c, int hw) {
    for (int ch = 0; ch < c; ch++) dbias[ch] += hfl_op_channel_sum(dy, n, c, hw, ch);
}

static const hfl_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .try_alloc = cpu_try_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .sgemm = cpu_sgemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .softmax_xent = cpu_softmax_xent,
    .sgd_step = cpu_sgd_step,
    .fill = cpu_fill,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .channel_bias_add = cpu_channel_bias_add,
    .channel_bias_grad = cpu_channel_bias_grad,
};

const hfl_backend *hfl_backend_cpu(void) { return &cpu_backend; }
