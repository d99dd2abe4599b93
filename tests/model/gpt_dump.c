/* gpt_dump.c: a 2-layer GPT (model/gpt.h's blocks and head, the token and
 * position embeddings of kernels/lm.h) trained for one step's forward and
 * backward on the CPU backend, written as a safetensors file for
 * tests/model/gpt_torch.py to redo in PyTorch (issue 13: "forward loss and
 * every gradient of a 2-layer model equal PyTorch's on the same weights").
 *
 * The parameter vector: wte [V, C], wpe [T, C], each block's parameters in
 * gpt.h's order, ln_f.weight, ln_f.bias [C]. Tokens [n, T + 1] are bytes-like
 * ids; the model reads the first T of each row and predicts the last T (the
 * mean cross-entropy over n*T positions). The file holds "tokens", "params",
 * "loss" (one value) and "grads"; metadata n, T, C, H, V, L.
 * Usage: gpt_dump OUT.safetensors */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/lm.h"
#include "kernels/philox.h"
#include "model/gpt.h"
#include "util/stfile.h"
#include "util/util.h"

enum { N = 3, T = 8, C = 16, H = 2, V = 32, L = 2, ROWS = N * T };

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gpt_dump OUT.safetensors\n");
        return 2;
    }
    const hfl_backend *be = hfl_backend_cpu();
    const hfl_lm_ops *lm = be->lm;
    size_t nb = hfl_gpt_block_n_params(C);
    size_t n_params = (size_t)V * C + (size_t)T * C + L * nb + 2 * C;
    float *params = zeros(n_params), *grads = zeros(n_params);
    for (size_t i = 0; i < n_params; i++) /* U(-0.3, 0.3): big enough to move every path */
        params[i] = 0.6f * hfl_u01(hfl_philox_u32(5, 1, 0, 0, 0, i)) - 0.3f;
    float *wte = params, *wpe = wte + V * C, *blk = wpe + T * C, *lnf_w = blk + L * nb, *lnf_b = lnf_w + C;
    float *dwte = grads, *dwpe = dwte + V * C, *dblk = dwpe + T * C, *dlnf_w = dblk + L * nb, *dlnf_b = dlnf_w + C;
    for (int l = 0; l <= L; l++) { /* layer norm weights near 1, as trained models have them */
        float *w = l < L ? hfl_gpt_block_view(blk + l * nb, C).ln1_w : lnf_w;
        for (int c = 0; c < C; c++) w[c] += 1.0f;
        if (l < L)
            for (int c = 0; c < C; c++) hfl_gpt_block_view(blk + l * nb, C).ln2_w[c] += 1.0f;
    }

    float tokens[N * (T + 1)], x_in[ROWS];
    int32_t targets[ROWS];
    for (int i = 0; i < N * (T + 1); i++) tokens[i] = (float)(hfl_philox_u32(5, 2, 0, 0, 0, (uint64_t)i) % V);
    for (int b = 0; b < N; b++)
        for (int t = 0; t < T; t++) {
            x_in[b * T + t] = tokens[b * (T + 1) + t];
            targets[b * T + t] = (int32_t)tokens[b * (T + 1) + t + 1];
        }

    /* activations: the embedding's output and each block's, each block's saved set */
    size_t rc = (size_t)ROWS * C, sf = hfl_gpt_block_saved_floats(N, T, C, H);
    float *act[L + 1], *saved[L];
    for (int l = 0; l <= L; l++) act[l] = zeros(rc);
    for (int l = 0; l < L; l++) saved[l] = zeros(sf);
    float *ws = zeros(hfl_gpt_block_ws_bytes(N, T, C, H) / sizeof(float));
    float *hf = zeros(rc), *mean = zeros(ROWS), *rstd = zeros(ROWS), *logits = zeros((size_t)ROWS * V);
    float *dlogits = zeros((size_t)ROWS * V), *dx = zeros(rc), *dhf = zeros(rc);

    lm->embed_fwd(act[0], x_in, wte, wpe, ROWS, T, C, V);
    for (int l = 0; l < L; l++) {
        hfl_gpt_block_params p = hfl_gpt_block_view(blk + l * nb, C);
        hfl_gpt_block_saved s = hfl_gpt_block_saved_view(saved[l], N, T, C, H);
        hfl_gpt_block_forward(be, &p, act[l], act[l + 1], &s, ws, N, T, C, H);
    }
    hfl_gpt_head_forward(be, act[L], lnf_w, lnf_b, wte, hf, mean, rstd, logits, ROWS, C, V);
    hfl_step_scalars sc = {.loss_scale = 1.0f};
    be->softmax_xent(logits, targets, dlogits, ROWS, V, ROWS, &sc);
    float loss = (float)(sc.loss_sum / ROWS);

    hfl_gpt_head_backward(be, act[L], lnf_w, wte, hf, mean, rstd, dlogits, dwte, dlnf_w, dlnf_b, dx,
                          dhf, ROWS, C, V, 0);
    for (int l = L - 1; l >= 0; l--) {
        hfl_gpt_block_params p = hfl_gpt_block_view(blk + l * nb, C), d = hfl_gpt_block_view(dblk + l * nb, C);
        hfl_gpt_block_saved s = hfl_gpt_block_saved_view(saved[l], N, T, C, H);
        hfl_gpt_block_backward(be, &p, &d, act[l], &s, dx, dx, ws, N, T, C, H, 0);
    }
    be->fill(dwpe, 0.0f, (size_t)T * C); /* dwte holds the head's share: both accumulate */
    lm->embed_bwd(dwte, dwpe, dx, x_in, ROWS, T, C, V, 1);

    hfl_st_put put[4] = {
        {.name = "tokens", .dtype = "F32", .ndim = 2, .shape = {N, T + 1}, .data = tokens},
        {.name = "params", .dtype = "F32", .ndim = 1, .shape = {(int64_t)n_params}, .data = params},
        {.name = "loss", .dtype = "F32", .ndim = 1, .shape = {1}, .data = &loss},
        {.name = "grads", .dtype = "F32", .ndim = 1, .shape = {(int64_t)n_params}, .data = grads},
    };
    char nv[16], tv[16], cv[16], hv[16], vv[16], lv[16], err[HFL_ERR_LEN];
    snprintf(nv, sizeof nv, "%d", N), snprintf(tv, sizeof tv, "%d", T), snprintf(cv, sizeof cv, "%d", C);
    snprintf(hv, sizeof hv, "%d", H), snprintf(vv, sizeof vv, "%d", V), snprintf(lv, sizeof lv, "%d", L);
    const char *meta[] = {"n", nv, "T", tv, "C", cv, "H", hv, "V", vv, "L", lv};
    size_t len;
    uint8_t *buf = hfl_st_encode(put, 4, meta, 6, &len, err);
    int rc_out = !buf || hfl_write_file_atomic(argv[1], buf, len, err) != 0;
    if (rc_out) fprintf(stderr, "gpt_dump: %s\n", err);
    else printf("gpt_dump: %zu parameters, loss %.6f, to %s\n", n_params, loss, argv[1]);
    free(buf), free(params), free(grads), free(ws), free(hf), free(mean), free(rstd), free(logits);
    free(dlogits), free(dx), free(dhf);
    for (int l = 0; l <= L; l++) free(act[l]);
    for (int l = 0; l < L; l++) free(saved[l]);
    return rc_out;
}
