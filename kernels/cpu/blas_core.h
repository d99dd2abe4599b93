/* blas_core.h: run OpenBLAS on the kernels this CPU can run.
 *
 * Debian 12's OpenBLAS (0.3.21, built DYNAMIC_ARCH) picks its kernel set
 * when it loads. For an Intel family-6 model its table does not know (here:
 * Emerald Rapids, model 0xCF) get_coretype() in driver/others/dynamic.c
 * falls through from family 6 into family 15's case and returns Prescott,
 * the SSE3 kernels, instead of the CPUID fallback that follows it (bf16
 * AVX-512 -> Cooperlake, AVX-512 -> SkylakeX, AVX2 -> Haswell). Upstream
 * fixed the fall-through in 0.3.25 (commit e12aaed, "Fix unwanted
 * fallthrough from Intel Family 6 to 15"). On such a host hfl's mlp step
 * runs ~3x slower (docs/benchmarks.md, "OpenBLAS's kernel set").
 *
 * OPENBLAS_CORETYPE chooses the set, but only in the environment the
 * library loads with, so a program that finds Prescott on a CPU with AVX2
 * sets it as that fallback would have and executes itself again (same pid,
 * same arguments) first thing in main. A user's own OPENBLAS_CORETYPE is
 * never overridden (hfl_blas_core_fix, kernels/blas.h). */
#ifndef HFL_KERNELS_CPU_BLAS_CORE_H
#define HFL_KERNELS_CPU_BLAS_CORE_H

/* The kernel set OpenBLAS 0.3.21's CPUID fallback would pick on this CPU
 * ("Cooperlake", "SkylakeX", "Haswell"), NULL below AVX2. */
const char *hfl_blas_core_for_cpu(void);

#endif
