/* chooser.c: candidates, predictions and the choice (see chooser.h). */
#include "model/chooser.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static const int chooser_ladder[] = {1, 8, 32, 128, 512};
static const hfl_ckpt_kind chooser_kinds[] = {HFL_CKPT_NONE, HFL_CKPT_SQRT, HFL_CKPT_OPTIMAL, HFL_CKPT_FULL};

double hfl_chooser_calibrate(const hfl_backend *be) {
    enum { N = 256 };
    float *a = be->alloc(sizeof(float) * N * N * 3);
    float *b = a + N * N, *c = b + N * N;
    be->fill(a, 0.5f, N * N);
    be->fill(b, 0.25f, N * N);
    be->sgemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N); /* warm up: BLAS buffers, caches */
    double t0 = hfl_now(), t;
    int reps = 0;
    do {
        be->sgemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        reps++;
    } while ((t = hfl_now() - t0) < 0.05);
    be->free(a);
    return 2.0 * N * N * N * reps / t / 1e9;
}

void hfl_candidate_config(const hfl_candidate *c, int momentum, hfl_plan_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->batch = c->batch;
    cfg->ckpt = c->ckpt;
    cfg->ckpt_budget = c->ckpt_budget;
    cfg->momentum = momentum;
    cfg->act_elem_bytes = sizeof(float);
}

/* `optimal` gets the activation budget left once everything but activations is paid for. */
static size_t optimal_budget(const hfl_plan *none, uint64_t usable) {
    size_t other = none->arena_bytes > none->chain_peak ? none->arena_bytes - none->chain_peak : 0;
    return usable > other ? (size_t)(usable - other) : 0;
}

static int better(const hfl_candidate *a, const hfl_candidate *b, int prefer) {
    if (prefer > 0 && (a->batch == prefer) != (b->batch == prefer)) return a->batch == prefer;
    if (a->samples_per_s != b->samples_per_s) return a->samples_per_s > b->samples_per_s;
    if (a->batch != b->batch) return a->batch > b->batch;
    return a->predicted < b->predicted;
}

int hfl_choose(const hfl_model_spec *spec, const hfl_chooser_input *in, hfl_choice *out, char *err) {
    memset(out, 0, sizeof *out);
    out->chosen = -1;
    out->min_budget = UINT64_MAX;
    uint64_t usable = (uint64_t)((double)in->budget * (1.0 - in->headroom));
    double fwd = (double)hfl_model_forward_flops(spec);
    hfl_plan *plan = hfl_malloc(sizeof *plan), *none = hfl_malloc(sizeof *none);
    int ladder[sizeof chooser_ladder / sizeof *chooser_ladder + 1], n_ladder = 0;
    for (size_t bi = 0; bi < sizeof chooser_ladder / sizeof *chooser_ladder; bi++) {
        int b = chooser_ladder[bi];
        if (in->prefer_batch > 0 && b > in->prefer_batch && (n_ladder == 0 || ladder[n_ladder - 1] < in->prefer_batch))
            ladder[n_ladder++] = in->prefer_batch;
        if (b <= in->max_batch && b != in->prefer_batch) ladder[n_ladder++] = b;
    }
    if (in->prefer_batch > 0 && (n_ladder == 0 || ladder[n_ladder - 1] < in->prefer_batch))
        ladder[n_ladder++] = in->prefer_batch;
    int rc = 0;
    for (int bi = 0; bi < n_ladder && rc == 0; bi++) {
        int batch = ladder[bi];
        for (size_t ki = 0; ki < sizeof chooser_kinds / sizeof *chooser_kinds; ki++) {
            hfl_candidate *c = &out->rows[out->n];
            c->batch = batch;
            c->ckpt = chooser_kinds[ki];
            c->ckpt_budget = c->ckpt == HFL_CKPT_OPTIMAL
                                 ? optimal_budget(none, usable > in->overhead ? usable - in->overhead : 0)
                                 : SIZE_MAX;
            hfl_plan_config cfg;
            hfl_candidate_config(c, in->momentum, &cfg);
            if ((rc = hfl_plan_make(spec, &cfg, c->ckpt == HFL_CKPT_NONE ? none : plan, err)) != 0) break;
            const hfl_plan *p = c->ckpt == HFL_CKPT_NONE ? none : plan;
            c->arena = p->arena_bytes;
            c->predicted = p->arena_bytes + in->overhead;
            double flops = 3.0 * fwd * batch + p->ckpt.recompute;
            c->samples_per_s = in->gflops > 0 ? batch / (flops / (in->gflops * 1e9)) : 0;
            c->fits = c->predicted <= usable;
            uint64_t need = (uint64_t)ceil((double)c->predicted / (1.0 - in->headroom));
            if (need < out->min_budget) out->min_budget = need;
            if (c->fits && (out->chosen < 0 || better(c, &out->rows[out->chosen], in->prefer_batch))) out->chosen = out->n;
            out->n++;
        }
    }
    free(plan);
    free(none);
    return rc;
}
