/* conv.cu: the CUDA backend's convolution and pooling ops over n samples
 * [n, C, H, W], each in its storage type: im2col, col2im, max pooling
 * forward and backward, and the per-channel bias gradient (the bias add is
 * gemm's, gemm.c).
 *
 * One thread per output element, each a thread body of kernels/thread_hd.h
 * over the gather-form bodies of kernels/ops_hd.h: no atomics, every sum in
 * the CPU backend's order, so the results are the CPU's bit for bit
 * (tests/kernels/test_thread_bodies.c on the CPU, tests/gpu/test_cuda_ops.c
 * on a GPU). A convolution unfolds a chunk of n samples per call into the
 * chunk layout [C*k*k, n*ho*wo] (kernels/backend.h), so model/conv.c takes
 * its weight gradient as one GEMM per chunk. The channel bias gradient is a
 * block of HFL_CHANNEL_LANES threads per channel running the fixed lane tree
 * of kernels/ops_hd.h (the lanes, then one tree level per barrier), whose
 * CPU twin (hfl_block_channel_bias_grad, the CPU backend) gives the same
 * bits; it replaced one thread per channel adding n*hw values in turn
 * (conv1 of the cnn at batch 128: 32 threads, 100,352 dependent adds). */
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
                                int n, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_im2col(i, t, cols, x, g, n);
}

static __global__ void k_col2im(hfl_precision t, void *dx, const float *cols, hfl_window_geom g,
                                int n, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_thread_col2im(i, t, dx, cols, g, n);
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

/* Block ch (blockDim.x == HFL_CHANNEL_LANES): thread `lane` sums its lane,
 * then each level adds pairs below `half`, as hfl_block_channel_bias_grad. */
static __global__ void k_channel_bias_grad(hfl_precision t, float *dbias, const void *dy, int n,
                                           int c, int hw, int accumulate) {
    __shared__ float p[HFL_CHANNEL_LANES];
    int ch = (int)blockIdx.x, lane = (int)threadIdx.x;
    p[lane] = hfl_op_channel_lane(t, dy, n, c, hw, ch, lane);
    __syncthreads();
    for (int half = HFL_CHANNEL_LANES / 2; half > 0; half /= 2) {
        if (lane < half) hfl_op_tree_level(p, lane, half);
        __syncthreads();
    }
    if (lane == 0) dbias[ch] = (accumulate ? dbias[ch] : 0.0f) + p[0];
}

extern "C" void cuda_im2col(hfl_precision t, void *cols, const void *x, int n, hfl_window_geom g) {
    size_t count = col_count(n, g);
    if (count) LAUNCH(k_im2col, count, t, cols, x, g, n, count);
}

extern "C" void cuda_col2im(hfl_precision t, void *dx, const float *cols, int n,
                            hfl_window_geom g) {
    size_t count = in_count(n, g);
    if (count) LAUNCH(k_col2im, count, t, dx, cols, g, n, count);
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
                                       int hw, int accumulate) {
    if (c <= 0) return;
    k_channel_bias_grad<<<(unsigned)c, HFL_CHANNEL_LANES, 0, hfl_cuda_ctx.compute>>>(t, dbias, dy, n,
                                                                                     c, hw, accumulate);
    CUDA_CHECK(cudaGetLastError());
}
