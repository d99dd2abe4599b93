/* test_resume.c: a coordinator killed with SIGKILL continues its run from
 * --state-dir, and the run ends with the same model, byte for byte, as one
 * that was never interrupted (docs/architecture.md, Crash-safe state).
 *
 * Run A: a coordinator and three hfl-client processes, 4 rounds, every
 * client drawn in every round, FedAvgM (server momentum: state to keep): its final_model_sha256 is the oracle (the
 * aggregate is exact and order-independent, so the sum cannot depend on
 * timing). Run B, same seed: the coordinator kills itself (HFL_TEST_CRASH,
 * as kill -9 would) at every crash point it has: at the first update of
 * round 2 (mid-round), before the model moves in round 3
 * (mid-aggregation), between the two renames of round 3's state (the
 * current state gone, .prev and .new on disk), with round 4's state
 * written but not yet renamed into place, and with round 4 (the last)
 * saved but not yet evaluated; each time it is started again
 * with the same arguments and state dir. Client-1 kills itself in round 3
 * after saving its residual and update but before sending it, and is
 * started again. The clients of run B are never restarted for the
 * coordinator's crashes: they rejoin by themselves. Run B must finish all 4
 * rounds, once each, with run A's final_model_sha256 and every round's
 * test accuracy (the last one evaluated again from the saved model), and
 * count 4 restarts: each state counts the restarts before it was saved, and
 * the restart that died between the renames of its first round's state
 * saved none that survived (the next one continued from .prev).
 * Any other process that fails stops the test at once, naming it.
 * Then a damaged state file with .prev kept continues from .prev, saying so,
 * and without .prev is refused at start with a one-line error. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "proto/pki.h"
#include "tests/integration/harness.h"
#include "util/util.h"

#define N_CLIENTS 3
#define ROUNDS 4

static const char *coord_exe, *client_exe;
static char pki[300], ca[320], cpem[320];

/* The coordinator's arguments for run `name`; listen is "tls+tcp://127.0.0.1:0" or the URL to keep. */
static void coord_args(const char *name, const char *listen, char *state, char *report, char **extra) {
    const char *dir = harness_tmpdir();
    snprintf(state, 400, "%s/%s-state", dir, name);
    snprintf(report, 400, "%s/%s-report.json", dir, name);
    char *const a[] = {"--listen", (char *)listen, "--ca", ca, "--cert", cpem, "--rounds", "4", "--clients-per-round",
                       "3", "--deadline", "120", "--linger", "5", "--report", report, "--state-dir", state,
                       "--seed", "5", "--codec", "int8", "--server-opt", "fedavgm", NULL};
    memcpy(extra, a, sizeof a);
}

static pid_t start_client(const char *name, int i, const char *url, const char *crash) {
    const char *dir = harness_tmpdir();
    char pem[320], log[400], idx[8], state[400];
    snprintf(pem, sizeof pem, "%s/client-%d.pem", pki, i);
    snprintf(log, sizeof log, "%s/%s-client-%d-%.0f.log", dir, name, i, hfl_now() * 1000);
    snprintf(state, sizeof state, "%s/%s-clients", dir, name);
    snprintf(idx, sizeof idx, "%d", i);
    char *argv[] = {(char *)client_exe, "--coordinator", (char *)url, "--ca", ca, "--cert", pem, "--client-index", idx,
                    "--num-clients", "30", "--precision", "fp32", "--state-dir", state, NULL};
    if (crash) setenv("HFL_TEST_CRASH", crash, 1);
    pid_t pid = harness_spawn(argv, log);
    unsetenv("HFL_TEST_CRASH");
    return pid;
}

static pid_t start_coord(const char *name, const char *listen, const char *crash, char *url) {
    char state[400], report[400], *extra[32];
    coord_args(name, listen, state, report, extra);
    if (crash) setenv("HFL_TEST_CRASH", crash, 1);
    pid_t pid = harness_start_coordinator(coord_exe, extra, url, 300);
    unsetenv("HFL_TEST_CRASH");
    return pid;
}

