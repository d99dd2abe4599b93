/* backend_cuda.c: the CUDA backend's context, memory, copies, input pipeline
 * and hfl_backend table (the kernels are in elementwise.cu, conv.cu, loss.cu,
 * the GEMMs in gemm.c).
 *
 * One context per process, on device 0, made by the first
 * hfl_cuda_backend_open (kernels/cuda_module.h's open): a non-blocking compute
 * stream for every op, copy and GEMM; a second stream for the input
 * pipeline's H2D copies, with two events per input slot (cuda_internal.h);
 * one cuBLAS handle bound to the compute stream.
 *
 * Memory: alloc/try_alloc reserve the bytes against the process-wide budget
 * (through the host's hfl_cuda_host callbacks, kernels/budget.h) before
 * cudaMalloc, and give them back when it fails or on free; a small table
 * remembers each live pointer's size for free. Never managed memory: a
 * cudaMalloc that the card cannot hold fails with
 * "cuda backend: cudaMalloc of N bytes failed: out of memory (free F of T)".
 * cudaMalloc returns 256-byte aligned memory (the planner needs 64).
 *
 * Synchronisation: every op is enqueued on the compute stream and returns.
 * download and sync wait for the device, and so does upload: the caller may
 * reuse (or return from the frame holding) its source at once, which
 * cudaMemcpyAsync promises for neither a pinned source (read later) nor a
 * pageable one (CUDA's API synchronization notes: "might be synchronous").
 * Uploads are rare (parameters once a round, the step scalars around their
 * reads); batches come in through the input pipeline, which is asynchronous.
 * Every call that waits (these, stage_wait, and cudaFree and cudaFreeHost
 * in free and host_free) is counted: kernels/backend.h, HOST WAITS.
 *
 * cuBLAS workspace: blas_ws_bytes is what cuBLAS recommends for
 * cublasSetWorkspace (cuBLAS API reference, "cublasSetWorkspace()": 32 MiB
 * on Hopper, 4 MiB on earlier GPUs; PyTorch and llm.c use the same). The
 * planner gives the trainer that much as a buffer, and set_blas_workspace
 * hands it to cuBLAS after cublasSetStream (which resets the workspace to
 * cuBLAS's own pool; so does set_blas_workspace(NULL, 0)). cuBLAS wants the
 * workspace 256-byte aligned; a 64-byte aligned plan buffer is trimmed to
 * its first 256-byte boundary. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* the types of cuMemGetAllocationGranularity, reached at run time */

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "util/util.h" /* HFL_ERR_LEN */

#define MIB ((size_t)1 << 20)

cuda_context hfl_cuda_ctx;

/* err may be NULL (try_alloc's contract). */
static void cuda_errf(char *err, const char *what, size_t bytes, cudaError_t e) {
    if (!err) return;
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        snprintf(err, HFL_ERR_LEN, "cuda backend: %s of %zu bytes failed: out of memory (free %zu of %zu)",
                 what, bytes, free_b, total_b);
    } else {
        snprintf(err, HFL_ERR_LEN, "cuda backend: %s of %zu bytes failed: %s", what, bytes,
                 cudaGetErrorString(e));
    }
}

/* ---- host waits (kernels/backend.h) ---- */

static _Atomic uint64_t n_downloads, n_uploads, n_syncs, n_stage_waits;

