/* test_sim.c: real federated runs through hfl-sim, each client a separate
 * process, over mutual TLS on loopback.
 * 1. 3 clients x 2 rounds, int8: every round aggregated all 3 updates, bytes
 *    moved both ways match the codec's size, and the model learned.
 * 2. 3 clients x 3 rounds, fp16 downlink sent as deltas after round 1, and
 *    one client on topk:0.01: tasks are fp16-sized and deltas, the topk
 *    client's updates are topk-sized, and the model still learns.
 * 3. A model from a JSON spec file (scenarios/models/small-cnn.json) that
 *    only the coordinator reads: clients build it from the welcome, train it,
 *    and report their planned and measured peaks.
 * 4. A broken memory promise is caught, not hidden: the shared state dir is
 *    seeded with a false measurement (mlp at batch 256 in fp32 with momentum 0.9, "measured" at
 *    its arena alone, as a state dir copied from elsewhere could say), so
 *    client-0, with a budget whose usable 95% just holds that arena (3.64
 *    MiB; the budget 3.84), trusts it and trains. The real step exceeds the
 *    budget on any machine: the batch's host staging alone (256 x 785 x 4
 *    bytes, 0.77 MiB) is more than the 5% headroom, whatever OpenBLAS and
 *    libc take (0.01 MiB on one CPU, ~2 MiB on another, which made a fixed
 *    2.6 MiB budget at batch 32 pass unbreached there). Its first
 *    step breaches the budget: it says so in one line naming both figures,
 *    records the real peak in the state dir (a batch-256 record over the
 *    budget), re-plans (client/replan.c) and declines round 1; round 2
 *    trains on the new plan, the report lists the re-plan (round 1, from 1
 *    x 256 to another choice within the budget) and nobody left.
 * 5. Small devices keep the run's batch: mlp at batch 256 on 4 clients, with
 *    room for it and with two clients limited to 3 MiB (batch 256 needs about
 *    4.2 MiB). From fresh output dirs the small clients plan micro-batches
 *    accumulating to 256, measure peaks within their budget, and the fleet
 *    ends within 1 point of the roomy one (same rows, same steps, same
 *    learning rate; before accumulation a fleet forced to batches 1 and 8
 *    reached 0.576 against 0.802). A second run of the roomy fleet makes the
 *    same choice of precision (auto), schedule and batch for every client,
 *    and ends every round at the same model, byte for byte (model_sha256:
 *    the coordinator's sums do not depend on arrival order).
 * 6. Drawing 2 of 6 clients a round, two runs end at the same model.
 * 7. The edge fleet of device profiles, against eight A100s (see below).
 * 8. A client the scenario kills and restarts (see below).
 * 9. Dropout (see below).
 * 10. Virtual time (see below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "plan/planner.h"
#include "tests/integration/harness.h"
#include "util/util.h"

static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static const char *str(const cJSON *o, const char *k) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    return v ? v : "";
}

/* Runs hfl-sim on a scenario written from json; returns its report (stops the test without one). */
static cJSON *run_sim(const char *sim, const char *name, const char *json) {
    const char *dir = harness_tmpdir();
    char scen[300], report[300], out[300], log[300], err[HFL_ERR_LEN];
    snprintf(scen, sizeof scen, "%s/%s.json", dir, name);
    snprintf(report, sizeof report, "%s/%s-report.json", dir, name);
    snprintf(out, sizeof out, "%s/%s", dir, name);
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    REQUIRE_MSG(hfl_write_file_atomic(scen, json, strlen(json), err) == 0, "%s", err);
    char *argv_sim[] = {(char *)sim, scen, "--out", out, "--report", report, NULL};
    int rc = harness_wait(harness_spawn(argv_sim, log), 300);
    char *text = hfl_read_file(log, NULL, err);
    if (text) printf("%s", text);
    free(text);
    CHECK_MSG(rc == 0, "hfl-sim exited with %d", rc);
    text = hfl_read_file(report, NULL, err);
    REQUIRE_MSG(text != NULL, "%s", err);
    cJSON *r = cJSON_Parse(text);
    free(text);
    REQUIRE_MSG(r != NULL, "report is not JSON");
    return r;
}

static const char *client_codec(const cJSON *r, const char *name) {
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(r, "clients")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cl, "name"), *c = cJSON_GetObjectItemCaseSensitive(cl, "codec");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name) && cJSON_IsString(c)) return c->valuestring;
    }
    return "(none)";
}

/* int8 at block 256: 12-byte header + 779 blocks of (4-byte scale + values) = 200,198 bytes */
#define INT8_PAYLOAD (12.0 + 779 * 4 + 199210)

