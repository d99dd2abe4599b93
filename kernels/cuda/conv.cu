/* conv.cu: the CUDA backend's convolution and pooling ops over n samples
 * [n, C, H, W], each in its storage type: im2col, col2im, max pooling
 * forward and backward, and the per-channel bias gradient (the bias add is
 * gemm's, gemm.c).
 *
 * One thread per output element, each a thread body of kernels/thread_hd.h
 * over the gather-form bodies of kernels/ops_hd.h: no atomics, every sum in
 * the CPU backend's order, so the results are the CPU's bit for bit
 * (tests/kernels/test_thread_bodies.c on the CPU, tests/gpu/test_cuda_ops.c
 * on a GPU). Convolutions still unfold one chunk of n samples per call, with
 * the GEMMs of the layer around it; batching them is a later step. The
 * channel gradient runs one thread per channel through n * hw values in
 * order: simple and bit-identical, slow for big layers (a block-per-channel
 * fixed-order tree would change the bits; only if profiling asks). */
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/thread_hd.h"

#define LAUNCH HFL_CUDA_LAUNCH

static size_t count_of(size_t a, size_t b, size_t c, size_t d) { return a * b * c * d; }

/* Elements of n samples' inputs, columns and pooled outputs (0 when a
 * dimension is not positive). */
static size_t in_count(int n, hfl_window_geom g) {
    return n > 0 && g.c > 0 && g.h > 0 && g.w > 0 ? count_of(n, g.c, g.h, g.w) : 0;
}
static size_t col_count(int n, hfl_window_geom g) {
    return n > 0 && g.c > 0 && g.k > 0 && g.ho > 0 && g.wo > 0
               ? count_of(n, g.c, (size_t)g.k * g.k, (size_t)g.ho * g.wo)
               : 0;
}
static size_t out_count(int n, hfl_window_geom g) {
    return n > 0 && g.c > 0 && g.ho > 0 && g.wo > 0 ? count_of(n, g.c, g.ho, g.wo) : 0;
}

static __global__ void k_im2col(hfl_precision t, void *cols, const void *x, hfl_window_geom g,
                                size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_im2col(i, t, cols, x, g);
}

static __global__ void k_col2im(hfl_precision t, void *dx, const float *cols, hfl_window_geom g,
                                size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_col2im(i, t, dx, cols, g);
}

static __global__ void k_maxpool_fwd(hfl_precision t, void *y, const void *x, hfl_window_geom g,
                                     size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_maxpool_fwd(i, t, y, x, g);
}

static __global__ void k_maxpool_bwd(hfl_precision t, void *dx, const void *dy, const void *x,
                                     hfl_window_geom g, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_maxpool_bwd(i, t, dx, dy, x, g);
}

static __global__ void k_channel_bias_grad(hfl_precision t, float *dbias, const void *dy, int n,
                                           int c, int hw) {
    size_t i = hfl_cuda_index();
    if (i >= (size_t)c) return;
    hfl_thread_channel_bias_grad(i, t, dbias, dy, n, c, hw);
}

extern "C" void cuda_im2col(hfl_precision t, void *cols, const void *x, int n, hfl_window_geom g) {
    size_t count = col_count(n, g);
    if (count) LAUNCH(k_im2col, count, t, cols, x, g, count);
}

extern "C" void cuda_col2im(hfl_precision t, void *dx, const float *cols, int n,
                            hfl_window_geom g) {
    size_t count = in_count(n, g);
    if (count) LAUNCH(k_col2im, count, t, dx, cols, g, count);
}

extern "C" void cuda_maxpool_fwd(hfl_precision t, void *y, const void *x, int n,
                                 hfl_window_geom g) {
    size_t count = out_count(n, g);
    if (count) LAUNCH(k_maxpool_fwd, count, t, y, x, g, count);
}

extern "C" void cuda_maxpool_bwd(hfl_precision t, void *dx, const void *dy, const void *x, int n,
                                 hfl_window_geom g) {
    size_t count = in_count(n, g);
    if (count) LAUNCH(k_maxpool_bwd, count, t, dx, dy, x, g, count);
}

extern "C" void cuda_channel_bias_grad(hfl_precision t, float *dbias, const void *dy, int n, int c,
                                       int hw) {
    if (c > 0) LAUNCH(k_channel_bias_grad, (size_t)c, t, dbias, dy, n, c, hw);
}
