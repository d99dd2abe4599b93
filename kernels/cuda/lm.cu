/* lm.cu: the CUDA backend's transformer ops (kernels/lm.h), over the bodies
 * of kernels/lm_hd.h, which the CPU backend runs too: every sum in the CPU's
 * order, so the results are the CPU's bit for bit, except where the
 * device's expf differs from glibc's in the last bits (GELU, the softmax).
 * tests/kernels/test_lm_ops.c checks the bodies on the CPU, tests/gpu/
 * test_cuda_lm.c the kernels on a GPU.
 *
 * Layer norm and the causal softmax run a warp per row (ROW_WARPS rows a
 * block): lane l of the warp folds the row's elements l, l + 32, ..., then
 * the warp adds the lanes' partials in lm_hd.h's fixed tree (warp_sum,
 * warp_max), which the CPU's hfl_lm_row_* bodies emulate. Layer norm's
 * weight gradients run a block per 32 columns: 32 row lanes per column
 * (coalesced across the columns), then each column's tree in a warp, as
 * hfl_lm_cols_layernorm_dw. Elementwise ops and heads are one thread per
 * element (GELU per two in a 2-byte type where it can: thread_hd.h's
 * PAIRS). The token embedding's gradient is a block per token, which keeps
 * the token's rows in row order and sums them per column (lm_hd.h's
 * buckets): the CPU's order, for rows * C adds, not V * C * rows. */
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/lm_hd.h"

#define LAUNCH HFL_CUDA_LAUNCH

static __global__ void k_embed_fwd(hfl_precision t, void *y, const void *tokens, const void *wte,
                                   const void *wpe, int T, int C, int V, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_fwd(i, t, y, tokens, wte, wpe, T, C, V);
}

#define EMBED_WARPS (HFL_LM_EMBED_TILE / HFL_LM_LANES)

/* A block of HFL_LM_EMBED_TILE threads per token v (lm_hd.h's buckets): for
 * each tile of rows, thread k tests row r0 + k; the hits are compacted in row
 * order (a ballot per warp, then the warps' counts in warp order) into the
 * shared list that hfl_lm_embed_tile would build, and each thread adds the
 * list to its columns c = k, k + TILE, ... Only this block writes row v of
 * dwte, and each column stays with one thread, so no atomics. */
static __global__ __launch_bounds__(HFL_LM_EMBED_TILE) void k_embed_bwd_wte(
    hfl_precision t, float *dwte, const void *dy, const void *tokens, int rows, int C, int V,
    int accumulate) {
    __shared__ int list[HFL_LM_EMBED_TILE];
    __shared__ int warp_hits[EMBED_WARPS];
    int v = (int)blockIdx.x, k = (int)threadIdx.x, lane = k % HFL_LM_LANES, w = k / HFL_LM_LANES;
    float *drow = dwte + (size_t)v * C;
    if (!accumulate)
        for (int c = k; c < C; c += HFL_LM_EMBED_TILE) drow[c] = 0.0f;
    for (int r0 = 0; r0 < rows; r0 += HFL_LM_EMBED_TILE) {
        int r = r0 + k;
        int hit = r < rows && hfl_lm_token(hfl_ld(t, tokens, (size_t)r), V) == v;
        unsigned mask = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) warp_hits[w] = __popc(mask);
        __syncthreads();
        int before = 0, n = 0;
        for (int j = 0; j < EMBED_WARPS; j++) {
            before += j < w ? warp_hits[j] : 0;
            n += warp_hits[j];
        }
        if (hit) list[before + __popc(mask & ((1u << lane) - 1u))] = r;
        __syncthreads();
        if (n)
            for (int c = k; c < C; c += HFL_LM_EMBED_TILE)
                hfl_lm_embed_bucket_add((size_t)c, t, drow, dy, list, n, C);
        __syncthreads(); /* the list and counts are the next tile's */
    }
}

static __global__ void k_embed_bwd_wpe(hfl_precision t, float *dwpe, const void *dy, int rows,
                                       int T, int C, int accumulate, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_embed_bwd_wpe(i, t, dwpe, dy, rows, T, C, accumulate);
}

#define ROW_WARPS 4
#define ROW_THREADS (ROW_WARPS * HFL_LM_LANES)

/* lm_hd.h's lane tree in one warp: each lane puts its partial into the
 * warp's p[0 .. 31] (shared), the levels run as hfl_lm_tree_sum's (or
 * hfl_lm_tree_max's; no lane reads what another writes in the same level),
 * and every lane returns p[0]. Every lane of the warp must call it. */
