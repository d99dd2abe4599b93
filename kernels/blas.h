/* blas.h: the CPU backend's BLAS library (OpenBLAS) as the rest of hfl sees
 * it. Only kernels/cpu/ calls OpenBLAS itself (blas_core.c implements these). */
#ifndef HFL_KERNELS_BLAS_H
#define HFL_KERNELS_BLAS_H

/* Call first in main, before any output, thread or file: returns when the
 * loaded kernel set stands (the environment names one, or the library did
 * not fall back to Prescott, or this CPU has nothing better, or the
 * re-execution failed, which leaves the library's choice); otherwise does
 * not return (the CPU backend's blas_core.h says why). */
void hfl_blas_core_fix(char **argv);

/* The kernel set the library runs ("Haswell", "SkylakeX", ...). */
const char *hfl_blas_core_name(void);

/* The library's thread count: set before the first GEMM, and read. */
void hfl_blas_set_threads(int n);
int hfl_blas_threads(void);

#endif
