/* agg.cu: the CUDA backend's aggregation ops (kernels/agg.h): the
 * coordinator's exact sum, held rows, robust rules and server step in device
 * memory, as kernels over the kernels/agg_hd.h bodies the CPU runs in loops
 * (built with -fmad=false, so the bits are the CPU's).
 *
 * Everything is enqueued on a stream of the aggregator's own, made by
 * prepare(): the compute stream belongs to training and the coordinator's
 * evaluation thread, which runs at the same time, and cuBLAS (its handle and
 * workspace) is not used at all. stage() copies host bytes through two
 * pinned slots of AGG_PIECE bytes, a piece at a time: the host fills one
 * slot while the other's copy runs, and waits (an event) before refilling a
 * slot still being copied, so a payload of any size needs 2 * AGG_PIECE of
 * pinned memory. The ops that hand a value to the host (norm, finish,
 * all_finite, distances, download) wait for the stream; nothing else does.
 *
 * The two reductions with an order: a norm (and a Krum distance) is one
 * block of HFL_AGG_LANES threads per chunk, thread l computing lane l, then
 * agg_hd.h's tree in shared memory, level by level; one thread then adds the
 * chunks' sums in chunk order (a few ten thousand dependent adds for 100M
 * values). The largest |value| and the finite flags are order-free
 * (atomicMax on the bits of a non-negative float, atomicOr). A coordinate's
 * median or trimmed mean sorts the coordinate's k values in that thread's
 * column of dynamic shared memory: no kernel has a stack frame
 * (tests/kernels/cuda_resources.py). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/agg.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "util/util.h" /* HFL_ERR_LEN */

#define AGG_PIECE ((size_t)8 << 20)

/* What the host reads back: written by the reductions, zeroed before each. */
typedef struct {
    double sumsq;
    unsigned int maxbits; /* the bits of the largest |value| (non-negative floats order as their bits) */
    int bad;              /* nonzero: some value was not finite */
} agg_result;

static struct {
    pthread_mutex_t lock;
    int ready;
    cudaStream_t stream;
    cudaEvent_t staged[2];
    void *pinned[2];
    int slot;
    agg_result *result; /* device */
    size_t smem_optin;  /* dynamic shared memory a block may opt in to */
} agg = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {0, 0}, {0, 0}, 0, 0, 0};

#define AGG_LAUNCH(kernel, count, ...)                                                        \
    do {                                                                                      \
        kernel<<<hfl_cuda_grid(count), HFL_CUDA_BLOCK, 0, agg.stream>>>(__VA_ARGS__);         \
        CUDA_CHECK_LAUNCH();                                                                  \
    } while (0)

/* ---- kernels ---- */

static __global__ void k_topk_scatter(float *dense, const uint8_t *vals, const uint32_t *idx, size_t k) {
    size_t j = hfl_cuda_index();
    if (j >= k) return;
    dense[idx[j]] = hfl_payload_topk_value(vals, j);
}

/* One block per chunk: the lanes, the tree, the chunk's sum into partials. */
static __global__ void k_norm_chunks(hfl_payload p, size_t n, double *partials, agg_result *res) {
    __shared__ double s[HFL_AGG_LANES];
    __shared__ float m[HFL_AGG_LANES];
    int t = (int)threadIdx.x;
    hfl_agg_norm_lane(&p, n, blockIdx.x, t, &s[t], &m[t]);
    __syncthreads();
    for (int w = HFL_AGG_LANES / 2; w >= 1; w /= 2) {
        if (t < w) {
            hfl_agg_tree_step(s, t, w);
            m[t] = m[t + w] > m[t] ? m[t + w] : m[t];
        }
        __syncthreads();
    }
    if (t == 0) {
        partials[blockIdx.x] = s[0];
        atomicMax(&res->maxbits, __float_as_uint(m[0]));
    }
}

/* The chunks' sums in chunk order, one thread. */
static __global__ void k_sum_in_order(const double *partials, size_t count, double *out) {
    double total = 0.0;
    for (size_t c = 0; c < count; c++) total += partials[c];
    *out = total;
}