static __device__ float warp_tree(float *p, int lane, float v, int is_max) {
    p[lane] = v;
    __syncwarp();
    for (int half = HFL_LM_LANES / 2; half > 0; half /= 2) {
        if (lane < half) {
            if (is_max) hfl_lm_max_level(p, lane, half);
            else hfl_op_tree_level(p, lane, half);
        }
        __syncwarp();
    }
    float r = p[0];
    __syncwarp(); /* before the next call writes p */
    return r;
}

static __device__ float warp_sum(float *p, int lane, float v) { return warp_tree(p, lane, v, 0); }
static __device__ float warp_max(float *p, int lane, float v) { return warp_tree(p, lane, v, 1); }

/* Warp wi of the block takes row blockIdx.x * ROW_WARPS + wi (whole warps
 * leave together, so warp_sum's full-warp syncs stay valid). */
static __device__ size_t row_of_warp(void) {
    return (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / HFL_LM_LANES;
}

static __global__ __launch_bounds__(ROW_THREADS) void k_layernorm_fwd(
    hfl_precision t, void *y, float *mean, float *rstd, const void *x, const void *w,
    const void *b, int C, size_t rows) {
    __shared__ float part[ROW_WARPS][HFL_LM_LANES];
    int lane = (int)(threadIdx.x % HFL_LM_LANES);
    float *p = part[threadIdx.x / HFL_LM_LANES];
    size_t i = row_of_warp();
    if (i >= rows) return;
    size_t row = i * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += HFL_LM_LANES) s += hfl_ld(t, x, row + c);
    float m = warp_sum(p, lane, s) / C, v = 0.0f;
    for (int c = lane; c < C; c += HFL_LM_LANES) {
        float d = hfl_lm_ln_dev(t, x, row + c, m);
        v += d * d;
    }
    float rs = hfl_lm_ln_rstd(warp_sum(p, lane, v), C);
    for (int c = lane; c < C; c += HFL_LM_LANES) hfl_lm_ln_store(t, y, x, w, b, row, c, m, rs);
    if (lane == 0) mean[i] = m, rstd[i] = rs;
}

static __global__ __launch_bounds__(ROW_THREADS) void k_layernorm_bwd_dx(
    hfl_precision t, void *dx, const void *dy, const void *x, const void *w, const float *mean,
    const float *rstd, int C, int add, size_t rows) {
    __shared__ float part[ROW_WARPS][HFL_LM_LANES];
    int lane = (int)(threadIdx.x % HFL_LM_LANES);
    float *p = part[threadIdx.x / HFL_LM_LANES];
    size_t i = row_of_warp();
    if (i >= rows) return;
    size_t row = i * C;
    float m = mean[i], rs = rstd[i], sg = 0.0f, sgx = 0.0f;
    for (int c = lane; c < C; c += HFL_LM_LANES) {
        float g = hfl_lm_ln_g(t, dy, w, row, c);
        sg += g;
        sgx += hfl_lm_ln_gx(t, x, row, c, g, m, rs);
    }
    sg = warp_sum(p, lane, sg) / C;
    sgx = warp_sum(p, lane, sgx) / C;
    for (int c = lane; c < C; c += HFL_LM_LANES)
        hfl_lm_ln_bwd_store(t, dx, dy, x, w, row, c, m, rs, sg, sgx, add);
}

/* Block of (32 columns) x (32 row lanes): thread (k, l) folds column
 * blockIdx.x * 32 + k over rows l, l + 32, ...; then warp k' (threadIdx.y)
 * runs column k''s tree over its 32 lanes. */
static __global__ __launch_bounds__(HFL_LM_LANES *HFL_LM_LANES) void k_layernorm_bwd_dw(
    hfl_precision t, float *dw, float *db, const void *dy, const void *x, const float *mean,
    const float *rstd, int rows, int C, int accumulate) {
    __shared__ float pw[HFL_LM_LANES][HFL_LM_LANES + 1], pb[HFL_LM_LANES][HFL_LM_LANES + 1];
    int k = (int)threadIdx.x, l = (int)threadIdx.y, c = (int)blockIdx.x * HFL_LM_LANES + k;
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int r = l; r < rows; r += HFL_LM_LANES) {
            sw += hfl_lm_ln_dw(t, dy, x, mean, rstd, r, c, C);
            sb += hfl_ld(t, dy, (size_t)r * C + c);
        }
    pw[k][l] = sw;
    pb[k][l] = sb;
    __syncthreads();
    int col = l, j = k; /* now: this warp's column, and this thread's lane in its tree */
    for (int half = HFL_LM_LANES / 2; half > 0; half /= 2) {
        if (j < half) {
            hfl_op_tree_level(pw[col], j, half);
            hfl_op_tree_level(pb[col], j, half);
        }
        __syncwarp();
    }
    c = (int)blockIdx.x * HFL_LM_LANES + col;
    if (j == 0 && c < C) {
        dw[c] = (accumulate ? dw[c] : 0.0f) + pw[col][0];
        db[c] = (accumulate ? db[c] : 0.0f) + pb[col][0];
    }
}

