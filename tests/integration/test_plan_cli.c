/* test_plan_cli.c: hfl-client --plan --verify --json as a user runs it, and
 * the memory predictions checked honestly.
 *
 * 1. Keys and choice: for mlp and cnn the JSON has the documented keys for
 *    every candidate, exactly one candidate is chosen and it fits.
 * 2. Cold start: from an empty state dir (the model's prior) no candidate's
 *    predicted peak is below the peak measured over a real training step.
 * 3. Leave one model out: with only mlp's measurements in a state dir, every
 *    cnn candidate (batches 1..512, every precision and schedule) is
 *    predicted within max(1% of measured, 256 KiB) of cnn's own measurement,
 *    and the reverse. Neither prediction saw a measurement of the model it
 *    predicts, so the check is not circular. The extra outside the arena
 *    is almost all OpenBLAS's GEMM packing buffer, as far as a step's GEMMs
 *    touch it, and the model predicts that footprint from the GEMM calls for
 *    the kernel sets whose blocking it knows (plan/blas_footprint.h:
 *    Haswell, Zen, SkylakeX, Cooperlake). The clients run the set hfl-client
 *    runs on this host by itself (kernels/cpu/blas_core.h), or the
 *    environment's OPENBLAS_CORETYPE; where that set is not modelled, the
 *    Haswell kernels, which any AVX2 CPU runs, so the check means the same
 *    on every x86 host. The worst error must also stay under 64 KiB (it is
 *    ~8-13 KiB; one median extra per class, without the footprint, was up
 *    to ~160 KiB off on Haswell and 2.71 of the allowance on Cooperlake),
 *    except in a sanitized build, whose allocator takes memory of its own
 *    (cnn 351 KiB off, still 0.42 of the allowance).
 * 4. Nothing unplanned: every measured peak is within 1.5 MiB of what the
 *    plan accounts for exactly (arena + batch staging). The rest is the
 *    private memory OpenBLAS and libc take for themselves, 0.15-0.97 MiB here
 *    (docs/benchmarks.md); 1.5 MiB allocated outside the plan during a step
 *    fails this, whatever the overhead model learns.
 * 5. --batch 128 in 30 MiB (cnn's batch 128 needs more): every candidate
 *    steps over 128 rows, as ceil(128/b) micro-batches of b; with
 *    --allow-smaller-batch none accumulates.
 * 6. Rates decided, not sampled: a later run with the same state dir uses
 *    exactly the GEMM rates the first measured (one line in calibration.jsonl).
 * 7. --trial-step from an empty state dir: mlp at batch 64 in 5 MiB trains
 *    one step within the budget; in 1 MiB it is refused up front (exit 1,
 *    one line). bench/memory_sweep.py runs it over 1,000 random draws.
 * 8. Device memory fields on the CPU: --json says context_bytes null,
 *    context_source "none", process_device_bytes null, alloc_granularity 1;
 *    every overhead.jsonl line has process_device_bytes and context_bytes,
 *    both null. A line as a GPU whose NVML works writes it (context_bytes a
 *    number: measured is what the process held beyond that cost) is another
 *    kind of measurement and is not loaded here; a line from before these
 *    keys existed is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/blas.h"
#include "kernels/cpu/blas_core.h"
#include "plan/blas_footprint.h"
#include "tests/integration/harness.h"
#include "util/util.h"

#define UNPLANNED_MAX (1.5 * 1048576)

/* hfl-client --plan --model M --json --state-dir S [extra...] as JSON. */
static cJSON *plan_json_args(const char *client, const char *model, const char *state, const char *tag,
                             char **extra) {
    char out[400], err[HFL_ERR_LEN];
    snprintf(out, sizeof out, "%s/plan-%s-%s.json", harness_tmpdir(), model, tag);
    char *argv[16] = {(char *)client, "--plan", "--model", (char *)model, "--json", "--state-dir", (char *)state};
    for (int i = 0; extra[i] && i < 8; i++) argv[7 + i] = extra[i];
    int rc = harness_wait(harness_spawn(argv, out), 600);
    CHECK_MSG(rc == 0, "hfl-client --plan --model %s exited %d", model, rc);
    char *text = hfl_read_file(out, NULL, err);
    REQUIRE_MSG(text, "%s", err);
    cJSON *j = cJSON_Parse(text);
    REQUIRE_MSG(j, "--json output is not JSON: %.200s", text);
    free(text);
    return j;
}

