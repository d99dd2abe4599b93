/* aggregate.c: exact, order-independent sums of clipped updates (see aggregate.h). */
#include "coordinator/aggregate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int hfl_agg_init(hfl_agg *a, size_t n, int threads, char *err) {
    memset(a, 0, sizeof *a);
    a->n = n;
    a->threads = threads;
    a->acc = calloc(n ? n : 1, sizeof *a->acc);
    a->scratch = malloc((n ? n : 1) * sizeof *a->scratch);
    if (!a->acc || !a->scratch) {
        free(a->acc);
        free(a->scratch);
        a->acc = NULL, a->scratch = NULL;
        return hfl_errf(err, "cannot allocate the aggregator for %zu values", n);
    }
    pthread_mutex_init(&a->lock, NULL);
    hfl_agg_reset(a, 0, 1.0);
    return 0;
}

void hfl_agg_free(hfl_agg *a) {
    if (!a->acc) return;
    pthread_mutex_destroy(&a->lock);
    free(a->acc);
    free(a->scratch);
    free(a->rows);
    free(a->present);
    memset(a, 0, sizeof *a);
}

void hfl_agg_reset(hfl_agg *a, double clip, double value_bound) {
    a->clip = clip > 0 ? clip : 0;
    a->bound = a->clip > 0 ? a->clip : value_bound;
    int e;
    frexp(a->bound, &e); /* bound < 2^e */
    a->shift = 50 - e;
    memset(a->acc, 0, a->n * sizeof *a->acc);
    if (a->present) memset(a->present, 0, (size_t)a->n_rows);
}

/* The decoded update's L2 norm and its largest |element|, in double: eight
 * partial sums over interleaved lanes, combined in a fixed order (so the
 * compiler may vectorise, and the result is still one fixed function of v). */
static double norm_of(const float *v, size_t n, double *maxabs) {
    double s[8] = {0}, m[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            double x = v[i + j];
            s[j] += x * x;
            double ax = fabs(x);
            m[j] = ax > m[j] ? ax : m[j];
        }
    for (int j = 0; i < n; i++, j++) {
        double x = v[i];
        s[j] += x * x;
        m[j] = fabs(x) > m[j] ? fabs(x) : m[j];
    }
    double sum = 0, top = 0;
    for (int j = 0; j < 8; j++) {
        sum += s[j];
        top = m[j] > top ? m[j] : top;
    }
    *maxabs = top;
    return sqrt(sum);
}

/* round(y) as an int64 for |y| < 2^51: adding 1.5 * 2^52 leaves the rounded
 * integer (to nearest, ties to even) in the low mantissa bits, which a plain
 * integer subtraction reads off; unlike llrint it vectorises. */
static inline int64_t round_fixed(double y) {
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    double t = y + magic;
    int64_t bits, mbits;
    memcpy(&bits, &t, sizeof bits);
    memcpy(&mbits, &magic, sizeof mbits);
    return bits - mbits;
}

/* Validates and decodes one update into dst, takes its norm and the factor
 * that clips it (1 without clipping); -1 with err as hfl_agg_add refuses. */
static int decode_clip(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, float *dst,
                       double *factor, hfl_agg_update *info, char *err) {
    memset(dst, 0, a->n * sizeof *dst);
    if (hfl_codec_decode_accumulate(c, payload, len, a->n, 1.0f, dst, a->threads, err) != 0) return -1;
    double maxabs, norm = norm_of(dst, a->n, &maxabs);
    if (!isfinite(norm)) return hfl_errf(err, "update is not finite (L2 norm %g)", norm);
    if (a->clip == 0 && maxabs > a->bound)
        return hfl_errf(err, "update value %g beyond the aggregation bound %g (set a clip norm)", maxabs, a->bound);
    *factor = a->clip > 0 && norm > a->clip ? a->clip / norm : 1.0;
    if (info) {
        info->norm = norm;
        info->clipped = a->clip > 0 && norm > a->clip;
    }
    return 0;
}

int hfl_agg_add(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, double weight,
                hfl_agg_update *info, char *err) {
    if (!(weight > 0 && weight <= 1))
        return hfl_errf(err, "update weight %g outside (0, 1]", weight);
    pthread_mutex_lock(&a->lock);
    double clip;
    int rc = decode_clip(a, c, payload, len, a->scratch, &clip, info, err);
    if (rc == 0) {
        /* every |weight * clip * v_i| <= bound < 2^(50 - shift) */
        double f = ldexp(weight * clip, a->shift);
        int64_t *acc = a->acc;
        const float *v = a->scratch;
        for (size_t i = 0; i < a->n; i++) acc[i] += round_fixed(f * (double)v[i]);
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int hfl_agg_hold(hfl_agg *a, int rows, uint64_t limit_bytes, char *err) {
    double need = (double)rows * (double)a->n * sizeof(float);
    if (rows < 1 || need > (double)limit_bytes)
        return hfl_errf(err, "holding %d updates of %zu values needs %.1f MiB, over the limit of %.1f MiB "
                        "(--robust-memory)", rows, a->n, need / 1048576.0, limit_bytes / 1048576.0);
    free(a->rows);
    free(a->present);
    a->rows = malloc((size_t)need);
    a->present = calloc((size_t)rows, 1);
    if (!a->rows || !a->present) {
        free(a->rows);
        free(a->present);
        a->rows = NULL, a->present = NULL, a->n_rows = 0;
        return hfl_errf(err, "cannot allocate %.1f MiB to hold %d updates", need / 1048576.0, rows);
    }
    a->n_rows = rows;
    return 0;
}

int hfl_agg_add_row(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, int row,
                    hfl_agg_update *info, char *err) {
    if (row < 0 || row >= a->n_rows) return hfl_errf(err, "row %d outside the %d held", row, a->n_rows);
    pthread_mutex_lock(&a->lock);
    float *dst = a->rows + (size_t)row * a->n;
    double clip;
    int rc = a->present[row] ? hfl_errf(err, "row %d already added", row)
                             : decode_clip(a, c, payload, len, dst, &clip, info, err);
    if (rc == 0) {
        if (clip < 1)
            for (size_t i = 0; i < a->n; i++) dst[i] = (float)(dst[i] * clip);
        a->present[row] = 1;
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

void hfl_agg_finish(const hfl_agg *a, double weight_sum, float *out) {
    double inv = ldexp(1.0, -a->shift) / weight_sum;
    for (size_t i = 0; i < a->n; i++) out[i] = (float)((double)a->acc[i] * inv);
}