/* Runs one fleet to the end, restarting the coordinator after each of its
 * crashes (the next crash point armed each time) and client-1 after its own.
 * Returns the report (parsed). */
static cJSON *run_fleet(const char *name, const char *const *coord_crash, int n_crash, const char *client_crash) {
    char url[300], report[400], state[400], *extra[32];
    int next = 0;
    pid_t coord = start_coord(name, "tls+tcp://127.0.0.1:0", n_crash ? coord_crash[next++] : NULL, url);
    REQUIRE_MSG(coord > 0, "%s: coordinator did not start", name);
    pid_t clients[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) clients[i] = start_client(name, i, url, i == 1 ? client_crash : NULL);
    int client_restarts = 0, armed = n_crash > 0;
    double t0 = hfl_now();
    for (;;) {
        REQUIRE_MSG(hfl_now() - t0 < 400, "%s: the run did not finish in 400 s", name);
        int st = harness_poll(coord);
        if (st == 128 + SIGKILL && armed) {
            char again[300];
            printf("%s: coordinator killed; starting it again%s%s\n", name, next < n_crash ? " armed for " : "",
                   next < n_crash ? coord_crash[next] : "");
            armed = next < n_crash;
            coord = start_coord(name, url, armed ? coord_crash[next] : NULL, again);
            next++;
            REQUIRE_MSG(coord > 0 && !strcmp(again, url), "%s: coordinator did not start again on %s", name, url);
        } else if (st > 0) {
            harness_fail(coord, st, name);
        } else if (st == 0) {
            break;
        }
        for (int i = 0; i < N_CLIENTS; i++) {
            if (!clients[i]) continue;
            int cs = harness_poll(clients[i]);
            if (cs == 128 + SIGKILL && i == 1 && client_crash && client_restarts == 0) {
                printf("%s: client-%d killed; starting it again\n", name, i);
                clients[i] = start_client(name, i, url, NULL);
                client_restarts++;
            } else if (cs > 0) {
                harness_fail(clients[i], cs, name); /* the run cannot finish: stop now */
            } else if (cs == 0) {
                clients[i] = 0;
            }
        }
        hfl_sleep_ms(20);
    }
    for (int i = 0; i < N_CLIENTS; i++)
        if (clients[i]) CHECK_MSG(harness_wait(clients[i], 60) == 0, "%s: client-%d failed", name, i);
    CHECK_MSG(next >= n_crash, "%s: only %d of %d coordinator crashes happened", name, next, n_crash);
    CHECK_MSG(client_restarts == (client_crash != NULL), "%s: client-1 restarted %d times", name, client_restarts);
    coord_args(name, url, state, report, extra);
    size_t len;
    char err[HFL_ERR_LEN], *text = hfl_read_file(report, &len, err);
    REQUIRE_MSG(text, "%s", err);
    cJSON *r = cJSON_Parse(text);
    free(text);
    REQUIRE_MSG(cJSON_IsObject(r), "%s: report does not parse", name);
    return r;
}

static const char *report_str(const cJSON *r, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Every round once, in order, aggregated. */
static void check_rounds(const char *name, const cJSON *r) {
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(r, "rounds");
    CHECK_MSG(cJSON_GetArraySize(rounds) == ROUNDS, "%s: %d rounds in the report", name, cJSON_GetArraySize(rounds));
    for (int i = 0; i < cJSON_GetArraySize(rounds); i++) {
        const cJSON *o = cJSON_GetArrayItem(rounds, i);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "round");
        CHECK_MSG(cJSON_IsNumber(n) && n->valueint == i + 1 && !strcmp(report_str(o, "status"), "ok"),
                  "%s: report entry %d is round %d, %s", name, i, cJSON_IsNumber(n) ? n->valueint : -1,
                  report_str(o, "status"));
    }
}

