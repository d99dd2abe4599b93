/* fake_nvml.c: a stand-in for libnvidia-ml.so.1 that test_nvml.c loads
 * through $HFL_NVML_LIBRARY, so the loader of kernels/nvml.c is tested on a
 * machine without the NVIDIA driver.
 *
 * It exports the four functions kernels/nvml.c uses, with NVML's documented
 * signatures and nvmlProcessInfo_t layout (pid, usedGpuMemory,
 * gpuInstanceId, computeInstanceId). One device exists, at PCI bus id
 * FAKE_BUS_ID. $FAKE_NVML picks what it lists, read at every call:
 *   list       20 processes (more than the loader's first buffer holds, so it
 *              must grow it), the caller's pid twice (two MIG instances: 1000
 *              and 234 bytes);
 *   absent     20 processes, none the caller;
 *   nofigure   the caller's pid with NVML_VALUE_NOT_AVAILABLE;
 *   zero       the caller's pid with 0 bytes;
 *   initfail   nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED (9). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_BUS_ID "0000:3B:00.0"

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} fake_process;

static const char *mode(void) {
    const char *m = getenv("FAKE_NVML");
    return m ? m : "list";
}

int nvmlInit_v2(void) { return strcmp(mode(), "initfail") == 0 ? 9 : 0; }

const char *nvmlErrorString(int rc) {
    switch (rc) {
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, void **device) {
    static int the_device;
    if (strcasecmp(bus_id, FAKE_BUS_ID) != 0) return 6;
    *device = &the_device;
    return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, fake_process *infos) {
    (void)device;
    fake_process all[20];
    unsigned n = 20, me = (unsigned)getpid();
    for (unsigned i = 0; i < n; i++)
        all[i] = (fake_process){.pid = me + 1000 + i, .usedGpuMemory = (1ull << 20) * (i + 1)};
    const char *m = mode();
    if (!strcmp(m, "list")) {
        all[3].pid = me, all[3].usedGpuMemory = 1000;
        all[17].pid = me, all[17].usedGpuMemory = 234;
    } else if (!strcmp(m, "nofigure")) {
        all[5].pid = me, all[5].usedGpuMemory = ~0ull;
    } else if (!strcmp(m, "zero")) {
        all[5].pid = me, all[5].usedGpuMemory = 0;
    }
    if (*count < n) {
        *count = n;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    memcpy(infos, all, sizeof all);
    *count = n;
    return 0;
}
