/* replan.c: re-planning when the memory a client may use shrinks.
 *
 * Between rounds, before it trains round r's task, the client reads the
 * budget it has for round r: --memory-budget, or from --budget-at's round
 * on, its size (a device whose free memory shrank; hfl-sim's
 * memory_budget_at). When the current plan, at the larger of its predicted
 * and its measured peak, no longer fits that budget less its headroom, the
 * trainer and its arena are freed and the configuration is chosen again
 * exactly as at start-up (client_choose_plan: the chooser, then verify's
 * measurements before it commits; the overhead log in --state-dir makes a
 * configuration measured before cost nothing). The round trains on the new
 * plan, its footprint the verified prediction (client/train.c: an
 * in-process step now would read low, the process keeping pages the old
 * trainer freed: 0.41 MiB measured for a plan verified at 2.08), and the
 * plan goes to the coordinator with the next pull (session.plan_round),
 * whose report lists the change. A budget that still holds the plan is
 * only adopted (the process cap follows it).
 *
 * A client without --memory-budget planned for the free memory it read at
 * start-up. Before each round it reads free memory again (the device's, or
 * the host's within its cgroups' limits: a pod resized in place, a job
 * beside it that grew), adds what its plan holds, and re-plans the same way
 * when its plan no longer fits that with its headroom. Where nothing fits
 * then, it sits the round out rather than leave at once: free memory may
 * come back.
 *
 * A breach (client/train.c's budget check: footprint plus growth over the
 * budget, e.g. a budget that shrank after the plan was checked) used to end
 * the client. Now its measured peak is recorded against the configuration
 * (so the chooser does not pick it again for that budget; not after a
 * re-plan, whose footprint was predicted, not measured), the client
 * re-plans under the budget it has for the round, and declines the round
 * (main.c). At most CLIENT_BREACH_REPLANS breaches in a row are answered
 * so: one more means the measurements cannot be trusted, and the client
 * leaves as before.
 *
 * Where nothing fits the new budget, the client says so in one line (the
 * chooser's refusal, which names the smallest budget that would work),
 * tells the coordinator it leaves (a bye with the reason) and ends with
 * status 1, as a start-up refusal does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "kernels/budget.h"
#include "kernels/device.h"
#include "util/memmeter.h"
#include "util/util.h"

#define CLIENT_BREACH_REPLANS 2

/* HFL_TEST_SHRINK_MIDSTEP (tests): "1": --budget-at's change lands after
 * its round's plan was checked, during the step, so train.c's breach check
 * meets it rather than the check between rounds; "every": from --budget-at's
 * round on, every step's check meets a promise of 1 byte (breaches that
 * keep coming, whatever the plan). 0: neither, 1, 2: "every". */
static int shrink_midstep(void) {
    const char *v = getenv("HFL_TEST_SHRINK_MIDSTEP");
    return !v ? 0 : !strcmp(v, "1") ? 1 : !strcmp(v, "every") ? 2 : 0;
}

void client_leave(client_session *ss, const char *why) {
    const client_state *s = ss->s;
    hfl_leave_msg l = {.has_error = 1,
                       .budget_bytes = (double)s->budget.bytes, .has_budget_bytes = 1,
                       .measured_peak_bytes = (double)s->budget.measured_peak, .has_measured_peak_bytes = 1,
                       .predicted_peak_bytes = (double)s->chosen.predicted, .has_predicted_peak_bytes = 1};
    snprintf(l.error, sizeof l.error, "%s", why);
    cJSON *meta = client_request_meta(s, &hfl_wire_leave, &l);
    hfl_msg rep;
    nng_msg *raw;
    char e[HFL_ERR_LEN];
    if (client_request(ss, HFL_MSG_BYE, meta, NULL, 0, &rep, &raw, e) == 0) {
        hfl_msg_free(&rep);
        nng_msg_free(raw);
    }
    cJSON_Delete(meta);
}

/* The budget for round `round`: --budget-at's from its round on, else --memory-budget's. */
static uint64_t budget_for(const client_options *o, int round) {
    return o->budget_at_round > 0 && round >= o->budget_at_round ? o->budget_at_bytes : o->budget;
}

/* The plan's peak: the larger of its prediction and its measurement. */
static uint64_t plan_need(const client_state *s) {
    return s->chosen.predicted > s->budget.measured_peak ? s->chosen.predicted : s->budget.measured_peak;
}

/* 1 when the current plan, at its predicted or measured peak (the larger),
 * fits `bytes` less the headroom. */
