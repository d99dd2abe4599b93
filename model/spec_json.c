/* spec_json.c: sequential model specs as JSON, so a coordinator can send any
 * chain of the known layer kinds to its clients (format in model.h).
 *
 * The parser is strict, since a spec arrives from the network: an unknown,
 * repeated or misspelled (keys are case-sensitive) key, a number that is not
 * an integer in int range, trailing text, or a shape that does not chain is
 * rejected with one line naming the layer index. Structure and types are
 * checked here; sizes and shapes by hfl_model_spec_finish, which every spec,
 * built-in or parsed, goes through. Printing writes every key explicitly
 * (defaults too), so a printed spec parses back to an equal one. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/model.h"
#include "util/util.h"

/* The keys each object may hold; everything else is an error. */
static const char *const top_keys[] = {"name", "input", "layers", "lora", NULL};
static const char *const lora_keys[] = {"rank", "alpha", NULL};
static const char *const dense_keys[] = {"type", "out", NULL};
static const char *const relu_keys[] = {"type", NULL};
static const char *const conv_keys[] = {"type", "out", "kernel", "pad", "stride", NULL};
static const char *const pool_keys[] = {"type", "size", "stride", NULL};
static const char *const embed_keys[] = {"type", "vocab", "width", NULL};
static const char *const block_keys[] = {"type", "heads", NULL};

static int key_allowed(const char *key, const char *const *allowed) {
    for (int i = 0; allowed[i]; i++)
        if (strcmp(key, allowed[i]) == 0) return 1;
    return 0;
}

/* Every key of obj is allowed and appears once; `where` prefixes the error. */
static int check_keys(const cJSON *obj, const char *const *allowed, const char *where, char *err) {
    for (const cJSON *a = obj->child; a; a = a->next) {
        if (!key_allowed(a->string, allowed))
            return hfl_errf(err, "%s: unknown key \"%s\"", where, a->string);
        for (const cJSON *b = obj->child; b != a; b = b->next)
            if (strcmp(a->string, b->string) == 0)
                return hfl_errf(err, "%s: key \"%s\" appears twice", where, a->string);
    }
    return 0;
}

/* An integral JSON number within int range into *out. */
static int json_int(const cJSON *v, const char *key, const char *where, int *out, char *err) {
    if (!cJSON_IsNumber(v))
        return hfl_errf(err, "%s: \"%s\" must be an integer", where, key);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < -2147483648.0 || d > 2147483647.0)
        return hfl_errf(err, "%s: \"%s\" must be an integer, got %g", where, key, d);
    *out = (int)d;
    return 0;
}

/* obj[key] as an int, or dflt when absent and optional. */
static int get_int(const cJSON *obj, const char *key, int optional, int dflt, const char *where,
                   int *out, char *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        if (!optional) return hfl_errf(err, "%s: missing \"%s\"", where, key);
        *out = dflt;
        return 0;
    }
    return json_int(v, key, where, out, err);
}

static int parse_name(const cJSON *root, hfl_model_spec *spec, char *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (!v) return hfl_errf(err, "model spec: missing \"name\"");
    if (!cJSON_IsString(v)) return hfl_errf(err, "model spec: \"name\" must be a string");
    size_t n = strlen(v->valuestring);
    if (n < 1 || n >= sizeof spec->name)
        return hfl_errf(err, "model spec: name must be 1 to %zu characters, got %zu",
                        sizeof spec->name - 1, n);
    for (size_t i = 0; i < n; i++) {
        char c = v->valuestring[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok) return hfl_errf(err, "model spec: name may hold only letters, digits, '.', '_' and '-'");
    }
    memcpy(spec->name, v->valuestring, n + 1);
    return 0;
}

static int parse_input(const cJSON *root, hfl_model_spec *spec, const char *where, char *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!v) return hfl_errf(err, "%s: missing \"input\"", where);
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n != 1 && n != 3)
        return hfl_errf(err, "%s: \"input\" must be [C, H, W] or [features]", where);
    int dims[3] = {1, 1, 1}, i = 0;
    for (const cJSON *d = v->child; d; d = d->next, i++)
        if (json_int(d, "input", where, &dims[i], err) != 0) return -1;
    spec->input = (hfl_shape){dims[0], dims[1], dims[2]};
    return 0;
}

