/* test_overdue.c: a withholding client and a pull storm in the round engine,
 * worked by hand (coordinator/overdue.c, rounds.c; driven by
 * tests/coordinator/rounds_harness.h). Three clients of 100 samples, K = 3,
 * no --min-quorum (the quorum is --quorum-fraction 0.5 of the draw), a
 * deadline of 0.2 s:
 *  round 1: w takes its task and never answers; a and b answer 1.0 and 3.0.
 *           At the deadline 2 of 3 have reported: the round is aggregated
 *           (2.0), where the old quorum of K failed it;
 *  round 2: w's task is past due: one strike, benched for 1 round (the
 *           task_overdue event, the round's "benched" and the report say so);
 *           a and b alone are drawn;
 *  round 3: w is drawn again and again lets the deadline pass; round 4 then
 *           benches it for 2 rounds (4 and 5); round 6 draws it, and an
 *           accepted update wipes its strikes. In all it let 2 tasks pass.
 *  An answer before the deadline is no strike, even a refused one.
 * The pull storm: K = 1, one client tasked; a repeat pull gets the task
 * without weights ("sent"), a re-download is sent once (full weights), the
 * next is refused with skip_round and the round stops waiting; the round's
 * participant counts 2 downloads and the bytes of all three answers.
 * Over-selection by default: a robust rule holds a row for every client
 * drawn, so the last of K (1 + F) drawn is taken, not refused for its row. */
#include <time.h>

#include "tests/coordinator/rounds_harness.h"

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Closes the open round once the deadline has passed, and opens the next. */
static void past_deadline(void) {
    sleep_s(c.cfg.deadline_s + 0.05);
    rounds_tick(&c);
    rounds_tick(&c);
}

static const cJSON *client_report(cJSON *arr, const char *name) {
    const cJSON *o;
    cJSON_ArrayForEach(o, arr) if (!strcmp(str(o, "name"), name)) return o;
    return NULL;
}

static void test_withholder(void) {
    setup(3, 0, 0.2, 1);
    c.cfg.quorum_fraction = 0.5, c.cfg.rounds = 8;
    int a = hello("a", 100), b = hello("b", 100), w = hello("w", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 1 && c.r.n_selected == 3);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(w, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f);
    accept(b, 100, 0.5, 3.0f);
    rounds_tick(&c);
    CHECK(c.r.open); /* before the deadline the round waits for w */
    past_deadline();
    const cJSON *r1 = cJSON_GetArrayItem(log_as_json(), 0);
    CHECK_MSG(!strcmp(str(r1, "status"), "ok") && c.version == 1, "round 1 with 2 of 3 at the deadline: %s",
              str(r1, "status"));
    CHECK(num(r1, "quorum") == 2);
    CHECK(all_weights(2.0f));
    /* round 2: w benched for one round */
    REQUIRE(c.r.open && c.r.round == 2);
    CHECK(!c.r.slot[w].selected && c.r.n_selected == 2 && c.r.n_benched == 1);
    CHECK(c.clients[w].strikes == 1 && c.clients[w].overdue == 1 && c.clients[w].benched_until == 3);
    cJSON *ev = events("task_overdue");
    CHECK(cJSON_GetArraySize(ev) == 1 && num(cJSON_GetArrayItem(ev, 0), "client") == w &&
          num(cJSON_GetArrayItem(ev, 0), "round") == 1 && num(cJSON_GetArrayItem(ev, 0), "benched_until_round") == 3);
    cJSON_Delete(ev);
    pull(w, HFL_MSG_WAIT);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    accept(a, 100, 0.5, 0.0f);
    accept(b, 100, 0.5, 0.0f);
    rounds_tick(&c);
    CHECK(num(last_round(), "benched") == 1);
    rounds_tick(&c);
    /* round 3: drawn again, withholds again */
    REQUIRE(c.r.open && c.r.round == 3 && c.r.slot[w].selected && c.r.n_benched == 0);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(w, HFL_MSG_TASK);
    accept(a, 100, 0.5, 0.0f);
    accept(b, 100, 0.5, 0.0f);
    past_deadline();
    REQUIRE(c.r.open && c.r.round == 4);
    CHECK(c.clients[w].strikes == 2 && c.clients[w].benched_until == 6 && !c.r.slot[w].selected);
    cJSON *rep = registry_report(&c);
    const cJSON *wr = client_report(rep, "w");
    CHECK(wr && num(wr, "tasks_overdue") == 2 && num(wr, "benched_until_round") == 6);
    CHECK(num(client_report(rep, "a"), "tasks_overdue") == 0);
    cJSON_Delete(rep);
    for (int round = 4; round <= 5; round++) { /* benched in 4 and 5 */
        REQUIRE(c.r.open && c.r.round == round && !c.r.slot[w].selected);
        pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
        accept(a, 100, 0.5, 0.0f);
        accept(b, 100, 0.5, 0.0f);
        rounds_tick(&c);
        rounds_tick(&c);
    }
    /* round 6: drawn, and a refused update before the deadline answers the task */
    REQUIRE(c.r.open && c.r.round == 6 && c.r.slot[w].selected);
    pull(w, HFL_MSG_TASK);
    refuse(w, 6, 100, 0.5, "int8", NULL, "codec", 1);
    CHECK(c.clients[w].task_round == 0);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    accept(a, 100, 0.5, 0.0f);
    accept(b, 100, 0.5, 0.0f);
    rounds_tick(&c);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 7 && c.r.slot[w].selected);
    CHECK(c.clients[w].strikes == 2 && c.clients[w].overdue == 2); /* no strike for round 6 */
    pull(w, HFL_MSG_TASK);
    accept(w, 100, 0.5, 0.0f); /* progress: the strikes start again */
    CHECK(c.clients[w].strikes == 0 && c.clients[w].benched_until == 0 && c.clients[w].overdue == 2);
    teardown();
}

