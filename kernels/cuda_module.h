/* cuda_module.h: the contract between the executables and the CUDA module
 * (libhfl_cuda.so, built from kernels/cuda/ whenever nvcc exists).
 *
 * The module exports one symbol, hfl_cuda_module_entry, returning a table
 * whose abi must equal HFL_CUDA_MODULE_ABI (a module from another build is
 * refused). The host hands the module the process-wide budget functions of
 * kernels/budget.h at open, so the CUDA allocator counts against the same
 * budget as the CPU one. Everything CUDA (runtime, cuBLAS, the kernels) stays
 * inside the module; the executables only dlopen it (kernels/select.c). */
#ifndef HFL_CUDA_MODULE_H
#define HFL_CUDA_MODULE_H

#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/device.h"

/* 2: hfl_device_info gained pci_bus_id, hfl_backend alloc_granularity;
 * 3: hfl_backend gained agg (kernels/agg.h). */
#define HFL_CUDA_MODULE_ABI 3
#define HFL_CUDA_MODULE_SYMBOL "hfl_cuda_module_entry"

typedef struct {
    int abi;
    int (*budget_reserve)(uint64_t bytes, const char *who, char *err);
    void (*budget_commit)(void); /* after the cudaMalloc of a reservation succeeded */
    void (*budget_release)(uint64_t bytes);
} hfl_cuda_host;

typedef struct {
    int abi;
    /* 0 with info filled when device 0 is usable, else -1 with one line in reason. */
    int (*probe)(hfl_device_info *info, char *reason, int reason_len);
    /* The backend on device 0 (streams, cuBLAS handle, events: one context per
     * process, made on the first call); NULL with one line in err. */
    const hfl_backend *(*open)(const hfl_cuda_host *host, char *err);
} hfl_cuda_module;

#ifdef __cplusplus
extern "C" {
#endif
const hfl_cuda_module *hfl_cuda_module_entry(void);
#ifdef __cplusplus
}
#endif

#endif
