/* blas_footprint.c: the GEMM shapes of a training step, and the part of
 * OpenBLAS's buffer they touch (see blas_footprint.h). */
#include "plan/blas_footprint.h"

#include <string.h>

#include "kernels/backend.h"

int hfl_blas_blocking_for(const char *core, hfl_blas_blocking *b) {
    memset(b, 0, sizeof *b);
    if (!core) return -1;
    /* param.h of OpenBLAS 0.3.21, x86_64 HASWELL and ZEN: SGEMM_DEFAULT_P 320,
     * SGEMM_DEFAULT_Q 320, UNROLL_M 8, UNROLL_N 4, GEMM_DEFAULT_ALIGN 0x3fff;
     * sb = sa + ((P * Q * 4 + align) & ~align). */
    if (!strcmp(core, "Haswell") || !strcmp(core, "Zen"))
        *b = (hfl_blas_blocking){.p = 320, .q = 320, .unroll_m = 8, .unroll_n = 4};
    /* x86_64 SKYLAKEX: P 448, Q 448; COOPERLAKE: P 640, Q 320; both UNROLL_M
     * 16, UNROLL_N 4 and the small-matrix kernels (interface/gemm.c's
     * SMALL_MATRIX_OPT, on for every x86_64 build). level3.c's AVX-512
     * min_jj rule (6 UN) is compiled only into a SKYLAKEX-targeted build,
     * not into Debian's DYNAMIC_ARCH one, whose driver is generic: 3 UN. */
    else if (!strcmp(core, "SkylakeX"))
        *b = (hfl_blas_blocking){.p = 448, .q = 448, .unroll_m = 16, .unroll_n = 4, .small_matrix = 1};
    else if (!strcmp(core, "Cooperlake"))
        *b = (hfl_blas_blocking){.p = 640, .q = 320, .unroll_m = 16, .unroll_n = 4, .small_matrix = 1};
    else
        return -1;
    b->b_offset = ((uint64_t)b->p * b->q * 4 + 0x3fff) & ~(uint64_t)0x3fff;
    return 0;
}

/* kernel/x86_64/sgemm_small_kernel_permit_skylakex.c, on the column-major
 * call (transa is the row-major B's): no buffer when M N K <= 100^3, except
 * TT with K < 4 and TN with M N > 1200 or K < 32. */
static int small_permit(int transa, int transb, int M, int N, int K) {
    if ((double)M * N * K > 1e6) return 0;
    if (transa && transb) return K >= 4;
    if (transa) return !((long)M * N > 1200 || K < 32);
    return 1;
}

static int roundup(int x, int to) { return (x + to - 1) / to * to; }

void hfl_blas_footprint_gemm(hfl_blas_footprint *f, int ta, int tb, int m, int n, int k) {
    const hfl_blas_blocking *b = f->b;
    int M = n, N = m, K = k; /* the column-major call cblas makes of a row-major one */
    if (!b || M <= 0 || N <= 0 || K <= 0) return;
    if (b->small_matrix && small_permit(tb, ta, M, N, K)) return;
    int min_l = K >= 2 * b->q ? b->q : K > b->q ? roundup(K / 2, b->unroll_m) : K;
    int min_i = M >= 2 * b->p ? b->p : M > b->p ? roundup(M / 2, b->unroll_m) : M;
    int jj = N >= 3 * b->unroll_n ? 3 * b->unroll_n : N > b->unroll_n ? b->unroll_n : N;
    uint64_t a = (uint64_t)min_i * min_l * 4;
    uint64_t bb = (uint64_t)min_l * (M > b->p ? N : jj) * 4;
    if (a > f->a_max) f->a_max = a;
    if (bb > f->b_max) f->b_max = bb;
}

uint64_t hfl_blas_footprint_bytes(const hfl_blas_footprint *f) {
    return (f->a_max + 4095) / 4096 * 4096 + (f->b_max + 4095) / 4096 * 4096;
}

typedef struct {
    void (*sink)(void *ctx, int ta, int tb, int m, int n, int k);
    void *ctx;
    int lp; /* the calls are a 2-byte gemm's tiles */
} gemms;

/* A call op(A) m x k times op(B) k x n (ta, tb: transposed); in 2-byte
 * storage the gemm's tiles of it, with the same transposes: full tiles and
 * the remainders along each axis (cpu_gemm in backend_cpu.c). */
static void g(const gemms *s, int ta, int tb, int m, int n, int k) {
    if (!s->lp) {
        s->sink(s->ctx, ta, tb, m, n, k);
        return;
    }
    int dims[3] = {m, n, k}, tile[3] = {HFL_GEMM_TILE, HFL_GEMM_TILE, HFL_GEMM_TILE_K}, part[3][2];
    for (int a = 0; a < 3; a++) {
        part[a][0] = dims[a] < tile[a] ? dims[a] : tile[a];
        part[a][1] = dims[a] > tile[a] ? dims[a] % tile[a] : 0;
    }
    for (int i = 0; i < 8; i++) {
        int mm = part[0][i & 1], nn = part[1][(i >> 1) & 1], kk = part[2][i >> 2];
        if (mm && nn && kk) s->sink(s->ctx, ta, tb, mm, nn, kk);
    }
}

