/* device.h: what a client can find out about the device it trains on.
 *
 * hfl_device_probe asks the CUDA runtime (when hfl was built with CUDA) for
 * the first GPU's name, compute capability and free/total memory. Without a
 * GPU, or without CUDA in the build, it describes the CPU instead: its model
 * name, core count and physical memory, and says why it fell back. */
#ifndef HFL_DEVICE_H
#define HFL_DEVICE_H

#include <stdint.h>

typedef struct {
    int is_gpu;          /* 1: CUDA device 0; 0: the CPU */
    char name[256];      /* "NVIDIA H200" or the CPU model name */
    int cc_major, cc_minor;
    int cores;           /* CPU cores (online), or GPU multiprocessors */
    uint64_t free_bytes;  /* GPU: cudaMemGetInfo free; CPU: MemAvailable */
    uint64_t total_bytes; /* GPU: total VRAM; CPU: MemTotal */
    char fallback_reason[128]; /* why the CPU was chosen, when is_gpu == 0 */
} hfl_device_info;

void hfl_device_probe(hfl_device_info *info);

/* Implemented in cuda/device.cu when built with CUDA: 0 and info filled when a
 * GPU is usable, -1 with reason otherwise. */
int hfl_cuda_probe(hfl_device_info *info, char *reason, int reason_len);

#endif