static int parse_layer(const cJSON *obj, int index, hfl_layer *ly, const char *name, char *err) {
    char where[96];
    snprintf(where, sizeof where, "model '%s': layer %d", name, index);
    if (!cJSON_IsObject(obj)) return hfl_errf(err, "%s: not an object", where);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!type) return hfl_errf(err, "%s: missing \"type\"", where);
    if (!cJSON_IsString(type)) return hfl_errf(err, "%s: \"type\" must be a string", where);
    const hfl_layer_ops *ops = hfl_layer_ops_by_name(type->valuestring);
    if (!ops)
        return hfl_errf(err, "%s: unknown type \"%.32s\" (known: dense, relu, conv2d, maxpool2d, "
                        "embedding, gpt_block, lm_head)",
                        where, type->valuestring);
    snprintf(where, sizeof where, "model '%s': layer %d (%s)", name, index, ops->name);
    memset(ly, 0, sizeof *ly);
    if (ops == &hfl_dense_ops) {
        ly->kind = HFL_LAYER_DENSE;
        if (check_keys(obj, dense_keys, where, err) != 0) return -1;
        return get_int(obj, "out", 0, 0, where, &ly->units, err);
    }
    if (ops == &hfl_relu_ops) {
        ly->kind = HFL_LAYER_RELU;
        return check_keys(obj, relu_keys, where, err);
    }
    if (ops == &hfl_conv2d_ops) {
        ly->kind = HFL_LAYER_CONV2D;
        if (check_keys(obj, conv_keys, where, err) != 0 ||
            get_int(obj, "out", 0, 0, where, &ly->units, err) != 0 ||
            get_int(obj, "kernel", 0, 0, where, &ly->kernel, err) != 0 ||
            get_int(obj, "pad", 1, 0, where, &ly->pad, err) != 0 ||
            get_int(obj, "stride", 1, 1, where, &ly->stride, err) != 0)
            return -1;
        return 0;
    }
    if (ops == &hfl_embed_ops) {
        ly->kind = HFL_LAYER_EMBED;
        if (check_keys(obj, embed_keys, where, err) != 0 ||
            get_int(obj, "vocab", 0, 0, where, &ly->vocab, err) != 0)
            return -1;
        return get_int(obj, "width", 0, 0, where, &ly->units, err);
    }
    if (ops == &hfl_gpt_block_ops) {
        ly->kind = HFL_LAYER_GPT_BLOCK;
        if (check_keys(obj, block_keys, where, err) != 0) return -1;
        return get_int(obj, "heads", 0, 0, where, &ly->heads, err);
    }
    if (ops == &hfl_lm_head_ops) {
        ly->kind = HFL_LAYER_LM_HEAD;
        return check_keys(obj, relu_keys, where, err); /* "type" only, as relu */
    }
    ly->kind = HFL_LAYER_MAXPOOL2D;
    if (check_keys(obj, pool_keys, where, err) != 0 ||
        get_int(obj, "size", 0, 0, where, &ly->kernel, err) != 0)
        return -1;
    return get_int(obj, "stride", 1, ly->kernel, where, &ly->stride, err);
}

static int spec_from_object(const cJSON *root, hfl_model_spec *spec, char *err) {
    if (!cJSON_IsObject(root)) return hfl_errf(err, "model spec: not a JSON object");
    if (check_keys(root, top_keys, "model spec", err) != 0) return -1;
    memset(spec, 0, sizeof *spec);
    if (parse_name(root, spec, err) != 0) return -1;
    char where[64];
    snprintf(where, sizeof where, "model '%s'", spec->name);
    if (parse_input(root, spec, where, err) != 0) return -1;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!layers) return hfl_errf(err, "%s: missing \"layers\"", where);
    if (!cJSON_IsArray(layers)) return hfl_errf(err, "%s: \"layers\" must be an array", where);
    int n = cJSON_GetArraySize(layers);
    if (n < 1 || n > HFL_MAX_LAYERS)
        return hfl_errf(err, "%s: %d layers outside [1, %d]", where, n, HFL_MAX_LAYERS);
    int i = 0;
    for (const cJSON *l = layers->child; l; l = l->next, i++)
        if (parse_layer(l, i, &spec->layers[i], spec->name, err) != 0) return -1;
    spec->n_layers = n;
    const cJSON *lora = cJSON_GetObjectItemCaseSensitive(root, "lora");
    if (lora) {
        char lw[96];
        snprintf(lw, sizeof lw, "%s: lora", where);
        if (!cJSON_IsObject(lora)) return hfl_errf(err, "%s: must be an object {\"rank\": r, \"alpha\": a}", lw);
        if (check_keys(lora, lora_keys, lw, err) != 0 || get_int(lora, "rank", 0, 0, lw, &spec->lora_rank, err) != 0)
            return -1;
        if (spec->lora_rank < 1) return hfl_errf(err, "%s: rank %d must be at least 1", lw, spec->lora_rank);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(lora, "alpha");
        if (a && !(cJSON_IsNumber(a) && isfinite(a->valuedouble)))
            return hfl_errf(err, "%s: \"alpha\" must be a number", lw);
        spec->lora_alpha = a ? (float)a->valuedouble : (float)spec->lora_rank;
    }
    return hfl_model_spec_finish(spec, err);
}