static void check_tls_fedavg(cJSON *r) {
    const cJSON *transport = cJSON_GetObjectItemCaseSensitive(r, "transport");
    CHECK_MSG(cJSON_IsString(transport) && !strcmp(transport->valuestring, "tls+tcp"), "transport is not tls+tcp");
    CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "complete")), "run not complete");
    CHECK_MSG(num(r, "params") == 199210, "params %g", num(r, "params"));
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(r, "rounds");
    CHECK_MSG(cJSON_GetArraySize(rounds) == 2, "%d rounds in the report", cJSON_GetArraySize(rounds));
    for (int i = 0; i < 2; i++) {
        const cJSON *rd = cJSON_GetArrayItem(rounds, i);
        CHECK_MSG(num(rd, "round") == i + 1, "round %g", num(rd, "round"));
        CHECK_MSG(num(rd, "clients") == 3, "round %d aggregated %g clients", i + 1, num(rd, "clients"));
        CHECK_MSG(num(rd, "bytes_up") > 3 * INT8_PAYLOAD && num(rd, "bytes_up") < 3 * (INT8_PAYLOAD + 2048),
                  "bytes_up %g for 3 int8 updates of %g bytes", num(rd, "bytes_up"), INT8_PAYLOAD);
        CHECK_MSG(num(rd, "bytes_down") > 3 * 199210 * 4.0, "bytes_down %g", num(rd, "bytes_down"));
    }
    double acc1 = num(cJSON_GetArrayItem(rounds, 0), "test_acc"), acc = num(r, "final_test_acc");
    printf("test accuracy after round 1: %.4f, after round 2: %.4f\n", acc1, acc);
    CHECK_MSG(acc1 > 0.5, "round 1 accuracy %.4f: the model did not learn", acc1);
    CHECK_MSG(acc > 0.75, "final accuracy %.4f below 0.75", acc);
    const cJSON *clients = cJSON_GetObjectItemCaseSensitive(r, "clients");
    CHECK_MSG(cJSON_GetArraySize(clients) == 3, "%d clients registered", cJSON_GetArraySize(clients));
    double samples = 0;
    for (int i = 0; i < 3; i++) samples += num(cJSON_GetArrayItem(clients, i), "samples");
    CHECK_MSG(samples == 60000, "clients hold %g samples, iid shares should cover 60000", samples);
}

/* fp16 weights, as deltas after the first round; client-1 sends topk updates. */
static void check_downlink_and_client_codec(cJSON *r) {
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(r, "rounds");
    CHECK_MSG(cJSON_GetArraySize(rounds) == 3, "%d rounds in the report", cJSON_GetArraySize(rounds));
    double fp16_task = 12.0 + 2 * 199210;
    for (int i = 0; i < 3; i++) {
        const cJSON *rd = cJSON_GetArrayItem(rounds, i);
        CHECK_MSG(num(rd, "tasks_delta") == (i == 0 ? 0 : 3), "round %d sent %g delta tasks", i + 1, num(rd, "tasks_delta"));
        CHECK_MSG(num(rd, "bytes_down") > 3 * fp16_task && num(rd, "bytes_down") < 3 * (fp16_task + 2048),
                  "round %d: bytes_down %g for 3 fp16 tasks of %g bytes", i + 1, num(rd, "bytes_down"), fp16_task);
        /* two int8 updates and one topk:0.01 update (1,993 values: fp16 + 1-2 byte varint each) */
        double up = num(rd, "bytes_up");
        CHECK_MSG(up > 2 * INT8_PAYLOAD + 1993 * 3 && up < 2 * (INT8_PAYLOAD + 2048) + 1993 * 4 + 2048,
                  "round %d: bytes_up %g", i + 1, up);
    }
    CHECK_MSG(!strcmp(client_codec(r, "client-1"), "topk:0.01"), "client-1 uses %s", client_codec(r, "client-1"));
    CHECK_MSG(!strcmp(client_codec(r, "client-0"), "int8"), "client-0 uses %s", client_codec(r, "client-0"));
    double acc = num(r, "final_test_acc");
    printf("fp16 delta downlink, mixed codecs: final accuracy %.4f\n", acc);
    CHECK_MSG(acc > 0.75, "final accuracy %.4f below 0.75", acc);
}

/* Every client says which backend and device it ran on, in its hello's device
 * and in its plan; client-2 was told "cpu" by the scenario's client_devices. */
static void check_devices(cJSON *r) {
    const cJSON *cd = cJSON_GetObjectItemCaseSensitive(r, "coordinator_device");
    CHECK_MSG(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(cd, "backend")), "report has no coordinator_device.backend");
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(r, "clients")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "name"));
        const cJSON *dev = cJSON_GetObjectItemCaseSensitive(cl, "device"), *plan = cJSON_GetObjectItemCaseSensitive(cl, "plan");
        const char *db = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(dev, "backend"));
        const char *pb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(plan, "backend"));
        const char *pd = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(plan, "device"));
        if (!CHECK_MSG(name && db && pb && pd, "a client's report lacks device.backend, plan.backend or plan.device"))
            continue;
        CHECK_MSG(!strcmp(db, pb) && (!strcmp(db, "cpu") || !strcmp(db, "cuda")), "%s: device backend %s, plan backend %s",
                  name, db, pb);
        if (!strcmp(name, "client-2")) CHECK_MSG(!strcmp(pb, "cpu"), "client-2 was told cpu and ran on %s", pb);
    }
}

