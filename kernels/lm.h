/* lm.h: the transformer language model's device ops (issue 13), a second
 * table beside kernels/backend.h's, reached as be->lm.
 *
 * Every op is a loop (CPU, cpu/lm_cpu.c) or a kernel (CUDA, cuda/lm.cu) over
 * the thread bodies of kernels/lm_hd.h, whose comments give the formulas
 * and layouts; pointers are device pointers, fp32. Attention itself is
 * composed from these and the backend's strided GEMM in model/attention.c.
 * A backend without the table has be->lm == NULL. */
#ifndef HFL_LM_H
#define HFL_LM_H

#include <stddef.h>

#include "kernels/lm_hd.h"

typedef struct hfl_lm_ops {
    /* y [rows, C] from token ids (floats) and the token and position tables. */
    void (*embed_fwd)(float *y, const float *tokens, const float *wte, const float *wpe, int rows,
                      int T, int C, int V);
    /* dwte [V, C] and dwpe [T, C] overwritten, or added to when `accumulate`. */
    void (*embed_bwd)(float *dwte, float *dwpe, const float *dy, const float *tokens, int rows,
                      int T, int C, int V, int accumulate);
    /* y [rows, C]; mean and rstd [rows] saved for backward. y may alias x. */
    void (*layernorm_fwd)(float *y, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int rows, int C);
    /* dw, db [C] overwritten or added to (`accumulate`), then dx [rows, C]
     * overwritten (it may alias dy) or added to (`dx_add`; no alias). */
    void (*layernorm_bwd)(float *dx, float *dw, float *db, const float *dy, const float *x,
                          const float *w, const float *mean, const float *rstd, int rows, int C,
                          int accumulate, int dx_add);
    void (*gelu_fwd)(float *y, const float *x, size_t n);
    /* dx = dy * gelu'(x); dx may alias dy. */
    void (*gelu_bwd)(float *dx, const float *dy, const float *x, size_t n);
    /* heads [n, H, T, hs] from (gather) or into (scatter) rows of ld floats. */
    void (*heads_gather)(float *heads, const float *rows, int n, int T, int H, int hs, int ld);
    void (*heads_scatter)(float *rows, const float *heads, int n, int T, int H, int hs, int ld);
    /* n_rows rows of T scores: causal softmax of scale * z; p may alias z. */
    void (*causal_softmax)(float *p, const float *z, size_t n_rows, int T, float scale);
    /* Its backward; dz may alias dp. */
    void (*causal_softmax_bwd)(float *dz, const float *dp, const float *p, size_t n_rows, int T,
                               float scale);
    void (*adamw_step)(float *w, float *m, float *v, const float *g, size_t n, hfl_adamw_args a);
} hfl_lm_ops;

/* AdamW's per-step constants for step number `step` (1, 2, ...). */
hfl_adamw_args hfl_adamw_make(float lr, float beta1, float beta2, float eps, float wd, long step);

#endif
