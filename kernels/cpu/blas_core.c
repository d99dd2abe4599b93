/* blas_core.c: run OpenBLAS on the kernels this CPU can run (see
 * blas_core.h). */
#include "kernels/cpu/blas_core.h"
#include "kernels/blas.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

const char *hfl_blas_core_for_cpu(void) {
    __builtin_cpu_init();
    /* dynamic.c's support_avx512() asks for AVX512VL; __builtin_cpu_supports
     * checks the OS's XSAVE state as well as CPUID, as its support_avx() does */
    if (__builtin_cpu_supports("avx512vl")) return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "Haswell";
    return NULL;
}

void hfl_blas_core_fix(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return; /* the user's choice, or ours after the exec */
    if (strcmp(openblas_get_corename(), "Prescott") != 0) return;
    const char *core = hfl_blas_core_for_cpu();
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* no /proc: keep the library's choice */
}

const char *hfl_blas_core_name(void) { return openblas_get_corename(); }
void hfl_blas_set_threads(int n) { openblas_set_num_threads(n); }
int hfl_blas_threads(void) { return openblas_get_num_threads(); }
