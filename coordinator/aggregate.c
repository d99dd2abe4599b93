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
    memset(a, 0, sizeof *a);
}

void hfl_agg_reset(hfl_agg *a, double clip, double value_bound) {
    a->clip = clip > 0 ? clip : 0;
    a->bound = a->clip > 0 ? a->clip : value_bound;
    int e;
    frexp(a->bound, &e); /* bound < 2^e */
    a->shift = 61 - e;
    memset(a->acc, 0, a->n * sizeof *a->acc);
}

/* The decoded update's L2 norm, and its largest |element|, in double. */
static double norm_of(const float *v, size_t n, double *maxabs) {
    double s = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        s += x * x;
        if (fabs(x) > m) m = fabs(x);
    }
    *maxabs = m;
    return sqrt(s);
}

int hfl_agg_add(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, double weight,
                hfl_agg_update *info, char *err) {
    if (!(weight > 0 && weight <= 1))
        return hfl_errf(err, "update weight %g outside (0, 1]", weight);
    pthread_mutex_lock(&a->lock);
    int rc = -1;
    memset(a->scratch, 0, a->n * sizeof *a->scratch);
    if (hfl_codec_decode_accumulate(c, payload, len, a->n, 1.0f, a->scratch, a->threads, err) != 0) goto out;
    double maxabs, norm = norm_of(a->scratch, a->n, &maxabs);
    if (!isfinite(norm)) {
        hfl_errf(err, "update is not finite (L2 norm %g)", norm);
        goto out;
    }
    double factor = weight;
    if (a->clip > 0 && norm > a->clip) factor *= a->clip / norm;
    if (a->clip == 0 && maxabs > a->bound) {
        hfl_errf(err, "update value %g beyond the aggregation bound %g (set a clip norm)", maxabs, a->bound);
        goto out;
    }
    /* every |factor * v_i| <= bound < 2^(61 - shift) */
    double f = ldexp(factor, a->shift);
    for (size_t i = 0; i < a->n; i++) a->acc[i] += llrint(f * (double)a->scratch[i]);
    if (info) {
        info->norm = norm;
        info->clipped = a->clip > 0 && norm > a->clip;
    }
    rc = 0;
out:
    pthread_mutex_unlock(&a->lock);
    return rc;
}

void hfl_agg_finish(const hfl_agg *a, double weight_sum, float *out) {
    double inv = ldexp(1.0, -a->shift) / weight_sum;
    for (size_t i = 0; i < a->n; i++) out[i] = (float)((double)a->acc[i] * inv);
}
