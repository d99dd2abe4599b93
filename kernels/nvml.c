/* nvml.c: per-process device memory from NVML, loaded at run time (see
 * nvml.h).
 *
 * Only what this needs is declared here, after the NVML API Reference for
 * driver branch R525 (nvml.h of CUDA 12.0): nvmlProcessInfo_v2_t, which
 * nvmlDeviceGetComputeRunningProcesses_v3 fills as nvmlProcessInfo_t and _v2
 * as nvmlProcessInfo_v2_t, the same four fields in the same order; the
 * device handle is an opaque pointer; every call returns an nvmlReturn_t,
 * an int whose 0 is NVML_SUCCESS and 7 NVML_ERROR_INSUFFICIENT_SIZE.
 * usedGpuMemory is NVML_VALUE_NOT_AVAILABLE, all ones, where the driver
 * keeps no figure. The library is initialised once and never shut down: it
 * lives as long as the process, like libcuda. */
#include "kernels/nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE (~0ull)
#define NVML_LIBRARY "libnvidia-ml.so.1"

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvml_process_info;

typedef struct nvml_device *nvml_device; /* nvmlDevice_t */

static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int tried, ok;
    char why[200]; /* when !ok: why NVML cannot be had */
    const char *(*error_string)(int);
    int (*by_bus_id)(const char *, nvml_device *);
    int (*processes)(nvml_device, unsigned int *, nvml_process_info *);
    const char *processes_name;
} nvml;

/* Sets the function pointer at slot (size bytes) to symbol name, or NULL.
 * POSIX: a data pointer converted to a function pointer, by copy. */
static void nvml_bind(void *h, const char *name, void *slot, size_t size) {
    void *p = dlsym(h, name);
    memcpy(slot, &p, size);
}

static const char *nvml_err(int rc) {
    const char *s = nvml.error_string ? nvml.error_string(rc) : NULL;
    return s ? s : "unknown error";
}

/* Opens and initialises the library, once; nvml.ok says whether it worked. */
static void nvml_load_locked(void) {
    if (nvml.tried) return;
    nvml.tried = 1;
    const char *path = getenv("HFL_NVML_LIBRARY");
    if (!path || !path[0]) path = NVML_LIBRARY;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(nvml.why, sizeof nvml.why, "NVML unavailable: cannot open %s (%s)", path, e ? e : "?");
        return;
    }
    int (*init)(void);
    nvml_bind(h, "nvmlInit_v2", &init, sizeof init);
    nvml_bind(h, "nvmlErrorString", &nvml.error_string, sizeof nvml.error_string);
    nvml_bind(h, "nvmlDeviceGetHandleByPciBusId_v2", &nvml.by_bus_id, sizeof nvml.by_bus_id);
    nvml_bind(h, "nvmlDeviceGetComputeRunningProcesses_v3", &nvml.processes, sizeof nvml.processes);
    nvml.processes_name = "nvmlDeviceGetComputeRunningProcesses_v3";
    if (!nvml.processes) { /* drivers before R510: the same layout under _v2 */
        nvml_bind(h, "nvmlDeviceGetComputeRunningProcesses_v2", &nvml.processes, sizeof nvml.processes);
        nvml.processes_name = "nvmlDeviceGetComputeRunningProcesses_v2";
    }
    if (!init || !nvml.by_bus_id || !nvml.processes) {
        snprintf(nvml.why, sizeof nvml.why, "NVML unavailable: %s lacks %s", path,
                 !init ? "nvmlInit_v2" : !nvml.by_bus_id ? "nvmlDeviceGetHandleByPciBusId_v2"
                                                         : "nvmlDeviceGetComputeRunningProcesses_v2/_v3");
        dlclose(h);
        return;
    }
    int rc = init();
    if (rc != NVML_SUCCESS) {
        snprintf(nvml.why, sizeof nvml.why, "NVML unavailable: nvmlInit_v2 failed: %s", nvml_err(rc));
        return; /* the library stays mapped: nvml_err's strings live in it */
    }
    nvml.ok = 1;
}

/* Every compute process on dev (malloc'd, *n of them), or NULL with why. The
 * list can grow between the calls that size it and fill it: a few tries. */
static nvml_process_info *nvml_list(nvml_device dev, const char *bus_id, unsigned *n, char *why, size_t len) {
    unsigned cap = 16;
    for (int tries = 0; tries < 4; tries++) {
        nvml_process_info *p = calloc(cap, sizeof *p);
        if (!p) {
            snprintf(why, len, "NVML: out of memory listing processes");
            return NULL;
        }
        unsigned count = cap;
        int rc = nvml.processes(dev, &count, p);
        if (rc == NVML_SUCCESS) {
            *n = count <= cap ? count : cap;
            return p;
        }
        free(p);
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE) {
            snprintf(why, len, "NVML: %s on %s failed: %s", nvml.processes_name, bus_id, nvml_err(rc));
            return NULL;
        }
        cap = count > cap ? count + 8 : cap * 2;
    }
    snprintf(why, len, "NVML: the list of compute processes on %s kept growing", bus_id);
    return NULL;
}

/* The sum of pid's figures in list; -1 with why when it is not there or has none. */
static int nvml_find(const nvml_process_info *list, unsigned n, long pid, const char *bus_id, uint64_t *bytes,
                     char *why, size_t len) {
    uint64_t sum = 0;
    int found = 0, figure = 1;
    for (unsigned i = 0; i < n; i++) {
        if ((long)list[i].pid != pid) continue;
        found = 1;
        /* 0 is no figure either: a process with a context holds memory */
        if (list[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE || list[i].usedGpuMemory == 0) figure = 0;
        else sum += list[i].usedGpuMemory;
    }
    if (!found) {
        snprintf(why, len,
                 "NVML does not list this process (pid %ld) among the %u compute processes on %s "
                 "(in a container NVML may list the host's PIDs)",
                 pid, n, bus_id);
        return -1;
    }
    if (!figure) {
        snprintf(why, len, "NVML gives no memory figure for this process (pid %ld) on %s", pid, bus_id);
        return -1;
    }
    *bytes = sum;
    return 0;
}

static int nvml_process_bytes_locked(const char *bus_id, long pid, uint64_t *bytes, char *why, size_t len) {
    nvml_load_locked();
    if (!nvml.ok) {
        snprintf(why, len, "%s", nvml.why);
        return -1;
    }
    if (!bus_id || !bus_id[0]) {
        snprintf(why, len, "NVML: no PCI bus id for the device");
        return -1;
    }
    nvml_device dev = NULL;
    int rc = nvml.by_bus_id(bus_id, &dev);
    if (rc != NVML_SUCCESS) {
        snprintf(why, len, "NVML: no device at PCI bus id %s: %s", bus_id, nvml_err(rc));
        return -1;
    }
    unsigned n = 0;
    nvml_process_info *list = nvml_list(dev, bus_id, &n, why, len);
    if (!list) return -1;
    rc = nvml_find(list, n, pid, bus_id, bytes, why, len);
    free(list);
    return rc;
}

int hfl_nvml_process_bytes(const char *bus_id, long pid, uint64_t *bytes, char *why, size_t why_len) {
    pthread_mutex_lock(&nvml_lock);
    int rc = nvml_process_bytes_locked(bus_id, pid, bytes, why, why_len);
    pthread_mutex_unlock(&nvml_lock);
    return rc;
}
