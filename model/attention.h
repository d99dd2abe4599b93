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

/* Workspace bytes in type t: forward the q, k, v heads (y's heads reuse
 * q's), 3 n T C elements; backward the q, k, v, dy heads and datt, 4 n T C
 * + n H T T elements; in a 2-byte type each region 64-byte aligned and the
 * gemm's fp32 staging after them. */
size_t hfl_attention_fwd_ws_bytes(hfl_precision t, int n, int T, int C, int H);
size_t hfl_attention_bwd_ws_bytes(hfl_precision t, int n, int T, int C, int H);

/* qkv, y, att, dy and dqkv of type t: the GEMMs in the backend's gemm (fp32
 * accumulation, each 2-byte result rounded once), the scores stored in t
 * before the softmax, which computes in fp32 and rounds each probability
 * once (lm_hd.h). */
void hfl_attention_forward(const hfl_backend *be, hfl_precision t, void *y, void *att,
                           const void *qkv, void *ws, int n, int T, int C, int H);
/* dqkv [n*T, 3C] overwritten (it has no parameters to accumulate). */
void hfl_attention_backward(const hfl_backend *be, hfl_precision t, void *dqkv, const void *dy,
                            const void *qkv, const void *att, void *ws, int n, int T, int C, int H);

#endif
