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

#endif
