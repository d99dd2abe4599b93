/* nvml.h: how much device memory one process holds, from NVIDIA's
 * management library (NVML, libnvidia-ml.so.1), loaded at run time.
 *
 * cudaMemGetInfo says what the whole device has free, which every process on
 * it moves; NVML lists each compute process with the device memory it holds
 * (its CUDA context, library state, loaded kernels and allocations: all of
 * it), which is what a per-process memory budget must be checked against.
 * Like libcuda (kernels/select.c), the library comes with the NVIDIA driver
 * and is dlopen'ed on first use, so no executable links it and a machine
 * without it runs as before: every query then fails with one line saying
 * why ("NVML unavailable: ..."). $HFL_NVML_LIBRARY, when set, is loaded
 * instead (the tests load a stand-in library through it).
 *
 * A process can be missing from NVML's list although it holds a context: in a
 * container with its own PID namespace, older drivers list host PIDs, and
 * some report no memory figure (0 or "not available"). Those cases are
 * failures too, never a guess. */
#ifndef HFL_NVML_H
#define HFL_NVML_H

#include <stddef.h>
#include <stdint.h>

/* The device memory process `pid` holds on the GPU at PCI bus id bus_id
 * ("0000:3b:00.0", as cudaDeviceGetPCIBusId writes it): 0 and *bytes (the sum
 * over its entries: one per MIG instance), or -1 with one line in why
 * (why_len bytes). Thread-safe. */
int hfl_nvml_process_bytes(const char *bus_id, long pid, uint64_t *bytes, char *why, size_t why_len);

#endif
