/* device.cu: the CUDA side of the device probe: device 0's name, compute
 * capability, multiprocessors and free/total memory. Any CUDA error (no
 * driver, no device) is reported as a reason to fall back to the CPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "kernels/device.h"
}

extern "C" int hfl_cuda_probe(hfl_device_info *info, char *reason, int reason_len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(reason, reason_len, "no CUDA GPU found (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return -1;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess ||
        (e = cudaSetDevice(0)) != cudaSuccess) {
        snprintf(reason, reason_len, "CUDA device 0 unusable (%s)", cudaGetErrorString(e));
        return -1;
    }
    size_t free_b = 0, total_b = 0;
    if ((e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
        snprintf(reason, reason_len, "cudaMemGetInfo failed (%s)", cudaGetErrorString(e));
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
