/* test_async.c: FedBuff (--async C) in the round engine, worked by hand
 * (coordinator/rounds.c; tests/coordinator/rounds_harness.h drives it).
 *
 * Four clients of 100 samples (the fleet: 400), K = 2, C = 3:
 *  round 1: three drawn at the open, the fourth told to wait (3 tasks out);
 *           once one update is in, the fourth's pull draws it mid-round
 *           (3 out again, the "drawn" event says so); two fresh updates of
 *           1 and 3 (each weighs 100 / 400) close it: the model moves to
 *           (1 + 3) / 2 = 2 and the two still training are late, in flight;
 *  round 2: C - 2 in flight = 1 drawn; the two late updates of 1 fold in
 *           one round stale, each weighted by 100 x q(1) / 65536 / 400 with
 *           q(1) = round(65536 / sqrt 2) = 46341, the divisor counting their
 *           200 samples: the model moves by 46341 / 65536 = 0.70710754 (not
 *           by 1: FedBuff shrinks stale updates); a second update for round
 *           1 is refused;
 *  the staleness bound: a task 9 rounds old is given up on at the next
 *           open (its client drawable again), one 8 old is still in flight;
 *  a client that asks for work while it holds a late task has given that
 *           task up (it restarted): it is drawn, and no longer in flight. */
#include "tests/coordinator/rounds_harness.h"

static void test_fedbuff(void) {
    setup(2, 1, 60, 1);
    c.cfg.async_concurrency = 3, c.cfg.rounds = 100;
    int id[4] = {hello("a", 100), hello("b", 100), hello("d", 100), hello("e", 100)};
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 1 && c.r.n_selected == 3 && c.r.n_target == 2);
    CHECK(c.r.samples_planned == 400);
    int x = c.r.selected[0], y = c.r.selected[1], z = c.r.selected[2], w = -1;
    for (int i = 0; i < 4; i++)
        if (!c.r.slot[id[i]].selected) w = id[i];
    REQUIRE(w >= 0);
    pull(x, HFL_MSG_TASK), pull(y, HFL_MSG_TASK), pull(z, HFL_MSG_TASK);
    pull(w, HFL_MSG_WAIT); /* three out: C */
    CHECK(!c.r.slot[w].selected);
    accept(x, 100, 0.5, 1.0f);
    CHECK(c.r.slot[x].weight == 100.0 / 400.0);
    pull(w, HFL_MSG_TASK); /* two out: the idle one is drawn */
    CHECK(c.r.slot[w].selected && c.r.slot[w].mid_round && c.r.n_selected == 4);
    cJSON *drawn = events("drawn");
    CHECK(cJSON_GetArraySize(drawn) == 1 && num(cJSON_GetArrayItem(drawn, 0), "client") == w &&
          num(cJSON_GetArrayItem(drawn, 0), "outstanding") == 3);
    cJSON_Delete(drawn);
    rounds_tick(&c);
    CHECK(c.r.open); /* one of K */
    accept(y, 100, 0.5, 3.0f);
    rounds_tick(&c);
    REQUIRE(!c.r.open && c.version == 1);
    CHECK(all_weights(2.0f));
    CHECK(c.clients[z].late_round == 1 && c.clients[w].late_round == 1 && c.n_inflight == 2);
    CHECK(c.clients[x].late_round == 0 && c.clients[y].late_round == 0);
    const cJSON *p;
    int late = 0, mid = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(last_round(), "participants")) {
        late += !strcmp(str(p, "status"), "late");
        mid += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "mid_round")) && num(p, "client") == w;
    }
    CHECK(late == 2 && mid == 1);

    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2);
    CHECK(c.r.n_selected == 1 && !c.r.slot[z].selected && !c.r.slot[w].selected && c.r.n_target == 2);
    int fresh = c.r.selected[0], idle = fresh == x ? y : x;
    pull(fresh, HFL_MSG_TASK);
    pull(idle, HFL_MSG_WAIT); /* 1 drawn + 2 in flight */
    cJSON *ack = send(z, 1, 100, 0.5, 1.0f, "fp32", NULL, 1000, HFL_MSG_ACK);
    CHECK(num(ack, "folded_into") == 2);
    cJSON_Delete(ack);
    CHECK(c.n_inflight == 1 && c.clients[z].late_round == 0);
    refuse(z, 1, 100, 0.5, "fp32", NULL, "round 2 is open", 0); /* once only */
    double q1 = 46341.0 * 100 / 65536 / 400;
    CHECK_MSG(c.r.stale[0].weight == q1, "stale weight %.17g, expected %.17g", c.r.stale[0].weight, q1);
    CHECK(c.r.weight_stale == 100);
    rounds_tick(&c);
    CHECK(c.r.open);
    cJSON_Delete(send(w, 1, 100, 0.5, 1.0f, "fp32", NULL, 1000, HFL_MSG_ACK));
    rounds_tick(&c);
    REQUIRE(!c.r.open && c.version == 2);
    float want = 2.0f + (float)(46341.0 / 65536.0);
    int near = 1;
    for (size_t i = 0; i < c.spec.n_params; i++) near &= fabsf(c.global[i] - want) < 1e-6f;
    CHECK_MSG(near, "weight 0 is %.9g, expected %.9g", (double)c.global[0], (double)want);
    const cJSON *r2 = last_round();
    CHECK(num(r2, "clients") == 0 && num(r2, "late_folded") == 2);
    const cJSON *folded = cJSON_GetObjectItemCaseSensitive(r2, "folded");
    CHECK(cJSON_GetArraySize(folded) == 2 && num(cJSON_GetArrayItem(folded, 0), "from_round") == 1 &&
          num(cJSON_GetArrayItem(folded, 1), "weight") == q1);
    CHECK(c.clients[fresh].late_round == 2 && c.n_inflight == 1);

    /* the staleness bound, at round 21's open */
    c.clients[x].late_round = 12, c.clients[y].late_round = 13; /* 9 and 8 old */
    c.clients[z].late_round = 0, c.clients[w].late_round = 0;
    c.r.round = 20;
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 21);
    CHECK(c.clients[x].late_round == 0 && c.clients[y].late_round == 13 && c.n_inflight == 1);
    CHECK(c.r.n_selected == 2 && !c.r.slot[y].selected); /* C - 1 */
    teardown();
}

