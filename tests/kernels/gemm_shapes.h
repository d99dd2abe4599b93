/* gemm_shapes.h: the GEMMs hfl trains with, as test cases: model/dense.c's,
 * conv.c's and gpt.c's calls at the mlp's (batch 64), the cnn's (batch
 * 32; conv as gemm_strided over a chunk of samples sharing the weights)
 * and a GPT block's (n 2, T 128, C 128) shapes, with inputs drawn like
 * training's: activations, Kaiming-uniform-scaled weights and biases, a
 * residual stream. Shared by tests/kernels/test_rounding_check.c (the judge
 * against emulated GEMMs) and tests/gpu/test_cuda_ops.c (the GPU). */
#ifndef HFL_TESTS_KERNELS_GEMM_SHAPES_H
#define HFL_TESTS_KERNELS_GEMM_SHAPES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"

/* n values uniform in [lo, hi), rounded to lp (tensor picks the stream). */
static inline uint16_t *draw_lp(hfl_precision lp, uint32_t tensor, size_t n, float lo, float hi) {
    uint16_t *p = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = hfl_op_narrow(lp, lo + (hi - lo) * hfl_u01(hfl_philox_u32(41, tensor, 0, 0, 0, i)));
    return p;
}

typedef struct {
    const char *name;
    int ta, tb, m, n, k;
    float beta;
    int axis, count;
    float a_lo, a_hi; /* A: activations (images in [0, 1), hidden ones signed) */
    int b_fanin;      /* B's scale: 1 / sqrt(b_fanin), as Kaiming-uniform initialisation */
} gemm_shape;

static const gemm_shape gemm_shapes[] = {
    {"mlp fc1 forward", 0, 1, 64, 200, 784, 0.0f, HFL_BIAS_COL, 1, 0.0f, 1.0f, 784},
    {"mlp fc2 forward", 0, 1, 64, 200, 200, 0.0f, HFL_BIAS_COL, 1, 0.0f, 2.0f, 200},
    {"mlp fc3 forward", 0, 1, 64, 10, 200, 0.0f, HFL_BIAS_COL, 1, 0.0f, 2.0f, 200},
    {"mlp fc2 dx", 0, 0, 64, 200, 200, 0.0f, HFL_BIAS_NONE, 1, -0.05f, 0.05f, 200},
    {"mlp fc3 dx", 0, 0, 64, 200, 10, 0.0f, HFL_BIAS_NONE, 1, -0.05f, 0.05f, 10},
    {"cnn fc1 forward", 0, 1, 32, 512, 3136, 0.0f, HFL_BIAS_COL, 1, 0.0f, 2.0f, 3136},
    {"cnn conv1 forward", 0, 0, 32, 784, 25, 0.0f, HFL_BIAS_ROW, 3, 0.0f, 1.0f, 25},
    {"cnn conv2 forward", 0, 0, 64, 196, 800, 0.0f, HFL_BIAS_ROW, 2, 0.0f, 2.0f, 800},
    {"gpt qkv forward", 0, 1, 256, 384, 128, 0.0f, HFL_BIAS_COL, 1, -2.0f, 2.0f, 128},
    {"gpt fc forward", 0, 1, 256, 512, 128, 0.0f, HFL_BIAS_COL, 1, -2.0f, 2.0f, 128},
    {"gpt proj onto residual", 0, 1, 256, 128, 128, 1.0f, HFL_BIAS_COL, 1, -1.0f, 1.0f, 128},
    {"gpt fc proj onto residual", 0, 1, 256, 128, 512, 1.0f, HFL_BIAS_COL, 1, -0.2f, 1.0f, 512},
};
#define GEMM_SHAPES (sizeof gemm_shapes / sizeof *gemm_shapes)

#endif
