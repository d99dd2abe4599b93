/* stfile.c: the safetensors container, parsed and written (see stfile.h). */
#include "util/stfile.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"

/* The dtypes the format defines (safetensors' Dtype enum) and their sizes. */
static const struct {
    const char *name;
    size_t size;
} dtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
              {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"F64", 8}, {"I64", 8},
              {"U64", 8}};

static size_t dtype_size(const char *name) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, name)) return dtypes[i].size;
    return 0;
}

static int little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
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

/* One entry's dtype, shape and offsets, checked against the data buffer
 * (dlen bytes at file offset at; data: them in memory, or NULL). */
static int check_entry(const cJSON *e, const uint8_t *data, uint64_t at, uint64_t dlen, span *s, hfl_st_tensor *t,
                       char *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return hfl_errf(err, "tensor '%s' is not an object", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return hfl_errf(err, "tensor '%s' has no dtype string", name);
    size_t esize = dtype_size(dt->valuestring);
    if (!esize) return hfl_errf(err, "tensor '%s' has dtype '%.16s', which safetensors does not define", name, dt->valuestring);
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > HFL_ST_MAX_DIMS)
        return hfl_errf(err, "tensor '%s': shape must be an array of at most %d sizes", name, HFL_ST_MAX_DIMS);
    uint64_t count = 1, dim;
    t->ndim = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        if (!whole(d, &dim) || dim > ((uint64_t)1 << 40))
            return hfl_errf(err, "tensor '%s': shape holds something other than a size", name);
        if (dim && count > ((uint64_t)1 << 58) / dim) return hfl_errf(err, "tensor '%s': shape too large", name);
        count *= dim;
        t->shape[t->ndim++] = (int64_t)dim;
    }
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !whole(cJSON_GetArrayItem(of, 0), &s->begin) ||
        !whole(cJSON_GetArrayItem(of, 1), &s->end))
        return hfl_errf(err, "tensor '%s': data_offsets must be two byte offsets", name);
    if (s->begin > s->end || s->end > dlen)
        return hfl_errf(err, "tensor '%s': data_offsets [%llu, %llu] outside the %llu-byte data buffer", name,
                        (unsigned long long)s->begin, (unsigned long long)s->end, (unsigned long long)dlen);
    if (s->end - s->begin != count * esize)
        return hfl_errf(err, "tensor '%s': %llu bytes for a shape of %llu %s values", name,
                        (unsigned long long)(s->end - s->begin), (unsigned long long)count, dt->valuestring);
    s->name = t->name = name;
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
    t->esize = esize;
    t->count = count;
    t->data = data ? data + s->begin : NULL;
    t->offset = at + s->begin;
    return 0;
}

