/* wire.c: a message struct to JSON and back, driven by its table (wire.h). */
#include "proto/wire.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* The member a field describes, in the struct at s. */
static void *wire_at(const void *s, size_t offset) { return (char *)s + offset; }

/* An INT field's bound as an int64 (2^63 and beyond saturate). */
static int64_t wire_int_bound(double v) {
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775807.0) return INT64_MIN;
    return (int64_t)v;
}

/* A LIST member as a JSON array (NULL when out of memory). */
static cJSON *wire_encode_list(const hfl_wire_field *f, const hfl_wire_list *l) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < l->n; i++) {
        const void *item = (const char *)l->v + (size_t)i * f->size;
        cJSON *x = f->sub ? hfl_wire_encode(f->sub, item) : cJSON_CreateNumber((double)*(const int64_t *)item);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

cJSON *hfl_wire_encode(const hfl_wire_msg *d, const void *s) {
    cJSON *o = cJSON_CreateObject();
    if (o && hfl_wire_encode_into(d, s, o) == 0) return o;
    cJSON_Delete(o);
    return NULL;
}

int hfl_wire_encode_into(const hfl_wire_msg *d, const void *s, cJSON *o) {
    for (int i = 0; i < d->n; i++) {
        const hfl_wire_field *f = &d->fields[i];
        const void *v = wire_at(s, f->offset);
        cJSON *item = NULL;
        if (f->optional && !*(const int *)wire_at(s, f->has)) {
            if (f->optional == HFL_WIRE_NULLABLE && !cJSON_AddNullToObject(o, f->name)) return -1;
            continue;
        }
        switch (f->kind) {
        case HFL_WIRE_INT: item = cJSON_CreateNumber((double)*(const int64_t *)v); break;
        case HFL_WIRE_NUM: item = cJSON_CreateNumber(*(const double *)v); break;
        case HFL_WIRE_STR: item = cJSON_CreateString((const char *)v); break;
        case HFL_WIRE_BOOL: item = cJSON_CreateBool(*(const int *)v); break;
        case HFL_WIRE_OBJ:
            item = f->sub ? hfl_wire_encode(f->sub, v) : cJSON_Duplicate(*(const cJSON *const *)v, 1);
            break;
        case HFL_WIRE_LIST: item = wire_encode_list(f, v); break;
        }
        if (!item) return -1;
        cJSON_AddItemToObject(o, f->name, item);
    }
    return 0;
}

/* A JSON array into a LIST member, allocated here (freed by hfl_wire_free,
 * which an item decoded in part needs too: n counts it first). */
static int wire_decode_list(const hfl_wire_field *f, const cJSON *item, hfl_wire_list *l, char *err) {
    if (!cJSON_IsArray(item)) return hfl_errf(err, "field '%s' must be an array", f->name);
    int n = cJSON_GetArraySize(item);
    if (n > f->max_items) return hfl_errf(err, "field '%s' holds %d items, more than %d", f->name, n, f->max_items);
    l->v = hfl_calloc(n ? (size_t)n : 1, f->size);
    l->n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, item) {
        void *x = (char *)l->v + (size_t)l->n++ * f->size;
        if (f->sub) {
            if (!cJSON_IsObject(e)) return hfl_errf(err, "field '%s' holds an item that is not an object", f->name);
            if (hfl_wire_decode(f->sub, e, x, err) != 0) return -1;
        } else {
            double v = cJSON_IsNumber(e) ? e->valuedouble : NAN;
            if (!(v >= f->lo && v <= f->hi) || v != (double)(int64_t)v)
                return hfl_errf(err, "field '%s' holds an item that is not an integer in [%g, %g]", f->name, f->lo,
                                f->hi);
            *(int64_t *)x = (int64_t)v;
        }
    }
    return 0;
}

