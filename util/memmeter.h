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
 * been written. Memory the allocator keeps after free (glibc's heap
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

/* A measured window over the process's private memory. The peak resident
 * size counts file-backed pages too: library code and read-only data mapped in
 * when code first runs, which the kernel maps ahead in aligned runs of up to
 * 16 pages (fault-around), so how many depends on where address-space layout
 * randomization placed each library: seen +-100 KiB from one process to the
 * next for the same training step. Those pages are clean, shared with every
 * process using the library and dropped by the kernel under pressure, so they
 * are not what a memory budget guards. The window's growth is the peak
 * resident growth less the file-backed pages (RssFile) mapped in meanwhile:
 * exact when they were mapped before the peak (a warmed-up step maps none),
 * otherwise low by at most those mapped after it. */
typedef struct {
    uint64_t rss0, file0;
} hfl_mem_window;

/* Resets the peak and records where the window starts. -1 with err when the
 * kernel's figures are unavailable (see above). */
int hfl_mem_window_begin(hfl_mem_window *w, char *err);

/* The window's peak growth of private resident memory in *growth (0 when it
 * shrank). -1 with err when the figures are unavailable. */
int hfl_mem_window_growth(const hfl_mem_window *w, uint64_t *growth, char *err);

#endif
