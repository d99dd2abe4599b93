/* test_measure.c: what a memory measurement runs and keeps, on the CPU.
 *
 * 1. The tail shapes (plan/measure.h): for batches 1..12, steps of one
 *    batch or of several micro-batches, and epochs of 0..60 rows, the sizes
 *    hfl_measure_tails lists are exactly the micro-batch sizes other than
 *    the full batch that an epoch of n rows runs, found by walking the
 *    epoch as client/train.c does (optimizer steps of step_batch rows, the
 *    last one shorter, each as micro-batches of at most batch rows); with n
 *    unknown, the step's remainder and batch - 1.
 * 2. hfl_measure_step_on on the CPU backend runs the tail steps it is given:
 *    the trainer's own row count is the batch plus each tail in [1, batch),
 *    and tails outside that range are not run.
 * 3. The per-process cost's state-directory file (plan/device_cost.h): the
 *    first line for a device and backend wins; other devices and backends,
 *    damaged, zero and absurd lines are skipped; the CPU backend has no
 *    cost and writes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/device_cost.h"
#include "plan/measure.h"
#include "tests/check.h"
#include "util/util.h"

/* Bit s set for each micro-batch size s < batch an epoch of n rows runs. */
static uint64_t walk_epoch(int batch, int step, int n) {
    uint64_t seen = 0;
    for (int start = 0; start < n; start += step) {
        int rows = n - start < step ? n - start : step;
        for (int off = 0; off < rows; off += batch) {
            int size = rows - off < batch ? rows - off : batch;
            if (size < batch) seen |= 1ull << size;
        }
    }
    return seen;
}

static void test_tails(void) {
    int cases = 0;
    for (int batch = 1; batch <= 12; batch++)
        for (int k = 1; k <= 3; k++)
            for (int extra = 0; extra < batch; extra += batch > 3 ? batch / 3 : 1) {
                int step = k == 1 ? batch : k * batch - extra; /* accumulated: k micro-batches, the last short */
                for (int n = 0; n <= 60; n++) {
                    int tails[HFL_MEASURE_TAILS], m = hfl_measure_tails(batch, step, n, tails);
                    uint64_t got = 0;
                    for (int i = 0; i < m; i++) got |= 1ull << tails[i];
                    uint64_t want = n ? walk_epoch(batch, step, n)
                                      : (step % batch ? 1ull << (step % batch) : 0) |
                                            (batch > 1 ? 1ull << (batch - 1) : 0);
                    CHECK_MSG(got == want && (m < 2 || tails[0] != tails[1]),
                              "batch %d step %d n %d: got %#llx, want %#llx", batch, step, n,
                              (unsigned long long)got, (unsigned long long)want);
                    cases++;
                }
            }
    printf("tail shapes: %d epochs walked\n", cases);
}

static void test_tail_steps(void) {
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    REQUIRE(hfl_model_builtin("mlp", &s, err) == 0);
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_plan_config cfg = {.batch = 8, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .momentum = 1};
    REQUIRE(hfl_plan_make(&s, &cfg, plan, err) == 0);
    float *w = hfl_malloc(sizeof(float) * s.n_params), *x = hfl_calloc((size_t)8 * s.in_dim, sizeof(float));
    int32_t y[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    hfl_model_init_params(&s, w, 4);
    static const int tails[] = {5, 3}, outside[] = {0, 8, 9, -2};
    hfl_step_measure m;
    CHECK_MSG(hfl_measure_step_on(hfl_backend_cpu(), &s, plan, w, x, y, NULL, 0, &m, err) == 0, "%s", err);
    CHECK_MSG(m.rows == 8 && m.growth > 0 && m.process_bytes == 0, "rows %lld", (long long)m.rows);
    CHECK_MSG(hfl_measure_step_on(hfl_backend_cpu(), &s, plan, w, x, y, tails, 2, &m, err) == 0, "%s", err);
    CHECK_MSG(m.rows == 8 + 5 + 3, "rows %lld", (long long)m.rows);
    CHECK_MSG(hfl_measure_step_on(hfl_backend_cpu(), &s, plan, w, x, y, outside, 4, &m, err) == 0, "%s", err);
    CHECK_MSG(m.rows == 8, "rows %lld", (long long)m.rows);
    free(plan), free(w), free(x);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void test_cost_file(void) {
    char dir[] = "/tmp/hfl-test-measure-XXXXXX", path[64], err[HFL_ERR_LEN];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/device_cost.jsonl", dir);
    uint64_t b = 0;
    CHECK(!hfl_device_cost_load(dir, "H100", "cuda", &b)); /* no file */
    CHECK(!hfl_device_cost_load(NULL, "H100", "cuda", &b) && !hfl_device_cost_load("", "H100", "cuda", &b));
    write_text(path, "{\"device\": \"H100\", \"backend\": \"cuda\", \"context_bytes\": 0}\n"
                     "not json\n"
                     "{\"device\": \"H100\", \"backend\": \"cuda\", \"context_bytes\": \"500\"}\n"
                     "{\"device\": \"H100\", \"backend\": \"cuda\", \"context_bytes\": 1e30}\n"
                     "{\"device\": \"H200\", \"backend\": \"cuda\", \"context_bytes\": 111}\n"
                     "{\"device\": \"H100\", \"backend\": \"cpu\", \"context_bytes\": 222}\n");
    CHECK(!hfl_device_cost_load(dir, "H100", "cuda", &b));
    CHECK(hfl_device_cost_load(dir, "H200", "cuda", &b) && b == 111);
    CHECK(hfl_device_cost_store(dir, "H100", "cuda", 524288000, err) == 0);
    CHECK(hfl_device_cost_store(dir, "H100", "cuda", 999, err) == 0);
    CHECK(hfl_device_cost_load(dir, "H100", "cuda", &b) && b == 524288000); /* the first stays */
    char missing[80];
    snprintf(missing, sizeof missing, "%s/no/such/dir", dir);
    CHECK(hfl_device_cost_store(missing, "H100", "cuda", 1, err) == -1 && strstr(err, "cannot keep"));
    /* the CPU backend: no per-process cost, nothing written */
    unlink(path);
    hfl_device_cost c;
    CHECK(hfl_device_cost_get(dir, "cpu", hfl_backend_cpu(), &c) == -1 && !c.known && !strcmp(c.source, "none"));
    CHECK(access(path, F_OK) != 0);
    rmdir(dir);
}

static const check_case cases[] = {
    {"tails", test_tails},
    {"tail_steps", test_tail_steps},
    {"cost_file", test_cost_file},
};

int main(int argc, char **argv) {
    return check_run("test_measure", cases, CHECK_CASES(cases), argc, argv);
}
