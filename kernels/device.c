/* device.c: the CPU's description from /proc (a GPU's comes from the CUDA
 * module: hfl_cuda_probe, kernels/select.c). */
#include "kernels/device.h"
#include "kernels/blas.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void hfl_device_probe_cpu(hfl_device_info *info) {
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "model name", 10)) {
                char *colon = strchr(line, ':');
                if (colon) {
                    colon += 1 + (colon[1] == ' ');
                    colon[strcspn(colon, "\n")] = 0;
                    snprintf(info->name, sizeof info->name, "%s", colon);
                }
                break;
            }
        }
        fclose(f);
    }
    /* the kernel set is part of the device: the calibration and the learned
     * overhead (plan/overhead_log.c) differ between OpenBLAS's kernel sets */
    size_t n = strlen(info->name);
    snprintf(info->name + n, sizeof info->name - n, " (OpenBLAS %s)", hfl_blas_core_name());
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    info->cores = cores > 0 ? (int)cores : 1;
    f = fopen("/proc/meminfo", "r");
    if (f) {
        char key[64];
        unsigned long long kb;
        while (fscanf(f, "%63s %llu kB\n", key, &kb) == 2) {
            if (!strcmp(key, "MemTotal:")) info->total_bytes = kb * 1024ull;
            if (!strcmp(key, "MemAvailable:")) info->free_bytes = kb * 1024ull;
        }
        fclose(f);
    }
}