int hfl_model_spec_from_json(const char *text, size_t len, hfl_model_spec *spec, char *err) {
    if (!text) return hfl_errf(err, "model spec: no text");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        return hfl_errf(err, "model spec: invalid JSON at byte %zu", at);
    }
    for (const char *p = end; p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return hfl_errf(err, "model spec: trailing text at byte %zu", (size_t)(p - text));
        }
    int rc = spec_from_object(root, spec, err);
    cJSON_Delete(root);
    return rc;
}

int hfl_model_spec_load(const char *path, hfl_model_spec *spec, char *err) {
    size_t len = 0;
    char *text = hfl_read_file(path, &len, err);
    if (!text) return -1;
    char why[HFL_ERR_LEN];
    int rc = hfl_model_spec_from_json(text, len, spec, why);
    free(text);
    if (rc != 0) return hfl_errf(err, "%s: %s", path, why);
    return 0;
}

int hfl_model_resolve(const char *name_or_path, hfl_model_spec *spec, char *err) {
    char why[HFL_ERR_LEN];
    if (hfl_model_builtin(name_or_path, spec, why) == 0) return 0;
    if (!strchr(name_or_path, '/') && !strstr(name_or_path, ".json")) return hfl_errf(err, "%s", why);
    return hfl_model_spec_load(name_or_path, spec, err);
}

static void add_int(cJSON *obj, const char *key, int v) { cJSON_AddNumberToObject(obj, key, v); }

char *hfl_model_spec_to_json(const hfl_model_spec *spec, char *err) {
    if (hfl_model_spec_check(spec, err) != 0) return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "name", spec->name);
    int dims[3] = {spec->input.c, spec->input.h, spec->input.w};
    cJSON_AddItemToObject(root, "input", cJSON_CreateIntArray(dims, 3));
    cJSON *layers = cJSON_AddArrayToObject(root, "layers");
    for (int l = 0; l < spec->n_layers; l++) {
        const hfl_layer *ly = &spec->layers[l];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", hfl_layer_ops_for(ly->kind)->name);
        if (ly->kind == HFL_LAYER_DENSE) {
            add_int(o, "out", ly->units);
        } else if (ly->kind == HFL_LAYER_CONV2D) {
            add_int(o, "out", ly->units);
            add_int(o, "kernel", ly->kernel);
            add_int(o, "pad", ly->pad);
            add_int(o, "stride", ly->stride);
        } else if (ly->kind == HFL_LAYER_MAXPOOL2D) {
            add_int(o, "size", ly->kernel);
            add_int(o, "stride", ly->stride);
        } else if (ly->kind == HFL_LAYER_EMBED) {
            add_int(o, "vocab", ly->vocab);
            add_int(o, "width", ly->units);
        } else if (ly->kind == HFL_LAYER_GPT_BLOCK) {
            add_int(o, "heads", ly->heads);
        }
        cJSON_AddItemToArray(layers, o);
    }
    if (spec->lora_rank) {
        cJSON *lo = cJSON_AddObjectToObject(root, "lora");
        add_int(lo, "rank", spec->lora_rank);
        cJSON_AddNumberToObject(lo, "alpha", spec->lora_alpha);
    }
    char *printed = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!printed) {
        hfl_errf(err, "model '%s': out of memory printing the spec", spec->name);
        return NULL;
    }
    /* Hand back memory from hfl's allocator so the caller frees it with free(). */
    size_t n = strlen(printed) + 1;
    char *out = hfl_malloc(n);
    memcpy(out, printed, n);
    cJSON_free(printed);
    return out;
}
