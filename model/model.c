/* model.c: model specs (the built-in `mlp` and dense/ReLU chains) and the
 * deterministic parameter initialisation.
 *
 * A spec only describes shapes and where each layer's parameters sit in the
 * one contiguous vector; the trainer (trainer.c) owns the buffers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/philox.h"
#include "model/model.h"
#include "util/util.h"

int hfl_model_spec_mlp(hfl_model_spec *spec, const char *name, const int *dims, int n_dims,
                       char *err) {
    if (n_dims < 2) return hfl_errf(err, "model '%s': needs at least 2 widths, got %d", name, n_dims);
    /* n_dims - 1 dense layers and n_dims - 2 ReLUs between them. */
    if (2 * n_dims - 3 > HFL_MAX_LAYERS)
        return hfl_errf(err, "model '%s': %d widths exceed %d layers", name, n_dims, HFL_MAX_LAYERS);
    for (int i = 0; i < n_dims; i++)
        if (dims[i] < 1) return hfl_errf(err, "model '%s': width %d is %d", name, i, dims[i]);

    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "%s", name);
    size_t off = 0;
    for (int i = 0; i + 1 < n_dims; i++) {
        hfl_layer *d = &spec->layers[spec->n_layers++];
        d->kind = HFL_LAYER_DENSE;
        d->in = dims[i];
        d->out = dims[i + 1];
        d->param_off = off;
        d->n_params = (size_t)d->out * d->in + d->out;
        off += d->n_params;
        if (i + 2 < n_dims) {
            hfl_layer *r = &spec->layers[spec->n_layers++];
            r->kind = HFL_LAYER_RELU;
            r->in = r->out = dims[i + 1];
            r->param_off = off;
            r->n_params = 0;
        }
    }
    spec->in_dim = dims[0];
    spec->n_classes = dims[n_dims - 1];
    spec->n_params = off;
    return 0;
}

int hfl_model_builtin(const char *name, hfl_model_spec *spec, char *err) {
    if (name && strcmp(name, "mlp") == 0) {
        static const int mlp_dims[] = {784, 200, 200, 10};
        return hfl_model_spec_mlp(spec, "mlp", mlp_dims, 4, err);
    }
    return hfl_errf(err, "unknown model '%s' (known: mlp)", name ? name : "(null)");
}

/* Element i of layer l's block (weights then bias) draws philox counter
 * (seed, HFL_STREAM_INIT, round 0, client 0, tensor l, index i), so any one
 * parameter can be regenerated on its own, on the CPU or on a GPU. */
void hfl_model_init_params(const hfl_model_spec *spec, float *params, uint64_t seed) {
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *ly = &spec->layers[l];
        if (ly->kind != HFL_LAYER_DENSE) continue;
        float bound = 1.0f / sqrtf((float)ly->in);
        float *p = params + ly->param_off;
        for (size_t i = 0; i < ly->n_params; i++) {
            float u = hfl_u01(hfl_philox_u32(seed, HFL_STREAM_INIT, 0, 0, (uint32_t)l, i));
            p[i] = bound * (2.0f * u - 1.0f);
        }
    }
}
