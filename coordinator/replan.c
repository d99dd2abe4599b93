/* replan.c: a client's new plan, taken from its pull (re-planning
 * when memory shrinks).
 *
 * A client whose memory shrank chooses a smaller configuration
 * (client/replan.c) and sends it with its next pull: `plan`, checked by the
 * hello's plan table (proto/messages.c), and `plan_round`, the round in
 * which it re-planned. The plan replaces the one on the client's
 * record, so selection (its capacity, rounds.c) and the report's
 * clients[].plan use the new one, and the change is logged: an event
 * "client_replanned" and one entry of the report's "replans" (the round,
 * the client, the old and the new choice, and the budget that forced it).
 * A plan whose configuration (batch, accumulation, step batch, precision,
 * checkpoint, conv chunk) is the one held (a pull sent again, or a re-plan after a
 * breach that chose the same) replaces the held one unlisted, even when its
 * predicted peak moved: that figure includes the overhead learned from the
 * client's measured steps, so it changes with each record, and with the
 * machine, while the choice does not. A client that left keeps its record
 * as it was. A plan_round past the open round (the client re-planned in a
 * round this coordinator, restarted from an older state, has not opened
 * again yet) is listed as the open round's: the report names no round that
 * never was, and the client, whose hello already carried the plan, goes
 * on. At most COORD_MAX_REPLANS entries are kept, each with its
 * event (a client alternating between two plans cannot grow the report or
 * the event log without bound); later ones are counted in
 * replans_dropped. The entries are not in the state directory: a
 * restarted coordinator keeps the plans (the hello is persisted) and starts
 * the list afresh. */
#include <stdio.h>

#include "coordinator/coord.h"
#include "util/util.h"

/* What the report says of a choice: the configuration a re-plan changes
 * (the first REPLAN_CONFIG keys), then the figures that come with it. */
static const char *const replan_keys[] = {"batch",      "accumulation_steps", "step_batch",
                                          "precision",  "checkpoint",         "conv_chunk",
                                          "predicted_peak_bytes", "budget_bytes"};
enum { REPLAN_CONFIG = 6, REPLAN_KEYS = sizeof replan_keys / sizeof replan_keys[0] };

/* The first n keys of replan_keys that plan has, as a new object. */
static cJSON *replan_pick(const cJSON *plan, size_t n) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(plan, replan_keys[i]);
        if (v) cJSON_AddItemToObject(o, replan_keys[i], cJSON_Duplicate(v, 1));
    }
    return o;
}

static cJSON *replan_choice(const cJSON *plan) { return replan_pick(plan, REPLAN_KEYS); }

/* "batch 32 fp32 none" (and " chunk 8" for a conv model) for the progress line. */
static void replan_say(const cJSON *plan, char *out, size_t cap) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(plan, "batch");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(plan, "precision");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(plan, "checkpoint");
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(plan, "conv_chunk");
    char chunk[32] = "";
    if (cJSON_IsNumber(cc)) snprintf(chunk, sizeof chunk, " chunk %d", (int)cc->valuedouble);
    snprintf(out, cap, "batch %d %s %s%s", (int)cJSON_GetNumberValue(b), cJSON_IsString(p) ? p->valuestring : "?",
             cJSON_IsString(k) ? k->valuestring : "?", chunk);
}

void replan_take(coord *c, int id, const cJSON *plan, int64_t plan_round) {
    coord_client *cl = &c->clients[id];
    if (plan_round > c->r.round) plan_round = 0; /* the open round's (above) */
    if (cl->left[0] || !cl->hello) return;
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(cl->hello, "plan");
    cJSON *old_choice = old ? replan_pick(old, REPLAN_CONFIG) : NULL, *new_choice = replan_pick(plan, REPLAN_CONFIG);
    int same = old_choice && cJSON_Compare(old_choice, new_choice, 1);
    cJSON_Delete(old_choice);
    cJSON_Delete(new_choice);
    if (same) { /* the same choice (a pull sent again, a breach's re-plan that chose it again): kept, not listed */
        cJSON_ReplaceItemInObjectCaseSensitive(cl->hello, "plan", cJSON_Duplicate(plan, 1));
        return;
    }
    cJSON *entry = cJSON_CreateObject();
    cJSON_AddNumberToObject(entry, "round", plan_round > 0 ? (double)plan_round : c->r.round);
    cJSON_AddNumberToObject(entry, "client", id);
    cJSON_AddStringToObject(entry, "name", cl->name);
    if (old) cJSON_AddItemToObject(entry, "old", replan_choice(old));
    else cJSON_AddNullToObject(entry, "old");
    cJSON_AddItemToObject(entry, "new", replan_choice(plan));
    const cJSON *budget = cJSON_GetObjectItemCaseSensitive(plan, "budget_bytes");
    if (cJSON_IsNumber(budget)) cJSON_AddNumberToObject(entry, "budget_bytes", budget->valuedouble);
    if (!c->cfg.quiet) {
        char was[96] = "none", now[96], bud[48] = "";
        if (old) replan_say(old, was, sizeof was);
        replan_say(plan, now, sizeof now);
        if (cJSON_IsNumber(budget)) snprintf(bud, sizeof bud, ", budget %.2f MiB", budget->valuedouble / 1048576.0);
        printf("coordinator: %s re-planned at round %lld: %s -> %s%s\n", cl->name,
               plan_round > 0 ? (long long)plan_round : (long long)c->r.round, was, now, bud);
    }
    if (!c->replans) c->replans = cJSON_CreateArray();
    if (cJSON_GetArraySize(c->replans) < COORD_MAX_REPLANS) {
        cJSON *ev = cJSON_Duplicate(entry, 1);
        cJSON_AddStringToObject(ev, "event", "client_replanned");
        events_log(c, ev);
        cJSON_AddItemToArray(c->replans, entry);
    } else {
        c->replans_dropped++, cJSON_Delete(entry);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(cl->hello, "plan");
    cJSON_AddItemToObject(cl->hello, "plan", cJSON_Duplicate(plan, 1));
    cl->has_plan = 1;
}

cJSON *replan_report(const coord *c) {
    return c->replans ? cJSON_Duplicate(c->replans, 1) : cJSON_CreateArray();
}
