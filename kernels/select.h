/* select.h: which backend a process trains and aggregates on.
 *
 * hfl_backend_select("auto" | "cpu" | "cuda") returns the CPU backend or the
 * CUDA backend, which lives in a module (libhfl_cuda.so) loaded with dlopen
 * on first use, so no executable links a CUDA library and one binary runs on
 * a laptop without CUDA. "auto" takes the GPU when the module loads and finds
 * a usable device, else the CPU, and says why in *why (one line, e.g. "no
 * CUDA GPU found (CUDA driver version is insufficient ...)"); "cuda" is an
 * error (NULL, err) when the GPU cannot be had. The module is looked for in
 * $HFL_CUDA_MODULE (a path), then beside the executable ($ORIGIN/../lib and
 * $ORIGIN, a bundle's layout, and the build tree's kernels/cuda/). */
#ifndef HFL_SELECT_H
#define HFL_SELECT_H

#include "kernels/backend.h"
#include "kernels/device.h"

/* NULL with err for an unknown name or an unavailable "cuda". *why (may be
 * NULL, HFL_ERR_LEN bytes) is set to "" or to why "auto" fell back to the
 * CPU. When info is not NULL it describes the device the backend runs on. */
const hfl_backend *hfl_backend_select(const char *device, hfl_device_info *info, char *why,
                                      char *err);

/* This process's memory on be's device now, as NVML reports it (kernels/
 * nvml.h: its context, library state, loaded kernels and allocations): 0
 * and *bytes, or -1 with one line in why (HFL_ERR_LEN bytes, may be NULL): on the CPU
 * backend, or where NVML cannot say. */
int hfl_backend_process_bytes(const hfl_backend *be, uint64_t *bytes, char *why);

#endif
