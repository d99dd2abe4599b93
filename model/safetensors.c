/* safetensors.c: a model's parameters as a safetensors file (see safetensors.h). */
#include "model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/lora.h"
#include "util/stfile.h"
#include "util/util.h"


/* a layer's tensors, and a LoRA block's 8 adapters */
#define ST_MAX_TENSORS ((HFL_MAX_PARAM_TENSORS + 8) * HFL_MAX_LAYERS)

/* One tensor hfl expects: its name, shape and place in the parameter vector. */
typedef struct {
    char name[48];
    int ndim;
    int64_t shape[4];
    size_t off, count; /* floats */
    int adapter;       /* a LoRA adapter: the file may hold all of them or none */
} want_tensor;

/* A language model's tensors by nanoGPT's state_dict names: embedding
 * "transformer.wte.weight" [V, C], "transformer.wpe.weight" [T, C]; block b
 * (layer b + 1) "transformer.h.<b>.<its tensor>" ([out, in] matrices, the
 * rest vectors); the head "transformer.ln_f.weight", ".bias". The tied
 * output projection is wte (nanoGPT's lm_head.weight is that tensor). LoRA
 * adapters follow as PEFT names them inside a block, e.g.
 * "transformer.h.<b>.attn.c_attn.lora_A.weight" [r, C] and ".lora_B.weight"
 * [3C, r]. */
static int expected_lm(const hfl_model_spec *spec, want_tensor *t) {
    int n = 0;
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *ly = &spec->layers[l];
        hfl_param_tensor pt[HFL_MAX_PARAM_TENSORS];
        int nt = hfl_layer_ops_for(ly->kind)->param_tensors(ly, pt);
        for (int i = 0; i < nt; i++, n++) {
            if (ly->kind == HFL_LAYER_GPT_BLOCK)
                snprintf(t[n].name, sizeof t[n].name, "transformer.h.%d.%s", l - 1, pt[i].name);
            else
                snprintf(t[n].name, sizeof t[n].name, "transformer.%s", pt[i].name);
            t[n].ndim = pt[i].cols ? 2 : 1;
            t[n].shape[0] = pt[i].cols ? pt[i].count / (size_t)pt[i].cols : pt[i].count;
            t[n].shape[1] = (size_t)pt[i].cols;
            t[n].count = pt[i].count;
            t[n].off = ly->param_off + pt[i].offset;
            t[n].adapter = 0;
        }
    }
    static const char *const proj[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *ly = &spec->layers[l];
        if (!ly->lora_rank) continue;
        int C = ly->in_shape.w, r = ly->lora_rank, in[4] = {C, C, C, 4 * C}, out[4] = {3 * C, C, 4 * C, C};
        size_t off[8];
        hfl_gpt_lora_offsets(C, r, off);
        for (int k = 0; k < 8; k++, n++) {
            int a = k % 2 == 0, j = k / 2;
            snprintf(t[n].name, sizeof t[n].name, "transformer.h.%d.%s.lora_%s.weight", l - 1, proj[j], a ? "A" : "B");
            t[n].ndim = 2;
            t[n].shape[0] = a ? r : out[j];
            t[n].shape[1] = a ? in[j] : r;
            t[n].count = (size_t)r * (a ? in[j] : out[j]);
            t[n].off = ly->lora_off + off[k];
            t[n].adapter = 1;
        }
    }
    return n;
}

static int expected(const hfl_model_spec *spec, want_tensor *t) {
    if (spec->layers[0].kind == HFL_LAYER_EMBED) return expected_lm(spec, t);
    int n = 0;
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *ly = &spec->layers[l];
        if (!ly->n_params) continue;
        want_tensor *w = &t[n++], *b = &t[n++];
        snprintf(w->name, sizeof w->name, "layers.%d.weight", l);
        snprintf(b->name, sizeof b->name, "layers.%d.bias", l);
        if (ly->kind == HFL_LAYER_CONV2D) {
            w->ndim = 4;
            w->shape[0] = ly->units, w->shape[1] = ly->in_shape.c, w->shape[2] = w->shape[3] = ly->kernel;
        } else { /* dense */
            w->ndim = 2;
            w->shape[0] = ly->units, w->shape[1] = ly->in;
        }
        w->count = ly->n_params - (size_t)ly->units;
        w->off = ly->param_off;
        b->ndim = 1, b->shape[0] = ly->units, b->count = (size_t)ly->units, b->off = ly->param_off + w->count;
        w->adapter = b->adapter = 0;
    }
    return n;
}

/* The file's tensors in spec's order (put[], n of them, named in t[] and
 * pointing into params), and its metadata (the spec as JSON, malloc'd in
 * *spec_json); -1 with err. */