/* A projection x [rows, in] -> [rows, out] forward, with rank-r adapters. */
static void proj_fwd(const gemms *s, int rows, int in, int out, int r) {
    g(s, 0, 1, rows, out, in);
    if (r) {
        g(s, 0, 1, rows, r, in);
        g(s, 0, 1, rows, out, r);
    }
}

/* Its backward (gpt.c's proj_backward, dense.c, lora.c): dW and dx, or with
 * adapters the frozen base's dx and the adapters' GEMMs. */
static void proj_bwd(const gemms *s, int rows, int in, int out, int r, int dx) {
    if (!r) g(s, 1, 0, out, in, rows);
    if (dx) g(s, 0, 0, rows, in, out);
    if (!r) return;
    g(s, 1, 0, out, r, rows); /* dB */
    g(s, 0, 0, rows, r, out); /* du */
    g(s, 1, 0, r, in, rows);  /* dA */
    if (dx) g(s, 0, 0, rows, in, r);
}

static void block_gemms(const gemms *s, const hfl_layer *ly, int batch, int dx) {
    int T = ly->in_shape.c, C = ly->in_shape.w, hs = C / ly->heads, rows = batch * T;
    int r = ly->lora_rank;
    /* forward (gpt.c, attention.c) */
    proj_fwd(s, rows, C, 3 * C, r);
    g(s, 0, 1, T, T, hs); /* q k^T per head */
    g(s, 0, 0, T, hs, T); /* att v */
    proj_fwd(s, rows, C, C, r);
    proj_fwd(s, rows, C, 4 * C, r);
    proj_fwd(s, rows, 4 * C, C, r);
    /* backward: MLP, attention projection, attention, qkv */
    proj_bwd(s, rows, 4 * C, C, r, 1);
    proj_bwd(s, rows, C, 4 * C, r, 1);
    proj_bwd(s, rows, C, C, r, 1);
    g(s, 0, 1, T, T, hs); /* datt */
    g(s, 1, 0, T, hs, T); /* dv, dk */
    g(s, 0, 0, T, hs, T); /* dq */
    proj_bwd(s, rows, C, 3 * C, r, dx);
}

void hfl_step_gemms(const hfl_model_spec *spec, int batch, hfl_precision p,
                    void (*sink)(void *ctx, int ta, int tb, int m, int n, int k), void *ctx) {
    gemms s = {sink, ctx, p != HFL_PREC_FP32};
    /* the planner's first_param: backward stops there and it has no dx */
    int first = spec->n_layers - 1;
    for (int l = spec->n_layers - 1; l >= 0; l--) {
        const hfl_layer *ly = &spec->layers[l];
        if ((ly->n_params && !ly->frozen) || ly->lora_rank) first = l;
    }
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *ly = &spec->layers[l];
        int bwd = l >= first, dx = l > first;
        switch (ly->kind) {
        case HFL_LAYER_DENSE:
            g(&s, 0, 1, batch, ly->out, ly->in);
            if (bwd) g(&s, 1, 0, ly->out, ly->in, batch);
            if (dx) g(&s, 0, 0, batch, ly->in, ly->out);
            break;
        case HFL_LAYER_CONV2D: { /* per sample: y and dcols; per chunk of cn: dW, K = cn*hw (conv.c) */
            int ckk = ly->in_shape.c * ly->kernel * ly->kernel;
            int hw = ly->out_shape.h * ly->out_shape.w;
            int cn = ly->chunk > 1 ? (ly->chunk < batch ? ly->chunk : batch) : 1;
            g(&s, 0, 0, ly->units, hw, ckk);
            if (bwd) g(&s, 0, 1, ly->units, ckk, cn * hw);
            if (bwd && batch % cn) g(&s, 0, 1, ly->units, ckk, batch % cn * hw); /* the last chunk */
            if (dx) g(&s, 1, 0, ckk, hw, ly->units);
            break;
        }
        case HFL_LAYER_GPT_BLOCK:
            block_gemms(&s, ly, batch, dx);
            break;
        case HFL_LAYER_LM_HEAD: { /* logits = hf wte^T; dwte unless frozen; dhf */
            int rows = batch * ly->in_shape.c, C = ly->in_shape.w, V = ly->vocab;
            g(&s, 0, 1, rows, V, C);
            if (!ly->frozen) g(&s, 1, 0, V, C, rows);
            g(&s, 0, 0, rows, C, V);
            break;
        }
        default: /* relu, maxpool2d, embedding: no GEMM */
            break;
        }
    }
}

static void footprint_sink(void *ctx, int ta, int tb, int m, int n, int k) {
    hfl_blas_footprint_gemm(ctx, ta, tb, m, n, k);
}

uint64_t hfl_blas_step_footprint(const hfl_model_spec *spec, int batch, hfl_precision p,
                                 const hfl_blas_blocking *b) {
    if (!b) return 0;
    hfl_blas_footprint f = {b, 0, 0};
    hfl_step_gemms(spec, batch, p, footprint_sink, &f);
    return hfl_blas_footprint_bytes(&f);
}
