/* hd.h: HFL_HD marks a function body shared by the CPU backend and CUDA kernels.
 *
 * Every elementwise formula (quantizer, activation, optimizer step,
 * decode-and-accumulate) is written once as a `static inline HFL_HD` function.
 * The CPU backend calls it in a loop, a CUDA kernel calls it once per thread,
 * so the arithmetic is tested on every machine and only indexing and
 * launching are GPU-only. */
#ifndef HFL_HD_H
#define HFL_HD_H

#ifdef __CUDACC__
#define HFL_HD __host__ __device__
#else
#define HFL_HD
#endif

/* HFL_TYPED marks an HFL_HD body that takes a storage type t
 * (kernels/backend.h, STORAGE TYPES): on the host it is always inlined, so a
 * CPU loop that calls it with t a constant (kernels/cpu) compiles code for
 * that type alone instead of testing t at every element. */
#ifdef __CUDACC__
#define HFL_TYPED __host__ __device__
#else
#define HFL_TYPED __attribute__((always_inline))
#endif

#endif
