/* lora.c: LoRA adapters on a projection, fp32 and 2-byte (lora.h; Hu et al.
 * 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3:
 * h = W0 x + B A x, scaled by alpha / r as in its section 4.1). Each step is
 * one backend GEMM, row-major as sgemm. */
#include "model/lora.h"

size_t hfl_gpt_lora_n_params(int C, int r) { return 16 * (size_t)r * C; }

/* Element offsets of the 8 tensors in lora.h's order (the struct's). */
void hfl_gpt_lora_offsets(int C, int r, size_t off[8]) {
    size_t rc = (size_t)r * C, count[8] = {rc, 3 * rc, rc, rc, rc, 4 * rc, 4 * rc, rc};
    for (int i = 0; i < 8; i++) off[i] = i ? off[i - 1] + count[i - 1] : 0;
}

hfl_gpt_lora_params hfl_gpt_lora_view(float *b, int C, int r) {
    size_t o[8];
    hfl_gpt_lora_offsets(C, r, o);
    return (hfl_gpt_lora_params){b + o[0], b + o[1], b + o[2], b + o[3],
                                 b + o[4], b + o[5], b + o[6], b + o[7]};
}

hfl_gpt_lora_params_lp hfl_gpt_lora_view_lp(uint16_t *b, int C, int r) {
    size_t o[8];
    hfl_gpt_lora_offsets(C, r, o);
    return (hfl_gpt_lora_params_lp){b + o[0], b + o[1], b + o[2], b + o[3],
                                    b + o[4], b + o[5], b + o[6], b + o[7]};
}

void hfl_lora_forward(const hfl_backend *be, const float *a, const float *b, const float *x,
                      float *u, float *y, int rows, int in, int out, int r, float scale) {
    /* u[rows,r] = x[rows,in] A[r,in]^T; y[rows,out] += scale u B[out,r]^T */
    be->sgemm(0, 1, rows, r, in, 1.0f, x, in, a, in, 0.0f, u, r);
    be->sgemm(0, 1, rows, out, r, scale, u, r, b, r, 1.0f, y, out);
}

void hfl_lora_backward(const hfl_backend *be, const float *a, const float *b, const float *x,
                       const float *u, const float *dy, float *da, float *db, float *du, float *dx,
                       int rows, int in, int out, int r, float scale, int accumulate) {
    float beta = accumulate ? 1.0f : 0.0f;
    /* dB[out,r] (+)= scale dy^T u;  du[rows,r] = scale dy B */
    be->sgemm(1, 0, out, r, rows, scale, dy, out, u, r, beta, db, r);
    be->sgemm(0, 0, rows, r, out, scale, dy, out, b, r, 0.0f, du, r);
    /* dA[r,in] (+)= du^T x;  dx[rows,in] += du A */
    be->sgemm(1, 0, r, in, rows, 1.0f, du, r, x, in, beta, da, in);
    if (dx) be->sgemm(0, 0, rows, in, r, 1.0f, du, r, a, in, 1.0f, dx, in);
}

static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

/* The largest staging of the six GEMMs below. */
size_t hfl_lora_ws_bytes_lp(int rows, int in, int out, int r) {
    size_t w = mx(hfl_gemm_lp_ws_bytes(0, rows, r, in), hfl_gemm_lp_ws_bytes(0, rows, out, r));
    w = mx(w, hfl_gemm_lp_ws_bytes(HFL_GEMM_C_F32, out, r, rows));
    w = mx(w, hfl_gemm_lp_ws_bytes(0, rows, r, out));
    w = mx(w, hfl_gemm_lp_ws_bytes(HFL_GEMM_C_F32, r, in, rows));
    return mx(w, hfl_gemm_lp_ws_bytes(0, rows, in, r));
}

void hfl_lora_forward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *a,
                         const uint16_t *b, const uint16_t *x, uint16_t *u, uint16_t *y, int rows,
                         int in, int out, int r, float scale, void *ws) {
    be->gemm_lp(lp, 0, 0, 1, rows, r, in, 1.0f, x, in, a, in, 0.0f, u, r, NULL, HFL_BIAS_NONE, ws);
    be->gemm_lp(lp, 0, 0, 1, rows, out, r, scale, u, r, b, r, 1.0f, y, out, NULL, HFL_BIAS_NONE, ws);
}

void hfl_lora_backward_lp(const hfl_backend *be, hfl_precision lp, const uint16_t *a,
                          const uint16_t *b, const uint16_t *x, const uint16_t *u,
                          const uint16_t *dy, float *da, float *db, uint16_t *du, uint16_t *dx,
                          int rows, int in, int out, int r, float scale, int accumulate, void *ws) {
    float beta = accumulate ? 1.0f : 0.0f;
    be->gemm_lp(lp, HFL_GEMM_C_F32, 1, 0, out, r, rows, scale, dy, out, u, r, beta, db, r, NULL,
                HFL_BIAS_NONE, ws);
    be->gemm_lp(lp, 0, 0, 0, rows, r, out, scale, dy, out, b, r, 0.0f, du, r, NULL, HFL_BIAS_NONE, ws);
    be->gemm_lp(lp, HFL_GEMM_C_F32, 1, 0, r, in, rows, 1.0f, du, r, x, in, beta, da, in, NULL,
                HFL_BIAS_NONE, ws);
    if (dx) be->gemm_lp(lp, 0, 0, 0, rows, in, r, 1.0f, du, r, a, in, 1.0f, dx, in, NULL, HFL_BIAS_NONE, ws);
}