static void count_wait(_Atomic uint64_t *counter) {
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static void cuda_host_waits(hfl_host_waits *out) {
    out->downloads = atomic_load_explicit(&n_downloads, memory_order_relaxed);
    out->uploads = atomic_load_explicit(&n_uploads, memory_order_relaxed);
    out->syncs = atomic_load_explicit(&n_syncs, memory_order_relaxed);
    out->stage_waits = atomic_load_explicit(&n_stage_waits, memory_order_relaxed);
}

/* ---- live allocations: pointer -> size, for the budget on free ---- */

typedef struct {
    void *p;
    size_t bytes;
} cuda_block;

static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static cuda_block *blocks;
static size_t n_blocks, cap_blocks;

static int blocks_add(void *p, size_t bytes) {
    int ok = 1;
    pthread_mutex_lock(&blocks_lock);
    if (n_blocks == cap_blocks) {
        size_t cap = cap_blocks ? 2 * cap_blocks : 64;
        cuda_block *grown = realloc(blocks, cap * sizeof *grown);
        if (grown) {
            blocks = grown;
            cap_blocks = cap;
        } else {
            ok = 0;
        }
    }
    if (ok) blocks[n_blocks++] = (cuda_block){p, bytes};
    pthread_mutex_unlock(&blocks_lock);
    return ok;
}

/* The size p was allocated with, forgetting p; 0 and *found = 0 if p is not live. */
static size_t blocks_take(void *p, int *found) {
    size_t bytes = 0;
    *found = 0;
    pthread_mutex_lock(&blocks_lock);
    for (size_t i = n_blocks; i-- > 0;) { /* newest first: scratch buffers die young */
        if (blocks[i].p == p) {
            bytes = blocks[i].bytes;
            blocks[i] = blocks[--n_blocks];
            *found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&blocks_lock);
    return bytes;
}

/* ---- memory ---- */

static void *cuda_try_alloc(size_t bytes, char *err) {
    if (hfl_cuda_ctx.host.budget_reserve(bytes, "cuda", err) != 0) return NULL;
    void *p = NULL;
    /* cudaMalloc(0) gives NULL, which would read as a failure: take one byte. */
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky, but leave no error behind */
        hfl_cuda_ctx.host.budget_release(bytes);
        cuda_errf(err, "cudaMalloc", bytes, e);
        return NULL;
    }
    if (!blocks_add(p, bytes)) {
        cudaFree(p);
        hfl_cuda_ctx.host.budget_release(bytes);
        if (err) snprintf(err, HFL_ERR_LEN, "cuda backend: out of host memory for the block table");
        return NULL;
    }
    if (hfl_cuda_ctx.host.budget_commit) hfl_cuda_ctx.host.budget_commit();
    return p;
}

static void *cuda_alloc(size_t bytes) {
    char err[HFL_ERR_LEN];
    void *p = cuda_try_alloc(bytes, err);
    if (!p) {
        fprintf(stderr, "hfl: %s\n", err);
        exit(1);
    }
    return p;
}

static void cuda_free(void *p) {
    if (!p) return;
    int found;
    size_t bytes = blocks_take(p, &found);
    if (!found) {
        fprintf(stderr, "hfl: cuda backend: free of %p, which is not a live backend block\n", p);
        abort();
    }
    count_wait(&n_syncs);
    CUDA_CHECK(cudaFree(p)); /* waits for the device, so no op still uses p */
    hfl_cuda_ctx.host.budget_release(bytes);
}

static int cuda_mem_info(uint64_t *free_bytes, uint64_t *total_bytes) {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) return -1;
    *free_bytes = f;
    *total_bytes = t;
    return 0;
}

/* NULL when the memory cannot be pinned (a low memlock limit in a
 * container, say): the caller reports it. */
static void *cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(void *p) {
    if (!p) return;
    count_wait(&n_syncs);
    CUDA_CHECK(cudaFreeHost(p)); /* waits for the device */
}

/* ---- copies and synchronisation ---- */

static void cuda_upload(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    count_wait(&n_uploads);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, hfl_cuda_ctx.compute));
    CUDA_CHECK(cudaStreamSynchronize(hfl_cuda_ctx.compute));
}

static void cuda_download(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    count_wait(&n_downloads);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, hfl_cuda_ctx.compute));
    CUDA_CHECK(cudaStreamSynchronize(hfl_cuda_ctx.compute));
}

static void cuda_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, hfl_cuda_ctx.compute));
}

/* Everything enqueued so far: the ops and any prefetch still in flight. */
static void cuda_sync(void) {
    count_wait(&n_syncs);
    CUDA_CHECK(cudaStreamSynchronize(hfl_cuda_ctx.copy));
    CUDA_CHECK(cudaStreamSynchronize(hfl_cuda_ctx.compute));
}

