/* lm_block.c: one GPT block's training step (model/gpt.h forward and
 * backward) on the CPU backend, timed; bench/lm_block.sh puts PyTorch's on
 * the same shapes and thread count beside it (lm_block_torch.py).
 *
 * usage: bench-lm-block [--n N] [--T T] [--C C] [--H H] [--precision P]
 *                       [--steps S] [--threads K] [--json]
 * Prints milliseconds per forward+backward and tokens per second, after two
 * warm-up steps. Weights U(-0.1, 0.1); inputs and upstream gradients U(-1, 1). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/blas.h"
#include "kernels/lm.h"
#include "kernels/philox.h"
#include "model/gpt.h"
#include "model/model.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f, "usage: bench-lm-block [--n N] [--T T] [--C C] [--H H] [--precision fp32|bf16|fp16]\n"
               "                      [--steps S] [--threads K] [--json]\n"
               "Times one GPT block's forward and backward on the CPU backend (defaults: n 8, T 128,\n"
               "C 128, H 4, fp32, 20 steps, 1 thread).\n");
}

static void fill(float *p, size_t n, uint32_t stream, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * hfl_u01(hfl_philox_u32(1, stream, 0, 0, 0, i)) - 1.0f);
}

int main(int argc, char **argv) {
    long n = 8, T = 128, C = 128, H = 4, steps = 20, threads = 1;
    int json = 0;
    hfl_precision prec = HFL_PREC_FP32;
    char err[HFL_ERR_LEN];
    static const struct option opts[] = {{"n", 1, 0, 'n'}, {"T", 1, 0, 'T'}, {"C", 1, 0, 'C'}, {"H", 1, 0, 'H'},
                                         {"precision", 1, 0, 'p'}, {"steps", 1, 0, 's'}, {"threads", 1, 0, 't'},
                                         {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int rc = 0;
        switch (o) {
        case 'n': rc = hfl_parse_int(optarg, 1, 4096, &n, err); break;
        case 'T': rc = hfl_parse_int(optarg, 1, 8192, &T, err); break;
        case 'C': rc = hfl_parse_int(optarg, 1, 8192, &C, err); break;
        case 'H': rc = hfl_parse_int(optarg, 1, 256, &H, err); break;
        case 'p': rc = hfl_precision_parse(optarg, &prec, err); break;
        case 's': rc = hfl_parse_int(optarg, 1, 100000, &steps, err); break;
        case 't': rc = hfl_parse_int(optarg, 1, 256, &threads, err); break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (rc != 0) {
            fprintf(stderr, "bench-lm-block: %s\n", err);
            return 2;
        }
    }
    if (C % H) {
        fprintf(stderr, "bench-lm-block: --C %ld is not a multiple of --H %ld\n", C, H);
        return 2;
    }
    hfl_blas_set_threads((int)threads);
    const hfl_backend *be = hfl_backend_cpu();
    int ni = (int)n, Ti = (int)T, Ci = (int)C, Hi = (int)H;
    size_t rc = (size_t)n * T * C, np = hfl_gpt_block_n_params(Ci);
    float *pw = hfl_malloc(np * sizeof(float)), *grads = hfl_malloc(np * sizeof(float));
    float *x = hfl_malloc(rc * sizeof(float)), *dout = hfl_malloc(rc * sizeof(float));
    fill(pw, np, 1, 0.1f), fill(x, rc, 2, 1), fill(dout, rc, 3, 1);
    size_t eb = hfl_precision_bytes(prec);
    size_t saved_b = hfl_gpt_block_saved_bytes(prec, ni, Ti, Ci, Hi, 0);
    size_t ws_b = hfl_gpt_block_ws_bytes(prec, ni, Ti, Ci, Hi, 0);
    void *saved = hfl_malloc(saved_b), *ws = hfl_malloc(ws_b), *out = hfl_malloc(rc * eb), *dx = hfl_malloc(rc * eb);
    void *pt = hfl_malloc(np * eb), *xt = hfl_malloc(rc * eb), *doutt = hfl_malloc(rc * eb);
    be->convert(prec, pt, pw, np), be->convert(prec, xt, x, rc), be->convert(prec, doutt, dout, rc);
    hfl_gpt_block_params p = hfl_gpt_block_view(prec, pt, Ci),
                         d = hfl_gpt_block_view(HFL_PREC_FP32, grads, Ci);
    hfl_gpt_block_saved s = hfl_gpt_block_saved_view(prec, saved, ni, Ti, Ci, Hi, 0);
    double t0 = 0;
    for (long k = 0; k < steps + 2; k++) {
        if (k == 2) t0 = hfl_now();
        hfl_gpt_block_forward(be, prec, &p, NULL, xt, out, &s, ws, ni, Ti, Ci, Hi);
        hfl_gpt_block_backward(be, prec, &p, &d, NULL, xt, &s, doutt, dx, ws, ni, Ti, Ci, Hi, 0);
    }
    double ms = (hfl_now() - t0) * 1e3 / steps, tok_s = (double)n * T / (ms / 1e3);
    if (json)
        printf("{\"n\": %ld, \"T\": %ld, \"C\": %ld, \"H\": %ld, \"precision\": \"%s\", \"threads\": %ld, "
               "\"steps\": %ld, \"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"saved_bytes\": %zu}\n",
               n, T, C, H, hfl_precision_name(prec), threads, steps, ms, tok_s, saved_b);
    else
        printf("GPT block n %ld T %ld C %ld H %ld %s, %ld thread(s): %.2f ms per forward+backward, %.0f tokens/s, "
               "%zu bytes saved for backward\n", n, T, C, H, hfl_precision_name(prec), threads, ms, tok_s, saved_b);
    free(pw), free(grads), free(x), free(dout), free(saved), free(ws), free(out), free(dx);
    free(pt), free(xt), free(doutt);
    return 0;
}
