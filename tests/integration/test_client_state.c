/* test_client_state.c: the client's state file (client/state.c) keeps the
 * error-feedback residual bit for bit across a restart, and refuses a file
 * that is damaged or was written for another model, codec or size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "tests/integration/harness.h"
#include "util/util.h"

int main(void) {
    const char *dir = harness_tmpdir();
    size_t n = 1000;
    float *r = hfl_malloc(n * sizeof(float)), *back = hfl_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) r[i] = sinf((float)i) * 1e-3f;
    char err[HFL_ERR_LEN], why[HFL_ERR_LEN], path[400];
    CHECK(client_state_save(dir, "client-7", "mlp", "topk:0.01", r, n, err) == 0, "%s", err);
    memset(back, 0, n * sizeof(float));
    CHECK(client_state_load(dir, "client-7", "mlp", "topk:0.01", back, n, why) == 0, "%s", why);
    CHECK(memcmp(r, back, n * sizeof(float)) == 0, "residual changed across save and load");

    CHECK(client_state_load(dir, "client-8", "mlp", "topk:0.01", back, n, why) == -1, "loaded a missing file");
    CHECK(client_state_load(dir, "client-7", "cnn", "topk:0.01", back, n, why) == -1, "loaded another model's state");
    CHECK(client_state_load(dir, "client-7", "mlp", "sign", back, n, why) == -1, "loaded another codec's state");
    CHECK(client_state_load(dir, "client-7", "mlp", "topk:0.01", back, n - 1, why) == -1, "loaded a state of another size");
    printf("refused: %s\n", why);

    snprintf(path, sizeof path, "%s/client-7.state", dir);
    size_t len;
    char *bytes = hfl_read_file(path, &len, err);
    CHECK(bytes, "%s", err);
    bytes[len - 3] ^= 0x10; /* one bit of one residual */
    CHECK(hfl_write_file_atomic(path, bytes, len, err) == 0, "%s", err);
    free(bytes);
    memset(back, 0, n * sizeof(float));
    CHECK(client_state_load(dir, "client-7", "mlp", "topk:0.01", back, n, why) == -1, "loaded a damaged file");
    printf("refused: %s\n", why);
    for (size_t i = 0; i < n; i++) CHECK(back[i] == 0, "a refused load wrote residual %zu", i);
    free(r);
    free(back);
    harness_cleanup();
    printf("ok\n");
    return 0;
}
