/* device_cost.h: what one process costs a GPU before it trains, measured
 * once per device and state directory.
 *
 * A process that opened the CUDA backend holds device memory none of hfl's
 * allocations account for: its CUDA context (the stack reserved for every
 * resident thread alone is ~264 MiB on an H100), cuBLAS's handle, the
 * backend's streams and events. That cost is this process's device memory
 * as NVML reports it (hfl_backend_process_bytes) less the bytes hfl's
 * allocator holds, read once the backend is open and before anything else
 * runs. It is appended to <state-dir>/device_cost.jsonl as {device,
 * backend, context_bytes}, and the first line for a device and backend is
 * what every process sharing the state directory uses from then on, as the
 * GEMM calibration is (plan/calibrate.c): hfl-sim measures it before it
 * starts a client, so each client's share of the card and its budget agree
 * on it. A budget on a GPU covers what a process holds beyond it (README,
 * Devices); everything a process holds is the cost plus that. */
#ifndef HFL_MODEL_DEVICE_COST_H
#define HFL_MODEL_DEVICE_COST_H

#include <stdint.h>

#include "kernels/backend.h"
#include "util/util.h"

/* What hfl-sim assumes where NVML cannot say (scenarios/share.h): on an H100
 * the stack reserved for the resident threads alone is 132 SMs x 2048
 * threads x 1 KiB = 264 MiB, and the context and cuBLAS's state come on top
 * (a review of the GPU half: "hundreds of MiB per process"); 1 GiB,
 * as the overhead model's device prior (plan/overhead.h), leaves room for
 * both. */
#define HFL_DEVICE_COST_PRIOR (1ull << 30)

typedef struct {
    int known;             /* 1: bytes is this device's cost (source "state-dir" or "measured") */
    uint64_t bytes;        /* the per-process cost (0 when not known) */
    const char *source;    /* "state-dir", "measured", "unavailable" (NVML cannot describe this
                              process), "none" (the CPU backend: no such cost) */
    char why[HFL_ERR_LEN]; /* "unavailable": why */
} hfl_device_cost;

/* The cost of device `device` on backend be: the state directory's (may be
 * NULL or "": none), else measured now and appended there (a line that
 * cannot be written is said on stderr; the figure still holds). 0 when
 * known, -1 when not (source "unavailable" or "none"). */
int hfl_device_cost_get(const char *state_dir, const char *device, const hfl_backend *be, hfl_device_cost *c);

/* The first figure kept for device and backend under state_dir: 1 and
 * *bytes when there is one; damaged and hand-edited lines are skipped. */
int hfl_device_cost_load(const char *state_dir, const char *device, const char *backend, uint64_t *bytes);
/* Appends one figure; -1 with err when the file cannot be written. */
int hfl_device_cost_store(const char *state_dir, const char *device, const char *backend, uint64_t bytes,
                          char *err);

#endif
