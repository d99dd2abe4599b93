/* check.h: checked CUDA and cuBLAS calls for the CUDA backend (host code of
 * kernels/cuda/, C and CUDA C alike).
 *
 * CUDA_CHECK / CUBLAS_CHECK are for calls that cannot fail in a working
 * program (a launch with a valid configuration, a copy between live
 * buffers, a stream synchronize): a failure there means a bug or a dead
 * device, and there is no caller to hand it to (the op has no err), so they
 * print one line with file:line and abort, as llm.c's cudaCheck does. Calls
 * that can fail for reasons the caller should hear about (cudaMalloc, the
 * context at open) are tested by hand and returned through the interface's
 * err instead. CUDA_CHECK_LAUNCH follows every kernel launch: it catches a
 * bad launch configuration at once (without synchronizing); a fault inside
 * the kernel surfaces at the next synchronizing call. */
#ifndef HFL_CUDA_CHECK_H
#define HFL_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "hfl: cuda backend: %s:%d: %s failed: %s\n", __FILE__, __LINE__,   \
                    #call, cudaGetErrorString(e_));                                            \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#define CUBLAS_CHECK(call)                                                                     \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            fprintf(stderr, "hfl: cuda backend: %s:%d: %s failed: %s\n", __FILE__, __LINE__,   \
                    #call, cublasGetStatusString(s_));                                         \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

/* A condition the interface promises (operand types, sizes): abort with the
 * message when it does not hold. Active in release builds, unlike assert. */
#define CUDA_REQUIRE(cond, msg)                                                                \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "hfl: cuda backend: %s:%d: %s\n", __FILE__, __LINE__, msg);        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#endif
