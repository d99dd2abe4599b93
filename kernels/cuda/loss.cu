/* loss.cu: the CUDA backend's softmax cross-entropy (logits of any storage type).
 *
 * One block: thread t runs the row body of kernels/thread_hd.h for rows t,
 * t + LOSS_THREADS, ..., summing its row losses in double; the block then
 * adds the partial sums in a fixed tree (the same pairs every run, so the
 * result is deterministic) and one thread adds the batch's total, hit count
 * and rows to the device scalars. Nothing returns to the host.
 *
 * Against the CPU backend: each row's dlogits and loss come from the same
 * body, but the device's expf/logf are not glibc's (within 2 ulp), so they
 * agree within a few ulp rather than bit for bit; and the batch total is
 * summed in a tree instead of row order (double, so the difference is ~1e-16
 * relative). The argmax hits are exact. Batches are at most a few thousand
 * rows of a few classes, so one block is enough; a block per row with split
 * bodies would serve large class counts. */
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/thread_hd.h"

#define LOSS_THREADS 256

/* Sums every thread's (loss, hits) in a fixed order and adds the totals
 * to sc (thread 0). Every thread of the block must call it. */
static __device__ void loss_block_add(double loss, int hits, int rows, hfl_step_scalars *sc) {
    __shared__ double part[LOSS_THREADS];
    __shared__ int part_hits[LOSS_THREADS];
    unsigned t = threadIdx.x;
    part[t] = loss;
    part_hits[t] = hits;
    __syncthreads();
    for (unsigned half = LOSS_THREADS / 2; half > 0; half /= 2) {
        if (t < half) {
            part[t] += part[t + half];
            part_hits[t] += part_hits[t + half];
        }
        __syncthreads();
    }
    if (t == 0) {
        sc->loss_sum += part[0];
        sc->correct += part_hits[0];
        sc->rows += rows;
    }
}

/* The gradient scale is read here, on the device: the loss scale the
 * previous step's scaler_update left in sc (1 outside fp16). */
static __global__ __launch_bounds__(LOSS_THREADS) void k_softmax_xent(
    hfl_precision t, const void *logits, const int32_t *labels, void *dlogits, int rows, int cols,
    int mean_rows, hfl_step_scalars *sc) {
    float scale = sc->loss_scale / (float)mean_rows;
    double loss = 0.0;
    int hits = 0;
    for (size_t r = threadIdx.x; r < (size_t)rows; r += LOSS_THREADS) {
        int ok;
        loss += hfl_thread_softmax_xent(r, t, logits, labels, dlogits, cols, scale, &ok);
        hits += ok;
    }
    loss_block_add(loss, hits, rows, sc);
}

extern "C" void cuda_softmax_xent(hfl_precision t, const void *logits, const int32_t *labels,
                                  void *dlogits, int rows, int cols, int mean_rows,
                                  hfl_step_scalars *sc, float *ws) {
    (void)ws; /* the CPU's row staging; a thread widens the row where it reads it */
    if (rows <= 0) return;
    k_softmax_xent<<<1, LOSS_THREADS, 0, hfl_cuda_ctx.compute>>>(t, logits, labels, dlogits, rows,
                                                                 cols, mean_rows, sc);
    CUDA_CHECK_LAUNCH();
}