/* One field present in meta, into its member. */
static int wire_decode_one(const hfl_wire_field *f, const cJSON *meta, const cJSON *item, void *v, char *err) {
    switch (f->kind) {
    case HFL_WIRE_INT:
        return hfl_meta_int(meta, f->name, wire_int_bound(f->lo), wire_int_bound(f->hi), (int64_t *)v, err);
    case HFL_WIRE_NUM: return hfl_meta_num(meta, f->name, f->lo, f->hi, (double *)v, err);
    case HFL_WIRE_STR: {
        size_t max = (size_t)f->hi < f->size - 1 ? (size_t)f->hi : f->size - 1;
        return hfl_meta_str(meta, f->name, max, (char *)v, err);
    }
    case HFL_WIRE_BOOL:
        if (!cJSON_IsBool(item)) return hfl_errf(err, "field '%s' is not true or false", f->name);
        *(int *)v = cJSON_IsTrue(item);
        return 0;
    case HFL_WIRE_OBJ:
        if (f->sub) {
            if (!cJSON_IsObject(item)) return hfl_errf(err, "field '%s' must be an object", f->name);
            return hfl_wire_decode(f->sub, item, v, err);
        }
        if (!f->schema && !cJSON_IsObject(item)) return hfl_errf(err, "field '%s' must be an object", f->name);
        if (f->schema && hfl_meta_check_fields(item, f->name, f->schema, f->n_schema, err) != 0) return -1;
        *(const cJSON **)v = item;
        return 0;
    case HFL_WIRE_LIST: return wire_decode_list(f, item, v, err);
    }
    return hfl_errf(err, "field '%s' has an unknown kind in its table", f->name);
}

/* The table's field named `name`, or NULL. */
static const hfl_wire_field *wire_find(const hfl_wire_msg *d, const char *name) {
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->fields[i].name, name)) return &d->fields[i];
    return NULL;
}

int hfl_wire_decode(const hfl_wire_msg *d, const cJSON *meta, void *s, char *err) {
    if (!cJSON_IsObject(meta)) return hfl_errf(err, "%s: metadata is not an object", d->name);
    if (d->strict) {
        const cJSON *item;
        cJSON_ArrayForEach(item, meta) {
            if (!item->string || !wire_find(d, item->string))
                return hfl_errf(err, "field '%s' is not one this coordinator knows",
                                item->string ? item->string : "");
            /* a name twice: the second would be stored beside the checked first */
            for (const cJSON *o = meta->child; o != item; o = o->next)
                if (o->string && !strcmp(o->string, item->string))
                    return hfl_errf(err, "field '%s' appears twice", item->string);
        }
    }
    for (int i = 0; i < d->n; i++) {
        const hfl_wire_field *f = &d->fields[i];
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(meta, f->name);
        if (!item && f->optional) continue;
        if (f->optional >= HFL_WIRE_NULLABLE && f->kind == HFL_WIRE_NUM && cJSON_IsNull(item)) {
            *(double *)wire_at(s, f->offset) = NAN; /* cJSON's null for a NaN */
            if (f->optional == HFL_WIRE_NAN_NULL) *(int *)wire_at(s, f->has) = 1;
            continue;
        }
        if (!item) return hfl_errf(err, "missing field '%s'", f->name);
        if (wire_decode_one(f, meta, item, wire_at(s, f->offset), err) != 0) return -1;
        if (f->optional) *(int *)wire_at(s, f->has) = 1;
    }
    return 0;
}

void hfl_wire_free(const hfl_wire_msg *d, void *s) {
    for (int i = 0; i < d->n; i++) {
        const hfl_wire_field *f = &d->fields[i];
        void *v = wire_at(s, f->offset);
        if (f->kind == HFL_WIRE_OBJ && f->sub) hfl_wire_free(f->sub, v);
        if (f->kind != HFL_WIRE_LIST) continue;
        hfl_wire_list *l = v;
        for (int j = 0; f->sub && j < l->n; j++) hfl_wire_free(f->sub, (char *)l->v + (size_t)j * f->size);
        free(l->v);
        l->v = NULL, l->n = 0;
    }
}

uint8_t *hfl_wire_message(const hfl_wire_msg *d, const void *s, const void *payload, size_t payload_len,
                          size_t *out_len) {
    cJSON *meta = hfl_wire_encode(d, s);
    if (!meta) return NULL;
    uint8_t *m = hfl_msg_encode(d->type, meta, payload, payload_len, out_len);
    cJSON_Delete(meta);
    return m;
}
