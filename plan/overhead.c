/* overhead.c: the extra outside the arena, the BLAS footprint plus one
 * median per precision class (see overhead.h). */
#include "plan/overhead.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* fp32 and 2-byte storage behave differently outside the arena. */
static int same_class(hfl_precision a, hfl_precision b) {
    return (a == HFL_PREC_FP32) == (b == HFL_PREC_FP32);
}

void hfl_overhead_init(hfl_overhead_model *m, int host_memory, size_t in_dim, int label_rows,
                       double fleet) {
    m->n = 0;
    m->host_memory = host_memory;
    m->in_dim = in_dim;
    m->label_rows = label_rows;
    m->fleet = fleet > 0 ? fleet : 0;
    m->spec = NULL;
    m->blocking = (hfl_blas_blocking){0};
}

void hfl_overhead_set_footprint(hfl_overhead_model *m, const hfl_model_spec *spec,
                                const hfl_blas_blocking *b) {
    m->spec = spec;
    m->blocking = b ? *b : (hfl_blas_blocking){0};
}

uint64_t hfl_overhead_footprint(const hfl_overhead_model *m, hfl_precision p, int batch) {
    if (!m->spec || !m->blocking.p) return 0;
    return hfl_blas_step_footprint(m->spec, batch, p, &m->blocking);
}

uint64_t hfl_overhead_staging(int host_memory, int batch, size_t in_dim, int label_rows) {
    return host_memory ? (uint64_t)batch * (in_dim + (size_t)label_rows) * 4u : 0;
}

void hfl_overhead_add(hfl_overhead_model *m, hfl_precision p, int batch, double arena,
                      double staging, double blas, double measured) {
    if (m->n == HFL_OVERHEAD_MAX) { /* keep the newest: drop the oldest */
        memmove(m->rec, m->rec + 1, sizeof m->rec[0] * (HFL_OVERHEAD_MAX - 1));
        m->n--;
    }
    hfl_overhead_rec *r = &m->rec[m->n++];
    r->precision = p;
    r->batch = batch;
    r->extra = measured - arena - staging;
    r->blas = blas > 0 ? blas : 0;
}

/* The median of extra - footprint over the records in p's class
 * (want_class) or outside it; 0 when there are none (*found = 0). Without a
 * known blocking the footprints are not subtracted: a prediction then adds
 * none, so each record counts whole. */
static double class_median(const hfl_overhead_model *m, hfl_precision p, int want_class,
                           int *found) {
    double *v = hfl_malloc(sizeof(double) * (size_t)(m->n + 1));
    int n = 0;
    for (int i = 0; i < m->n; i++)
        if (same_class(m->rec[i].precision, p) == want_class)
            v[n++] = m->rec[i].extra - (m->blocking.p ? m->rec[i].blas : 0);
    double med = hfl_median(v, (size_t)n);
    free(v);
    *found = n > 0;
    return med;
}

const char *hfl_overhead_source(const hfl_overhead_model *m, hfl_precision p) {
    int found;
    class_median(m, p, 1, &found);
    if (found) return "class";
    class_median(m, p, 0, &found);
    if (found) return "other-class";
    return m->fleet > 0 ? "fleet" : "prior";
}

uint64_t hfl_overhead_predict(const hfl_overhead_model *m, hfl_precision p, int batch) {
    uint64_t staging = hfl_overhead_staging(m->host_memory, batch, m->in_dim, m->label_rows);
    int found;
    double extra = class_median(m, p, 1, &found);
    if (!found) extra = class_median(m, p, 0, &found);
    if (found) {
        extra += (double)hfl_overhead_footprint(m, p, batch);
    } else { /* the fleet's estimate and the prior bound the whole extra */
        if (m->fleet > 0) return (uint64_t)m->fleet; /* already a whole overhead */
        extra = (double)(m->host_memory ? HFL_OVERHEAD_PRIOR_HOST : HFL_OVERHEAD_PRIOR_DEVICE);
    }
    return staging + (extra > 0 && extra < 0x1p50 ? (uint64_t)extra : 0);
}