static void check_json_model(cJSON *r) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(r, "model");
    CHECK_MSG(cJSON_IsString(model) && !strcmp(model->valuestring, "small-cnn"), "model is not small-cnn");
    /* conv 1->8 5x5: 208; conv 8->16 5x5: 3,216; dense 784->64: 50,240; dense 64->10: 650 */
    CHECK_MSG(num(r, "params") == 54314, "params %g", num(r, "params"));
    double acc = num(r, "final_test_acc");
    printf("small-cnn from a JSON spec, one round: accuracy %.4f\n", acc);
    CHECK_MSG(acc > 0.6, "accuracy %.4f: the spec model did not learn", acc);
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(r, "clients")) {
        const cJSON *plan = cJSON_GetObjectItemCaseSensitive(cl, "plan");
        CHECK_MSG(cJSON_IsObject(plan) && num(plan, "arena_bytes") > 0, "a client reported no plan");
        CHECK_MSG(num(cl, "measured_peak_bytes") > num(plan, "arena_bytes") * 0.9,
                  "measured peak %g against an arena of %g", num(cl, "measured_peak_bytes"), num(plan, "arena_bytes"));
    }
}

/* The device name the clients of run `name` recorded in their state dir. */
static void recorded_device(const char *name, char *out, size_t n) {
    char path[400], err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/%s/state/overhead.jsonl", harness_tmpdir(), name);
    char *text = hfl_read_file(path, NULL, err);
    REQUIRE_MSG(text, "%s", err);
    char *nl = strchr(text, '\n');
    if (nl) *nl = 0;
    cJSON *o = cJSON_Parse(text);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "device");
    REQUIRE_MSG(cJSON_IsString(d), "no device in %s", path);
    snprintf(out, n, "%s", d->valuestring);
    cJSON_Delete(o);
    free(text);
}

static void check_breach(const char *sim, const char *device) {
    const char *dir = harness_tmpdir();
    char state[400], path[500], line[600], scen[400], report[400], log[400], err[HFL_ERR_LEN];
    char json[600], want[100];
    /* the arena the client will plan (the CPU's, momentum for 0.9), and a
     * budget whose 95% holds it to the next 0.01 MiB */
    hfl_model_spec mlp;
    REQUIRE_MSG(hfl_model_builtin("mlp", &mlp, err) == 0, "%s", err);
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_plan_config cfg = {.batch = 256, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .momentum = 1};
    REQUIRE_MSG(hfl_plan_make(&mlp, &cfg, plan, err) == 0, "%s", err);
    double budget_mib = ceil(plan->arena_bytes / 0.95 / 1048576.0 * 100.0 + 0.5) / 100.0;
    free(plan);
    snprintf(state, sizeof state, "%s/breach/state", dir);
    REQUIRE_MSG(hfl_mkdirs(state, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/overhead.jsonl", state);
    snprintf(line, sizeof line,
             "{\"device\": \"%s\", \"backend\": \"cpu\", \"model\": \"mlp\", \"batch\": 256, "
             "\"precision\": \"fp32\", \"checkpoint\": \"none\", \"arena\": 1000, \"staging\": 0, "
             "\"measured\": 1000}\n", device);
    REQUIRE_MSG(hfl_write_file_atomic(path, line, strlen(line), err) == 0, "%s", err);
    snprintf(json, sizeof json,
             "{\"name\": \"breach\", \"model\": \"mlp\", \"clients\": 2, \"clients_per_round\": 2,"
             " \"min_quorum\": 1, \"rounds\": 2, \"partition\": \"iid\", \"codec\": \"int8\","
             " \"batch\": 256, \"momentum\": 0.9, \"precision\": \"fp32\", \"client_memory\": {\"client-0\": \"%.2fM\"},"
             " \"seed\": 7}", budget_mib);
    snprintf(want, sizeof want, "over the %.2f MiB budget", budget_mib);
    snprintf(scen, sizeof scen, "%s/breach.json", dir);
    snprintf(report, sizeof report, "%s/breach-report.json", dir);
    snprintf(log, sizeof log, "%s/breach.log", dir);
    snprintf(path, sizeof path, "%s/breach", dir);
    REQUIRE_MSG(hfl_write_file_atomic(scen, json, strlen(json), err) == 0, "%s", err);
    char *argv_sim[] = {(char *)sim, scen, "--out", path, "--report", report, NULL};
    REQUIRE_MSG(harness_wait(harness_spawn(argv_sim, log), 300) == 0, "the run failed: see %s", log);
    snprintf(log, sizeof log, "%s/breach/client-0.log", dir);
    char *text = hfl_read_file(log, NULL, err);
    REQUIRE_MSG(text, "%s", err);
    printf("%s", text);
    CHECK_MSG(strstr(text, "memory budget breached in the first step: peak "), "no breach line in the log");
    CHECK_MSG(strstr(text, want), "the breach line does not name the budget (%s)", want);
    CHECK_MSG(strstr(text, ": re-planning") && strstr(text, "round 1 declined (re-planned after a memory breach)"),
              "client-0 did not re-plan and decline round 1");
    free(text);
    /* the real peak recorded: a batch-256 fp32 record over the budget, beside the seeded one */
    snprintf(path, sizeof path, "%s/overhead.jsonl", state);
    text = hfl_read_file(path, NULL, err);
    REQUIRE_MSG(text, "%s", err);
    int over = 0;
    for (char *ln = strtok(text, "\n"); ln; ln = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(ln);
        over += num(o, "batch") == 256 && num(o, "measured") > budget_mib * 1048576;
        cJSON_Delete(o);
    }
    free(text);
    CHECK_MSG(over >= 1, "no batch-256 record over the budget in %s", path);
    text = hfl_read_file(report, NULL, err);
    REQUIRE_MSG(text, "%s", err);
    cJSON *r = cJSON_Parse(text);
    free(text);
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(r, "clients")) {
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(cl, "left");
        CHECK_MSG(!why, "%s left: %s", cJSON_GetObjectItemCaseSensitive(cl, "name")->valuestring, why->valuestring);
    }
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(r, "replans"), *e = cJSON_GetArrayItem(rp, 0);
    const cJSON *was = cJSON_GetObjectItemCaseSensitive(e, "old"), *now = cJSON_GetObjectItemCaseSensitive(e, "new");
    CHECK_MSG(cJSON_GetArraySize(rp) == 1 && num(e, "round") == 1 && !strcmp(str(e, "name"), "client-0") &&
              num(was, "batch") == 256 && num(was, "accumulation_steps") == 1 &&
              !cJSON_Compare(was, now, 1) && num(now, "predicted_peak_bytes") <= 0.95 * budget_mib * 1048576,
              "the re-plan listed: %d", cJSON_GetArraySize(rp));
    int declined = 0, ok = 0;
    const cJSON *rd, *p;
    cJSON_ArrayForEach(rd, cJSON_GetObjectItemCaseSensitive(r, "rounds")) {
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(rd, "participants")) {
            if (strcmp(str(p, "name"), "client-0") != 0) continue;
            declined += num(rd, "round") == 1 && !strcmp(str(p, "status"), "declined");
            ok += num(rd, "round") == 2 && !strcmp(str(p, "status"), "ok");
        }
    }
    CHECK_MSG(declined == 1 && ok == 1, "client-0: round 1 declined %d, round 2 trained %d", declined, ok);
    cJSON_Delete(r);
}

