/* inputs.h: deterministic test inputs shared by the thread-body tests
 * (tests/kernels/test_thread_bodies.c) and the GPU op tests
 * (tests/gpu/test_cuda_ops.c): value i of input `tensor` is uniform in
 * (-4, 4) from philox keyed by TEST_INPUT_SEED and TEST_INPUT_STREAM (the
 * includer defines both), with -0 and +0 sprinkled in, and optionally NaN,
 * +-Inf, or coarse values (integers in [-2, 2], so max-pooling windows and
 * softmax rows hold ties). Include after kernels/philox.h and kernels/ops_hd.h. */
#ifndef HFL_TESTS_KERNELS_INPUTS_H
#define HFL_TESTS_KERNELS_INPUTS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { PLAIN = 0, WITH_NAN = 1, WITH_INF = 2, COARSE = 4 };

static inline float input(uint32_t tensor, size_t i, int flags) {
    uint32_t u = hfl_philox_u32(TEST_INPUT_SEED, TEST_INPUT_STREAM, 0, 0, tensor, i);
    float v = 8.0f * hfl_u01(u) - 4.0f;
    if (flags & COARSE) v = (float)((int)(u % 5u) - 2);
    if (i % 7 == 3) return -0.0f;
    if (i % 11 == 5) return 0.0f;
    if ((flags & WITH_NAN) && i % 13 == 6) return i % 2 ? NAN : -NAN;
    if ((flags & WITH_INF) && i % 17 == 8) return i % 2 ? INFINITY : -INFINITY;
    return v;
}

static inline float *inputs(uint32_t tensor, size_t n, int flags) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = input(tensor, i, flags);
    return p;
}

static inline uint16_t *inputs_lp(hfl_precision lp, uint32_t tensor, size_t n, int flags) {
    uint16_t *p = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = hfl_op_narrow(lp, input(tensor, i, flags));
    return p;
}

/* n inputs of type t: the floats, or 2-byte values rounded from them. */
static inline void *inputs_of(hfl_precision t, uint32_t tensor, size_t n, int flags) {
    if (t == HFL_PREC_FP32) return inputs(tensor, n, flags);
    return inputs_lp(t, tensor, n, flags);
}

static inline void *dup_bytes(const void *p, size_t bytes) {
    void *q = malloc(bytes ? bytes : 1);
    memcpy(q, p, bytes);
    return q;
}

static inline const char *lp_name(hfl_precision t) {
    return t == HFL_PREC_FP32 ? "fp32" : t == HFL_PREC_FP16 ? "fp16" : "bf16";
}

#endif
