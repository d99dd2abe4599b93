/* device.h: what a client can find out about the device it trains on.
 *
 * hfl_cuda_probe asks the CUDA module (libhfl_cuda.so, loaded at run time
 * by kernels/select.c) for the first GPU's name, compute capability and
 * free/total memory; hfl_device_probe_cpu describes the CPU: its model name,
 * core count and physical memory. hfl_backend_select (kernels/select.h)
 * fills the description of the device it picks, and says why it fell back
 * to the CPU. */
#ifndef HFL_DEVICE_H
#define HFL_DEVICE_H

#include <stdint.h>

typedef struct {
    int is_gpu;          /* 1: CUDA device 0; 0: the CPU */
    char name[256];      /* "NVIDIA H200", or the CPU model name and OpenBLAS kernel set */
    int cc_major, cc_minor;
    int cores;           /* CPU cores (online), or GPU multiprocessors */
    uint64_t free_bytes;  /* GPU: cudaMemGetInfo free; CPU: hfl_host_free_now */
    uint64_t total_bytes; /* GPU: total VRAM; CPU: MemTotal */
    char fallback_reason[128]; /* why the CPU was chosen, when is_gpu == 0 */
    char pci_bus_id[32];       /* GPU: "0000:3b:00.0" (cudaDeviceGetPCIBusId), how NVML finds it; CPU: "" */
} hfl_device_info;

/* The CPU (fallback_reason left empty). */
void hfl_device_probe_cpu(hfl_device_info *info);

/* The host memory this process may still take: MemAvailable from
 * proc/meminfo, bounded by the room each of its memory cgroups leaves
 * (proc/self/cgroup names them; under cgroup/ for v2: the lower of
 * memory.max and memory.high less memory.current; under cgroup/memory for
 * v1: memory.limit_in_bytes less memory.usage_in_bytes; the file cache
 * counted free, as MemAvailable counts it), every level up to the mount.
 * 0 and *out, or -1 when MemAvailable cannot be read. proc and cgroup are
 * the roots ("/proc", "/sys/fs/cgroup"): tests pass their own. */
int hfl_host_free_bytes(const char *proc, const char *cgroup, uint64_t *out);

/* hfl_host_free_bytes of this process now. HFL_TEST_CGROUP_ROOT (tests)
 * stands in for /sys/fs/cgroup. */
int hfl_host_free_now(uint64_t *out);

/* Through the module loader of kernels/select.c: 0 and info filled when a GPU
 * is usable, -1 with one line in reason otherwise ("CUDA module not found",
 * "no CUDA GPU found (...)"). */
int hfl_cuda_probe(hfl_device_info *info, char *reason, int reason_len);

#endif
