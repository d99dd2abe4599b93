/* module.c: the entry point of the CUDA module libhfl_cuda.so
 * (kernels/cuda_module.h): the device probe and the backend's open.
 *
 * The probe asks the CUDA runtime for device 0's name, compute capability,
 * multiprocessors, PCI bus id and free/total memory; any CUDA error (no
 * driver, no device) becomes one line saying why, and the host falls back
 * to the CPU. open hands the host's budget functions to the backend of
 * backend_cuda.c (meson defines HFL_CUDA_HAVE_BACKEND when that file is
 * built in). The PCI bus id is how NVML finds the device (kernels/nvml.h). */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/cuda_module.h"
#include "util/util.h" /* HFL_ERR_LEN */

#ifdef HFL_CUDA_HAVE_BACKEND
#include "kernels/cuda/backend_cuda.h"
#endif

static int module_probe(hfl_device_info *info, char *reason, int reason_len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(reason, (size_t)reason_len, "no CUDA GPU found (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return -1;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess || (e = cudaSetDevice(0)) != cudaSuccess) {
        snprintf(reason, (size_t)reason_len, "CUDA device 0 unusable (%s)", cudaGetErrorString(e));
        return -1;
    }
    size_t free_b = 0, total_b = 0;
    if ((e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
        snprintf(reason, (size_t)reason_len, "cudaMemGetInfo failed (%s)", cudaGetErrorString(e));
        return -1;
    }
    memset(info, 0, sizeof *info);
    if ((e = cudaDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof info->pci_bus_id, 0)) != cudaSuccess) {
        snprintf(reason, (size_t)reason_len, "cudaDeviceGetPCIBusId failed (%s)", cudaGetErrorString(e));
        return -1;
    }
    info->is_gpu = 1;
    snprintf(info->name, sizeof info->name, "%s", prop.name);
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->cores = prop.multiProcessorCount;
    info->free_bytes = free_b;
    info->total_bytes = total_b;
    return 0;
}

static const hfl_backend *module_open(const hfl_cuda_host *host, char *err) {
    if (!host || host->abi != HFL_CUDA_MODULE_ABI) {
        snprintf(err, HFL_ERR_LEN, "cuda backend: host interface version mismatch");
        return NULL;
    }
#ifdef HFL_CUDA_HAVE_BACKEND
    return hfl_cuda_backend_open(host, err);
#else
    snprintf(err, HFL_ERR_LEN, "cuda backend: not built in this module");
    return NULL;
#endif
}

const hfl_cuda_module *hfl_cuda_module_entry(void) {
    static const hfl_cuda_module entry = {
        .abi = HFL_CUDA_MODULE_ABI,
        .probe = module_probe,
        .open = module_open,
    };
    return &entry;
}
