/* share.h: how hfl-sim splits one GPU among the simulated clients on it.
 *
 * N clients on one card, each planning against all of its free memory,
 * would overcommit it; so each GPU client without a budget of its own gets
 * --memory-budget from an equal share. The free memory (less what clients
 * with a budget of their own were promised, their per-process cost
 * included) is split among N + 1 processes: the N clients and the
 * coordinator, which evaluates on the GPU too. A budget on a GPU covers what
 * a process holds beyond its per-process cost (plan/device_cost.h: its CUDA
 * context, cuBLAS's handle), which every process pays on top; so a client's
 * budget is its share less that cost. A share that leaves a client less than
 * `need` (the smallest arena its model can train in) does not fit, and the
 * fleet is refused up front, with one line naming how many clients would
 * fit, rather than dying in cudaMalloc once the contexts are made. The
 * split (hfl_gpu_share) is pure arithmetic, tested on the CPU
 * (tests/scenarios/test_share.c); hfl_sim_gpu_budget gathers its inputs on
 * the GPU. */
#ifndef HFL_SCENARIOS_SHARE_H
#define HFL_SCENARIOS_SHARE_H

#include <stdint.h>

#include "scenarios/scenario.h"

typedef struct {
    uint64_t free_bytes; /* the GPU's free memory now */
    int clients;         /* GPU clients that get a share (no budget of their own), >= 1 */
    uint64_t reserved;   /* promised to GPU clients with a budget of their own, costs included */
    uint64_t cost;       /* each process's per-process cost */
    uint64_t need;       /* the least a client's budget can train in */
} hfl_gpu_share_in;

/* 0 and *budget, each sharing client's budget; or -1 with one line in err
 * (HFL_ERR_LEN) naming how many clients would fit (*fit; may be NULL). */
int hfl_gpu_share(const hfl_gpu_share_in *in, uint64_t *budget, int *fit, char *err);

/* The budget each GPU client of scenario sc without a budget of its own
 * gets (*budget; 0 when there are none, or no GPU to share), before any
 * client or the coordinator starts: the GPU's free memory, the per-process
 * cost (plan/device_cost.h: kept in state_dir, else measured by opening the
 * backend here; where NVML cannot say, HFL_DEVICE_COST_PRIOR, said on
 * stdout unless quiet) and the smallest arena the scenario's model trains
 * in at its batch on the GPU. -1 with one line in err when they do not fit
 * or a client's own budget is not a size. */
int hfl_sim_gpu_budget(const hfl_scenario *sc, const char *state_dir, int quiet, uint64_t *budget, char *err);

#endif