static void cuda_set_blas_workspace(void *p, size_t bytes) {
    cublasHandle_t h = hfl_cuda_ctx.blas;
    if (!p) {
        CUBLAS_CHECK(cublasSetStream(h, hfl_cuda_ctx.compute)); /* back to cuBLAS's pool */
        return;
    }
    uintptr_t at = (uintptr_t)p, aligned = (at + 255) & ~(uintptr_t)255;
    size_t skip = (size_t)(aligned - at);
    bytes = bytes > skip ? bytes - skip : 0;
    CUBLAS_CHECK(cublasSetWorkspace(h, (void *)aligned, bytes));
}

/* ---- the input pipeline (kernels/backend.h) ---- */

static void check_slot(int slot) {
    CUDA_REQUIRE(slot >= 0 && slot < HFL_INPUT_SLOTS, "input slot out of range");
}

/* The host may refill pinned slot `slot`: its last copy has left it. */
static void cuda_stage_wait(int slot) {
    check_slot(slot);
    count_wait(&n_stage_waits);
    CUDA_CHECK(cudaEventSynchronize(hfl_cuda_ctx.copied[slot]));
}

/* Copies on the copy stream once the step that last used the slot's device
 * buffers released them. */
static void cuda_prefetch(void *dst, const void *src, size_t bytes, int slot) {
    check_slot(slot);
    cudaStream_t s = hfl_cuda_ctx.copy;
    CUDA_CHECK(cudaStreamWaitEvent(s, hfl_cuda_ctx.consumed[slot], 0));
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaEventRecord(hfl_cuda_ctx.copied[slot], s));
}

/* The compute stream's next ops see the slot's prefetched data. */
static void cuda_await_prefetch(int slot) {
    check_slot(slot);
    CUDA_CHECK(cudaStreamWaitEvent(hfl_cuda_ctx.compute, hfl_cuda_ctx.copied[slot], 0));
}

/* The ops enqueued so far are the last to read the slot's device buffers. */
static void cuda_release_input(int slot) {
    check_slot(slot);
    CUDA_CHECK(cudaEventRecord(hfl_cuda_ctx.consumed[slot], hfl_cuda_ctx.compute));
}

/* ---- profiling marks (kernels/profile.h) ---- */

/* One event per mark, created the first time the mark is recorded (only a
 * profiled step records any) and kept for the next profile. */
static cudaEvent_t prof_marks[HFL_PROFILE_MARKS];

static void cuda_mark(int i) {
    CUDA_REQUIRE(i >= 0 && i < HFL_PROFILE_MARKS, "profile mark out of range");
    if (!prof_marks[i]) CUDA_CHECK(cudaEventCreate(&prof_marks[i]));
    CUDA_CHECK(cudaEventRecord(prof_marks[i], hfl_cuda_ctx.compute));
}

static double cuda_mark_ms(int a, int b) {
    CUDA_REQUIRE(a >= 0 && b >= 0 && a < HFL_PROFILE_MARKS && b < HFL_PROFILE_MARKS &&
                     prof_marks[a] && prof_marks[b],
                 "profile mark never recorded");
    float ms = 0.0f;
    CUDA_CHECK(cudaEventSynchronize(prof_marks[b]));
    CUDA_CHECK(cudaEventElapsedTime(&ms, prof_marks[a], prof_marks[b]));
    return ms;
}

static void prof_marks_destroy(void) {
    for (int i = 0; i < HFL_PROFILE_MARKS; i++)
        if (prof_marks[i]) cudaEventDestroy(prof_marks[i]), prof_marks[i] = NULL;
}

/* ---- the table ---- */

static const hfl_lm_ops cuda_lm_ops = {
    .embed_fwd = cuda_lm_embed_fwd,
    .embed_bwd = cuda_lm_embed_bwd,
    .layernorm_fwd = cuda_lm_layernorm_fwd,
    .layernorm_bwd = cuda_lm_layernorm_bwd,
    .gelu_fwd = cuda_lm_gelu_fwd,
    .gelu_bwd = cuda_lm_gelu_bwd,
    .heads_gather = cuda_lm_heads_gather,
    .heads_scatter = cuda_lm_heads_scatter,
    .causal_softmax = cuda_lm_causal_softmax,
    .causal_softmax_bwd = cuda_lm_causal_softmax_bwd,
};

