/* memmeter.h: the process's resident memory as the kernel counts it, for
 * measuring what a piece of code really takes, independently of any planner.
 *
 * A planner's figure covers the buffers it places; what libraries take for
 * themselves (OpenBLAS's per-thread GEMM buffers, glibc's arenas, a CUDA
 * context's host side) only shows up in the process's resident set. The meter
 * reads it from Linux's /proc/self/status: VmRSS (resident now) and VmHWM (the
 * peak since start or since the last reset). Resetting writes "5" to
 * /proc/self/clear_refs, which sets VmHWM to the current VmRSS (Linux >= 4.0,
 * CONFIG_PROC_PAGE_MONITOR). A measured window is then:
 *
 *     hfl_mem_reset_peak(err);  hfl_mem_read(&rss0, NULL, err);
 *     ... the code to measure ...
 *     hfl_mem_read(NULL, &peak, err);   growth = peak - rss0
 *
 * Both are process-wide (all threads share one address space), page-granular,
 * and count only pages that were touched: malloc'ed or mmap'ed memory that was
 * never written is not resident, so an arena shows up only as far as it has
 * been written (hfl_mem_touch writes one byte per page to make all of it
 * resident up front). Memory the allocator keeps after free (glibc's heap
 * below its trim threshold) stays resident, so a second window may show less
 * growth than the first for the same code. Elsewhere than Linux, and where the
 * kernel refuses the write, the calls fail with err rather than guess. */
#ifndef HFL_MEMMETER_H
#define HFL_MEMMETER_H

#include <stddef.h>
#include <stdint.h>

/* Sets the peak (VmHWM) to the current resident size. -1 with err when
 * /proc/self/clear_refs cannot be opened or written. */
int hfl_mem_reset_peak(char *err);

/* Resident bytes now and the peak since start or the last reset; either
 * pointer may be NULL. -1 with err when /proc/self/status is unreadable or
 * lacks the fields. */
int hfl_mem_read(uint64_t *rss, uint64_t *peak, char *err);

/* Writes one byte per page of [p, p + bytes) (keeping its value), so every
 * page is resident and the meter sees all of it. */
void hfl_mem_touch(void *p, size_t bytes);

#endif
