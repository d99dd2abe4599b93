/* safetensors.c: a model's parameters as a safetensors file (see safetensors.h). */
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define MAX_TENSORS 1024 /* a file with more is refused before anything is sorted */
#define MAX_DIMS 8

/* One tensor hfl expects: its name, shape and place in the parameter vector. */
typedef struct {
    char name[48];
    int ndim;
    int64_t shape[4];
    size_t off, count; /* floats */
} want_tensor;

static int expected(const hfl_model_spec *spec, want_tensor *t) {
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
    }
    return n;
}

static int little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

uint8_t *hfl_safetensors_encode(const hfl_model_spec *spec, const float *params, size_t *len, char *err) {
    if (!little_endian()) return hfl_errf(err, "safetensors: this host is big-endian"), NULL;
    want_tensor t[2 * HFL_MAX_LAYERS];
    int n = expected(spec, t);
    char *spec_json = hfl_model_spec_to_json(spec, err);
    if (!spec_json) return NULL;
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddStringToObject(meta, "hfl_model", spec_json);
    free(spec_json);
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(t[i].off * sizeof(float))));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)((t[i].off + t[i].count) * sizeof(float))));
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!text) return hfl_errf(err, "safetensors: out of memory printing the header"), NULL;
    size_t hl = strlen(text), padded = (hl + 7) / 8 * 8; /* the data starts 8-byte aligned */
    size_t data = spec->n_params * sizeof(float);
    uint8_t *out = malloc(8 + padded + data);
    if (!out) {
        free(text);
        return hfl_errf(err, "safetensors: out of memory for %zu bytes", 8 + padded + data), NULL;
    }
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(out + 8, text, hl);
    memset(out + 8 + hl, ' ', padded - hl);
    memcpy(out + 8 + padded, params, data);
    free(text);
    *len = 8 + padded + data;
    return out;
}

typedef struct {
    uint64_t begin, end;
    const char *name;
} span;

static int by_begin(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static int whole(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0) ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return 0;
    *out = (uint64_t)v->valuedouble;
    return 1;
}

/* One entry's dtype, shape and offsets, checked against the data buffer. */
static int check_entry(const cJSON *e, uint64_t dlen, span *s, int64_t shape[MAX_DIMS], int *ndim, char *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return hfl_errf(err, "tensor '%s' is not an object", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return hfl_errf(err, "tensor '%s' has no dtype string", name);
    if (strcmp(dt->valuestring, "F32") != 0)
        return hfl_errf(err, "tensor '%s' has dtype %.16s; hfl reads F32", name, dt->valuestring);
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > MAX_DIMS)
        return hfl_errf(err, "tensor '%s': shape must be an array of at most %d sizes", name, MAX_DIMS);
    uint64_t count = 1, dim;
    *ndim = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        if (!whole(d, &dim) || dim > ((uint64_t)1 << 40))
            return hfl_errf(err, "tensor '%s': shape holds something other than a size", name);
        if (dim && count > ((uint64_t)1 << 58) / dim) return hfl_errf(err, "tensor '%s': shape too large", name);
        count *= dim;
        shape[(*ndim)++] = (int64_t)dim;
    }
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !whole(cJSON_GetArrayItem(of, 0), &s->begin) ||
        !whole(cJSON_GetArrayItem(of, 1), &s->end))
        return hfl_errf(err, "tensor '%s': data_offsets must be two byte offsets", name);
    if (s->begin > s->end || s->end > dlen)
        return hfl_errf(err, "tensor '%s': data_offsets [%llu, %llu] outside the %llu-byte data buffer", name,
                        (unsigned long long)s->begin, (unsigned long long)s->end, (unsigned long long)dlen);
    if (s->end - s->begin != count * sizeof(float))
        return hfl_errf(err, "tensor '%s': %llu bytes for a shape of %llu F32 values", name,
                        (unsigned long long)(s->end - s->begin), (unsigned long long)count);
    s->name = name;
    return 0;
}

