/* budget.c: the process-wide memory budget of kernels/budget.h.
 *
 * Reservations are a compare-and-swap loop on the live count, so two threads
 * racing for the last bytes cannot both get them; the peak is raised only
 * when the backend commits (its allocation succeeded), so a failed
 * allocation never raises it. */
#include "kernels/budget.h"

#include <stdatomic.h>

#include "util/util.h"

static _Atomic uint64_t budget_limit;
static _Atomic uint64_t budget_live;
static _Atomic uint64_t budget_peak;

void hfl_budget_set(uint64_t bytes) { atomic_store(&budget_limit, bytes); }
uint64_t hfl_budget_live_bytes(void) { return atomic_load(&budget_live); }
uint64_t hfl_budget_peak_bytes(void) { return atomic_load(&budget_peak); }
void hfl_budget_reset_peak(void) { atomic_store(&budget_peak, atomic_load(&budget_live)); }

int hfl_budget_reserve(uint64_t bytes, const char *who, char *err) {
    uint64_t live = atomic_load(&budget_live);
    for (;;) {
        uint64_t limit = atomic_load(&budget_limit);
        if (limit && (bytes > limit || live > limit - bytes))
            return hfl_errf(err,
                            "%s backend: allocating %llu bytes would exceed the memory budget: "
                            "%llu bytes live, budget %llu bytes",
                            who, (unsigned long long)bytes, (unsigned long long)live,
                            (unsigned long long)limit);
        if (atomic_compare_exchange_weak(&budget_live, &live, live + bytes)) return 0;
    }
}

void hfl_budget_commit(void) {
    uint64_t now = atomic_load(&budget_live), peak = atomic_load(&budget_peak);
    while (now > peak && !atomic_compare_exchange_weak(&budget_peak, &peak, now)) {
    }
}

void hfl_budget_release(uint64_t bytes) { atomic_fetch_sub(&budget_live, bytes); }