static __global__ void k_gelu_fwd(hfl_precision t, void *y, const void *x, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_gelu_fwd(i, t, y, x);
}

static __global__ void k_gelu_fwd_pairs(hfl_precision t, void *y, const void *x, size_t pairs) {
    size_t j = hfl_cuda_index();
    if (j >= pairs) return;
    hfl_lm_pair_gelu_fwd(j, t, y, x);
}

static __global__ void k_gelu_bwd_pairs(hfl_precision t, void *dx, const void *dy, const void *x,
                                        size_t pairs) {
    size_t j = hfl_cuda_index();
    if (j >= pairs) return;
    hfl_lm_pair_gelu_bwd(j, t, dx, dy, x);
}

static __global__ void k_gelu_bwd(hfl_precision t, void *dx, const void *dy, const void *x,
                                  size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_gelu_bwd(i, t, dx, dy, x);
}

static __global__ void k_heads_gather(hfl_precision t, void *heads, const void *rows, int T, int H,
                                      int hs, int ld, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_heads_gather(i, t, heads, rows, T, H, hs, ld);
}

static __global__ void k_heads_scatter(hfl_precision t, void *rows, const void *heads, int T, int H,
                                       int hs, int ld, size_t count) {
    size_t i = hfl_cuda_index();
    if (i >= count) return;
    hfl_lm_thread_heads_scatter(i, t, rows, heads, T, H, hs, ld);
}

static __global__ __launch_bounds__(ROW_THREADS) void k_causal_softmax(
    hfl_precision t, void *pr, const void *z, int T, float scale, size_t n_rows) {
    __shared__ float part[ROW_WARPS][HFL_LM_LANES];
    int lane = (int)(threadIdx.x % HFL_LM_LANES);
    float *p = part[threadIdx.x / HFL_LM_LANES];
    size_t i = row_of_warp();
    if (i >= n_rows) return;
    int q = (int)(i % (size_t)T);
    size_t row = i * T;
    float a = -INFINITY;
    for (int s = lane; s <= q; s += HFL_LM_LANES) a = hfl_lm_max2(a, hfl_ld(t, z, row + s));
    float zmax = warp_max(p, lane, a), e = 0.0f;
    for (int s = lane; s <= q; s += HFL_LM_LANES) e += hfl_lm_sm_exp(t, z, row + s, zmax, scale);
    float inv = 1.0f / warp_sum(p, lane, e);
    for (int s = lane; s < T; s += HFL_LM_LANES) hfl_lm_sm_store(t, pr, z, row, s, q, zmax, scale, inv);
}

static __global__ __launch_bounds__(ROW_THREADS) void k_causal_softmax_bwd(
    hfl_precision t, void *dz, const void *dp, const void *pr, int T, float scale, size_t n_rows) {
    __shared__ float part[ROW_WARPS][HFL_LM_LANES];
    int lane = (int)(threadIdx.x % HFL_LM_LANES);
    float *p = part[threadIdx.x / HFL_LM_LANES];
    size_t i = row_of_warp();
    if (i >= n_rows) return;
    int q = (int)(i % (size_t)T);
    size_t row = i * T;
    float d = 0.0f;
    for (int s = lane; s <= q; s += HFL_LM_LANES) d += hfl_lm_sm_dot(t, dp, pr, row + s);
    float dot = warp_sum(p, lane, d);
    for (int s = lane; s < T; s += HFL_LM_LANES) hfl_lm_sm_bwd_store(t, dz, dp, pr, row, s, q, scale, dot);
}

/* A warp per row: ceil(rows / ROW_WARPS) blocks. */
#define LAUNCH_ROWS(kernel, rows, ...)                                                         \
    do {                                                                                       \
        kernel<<<(unsigned)(((rows) + ROW_WARPS - 1) / ROW_WARPS), ROW_THREADS, 0,             \
                 hfl_cuda_ctx.compute>>>(__VA_ARGS__);                                         \
        CUDA_CHECK(cudaGetLastError());                                                        \
    } while (0)

