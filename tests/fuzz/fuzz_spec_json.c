/* fuzz_spec_json.c: libFuzzer harness for the model-spec JSON parser
 * hfl_model_spec_from_json (model/model.h, model/spec_json.c).
 *
 * The input is the spec's text, not NUL-terminated. Invariants:
 *   - a refusal is -1 with a one-line error;
 *   - an accepted spec passes hfl_model_spec_check, keeps the documented
 *     limits (1..HFL_MAX_LAYERS layers, a dense last layer of >= 2 outputs,
 *     at most HFL_MODEL_MAX_PARAMS parameters, in_dim = C * H * W), and its
 *     forward FLOPs can be counted;
 *   - it prints (hfl_model_spec_to_json), the printed text parses back to the
 *     same spec, byte for byte, and prints again to the same text. */
#include <string.h>

#include "fuzz.h"
#include "model/model.h"
#include "util/util.h"

static void check_spec(const hfl_model_spec *spec) {
    char err[HFL_ERR_LEN] = "";
    FUZZ_REQUIRE(hfl_model_spec_check(spec, err) == 0, "accepted spec fails the check: %s", err);
    FUZZ_REQUIRE(spec->n_layers >= 1 && spec->n_layers <= HFL_MAX_LAYERS, "%d layers", spec->n_layers);
    const hfl_layer *last = &spec->layers[spec->n_layers - 1];
    FUZZ_REQUIRE(last->kind == HFL_LAYER_DENSE && last->units >= 2 && spec->n_classes == last->units,
                 "last layer kind %d, %d units, %d classes", (int)last->kind, last->units, spec->n_classes);
    FUZZ_REQUIRE(spec->n_params >= 1 && spec->n_params <= HFL_MODEL_MAX_PARAMS, "%zu parameters", spec->n_params);
    FUZZ_REQUIRE((long long)spec->in_dim == (long long)spec->input.c * spec->input.h * spec->input.w,
                 "in_dim %d for input %dx%dx%d", spec->in_dim, spec->input.c, spec->input.h, spec->input.w);
    FUZZ_REQUIRE(memchr(spec->name, 0, sizeof spec->name) && spec->name[0], "bad name");
    (void)hfl_model_forward_flops(spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    hfl_model_spec spec, back;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_model_spec_from_json((const char *)data, size, &spec, err);
    if (rc != 0) {
        FUZZ_REQUIRE(rc == -1 && err[0], "refused with %d and error '%s'", rc, err);
        FUZZ_REQUIRE(strchr(err, '\n') == NULL, "error is not one line: %s", err);
        return 0;
    }
    check_spec(&spec);
    char *text = hfl_model_spec_to_json(&spec, err);
    FUZZ_REQUIRE(text != NULL, "accepted spec does not print: %s", err);
    FUZZ_REQUIRE(hfl_model_spec_from_json(text, strlen(text), &back, err) == 0, "printed spec refused: %s: %s",
                 err, text);
    FUZZ_REQUIRE(memcmp(&spec, &back, sizeof spec) == 0, "printed spec parses to another: %s", text);
    char *again = hfl_model_spec_to_json(&back, err);
    FUZZ_REQUIRE(again && strcmp(text, again) == 0, "printing is not stable: %s", text);
    free(again);
    free(text);
    return 0;
}
