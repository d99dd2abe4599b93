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
 * What backward reads besides x and the parameters is the block's saved
 * activations (h1, LN statistics, qkv, the attention probabilities, ya, x2,
 * h2, f, g: hfl_gpt_block_saved_floats per batch), which the forward writes;
 * a memory plan either keeps them until backward or drops them and runs the
 * forward again (gradient checkpointing with blocks as the chain's units).
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

/* One block's parameters (or their gradients): views into its block. */
typedef struct {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcp_w, *fcp_b;
} hfl_gpt_block_params;

size_t hfl_gpt_block_n_params(int C);
hfl_gpt_block_params hfl_gpt_block_view(float *block, int C);
void hfl_gpt_block_offsets(int C, size_t off[12]); /* each tensor's element offset, in order */

/* The activations a block's backward reads, views into one buffer. */
typedef struct {
    float *h1, *mean1, *rstd1, *qkv, *att, *ya, *x2, *h2, *mean2, *rstd2, *f, *g;
    float *u_qkv, *u_proj, *u_fc, *u_fcp; /* LoRA's x A^T [rows, r]; NULL when r = 0 */
} hfl_gpt_block_saved;

/* r: the LoRA rank, 0 without adapters (then the sizes and layout are the
 * plain block's; the u's come after everything else). */
size_t hfl_gpt_block_saved_floats(int n, int T, int C, int H, int r);
hfl_gpt_block_saved hfl_gpt_block_saved_view(float *base, int n, int T, int C, int H, int r);
size_t hfl_gpt_block_ws_bytes(int n, int T, int C, int H, int r);

/* out [rows, C] (may not alias x); fills s. lora: NULL, or adapters of rank
 * lora->r, the r s and ws were sized with. */
void hfl_gpt_block_forward(const hfl_backend *be, const hfl_gpt_block_params *p,
                           const hfl_gpt_lora *lora, const float *x, float *out,
                           const hfl_gpt_block_saved *s, void *ws, int n, int T, int C, int H);
/* dx [rows, C] from dout (dx may alias dout); parameter gradients into d
 * (into lora->d instead, the base frozen, with adapters), overwritten or
 * added to when `accumulate`. */
void hfl_gpt_block_backward(const hfl_backend *be, const hfl_gpt_block_params *p,
                            const hfl_gpt_block_params *d, const hfl_gpt_lora *lora, const float *x,
                            const hfl_gpt_block_saved *s, const float *dout, float *dx, void *ws,
                            int n, int T, int C, int H, int accumulate);

/* The head over rows tokens: hf [rows, C], mean and rstd [rows] saved;
 * logits [rows, V]. */
void hfl_gpt_head_forward(const hfl_backend *be, const float *x, const float *lnf_w,
                          const float *lnf_b, const float *wte, float *hf, float *mean,
                          float *rstd, float *logits, int rows, int C, int V);
/* From dlogits: dwte (+)= dlogits^T hf (skipped when dwte is NULL: wte
 * frozen), then dlnf_w, dlnf_b (+)=, dx [rows, C] overwritten; dhf [rows, C]
 * is workspace. */
void hfl_gpt_head_backward(const hfl_backend *be, const float *x, const float *lnf_w,
                           const float *wte, const float *hf, const float *mean, const float *rstd,
                           const float *dlogits, float *dwte, float *dlnf_w, float *dlnf_b,
                           float *dx, float *dhf, int rows, int C, int V, int accumulate);

/* ---- 2-byte storage (bf16/fp16) ----
 * The same block with 2-byte activations, activation gradients and working
 * weights (uint16_t of lp), fp32 layer-norm statistics and fp32 parameter
 * gradients: dense layers through gemm_lp (the residual GEMMs round
 * residual + product + bias once), attention through
 * hfl_attention_*_lp, the rest through the _lp ops. */
typedef struct {
    uint16_t *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    uint16_t *ln2_w, *ln2_b, *fc_w, *fc_b, *fcp_w, *fcp_b;
} hfl_gpt_block_params_lp;

typedef struct {
    uint16_t *h1, *qkv, *att, *ya, *x2, *h2, *f, *g;
    float *mean1, *rstd1, *mean2, *rstd2;
    uint16_t *u_qkv, *u_proj, *u_fc, *u_fcp; /* LoRA's, 2-byte; NULL when r = 0 */
} hfl_gpt_block_saved_lp;

hfl_gpt_block_params_lp hfl_gpt_block_view_lp(uint16_t *block, int C);
size_t hfl_gpt_block_saved_bytes_lp(int n, int T, int C, int H, int r);
hfl_gpt_block_saved_lp hfl_gpt_block_saved_view_lp(void *base, int n, int T, int C, int H, int r);
size_t hfl_gpt_block_ws_bytes_lp(int n, int T, int C, int H, int r);     /* backward's */
size_t hfl_gpt_block_fwd_ws_bytes_lp(int n, int T, int C, int H, int r); /* forward's (less) */

/* lora as in the fp32 block; these read its w_lp. */
void hfl_gpt_block_forward_lp(const hfl_backend *be, hfl_precision lp,
                              const hfl_gpt_block_params_lp *p, const hfl_gpt_lora *lora,
                              const uint16_t *x, uint16_t *out, const hfl_gpt_block_saved_lp *s,
                              void *ws, int n, int T, int C, int H);
void hfl_gpt_block_backward_lp(const hfl_backend *be, hfl_precision lp,
                               const hfl_gpt_block_params_lp *p, const hfl_gpt_block_params *d,
                               const hfl_gpt_lora *lora, const uint16_t *x,
                               const hfl_gpt_block_saved_lp *s,
                               const uint16_t *dout, uint16_t *dx, void *ws, int n, int T, int C,
                               int H, int accumulate);
/* The head: hf (2-byte), logits (2-byte); backward's dwte, dlnf_* fp32, dx
 * and dhf 2-byte; ws holds hfl_gpt_head_ws_bytes_lp. */
size_t hfl_gpt_head_ws_bytes_lp(int rows, int C, int V);
void hfl_gpt_head_forward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *x,
                             const uint16_t *lnf_w, const uint16_t *lnf_b, const uint16_t *wte,
                             uint16_t *hf, float *mean, float *rstd, uint16_t *logits, void *ws,
                             int rows, int C, int V);
void hfl_gpt_head_backward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *x,
                              const uint16_t *lnf_w, const uint16_t *wte, const uint16_t *hf,
                              const float *mean, const float *rstd, const uint16_t *dlogits,
                              float *dwte, float *dlnf_w, float *dlnf_b, uint16_t *dx,
                              uint16_t *dhf, void *ws, int rows, int C, int V, int accumulate);

#endif
