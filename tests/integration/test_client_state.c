/* test_client_state.c: the client's state file (client/state.c) keeps the
 * error-feedback residual bit for bit across a restart, with the update it
 * produced, and refuses a file that is damaged or was written for another
 * model, codec or size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "tests/integration/harness.h"
#include "util/util.h"

int main(void) {
    check_on_stop(harness_stop);
    const char *dir = harness_tmpdir();
    size_t n = 1000;
    float *r = hfl_malloc(n * sizeof(float)), *back = hfl_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) r[i] = sinf((float)i) * 1e-3f;
    char err[HFL_ERR_LEN], why[HFL_ERR_LEN], path[400];
    REQUIRE_MSG(client_state_save(dir, "client-7", "mlp", "topk:0.01", r, n, NULL, err) == 0, "%s", err);
    memset(back, 0, n * sizeof(float));
    CHECK_MSG(client_state_load(dir, "client-7", "mlp", "topk:0.01", back, n, NULL, why) == 0, "%s", why);
    CHECK_MSG(memcmp(r, back, n * sizeof(float)) == 0, "residual changed across save and load");

    CHECK_MSG(client_state_load(dir, "client-8", "mlp", "topk:0.01", back, n, NULL, why) == -1, "loaded a missing file");
    CHECK_MSG(client_state_load(dir, "client-7", "cnn", "topk:0.01", back, n, NULL, why) == -1, "loaded another model's state");
    CHECK_MSG(client_state_load(dir, "client-7", "mlp", "sign", back, n, NULL, why) == -1, "loaded another codec's state");
    CHECK_MSG(client_state_load(dir, "client-7", "mlp", "topk:0.01", back, n - 1, NULL, why) == -1, "loaded a state of another size");
    printf("refused: %s\n", why);

    snprintf(path, sizeof path, "%s/client-7.state", dir);
    size_t len;
    char *bytes = hfl_read_file(path, &len, err);
    REQUIRE_MSG(bytes, "%s", err);
    bytes[len - 28 - 3] ^= 0x10; /* one bit of the last residual (28 bytes of empty pending update follow) */
    REQUIRE_MSG(hfl_write_file_atomic(path, bytes, len, err) == 0, "%s", err);
    free(bytes);
    memset(back, 0, n * sizeof(float));
    CHECK_MSG(client_state_load(dir, "client-7", "mlp", "topk:0.01", back, n, NULL, why) == -1, "loaded a damaged file");
    printf("refused: %s\n", why);
    size_t wrote = 0;
    for (size_t i = 0; i < n; i++) wrote += back[i] != 0;
    CHECK_MSG(wrote == 0, "a refused load wrote %zu residuals", wrote);

    /* the pending update travels with the residual, in the same file */
    uint8_t upd[6] = {1, 2, 3, 4, 5, 6};
    client_pending p = {.round = 3, .version = 2, .loss = 0.5, .seconds = 1.25, .sim_s = 7.5, .bytes = upd, .len = sizeof upd};
    client_pending q = {0};
    REQUIRE_MSG(client_state_save(dir, "client-9", "mlp", "int8", r, n, &p, err) == 0, "%s", err);
    CHECK_MSG(client_state_load(dir, "client-9", "mlp", "int8", back, n, &q, why) == 0, "%s", why);
    CHECK_MSG(q.round == 3 && q.version == 2 && q.loss == 0.5 && q.seconds == 1.25 && q.sim_s == 7.5 && q.len == sizeof upd &&
                  q.bytes && memcmp(q.bytes, upd, sizeof upd) == 0,
              "pending update changed across save and load: round %d version %d len %zu", q.round, q.version, q.len);
    CHECK_MSG(memcmp(r, back, n * sizeof(float)) == 0, "residual changed across save and load with an update");
    free(q.bytes);
    free(r);
    free(back);
    harness_cleanup();
    return check_exit_code("test_client_state");
}