void hfl_st_shape_text(const int64_t *shape, int ndim, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(out + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

static int check_metadata(const cJSON *e, int *metas, char *err) {
    if ((*metas)++) return hfl_errf(err, "__metadata__ appears twice");
    if (!cJSON_IsObject(e)) return hfl_errf(err, "__metadata__ is not an object");
    const cJSON *m;
    cJSON_ArrayForEach(m, e) if (!cJSON_IsString(m)) return hfl_errf(err, "__metadata__ '%s' is not a string", m->string);
    return 0;
}

/* The structure of the header: every entry valid, the buffer indexed
 * exactly once. */
static int check_header(const cJSON *h, const uint8_t *data, uint64_t at, uint64_t dlen, hfl_st_file *f, char *err) {
    span *s = hfl_malloc(sizeof(span) * HFL_ST_MAX_TENSORS);
    int n = 0, rc = 0, metas = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, h) {
        if (!strcmp(e->string, "__metadata__")) {
            if ((rc = check_metadata(e, &metas, err)) != 0) break;
            continue;
        }
        if (n == HFL_ST_MAX_TENSORS) {
            rc = hfl_errf(err, "more than %d tensors", HFL_ST_MAX_TENSORS);
            break;
        }
        for (const cJSON *o = h->child; o != e; o = o->next)
            if (!strcmp(o->string, e->string)) rc = hfl_errf(err, "tensor '%s' appears twice", e->string);
        if (rc || (rc = check_entry(e, data, at, dlen, &s[n], &f->t[n], err)) != 0) break;
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
    f->n = n;
    free(s);
    return rc;
}

/* The header length from the file's first 8 bytes, checked against its
 * size len; -1 with err. */
static int head_length(const uint8_t first[8], uint64_t len, uint64_t *hl, char *err) {
    if (!little_endian()) return hfl_errf(err, "safetensors: this host is big-endian");
    if (len < 8) return hfl_errf(err, "%llu bytes: too short for a safetensors header length", (unsigned long long)len);
    *hl = 0;
    for (int i = 0; i < 8; i++) *hl |= (uint64_t)first[i] << (8 * i);
    if (*hl > HFL_ST_MAX_HEADER || *hl > len - 8)
        return hfl_errf(err, "header length %llu does not fit the file's %llu bytes (at most %u)",
                        (unsigned long long)*hl, (unsigned long long)len, HFL_ST_MAX_HEADER);
    return 0;
}

/* Parses the hl header bytes of a file of len bytes into f (memset by the
 * caller), data its data buffer in memory or NULL; -1 with err, f empty. */
static int parse_head(const uint8_t *head, uint64_t hl, const uint8_t *data, uint64_t len, hfl_st_file *f, char *err) {
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts((const char *)head, (size_t)hl, &end, 0);
    if (!h) return hfl_errf(err, "the header is not JSON");
    int rc = 0;
    for (const char *p = end; p < (const char *)head + hl && rc == 0; p++)
        if (*p != ' ') rc = hfl_errf(err, "the header has bytes after its JSON object other than space padding");
    if (rc == 0 && !cJSON_IsObject(h)) rc = hfl_errf(err, "the header is not a JSON object");
    if (rc == 0) {
        f->t = hfl_malloc(sizeof(hfl_st_tensor) * HFL_ST_MAX_TENSORS);
        f->json = h;
        rc = check_header(h, data, 8 + hl, len - 8 - hl, f, err);
    }
    if (rc != 0) {
        cJSON_Delete(h);
        free(f->t);
        memset(f, 0, sizeof *f);
    }
    return rc;
}

int hfl_st_parse(const uint8_t *buf, size_t len, hfl_st_file *f, char *err) {
    memset(f, 0, sizeof *f);
    uint64_t hl = 0;
    if (head_length(buf, len, &hl, err) != 0) return -1;
    return parse_head(buf + 8, hl, buf + 8 + hl, len, f, err);
}

/* n bytes at offset off of fd into dst, whatever pread splits them into;
 * -1 with err (naming what) at an error or the end of the file. */
static int read_at(int fd, void *dst, size_t n, uint64_t off, const char *what, char *err) {
    char why[HFL_ERR_LEN];
    if (hfl_pread_all(fd, dst, n, off, why) != 0) return hfl_errf(err, "cannot read %s: %s", what, why);
    return 0;
}

int hfl_st_open(const char *path, hfl_st_file *f, char *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us: refused below */
    if (fd < 0) return hfl_errf(err, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    uint8_t first[8];
    uint64_t hl = 0;
    char e[HFL_ERR_LEN];
    int rc = fstat(fd, &st) != 0 ? hfl_errf(e, "cannot stat: %s", strerror(errno)) : 0;
    if (rc == 0 && !S_ISREG(st.st_mode)) rc = hfl_errf(e, "not a regular file");
    uint64_t len = rc == 0 ? (uint64_t)st.st_size : 0;
    if (rc == 0 && len >= 8) rc = read_at(fd, first, 8, 0, "the header length", e);
    if (rc == 0) rc = head_length(first, len, &hl, e);
    uint8_t *head = rc == 0 ? hfl_malloc(hl ? (size_t)hl : 1) : NULL;
    if (rc == 0) rc = read_at(fd, head, (size_t)hl, 8, "the header", e);
    if (rc == 0) rc = parse_head(head, hl, NULL, len, f, e);
    free(head);
    if (rc != 0) {
        close(fd);
        return hfl_errf(err, "%s: %s", path, e);
    }
    f->fd = fd, f->has_fd = 1;
    return 0;
}

int hfl_st_read(const hfl_st_file *f, const hfl_st_tensor *t, void *dst, char *err) {
    size_t bytes = (size_t)(t->count * t->esize);
    if (t->data) {
        memcpy(dst, t->data, bytes);
        return 0;
    }
    char what[96];
    snprintf(what, sizeof what, "tensor '%.64s'", t->name);
    return f->has_fd ? read_at(f->fd, dst, bytes, t->offset, what, err) : hfl_errf(err, "%s has no data", what);
}

const hfl_st_tensor *hfl_st_get(const hfl_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

void hfl_st_free(hfl_st_file *f) {
    if (f->has_fd) close(f->fd);
    cJSON_Delete(f->json);
    free(f->t);
    memset(f, 0, sizeof *f);
}

/* The file's first bytes (malloc'd, *head_len): the 8-byte header length
 * and the header, padded with spaces so the data starts 8-byte aligned;
 * bytes[i] gets tensor i's length, *data their sum. NULL with err. */
static uint8_t *st_head(const hfl_st_put *t, int n, const char *const *meta, int n_meta, size_t *bytes,
                        size_t *head_len, size_t *data, char *err) {
    if (!little_endian()) return hfl_errf(err, "safetensors: this host is big-endian"), NULL;
    cJSON *h = cJSON_CreateObject();
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(h, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]);
    }
    *data = 0;
    for (int i = 0; i < n; i++) {
        size_t es = dtype_size(t[i].dtype);
        if (!es) {
            cJSON_Delete(h);
            return hfl_errf(err, "safetensors: unknown dtype '%s' for tensor '%s'", t[i].dtype, t[i].name), NULL;
        }
        bytes[i] = es;
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", t[i].dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++) {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
            bytes[i] *= (size_t)t[i].shape[d];
        }
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)*data));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(*data + bytes[i])));
        *data += bytes[i];
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    uint8_t *out = NULL;
    size_t hl = text ? strlen(text) : 0, padded = (hl + 7) / 8 * 8; /* the data starts 8-byte aligned */
    if (text) out = malloc(8 + padded);
    if (!out) {
        hfl_errf(err, "safetensors: out of memory for a header of %zu bytes", 8 + padded);
    } else {
        for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)padded >> (8 * i));
        memcpy(out + 8, text, hl);
        memset(out + 8 + hl, ' ', padded - hl);
        *head_len = 8 + padded;
    }
    free(text);
    return out;
}

