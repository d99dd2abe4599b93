/* overdue.c: clients that let a deadline pass with a task in hand.
 *
 * A client that takes its task and never answers, while it keeps pulling so
 * it looks alive, would otherwise be drawn again and again, each time
 * costing its round the wait to the deadline (over-selection and the quorum
 * fraction, coord.h, keep the round from failing; this keeps it from being
 * drawn). A slow device that always misses the deadline behaves the same
 * without malice and is treated the same.
 *
 * In synchronous rounds a client's first task of a round is due --deadline
 * seconds after it went out. The oldest unanswered one is remembered
 * (task_round); an update or a decline for that round or a later one that
 * arrives before it is due answers it, accepted or not (a refused update
 * also frees the round from waiting). Before each draw, every task past due
 * is a strike: the client is not drawn for the next 2^(strikes - 1) rounds
 * (at most OVERDUE_MAX_BENCH), and the event log, the report (tasks_overdue,
 * benched_until_round) and --metrics show it. An accepted update is proof
 * of progress: the strikes start again from zero and any bench is lifted.
 * --async keeps no deadline per task: a task there is given up on at its
 * staleness bound (rounds.c), and none of this applies. */
#include "coordinator/coord.h"
#include "util/util.h"

#define OVERDUE_MAX_BENCH 64 /* rounds: the longest back-off, reached at the 7th strike in a row */

void overdue_tasked(coord *c, int id) {
    coord_client *cl = &c->clients[id];
    if (c->cfg.async_concurrency > 0 || cl->task_round) return; /* the oldest unanswered task is the one due */
    cl->task_round = c->r.round;
    cl->task_due = hfl_now() + c->cfg.deadline_s;
}

void overdue_answered(coord *c, int id, int64_t round) {
    coord_client *cl = &c->clients[id];
    if (cl->task_round && round >= cl->task_round && hfl_now() < cl->task_due) cl->task_round = 0;
}

void overdue_progress(coord *c, int id) {
    coord_client *cl = &c->clients[id];
    cl->strikes = 0;
    cl->benched_until = 0;
}

int overdue_benched(const coord *c, int id, int round) { return c->clients[id].benched_until > round; }

void overdue_judge(coord *c, int next_round) {
    double now = hfl_now();
    for (int i = 0; i < c->n_clients; i++) {
        coord_client *cl = &c->clients[i];
        if (!cl->task_round || now < cl->task_due) continue;
        int from = cl->task_round;
        cl->task_round = 0;
        cl->strikes++;
        cl->overdue++;
        int bench = cl->strikes >= 7 ? OVERDUE_MAX_BENCH : 1 << (cl->strikes - 1);
        cl->benched_until = next_round + bench;
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "event", "task_overdue");
        cJSON_AddNumberToObject(ev, "client", i);
        cJSON_AddStringToObject(ev, "name", cl->name);
        cJSON_AddNumberToObject(ev, "round", from);
        cJSON_AddNumberToObject(ev, "strikes", cl->strikes);
        cJSON_AddNumberToObject(ev, "benched_until_round", cl->benched_until);
        events_log(c, ev);
        if (!c->cfg.quiet)
            printf("coordinator: %s let round %d's deadline pass with its task: not drawn before round %d "
                   "(%d in a row)\n",
                   cl->name, from, cl->benched_until, cl->strikes);
    }
}
