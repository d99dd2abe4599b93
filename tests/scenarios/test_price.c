/* test_price.c: the virtual clock of scenarios/profile.c's hfl_profiles_price
 * on a hand-made --async report, every wall worked out by hand.
 *
 * Two clients whose links move 1000 bytes/s both ways with no latency, and
 * no training time (trained_samples 0), so a task takes task bytes / 1000 +
 * update bytes / 1000 seconds. Deadline 30 s.
 *  round 1 (starts 0, target 1): client-0 ok (1000 down, 500 up: ends 1.5);
 *      client-1 late (its task began at 0, 1000 bytes down). Wall 1.5.
 *  round 2 (starts 1.5, target 2): client-1's round-1 update folds in (1000
 *      up: ends 0 + 1 + 1 = 2); then client-1, drawn mid-round, trains again
 *      from when that task ended (2), 1000 down and 500 up: ends 3.5. Wall
 *      2.0 (priced folded-first: the other order starts the new task at 1.5
 *      and gives 1.5).
 *  round 3 (starts 3.5, target 1): client-0 is missing, the round closes at
 *      its deadline: wall 30; its task began at 3.5.
 *  round 4 (starts 33.5, target 1): client-0's round-3 update folds in with
 *      40000 bytes up: ends 3.5 + 1 + 40 = 44.5; client-1 ok from 33.5 ends
 *      35. Wall 11.0 (a missing member's start not kept would give 7.5).
 * Total 44.5 s. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "scenarios/profile.h"
#include "scenarios/scenario.h"
#include "tests/check.h"
#include "util/util.h"

static const char *report =
    "{\"async_concurrency\": 2, \"rounds\": ["
    "{\"round\": 1, \"target\": 1, \"bytes_down\": 2000, \"participants\": ["
    "  {\"client\": 0, \"name\": \"client-0\", \"status\": \"ok\", \"bytes_up\": 500, \"trained_samples\": 0, \"samples\": 10},"
    "  {\"client\": 1, \"name\": \"client-1\", \"status\": \"late\"}]},"
    "{\"round\": 2, \"target\": 2, \"bytes_down\": 1000, \"participants\": ["
    "  {\"client\": 1, \"name\": \"client-1\", \"status\": \"ok\", \"mid_round\": true, \"bytes_up\": 500,"
    "   \"trained_samples\": 0, \"samples\": 10}],"
    " \"folded\": [{\"client\": 1, \"name\": \"client-1\", \"from_round\": 1, \"bytes_up\": 1000, \"trained_samples\": 0,"
    "   \"samples\": 10}]},"
    "{\"round\": 3, \"target\": 1, \"bytes_down\": 1000, \"participants\": ["
    "  {\"client\": 0, \"name\": \"client-0\", \"status\": \"missing\"}]},"
    "{\"round\": 4, \"target\": 1, \"bytes_down\": 1000, \"participants\": ["
    "  {\"client\": 1, \"name\": \"client-1\", \"status\": \"ok\", \"bytes_up\": 500, \"trained_samples\": 0, \"samples\": 10}],"
    " \"folded\": [{\"client\": 0, \"name\": \"client-0\", \"from_round\": 3, \"bytes_up\": 40000, \"trained_samples\": 0,"
    "   \"samples\": 10}]}]}";

/* Synchronous rounds under virtual_time with compute_scale 1000, deadline
 * 30 s, the same links, 1 TFLOPS at HFL_PROFILE_UTILISATION 0.3: mlp's
 * forward pass is 2 x (784 x 200 + 200 x 200 + 200 x 10) multiply-adds plus
 * 410 bias adds and 400 ReLUs = 398,410 FLOPs, so a sample trains in
 * 1000 x 3 x 398410 / 3e11 = 3.9841 ms.
 *  round 1: client-0 ok, 1000 samples: 1 + 3.9841 + 0.5 = 5.4841; client-1
 *      missed_deadline: the round ran to its deadline, wall 30.
 *  round 2: client-0 as before, client-1 2000 samples: 1 + 7.9682 + 0.5 =
 *      9.4682 s, the wall (without compute_scale: 1.50797). */
