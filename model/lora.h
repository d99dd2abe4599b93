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
 * The adapters' working copies, u and du are of the block's storage type,
 * their gradients fp32, like the base's; in a 2-byte type the adapter term
 * is added onto the base projection's rounded output and rounded once more
 * (as PyTorch autocast's base(x) + lora_B(lora_A(x)) * scale). */
#ifndef HFL_MODEL_LORA_H
#define HFL_MODEL_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* One block's adapters, of the block's storage type t, or their (fp32)
 * gradients: views into its adapter block. */
typedef struct {
    void *qkv_a, *qkv_b, *proj_a, *proj_b, *fc_a, *fc_b, *fcp_a, *fcp_b;
} hfl_gpt_lora_params;

size_t hfl_gpt_lora_n_params(int C, int r);
void hfl_gpt_lora_offsets(int C, int r, size_t off[8]); /* each tensor's element offset, in order */
hfl_gpt_lora_params hfl_gpt_lora_view(hfl_precision t, void *block, int C, int r);

/* What a block's forward and backward take for its adapters (NULL: none).
 * r >= 1 must equal the r its saved activations and workspace were sized
 * with. The block reads w (its working copies, of the block's type); its
 * backward writes d (fp32), overwritten or added to as the call's
 * `accumulate` says, and touches none of the base's gradients. */
typedef struct {
    int r;
    float scale;           /* alpha / r */
    hfl_gpt_lora_params w; /* the adapters, of the block's type */
    hfl_gpt_lora_params d; /* fp32 gradients */
} hfl_gpt_lora;

/* One projection's adapter term (file comment) in type t: y += scale (x A^T)
 * B^T, u saved; ws holds hfl_lora_ws_bytes (the gemm's staging). */
size_t hfl_lora_ws_bytes(hfl_precision t, int rows, int in, int out, int r);
void hfl_lora_forward(const hfl_backend *be, hfl_precision t, const void *a, const void *b,
                      const void *x, void *u, void *y, int rows, int in, int out, int r,
                      float scale, void *ws);
/* da, db (fp32) (+)=, dx += (du [rows, r] is workspace; dx NULL: not wanted). */
void hfl_lora_backward(const hfl_backend *be, hfl_precision t, const void *a, const void *b,
                       const void *x, const void *u, const void *dy, float *da, float *db, void *du,
                       void *dx, int rows, int in, int out, int r, float scale, int accumulate,
                       void *ws);

#endif
