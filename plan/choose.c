/* choose.c: hfl_plan_choose, its choose-verify loop, and the budget object
 * (choose.h says what each does). */
#include "plan/choose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/budget.h"
#include "util/util.h"

void hfl_mem_budget_init(hfl_mem_budget *b, uint64_t bytes, uint64_t free_bytes, double headroom) {
    memset(b, 0, sizeof *b);
    b->bytes = bytes;
    b->planned = bytes ? bytes : free_bytes;
    b->headroom = headroom;
}

uint64_t hfl_mem_budget_usable(const hfl_mem_budget *b) { return (uint64_t)((double)b->planned * (1.0 - b->headroom)); }

void hfl_mem_budget_arm(hfl_mem_budget *b, uint64_t predicted) {
    b->predicted = predicted;
    if (b->bytes) hfl_budget_set(b->bytes); /* a breach fails loudly */
}

int hfl_mem_budget_check(hfl_mem_budget *b, uint64_t peak, const char *when, char *err) {
    if (!b->bytes || peak <= b->bytes) return 0;
    b->breached = 1;
    b->measured_peak = peak > b->measured_peak ? peak : b->measured_peak;
    return hfl_errf(err, "memory budget breached %s: peak %.2f MiB over the %.2f MiB budget (predicted %.2f MiB)",
                    when, peak / 1048576.0, b->bytes / 1048576.0, b->predicted / 1048576.0);
}

/* When nothing is predicted to fit, the unmeasured candidate with the
 * smallest prediction whose arena alone fits, if any, among the precisions
 * whose overhead is not yet fitted on their own class's measurements: a
 * prediction from the prior, the fleet or the other class may be what rules
 * everything out, and measuring it settles that. Once a class has its own
 * measurements its predictions stand, and nothing fitting is a refusal. */
static const hfl_candidate *unmeasured_smallest(const hfl_choice *ch, const hfl_overhead_log *ov,
                                                uint64_t usable) {
    const hfl_candidate *best = NULL;
    for (int i = 0; i < ch->n; i++) {
        const hfl_candidate *c = &ch->rows[i];
        uint64_t known;
        if (c->arena > usable || hfl_overhead_log_exact(ov, c, &known) ||
            !strcmp(hfl_overhead_source(&ov->model, c->precision), "class"))
            continue;
        if (!best || c->predicted < best->predicted) best = c;
    }
    return best;
}

/* The loop: 1 when out->table.chosen is measured to fit, 0 with err when not. */
static int verify_loop(const hfl_plan_request *rq, const hfl_chooser_input *in, hfl_overhead_log *ov,
                       hfl_plan_choice *out, char *err) {
    hfl_choice *ch = &out->table;
    uint64_t usable = hfl_mem_budget_usable(&rq->budget);
    hfl_probe *probe = NULL;
    int verified = 0;
    while (!verified) {
        if (hfl_choose(rq->spec, in, ch, err) != 0) break;
        const hfl_candidate *c = ch->chosen >= 0 ? &ch->rows[ch->chosen] : unmeasured_smallest(ch, ov, usable);
        if (!c) {
            hfl_errf(err,
                     "nothing fits in %.2f MiB for model %s: the smallest budget that would is %.2f MiB as "
                     "predicted, at least %.2f MiB for the arena alone",
                     in->budget / 1048576.0, rq->spec->name, hfl_mib_up(ch->min_budget),
                     hfl_mib_down(ch->min_arena_budget));
            break;
        }
        uint64_t known;
        if (hfl_overhead_log_exact(ov, c, &known)) {
            verified = 1; /* measured before, and the chooser found it fits */
            break;
        }
        if (out->measured == HFL_PLAN_VERIFY_MAX) {
            hfl_errf(err, "no configuration verified to fit in %.1f MiB after %d measurements",
                     in->budget / 1048576.0, out->measured);
            break;
        }
        uint64_t peak, process;
        int held;
        if (!probe) probe = hfl_probe_new(rq->spec, rq->max_batch, rq->data_rows);
        if (hfl_probe_measure(probe, rq->be, c, in->opt_state, &out->cost, &peak, &held, &process, err) != 0) break;
        out->measured++;
        if (rq->who)
            printf("%s: verify: batch %d %s %s measured %.2f MiB (predicted %.2f) of %.2f MiB usable%s\n",
                   rq->who, c->batch, hfl_precision_name(c->precision), hfl_ckpt_name(c->ckpt),
                   peak / 1048576.0, c->predicted / 1048576.0, usable / 1048576.0,
                   peak > usable ? ": too big, re-planning" : "");
        uint64_t staging = hfl_overhead_staging(rq->be->host_memory, c->batch, rq->spec->in_dim, rq->spec->label_rows);
        hfl_overhead_log_add(ov, c, staging, peak);
        if (hfl_overhead_log_record(rq->state_dir, rq->device, rq->be, rq->spec, c, staging, peak, process,
                                    held ? &out->cost : NULL, err) != 0)
            break;
    }
    hfl_probe_free(probe);
    return verified;
}

/* The chosen row's plan, and the budget armed with its prediction. */
static int plan_chosen(const hfl_plan_request *rq, hfl_plan_choice *out, char *err) {
    out->chosen = out->table.rows[out->table.chosen];
    hfl_plan_config cfg;
    hfl_candidate_config(&out->chosen, rq->opt_state, &cfg);
    hfl_plan_config_for_backend(&cfg, rq->be);
    out->plan = hfl_malloc(sizeof *out->plan);
    if (hfl_plan_make(rq->spec, &cfg, out->plan, err) != 0) {
        free(out->plan);
        out->plan = NULL;
        return -1;
    }
    hfl_mem_budget_arm(&out->budget, out->chosen.predicted);
    return 0;
}

int hfl_plan_choose(const hfl_plan_request *rq, hfl_plan_choice *out, char *err) {
    memset(out, 0, sizeof *out);
    out->budget = rq->budget;
    hfl_chooser_input in = {.be = rq->be, .budget = rq->budget.planned, .headroom = rq->budget.headroom,
                            .precisions = rq->precisions, .opt_state = rq->opt_state,
                            .max_batch = rq->max_batch, .prefer_batch = rq->prefer_batch,
                            .allow_smaller = rq->allow_smaller, .conv_chunk = rq->conv_chunk};
    /* first, while the backend holds nothing but what opening it took */
    hfl_device_cost_get(rq->state_dir, rq->device, rq->be, &out->cost);
    hfl_overhead_log *ov = hfl_malloc(sizeof *ov);
    in.overhead = hfl_overhead_log_fn;
    in.overhead_ctx = ov;
    hfl_overhead_log_load(rq->state_dir, rq->device, rq->be, rq->spec, rq->fleet_overhead, out->cost.known, ov);
    hfl_calibrate(rq->state_dir, rq->device, rq->be, in.precisions, in.gflops, &out->op_costs);
    memcpy(out->gflops, in.gflops, sizeof out->gflops);
    in.op_costs = &out->op_costs;
    int rc = rq->verify ? (verify_loop(rq, &in, ov, out, err) ? 0 : -1) : hfl_choose(rq->spec, &in, &out->table, err);
    out->overhead_source = hfl_overhead_source(&ov->model, HFL_PREC_FP32);
    out->overhead_records = ov->model.n; /* with the loop's measurements */
    free(ov);
    if (rc == 0 && rq->verify) rc = plan_chosen(rq, out, err);
    return rc;
}