static cJSON *plan_json(const char *client, const char *model, const char *state, int verify) {
    char *extra[] = {verify ? "--verify" : NULL, NULL};
    return plan_json_args(client, model, state, verify ? "verify" : "plan", extra);
}

static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

/* 1, 2 and 4 on a fresh --verify run; returns it (measured peaks for 3). */
static cJSON *verify_cold(const char *client, const char *model, const char *state) {
    cJSON *j = plan_json(client, model, state, 1);
    CHECK_MSG(!strcmp(str(j, "overhead_source"), "prior"), "%s: a fresh state dir predicted from '%s'", model,
              str(j, "overhead_source"));
    const cJSON *r;
    int n = 0, chosen = 0, under = 0;
    double worst_unplanned = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(j, "candidates")) {
        static const char *const keys[] = {"batch", "precision", "checkpoint", "arena_bytes", "staging_bytes",
                                           "predicted_peak_bytes", "measured_peak_bytes", "fits", "chosen"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            CHECK_MSG(cJSON_GetObjectItemCaseSensitive(r, keys[k]), "%s: candidate without '%s'", model, keys[k]);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "chosen"))) {
            chosen++;
            CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "fits")), "%s: chose a candidate that does not fit", model);
        }
        double pred = num(r, "predicted_peak_bytes"), meas = num(r, "measured_peak_bytes");
        double planned = num(r, "arena_bytes") + num(r, "staging_bytes");
        CHECK_MSG(meas > 0, "%s: a candidate was not measured", model);
        if (pred < meas) {
            under++;
            fprintf(stderr, "%s batch %g %s %s: cold prediction %.0f under the measured %.0f\n", model,
                    num(r, "batch"), str(r, "precision"), str(r, "checkpoint"), pred, meas);
        }
        if (meas - planned > worst_unplanned) worst_unplanned = meas - planned;
        CHECK_MSG(meas - planned <= UNPLANNED_MAX, "%s batch %g %s %s: measured %.0f is %.2f MiB over arena + staging",
                  model, num(r, "batch"), str(r, "precision"), str(r, "checkpoint"), meas, (meas - planned) / 1048576.0);
        n++;
    }
    CHECK_MSG(n >= 10, "%s: only %d candidates", model, n);
    CHECK_MSG(chosen == 1, "%s: %d candidates chosen", model, chosen);
    CHECK_MSG(under == 0, "%s: %d candidates under-predicted from a cold start", model, under);
    printf("%s cold: %d candidates, none under-predicted; measured - (arena + staging) at most %.2f MiB\n", model, n,
           worst_unplanned / 1048576.0);
    return j;
}

/* 3: predictions for `model` from a state dir holding only the other
 * model's measurements, against `measured` (model's own --verify run). */
static void check_left_out(const char *client, const char *model, const char *other_state, const cJSON *measured) {
    cJSON *j = plan_json(client, model, other_state, 0);
    CHECK_MSG(!strcmp(str(j, "overhead_source"), "class"), "%s: predicted from '%s', not the other model's class",
              model, str(j, "overhead_source"));
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "candidates")->child;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(measured, "candidates")->child;
    double worst = 0, worst_abs = 0;
    char worst_at[200] = "";
    int n = 0;
    for (; p && m; p = p->next, m = m->next, n++) {
        CHECK_MSG(num(p, "batch") == num(m, "batch") && !strcmp(str(p, "precision"), str(m, "precision")) &&
                      !strcmp(str(p, "checkpoint"), str(m, "checkpoint")) && num(p, "arena_bytes") == num(m, "arena_bytes"),
                  "%s: the candidate tables differ at row %d", model, n);
        double pred = num(p, "predicted_peak_bytes"), meas = num(m, "measured_peak_bytes");
        double tol = fmax(0.01 * meas, 256.0 * 1024), e = fabs(pred - meas);
        worst_abs = fmax(worst_abs, e);
        if (e / tol > worst) {
            worst = e / tol;
            snprintf(worst_at, sizeof worst_at, "batch %g %s %s: predicted %.0f, measured %.0f", num(p, "batch"),
                     str(p, "precision"), str(p, "checkpoint"), pred, meas);
        }
        CHECK_MSG(e <= tol, "%s batch %g %s %s: predicted %.0f from the other model, measured %.0f (off by %.0f, allowed %.0f)",
                  model, num(p, "batch"), str(p, "precision"), str(p, "checkpoint"), pred, meas, e, tol);
    }
    CHECK_MSG(!p && !m, "%s: the candidate tables differ in length", model);
    /* Where the kernels' blocking is modelled, each configuration's BLAS
     * footprint is predicted from its GEMM shapes (plan/blas_footprint.h)
     * and what is left is a few KiB: one median extra per class was up to
     * ~160 KiB off here, which this bound fails. */
    hfl_blas_blocking b;
    if (getenv("HFL_SANITIZED")) /* ASan's allocator (redzones, quarantine) is memory no plan models */
        printf("%s: sanitized build: the 64 KiB bound is not checked (worst error %.0f bytes)\n", model, worst_abs);
    else if (hfl_blas_blocking_for(getenv("OPENBLAS_CORETYPE"), &b) == 0)
        CHECK_MSG(worst_abs <= 64.0 * 1024, "%s: worst error %.0f bytes from the other model, above 64 KiB with "
                  "the %s blocking modelled", model, worst_abs, getenv("OPENBLAS_CORETYPE"));
    printf("%s predicted from the other model only: %d candidates, worst error %.2f of the allowance (%s)\n", model,
           n, worst, worst_at);
    cJSON_Delete(j);
}