hfl_agg_ops hfl_cuda_agg_ops = {
    .max_rule_rows = 0, /* cuda_agg_prepare sets it from the device's shared memory */
    .prepare = cuda_agg_prepare,
    .stage = cuda_agg_stage,
    .download = cuda_agg_download,
    .zero = cuda_agg_zero,
    .copy = cuda_agg_copy,
    .topk_scatter = cuda_agg_topk_scatter,
    .norm = cuda_agg_norm,
    .add_fixed = cuda_agg_add_fixed,
    .store_row = cuda_agg_store_row,
    .finish = cuda_agg_finish,
    .all_finite = cuda_agg_all_finite,
    .sopt_step = cuda_agg_sopt_step,
    .coordinatewise = cuda_agg_coordinatewise,
    .distances = cuda_agg_distances,
    .pick_mean = cuda_agg_pick_mean,
};

static hfl_backend cuda_backend = {
    .name = "cuda",
    /* The whole batch per conv chunk (the planner's most): a conv
     * layer's step is a fixed handful of launches whatever the batch (its
     * weight gradient one GEMM, model/conv.c), for a workspace of the
     * batch's columns (cnn's second conv at batch 128: 80 MB in fp32). */
    .conv_chunk = HFL_CONV_CHUNK_MAX,
    .host_memory = 0,
    .alloc = cuda_alloc,
    .try_alloc = cuda_try_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .sync = cuda_sync,
    .host_waits = cuda_host_waits,
    .mem_info = cuda_mem_info,
    .set_blas_workspace = cuda_set_blas_workspace,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stage_wait = cuda_stage_wait,
    .prefetch = cuda_prefetch,
    .await_prefetch = cuda_await_prefetch,
    .release_input = cuda_release_input,
    .gemm = cuda_gemm,
    .gemm_strided = cuda_gemm_strided,
    .bias_grad = cuda_bias_grad,
    .relu_fwd = cuda_relu_fwd,
    .relu_bwd = cuda_relu_bwd,
    .softmax_xent = cuda_softmax_xent,
    .sgd_step = cuda_sgd_step,
    .adamw_step = cuda_adamw_step,
    .prox_grad = cuda_prox_grad,
    .fill = cuda_fill,
    .convert = cuda_convert,
    .im2col = cuda_im2col,
    .col2im = cuda_col2im,
    .maxpool_fwd = cuda_maxpool_fwd,
    .maxpool_bwd = cuda_maxpool_bwd,
    .channel_bias_grad = cuda_channel_bias_grad,
    .unscale_grads = cuda_unscale_grads,
    .scaler_update = cuda_scaler_update,
    .mark = cuda_mark,
    .mark_ms = cuda_mark_ms,
    .lm = &cuda_lm_ops,
    .agg = &hfl_cuda_agg_ops,
};

/* ---- open ---- */

static void context_destroy(cuda_context *c) {
    prof_marks_destroy();
    if (c->blas) cublasDestroy(c->blas);
    for (int s = 0; s < HFL_INPUT_SLOTS; s++) {
        if (c->copied[s]) cudaEventDestroy(c->copied[s]);
        if (c->consumed[s]) cudaEventDestroy(c->consumed[s]);
    }
    if (c->copy) cudaStreamDestroy(c->copy);
    if (c->compute) cudaStreamDestroy(c->compute);
    memset(c, 0, sizeof *c);
}

