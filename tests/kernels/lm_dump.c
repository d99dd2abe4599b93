/* lm_dump.c: runs the transformer ops (kernels/lm.h, model/attention.c) on
 * the CPU backend over seeded random inputs and writes inputs, outputs and
 * gradients as one safetensors file, for tests/kernels/lm_torch.py to
 * recompute in PyTorch (the language model's requirement: gradients checked against PyTorch on the
 * same weights).
 *
 * Each op's backward gets a random upstream gradient "<op>.dy", so its
 * results are the gradients of sum(dy * out). AdamW runs three steps from
 * "adamw.w0" with gradients "adamw.g1..3"; its hyperparameters are in the
 * metadata. Usage: lm_dump OUT.safetensors */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/lm.h"
#include "kernels/philox.h"
#include "model/attention.h"
#include "tests/kernels/adamw_make.h"
#include "util/stfile.h"
#include "util/util.h"

enum { N = 2, T = 16, C = 32, H = 4, V = 50, ROWS = N * T };

#define MAX_PUT 40
static hfl_st_put put[MAX_PUT];
static int n_put;

static float *rnd(uint32_t tensor, size_t n, float scale) {
    float *p = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * hfl_u01(hfl_philox_u32(11, 5, 0, 0, tensor, i)) - 1.0f);
    return p;
}

static void add(const char *name, const float *data, int64_t d0, int64_t d1) {
    hfl_st_put *t = &put[n_put++];
    *t = (hfl_st_put){.name = name, .dtype = "F32", .ndim = d1 ? 2 : 1, .data = data};
    t->shape[0] = d0;
    t->shape[1] = d1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: lm_dump OUT.safetensors\n");
        return 2;
    }
    const hfl_backend *be = hfl_backend_cpu();
    const hfl_lm_ops *lm = be->lm;

    float *tokens = hfl_malloc(sizeof(float) * ROWS);
    for (int r = 0; r < ROWS; r++) tokens[r] = (float)(hfl_philox_u32(11, 5, 0, 0, 99, (uint64_t)r) % V);
    float *wte = rnd(1, V * C, 1), *wpe = rnd(2, T * C, 1), *edy = rnd(3, ROWS * C, 1);
    float *ey = hfl_malloc(sizeof(float) * ROWS * C), *dwte = hfl_malloc(sizeof(float) * V * C);
    float *dwpe = hfl_malloc(sizeof(float) * T * C);
    lm->embed_fwd(HFL_PREC_FP32, ey, tokens, wte, wpe, ROWS, T, C, V);
    lm->embed_bwd(HFL_PREC_FP32, dwte, dwpe, edy, tokens, ROWS, T, C, V, 0);
    add("embed.tokens", tokens, ROWS, 0), add("embed.wte", wte, V, C), add("embed.wpe", wpe, T, C);
    add("embed.dy", edy, ROWS, C), add("embed.y", ey, ROWS, C), add("embed.dwte", dwte, V, C);
    add("embed.dwpe", dwpe, T, C);

    float *lx = rnd(10, ROWS * C, 3), *lw = rnd(11, C, 2), *lb = rnd(12, C, 1), *ldy = rnd(13, ROWS * C, 1);
    float *ly = hfl_malloc(sizeof(float) * ROWS * C), *ldx = hfl_malloc(sizeof(float) * ROWS * C);
    float *mean = hfl_malloc(sizeof(float) * ROWS), *rstd = hfl_malloc(sizeof(float) * ROWS);
    float *ldw = hfl_malloc(sizeof(float) * C), *ldb = hfl_malloc(sizeof(float) * C);
    lm->layernorm_fwd(HFL_PREC_FP32, ly, mean, rstd, lx, lw, lb, ROWS, C);
    lm->layernorm_bwd(HFL_PREC_FP32, ldx, ldw, ldb, ldy, lx, lw, mean, rstd, ROWS, C, 0, 0);
    add("ln.x", lx, ROWS, C), add("ln.w", lw, C, 0), add("ln.b", lb, C, 0), add("ln.dy", ldy, ROWS, C);
    add("ln.y", ly, ROWS, C), add("ln.dx", ldx, ROWS, C), add("ln.dw", ldw, C, 0), add("ln.db", ldb, C, 0);

    float *gx = rnd(20, ROWS * C, 4), *gdy = rnd(21, ROWS * C, 1);
    float *gy = hfl_malloc(sizeof(float) * ROWS * C), *gdx = hfl_malloc(sizeof(float) * ROWS * C);
    lm->gelu_fwd(HFL_PREC_FP32, gy, gx, ROWS * C);
    lm->gelu_bwd(HFL_PREC_FP32, gdx, gdy, gx, ROWS * C);
    add("gelu.x", gx, ROWS, C), add("gelu.dy", gdy, ROWS, C), add("gelu.y", gy, ROWS, C);
    add("gelu.dx", gdx, ROWS, C);

    float *qkv = rnd(30, ROWS * 3 * C, 1.5f), *ady = rnd(31, ROWS * C, 1);
    float *ay = hfl_malloc(sizeof(float) * ROWS * C), *dqkv = hfl_malloc(sizeof(float) * ROWS * 3 * C);
    float *att = hfl_malloc(sizeof(float) * N * H * T * T);
    float *ws = hfl_malloc(hfl_attention_bwd_ws_bytes(HFL_PREC_FP32, N, T, C, H));
    hfl_attention_forward(be, HFL_PREC_FP32, ay, att, qkv, ws, N, T, C, H);
    hfl_attention_backward(be, HFL_PREC_FP32, dqkv, ady, qkv, att, ws, N, T, C, H);
    add("attn.qkv", qkv, ROWS, 3 * C), add("attn.dy", ady, ROWS, C), add("attn.y", ay, ROWS, C);
    add("attn.dqkv", dqkv, ROWS, 3 * C);

    enum { NW = 64 };
    float *w0 = rnd(40, NW, 1), *w = hfl_malloc(sizeof(float) * NW);
    float *m = calloc(NW, sizeof(float)), *v = calloc(NW, sizeof(float)), *g[3];
    memcpy(w, w0, sizeof(float) * NW);
    static const char *gname[3] = {"adamw.g1", "adamw.g2", "adamw.g3"};
    for (int s = 0; s < 3; s++) {
        g[s] = rnd(41 + (uint32_t)s, NW, 2);
        be->adamw_step(HFL_PREC_FP32, w, m, v, g[s], w, NW,
                       adamw_make(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1), NULL);
        add(gname[s], g[s], NW, 0);
    }
    add("adamw.w0", w0, NW, 0), add("adamw.w3", w, NW, 0);

    static const char *meta[] = {"T", "16", "C", "32", "H", "4", "V", "50", "adamw",
                                 "lr=0.01 beta1=0.9 beta2=0.95 eps=1e-8 wd=0.1"};
    char err[HFL_ERR_LEN];
    size_t len;
    uint8_t *buf = hfl_st_encode(put, n_put, meta, 5, &len, err);
    int bad = !buf || hfl_write_file_atomic(argv[1], buf, len, err) != 0;
    if (bad) fprintf(stderr, "lm_dump: %s\n", err);
    else printf("lm_dump: %d tensors, %zu bytes to %s\n", n_put, len, argv[1]);
    free(buf), free(mean), free(rstd), free(att), free(ws), free(m), free(v);
    for (int i = 0; i < n_put; i++) free((void *)put[i].data);
    return bad;
}