/* 5. --batch N: a run's batch that does not fit is planned as micro-batches
 * accumulating to it (every candidate steps over N rows); with
 * --allow-smaller-batch as a smaller real batch instead. */
static void check_accumulation(const char *client, const char *state) {
    char *acc[] = {"--batch", "128", "--memory-budget", "30M", NULL};
    char *smaller[] = {"--batch", "128", "--memory-budget", "30M", "--allow-smaller-batch", NULL};
    for (int mode = 0; mode < 2; mode++) {
        cJSON *j = plan_json_args(client, "cnn", state, mode ? "smaller" : "accum", mode ? smaller : acc);
        const cJSON *r, *chosen = NULL;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(j, "candidates")) {
            int b = (int)num(r, "batch"), k = (int)num(r, "accumulation_steps");
            if (mode)
                CHECK_MSG(k == 1 && num(r, "step_batch") == b, "smaller batches: batch %d with %d steps", b, k);
            else
                CHECK_MSG(num(r, "step_batch") == 128 && k == (128 + b - 1) / b, "batch %d x %d does not step over 128", b, k);
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "chosen"))) chosen = r;
        }
        if (CHECK_MSG(chosen, "nothing chosen in 30M")) {
            CHECK_MSG(num(chosen, "batch") < 128, "batch 128 fits 30M: the check proves nothing");
            printf("batch 128 in 30 MiB%s: chose batch %g x %g steps\n", mode ? ", smaller allowed" : "",
                   num(chosen, "batch"), num(chosen, "accumulation_steps"));
        }
        cJSON_Delete(j);
    }
}

/* 6. The GEMM rates behind the precision choice are measured once per
 * device and state dir (plan/calibrate.c): a later run with the same
 * state dir reports exactly the rates of the first, stored in one line. */
static void check_same_rates(const char *client, const char *state, const cJSON *first) {
    cJSON *j = plan_json(client, "mlp", state, 0);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(first, "gemm_gflops");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "gemm_gflops");
    static const char *precs[] = {"fp32", "bf16", "fp16"};
    for (int p = 0; p < 3; p++) {
        CHECK_MSG(num(a, precs[p]) > 0, "no %s rate in the first run", precs[p]);
        CHECK_MSG(num(a, precs[p]) == num(b, precs[p]), "%s: %g GFLOP/s, then %g with the same state dir", precs[p],
                  num(a, precs[p]), num(b, precs[p]));
    }
    char path[500], err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/calibration.jsonl", state);
    char *text = hfl_read_file(path, NULL, err);
    REQUIRE_MSG(text, "%s", err);
    int lines = 0;
    for (const char *c = text; *c; c++) lines += *c == '\n';
    CHECK_MSG(lines == 1, "%d calibration lines after several runs", lines);
    free(text);
    /* the per-op costs (plan/op_cost.h) are kept in that line too: every
     * candidate's speed came from them, the same in both runs */
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(first, "speed_model");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(j, "speed_model");
    CHECK_MSG(cJSON_IsString(ma) && !strcmp(ma->valuestring, "per-op"), "first run's speed model: %s",
              cJSON_IsString(ma) ? ma->valuestring : "(none)");
    CHECK_MSG(cJSON_IsString(mb) && !strcmp(mb->valuestring, "per-op"), "second run's speed model: %s",
              cJSON_IsString(mb) ? mb->valuestring : "(none)");
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(first, "candidates");
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(j, "candidates");
    CHECK(cJSON_GetArraySize(ca) == cJSON_GetArraySize(cb) && cJSON_GetArraySize(ca) > 0);
    for (int i = 0; i < cJSON_GetArraySize(ca) && i < cJSON_GetArraySize(cb); i++) {
        const cJSON *ra = cJSON_GetArrayItem(ca, i), *rb = cJSON_GetArrayItem(cb, i);
        CHECK_MSG(num(ra, "predicted_samples_per_s") > 0 &&
                      num(ra, "predicted_samples_per_s") == num(rb, "predicted_samples_per_s"),
                  "candidate %d: %.17g samples/s, then %.17g with the same state dir", i,
                  num(ra, "predicted_samples_per_s"), num(rb, "predicted_samples_per_s"));
    }
    cJSON_Delete(j);
}

