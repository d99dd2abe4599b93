/* backend_cuda.h: the CUDA backend's one entry point inside libhfl_cuda.so.
 *
 * module.c's open (kernels/cuda_module.h) calls it with the host's budget
 * functions. The first call makes the process's one context on device 0
 * (streams, events, cuBLAS handle; kernels/cuda/backend_cuda.c) and returns
 * the backend table; later calls return the same table. NULL with one line
 * in err (HFL_ERR_LEN bytes) when the host interface does not match or
 * CUDA or cuBLAS cannot be initialised (no driver, no device). */
#ifndef HFL_BACKEND_CUDA_H
#define HFL_BACKEND_CUDA_H

#include "kernels/backend.h"
#include "kernels/cuda_module.h"

#ifdef __cplusplus
extern "C" {
#endif

const hfl_backend *hfl_cuda_backend_open(const hfl_cuda_host *host, char *err);

#ifdef __cplusplus
}
#endif

#endif
