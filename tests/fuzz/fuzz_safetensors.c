/* fuzz_safetensors.c: libFuzzer harness for the safetensors reader
 * hfl_safetensors_decode (model/safetensors.h) on a small model (dense 4->3,
 * ReLU, dense 3->2: 23 parameters), so whole valid files fit the input.
 *
 * Invariants:
 *   - a refusal is -1 with a one-line error, the output untouched;
 *   - an accepted file fills every parameter from the data buffer, and
 *     writing those parameters (hfl_safetensors_encode) gives a file that
 *     reads back to the same bits. */
#include <string.h>

#include "fuzz.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "util/util.h"

static const char *spec_json =
    "{\"name\": \"t\", \"input\": [4, 1, 1], \"layers\": [{\"type\": \"dense\", \"out\": 3}, {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"out\": 2}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    static hfl_model_spec spec;
    static int ready;
    char err[HFL_ERR_LEN] = "";
    if (!ready) {
        FUZZ_REQUIRE(hfl_model_spec_from_json(spec_json, strlen(spec_json), &spec, err) == 0, "spec: %s", err);
        FUZZ_REQUIRE(spec.n_params == 23, "%zu parameters", spec.n_params);
        ready = 1;
    }
    float p[23], q[23], sentinel = -12345.0f;
    for (int i = 0; i < 23; i++) p[i] = sentinel;
    int rc = hfl_safetensors_decode(data, size, &spec, p, err);
    if (rc != 0) {
        FUZZ_REQUIRE(rc == -1 && err[0] && !strchr(err, '\n'), "refused with %d and error '%s'", rc, err);
        for (int i = 0; i < 23; i++) FUZZ_REQUIRE(memcmp(&p[i], &sentinel, sizeof sentinel) == 0, "output touched");
        return 0;
    }
    size_t len;
    uint8_t *again = hfl_safetensors_encode(&spec, p, &len, err);
    FUZZ_REQUIRE(again != NULL, "accepted parameters do not encode: %s", err);
    FUZZ_REQUIRE(hfl_safetensors_decode(again, len, &spec, q, err) == 0, "re-encoded file refused: %s", err);
    FUZZ_REQUIRE(memcmp(p, q, sizeof p) == 0, "re-encoded file reads back different bits");
    free(again);
    return 0;
}