/* 7. --trial-step: a client's choice, verification and one real step of the
 * run's batch from an empty state dir, within the budget; a budget below
 * every configuration is refused up front, exit 1, one line in the JSON. */
static void check_trial(const char *client) {
    static const struct { const char *budget; int trains; } cases[] = {{"5M", 1}, {"1M", 0}};
    for (int k = 0; k < 2; k++) {
        char state[400], out[400], err[HFL_ERR_LEN];
        snprintf(state, sizeof state, "%s/trial-%d", harness_tmpdir(), k);
        snprintf(out, sizeof out, "%s/trial-%d.json", harness_tmpdir(), k);
        REQUIRE_MSG(hfl_mkdirs(state, err) == 0, "%s", err);
        char *argv[] = {(char *)client, "--plan", "--trial-step", "--json", "--model", "mlp", "--batch", "64",
                        "--memory-budget", (char *)cases[k].budget, "--state-dir", state, NULL};
        int rc = harness_wait(harness_spawn(argv, out), 300);
        char *text = hfl_read_file(out, NULL, err);
        REQUIRE_MSG(text, "%s", err);
        cJSON *j = cJSON_Parse(text);
        int parsed = CHECK_MSG(j, "--trial-step --json printed no JSON: %.200s", text);
        free(text);
        if (!parsed) continue;
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        if (cases[k].trains) {
            double measured = num(j, "measured_peak_bytes"), budget = num(j, "budget_bytes");
            printf("trial: mlp batch 64 in %s trained, measured %.2f MiB\n", cases[k].budget, measured / 1048576.0);
            CHECK_MSG(rc == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "trained")), "exit %d", rc);
            CHECK_MSG(measured > 0 && measured <= budget, "measured %.0f against a budget of %.0f", measured, budget);
        } else {
            CHECK_MSG(rc == 1 && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "trained")), "exit %d", rc);
            CHECK_MSG(cJSON_IsString(e) && strstr(e->valuestring, "nothing fits in 1.00 MiB") &&
                          !strchr(e->valuestring, '\n'), "refusal: %s", cJSON_IsString(e) ? e->valuestring : "?");
        }
        cJSON_Delete(j);
    }
}

/* Appends line to path. */
static void append_line(const char *path, const char *line) {
    FILE *f = fopen(path, "a");
    REQUIRE_MSG(f, "cannot append to %s", path);
    fprintf(f, "%s\n", line);
    fclose(f);
}

/* Copies the file `name` from state dir `from` into state dir `to`. */
static void copy_state_file(const char *from, const char *to, const char *name) {
    char src[500], dst[500], err[HFL_ERR_LEN];
    snprintf(src, sizeof src, "%s/%s", from, name);
    snprintf(dst, sizeof dst, "%s/%s", to, name);
    size_t len = 0;
    char *text = hfl_read_file(src, &len, err);
    REQUIRE_MSG(text && hfl_write_file_atomic(dst, text, len, err) == 0, "%s", err);
    free(text);
}

