/* fuzz_data.c: libFuzzer harness for the dataset reader hfl_data_decode
 * (data/files.h): .npz archives (data/zip.c, data/npy.c) and safetensors
 * files holding x and y.
 *
 * Invariants:
 *   - a refusal is -1 with a one-line error and no dataset;
 *   - an accepted file gives n >= 1 samples of dim >= 1 finite features and
 *     labels in [0, n_classes), n_classes the largest label + 1, and
 *     byte-valued features only from uint8 data (hfl_idx_unpixel gives each
 *     back). */
#include <math.h>
#include <string.h>

#include "data/files.h"
#include "fuzz.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    char err[HFL_ERR_LEN] = "";
    hfl_dataset d;
    int rc = hfl_data_decode(data, size, &d, err);
    if (rc != 0) {
        FUZZ_REQUIRE(rc == -1 && err[0] && !strchr(err, '\n'), "refused with %d and error '%s'", rc, err);
        FUZZ_REQUIRE(d.x == NULL && d.y == NULL && d.n == 0, "a refusal left a dataset");
        return 0;
    }
    FUZZ_REQUIRE(d.n >= 1 && d.dim >= 1 && d.x && d.y, "accepted %d samples of %d features", d.n, d.dim);
    int32_t top = -1;
    for (int i = 0; i < d.n; i++) {
        FUZZ_REQUIRE(d.y[i] >= 0 && d.y[i] < d.n_classes, "label %d of %d classes", d.y[i], d.n_classes);
        if (d.y[i] > top) top = d.y[i];
    }
    FUZZ_REQUIRE(top + 1 == d.n_classes, "n_classes %d, largest label %d", d.n_classes, top);
    for (size_t i = 0; i < (size_t)d.n * (size_t)d.dim; i++) {
        FUZZ_REQUIRE(isfinite(d.x[i]), "feature %zu not finite", i);
        if (d.pixels) FUZZ_REQUIRE(hfl_idx_pixel(hfl_idx_unpixel(d.x[i])) == d.x[i], "feature %zu not a pixel", i);
    }
    hfl_dataset_free(&d);
    return 0;
}
