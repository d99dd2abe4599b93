/* test_device_probe.c: the CUDA device probe on a real GPU (suite gpu),
 * through the run-time module loader (kernels/select.c).
 *
 * Without a GPU, a driver or the CUDA module it skips (exit 77) and says
 * why. With one, the probe must report a named device of compute
 * capability >= 7.5 whose free memory is positive and at most its total,
 * hfl_backend_select("auto") must pick it over the CPU, and "cuda"
 * must hand out the CUDA backend on that device (a module built without
 * backend_cuda.c says so and the test fails). */
#include <stdio.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/select.h"
#include "tests/check.h"
#include "util/util.h"

int main(void) {
    hfl_device_info info;
    char reason[HFL_ERR_LEN];
    memset(&info, 0, sizeof info);
    if (hfl_cuda_probe(&info, reason, sizeof reason) != 0) {
        printf("SKIP: %s\n", reason);
        return 77;
    }
    printf("GPU: %s, cc %d.%d, %d SMs, %.2f of %.2f GiB free\n", info.name, info.cc_major, info.cc_minor,
           info.cores, info.free_bytes / 1073741824.0, info.total_bytes / 1073741824.0);
    CHECK_MSG(info.is_gpu && info.name[0] && info.cc_major * 10 + info.cc_minor >= 75 && info.cores > 0 &&
                  info.free_bytes > 0 && info.free_bytes <= info.total_bytes,
              "implausible probe result");
    char err[HFL_ERR_LEN] = "";
    hfl_device_info best;
    const hfl_backend *chosen = hfl_backend_select("auto", &best, NULL, err);
    CHECK_MSG(chosen && best.is_gpu && strcmp(best.name, info.name) == 0, "--device auto chose %s (%s)", best.name,
              best.fallback_reason);
    hfl_device_info sel;
    const hfl_backend *be = hfl_backend_select("cuda", &sel, NULL, err);
    CHECK_MSG(be && strcmp(be->name, "cuda") == 0 && sel.is_gpu && strcmp(sel.name, info.name) == 0,
              "--device cuda: %s", be ? be->name : err);
    return check_exit_code("test_device_probe");
}
