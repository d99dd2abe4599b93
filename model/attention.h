/* attention.h: causal multi-head self-attention, composed from the backend's
 * strided GEMM and the transformer ops of kernels/lm.h (issue 13).
 *
 * Input qkv [n*T, 3C]: each token's query, key and value side by side, each
 * C = H * hs wide with head h in columns h*hs .. h*hs + hs - 1 (what one
 * dense layer C -> 3C writes; PyTorch's q, k, v = qkv.split(C, -1) followed
 * by .view(n, T, H, hs).transpose(1, 2)). Output y [n*T, C]: the heads'
 * outputs concatenated the same way (before the output projection). att
 * [n, H, T, T] holds the softmax probabilities, the activation backward
 * needs; the scores are formed in it and overwritten. For each head:
 *   att = causal_softmax(q k^T / sqrt(hs)),  y = att v.
 * Backward, from dy: datt = dy v^T, dv = att^T dy, dz = softmax_bwd(datt),
 * dq = dz k / sqrt(hs), dk = dz^T q / sqrt(hs) (the 1/sqrt(hs) is inside
 * softmax_bwd's dz), written into dqkv's three column blocks.
 * C must be a multiple of H (the caller checks: a remainder would leave
 * y's last columns unwritten). Every GEMM is one strided batched call over the n*H heads, on heads
 * gathered into [n, H, T, hs] in the workspace (llm.c's layout). The T x T
 * matrix is materialised: its bytes are att's, and the backward workspace's
 * datt. */
#ifndef HFL_MODEL_ATTENTION_H
#define HFL_MODEL_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* Workspace bytes: forward 3 n T C floats (q, k, v heads; y's heads reuse
 * q's); backward 4 n T C + n H T T floats (q, k, v, dy heads and datt). */
size_t hfl_attention_fwd_ws_bytes(int n, int T, int C, int H);
size_t hfl_attention_bwd_ws_bytes(int n, int T, int C, int H);

void hfl_attention_forward(const hfl_backend *be, float *y, float *att, const float *qkv, float *ws,
                           int n, int T, int C, int H);
/* dqkv [n*T, 3C] overwritten (it has no parameters to accumulate). */
void hfl_attention_backward(const hfl_backend *be, float *dqkv, const float *dy, const float *qkv,
                            const float *att, float *ws, int n, int T, int C, int H);

/* The same in 2-byte storage (bf16/fp16: qkv, y, att, dy and dqkv are
 * uint16_t of lp): the GEMMs through gemm_lp (fp32 accumulation, each 2-byte
 * result rounded once), the scores rounded to lp before the softmax, which
 * computes in fp32 and rounds each probability once (lm_hd.h). The
 * workspaces hold the 2-byte heads (and datt), then gemm_lp's fp32 staging. */
size_t hfl_attention_fwd_ws_bytes_lp(int n, int T, int C, int H);
size_t hfl_attention_bwd_ws_bytes_lp(int n, int T, int C, int H);
void hfl_attention_forward_lp(const hfl_backend *be, hfl_precision lp, uint16_t *y, uint16_t *att,
                              const uint16_t *qkv, void *ws, int n, int T, int C, int H);
void hfl_attention_backward_lp(const hfl_backend *be, hfl_precision lp, uint16_t *dqkv,
                               const uint16_t *dy, const uint16_t *qkv, const uint16_t *att,
                               void *ws, int n, int T, int C, int H);

#endif