/* A client that asks while holding a late task is drawn and leaves flight. */
static void test_abandoned(void) {
    setup(2, 1, 60, 1);
    c.cfg.async_concurrency = 2, c.cfg.rounds = 100;
    int a = hello("a", 100), b = hello("b", 100), d = hello("d", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 2);
    int x = c.r.selected[0], y = c.r.selected[1], rest = a + b + d - x - y;
    pull(x, HFL_MSG_TASK), pull(y, HFL_MSG_TASK);
    accept(x, 100, 0.5, 1.0f);
    pull(rest, HFL_MSG_TASK); /* x is done: one out, the third drawn */
    accept(rest, 100, 0.5, 1.0f);
    rounds_tick(&c);
    REQUIRE(!c.r.open && c.clients[y].late_round == 1 && c.n_inflight == 1);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2 && c.r.n_selected == 1);
    pull(y, HFL_MSG_TASK); /* 1 drawn + y's own: it is idle, so drawn */
    CHECK(c.r.slot[y].selected && c.r.slot[y].mid_round && c.clients[y].late_round == 0 && c.n_inflight == 0);
    refuse(y, 1, 100, 0.5, "fp32", NULL, "round 2 is open", 0); /* its old task is gone */
    teardown();
}

/* A drawn client that leaves the run holds no slot: another is drawn. */
static void test_left(void) {
    setup(2, 1, 60, 1);
    c.cfg.async_concurrency = 2, c.cfg.rounds = 100;
    int a = hello("a", 100), b = hello("b", 100), d = hello("d", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 2);
    int x = c.r.selected[0], y = c.r.selected[1], rest = a + b + d - x - y;
    pull(x, HFL_MSG_TASK), pull(y, HFL_MSG_TASK);
    pull(rest, HFL_MSG_WAIT); /* two out: C */
    char err[HFL_ERR_LEN];
    cJSON *bye = cJSON_Parse("{\"error\": \"memory budget breached\"}");
    CHECK(registry_leave(&c, y, bye, err) == 0);
    cJSON_Delete(bye);
    pull(rest, HFL_MSG_TASK); /* y's slot is free */
    CHECK(c.r.slot[rest].selected && c.r.slot[rest].mid_round);
    teardown();
}

/* A late update weighs its samples, at most its client's (a claim of 2000
 * from a client of 1000 weighs 1000), and --max-share does not cut it on
 * arrival (it holds at the close): 1000 of the fleet's 1300, not the 433 a
 * fresh round-share cap of 0.25 would allow. */
static void test_fold_caps(void) {
    setup(2, 1, 60, 0.25);
    c.cfg.async_concurrency = 4, c.cfg.rounds = 100;
    int big = hello("a", 1000);
    hello("b", 100), hello("d", 100), hello("e", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 4 && c.r.samples_planned == 1300);
    for (int i = 0; i < 4; i++) pull(c.r.selected[i], HFL_MSG_TASK);
    int done = 0;
    for (int i = 0; i < 4 && done < 2; i++)
        if (c.r.selected[i] != big) accept(c.r.selected[i], 100, 0.5, 1e-4f), done++;
    rounds_tick(&c);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2 && c.clients[big].late_round == 1);
    cJSON_Delete(send(big, 1, 2000, 0.5, 1e-4f, "fp32", NULL, 1000, HFL_MSG_ACK));
    CHECK_MSG(c.r.weight_stale == 1000, "folded samples %g, want 1000", c.r.weight_stale);
    CHECK(c.r.stale[0].weight == 46341.0 * 1000 / 65536 / 1300);
    teardown();
}

static const check_case cases[] = {
    {"fedbuff", test_fedbuff},
    {"abandoned", test_abandoned},
    {"left", test_left},
    {"fold_caps", test_fold_caps},
};

int main(int argc, char **argv) {
    return check_run("test_async", cases, CHECK_CASES(cases), argc, argv);
}
