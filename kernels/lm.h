/* lm.h: the transformer language model's device ops (issue 13), a second
 * table beside kernels/backend.h's, reached as be->lm.
 *
 * Every op is a loop (CPU, cpu/lm_cpu.c) or a kernel (CUDA, cuda/lm.cu) over
 * the thread bodies of kernels/lm_hd.h, whose comments give the formulas
 * and layouts; pointers are device pointers, fp32 (float) or 2-byte
 * (uint16_t of lp) as typed. Token ids travel as floats of the input batch's
 * type, exact for ids below 2^24 in fp32 but only below 256 in bf16 and 2048
 * in fp16: a model in 2-byte storage with a larger vocabulary must refuse
 * (the byte-level corpus has 256). Attention itself is
 * composed from these and the backend's strided GEMM in model/attention.c.
 * A backend without the table has be->lm == NULL. */
#ifndef HFL_LM_H
#define HFL_LM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
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
    /* AdamW (lm_hd.h): with a.sc, first counts the step in a.sc and takes the
     * bias corrections from it (one thread on the GPU, then the update). */
    void (*adamw_step)(float *w, float *m, float *v, const float *g, size_t n, hfl_adamw_args a);

    /* ---- 2-byte storage: the same ops with 2-byte activations, tables and
     * working weights of type lp (bf16 or fp16), fp32 statistics, parameter
     * gradients and optimizer state; each is the fp32 op on the widened
     * inputs with every 2-byte output rounded once (lm_hd.h). ---- */
    void (*embed_fwd_lp)(hfl_precision lp, uint16_t *y, const uint16_t *tokens, const uint16_t *wte,
                         const uint16_t *wpe, int rows, int T, int C, int V);
    void (*embed_bwd_lp)(hfl_precision lp, float *dwte, float *dwpe, const uint16_t *dy,
                         const uint16_t *tokens, int rows, int T, int C, int V, int accumulate);
    void (*layernorm_fwd_lp)(hfl_precision lp, uint16_t *y, float *mean, float *rstd,
                             const uint16_t *x, const uint16_t *w, const uint16_t *b, int rows,
                             int C);
    void (*layernorm_bwd_lp)(hfl_precision lp, uint16_t *dx, float *dw, float *db,
                             const uint16_t *dy, const uint16_t *x, const uint16_t *w,
                             const float *mean, const float *rstd, int rows, int C, int accumulate,
                             int dx_add);
    void (*gelu_fwd_lp)(hfl_precision lp, uint16_t *y, const uint16_t *x, size_t n);
    void (*gelu_bwd_lp)(hfl_precision lp, uint16_t *dx, const uint16_t *dy, const uint16_t *x,
                        size_t n);
    void (*heads_gather_lp)(uint16_t *heads, const uint16_t *rows, int n, int T, int H, int hs,
                            int ld);
    void (*heads_scatter_lp)(uint16_t *rows, const uint16_t *heads, int n, int T, int H, int hs,
                             int ld);
    void (*causal_softmax_lp)(hfl_precision lp, uint16_t *p, const uint16_t *z, size_t n_rows,
                              int T, float scale);
    void (*causal_softmax_bwd_lp)(hfl_precision lp, uint16_t *dz, const uint16_t *dp,
                                  const uint16_t *p, size_t n_rows, int T, float scale);
    /* AdamW on the fp32 masters, then w = masters rounded; nothing, the
     * count in a.sc included, when skip_if_nonfinite is given and its finite
     * flag is 0 (fp16's skipped step). */
    void (*adamw_step_lp)(hfl_precision lp, float *master, float *m, float *v, const float *g,
                          uint16_t *w, size_t n, hfl_adamw_args a,
                          const hfl_step_scalars *skip_if_nonfinite);
} hfl_lm_ops;

/* AdamW's per-step constants for step number `step` (1, 2, ...), sc NULL:
 * the bias corrections adamw_step computes on the device after `step`
 * counted steps, bit for bit (the same bodies; one multiplication a step). */
hfl_adamw_args hfl_adamw_make(float lr, float beta1, float beta2, float eps, float wd, long step);

#endif
