/* loss.cu: the CUDA backend's softmax cross-entropy (logits of any storage type).
 *
 * A warp per row, LOSS_WARPS rows a block at a time, the rows dealt over at
 * most LOSS_BLOCKS blocks. The warp splits ops_hd.h's row body as its
 * comment there says (the lanes' argmax candidates combined in a shuffle
 * tree; the exponentials computed by all lanes and staged in shared memory,
 * then summed by lane 0 in column order; the dlogits by all lanes), so each
 * row's dlogits, loss and argmax hit are the CPU's, up to the device's
 * expf/logf, which differ from glibc's within 2 ulp. A lane 0 sums its warp's
 * row losses in double; the block adds its warps' in order and leaves the
 * total in loss_part; the block that arrives last (a fence, then a counter:
 * the CUDA samples' threadFenceReduction) adds the blocks' totals in block
 * order to the device scalars. The result is deterministic; against the
 * CPU's row-order double sum it differs by ~1e-16 relative. Nothing returns
 * to the host.
 *
 * The partials and the counter are the module's own device globals: this
 * kernel is launched only on the context's one compute stream
 * (cuda_internal.h), so no two launches of it overlap, and the last block
 * puts the counter back to 0. LOSS_BLOCKS is a constant, not the card's SM
 * count, so the totals' order is the same on every card.
 *
 * Keeping the CPU's column order costs a serial chain of cols adds per row
 * in lane 0: nothing at 10 classes or a 256-byte vocabulary, ~50k dependent
 * adds a row at GPT-2's 50,257 tokens (rows run in parallel across warps). */
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/ops_hd.h"

#define LOSS_WARPS 8
#define LOSS_THREADS (LOSS_WARPS * HFL_XENT_LANES)
#define LOSS_BLOCKS 1024
#define LOSS_STAGE 256 /* exponentials staged per warp before lane 0 adds them */
#define FULL_MASK 0xffffffffu

static __device__ double loss_part[LOSS_BLOCKS];
static __device__ long long hits_part[LOSS_BLOCKS];
static __device__ unsigned loss_arrived;

/* The lanes' argmax candidates combined pairwise down a shuffle tree; every
 * lane gets lane 0's. A lane whose partner is past the warp's end gets its
 * own candidate back, which hfl_op_xent_pick keeps. */
static __device__ hfl_xent_max warp_argmax(hfl_xent_max a) {
    for (int off = HFL_XENT_LANES / 2; off > 0; off /= 2) {
        hfl_xent_max b;
        b.m = __shfl_down_sync(FULL_MASK, a.m, off);
        b.c = __shfl_down_sync(FULL_MASK, a.c, off);
        a = hfl_op_xent_pick(a, b);
    }
    a.m = __shfl_sync(FULL_MASK, a.m, 0);
    a.c = __shfl_sync(FULL_MASK, a.c, 0);
    return a;
}

/* The gradient scale is read here, on the device: the loss scale the
 * previous step's scaler_update left in sc (1 outside fp16). */
static __global__ __launch_bounds__(LOSS_THREADS) void k_softmax_xent(
    hfl_precision t, const void *logits, const int32_t *labels, void *dlogits, int rows, int cols,
    int mean_rows, hfl_step_scalars *sc) {
    __shared__ float stage[LOSS_WARPS][LOSS_STAGE];
    __shared__ double warp_loss[LOSS_WARPS];
    __shared__ long long warp_hits[LOSS_WARPS];
    __shared__ int last;
    int lane = (int)threadIdx.x % HFL_XENT_LANES, w = (int)threadIdx.x / HFL_XENT_LANES;
    float scale = sc->loss_scale / (float)mean_rows;
    double loss = 0.0;
    long long hits = 0;
    for (size_t r = (size_t)blockIdx.x * LOSS_WARPS + w; r < (size_t)rows;
         r += (size_t)gridDim.x * LOSS_WARPS) {
        const void *z = hfl_at(t, logits, r * (size_t)cols);
        int32_t label = labels[r];
        hfl_xent_max a = warp_argmax(hfl_op_xent_lane_max(t, z, cols, lane));
        a = hfl_op_xent_argmax_done(t, z, a);
        float sum = 0.0f;
        for (int c0 = 0; c0 < cols; c0 += LOSS_STAGE) {
            int n = cols - c0 < LOSS_STAGE ? cols - c0 : LOSS_STAGE;
            for (int j = lane; j < n; j += HFL_XENT_LANES) stage[w][j] = hfl_op_xent_exp(t, z, c0 + j, a.m);
            __syncwarp();
            if (lane == 0)
                for (int j = 0; j < n; j++) sum += stage[w][j];
            __syncwarp(); /* the stage is the next chunk's */
        }
        sum = __shfl_sync(FULL_MASK, sum, 0);
        if (dlogits) {
            void *drow = hfl_at(t, dlogits, r * (size_t)cols);
            float inv = 1.0f / sum;
            for (int c = lane; c < cols; c += HFL_XENT_LANES)
                hfl_op_xent_dlogit(t, drow, z, c, label, a.m, inv, scale);
        }
        if (lane == 0) {
            loss += hfl_op_xent_loss(t, z, label, a.m, sum);
            hits += a.c == label;
        }
    }
    if (lane == 0) {
        warp_loss[w] = loss;
        warp_hits[w] = hits;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double b = 0.0;
        long long h = 0;
        for (int j = 0; j < LOSS_WARPS; j++) {
            b += warp_loss[j];
            h += warp_hits[j];
        }
        loss_part[blockIdx.x] = b;
        hits_part[blockIdx.x] = h;
        __threadfence(); /* the partials are visible before the count says so */
        last = atomicAdd(&loss_arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        __threadfence(); /* the reading side's fence: every block's partials, then read */
        double s = 0.0;
        long long h = 0;
        for (unsigned j = 0; j < gridDim.x; j++) {
            s += ((volatile double *)loss_part)[j];
            h += ((volatile long long *)hits_part)[j];
        }
        sc->loss_sum += s;
        sc->correct += h;
        sc->rows += rows;
        loss_arrived = 0;
    }
}

extern "C" void cuda_softmax_xent(hfl_precision t, const void *logits, const int32_t *labels,
                                  void *dlogits, int rows, int cols, int mean_rows,
                                  hfl_step_scalars *sc, float *ws) {
    (void)ws; /* the CPU's row staging; a lane widens the logits where it reads them */
    if (rows <= 0) return;
    unsigned blocks = (unsigned)(((size_t)rows + LOSS_WARPS - 1) / LOSS_WARPS);
    if (blocks > LOSS_BLOCKS) blocks = LOSS_BLOCKS;
    k_softmax_xent<<<blocks, LOSS_THREADS, 0, hfl_cuda_ctx.compute>>>(t, logits, labels, dlogits,
                                                                      rows, cols, mean_rows, sc);
    CUDA_CHECK_LAUNCH();
}
