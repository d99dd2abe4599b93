/* verify.c: a candidate configuration's real peak, measured before it is
 * trusted (hfl-client --plan --verify, and a client's plan before its first
 * round).
 *
 * One training step of the candidate's plan on synthetic inputs (the peak
 * does not depend on the values): in a forked child on the CPU, in-process
 * on a GPU (model/measure.h). The median of three: before the meter left
 * out library code, one child's peak strayed by ~150 KiB with where ASLR put
 * the libraries; the three now agree to the byte on the CPU (seen), and the
 * median stays as insurance for a GPU's free-memory figure, which other
 * processes move. */
#include <stdlib.h>

#include "client/client.h"
#include "kernels/philox.h"
#include "model/measure.h"
#include "util/util.h"

struct client_probe {
    const hfl_model_spec *spec;
    int max_batch;
    float *x, *params;
    int32_t *y;
};

void client_synthetic(const hfl_model_spec *spec, int rows, float *x, int32_t *y) {
    /* A language model reads token ids: integers below its vocabulary. */
    int vocab = spec->layers[0].kind == HFL_LAYER_EMBED ? spec->layers[0].vocab : 0;
    for (size_t i = 0; i < (size_t)rows * spec->in_dim; i++) {
        uint32_t bits = hfl_philox_u32(9, HFL_STREAM_SHUFFLE, 0, 0, 0, i);
        x[i] = vocab ? (float)(bits % (uint32_t)vocab) : hfl_u01(bits);
    }
    for (size_t i = 0; i < (size_t)rows * spec->label_rows; i++)
        y[i] = (int32_t)(hfl_philox_u32(9, HFL_STREAM_SHUFFLE, 0, 0, 1, (uint64_t)i) % (uint32_t)spec->n_classes);
}

client_probe *client_probe_new(const hfl_model_spec *spec, int max_batch) {
    client_probe *p = hfl_calloc(1, sizeof *p);
    size_t nx = (size_t)max_batch * spec->in_dim;
    p->spec = spec;
    p->max_batch = max_batch;
    p->x = hfl_malloc(nx * sizeof(float));
    p->params = hfl_malloc(spec->n_params * sizeof(float));
    p->y = hfl_malloc(sizeof(int32_t) * (size_t)max_batch * spec->label_rows);
    client_synthetic(spec, max_batch, p->x, p->y);
    hfl_model_init_params(spec, p->params, 1);
    return p;
}

void client_probe_free(client_probe *p) {
    if (!p) return;
    free(p->x);
    free(p->params);
    free(p->y);
    free(p);
}

int client_probe_measure(client_probe *p, const hfl_backend *be, const hfl_candidate *c,
                         unsigned opt_state, uint64_t *measured, char *err) {
    if (c->batch > p->max_batch)
        return hfl_errf(err, "batch %d is larger than the probe's %d", c->batch, p->max_batch);
    hfl_plan *plan = hfl_malloc(sizeof *plan);
    hfl_plan_config cfg;
    hfl_candidate_config(c, opt_state, &cfg);
    hfl_plan_config_for_backend(&cfg, be);
    int rc = hfl_plan_make(p->spec, &cfg, plan, err);
    if (rc == 0 && plan->arena_bytes != c->arena) rc = hfl_errf(err, "the plan changed");
    uint64_t g[3];
    for (int k = 0; rc == 0 && k < 3; k++) {
        hfl_step_measure m;
        rc = hfl_measure_step_on(be, p->spec, plan, p->params, p->x, p->y, &m, err);
        g[k] = m.growth;
    }
    free(plan);
    if (rc != 0) return -1;
    uint64_t lo = g[0] < g[1] ? g[0] : g[1], hi = g[0] < g[1] ? g[1] : g[0];
    *measured = g[2] < lo ? lo : g[2] > hi ? hi : g[2];
    return 0;
}