uint8_t *hfl_st_encode(const hfl_st_put *t, int n, const char *const *meta, int n_meta, size_t *len, char *err) {
    size_t *bytes = hfl_malloc(sizeof(size_t) * (size_t)(n ? n : 1)), head_len, data;
    uint8_t *head = st_head(t, n, meta, n_meta, bytes, &head_len, &data, err), *out = NULL;
    if (head && !(out = malloc(head_len + data))) hfl_errf(err, "safetensors: out of memory for %zu bytes", head_len + data);
    if (out) {
        memcpy(out, head, head_len);
        size_t at = head_len;
        for (int i = 0; i < n; i++) {
            if (bytes[i]) memcpy(out + at, t[i].data, bytes[i]);
            at += bytes[i];
        }
        *len = at;
    }
    free(head);
    free(bytes);
    return out;
}

int hfl_st_write(const char *path, const hfl_st_put *t, int n, const char *const *meta, int n_meta, char *err) {
    size_t *bytes = hfl_malloc(sizeof(size_t) * (size_t)(n ? n : 1)), head_len, data;
    hfl_part *parts = hfl_malloc(sizeof *parts * (size_t)(n + 1));
    uint8_t *head = st_head(t, n, meta, n_meta, bytes, &head_len, &data, err);
    int rc = -1;
    if (head) {
        parts[0] = (hfl_part){head, head_len};
        for (int i = 0; i < n; i++) parts[i + 1] = (hfl_part){t[i].data, bytes[i]};
        rc = hfl_write_parts_atomic(path, parts, n + 1, err);
    }
    free(head), free(parts), free(bytes);
    return rc;
}
