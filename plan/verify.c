/* verify.c: a candidate configuration's real peak, measured before it is
 * trusted (hfl-client --plan --verify, and a client's plan before its first
 * round).
 *
 * One training step of the candidate's plan on synthetic inputs (the peak
 * does not depend on the values), and one at each tail shape an epoch of
 * the client's data runs (plan/measure.h, TAIL SHAPES: kernels loaded for
 * them are in the figure before training ever meets them): in a forked
 * child on the CPU, in-process on a GPU. On a GPU the figure is what the
 * process holds beyond its per-process cost when NVML can say
 * (hfl_held_bytes: every kernel loaded, pool made and granule mapped
 * counts, whatever ran first), else the fall of free device memory over the
 * step. The median of three: before the meter left out library code, one
 * child's peak strayed by ~150 KiB with where ASLR put the libraries; the
 * three now agree to the byte on the CPU (seen: all 120 of test_plan_cli's
 * mlp and cnn candidates), and the median stays as insurance for a GPU's
 * free-memory figure, which other processes move. When the first two agree
 * they are the median, and the third is not measured: on the CPU a
 * verification costs two steps' children, not three. */
#include <stdlib.h>
#include <string.h>

#include "plan/choose.h"
#include "kernels/philox.h"
#include "plan/measure.h"
#include "util/util.h"

struct hfl_probe {
    const hfl_model_spec *spec;
    int max_batch;
    int64_t data_rows; /* an epoch's rows, for its tail shapes (0: not known) */
    float *x, *params;
    int32_t *y;
};

void hfl_synthetic_batch(const hfl_model_spec *spec, int rows, float *x, int32_t *y) {
    /* A language model reads token ids: integers below its vocabulary. */
    int vocab = spec->layers[0].kind == HFL_LAYER_EMBED ? spec->layers[0].vocab : 0;
    for (size_t i = 0; i < (size_t)rows * spec->in_dim; i++) {
        uint32_t bits = hfl_philox_u32(9, HFL_STREAM_SHUFFLE, 0, 0, 0, i);
        x[i] = vocab ? (float)(bits % (uint32_t)vocab) : hfl_u01(bits);
    }
    for (size_t i = 0; i < (size_t)rows * spec->label_rows; i++)
        y[i] = (int32_t)(hfl_philox_u32(9, HFL_STREAM_SHUFFLE, 0, 0, 1, (uint64_t)i) % (uint32_t)spec->n_classes);
}

int hfl_candidate_plan(const hfl_model_spec *spec, const hfl_backend *be, const hfl_candidate *c,
                       unsigned opt_state, hfl_plan *plan, char *err) {
    hfl_plan_config cfg;
    hfl_candidate_config(c, opt_state, &cfg);
    hfl_plan_config_for_backend(&cfg, be);
    return hfl_plan_make(spec, &cfg, plan, err);
}

hfl_probe *hfl_probe_new(const hfl_model_spec *spec, int max_batch, int64_t data_rows) {
    hfl_probe *p = hfl_calloc(1, sizeof *p);
    size_t nx = (size_t)max_batch * spec->in_dim;
    p->spec = spec;
    p->max_batch = max_batch;
    p->data_rows = data_rows;
    p->x = hfl_malloc(nx * sizeof(float));
    p->params = hfl_malloc(spec->n_params * sizeof(float));
    p->y = hfl_malloc(sizeof(int32_t) * (size_t)max_batch * spec->label_rows);
    hfl_synthetic_batch(spec, max_batch, p->x, p->y);
    hfl_model_init_params(spec, p->params, 1);
    return p;
}

void hfl_probe_free(hfl_probe *p) {
    if (!p) return;
    free(p->x);
    free(p->params);
    free(p->y);
    free(p);
}

