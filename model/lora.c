/* lora.c: LoRA adapters on a projection, in any storage type (lora.h; Hu et al.
 * 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3:
 * h = W0 x + B A x, scaled by alpha / r as in its section 4.1). Each step is
 * one backend GEMM, row-major. */
#include "model/lora.h"

#include "kernels/ops_hd.h"

size_t hfl_gpt_lora_n_params(int C, int r) { return 16 * (size_t)r * C; }

/* Element offsets of the 8 tensors in lora.h's order (the struct's). */
void hfl_gpt_lora_offsets(int C, int r, size_t off[8]) {
    size_t rc = (size_t)r * C, count[8] = {rc, 3 * rc, rc, rc, rc, 4 * rc, 4 * rc, rc};
    for (int i = 0; i < 8; i++) off[i] = i ? off[i - 1] + count[i - 1] : 0;
}

hfl_gpt_lora_params hfl_gpt_lora_view(hfl_precision t, void *b, int C, int r) {
    size_t o[8];
    hfl_gpt_lora_offsets(C, r, o);
    return (hfl_gpt_lora_params){hfl_at(t, b, o[0]), hfl_at(t, b, o[1]), hfl_at(t, b, o[2]),
                                 hfl_at(t, b, o[3]), hfl_at(t, b, o[4]), hfl_at(t, b, o[5]),
                                 hfl_at(t, b, o[6]), hfl_at(t, b, o[7])};
}

static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

/* The largest staging of the six GEMMs below. */
size_t hfl_lora_ws_bytes(hfl_precision t, int rows, int in, int out, int r) {
    size_t w = mx(hfl_gemm_ws_bytes(t, 0, rows, r, in), hfl_gemm_ws_bytes(t, 0, rows, out, r));
    w = mx(w, hfl_gemm_ws_bytes(t, HFL_GEMM_C_F32, out, r, rows));
    w = mx(w, hfl_gemm_ws_bytes(t, 0, rows, r, out));
    w = mx(w, hfl_gemm_ws_bytes(t, HFL_GEMM_C_F32, r, in, rows));
    return mx(w, hfl_gemm_ws_bytes(t, 0, rows, in, r));
}

void hfl_lora_forward(const hfl_backend *be, hfl_precision t, const void *a, const void *b,
                      const void *x, void *u, void *y, int rows, int in, int out, int r,
                      float scale, void *ws) {
    /* u[rows,r] = x[rows,in] A[r,in]^T; y[rows,out] += scale u B[out,r]^T */
    be->gemm(t, 0, 0, 1, rows, r, in, 1.0f, x, in, a, in, 0.0f, u, r, NULL, HFL_BIAS_NONE, ws);
    be->gemm(t, 0, 0, 1, rows, out, r, scale, u, r, b, r, 1.0f, y, out, NULL, HFL_BIAS_NONE, ws);
}

void hfl_lora_backward(const hfl_backend *be, hfl_precision t, const void *a, const void *b,
                       const void *x, const void *u, const void *dy, float *da, float *db, void *du,
                       void *dx, int rows, int in, int out, int r, float scale, int accumulate,
                       void *ws) {
    float beta = accumulate ? 1.0f : 0.0f;
    /* dB[out,r] (+)= scale dy^T u;  du[rows,r] = scale dy B */
    be->gemm(t, HFL_GEMM_C_F32, 1, 0, out, r, rows, scale, dy, out, u, r, beta, db, r, NULL,
             HFL_BIAS_NONE, ws);
    be->gemm(t, 0, 0, 0, rows, r, out, scale, dy, out, b, r, 0.0f, du, r, NULL, HFL_BIAS_NONE, ws);
    /* dA[r,in] (+)= du^T x;  dx[rows,in] += du A */
    be->gemm(t, HFL_GEMM_C_F32, 1, 0, r, in, rows, 1.0f, du, r, x, in, beta, da, in, NULL,
             HFL_BIAS_NONE, ws);
    if (dx)
        be->gemm(t, 0, 0, 0, rows, in, r, 1.0f, du, r, a, in, 1.0f, dx, in, NULL, HFL_BIAS_NONE,
                 ws);
}