/* The plan a client of run r named `name` chose, as "precision/checkpoint/batch xN". */
static void plan_of(const cJSON *r, const char *name, char *out, size_t n) {
    const cJSON *cl;
    snprintf(out, n, "(none)");
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(r, "clients")) {
        const cJSON *plan = cJSON_GetObjectItemCaseSensitive(cl, "plan");
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "name")), name)) continue;
        snprintf(out, n, "%s/%s/%g x%g", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(plan, "precision")),
                 cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(plan, "checkpoint")), num(plan, "batch"),
                 num(plan, "accumulation_steps"));
    }
}

/* Two runs of one scenario and seed, from fresh output dirs: each client
 * chose the same precision, schedule and batch (precision auto). */
static void check_same_choices(const cJSON *a, const cJSON *b) {
    const cJSON *cl;
    int n = 0;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(a, "clients")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "name"));
        char pa[128], pb[128];
        plan_of(a, name, pa, sizeof pa);
        plan_of(b, name, pb, sizeof pb);
        CHECK_MSG(!strcmp(pa, pb), "%s chose %s in one run and %s in the other", name, pa, pb);
        n++;
    }
    CHECK_MSG(n == 4, "%d clients compared", n);
    printf("two runs of one scenario: the same plan for all %d clients\n", n);
}

/* 5: the same fleet with and without room for the run's batch of 256. */
#define FLEET_JSON "{\"name\": \"%s\", \"model\": \"mlp\", \"clients\": 4, \"rounds\": 3, \"partition\": \"iid\"," \
                   " \"codec\": \"int8\", \"batch\": 256, \"lr\": 0.1, \"seed\": 7%s}"