/* Up to HFL_AGG_MAX_BATCH updates, passed by value, added in one pass. */
typedef struct {
    hfl_payload p[HFL_AGG_MAX_BATCH];
    double f[HFL_AGG_MAX_BATCH];
    int count;
} agg_batch;

static __global__ void k_add_fixed(agg_batch b, size_t n, int64_t *acc) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    int64_t a = acc[i];
    for (int u = 0; u < b.count; u++) a = hfl_agg_add_fixed(a, b.f[u], hfl_payload_value(&b.p[u], i));
    acc[i] = a;
}

static __global__ void k_store_row(hfl_payload p, size_t n, double factor, float *row) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    row[i] = hfl_agg_row_value(hfl_payload_value(&p, i), factor);
}

static __global__ void k_finish(const int64_t *acc, size_t n, double inv, float *out, agg_result *res) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    out[i] = hfl_agg_mean_value(acc[i], inv);
    if (!hfl_agg_finite(out[i])) atomicOr(&res->bad, 1);
}

static __global__ void k_all_finite(const float *v, size_t n, agg_result *res) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    if (!hfl_agg_finite(v[i])) atomicOr(&res->bad, 1);
}

static __global__ void k_sopt(hfl_agg_sopt o, float *x, float *m, float *v, const float *d, size_t n) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    hfl_agg_sopt_elem(&o, i, x, m, v, d[i]);
}

/* Thread t of a block sorts coordinate blockIdx.x * blockDim.x + t in its
 * column of the block's k x blockDim.x floats of shared memory. */
static __global__ void k_coordinatewise(const float *rows, int k, size_t n, int median, int trim, float *out) {
    extern __shared__ float col[];
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    float *mine = col + threadIdx.x;
    for (int r = 0; r < k; r++) mine[(size_t)r * blockDim.x] = rows[(size_t)r * n + i];
    out[i] = hfl_agg_coord_rule(mine, blockDim.x, k, median, trim);
}

/* One block per (pair, chunk): pair p is rows a < b in the order (0,1),
 * (0,2), ..., (1,2), ...; its chunk sums at partials[p * chunks + chunk]. */
static __global__ void k_dist_chunks(const float *rows, int k, size_t n, size_t chunks, double *partials) {
    __shared__ double s[HFL_AGG_LANES];
    size_t pair = blockIdx.x / chunks, chunk = blockIdx.x % chunks, rem = pair;
    int a = 0, t = (int)threadIdx.x;
    while (rem >= (size_t)(k - 1 - a)) rem -= (size_t)(k - 1 - a), a++;
    int b = a + 1 + (int)rem;
    s[t] = hfl_agg_dist_lane(rows + (size_t)a * n, rows + (size_t)b * n, n, chunk, t);
    __syncthreads();
    for (int w = HFL_AGG_LANES / 2; w >= 1; w /= 2) {
        if (t < w) hfl_agg_tree_step(s, t, w);
        __syncthreads();
    }
    if (t == 0) partials[blockIdx.x] = s[0];
}

/* Thread p: pair p's chunk sums in chunk order, into out[p]. */
static __global__ void k_dist_combine(const double *partials, size_t pairs, size_t chunks, double *out) {
    size_t p = hfl_cuda_index();
    if (p >= pairs) return;
    double total = 0.0;
    for (size_t c = 0; c < chunks; c++) total += partials[p * chunks + c];
    out[p] = total;
}

static __global__ void k_pick_mean(const float *rows, int k, size_t n, const int *pick, int m, float *out) {
    size_t i = hfl_cuda_index();
    if (i >= n) return;
    out[i] = hfl_agg_pick_mean(rows, n, k, pick, m, i);
}

/* ---- the ops ---- */

static void agg_sync(void) { CUDA_CHECK(cudaStreamSynchronize(agg.stream)); }

static agg_result read_result(void) {
    agg_result r;
    CUDA_CHECK(cudaMemcpyAsync(&r, agg.result, sizeof r, cudaMemcpyDeviceToHost, agg.stream));
    agg_sync();
    return r;
}

static void clear_result(void) { CUDA_CHECK(cudaMemsetAsync(agg.result, 0, sizeof *agg.result, agg.stream)); }