extern "C" void cuda_lm_embed_fwd(hfl_precision t, void *y, const void *tokens, const void *wte,
                                  const void *wpe, int rows, int T, int C, int V) {
    size_t count = (size_t)rows * C;
    if (count) LAUNCH(k_embed_fwd, count, t, y, tokens, wte, wpe, T, C, V, count);
}

extern "C" void cuda_lm_embed_bwd(hfl_precision t, float *dwte, float *dwpe, const void *dy,
                                  const void *tokens, int rows, int T, int C, int V,
                                  int accumulate) {
    size_t te = (size_t)V * C, pe = (size_t)T * C;
    if (te) {
        k_embed_bwd_wte<<<(unsigned)V, HFL_LM_EMBED_TILE, 0, hfl_cuda_ctx.compute>>>(
            t, dwte, dy, tokens, rows, C, V, accumulate);
        CUDA_CHECK(cudaGetLastError());
    }
    if (pe) LAUNCH(k_embed_bwd_wpe, pe, t, dwpe, dy, rows, T, C, accumulate, pe);
}

extern "C" void cuda_lm_layernorm_fwd(hfl_precision t, void *y, float *mean, float *rstd,
                                      const void *x, const void *w, const void *b, int rows,
                                      int C) {
    if (rows > 0) LAUNCH_ROWS(k_layernorm_fwd, (size_t)rows, t, y, mean, rstd, x, w, b, C, (size_t)rows);
}

/* dw and db first: dx may overwrite dy. */
extern "C" void cuda_lm_layernorm_bwd(hfl_precision t, void *dx, float *dw, float *db,
                                      const void *dy, const void *x, const void *w,
                                      const float *mean, const float *rstd, int rows, int C,
                                      int accumulate, int dx_add) {
    if (C > 0) {
        dim3 block(HFL_LM_LANES, HFL_LM_LANES);
        unsigned grid = (unsigned)((C + HFL_LM_LANES - 1) / HFL_LM_LANES);
        k_layernorm_bwd_dw<<<grid, block, 0, hfl_cuda_ctx.compute>>>(t, dw, db, dy, x, mean, rstd,
                                                                     rows, C, accumulate);
        CUDA_CHECK(cudaGetLastError());
    }
    if (rows > 0)
        LAUNCH_ROWS(k_layernorm_bwd_dx, (size_t)rows, t, dx, dy, x, w, mean, rstd, C, dx_add, (size_t)rows);
}

extern "C" void cuda_lm_gelu_fwd(hfl_precision t, void *y, const void *x, size_t n) {
    if (!n) return;
    if (hfl_cuda_pairs(t, n, y, x, x)) LAUNCH(k_gelu_fwd_pairs, n / 2, t, y, x, n / 2);
    else LAUNCH(k_gelu_fwd, n, t, y, x, n);
}

extern "C" void cuda_lm_gelu_bwd(hfl_precision t, void *dx, const void *dy, const void *x,
                                 size_t n) {
    if (!n) return;
    if (hfl_cuda_pairs(t, n, dx, dy, x)) LAUNCH(k_gelu_bwd_pairs, n / 2, t, dx, dy, x, n / 2);
    else LAUNCH(k_gelu_bwd, n, t, dx, dy, x, n);
}

extern "C" void cuda_lm_heads_gather(hfl_precision t, void *heads, const void *rows, int n, int T,
                                     int H, int hs, int ld) {
    size_t count = (size_t)n * T * H * hs;
    if (count) LAUNCH(k_heads_gather, count, t, heads, rows, T, H, hs, ld, count);
}

extern "C" void cuda_lm_heads_scatter(hfl_precision t, void *rows, const void *heads, int n, int T,
                                      int H, int hs, int ld) {
    size_t count = (size_t)n * T * H * hs;
    if (count) LAUNCH(k_heads_scatter, count, t, rows, heads, T, H, hs, ld, count);
}

extern "C" void cuda_lm_causal_softmax(hfl_precision t, void *p, const void *z, size_t n_rows,
                                       int T, float scale) {
    if (n_rows) LAUNCH_ROWS(k_causal_softmax, n_rows, t, p, z, T, scale, n_rows);
}

extern "C" void cuda_lm_causal_softmax_bwd(hfl_precision t, void *dz, const void *dp,
                                           const void *p, size_t n_rows, int T, float scale) {
    if (n_rows) LAUNCH_ROWS(k_causal_softmax_bwd, n_rows, t, dz, dp, p, T, scale, n_rows);
}