static void check_accumulating_fleet(const char *sim) {
    char json[600];
    snprintf(json, sizeof json, FLEET_JSON, "roomy", "");
    cJSON *roomy = run_sim(sim, "roomy", json);
    snprintf(json, sizeof json, FLEET_JSON, "tight", ", \"client_memory\": {\"client-0\": \"3M\", \"client-1\": \"3M\"}");
    cJSON *tight = run_sim(sim, "tight", json);
    snprintf(json, sizeof json, FLEET_JSON, "again", "");
    cJSON *again = run_sim(sim, "again", json);
    /* the chooser ranks by timed GEMM rates; under a sanitizer those timings say little */
    if (getenv("HFL_SANITIZED")) printf("sanitizer build: the two runs' timed choices are not compared\n");
    else check_same_choices(roomy, again);
    const char *sa = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(roomy, "final_model_sha256"));
    const char *sb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(again, "final_model_sha256"));
    CHECK_MSG(sa && sb && strlen(sa) == 64 && !strcmp(sa, sb), "two runs of one scenario ended at models %s and %s",
              sa ? sa : "?", sb ? sb : "?");
    const cJSON *rd;
    int rounds = 0;
    cJSON_ArrayForEach(rd, cJSON_GetObjectItemCaseSensitive(roomy, "rounds")) {
        const cJSON *ra = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(again, "rounds"), rounds++);
        const char *ma = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rd, "model_sha256"));
        const char *mb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ra, "model_sha256"));
        CHECK_MSG(ma && mb && !strcmp(ma, mb), "round %d: models differ between two runs", rounds);
    }
    printf("two runs of one scenario: the same model after each of %d rounds, final %.16s...\n", rounds, sa ? sa : "?");
    cJSON_Delete(again);
    const cJSON *cl;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(roomy, "clients"))
        CHECK_MSG(num(cJSON_GetObjectItemCaseSensitive(cl, "plan"), "accumulation_steps") == 1, "a roomy client accumulates");
    int small = 0;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(tight, "clients")) {
        const cJSON *plan = cJSON_GetObjectItemCaseSensitive(cl, "plan");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "name"));
        double steps = num(plan, "accumulation_steps"), b = num(plan, "batch");
        if (strcmp(name, "client-0") && strcmp(name, "client-1")) continue;
        small++;
        printf("%s in 3 MiB: %g micro-batches of %g, measured peak %.2f MiB\n", name, steps, b,
               num(cl, "measured_peak_bytes") / 1048576.0);
        CHECK_MSG(steps > 1 && num(plan, "step_batch") == 256 && steps == ceil(256 / b),
                  "%s: %g steps of %g for the run's batch of 256", name, steps, b);
        CHECK_MSG(num(cl, "measured_peak_bytes") > 0 && num(cl, "measured_peak_bytes") <= 3 * 1048576.0,
                  "%s measured %.0f bytes over its 3 MiB budget", name, num(cl, "measured_peak_bytes"));
    }
    CHECK_MSG(small == 2, "%d small clients in the report", small);
    double a = num(roomy, "final_test_acc"), b = num(tight, "final_test_acc");
    printf("batch 256: final accuracy %.4f with room for it, %.4f with two clients accumulating\n", a, b);
    CHECK_MSG(fabs(a - b) <= 0.01, "accumulating fleet %.4f against %.4f: more than 1 point apart", b, a);
    CHECK_MSG(a > 0.75, "final accuracy %.4f: the fleet did not learn", a);
    cJSON_Delete(roomy);
    cJSON_Delete(tight);
}

/* 6: two runs drawing 2 of 6 clients a round end at the same model: the
 * first round waits for the whole fleet (--min-clients), and every draw is
 * a function of the seed and the round over the clients in name order. */