extern "C" void cuda_agg_stage(void *dst, const void *src, size_t bytes) {
    for (size_t off = 0; off < bytes; off += AGG_PIECE) {
        size_t len = bytes - off < AGG_PIECE ? bytes - off : AGG_PIECE;
        int s = agg.slot;
        agg.slot ^= 1;
        CUDA_CHECK(cudaEventSynchronize(agg.staged[s])); /* the slot's last copy has left it */
        memcpy(agg.pinned[s], (const char *)src + off, len);
        CUDA_CHECK(cudaMemcpyAsync((char *)dst + off, agg.pinned[s], len, cudaMemcpyHostToDevice, agg.stream));
        CUDA_CHECK(cudaEventRecord(agg.staged[s], agg.stream));
    }
}

extern "C" void cuda_agg_download(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, agg.stream));
    agg_sync();
}

extern "C" void cuda_agg_zero(void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, agg.stream));
}

extern "C" void cuda_agg_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, agg.stream));
}

extern "C" void cuda_agg_topk_scatter(float *dense, size_t n, const uint8_t *vals, const uint32_t *idx, size_t k) {
    cuda_agg_zero(dense, n * sizeof *dense);
    if (k) AGG_LAUNCH(k_topk_scatter, k, dense, vals, idx, k);
}

extern "C" void cuda_agg_norm(const hfl_payload *p, size_t n, double *partials, hfl_agg_norm *out) {
    size_t chunks = hfl_agg_chunks(n);
    clear_result();
    if (chunks) {
        CUDA_REQUIRE(chunks < 0x7FFFFFFFu, "aggregation: too many chunks for one grid");
        k_norm_chunks<<<(unsigned)chunks, HFL_AGG_LANES, 0, agg.stream>>>(*p, n, partials, agg.result);
        CUDA_CHECK_LAUNCH();
        k_sum_in_order<<<1, 1, 0, agg.stream>>>(partials, chunks, &agg.result->sumsq);
        CUDA_CHECK_LAUNCH();
    }
    agg_result r = read_result();
    out->sumsq = r.sumsq;
    memcpy(&out->maxabs, &r.maxbits, sizeof out->maxabs);
}

extern "C" void cuda_agg_add_fixed(const hfl_payload *p, const double *f, int count, size_t n, int64_t *acc) {
    CUDA_REQUIRE(count >= 0 && count <= HFL_AGG_MAX_BATCH, "aggregation: more updates than one pass takes");
    agg_batch b;
    memset(&b, 0, sizeof b);
    for (int u = 0; u < count; u++) b.p[u] = p[u], b.f[u] = f[u];
    b.count = count;
    if (n && count) AGG_LAUNCH(k_add_fixed, n, b, n, acc);
}

extern "C" void cuda_agg_store_row(const hfl_payload *p, size_t n, double factor, float *row) {
    if (n) AGG_LAUNCH(k_store_row, n, *p, n, factor, row);
}

extern "C" int cuda_agg_finish(const int64_t *acc, size_t n, double inv, float *out) {
    clear_result();
    if (n) AGG_LAUNCH(k_finish, n, acc, n, inv, out, agg.result);
    return read_result().bad == 0;
}

extern "C" int cuda_agg_all_finite(const float *v, size_t n) {
    clear_result();
    if (n) AGG_LAUNCH(k_all_finite, n, v, n, agg.result);
    return read_result().bad == 0;
}

extern "C" void cuda_agg_sopt_step(const hfl_agg_sopt *o, float *x, float *m, float *v, const float *d, size_t n) {
    if (n) AGG_LAUNCH(k_sopt, n, *o, x, m, v, d, n);
}

/* Threads a block of k_coordinatewise takes: the most (a multiple of 32, at
 * most 256) whose k columns fit the shared memory a block may opt in to. */
static unsigned coord_threads(int k) {
    size_t t = agg.smem_optin / (sizeof(float) * (size_t)k);
    t = t > 256 ? 256 : t - t % 32;
    return (unsigned)t;
}