int hfl_probe_measure(hfl_probe *p, const hfl_backend *be, const hfl_candidate *c,
                      unsigned opt_state, const hfl_device_cost *cost, uint64_t *measured,
                      int *held, uint64_t *process, char *err) {
    if (c->batch > p->max_batch)
        return hfl_errf(err, "batch %d is larger than the probe's %d", c->batch, p->max_batch);
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    int rc = hfl_candidate_plan(p->spec, be, c, opt_state, plan, err);
    if (rc == 0 && plan->arena_bytes != c->arena) rc = hfl_errf(err, "the plan changed");
    int tails[HFL_MEASURE_TAILS], n_tails = hfl_measure_tails(c->batch, c->step_batch, p->data_rows, tails);
    uint64_t g[3], h[3];
    int all_held = cost && cost->known;
    *process = 0;
    for (int k = 0; rc == 0 && k < 3; k++) {
        hfl_step_measure m;
        rc = hfl_measure_step_on(be, p->spec, plan, p->params, p->x, p->y, tails, n_tails, &m, err);
        g[k] = m.growth;
        *process = m.process_bytes;
        all_held = all_held && m.process_bytes;
        /* what the process held beyond its cost, while the trainer still was */
        h[k] = all_held && m.process_bytes > cost->bytes ? m.process_bytes - cost->bytes : 0;
        /* Two that agree are the median of three whatever the third says (for
         * either figure the third could leave in use), so it is not run: on
         * the CPU every candidate takes two steps' children instead of three. */
        if (k == 1 && g[0] == g[1] && (!all_held || h[0] == h[1])) {
            g[2] = g[0];
            h[2] = h[0];
            break;
        }
    }
    free(plan);
    if (rc != 0) return -1;
    const uint64_t *v = all_held ? h : g;
    uint64_t lo = v[0] < v[1] ? v[0] : v[1], hi = v[0] < v[1] ? v[1] : v[0];
    *measured = v[2] < lo ? lo : v[2] > hi ? hi : v[2];
    *held = all_held;
    return 0;
}

/* Two plans' buffers: name, category, layer, size, lifetime and offset. */
static int same_buffer(const hfl_plan_buffer *x, const hfl_plan_buffer *y) {
    return !strcmp(x->name, y->name) && x->category == y->category && x->layer == y->layer &&
           x->count == y->count && x->elem_bytes == y->elem_bytes && x->bytes == y->bytes &&
           x->first_op == y->first_op && x->last_op == y->last_op && x->offset == y->offset;
}

static int same_op(const hfl_plan_op *x, const hfl_plan_op *y) {
    return x->kind == y->kind && x->layer == y->layer && x->recompute == y->recompute && x->in == y->in &&
           x->out == y->out && x->dout == y->dout && x->din == y->din && x->ws == y->ws &&
           x->labels == y->labels && x->saved == y->saved;
}

int hfl_plan_same_step(const hfl_plan *a, const hfl_plan *b) {
    if (a->arena_bytes != b->arena_bytes || a->n_buffers != b->n_buffers || a->n_ops != b->n_ops)
        return 0;
    const int roles_a[] = {a->params, a->grads, a->momentum, a->input, a->labels, a->anchor, a->adam_m,
                           a->adam_v, a->master, a->input_next, a->labels_next, a->scalars, a->blas_ws,
                           a->loss_op, a->optimizer_op};
    const int roles_b[] = {b->params, b->grads, b->momentum, b->input, b->labels, b->anchor, b->adam_m,
                           b->adam_v, b->master, b->input_next, b->labels_next, b->scalars, b->blas_ws,
                           b->loss_op, b->optimizer_op};
    if (memcmp(roles_a, roles_b, sizeof roles_a) != 0) return 0;
    for (int i = 0; i < a->n_buffers; i++)
        if (!same_buffer(&a->buffers[i], &b->buffers[i])) return 0;
    for (int i = 0; i < a->n_ops; i++)
        if (!same_op(&a->ops[i], &b->ops[i])) return 0;
    return 1;
}
