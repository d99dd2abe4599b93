/* budget.h: the process-wide device-memory budget both backends allocate under.
 *
 * A client's --memory-budget is a promise (docs/architecture.md, The memory promise): every byte a backend
 * allocates (the CPU backend's host blocks, the CUDA backend's cudaMalloc)
 * is reserved here first, so a simulated 4 GB card on an 80 GB GPU fails as
 * loudly as the real card would. Live bytes are the sum of the sizes asked
 * of alloc/try_alloc not yet freed (the planner's figures; allocator headers
 * and rounding are not counted). A reservation that would take live bytes
 * above a non-zero budget fails with one line in err. Setting a budget below
 * the live bytes frees nothing; reservations fail until enough is released.
 * Thread-safe (atomics). The CUDA module, a separate shared object, reaches
 * these through the function pointers kernels/select.c hands it, so there is
 * one count per process. */
#ifndef HFL_BUDGET_H
#define HFL_BUDGET_H

#include <stdint.h>

void hfl_budget_set(uint64_t bytes); /* 0 = no budget (the default) */
uint64_t hfl_budget_live_bytes(void);
uint64_t hfl_budget_peak_bytes(void); /* high-water mark of live bytes */
void hfl_budget_reset_peak(void);     /* peak := live bytes now */

/* Reserves bytes for backend `who` ("cpu", "cuda"): 0, or -1 with
 * "<who> backend: allocating N bytes would exceed the memory budget: ..." */
int hfl_budget_reserve(uint64_t bytes, const char *who, char *err);
/* The allocation of a reservation succeeded: the peak rises to the live bytes. */
void hfl_budget_commit(void);
/* Gives back a reservation (an allocation that failed after it, or a free). */
void hfl_budget_release(uint64_t bytes);

#endif
