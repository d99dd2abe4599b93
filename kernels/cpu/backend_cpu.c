/* backend_cpu.c: the reference backend: host memory, OpenBLAS sgemm, and
 * loops over the per-element formulas of kernels/ops_hd.h.
 *
 * "Device" memory is ordinary 64-byte aligned host memory, so upload,
 * download and copy are memcpy. Every op is a plain loop calling the HFL_HD
 * body; the CUDA backend runs the same bodies one per thread. The number of
 * OpenBLAS threads is left to the caller (OPENBLAS_NUM_THREADS or
 * openblas_set_num_threads): small GEMMs are often faster on one. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/ops_hd.h"

#define CPU_ALIGN 64

static void *cpu_alloc(size_t bytes) {
    /* aligned_alloc wants a multiple of the alignment; never ask for 0 bytes. */
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (rounded == 0) rounded = CPU_ALIGN;
    void *p = aligned_alloc(CPU_ALIGN, rounded);
    if (!p) {
        fprintf(stderr, "hfl: cpu backend: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

static void cpu_free(void *p) { free(p); }

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

static const hfl_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
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
};

const hfl_backend *hfl_backend_cpu(void) { return &cpu_backend; }
