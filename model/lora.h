/* lora.h: LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of
 * Large Language Models") on the four projections of a GPT block (gpt.h):
 * attn.c_attn [3C, C], attn.c_proj [C, C], mlp.c_fc [4C, C], mlp.c_proj
 * [C, 4C], the base weights frozen.
 *
 * Per projection, input x [rows, in], output y [rows, out], PEFT's names and
 * nn.Linear layouts lora_A [r, in], lora_B [out, r], scale = alpha / r:
 *   forward:  u = x A^T [rows, r] (saved for backward);  y += scale u B^T
 *   backward: dB (+)= scale dy^T u;  du = scale dy B;  dA (+)= du^T x;
 *             dx += du A  (on top of the frozen base's dx = dy W).
 * An adapter block, in this order (each projection's A then B): qkv_a [r, C],
 * qkv_b [3C, r], proj_a [r, C], proj_b [C, r], fc_a [r, C], fc_b [4C, r],
 * fcp_a [r, 4C], fcp_b [C, r]: 16 r C floats. PEFT initialises A at random
 * and B = 0, so a fresh adapter leaves the model unchanged.
 *
 * In 2-byte storage (gpt.h's _lp block) the adapters' working copies, u and
 * du are 2-byte of lp, their gradients fp32, like the base's; the adapter
 * term is added onto the base projection's rounded output and rounded once
 * more (as PyTorch autocast's base(x) + lora_B(lora_A(x)) * scale). */
#ifndef HFL_MODEL_LORA_H
#define HFL_MODEL_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* One block's adapters (or their gradients): views into its adapter block. */
typedef struct {
    float *qkv_a, *qkv_b, *proj_a, *proj_b, *fc_a, *fc_b, *fcp_a, *fcp_b;
} hfl_gpt_lora_params;
typedef struct {
    uint16_t *qkv_a, *qkv_b, *proj_a, *proj_b, *fc_a, *fc_b, *fcp_a, *fcp_b;
} hfl_gpt_lora_params_lp;

size_t hfl_gpt_lora_n_params(int C, int r);
void hfl_gpt_lora_offsets(int C, int r, size_t off[8]); /* each tensor's element offset, in order */
hfl_gpt_lora_params hfl_gpt_lora_view(float *block, int C, int r);
hfl_gpt_lora_params_lp hfl_gpt_lora_view_lp(uint16_t *block, int C, int r);

/* What a block's forward and backward take for its adapters (NULL: none).
 * r >= 1 must equal the r its saved activations and workspace were sized
 * with. The fp32 block reads w, the _lp block w_lp; both backwards write d
 * (fp32), overwritten or added to as the call's `accumulate` says, and touch
 * none of the base's gradients. */
typedef struct {
    int r;
    float scale;                 /* alpha / r */
    hfl_gpt_lora_params w;       /* fp32 adapters */
    hfl_gpt_lora_params_lp w_lp; /* their 2-byte working copies */
    hfl_gpt_lora_params d;       /* fp32 gradients */
} hfl_gpt_lora;

/* One projection's adapter term (file comment): y += scale (x A^T) B^T, u saved. */
void hfl_lora_forward(const hfl_backend *be, const float *a, const float *b, const float *x,
                      float *u, float *y, int rows, int in, int out, int r, float scale);
/* da, db (+)=, dx += (du [rows, r] is workspace; dx NULL: not wanted). */
void hfl_lora_backward(const hfl_backend *be, const float *a, const float *b, const float *x,
                       const float *u, const float *dy, float *da, float *db, float *du, float *dx,
                       int rows, int in, int out, int r, float scale, int accumulate);

/* The same in 2-byte storage; ws holds hfl_lora_ws_bytes_lp (gemm_lp's staging). */
size_t hfl_lora_ws_bytes_lp(int rows, int in, int out, int r);
void hfl_lora_forward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *a,
                         const uint16_t *b, const uint16_t *x, uint16_t *u, uint16_t *y, int rows,
                         int in, int out, int r, float scale, void *ws);
void hfl_lora_backward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *a,
                          const uint16_t *b, const uint16_t *x, const uint16_t *u,
                          const uint16_t *dy, float *da, float *db, uint16_t *du, uint16_t *dx,
                          int rows, int in, int out, int r, float scale, int accumulate, void *ws);

#endif
