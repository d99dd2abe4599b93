/* schema.c: an object a peer wants kept, held to a schema of known fields
 * (msg.h, hfl_meta_check_fields).
 *
 * The coordinator stores a client's `device` and `plan` and copies them into
 * its report. Range-checked getters guard the fields it reads; this guards
 * what it keeps: only the fields the schema names, each a scalar of the
 * schema's kind and range, so a stored object is one level deep and bounded
 * in size whatever the client sent. An unknown field is refused, not
 * dropped: the client learns at once that it speaks another version. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "proto/msg.h"
#include "util/util.h"

/* "what.name", or just "name" for the top level (what NULL). */
static const char *schema_name(const char *what, const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s", what ? what : "", what ? "." : "", name);
    for (char *p = buf; *p; p++) /* it goes into a one-line reply */
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return buf;
}

static const hfl_field *schema_find(const hfl_field *schema, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(schema[i].name, name)) return &schema[i];
    return NULL;
}

static int schema_check_one(const cJSON *item, const hfl_field *f, const char *what, char *err) {
    char nb[160];
    const char *name = schema_name(what, f->name, nb, sizeof nb);
    switch (f->kind) {
    case HFL_FIELD_STR: {
        if (!cJSON_IsString(item) || !item->valuestring)
            return hfl_errf(err, "field '%s' is not a string", name);
        size_t len = strlen(item->valuestring);
        if ((double)len > f->hi)
            return hfl_errf(err, "field '%s' is %zu bytes long (limit %.0f)", name, len, f->hi);
        for (size_t i = 0; i < len; i++) /* it may end up in logs and one-line replies */
            if ((unsigned char)item->valuestring[i] < 0x20 || item->valuestring[i] == 0x7f)
                return hfl_errf(err, "field '%s' holds a control character", name);
        return 0;
    }
    case HFL_FIELD_BOOL:
        return cJSON_IsBool(item) ? 0 : hfl_errf(err, "field '%s' is not true or false", name);
    case HFL_FIELD_NUM_OR_NULL:
        if (cJSON_IsNull(item)) return 0;
        __attribute__((fallthrough)); /* else a number */
    case HFL_FIELD_NUM:
    case HFL_FIELD_INT:
        if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
            return hfl_errf(err, "field '%s' is not a finite number", name);
        if (f->kind == HFL_FIELD_INT && item->valuedouble != floor(item->valuedouble))
            return hfl_errf(err, "field '%s' is not an integer", name);
        if (item->valuedouble < f->lo || item->valuedouble > f->hi)
            return hfl_errf(err, "field '%s' = %g is outside [%g, %g]", name, item->valuedouble, f->lo,
                            f->hi);
        return 0;
    }
    return hfl_errf(err, "field '%s' has an unknown kind in its schema", name);
}

int hfl_meta_check_fields(const cJSON *obj, const char *what, const hfl_field *schema, int n, char *err) {
    if (!cJSON_IsObject(obj)) return hfl_errf(err, "field '%s' must be an object", what ? what : "meta");
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        const hfl_field *f = item->string ? schema_find(schema, n, item->string) : NULL;
        char nb[160];
        if (!f)
            return hfl_errf(err, "field '%s' is not one this coordinator knows",
                            schema_name(what, item->string ? item->string : "", nb, sizeof nb));
        /* a name twice: the second would be stored beside the checked first */
        for (const cJSON *o = obj->child; o != item; o = o->next)
            if (o->string && !strcmp(o->string, item->string))
                return hfl_errf(err, "field '%s' appears twice", schema_name(what, f->name, nb, sizeof nb));
        if (schema_check_one(item, f, what, err) != 0) return -1;
    }
    return 0;
}