static void test_pull_storm(void) {
    setup(1, 1, 60, 1);
    int a = hello("a", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.slot[a].selected);
    size_t first = pull(a, HFL_MSG_TASK);
    CHECK(first > c.spec.n_params * sizeof(float));
    size_t len, bytes = first;
    for (int i = 0; i < 10; i++) { /* repeats: the task, no weights */
        uint8_t *rep = rounds_pull(&c, a, -1, &len);
        hfl_msg m;
        char err[HFL_ERR_LEN] = "";
        REQUIRE(hfl_msg_decode(rep, len, (size_t)1 << 30, &m, err) == 0);
        CHECK(m.type == HFL_MSG_TASK && m.payload_len == 0 && !strcmp(str(m.meta, "weights"), "sent") &&
              num(m.meta, "round") == 1 && num(m.meta, "base_version") == 0);
        hfl_msg_free(&m);
        free(rep);
        bytes += len;
    }
    uint8_t *rep = rounds_pull_again(&c, a, -1, &len); /* a re-download: the whole model once more */
    cJSON *meta = reply_meta(rep, len, HFL_MSG_TASK);
    CHECK(meta && !strcmp(str(meta, "weights"), "full") && len == first);
    cJSON_Delete(meta);
    bytes += len;
    rep = rounds_pull_again(&c, a, -1, &len); /* and no more: told to skip the round */
    meta = reply_meta(rep, len, HFL_MSG_ERROR);
    CHECK(meta && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "skip_round")) && c.r.slot[a].refused);
    cJSON_Delete(meta);
    pull(a, HFL_MSG_WAIT);
    CHECK(c.r.slot[a].downloads == 2 && c.r.slot[a].resent == 1 && c.r.tasks_short == 10 && c.r.tasks_resent == 1);
    CHECK(c.r.slot[a].bytes_down == (double)bytes);
    rounds_tick(&c); /* every drawn client gone: closed now */
    REQUIRE(!c.r.open || c.r.round == 2);
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(log_as_json(), 0), "participants"), 0);
    CHECK(p && num(p, "downloads") == 2 && num(p, "bytes_down") == (double)bytes && !strcmp(str(p, "status"), "refused"));
    teardown();
}

static void test_robust_overselected(void) {
    setup_full(2, 1, 60, 1, "median", 0, 0);
    hfl_agg_free(&c.agg); /* planned again as main.c's defaults would: over-selected */
    hfl_sopt_free(&c.sopt);
    c.cfg.over_select = 0.5;
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(rounds_init(&c, err) == 0, "%s", err);
    int ids[4] = {hello("a", 100), hello("b", 100), hello("d", 100), hello("e", 100)};
    (void)ids;
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 3 && c.r.n_target == 2);
    int last = c.r.selected[2];
    pull(last, HFL_MSG_TASK);
    accept(last, 100, 0.5, 1.0f); /* its row is the third */
    CHECK(c.r.slot[last].received);
    teardown();
}

static const check_case cases[] = {
    {"robust_overselected", test_robust_overselected},
    {"withholder", test_withholder},
    {"pull_storm", test_pull_storm},
};

int main(int argc, char **argv) {
    return check_run("test_overdue", cases, CHECK_CASES(cases), argc, argv);
}