/* 0, or -1 with one line in err and nothing left behind. */
static int context_create(cuda_context *c, const hfl_cuda_host *host, char *err) {
    memset(c, 0, sizeof *c);
    c->host = *host;
    cudaError_t e;
    const char *what;
    struct cudaDeviceProp prop;
    if ((e = cudaSetDevice(0)) != cudaSuccess) {
        what = "cudaSetDevice(0)";
    } else if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
        what = "cudaGetDeviceProperties";
    } else if ((e = cuda_kernels_runnable()) != cudaSuccess) {
        /* A GPU older than every architecture this module was built for:
         * refuse here, so --device auto falls back to the CPU and says why. */
        snprintf(err, HFL_ERR_LEN, "cuda backend: %.80s (compute capability %d.%d) cannot run this "
                 "module's kernels: %s", prop.name, prop.major, prop.minor, cudaGetErrorString(e));
        context_destroy(c);
        return -1;
    } else if ((e = cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking)) != cudaSuccess ||
               (e = cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking)) != cudaSuccess) {
        what = "cudaStreamCreateWithFlags";
    } else {
        what = NULL;
        for (int s = 0; s < HFL_INPUT_SLOTS && !what; s++)
            if ((e = cudaEventCreateWithFlags(&c->copied[s], cudaEventDisableTiming)) != cudaSuccess ||
                (e = cudaEventCreateWithFlags(&c->consumed[s], cudaEventDisableTiming)) != cudaSuccess)
                what = "cudaEventCreateWithFlags";
    }
    if (what) {
        snprintf(err, HFL_ERR_LEN, "cuda backend: %s failed: %s", what, cudaGetErrorString(e));
        (void)cudaGetLastError();
        context_destroy(c);
        return -1;
    }
    /* One rounding per 2-byte GEMM (gemm.c's header): split-K partial sums
     * stay in fp32 unless HFL_CUBLAS_REDUCED_REDUCTION=1 asks for cuBLAS's
     * default, to compare the two on a GPU. */
    const char *rr = getenv("HFL_CUBLAS_REDUCED_REDUCTION");
    c->reduced_reduction = rr && strcmp(rr, "1") == 0;
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(c->blas, c->compute);
    if (s == CUBLAS_STATUS_SUCCESS && !c->reduced_reduction)
        s = cublasSetMathMode(c->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                           CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, HFL_ERR_LEN, "cuda backend: cuBLAS initialisation failed: %s",
                 cublasGetStatusString(s));
        context_destroy(c);
        return -1;
    }
    c->device = 0;
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    const char *tf32 = getenv("HFL_TF32");
    c->tf32 = tf32 && strcmp(tf32, "1") == 0;
    return 0;
}

/* The granularity device memory is mapped in: the driver's minimum for
 * device memory (cuMemGetAllocationGranularity, CU_MEM_ALLOC_GRANULARITY_
 * MINIMUM: 2 MiB on current NVIDIA GPUs), reached through
 * cudaGetDriverEntryPointByVersion (CUDA 12.5+) so the module links no
 * libcuda; 1 (no rounding) when the driver cannot say. cudaMalloc maps whole
 * granules, so the arena takes its size rounded up to one (plan/planner.h);
 * tests/gpu/test_cuda_train.c checks that against NVML on a GPU. */
static size_t device_granularity(int device) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAllocationGranularity", &fn, 10020, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess || !fn) {
        (void)cudaGetLastError();
        return 1;
    }
    CUresult (*query)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    memcpy(&query, &fn, sizeof query); /* POSIX: a data pointer to a function pointer */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    size_t g = 0;
    /* a power of two, or not a granularity at all */
    if (query(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0 || (g & (g - 1)) != 0)
        return 1;
    return g;
}

const hfl_backend *hfl_cuda_backend_open(const hfl_cuda_host *host, char *err) {
    static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
    static int opened;
    /* budget_commit (the peak) may be missing; reserve and release may not. */
    if (!host || host->abi != HFL_CUDA_MODULE_ABI || !host->budget_reserve ||
        !host->budget_release) {
        snprintf(err, HFL_ERR_LEN, "cuda backend: host interface version mismatch");
        return NULL;
    }
    const hfl_backend *be = &cuda_backend;
    pthread_mutex_lock(&open_lock);
    if (!opened) {
        if (context_create(&hfl_cuda_ctx, host, err) == 0) {
            cuda_backend.blas_ws_bytes = hfl_cuda_ctx.cc_major >= 9 ? 32 * MIB : 4 * MIB;
            cuda_backend.alloc_granularity = device_granularity(hfl_cuda_ctx.device);
            opened = 1;
        } else {
            be = NULL;
        }
    }
    pthread_mutex_unlock(&open_lock);
    return be;
}
