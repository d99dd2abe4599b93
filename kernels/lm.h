/* lm.h: the transformer language model's device ops (issue 13), a second
 * table beside kernels/backend.h's, reached as be->lm.
 *
 * Every op is a loop (CPU, cpu/lm_cpu.c) or a kernel (CUDA, cuda/lm.cu) over
 * the thread bodies of kernels/lm_hd.h, whose comments give the formulas
 * and layouts; pointers are device pointers, of the op's storage type t
 * (kernels/backend.h, STORAGE TYPES) where void, fp32 where float. Token
 * ids travel as values of the input batch's type, exact for ids below 2^24
 * in fp32 but only below 256 in bf16 and 2048 in fp16: a model in 2-byte
 * storage with a larger vocabulary must refuse (the byte-level corpus has
 * 256). Attention itself is composed from these and the backend's strided
 * GEMM in model/attention.c. A backend without the table has be->lm == NULL. */
#ifndef HFL_LM_H
#define HFL_LM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/lm_hd.h"

typedef struct hfl_lm_ops {
    /* y [rows, C] from token ids (of type t) and the token and position tables. */
    void (*embed_fwd)(hfl_precision t, void *y, const void *tokens, const void *wte,
                      const void *wpe, int rows, int T, int C, int V);
    /* dwte [V, C] and dwpe [T, C] (fp32) overwritten, or added to when `accumulate`. */
    void (*embed_bwd)(hfl_precision t, float *dwte, float *dwpe, const void *dy, const void *tokens,
                      int rows, int T, int C, int V, int accumulate);
    /* y [rows, C]; mean and rstd [rows] (fp32) saved for backward. y may alias x. */
    void (*layernorm_fwd)(hfl_precision t, void *y, float *mean, float *rstd, const void *x,
                          const void *w, const void *b, int rows, int C);
    /* dw, db [C] (fp32) overwritten or added to (`accumulate`), then dx
     * [rows, C] overwritten (it may alias dy) or added to (`dx_add`; no alias). */
    void (*layernorm_bwd)(hfl_precision t, void *dx, float *dw, float *db, const void *dy,
                          const void *x, const void *w, const float *mean, const float *rstd,
                          int rows, int C, int accumulate, int dx_add);
    void (*gelu_fwd)(hfl_precision t, void *y, const void *x, size_t n);
    /* dx = dy * gelu'(x); dx may alias dy. */
    void (*gelu_bwd)(hfl_precision t, void *dx, const void *dy, const void *x, size_t n);
    /* heads [n, H, T, hs] from (gather) or into (scatter) rows of ld elements. */
    void (*heads_gather)(hfl_precision t, void *heads, const void *rows, int n, int T, int H,
                         int hs, int ld);
    void (*heads_scatter)(hfl_precision t, void *rows, const void *heads, int n, int T, int H,
                          int hs, int ld);
    /* n_rows rows of T scores: causal softmax of scale * z; p may alias z. */
    void (*causal_softmax)(hfl_precision t, void *p, const void *z, size_t n_rows, int T,
                           float scale);
    /* Its backward; dz may alias dp. */
    void (*causal_softmax_bwd)(hfl_precision t, void *dz, const void *dp, const void *p,
                               size_t n_rows, int T, float scale);
} hfl_lm_ops;

#endif