static void check_reproducible_draw(const char *sim) {
    const char *json = "{\"name\": \"%s\", \"model\": \"mlp\", \"clients\": 6, \"clients_per_round\": 2, "
                       "\"rounds\": 3, \"partition\": \"iid\", \"codec\": \"int8\", \"seed\": 11}";
    char a_json[300], b_json[300];
    snprintf(a_json, sizeof a_json, json, "draw-a");
    snprintf(b_json, sizeof b_json, json, "draw-b");
    cJSON *a = run_sim(sim, "draw-a", a_json), *b = run_sim(sim, "draw-b", b_json);
    const char *sa = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "final_model_sha256"));
    const char *sb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "final_model_sha256"));
    CHECK_MSG(sa && sb && strlen(sa) == 64 && !strcmp(sa, sb), "2 of 6 drawn: two runs ended at models %s and %s",
              sa ? sa : "?", sb ? sb : "?");
    printf("2 of 6 clients drawn a round: two runs end at the same model %.16s...\n", sa ? sa : "?");
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a, "rounds"), 0);
    CHECK_MSG(num(first, "eligible") == 6, "round 1 drew from %g clients, not the whole fleet of 6", num(first, "eligible"));
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* 7: scenarios/edge-fleet.json's unlike devices (4 rounds) against the same
 * data on eight A100 profiles: the small cards and the laptop accumulate
 * micro-batches within their budgets and the fleet ends within 1 point of
 * the uniform one; rounds are priced in simulated time from the profiles
 * (the A100 fleet's slowest upload is one of bytes / 10 Gbit/s + 1 ms, by hand). */
#define EDGE_JSON "{\"name\": \"%s\", \"model\": \"mlp\", \"clients\": 8, \"rounds\": 4, \"batch\": 256, " \
                  "\"lr\": 0.1, \"partition\": \"dirichlet:0.5\", \"codec\": \"int8\", \"seed\": 4, " \
                  "\"memory_scale\": 0.0009765625, \"profile_library\": \"%s/scenarios/profiles.json\", \"profiles\": %s}"

static void check_edge_fleet(const char *sim) {
    const char *root = getenv("HFL_SOURCE_ROOT");
    REQUIRE_MSG(root, "HFL_SOURCE_ROOT is not set");
    char json[1200];
    snprintf(json, sizeof json, EDGE_JSON, "edge", root,
             "{\"gtx1650-4g\": 1, \"jetson-orin-8g\": 1, \"laptop-cpu\": 1, \"rtx3060-12g\": 2, \"t4-16g\": 1, "
             "\"rtx4090-24g\": 1, \"a100-80g\": 1}");
    cJSON *edge = run_sim(sim, "edge", json);
    snprintf(json, sizeof json, EDGE_JSON, "uniform", root, "{\"a100-80g\": 8}");
    cJSON *uni = run_sim(sim, "uniform", json);
    const cJSON *cl;
    int accumulating = 0;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(edge, "clients")) {
        const cJSON *plan = cJSON_GetObjectItemCaseSensitive(cl, "plan");
        const char *prof = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "profile"));
        double budget = num(plan, "budget_bytes"), peak = num(cl, "measured_peak_bytes");
        CHECK_MSG(peak > 0 && peak <= budget, "%s (%s): measured %.0f over its budget %.0f", prof ? prof : "?",
                  cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "name")), peak, budget);
        int small = prof && (!strcmp(prof, "gtx1650-4g") || !strcmp(prof, "jetson-orin-8g") || !strcmp(prof, "laptop-cpu"));
        CHECK_MSG((num(plan, "accumulation_steps") > 1) == small, "%s accumulates %g steps", prof ? prof : "?",
                  num(plan, "accumulation_steps"));
        accumulating += small;
    }
    CHECK_MSG(accumulating == 3, "%d small devices found", accumulating);
    double ae = num(edge, "final_test_acc"), au = num(uni, "final_test_acc");
    printf("edge fleet %.4f against eight A100s %.4f; simulated %.2f s against %.2f s\n", ae, au,
           num(edge, "simulated_s"), num(uni, "simulated_s"));
    CHECK_MSG(fabs(ae - au) <= 0.01, "edge fleet %.4f, uniform fleet %.4f: more than 1 point apart", ae, au);
    CHECK_MSG(num(edge, "simulated_s") > num(uni, "simulated_s"), "the edge fleet was not slower in simulated time");
    const cJSON *r1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(uni, "rounds"), 0), *p;
    double lo = 1e9, hi = 0; /* the slowest client's upload is one of these */
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(r1, "participants")) {
        double u = num(p, "bytes_up") / (10000e6 / 8) + 0.001;
        lo = u < lo ? u : lo, hi = u > hi ? u : hi;
    }
    const cJSON *s1 = cJSON_GetObjectItemCaseSensitive(r1, "simulated");
    double su = num(s1, "upload_s");
    CHECK_MSG(lo > 0.001 && su >= lo - 1e-12 && su <= hi + 1e-12, "simulated upload %.9g s, by hand %.9g .. %.9g s", su,
              lo, hi);
    cJSON_Delete(edge);
    cJSON_Delete(uni);
}

/* 8: a client killed as round 2 opens and started again 1 s later (the
 * scenario's "crashes") rejoins, takes part in round 2, and the run ends
 * at the model of the same run without the crash, byte for byte. */
static void check_crash_restart(const char *sim) {
    const char *json = "{\"name\": \"%s\", \"model\": \"mlp\", \"clients\": 4, \"rounds\": 4, \"partition\": \"iid\", "
                       "\"codec\": \"int8\", \"seed\": 2%s}";
    char a_json[400], b_json[400];
    snprintf(a_json, sizeof a_json, json, "calm", "");
    snprintf(b_json, sizeof b_json, json, "crash", ", \"crashes\": {\"client-3\": \"2:1\"}");
    cJSON *a = run_sim(sim, "calm", a_json), *b = run_sim(sim, "crash", b_json);
    const char *sa = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "final_model_sha256"));
    const char *sb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "final_model_sha256"));
    CHECK_MSG(sa && sb && strlen(sa) == 64 && !strcmp(sa, sb), "with a crash and restart: %s, without: %s",
              sb ? sb : "?", sa ? sa : "?");
    const cJSON *r2 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(b, "rounds"), 1), *p;
    int back = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(r2, "participants"))
        back += !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name")), "client-3") &&
                !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "status")), "ok");
    CHECK_MSG(back == 1, "the restarted client-3 did not take part in round 2");
    char log[400], err[HFL_ERR_LEN];
    snprintf(log, sizeof log, "%s/crash.log", harness_tmpdir());
    char *out = hfl_read_file(log, NULL, err);
    CHECK_MSG(out && strstr(out, "client 3 killed as round 2 opened") && strstr(out, "client 3 started again"),
              "hfl-sim did not say what it did to client 3");
    free(out);
    printf("a client killed in round 2 and started again: the same model, %.16s...\n", sa ? sa : "?");
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* The declined clients of every round, as "r:name r:name ..." (report order). */
static void declined_of(const cJSON *rep, char *out, size_t cap) {
    const cJSON *rd, *p;
    size_t n = 0;
    out[0] = 0;
    cJSON_ArrayForEach(rd, cJSON_GetObjectItemCaseSensitive(rep, "rounds"))
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(rd, "participants"))
            if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "status")), "declined") && n + 40 < cap)
                n += (size_t)snprintf(out + n, cap - n, "%g:%s ", num(rd, "round"),
                                      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name")));
}