static void shape_text(const int64_t *shape, int ndim, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(out + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

/* The structure of the header: every entry valid, the buffer indexed
 * exactly once. */
static int check_header(const cJSON *h, uint64_t dlen, char *err) {
    span *s = hfl_malloc(sizeof(span) * MAX_TENSORS);
    int n = 0, rc = 0, metas = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, h) {
        if (!strcmp(e->string, "__metadata__")) {
            if (metas++) {
                rc = hfl_errf(err, "__metadata__ appears twice");
                break;
            }
            const cJSON *m;
            if (!cJSON_IsObject(e)) rc = hfl_errf(err, "__metadata__ is not an object");
            cJSON_ArrayForEach(m, e) if (rc == 0 && !cJSON_IsString(m))
                rc = hfl_errf(err, "__metadata__ '%s' is not a string", m->string);
            if (rc) break;
            continue;
        }
        if (n == MAX_TENSORS) {
            rc = hfl_errf(err, "more than %d tensors", MAX_TENSORS);
            break;
        }
        for (const cJSON *o = h->child; o != e; o = o->next)
            if (!strcmp(o->string, e->string)) rc = hfl_errf(err, "tensor '%s' appears twice", e->string);
        int64_t shape[MAX_DIMS];
        int ndim;
        if (rc || (rc = check_entry(e, dlen, &s[n], shape, &ndim, err)) != 0) break;
        n++;
    }
    if (rc == 0) {
        qsort(s, (size_t)n, sizeof *s, by_begin);
        uint64_t at = 0;
        for (int i = 0; i < n && rc == 0; i++) {
            if (s[i].begin < at)
                rc = hfl_errf(err, "tensors '%s' and '%s' overlap", s[i - 1].name, s[i].name);
            else if (s[i].begin > at)
                rc = hfl_errf(err, "bytes [%llu, %llu) of the data buffer belong to no tensor", (unsigned long long)at,
                              (unsigned long long)s[i].begin);
            at = s[i].end;
        }
        if (rc == 0 && at != dlen)
            rc = hfl_errf(err, "bytes [%llu, %llu) of the data buffer belong to no tensor", (unsigned long long)at,
                          (unsigned long long)dlen);
    }
    free(s);
    return rc;
}

int hfl_safetensors_decode(const uint8_t *buf, size_t len, const hfl_model_spec *spec, float *params,
                           char *err) {
    if (!little_endian()) return hfl_errf(err, "safetensors: this host is big-endian");
    if (len < 8) return hfl_errf(err, "%zu bytes: too short for a safetensors header length", len);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)buf[i] << (8 * i);
    if (hl > HFL_SAFETENSORS_MAX_HEADER || hl > len - 8)
        return hfl_errf(err, "header length %llu does not fit the file's %zu bytes (at most %u)", (unsigned long long)hl,
                        len, HFL_SAFETENSORS_MAX_HEADER);
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts((const char *)buf + 8, (size_t)hl, &end, 0);
    if (!h) return hfl_errf(err, "the header is not JSON");
    int rc = 0;
    for (const char *p = end; p < (const char *)buf + 8 + hl && rc == 0; p++)
        if (*p != ' ') rc = hfl_errf(err, "the header has bytes after its JSON object other than space padding");
    if (rc == 0 && !cJSON_IsObject(h)) rc = hfl_errf(err, "the header is not a JSON object");
    const uint8_t *data = buf + 8 + hl;
    uint64_t dlen = len - 8 - hl;
    if (rc == 0) rc = check_header(h, dlen, err);
    want_tensor t[2 * HFL_MAX_LAYERS];
    int n = expected(spec, t);
    for (int i = 0; rc == 0 && i < n; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(h, t[i].name);
        if (!e) {
            rc = hfl_errf(err, "tensor '%s' is missing (model %s)", t[i].name, spec->name);
            break;
        }
        int64_t shape[MAX_DIMS];
        int ndim = 0, same;
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(e, "shape")) shape[ndim++] = (int64_t)d->valuedouble;
        same = ndim == t[i].ndim;
        for (int k = 0; same && k < ndim; k++) same = shape[k] == t[i].shape[k];
        if (!same) {
            char got[128], want[128];
            shape_text(shape, ndim, got, sizeof got);
            shape_text(t[i].shape, t[i].ndim, want, sizeof want);
            rc = hfl_errf(err, "tensor '%s' has shape %s where model %s has %s", t[i].name, got, spec->name, want);
        }
    }
    if (rc == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, h) {
            int known = !strcmp(e->string, "__metadata__");
            for (int i = 0; i < n && !known; i++) known = !strcmp(e->string, t[i].name);
            if (!known) {
                rc = hfl_errf(err, "tensor '%s' is not in model %s", e->string, spec->name);
                break;
            }
        }
    }
    if (rc == 0)
        for (int i = 0; i < n; i++) {
            const cJSON *of = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, t[i].name),
                                                               "data_offsets");
            memcpy(params + t[i].off, data + (size_t)cJSON_GetArrayItem(of, 0)->valuedouble, t[i].count * sizeof(float));
        }
    cJSON_Delete(h);
    return rc;
}

int hfl_safetensors_save(const char *path, const hfl_model_spec *spec, const float *params, char *err) {
    size_t len;
    char e[HFL_ERR_LEN];
    uint8_t *buf = hfl_safetensors_encode(spec, params, &len, e);
    if (!buf) return hfl_errf(err, "%s: %s", path, e);
    int rc = hfl_write_file_atomic(path, buf, len, e);
    free(buf);
    return rc == 0 ? 0 : hfl_errf(err, "%s", e);
}

int hfl_safetensors_load(const char *path, const hfl_model_spec *spec, float *params, char *err) {
    size_t len;
    char e[HFL_ERR_LEN];
    uint8_t *buf = (uint8_t *)hfl_read_file(path, &len, e);
    if (!buf) return hfl_errf(err, "%s", e);
    int rc = hfl_safetensors_decode(buf, len, spec, params, e);
    free(buf);
    return rc == 0 ? 0 : hfl_errf(err, "%s: %s", path, e);
}
