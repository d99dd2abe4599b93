/* test_device_probe.c: the CUDA device probe on a real GPU (suite gpu).
 *
 * Without a GPU, or in a build without CUDA, it skips (exit 77) and says
 * why. With one, the probe must report a named device of compute
 * capability >= 5.0 whose free memory is positive and at most its total,
 * and hfl_device_probe must pick it over the CPU. */
#include <stdio.h>
#include <string.h>

#include "kernels/device.h"

int main(void) {
#ifndef HFL_HAVE_CUDA
    printf("SKIP: hfl was built without CUDA\n");
    return 77;
#else
    hfl_device_info info;
    char reason[128];
    memset(&info, 0, sizeof info);
    if (hfl_cuda_probe(&info, reason, sizeof reason) != 0) {
        printf("SKIP: %s\n", reason);
        return 77;
    }
    printf("GPU: %s, cc %d.%d, %d SMs, %.2f of %.2f GiB free\n", info.name, info.cc_major, info.cc_minor,
           info.cores, info.free_bytes / 1073741824.0, info.total_bytes / 1073741824.0);
    int ok = info.is_gpu && info.name[0] && info.cc_major >= 5 && info.cores > 0 && info.free_bytes > 0 &&
             info.free_bytes <= info.total_bytes;
    hfl_device_info best;
    hfl_device_probe(&best);
    ok = ok && best.is_gpu && !strcmp(best.name, info.name);
    printf("%s\n", ok ? "ok" : "FAIL: implausible probe result");
    return ok ? 0 : 1;
#endif
}