/* 9: 30% dropout: rounds close without waiting out their 60 s deadline (the
 * decliners say so), are priced at that deadline in simulated time (a real
 * dropout is silent), and two runs decline the same rounds and end at the
 * same model. */
static void check_dropout(const char *sim) {
    const char *json = "{\"name\": \"%s\", \"model\": \"mlp\", \"clients\": 6, \"rounds\": 4, \"partition\": \"iid\", "
                       "\"codec\": \"int8\", \"seed\": 2, \"dropout\": 0.3, \"deadline_s\": 60, \"min_quorum\": 1, "
                       "\"profiles\": {\"t4-16g\": 6}, \"profile_library\": \"%s/scenarios/profiles.json\"}";
    char a_json[600], b_json[600], da[800], db[800];
    snprintf(a_json, sizeof a_json, json, "drop-a", getenv("HFL_SOURCE_ROOT"));
    snprintf(b_json, sizeof b_json, json, "drop-b", getenv("HFL_SOURCE_ROOT"));
    cJSON *a = run_sim(sim, "drop-a", a_json), *b = run_sim(sim, "drop-b", b_json);
    declined_of(a, da, sizeof da);
    declined_of(b, db, sizeof db);
    printf("declined: %s\n", da);
    CHECK_MSG(da[0] && !strcmp(da, db), "declined rounds differ: [%s] and [%s]", da, db);
    const char *sa = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "final_model_sha256"));
    const char *sb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "final_model_sha256"));
    CHECK_MSG(sa && sb && !strcmp(sa, sb), "with the same dropouts, models %s and %s", sa ? sa : "?", sb ? sb : "?");
    const cJSON *rd;
    cJSON_ArrayForEach(rd, cJSON_GetObjectItemCaseSensitive(a, "rounds")) {
        CHECK_MSG(num(rd, "wall_s") < 30, "round %g waited %.1f s for its decliners", num(rd, "round"), num(rd, "wall_s"));
        const cJSON *sim_t = cJSON_GetObjectItemCaseSensitive(rd, "simulated");
        CHECK_MSG((num(rd, "declined") > 0) == (num(sim_t, "wall_s") == 60), "round %g: %g declined, %g s simulated",
                  num(rd, "round"), num(rd, "declined"), num(sim_t, "wall_s"));
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* The a100-80g profile's simulated time for a task, by hand from its
 * datasheet figures (scenarios/profiles.json): 10 Gbit/s both ways, 1 ms,
 * 19.5 TFLOPS fp32 at 0.3 utilisation; mlp's forward pass is 398,410 FLOPs
 * (scenarios/test_price.c), times compute_scale. */
static double a100_task_s(double down_bytes, double up_bytes, double trained, double compute_scale) {
    return down_bytes / (10000e6 / 8) + 0.001 + trained * 3 * 398410.0 * compute_scale / (19.5e12 * 0.3) +
           up_bytes / (10000e6 / 8) + 0.001;
}

/* 10: "virtual_time" with compute_scale 1024 (deadline 30 s): with fixed
 * epochs the laptop's 20,000 samples take ~255 simulated seconds, so every
 * round it misses the deadline and is left out, the round is priced at 30 s
 * though the host ran it in a few; the A100's sim_s is its price by hand.
 * With capacity-aware work the laptop trains a few steps and makes it. */
static void check_virtual_time(const char *sim) {
    const char *json = "{\"name\": \"%s\", \"model\": \"mlp\", \"clients\": 3, \"rounds\": 2, \"partition\": \"iid\", "
                       "\"codec\": \"int8\", \"seed\": 3, \"batch\": 64, \"deadline_s\": 30, \"min_quorum\": 1, "
                       "\"compute_scale\": 1024, \"virtual_time\": true, \"local_work\": \"%s\", "
                       "\"profiles\": {\"laptop-cpu\": 1, \"a100-80g\": 1, \"t4-16g\": 1}, "
                       "\"profile_library\": \"%s/scenarios/profiles.json\"}";
    for (int cap = 0; cap <= 1; cap++) {
        char js[800], name[16];
        snprintf(name, sizeof name, "vt-%s", cap ? "capacity" : "epochs");
        snprintf(js, sizeof js, json, name, cap ? "capacity" : "epochs", getenv("HFL_SOURCE_ROOT"));
        cJSON *rep = run_sim(sim, name, js);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep, "virtual_time")));
        const cJSON *rd, *p;
        int priced = 0;
        cJSON_ArrayForEach(rd, cJSON_GetObjectItemCaseSensitive(rep, "rounds")) {
            double swall = num(cJSON_GetObjectItemCaseSensitive(rd, "simulated"), "wall_s"), slowest = 0;
            int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(rd, "participants"));
            cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(rd, "participants")) {
                const char *who = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name"));
                const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "status"));
                double s = num(p, "sim_s");
                CHECK_MSG(s > 0, "%s %s: no sim_s", name, who);
                if (!strcmp(who, "client-0")) /* the laptop */
                    CHECK_MSG(!strcmp(st, cap ? "ok" : "missed_deadline") && (cap ? s <= 30 : s > 200),
                              "%s round %g: the laptop %s at %.1f simulated s", name, num(rd, "round"), st, s);
                else
                    CHECK_MSG(!strcmp(st, "ok") && s <= 30, "%s %s: %s at %.1f s", name, who, st, s);
                if (!strcmp(st, "ok") && s > slowest) slowest = s;
                if (!strcmp(who, "client-1")) { /* the A100 */
                    double want = a100_task_s(num(rd, "bytes_down") / n, num(p, "bytes_up"), num(p, "trained_samples"), 1024);
                    CHECK_MSG(fabs(s - want) <= 1e-5 * want, "%s: the A100's sim_s %.9g, by hand %.9g", name, s, want);
                    priced++;
                }
            }
            /* sim_s prices the update's payload, the report its whole message:
             * a few hundred bytes of frame apart (0.3 ms on the laptop's 10 Mbit/s) */
            CHECK_MSG(fabs(swall - (cap ? slowest : 30)) < 1e-3, "%s round %g: simulated wall %.6g s (slowest %.6g)", name,
                      num(rd, "round"), swall, slowest);
            CHECK_MSG(num(rd, "wall_s") < 25, "%s round %g waited %.1f real s", name, num(rd, "round"), num(rd, "wall_s"));
        }
        CHECK_MSG(priced == 2, "%s: the A100 priced in %d rounds of 2", name, priced);
        printf("%s: simulated %.2f s, accuracy %.4f\n", name, num(rep, "simulated_s"), num(rep, "final_test_acc"));
        cJSON_Delete(rep);
    }
}