static const char *sync_report =
    "{\"rounds\": ["
    "{\"round\": 1, \"bytes_down\": 2000, \"participants\": ["
    "  {\"client\": 0, \"name\": \"client-0\", \"status\": \"ok\", \"bytes_up\": 500, \"trained_samples\": 1000},"
    "  {\"client\": 1, \"name\": \"client-1\", \"status\": \"missed_deadline\", \"sim_s\": 75}]},"
    "{\"round\": 2, \"bytes_down\": 2000, \"participants\": ["
    "  {\"client\": 0, \"name\": \"client-0\", \"status\": \"ok\", \"bytes_up\": 500, \"trained_samples\": 1000},"
    "  {\"client\": 1, \"name\": \"client-1\", \"status\": \"ok\", \"bytes_up\": 500, \"trained_samples\": 2000}]}]}";

static void check_virtual_time(const hfl_model_spec *spec, const hfl_profile *p) {
    CHECK_MSG(hfl_model_forward_flops(spec) == 398410, "mlp forward FLOPs %llu, by hand 398410",
              (unsigned long long)hfl_model_forward_flops(spec));
    hfl_scenario sc;
    memset(&sc, 0, sizeof sc);
    sc.clients = 2, sc.deadline_s = 30, sc.local_epochs = 1, sc.compute_scale = 1000, sc.virtual_time = 1;
    cJSON *rep = cJSON_Parse(sync_report);
    REQUIRE(rep);
    hfl_profiles_price(rep, &sc, p, spec);
    const double want[2] = {30, 9.4682};
    for (int i = 0; i < 2; i++) {
        const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rep, "rounds"), i);
        double wall = cJSON_GetNumberValue(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "simulated"), "wall_s"));
        CHECK_MSG(fabs(wall - want[i]) < 1e-9, "virtual time round %d: wall %.9g, want %.9g", i + 1, wall, want[i]);
    }
    cJSON_Delete(rep);
}

static hfl_model_spec spec;  /* mlp */
static hfl_profile links[2]; /* two clients of 1 TFLOP/s and 1000 B/s each way, made in main */

static void case_rounds(void) {
    hfl_scenario sc;
    memset(&sc, 0, sizeof sc);
    sc.clients = 2, sc.deadline_s = 30, sc.local_epochs = 1;
    cJSON *rep = cJSON_Parse(report);
    REQUIRE(rep);
    hfl_profiles_price(rep, &sc, links, &spec);
    static const double want[4] = {1.5, 2.0, 30, 11.0};
    int i = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(rep, "rounds")) {
        double wall = cJSON_GetNumberValue(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "simulated"), "wall_s"));
        CHECK_MSG(i < 4 && fabs(wall - want[i]) < 1e-9, "round %d: wall %.9g, want %.9g", i + 1, wall, i < 4 ? want[i] : 0);
        printf("round %d: simulated wall %.3f s\n", i + 1, wall);
        i++;
    }
    double total = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(rep, "simulated_s"));
    CHECK_MSG(i == 4 && fabs(total - 44.5) < 1e-9, "%d rounds, total %.9g, want 44.5", i, total);
    cJSON_Delete(rep);
}

static void case_virtual_time(void) { check_virtual_time(&spec, links); }

static const check_case cases[] = {
    {"rounds", case_rounds},
    {"virtual_time", case_virtual_time},
};

int main(int argc, char **argv) {
    char err[HFL_ERR_LEN];
    REQUIRE(hfl_model_builtin("mlp", &spec, err) == 0);
    for (int i = 0; i < 2; i++) {
        snprintf(links[i].name, sizeof links[i].name, "link-%d", i);
        links[i].tflops[0] = 1, links[i].up_bps = links[i].down_bps = 1000, links[i].latency_s = 0;
    }
    return check_run("test_price", cases, CHECK_CASES(cases), argc, argv);
}