int main(int argc, char **argv) {
    const char *dir = harness_begin(argc, "test_resume");
    check_on_stop(harness_stop); /* this file's REQUIREs too (check.h's hook is per file) */
    coord_exe = argv[1], client_exe = argv[2];
    char err[HFL_ERR_LEN];
    snprintf(pki, sizeof pki, "%s/pki", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", pki);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", pki);
    REQUIRE_MSG(hfl_pki_create(pki, N_CLIENTS, "localhost", 1, err) == 0, "%s", err);

    cJSON *a = run_fleet("a", NULL, 0, NULL);
    check_rounds("a", a);
    const char *crashes[] = {"update:2", "aggregate:3", "state-rename:3", "state-write:4", "evaluate:4"};
    cJSON *b = run_fleet("b", crashes, 5, "client-trained:3");
    check_rounds("b", b);
    const char *sha_a = report_str(a, "final_model_sha256"), *sha_b = report_str(b, "final_model_sha256");
    printf("uninterrupted: %s\nkilled 5 times: %s\n", sha_a, sha_b);
    CHECK_MSG(strlen(sha_a) == 64 && !strcmp(sha_a, sha_b), "final models differ: %s vs %s", sha_a, sha_b);
    const cJSON *restarts = cJSON_GetObjectItemCaseSensitive(b, "restarts");
    CHECK_MSG(cJSON_IsNumber(restarts) && restarts->valueint == 4, "run b counts %d restarts",
              cJSON_IsNumber(restarts) ? restarts->valueint : -1);
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "rounds"), *rb = cJSON_GetObjectItemCaseSensitive(b, "rounds");
    for (int i = 0; i < ROUNDS; i++)
        CHECK_MSG(!strcmp(report_str(cJSON_GetArrayItem(ra, i), "model_sha256"),
                          report_str(cJSON_GetArrayItem(rb, i), "model_sha256")),
                  "round %d's model differs", i + 1);
    for (int i = 0; i < ROUNDS; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ra, i), "test_acc");
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rb, i), "test_acc");
        CHECK_MSG(cJSON_IsNumber(x) && cJSON_IsNumber(y) && x->valuedouble == y->valuedouble,
                  "round %d's test accuracy: %g vs %g", i + 1, cJSON_GetNumberValue(x), cJSON_GetNumberValue(y));
    }
    cJSON_Delete(a);
    cJSON_Delete(b);

    /* a damaged state: with .prev kept, the run continues from .prev */
    char state[400], report[400], *extra[32], path[500], prev[500], url[300], log[400];
    coord_args("b", "tls+tcp://127.0.0.1:0", state, report, extra);
    snprintf(path, sizeof path, "%s/coordinator.state", state);
    snprintf(prev, sizeof prev, "%s/coordinator.state.prev", state);
    snprintf(log, sizeof log, "%s/coordinator.log", dir);
    size_t len;
    char *bytes = hfl_read_file(path, &len, err);
    REQUIRE_MSG(bytes && len > 100, "%s", err);
    bytes[len - 1] ^= 1;
    REQUIRE_MSG(hfl_write_file_atomic(path, bytes, len, err) == 0, "%s", err);
    free(bytes);
    pid_t from_prev = harness_start_coordinator(coord_exe, extra, url, sizeof url);
    CHECK_MSG(from_prev > 0, "a coordinator did not start from .prev beside a damaged state");
    if (from_prev > 0) {
        kill(from_prev, SIGKILL);
        harness_wait(from_prev, 30);
    }
    char *out = hfl_read_file(log, &len, err);
    CHECK_MSG(out && strstr(out, "coordinator.state is damaged (checksum); continuing from the previous state") &&
                  strstr(out, "after round 3"),
              "coordinator said: %s", out ? out : err);
    free(out);
    /* without .prev it is refused */
    unlink(prev);
    pid_t bad = harness_start_coordinator(coord_exe, extra, url, sizeof url);
    CHECK_MSG(bad < 0, "a coordinator started from a damaged state");
    out = hfl_read_file(log, &len, err);
    CHECK_MSG(out && strstr(out, "damaged (checksum)"), "coordinator said: %s", out ? out : err);
    free(out);
    harness_cleanup();
    return check_exit_code("test_resume");
}
