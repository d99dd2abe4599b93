/* gpu_gemm.c: bench-gpu-gemm, the CUDA backend's GEMMs against bare cuBLAS
 * on the same shapes, as a ratio of TFLOP/s measured in one run.
 *
 * For each shape (square 1024..8192, and the cnn's and mlp's training GEMMs
 * at batch 128) and precision (fp32: the backend's sgemm against
 * cublasSgemm; bf16/fp16: the backend's gemm with 2-byte A, B and C against
 * cublasGemmEx with CUBLAS_COMPUTE_32F), both run on the same device buffers
 * until 100 ms have passed, timed with cudaEvents on each side's stream
 * around the whole loop. The baseline is cuBLAS called directly by this
 * program (its own handle and stream, default math: no TF32), so the ratio
 * is what the backend's layout mapping, launches and workspace cost or save.
 * Without a usable GPU it says why and exits 77. One JSON line per shape. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/select.h"
#include "util/util.h"

typedef struct {
    const char *name;
    int m, n, k;
} shape;

static const shape shapes[] = {
    {"square1024", 1024, 1024, 1024}, {"square4096", 4096, 4096, 4096},
    {"square8192", 8192, 8192, 8192}, {"cnn_fc1_fwd_b128", 128, 512, 3136},
    {"cnn_fc1_dw_b128", 512, 3136, 128}, {"cnn_conv2_fwd", 64, 196, 800},
    {"mlp_fc1_fwd_b128", 128, 200, 784},
};

static void die(const char *what, int code) {
    fprintf(stderr, "bench-gpu-gemm: %s failed (%d)\n", what, code);
    exit(1);
}

/* Row-major C[m,n] = A[m,k] B[k,n] through column-major cuBLAS: C^T = B^T A^T. */
static void bare_gemm(cublasHandle_t h, int prec, int m, int n, int k, const void *a, const void *b,
                      void *c) {
    float one = 1.0f, zero = 0.0f;
    cublasStatus_t s;
    if (prec == HFL_PREC_FP32) {
        s = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, n, a, k, &zero, c, n);
    } else {
        cudaDataType t = prec == HFL_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, t, n, a, t, k, &zero, c, t,
                         n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    if (s != CUBLAS_STATUS_SUCCESS) die("cublas gemm", (int)s);
}

static void backend_gemm(const hfl_backend *be, int prec, int m, int n, int k, const void *a,
                         const void *b, void *c) {
    be->gemm((hfl_precision)prec, 0, 0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n, NULL,
             HFL_BIAS_NONE, NULL);
}

/* Seconds per call over >= 100 ms of calls, after 3 warm-up calls. */
static double time_side(const hfl_backend *be, cublasHandle_t h, cudaStream_t st, int prec,
                        const shape *sh, void *a, void *b, void *c) {
    for (int i = 0; i < 3; i++)
        be ? backend_gemm(be, prec, sh->m, sh->n, sh->k, a, b, c)
           : bare_gemm(h, prec, sh->m, sh->n, sh->k, a, b, c);
    if (be) be->sync();
    cudaStreamSynchronize(st);
    double t0 = hfl_now(), t;
    long reps = 0;
    do {
        for (int i = 0; i < 10; i++, reps++)
            be ? backend_gemm(be, prec, sh->m, sh->n, sh->k, a, b, c)
               : bare_gemm(h, prec, sh->m, sh->n, sh->k, a, b, c);
        if (be) be->sync();
        else cudaStreamSynchronize(st);
    } while ((t = hfl_now() - t0) < 0.1);
    return t / reps;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: bench-gpu-gemm\n  The CUDA backend's GEMMs against bare cuBLAS on the same shapes:\n"
               "  TFLOP/s of each and their ratio, one JSON line per shape and precision.\n");
        return 0;
    }
    char why[HFL_ERR_LEN], err[HFL_ERR_LEN];
    hfl_device_info info;
    const hfl_backend *be = hfl_backend_select("cuda", &info, why, err);
    if (!be) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    cublasHandle_t h;
    cudaStream_t st;
    int rc;
    if ((rc = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) != cudaSuccess) die("stream", rc);
    if ((rc = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS) die("cublasCreate", rc);
    cublasSetStream(h, st);
    size_t most = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        size_t e = (size_t)s->m * s->k + (size_t)s->k * s->n + (size_t)s->m * s->n;
        if (e > most) most = e;
    }
    char *buf = be->alloc(most * 4);
    be->fill((float *)buf, 0.0f, most); /* zeros are zeros in every precision */
    be->sync();
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++) {
            if (p == HFL_PREC_BF16 && info.cc_major < 8) continue;
            size_t es = p == HFL_PREC_FP32 ? 4 : 2;
            char *a = buf, *b = a + (size_t)s->m * s->k * es, *c = b + (size_t)s->k * s->n * es;
            double tb = time_side(be, NULL, st, p, s, a, b, c);
            double tc = time_side(NULL, h, st, p, s, a, b, c);
            double flop = 2.0 * s->m * s->n * s->k;
            printf("{\"bench\": \"gemm\", \"device\": \"%s\", \"shape\": \"%s\", \"m\": %d, \"n\": %d, "
                   "\"k\": %d, \"precision\": \"%s\", \"hfl_tflops\": %.3f, \"cublas_tflops\": %.3f, "
                   "\"hfl_over_cublas\": %.3f}\n",
                   info.name, s->name, s->m, s->n, s->k,
                   p == HFL_PREC_FP32 ? "fp32" : p == HFL_PREC_BF16 ? "bf16" : "fp16",
                   flop / tb / 1e12, flop / tc / 1e12, tc / tb);
        }
    }
    be->free(buf);
    cublasDestroy(h);
    cudaStreamDestroy(st);
    return 0;
}