static int plan_fits(const client_state *s, uint64_t bytes) {
    hfl_mem_budget b;
    hfl_mem_budget_init(&b, bytes, 0, s->budget.headroom);
    return plan_need(s) <= hfl_mem_budget_usable(&b);
}

/* Frees the trainer (its arena leaves the process cap), its batch buffers and the plan. */
static void drop_plan(client_state *s) {
    if (s->trainer) hfl_trainer_free(s->trainer);
    s->trainer = NULL;
    free(s->xbuf);
    free(s->ybuf);
    s->xbuf = NULL, s->ybuf = NULL;
    free(s->plan);
    s->plan = NULL;
}

/* Chooses and verifies a plan as start-up does, for the budget `bytes`, or
 * without one (0) for `free_bytes` of free memory; 0, or -1 with err (the
 * refusal, naming the smallest budget that would work). The per-process
 * device cost is the one read at start-up (the backend holds more than its
 * context now). */
static int choose_again(client_session *ss, int round, uint64_t bytes, uint64_t free_bytes, char *err) {
    client_state *s = ss->s;
    client_options o = *ss->o;
    o.budget = bytes;
    hfl_device_info dev = *ss->dev;
    if (!bytes && free_bytes) dev.free_bytes = free_bytes;
    hfl_device_cost cost = s->cost;
    drop_plan(s);
    cJSON *plan = client_choose_plan(&o, &dev, s, &ss->w, err);
    s->cost = cost;
    if (!plan) return -1;
    s->replanned = 1;
    cJSON_Delete(ss->plan);
    ss->plan = plan;
    ss->plan_round = round;
    return 0;
}

/* Nothing fits `bytes` (what: "the memory budget", "free memory"): the one line, the bye, and -1. */
static int leave_unfit(client_session *ss, int round, const char *what, uint64_t bytes, char *err) {
    char why[HFL_ERR_LEN];
    snprintf(why, sizeof why, "round %d: %s is now %.2f MiB and %s", round, what, bytes / 1048576.0, err);
    client_leave(ss, why);
    return hfl_errf(err, "%s; leaving the run", why);
}

/* What the plan holds now: its arena, and the rest of its footprint where
 * it can be read (the CPU: the resident growth since the trainer was made,
 * its staging and BLAS buffers too; a GPU whose per-process cost is known:
 * the device memory the process holds beyond it, NVML's figure), at most
 * what the plan needs. */
static uint64_t plan_held(const client_state *s) {
    uint64_t arena = s->trainer ? hfl_trainer_device_bytes(s->trainer) : 0, held = arena, now;
    char e[HFL_ERR_LEN];
    if (s->trainer && s->be->host_memory && s->rss_base && hfl_mem_read(&now, NULL, e) == 0 && now > s->rss_base)
        held = now - s->rss_base;
    else if (s->trainer && !s->be->host_memory && hfl_held_bytes(s->be, &s->cost, &now, NULL) == 0)
        held = now;
    if (held < arena) held = arena;
    return held < plan_need(s) ? held : plan_need(s);
}

/* Without --memory-budget the plan was chosen for the free memory read at
 * start-up. What the client could use now: the free memory it reads now
 * (the device's; the host's within its cgroups, kernels/device.h) plus what
 * its plan holds. 0 and *usable, or -1 when it cannot tell. */
static int usable_now(const client_state *s, uint64_t *usable) {
    uint64_t free_bytes, total;
    if (s->be->host_memory ? hfl_host_free_now(&free_bytes) != 0 : s->be->mem_info(&free_bytes, &total) != 0)
        return -1;
    *usable = free_bytes + (s->plan ? plan_held(s) : 0);
    return 0;
}

/* The client without --memory-budget: re-plans when what it could use now
 * no longer holds its plan with the headroom, read twice FREE_REREAD_MS
 * apart (the larger counts: a moment's spike elsewhere does not re-plan).
 * Memory that grows changes nothing: the plan it has was verified. Where
 * nothing fits, it sits the round out (CLIENT_SIT_OUT) and reads again at
 * the next one; after CLIENT_BREACH_REPLANS such rounds in a row it
 * leaves, as a budget nothing fits makes it. */
