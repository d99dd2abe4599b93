/* gpt.h: the GPT-2 style transformer block, and the tied language-model head,
 * as forward and backward passes over caller-given buffers (issue 13).
 *
 * A block (Radford et al. 2019; nanoGPT's Block) on rows = n*T tokens of C
 * features, pre-norm, both residual connections inside it:
 *   h1 = LN1(x);  qkv = h1 Wqkv^T + bqkv;  ya = attention(qkv)  (model/attention.h)
 *   x2 = x + ya Wo^T + bo
 *   h2 = LN2(x2); f = h2 Wfc^T + bfc (4C wide);  g = gelu(f)
 *   out = x2 + g Wp^T + bp
 * Its parameter block, in this order with PyTorch's nn.Linear layouts
 * ([out, in]) and nanoGPT's names: ln_1.weight, ln_1.bias [C];
 * attn.c_attn.weight [3C, C], .bias [3C]; attn.c_proj.weight [C, C], .bias;
 * ln_2.weight, .bias; mlp.c_fc.weight [4C, C], .bias [4C];
 * mlp.c_proj.weight [C, 4C], .bias [C]: 12 C^2 + 13 C floats.
 *
 * Everything is in the block's storage type t (kernels/backend.h, STORAGE
 * TYPES) but the layer-norm statistics and the parameter gradients, which
 * are fp32. What backward reads besides x and the parameters is the block's
 * saved activations (h1, LN statistics, qkv, the attention probabilities,
 * ya, x2, h2, f, g: hfl_gpt_block_saved_bytes per batch), which the forward
 * writes; a memory plan either keeps them until backward or drops them and
 * runs the forward again (gradient checkpointing with blocks as the chain's units).
 * The workspace (hfl_gpt_block_ws_bytes) holds attention's and the backward's
 * temporaries. Residual additions run as GEMMs with beta = 1 onto a copy of
 * the residual, so they need no op of their own.
 *
 * LoRA (model/lora.h): given adapters (a non-NULL hfl_gpt_lora), each of the
 * four projections adds its low-rank term, the saved activations (sized
 * with the adapters' rank r; r = 0 for none) add the four u [rows, r], and
 * the backward freezes the base: it computes the full dx and the adapters'
 * gradients only, and touches none of d's tensors (d, or its pointers, may
 * be NULL). Its workspace (sized with r) then also holds du [rows, r] and a
 * 2C-float scratch that kernels/lm.h's layernorm_bwd, which always writes
 * dw and db, writes the frozen layer norms' unused gradients into. Without
 * adapters the arithmetic is exactly the plain block's.
 *
 * The head: hf = LN_f(x), logits = hf wte^T (the output projection tied to
 * the token embedding, as GPT-2); its backward adds to the embedding's
 * gradient. */
#ifndef HFL_MODEL_GPT_H
#define HFL_MODEL_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "model/lora.h"

/* One block's parameters, of the block's storage type t, or their (fp32)
 * gradients: views into its block. */
typedef struct {
    void *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    void *ln2_w, *ln2_b, *fc_w, *fc_b, *fcp_w, *fcp_b;
} hfl_gpt_block_params;

size_t hfl_gpt_block_n_params(int C);
hfl_gpt_block_params hfl_gpt_block_view(hfl_precision t, void *block, int C);
void hfl_gpt_block_offsets(int C, size_t off[12]); /* each tensor's element offset, in order */

/* The activations a block's backward reads (of type t; the layer-norm
 * statistics fp32), views into one buffer. */
typedef struct {
    void *h1, *qkv, *att, *ya, *x2, *h2, *f, *g;
    float *mean1, *rstd1, *mean2, *rstd2;
    void *u_qkv, *u_proj, *u_fc, *u_fcp; /* LoRA's x A^T [rows, r]; NULL when r = 0 */
} hfl_gpt_block_saved;

/* r: the LoRA rank, 0 without adapters (then the sizes and layout are the
 * plain block's; the u's come after everything else). */
size_t hfl_gpt_block_saved_bytes(hfl_precision t, int n, int T, int C, int H, int r);
hfl_gpt_block_saved hfl_gpt_block_saved_view(hfl_precision t, void *base, int n, int T, int C,
                                             int H, int r);
size_t hfl_gpt_block_ws_bytes(hfl_precision t, int n, int T, int C, int H, int r); /* backward's */
size_t hfl_gpt_block_fwd_ws_bytes(hfl_precision t, int n, int T, int C, int H, int r);

/* out [rows, C] (may not alias x); fills s. lora: NULL, or adapters of rank
 * lora->r, the r s and ws were sized with. In a 2-byte type the dense
 * layers' residual GEMMs round residual + product + bias once. */
void hfl_gpt_block_forward(const hfl_backend *be, hfl_precision t, const hfl_gpt_block_params *p,
                           const hfl_gpt_lora *lora, const void *x, void *out,
                           const hfl_gpt_block_saved *s, void *ws, int n, int T, int C, int H);
/* dx [rows, C] from dout (dx may alias dout); parameter gradients into d
 * (fp32; into lora->d instead, the base frozen, with adapters), overwritten
 * or added to when `accumulate`. */
void hfl_gpt_block_backward(const hfl_backend *be, hfl_precision t, const hfl_gpt_block_params *p,
                            const hfl_gpt_block_params *d, const hfl_gpt_lora *lora, const void *x,
                            const hfl_gpt_block_saved *s, const void *dout, void *dx, void *ws,
                            int n, int T, int C, int H, int accumulate);

/* The head over rows tokens: hf [rows, C], mean and rstd [rows] saved;
 * logits [rows, V]; ws holds hfl_gpt_head_ws_bytes (the gemm's staging). */
size_t hfl_gpt_head_ws_bytes(hfl_precision t, int rows, int C, int V);
void hfl_gpt_head_forward(const hfl_backend *be, hfl_precision t, const void *x, const void *lnf_w,
                          const void *lnf_b, const void *wte, void *hf, float *mean, float *rstd,
                          void *logits, void *ws, int rows, int C, int V);
/* From dlogits: dwte (+)= dlogits^T hf (skipped when dwte is NULL: wte
 * frozen), then dlnf_w, dlnf_b (+)=, dx [rows, C] overwritten; dhf [rows, C]
 * is workspace, ws as for the forward. */
void hfl_gpt_head_backward(const hfl_backend *be, hfl_precision t, const void *x, const void *lnf_w,
                           const void *wte, const void *hf, const float *mean, const float *rstd,
                           const void *dlogits, float *dwte, float *dlnf_w, float *dlnf_b, void *dx,
                           void *dhf, void *ws, int rows, int C, int V, int accumulate);

#endif