static int safetensors_puts(const hfl_model_spec *spec, const float *params, want_tensor *t, hfl_st_put *put,
                            char **spec_json, char *err) {
    int n = expected(spec, t);
    for (int i = 0; i < n; i++) {
        put[i] = (hfl_st_put){.name = t[i].name, .dtype = "F32", .ndim = t[i].ndim, .data = params + t[i].off};
        memcpy(put[i].shape, t[i].shape, sizeof t[i].shape);
    }
    *spec_json = hfl_model_spec_to_json(spec, err);
    return *spec_json ? n : -1;
}

uint8_t *hfl_safetensors_encode(const hfl_model_spec *spec, const float *params, size_t *len, char *err) {
    want_tensor *t = hfl_calloc(ST_MAX_TENSORS, sizeof *t); /* every field 0: adapter too */
    hfl_st_put *put = hfl_malloc(sizeof *put * ST_MAX_TENSORS);
    char *spec_json;
    int n = safetensors_puts(spec, params, t, put, &spec_json, err);
    uint8_t *out = NULL;
    if (n >= 0) {
        const char *meta[4] = {"format", "pt", "hfl_model", spec_json};
        out = hfl_st_encode(put, n, meta, 2, len, err);
    }
    free(spec_json), free(put), free(t);
    return out;
}

/* Copies the indexed file f (a parsed buffer or an opened file) into
 * params once every tensor is checked against spec's: no stranger, F32,
 * the shape, none missing (the adapters may all be). -1 with err: nothing
 * written, except when a read from the file fails part way (a file that
 * shrank after it was opened), which the callers treat as fatal. */
static int load_tensors(const hfl_st_file *f, const hfl_model_spec *spec, float *params, char *err) {
    want_tensor *t = hfl_calloc(ST_MAX_TENSORS, sizeof *t); /* every field 0: adapter too */
    int n = expected(spec, t), rc = 0, adapters = 0;
    for (int i = 0; rc == 0 && i < f->n; i++) {
        const hfl_st_tensor *e = &f->t[i];
        int k = 0;
        while (k < n && strcmp(e->name, t[k].name)) k++;
        if (k < n) adapters += t[k].adapter;
        if (k == n) {
            rc = hfl_errf(err, "tensor '%s' is not in model %s", e->name, spec->name);
        } else if (strcmp(e->dtype, "F32")) {
            rc = hfl_errf(err, "tensor '%s' has dtype %s; hfl reads F32", e->name, e->dtype);
        } else {
            int same = e->ndim == t[k].ndim;
            for (int d = 0; same && d < e->ndim; d++) same = e->shape[d] == t[k].shape[d];
            if (!same) {
                char got[128], want[128];
                hfl_st_shape_text(e->shape, e->ndim, got, sizeof got);
                hfl_st_shape_text(t[k].shape, t[k].ndim, want, sizeof want);
                rc = hfl_errf(err, "tensor '%s' has shape %s where model %s has %s", e->name, got, spec->name, want);
            }
        }
    }
    /* A base model without adapters loads into a LoRA spec: they keep their start. */
    int skip_adapters = adapters == 0;
    for (int k = 0; rc == 0 && k < n; k++)
        if (!hfl_st_get(f, t[k].name) && !(t[k].adapter && skip_adapters))
            rc = hfl_errf(err, "tensor '%s' is missing (model %s)", t[k].name, spec->name);
    for (int k = 0; rc == 0 && k < n; k++)
        if (!(t[k].adapter && skip_adapters)) rc = hfl_st_read(f, hfl_st_get(f, t[k].name), params + t[k].off, err);
    free(t);
    return rc;
}

int hfl_safetensors_decode(const uint8_t *buf, size_t len, const hfl_model_spec *spec, float *params,
                           char *err) {
    hfl_st_file f;
    if (hfl_st_parse(buf, len, &f, err) != 0) return -1;
    int rc = load_tensors(&f, spec, params, err);
    hfl_st_free(&f);
    return rc;
}

int hfl_safetensors_save(const char *path, const hfl_model_spec *spec, const float *params, char *err) {
    want_tensor *t = hfl_calloc(ST_MAX_TENSORS, sizeof *t);
    hfl_st_put *put = hfl_malloc(sizeof *put * ST_MAX_TENSORS);
    char e[HFL_ERR_LEN], *spec_json;
    int n = safetensors_puts(spec, params, t, put, &spec_json, e), rc = -1;
    if (n < 0) {
        hfl_errf(err, "%s: %s", path, e);
    } else {
        const char *meta[4] = {"format", "pt", "hfl_model", spec_json};
        rc = hfl_st_write(path, put, n, meta, 2, err); /* streamed: no copy of the model in memory */
    }
    free(spec_json), free(put), free(t);
    return rc;
}

int hfl_safetensors_load(const char *path, const hfl_model_spec *spec, float *params, char *err) {
    hfl_st_file f;
    char e[HFL_ERR_LEN];
    if (hfl_st_open(path, &f, err) != 0) return -1; /* err names path */
    int rc = load_tensors(&f, spec, params, e); /* each tensor read straight into params */
    hfl_st_free(&f);
    return rc == 0 ? 0 : hfl_errf(err, "%s: %s", path, e);
}