#define FREE_REREAD_MS 100
static int follow_free_memory(client_session *ss, int round, char *err) {
    client_state *s = ss->s;
    uint64_t usable, again;
    if (usable_now(s, &usable) != 0 || (s->plan && plan_fits(s, usable))) return 0;
    hfl_sleep_ms(FREE_REREAD_MS);
    if (usable_now(s, &again) != 0) return 0;
    if (again > usable) usable = again;
    if (s->plan && plan_fits(s, usable)) return 0;
    if (!ss->o->quiet && s->plan)
        printf("%s: round %d: free memory is now %.2f MiB; the plan (batch %d, %s, checkpoint %s, peak %.2f MiB) "
               "no longer fits with its headroom: re-planning\n", ss->o->name, round, usable / 1048576.0,
               s->chosen.batch, hfl_precision_name(s->chosen.precision), hfl_ckpt_name(s->chosen.ckpt),
               plan_need(s) / 1048576.0);
    if (choose_again(ss, round, 0, usable, err) == 0) {
        ss->free_short = 0;
        return 0;
    }
    if (++ss->free_short > CLIENT_BREACH_REPLANS) {
        char why[HFL_ERR_LEN];
        snprintf(why, sizeof why, "%s (%d rounds in a row)", err, ss->free_short);
        snprintf(err, HFL_ERR_LEN, "%s", why);
        return leave_unfit(ss, round, "free memory", usable, err);
    }
    char why[HFL_ERR_LEN];
    snprintf(why, sizeof why, "round %d: free memory is now %.2f MiB and %s: sitting the round out", round,
             usable / 1048576.0, err);
    snprintf(err, HFL_ERR_LEN, "%s", why);
    return CLIENT_SIT_OUT;
}

int client_replan_round(client_session *ss, int round, char *err) {
    const client_options *o = ss->o;
    client_state *s = ss->s;
    uint64_t bytes = budget_for(o, round);
    int hook = shrink_midstep();
    if (hook && o->budget_at_round > 0 && round >= o->budget_at_round &&
        (hook == 2 || round == o->budget_at_round)) {
        s->budget.bytes = hook == 2 ? 1 : bytes; /* the promise shrinks; the plan is not checked against it */
        return 0;
    }
    if (!o->budget) return follow_free_memory(ss, round, err);
    if (bytes == s->budget.bytes) return 0;
    if (s->plan && plan_fits(s, bytes)) {
        s->budget.bytes = s->budget.planned = bytes;
        hfl_budget_set(bytes);
        if (!o->quiet)
            printf("%s: round %d: the memory budget is now %.2f MiB; the plan still fits\n", o->name, round,
                   bytes / 1048576.0);
        return 0;
    }
    if (!o->quiet)
        printf("%s: round %d: the memory budget is now %.2f MiB; the plan (batch %d, %s, checkpoint %s, peak "
               "%.2f MiB) no longer fits with its headroom: re-planning\n", o->name, round, bytes / 1048576.0,
               s->chosen.batch, hfl_precision_name(s->chosen.precision), hfl_ckpt_name(s->chosen.ckpt),
               plan_need(s) / 1048576.0);
    return choose_again(ss, round, bytes, 0, err) == 0 ? 0 : leave_unfit(ss, round, "the memory budget", bytes, err);
}

int client_replan_breach(client_session *ss, int round, char *err) {
    const client_options *o = ss->o;
    client_state *s = ss->s;
    if (++ss->breach_replans > CLIENT_BREACH_REPLANS) {
        char why[HFL_ERR_LEN];
        snprintf(why, sizeof why, "%s (%d breaches in a row)", err, ss->breach_replans);
        client_leave(ss, why);
        return hfl_errf(err, "%s; leaving the run", why);
    }
    fprintf(stderr, "%s: round %d: %s: re-planning\n", o->name, round, err);
    /* the breach's figure is this configuration's real peak: recorded, the
     * chooser will not take it again for this budget (not after a re-plan,
     * whose footprint is the prediction, not a measurement) */
    char e[HFL_ERR_LEN];
    uint64_t staging = hfl_overhead_staging(s->be->host_memory, s->chosen.batch, s->spec.in_dim, s->spec.label_rows);
    if (s->budget.measured_peak && !s->replanned &&
        hfl_overhead_log_record(o->state_dir, ss->dev->name, s->be, &s->spec, &s->chosen, staging,
                                s->budget.measured_peak, s->process_bytes, s->process_bytes ? &s->cost : NULL, e) != 0)
        fprintf(stderr, "%s: %s\n", o->name, e);
    uint64_t bytes = budget_for(o, round);
    return choose_again(ss, round, bytes, 0, err) == 0 ? 0 : leave_unfit(ss, round, "the memory budget", bytes, err);
}