extern "C" void cuda_agg_coordinatewise(const float *rows, int k, size_t n, int median, int trim, float *out) {
    unsigned t = coord_threads(k);
    CUDA_REQUIRE(t >= 32, "aggregation: more rows than shared memory holds (hfl_agg_hold checks this)");
    size_t blocks = (n + t - 1) / t;
    if (!n) return;
    k_coordinatewise<<<(unsigned)blocks, t, sizeof(float) * (size_t)k * t, agg.stream>>>(rows, k, n, median, trim,
                                                                                         out);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_agg_distances(const float *rows, int k, size_t n, double *partials, double *d) {
    size_t pairs = (size_t)k * (k - 1) / 2, chunks = hfl_agg_chunks(n);
    double *sums = partials + pairs * chunks, *host = (double *)malloc(sizeof(double) * (pairs ? pairs : 1));
    CUDA_REQUIRE(host != NULL, "aggregation: out of host memory for Krum's distances");
    if (pairs && chunks) {
        CUDA_REQUIRE(pairs * chunks < 0x7FFFFFFFu, "aggregation: too many (pair, chunk) blocks for one grid");
        k_dist_chunks<<<(unsigned)(pairs * chunks), HFL_AGG_LANES, 0, agg.stream>>>(rows, k, n, chunks, partials);
        CUDA_CHECK_LAUNCH();
        AGG_LAUNCH(k_dist_combine, pairs, partials, pairs, chunks, sums);
        cuda_agg_download(host, sums, sizeof(double) * pairs);
    } else {
        memset(host, 0, sizeof(double) * (pairs ? pairs : 1));
    }
    size_t p = 0;
    for (int a = 0; a < k; a++) {
        d[(size_t)a * k + a] = 0.0;
        for (int b = a + 1; b < k; b++, p++) d[(size_t)a * k + b] = d[(size_t)b * k + a] = host[p];
    }
    free(host);
}

extern "C" void cuda_agg_pick_mean(const float *rows, int k, size_t n, const int *pick, int m, float *out) {
    if (n) AGG_LAUNCH(k_pick_mean, n, rows, k, n, pick, m, out);
}

static void agg_release(void) {
    for (int s = 0; s < 2; s++) {
        if (agg.staged[s]) cudaEventDestroy(agg.staged[s]);
        if (agg.pinned[s]) cudaFreeHost(agg.pinned[s]);
        agg.staged[s] = 0, agg.pinned[s] = 0;
    }
    if (agg.result) cudaFree(agg.result);
    if (agg.stream) cudaStreamDestroy(agg.stream);
    agg.result = 0, agg.stream = 0;
    (void)cudaGetLastError();
}

/* The stream, events, pinned slots and result block, once per process; 0, or
 * -1 with err and nothing left behind. */
extern "C" int cuda_agg_prepare(char *err) {
    pthread_mutex_lock(&agg.lock);
    int rc = 0;
    if (!agg.ready) {
        cudaError_t e = cudaStreamCreateWithFlags(&agg.stream, cudaStreamNonBlocking);
        for (int s = 0; s < 2 && e == cudaSuccess; s++) {
            e = cudaEventCreateWithFlags(&agg.staged[s], cudaEventDisableTiming);
            if (e == cudaSuccess) e = cudaHostAlloc(&agg.pinned[s], AGG_PIECE, cudaHostAllocDefault);
        }
        if (e == cudaSuccess) e = cudaMalloc((void **)&agg.result, sizeof *agg.result);
        int optin = 0;
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, hfl_cuda_ctx.device);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_coordinatewise, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
        if (e != cudaSuccess) {
            snprintf(err, HFL_ERR_LEN, "cuda aggregation: cannot make its stream, pinned staging or scratch: %s",
                     cudaGetErrorString(e));
            agg_release();
            rc = -1;
        } else {
            agg.smem_optin = (size_t)optin;
            size_t rows = agg.smem_optin / (sizeof(float) * 32);
            hfl_cuda_agg_ops.max_rule_rows = rows > 1024 ? 1024 : (int)rows;
            agg.ready = 1;
        }
    }
    pthread_mutex_unlock(&agg.lock);
    return rc;
}
