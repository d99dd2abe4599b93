/* lm_block.c: one GPT block's training step (model/gpt.h forward and
 * backward) on a backend (the CPU's by default, --device cuda the GPU's),
 * timed; bench/lm_block.sh puts PyTorch's on the same shapes and thread
 * count beside it (lm_block_torch.py), and bench/lm_block_gpu.sh the same on
 * a GPU.
 *
 * usage: bench-lm-block [--n N] [--T T] [--C C] [--H H] [--precision P]
 *                       [--steps S] [--threads K] [--device cpu|cuda] [--json]
 * Prints milliseconds per forward+backward and tokens per second, after two
 * warm-up steps; on a GPU the steps are enqueued back to back and the clock
 * read after a sync at each end. Weights U(-0.1, 0.1); inputs and upstream
 * gradients U(-1, 1). Without the device asked for: SKIP and exit 77. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/blas.h"
#include "kernels/lm.h"
#include "kernels/philox.h"
#include "kernels/select.h"
#include "model/gpt.h"
#include "model/model.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f, "usage: bench-lm-block [--n N] [--T T] [--C C] [--H H] [--precision fp32|bf16|fp16]\n"
               "                      [--steps S] [--threads K] [--device cpu|cuda] [--json]\n"
               "Times one GPT block's forward and backward on a backend (defaults: n 8, T 128,\n"
               "C 128, H 4, fp32, 20 steps, 1 thread, cpu).\n");
}

static void fill(float *p, size_t n, uint32_t stream, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * hfl_u01(hfl_philox_u32(1, stream, 0, 0, 0, i)) - 1.0f);
}

int main(int argc, char **argv) {
    long n = 8, T = 128, C = 128, H = 4, steps = 20, threads = 1;
    int json = 0;
    const char *device = "cpu";
    hfl_precision prec = HFL_PREC_FP32;
    char err[HFL_ERR_LEN];
    static const struct option opts[] = {{"n", 1, 0, 'n'}, {"T", 1, 0, 'T'}, {"C", 1, 0, 'C'}, {"H", 1, 0, 'H'},
                                         {"precision", 1, 0, 'p'}, {"steps", 1, 0, 's'}, {"threads", 1, 0, 't'},
                                         {"device", 1, 0, 'd'}, {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
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
        case 'd': device = optarg; break;
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
    hfl_device_info info;
    char why[HFL_ERR_LEN];
    const hfl_backend *be = hfl_backend_select(device, &info, why, err);
    if (!be) { /* like the gpu suite: no such device here is a skip (77), saying why */
        printf("SKIP: %s\n", err);
        return 77;
    }
    int ni = (int)n, Ti = (int)T, Ci = (int)C, Hi = (int)H;
    size_t rc = (size_t)n * T * C, np = hfl_gpt_block_n_params(Ci);
    float *pw = hfl_malloc(np * sizeof(float)), *x = hfl_malloc(rc * sizeof(float));
    float *dout = hfl_malloc(rc * sizeof(float));
    fill(pw, np, 1, 0.1f), fill(x, rc, 2, 1), fill(dout, rc, 3, 1);
    size_t eb = hfl_precision_bytes(prec);
    size_t saved_b = hfl_gpt_block_saved_bytes(prec, ni, Ti, Ci, Hi, 0);
    size_t ws_b = hfl_gpt_block_ws_bytes(prec, ni, Ti, Ci, Hi, 0);
    /* every tensor in the backend's memory (host memory on the CPU) */
    float *grads = be->alloc(np * sizeof(float)), *f32 = be->alloc((rc > np ? rc : np) * sizeof(float));
    void *saved = be->alloc(saved_b), *ws = be->alloc(ws_b), *out = be->alloc(rc * eb), *dx = be->alloc(rc * eb);
    void *pt = be->alloc(np * eb), *xt = be->alloc(rc * eb), *doutt = be->alloc(rc * eb);
    be->upload(f32, pw, np * sizeof(float)), be->convert(prec, pt, f32, np);
    be->upload(f32, x, rc * sizeof(float)), be->convert(prec, xt, f32, rc);
    be->upload(f32, dout, rc * sizeof(float)), be->convert(prec, doutt, f32, rc);
    hfl_gpt_block_params p = hfl_gpt_block_view(prec, pt, Ci),
                         d = hfl_gpt_block_view(HFL_PREC_FP32, grads, Ci);
    hfl_gpt_block_saved s = hfl_gpt_block_saved_view(prec, saved, ni, Ti, Ci, Hi, 0);
    double t0 = 0;
    for (long k = 0; k < steps + 2; k++) {
        if (k == 2) {
            be->sync();
            t0 = hfl_now();
        }
        hfl_gpt_block_forward(be, prec, &p, NULL, xt, out, &s, ws, ni, Ti, Ci, Hi);
        hfl_gpt_block_backward(be, prec, &p, &d, NULL, xt, &s, doutt, dx, ws, ni, Ti, Ci, Hi, 0);
    }
    be->sync();
    double ms = (hfl_now() - t0) * 1e3 / steps, tok_s = (double)n * T / (ms / 1e3);
    if (json)
        printf("{\"n\": %ld, \"T\": %ld, \"C\": %ld, \"H\": %ld, \"precision\": \"%s\", \"threads\": %ld, "
               "\"backend\": \"%s\", \"device\": \"%s\", \"steps\": %ld, \"ms_per_step\": %.3f, "
               "\"tokens_per_s\": %.1f, \"saved_bytes\": %zu}\n",
               n, T, C, H, hfl_precision_name(prec), threads, be->name, info.name, steps, ms, tok_s, saved_b);
    else
        printf("GPT block n %ld T %ld C %ld H %ld %s on %s (%s), %ld thread(s): %.2f ms per forward+backward, "
               "%.0f tokens/s, %zu bytes saved for backward\n", n, T, C, H, hfl_precision_name(prec), be->name,
               info.name, threads, ms, tok_s, saved_b);
    free(pw), free(x), free(dout);
    be->free(grads), be->free(f32), be->free(saved), be->free(ws), be->free(out), be->free(dx);
    be->free(pt), be->free(xt), be->free(doutt);
    return 0;
}