static const char *sim_exe; /* argv[1]: hfl-sim */

static void case_three(void) {
    cJSON *r = run_sim(sim_exe, "three",
                       "{\"name\": \"three\", \"model\": \"mlp\", \"clients\": 3, \"rounds\": 2,"
                       " \"partition\": \"iid\", \"codec\": \"int8\", \"batch\": 32, \"lr\": 0.05, \"seed\": 7}");
    check_tls_fedavg(r);
    cJSON_Delete(r);
    /* the breach check runs on the device the three-client run recorded */
    char device[256];
    recorded_device("three", device, sizeof device);
    check_breach(sim_exe, device);
}

static void case_accumulating_fleet(void) { check_accumulating_fleet(sim_exe); }
static void case_reproducible_draw(void) { check_reproducible_draw(sim_exe); }
static void case_edge_fleet(void) { check_edge_fleet(sim_exe); }
static void case_crash_restart(void) { check_crash_restart(sim_exe); }
static void case_dropout(void) { check_dropout(sim_exe); }
static void case_virtual_time(void) { check_virtual_time(sim_exe); }
static void case_mixed(void) {
    cJSON *r = run_sim(sim_exe, "mixed",
                "{\"name\": \"mixed\", \"model\": \"mlp\", \"clients\": 3, \"rounds\": 3, \"partition\": \"iid\","
                " \"codec\": \"int8\", \"downlink\": \"fp16\", \"downlink_delta\": true,"
                " \"client_codecs\": {\"client-1\": \"topk:0.01\"}, \"client_devices\": {\"client-2\": \"cpu\"},"
                " \"seed\": 7}");
    check_downlink_and_client_codec(r);
    check_devices(r);
    cJSON_Delete(r);
}

static void case_json_model(void) {
    const char *root = getenv("HFL_SOURCE_ROOT");
    REQUIRE_MSG(root, "HFL_SOURCE_ROOT is not set");
    char json[1400];
    snprintf(json, sizeof json,
             "{\"name\": \"spec\", \"model\": \"%s/scenarios/models/small-cnn.json\", \"clients\": 2,"
             " \"rounds\": 1, \"partition\": \"iid\", \"codec\": \"int8\", \"seed\": 7}", root);
    cJSON *r = run_sim(sim_exe, "spec", json);
    check_json_model(r);
    cJSON_Delete(r);
}

static const check_case cases[] = {
    {"three", case_three},
    {"accumulating_fleet", case_accumulating_fleet},
    {"reproducible_draw", case_reproducible_draw},
    {"edge_fleet", case_edge_fleet},
    {"crash_restart", case_crash_restart},
    {"dropout", case_dropout},
    {"virtual_time", case_virtual_time},
    {"mixed", case_mixed},
    {"json_model", case_json_model},
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_sim HFL_SIM\n");
        return 2;
    }
    if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: Fashion-MNIST not installed\n");
        return 77;
    }
    check_on_stop(harness_stop);
    sim_exe = argv[1];
    /* argv holds hfl-sim's path, not case names: argc 0, cases from HFL_TEST_CASE */
    int rc = check_run("test_sim", cases, CHECK_CASES(cases), 0, argv);
    harness_cleanup();
    return rc;
}
