/* test_sim.c: a real federated run through hfl-sim: 3 clients x 2 rounds,
 * each a separate process, over mutual TLS on loopback. Checks the exit
 * status and what the report says: every round aggregated all 3 updates,
 * bytes moved both ways match the int8 codec's size, and the model learned. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/integration/harness.h"
#include "util/util.h"

static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)); }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_sim HFL_SIM\n");
        return 2;
    }
    if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: Fashion-MNIST not installed\n");
        return 77;
    }
    const char *dir = harness_tmpdir();
    char scen[300], report[300], out[300], log[300], err[HFL_ERR_LEN];
    snprintf(scen, sizeof scen, "%s/three.json", dir);
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(log, sizeof log, "%s/sim.log", dir);
    const char *json = "{\"name\": \"three\", \"model\": \"mlp\", \"clients\": 3, \"rounds\": 2,"
                       " \"partition\": \"iid\", \"codec\": \"int8\", \"batch\": 32, \"lr\": 0.05, \"seed\": 7}";
    CHECK(hfl_write_file_atomic(scen, json, strlen(json), err) == 0, "%s", err);
    char *argv_sim[] = {argv[1], scen, "--out", out, "--report", report, NULL};
    int rc = harness_wait(harness_spawn(argv_sim, log), 300);
    char *text = hfl_read_file(log, NULL, err);
    if (text) printf("%s", text);
    free(text);
    CHECK(rc == 0, "hfl-sim exited with %d", rc);

    size_t len;
    text = hfl_read_file(report, &len, err);
    CHECK(text != NULL, "%s", err);
    cJSON *r = cJSON_Parse(text);
    free(text);
    CHECK(r != NULL, "report is not JSON");
    const cJSON *transport = cJSON_GetObjectItemCaseSensitive(r, "transport");
    CHECK(cJSON_IsString(transport) && !strcmp(transport->valuestring, "tls+tcp"), "transport is not tls+tcp");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "complete")), "run not complete");
    CHECK(num(r, "params") == 199210, "params %g", num(r, "params"));
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(r, "rounds");
    CHECK(cJSON_GetArraySize(rounds) == 2, "%d rounds in the report", cJSON_GetArraySize(rounds));
    /* int8 at block 256: 12-byte header + 779 blocks of (4-byte scale + values) = 200,198 bytes */
    double payload = 12 + 779 * 4 + 199210;
    for (int i = 0; i < 2; i++) {
        const cJSON *rd = cJSON_GetArrayItem(rounds, i);
        CHECK(num(rd, "round") == i + 1, "round %g", num(rd, "round"));
        CHECK(num(rd, "clients") == 3, "round %d aggregated %g clients", i + 1, num(rd, "clients"));
        CHECK(num(rd, "bytes_up") > 3 * payload && num(rd, "bytes_up") < 3 * (payload + 2048),
              "bytes_up %g for 3 int8 updates of %g bytes", num(rd, "bytes_up"), payload);
        CHECK(num(rd, "bytes_down") > 3 * 199210 * 4.0, "bytes_down %g", num(rd, "bytes_down"));
    }
    double acc1 = num(cJSON_GetArrayItem(rounds, 0), "test_acc"), acc = num(r, "final_test_acc");
    printf("test accuracy after round 1: %.4f, after round 2: %.4f\n", acc1, acc);
    CHECK(acc1 > 0.5, "round 1 accuracy %.4f: the model did not learn", acc1);
    CHECK(acc > 0.75, "final accuracy %.4f below 0.75", acc);
    const cJSON *clients = cJSON_GetObjectItemCaseSensitive(r, "clients");
    CHECK(cJSON_GetArraySize(clients) == 3, "%d clients registered", cJSON_GetArraySize(clients));
    double samples = 0;
    for (int i = 0; i < 3; i++) samples += num(cJSON_GetArrayItem(clients, i), "samples");
    CHECK(samples == 60000, "clients hold %g samples, iid shares should cover 60000", samples);
    cJSON_Delete(r);
    harness_cleanup();
    printf("ok\n");
    return 0;
}