/* 8, on a cold --verify run j of mlp in state. */
static void check_device_fields(const char *client, const char *state, const cJSON *j) {
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "context_bytes")));
    CHECK(!strcmp(str(j, "context_source"), "none"));
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "process_device_bytes")));
    CHECK(num(j, "alloc_granularity") == 1);
    char path[500], err[HFL_ERR_LEN], fields[400];
    snprintf(path, sizeof path, "%s/overhead.jsonl", state);
    char *text = hfl_read_file(path, NULL, err);
    REQUIRE_MSG(text, "%s", err);
    int lines = 0;
    cJSON *first = NULL;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        CHECK_MSG(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "process_device_bytes")) &&
                      cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "context_bytes")),
                  "record %d: %.200s", lines, line);
        if (!first) first = o;
        else cJSON_Delete(o);
    }
    free(text);
    REQUIRE_MSG(first != NULL, "no records in %s", path);
    /* a state dir with those records, one written before the keys, one of the GPU's kind */
    snprintf(fields, sizeof fields, "%s/fields-state", harness_tmpdir());
    REQUIRE_MSG(hfl_mkdirs(fields, err) == 0, "%s", err);
    char dst[500];
    copy_state_file(state, fields, "overhead.jsonl");
    /* the GEMM rates too, so the plan below reads them instead of timing them
     * again (calibration.jsonl: rates, not overhead records) */
    copy_state_file(state, fields, "calibration.jsonl");
    snprintf(dst, sizeof dst, "%s/overhead.jsonl", fields);
    cJSON_DeleteItemFromObjectCaseSensitive(first, "process_device_bytes");
    cJSON_DeleteItemFromObjectCaseSensitive(first, "context_bytes");
    char *old = cJSON_PrintUnformatted(first);
    append_line(dst, old);
    cJSON_AddNumberToObject(first, "process_device_bytes", 600.0 * 1048576);
    cJSON_AddNumberToObject(first, "context_bytes", 500.0 * 1048576);
    char *gpu = cJSON_PrintUnformatted(first);
    append_line(dst, gpu);
    free(old), free(gpu);
    cJSON_Delete(first);
    cJSON *k = plan_json(client, "mlp", fields, 0);
    CHECK_MSG(num(k, "overhead_records") == lines + 1, "%g records loaded from %d of the CPU's kind",
              num(k, "overhead_records"), lines + 1);
    printf("device fields: %d records of the CPU's kind and one from before the fields: %g loaded\n", lines,
           num(k, "overhead_records"));
    cJSON_Delete(k);
}

static const char *client_exe;        /* argv[1]: hfl-client */
static char mlp_state[400], cnn_state[400]; /* the state folders verify_cold filled in main */
static cJSON *mlp, *cnn;                  /* and the plans it printed */

static void case_left_out_cnn(void) { check_left_out(client_exe, "cnn", mlp_state, cnn); }
static void case_left_out_mlp(void) { check_left_out(client_exe, "mlp", cnn_state, mlp); }
static void case_accumulation(void) { check_accumulation(client_exe, cnn_state); }
static void case_same_rates(void) { check_same_rates(client_exe, mlp_state, mlp); }
static void case_trial(void) { check_trial(client_exe); }
static void case_device_fields(void) { check_device_fields(client_exe, mlp_state, mlp); }

static const check_case cases[] = {
    {"left_out_cnn", case_left_out_cnn},
    {"left_out_mlp", case_left_out_mlp},
    {"accumulation", case_accumulation},
    {"same_rates", case_same_rates},
    {"trial", case_trial},
    {"device_fields", case_device_fields},
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_plan_cli HFL_CLIENT\n");
        return 2;
    }
    client_exe = argv[1];
    check_on_stop(harness_stop);
    if (!getenv("OPENBLAS_CORETYPE")) { /* see 3. above; the clients inherit it */
        const char *own = hfl_blas_core_name();
        if (!strcmp(own, "Prescott") && hfl_blas_core_for_cpu()) own = hfl_blas_core_for_cpu();
        hfl_blas_blocking b;
        setenv("OPENBLAS_CORETYPE", hfl_blas_blocking_for(own, &b) == 0 ? own : "Haswell", 1);
    }
    printf("OpenBLAS kernels: %s\n", getenv("OPENBLAS_CORETYPE"));
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) {
        printf("SKIP: /proc/self/clear_refs is not writable here, so peaks cannot be measured\n");
        return 77;
    }
    fclose(f);
    char err[HFL_ERR_LEN];
    snprintf(mlp_state, sizeof mlp_state, "%s/mlp-state", harness_tmpdir());
    snprintf(cnn_state, sizeof cnn_state, "%s/cnn-state", harness_tmpdir());
    REQUIRE_MSG(hfl_mkdirs(mlp_state, err) == 0 && hfl_mkdirs(cnn_state, err) == 0, "%s", err);
    /* the cold verification of both models: every case reads its states and plans */
    mlp = verify_cold(client_exe, "mlp", mlp_state);
    cnn = verify_cold(client_exe, "cnn", cnn_state);
    /* argv holds hfl-client's path, not case names: argc 0, cases from HFL_TEST_CASE */
    int rc = check_run("test_plan_cli", cases, CHECK_CASES(cases), 0, argv);
    cJSON_Delete(mlp);
    cJSON_Delete(cnn);
    harness_cleanup();
    return rc;
}
