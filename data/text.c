/* text.c: byte windows of text as language-model datasets (text.h). */
#include "data/text.h"

#include <math.h>
#include <string.h>

#include "util/util.h"

/* Windows [first, first + n) of bytes as a dataset. */
static void windows(const uint8_t *bytes, int T, size_t first, size_t n, hfl_dataset *d) {
    memset(d, 0, sizeof *d);
    d->n = (int)n;
    d->dim = T;
    d->n_classes = 256;
    d->label_rows = T;
    if (n == 0) return;
    d->x = hfl_malloc(sizeof(float) * n * (size_t)T);
    d->y = hfl_malloc(sizeof(int32_t) * n * (size_t)T);
    for (size_t k = 0; k < n; k++) {
        const uint8_t *w = bytes + (first + k) * (size_t)T;
        for (int t = 0; t < T; t++) {
            d->x[k * (size_t)T + (size_t)t] = (float)w[t];
            d->y[k * (size_t)T + (size_t)t] = (int32_t)w[t + 1];
        }
    }
}

int hfl_text_windows(const uint8_t *bytes, size_t len, int T, double held_out, hfl_dataset *train,
                     hfl_dataset *test, char *err) {
    if (T < 1 || T > HFL_TEXT_MAX_CONTEXT)
        return hfl_errf(err, "context %d outside [1, %d]", T, HFL_TEXT_MAX_CONTEXT);
    if (!(held_out >= 0.0 && held_out <= 0.5))
        return hfl_errf(err, "held-out fraction %g outside [0, 0.5]", held_out);
    size_t w = len > 1 ? (len - 1) / (size_t)T : 0;
    size_t h = held_out > 0.0 ? (size_t)llround(held_out * (double)w) : 0;
    if (held_out > 0.0 && h < 1) h = 1;
    if (w > (size_t)INT32_MAX / 2 || w <= h)
        return hfl_errf(err, "%zu bytes give %zu windows of %d + 1 bytes, leaving none to train on "
                        "after %zu held out", len, w, T, h);
    windows(bytes, T, 0, w - h, train);
    windows(bytes, T, w - h, h, test);
    return 0;
}
