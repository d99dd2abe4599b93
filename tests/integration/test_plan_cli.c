/* test_plan_cli.c: hfl-client --plan --verify --json, as a user runs it.
 *
 * For mlp and cnn: the JSON has the documented keys for every candidate,
 * exactly one candidate is chosen and it fits. The first --verify run has no
 * learned overhead; it records its measurements in the state directory. The
 * second run adds the overhead fitted from them, and then every candidate's
 * predicted peak must be within max(1% of measured, 256 KiB) of the peak
 * RSS growth measured over a real training step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tests/integration/harness.h"
#include "util/util.h"

static cJSON *plan_json(const char *client, const char *model, const char *state) {
    char out[400], log[400], err[HFL_ERR_LEN];
    snprintf(out, sizeof out, "%s/plan-%s.json", harness_tmpdir(), model);
    char *argv[] = {(char *)client, "--plan", "--model", (char *)model, "--verify", "--json",
                    "--state-dir", (char *)state, NULL};
    int rc = harness_wait(harness_spawn(argv, out), 600);
    CHECK(rc == 0, "hfl-client --plan --model %s exited %d", model, rc);
    (void)log;
    char *text = hfl_read_file(out, NULL, err);
    CHECK(text, "%s", err);
    cJSON *j = cJSON_Parse(text);
    CHECK(j, "--json output is not JSON: %.200s", text);
    free(text);
    return j;
}

static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)); }

static void check_model(const char *client, const char *model) {
    const char *state = harness_tmpdir();
    for (int run = 0; run < 2; run++) {
        cJSON *j = plan_json(client, model, state);
        const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "candidates"), *r;
        int n = 0, chosen = 0;
        double worst = 0;
        char worst_at[200] = "";
        cJSON_ArrayForEach(r, rows) {
            static const char *const keys[] = {"batch", "precision", "checkpoint", "predicted_peak_bytes",
                                               "measured_peak_bytes", "fits", "chosen"};
            for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
                CHECK(cJSON_GetObjectItemCaseSensitive(r, keys[k]), "%s: candidate without '%s'", model, keys[k]);
            const cJSON *ch = cJSON_GetObjectItemCaseSensitive(r, "chosen");
            if (cJSON_IsTrue(ch)) {
                chosen++;
                CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "fits")), "%s: chose a candidate that does not fit", model);
            }
            double pred = num(r, "predicted_peak_bytes"), meas = num(r, "measured_peak_bytes");
            CHECK(meas > 0, "%s: a candidate was not measured", model);
            double tol = fmax(0.01 * meas, 256.0 * 1024), e = fabs(pred - meas);
            if (e / tol > worst) {
                worst = e / tol;
                snprintf(worst_at, sizeof worst_at, "batch %g %s %s: predicted %.0f, measured %.0f", num(r, "batch"),
                         cJSON_GetObjectItemCaseSensitive(r, "precision")->valuestring,
                         cJSON_GetObjectItemCaseSensitive(r, "checkpoint")->valuestring, pred, meas);
            }
            if (run == 1)
                CHECK(e <= tol, "%s batch %g %s: predicted %.0f, measured %.0f (off by %.0f, allowed %.0f)", model,
                      num(r, "batch"), cJSON_GetObjectItemCaseSensitive(r, "checkpoint")->valuestring, pred, meas, e, tol);
            n++;
        }
        CHECK(n >= 10, "%s: only %d candidates", model, n);
        CHECK(chosen == 1, "%s: %d candidates chosen", model, chosen);
        printf("%s run %d: %d candidates, %g overhead records, worst error %.2f of the allowance (%s)\n", model,
               run + 1, n, num(j, "overhead_records"), worst, worst_at);
        cJSON_Delete(j);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_plan_cli HFL_CLIENT\n");
        return 2;
    }
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) {
        printf("SKIP: /proc/self/clear_refs is not writable here, so peaks cannot be measured\n");
        return 77;
    }
    fclose(f);
    check_model(argv[1], "mlp");
    check_model(argv[1], "cnn");
    harness_cleanup();
    printf("ok\n");
    return 0;
}
