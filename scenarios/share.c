/* share.c: one GPU's free memory split among the clients on it (share.h). */
#include "scenarios/share.h"

#include <stdio.h>
#include <string.h>

#include "kernels/select.h"
#include "plan/chooser.h"
#include "plan/device_cost.h"
#include "util/util.h"

int hfl_gpu_share(const hfl_gpu_share_in *in, uint64_t *budget, int *fit, char *err) {
    uint64_t avail = in->free_bytes > in->reserved ? in->free_bytes - in->reserved : 0;
    uint64_t per = in->cost + in->need; /* what one process takes at the least */
    /* k clients fit when avail / (k + 1) >= per, i.e. k + 1 <= avail / per */
    uint64_t room = per ? avail / per : UINT64_MAX;
    int most = room == 0 ? 0 : room - 1 > (uint64_t)INT32_MAX ? INT32_MAX : (int)(room - 1);
    if (fit) *fit = most;
    int n = in->clients > 0 ? in->clients : 1;
    uint64_t share = avail / (uint64_t)(n + 1);
    if (share >= per) {
        *budget = share - in->cost;
        return 0;
    }
    return hfl_errf(err,
                    "%d GPU clients do not fit on the GPU: each needs at least %.1f MiB (%.1f MiB for its CUDA "
                    "context and libraries, %.1f MiB for the model's smallest step), and %.1f MiB free%s fits %d "
                    "beside the coordinator",
                    n, per / 1048576.0, in->cost / 1048576.0, in->need / 1048576.0, avail / 1048576.0,
                    in->reserved ? " (less what clients with their own budget were promised)" : "", most);
}

/* Client i runs where the GPU may be: --device auto or cuda. */
static int on_gpu(const hfl_scenario *sc, int i) {
    return strcmp(sc->client_device[i][0] ? sc->client_device[i] : sc->device, "cpu") != 0;
}

/* The smallest arena sc's model trains in at its batch on be (micro-batches
 * accumulating to it where it does not fit; the optimizer state it plans). */
static int smallest_step(const hfl_scenario *sc, const hfl_backend *be, const hfl_device_info *dev, uint64_t *need,
                         char *err) {
    hfl_model_spec spec;
    if (hfl_model_resolve(sc->model, &spec, err) != 0) return -1;
    hfl_chooser_input in = {.be = be, .budget = UINT64_MAX / 4, .max_batch = sc->batch, .prefer_batch = sc->batch,
                            .precisions = hfl_chooser_device_precisions(1, dev->cc_major, dev->cc_minor)};
    hfl_precision p;
    if (strcmp(sc->precision, "auto") != 0 && hfl_precision_parse(sc->precision, &p, NULL) == 0)
        in.precisions &= 1u << p;
    in.opt_state = (!strcmp(sc->optimizer, "adamw") ? HFL_OPT_ADAMW : sc->momentum != 0 ? HFL_OPT_MOMENTUM : 0) |
                   (sc->prox_mu != 0 ? HFL_OPT_ANCHOR : 0);
    hfl_choice ch;
    if (hfl_choose(&spec, &in, &ch, err) != 0) return -1;
    *need = ch.min_arena_budget;
    return 0;
}

int hfl_sim_gpu_budget(const hfl_scenario *sc, const char *state_dir, int quiet, uint64_t *budget, char *err) {
    int shared = 0, own = 0;
    *budget = 0;
    for (int i = 0; i < sc->clients; i++) {
        shared += on_gpu(sc, i) && !sc->client_memory[i][0];
        own += on_gpu(sc, i) && sc->client_memory[i][0];
    }
    if (!shared) return 0;
    hfl_device_info dev;
    char why[HFL_ERR_LEN];
    const hfl_backend *be = hfl_backend_select("auto", &dev, why, NULL);
    if (!be || !dev.is_gpu) return 0; /* the clients fall back to the CPU too */
    hfl_device_cost cost;
    if (hfl_device_cost_get(state_dir, dev.name, be, &cost) != 0) {
        cost.bytes = HFL_DEVICE_COST_PRIOR;
        if (!quiet)
            printf("hfl-sim: the per-process cost on %s is not known (%s): taking %.0f MiB\n", dev.name, cost.why,
                   cost.bytes / 1048576.0);
    }
    hfl_gpu_share_in in = {.free_bytes = dev.free_bytes, .clients = shared, .cost = cost.bytes};
    for (int i = 0; i < sc->clients; i++) {
        uint64_t b;
        if (!on_gpu(sc, i) || !sc->client_memory[i][0]) continue;
        if (hfl_parse_size(sc->client_memory[i], &b, err) != 0) return -1;
        in.reserved += b + cost.bytes;
    }
    if (smallest_step(sc, be, &dev, &in.need, err) != 0) return -1;
    char e[HFL_ERR_LEN];
    if (hfl_gpu_share(&in, budget, NULL, e) != 0) return hfl_errf(err, "on %s: %s", dev.name, e);
    if (!quiet)
        printf("hfl-sim: %d GPU clients share %s: a budget of %.0f MiB each, beside %.0f MiB per process for its "
               "context and libraries (%s)%s\n",
               shared, dev.name, *budget / 1048576.0, cost.bytes / 1048576.0, cost.known ? cost.source : "assumed",
               own ? ", after the clients with a budget of their own" : "");
    return 0;
}
