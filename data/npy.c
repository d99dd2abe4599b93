/* npy.c: the .npy header parser and writer (see npy.h; zip.c holds the .npz archive). */
#include "data/npy.h"

#include <stdio.h>
#include <string.h>

#include "util/util.h"

#define NPY_MAX_HEADER (1u << 20)

typedef struct {
    const char *p, *end;
} cursor;

static void skip_space(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static int take(cursor *c, char ch) {
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string (no escapes) into out. */
static int quoted(cursor *c, char *out, size_t cap) {
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return 0;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    out[n] = 0;
    return 1;
}

static int word(cursor *c, const char *w) {
    skip_space(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n)) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* '(' sizes ')' with an optional trailing comma: "(60000, 784)", "(5,)", "()". */
static int shape_tuple(cursor *c, hfl_npy *a, char *err) {
    if (!take(c, '(')) return hfl_errf(err, "npy header: 'shape' is not a tuple");
    a->ndim = 0;
    a->count = 1;
    while (!take(c, ')')) {
        skip_space(c);
        uint64_t v = 0;
        int digits = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9' && digits < 13) v = v * 10 + (uint64_t)(*c->p++ - '0'), digits++;
        if (!digits || (c->p < c->end && *c->p >= '0' && *c->p <= '9'))
            return hfl_errf(err, "npy header: 'shape' holds something other than a size below 10^13");
        if (a->ndim == HFL_NPY_MAX_DIMS) return hfl_errf(err, "npy header: more than %d dimensions", HFL_NPY_MAX_DIMS);
        if (v && a->count > ((uint64_t)1 << 50) / v) return hfl_errf(err, "npy header: shape too large");
        a->shape[a->ndim++] = (int64_t)v;
        a->count *= v;
        if (!take(c, ',')) {
            if (!take(c, ')')) return hfl_errf(err, "npy header: 'shape' tuple is not closed");
            break;
        }
    }
    return 0;
}

/* descr: byte order, kind, size ("<f4", "|u1", "=i8"). */
static int parse_descr(const char *d, hfl_npy *a, char *err) {
    if (strlen(d) != 3 || !strchr("<>|=", d[0]) || !strchr("uif", d[1]) || !strchr("1248", d[2]))
        return hfl_errf(err, "npy dtype '%.32s' is not a plain integer or float type hfl reads", d);
    a->kind = d[1];
    a->esize = d[2] - '0';
    if (d[0] == '>' && a->esize > 1) return hfl_errf(err, "npy dtype '%s' is big-endian; hfl reads little-endian", d);
    if (d[1] == 'f' && a->esize == 1) return hfl_errf(err, "npy dtype '%s' is not a float type", d);
    return 0;
}

static int parse_header(cursor *c, hfl_npy *a, char *err) {
    char key[32], descr[64];
    int have = 0; /* bits: descr, fortran_order, shape */
    if (!take(c, '{')) return hfl_errf(err, "npy header is not a dict");
    while (!take(c, '}')) {
        if (!quoted(c, key, sizeof key) || !take(c, ':')) return hfl_errf(err, "npy header: expected 'key': value");
        if (!strcmp(key, "descr")) {
            if (!quoted(c, descr, sizeof descr)) return hfl_errf(err, "npy header: 'descr' is not a plain dtype string (structured dtypes are not read)");
            if (parse_descr(descr, a, err) != 0) return -1;
            have |= 1;
        } else if (!strcmp(key, "fortran_order")) {
            if (word(c, "True")) return hfl_errf(err, "npy array is in Fortran order; save it in C order (np.ascontiguousarray)");
            if (!word(c, "False")) return hfl_errf(err, "npy header: 'fortran_order' is not True or False");
            have |= 2;
        } else if (!strcmp(key, "shape")) {
            if (shape_tuple(c, a, err) != 0) return -1;
            have |= 4;
        } else {
            return hfl_errf(err, "npy header: unknown key '%s'", key);
        }
        if (!take(c, ',')) {
            if (!take(c, '}')) return hfl_errf(err, "npy header: expected ',' or '}'");
            break;
        }
    }
    if (have != 7) return hfl_errf(err, "npy header lacks '%s'", !(have & 1) ? "descr" : !(have & 2) ? "fortran_order" : "shape");
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n')) c->p++;
    if (c->p != c->end) return hfl_errf(err, "npy header has bytes after its dict");
    return 0;
}

int hfl_npy_parse(const uint8_t *buf, size_t len, hfl_npy *a, char *err) {
    memset(a, 0, sizeof *a);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) return hfl_errf(err, "not a .npy file (no \\x93NUMPY magic)");
    int major = buf[6];
    size_t at, hl;
    if (major == 1) {
        hl = (size_t)buf[8] | (size_t)buf[9] << 8;
        at = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return hfl_errf(err, "npy file of %zu bytes is truncated in its header", len);
        hl = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        at = 12;
    } else {
        return hfl_errf(err, "npy format version %d.%d is not one hfl reads (1, 2 or 3)", major, buf[7]);
    }
    if (hl > NPY_MAX_HEADER || hl > len - at)
        return hfl_errf(err, "npy header length %zu does not fit the file's %zu bytes", hl, len);
    cursor c = {(const char *)buf + at, (const char *)buf + at + hl};
    if (parse_header(&c, a, err) != 0) return -1;
    uint64_t want = a->count * (uint64_t)a->esize, have = len - at - hl;
    if (have != want)
        return hfl_errf(err, "npy data is %llu bytes where its shape and dtype need %llu", (unsigned long long)have,
                        (unsigned long long)want);
    a->data = buf + at + hl;
    return 0;
}

uint8_t *hfl_npy_encode(const char *descr, const int64_t *shape, int ndim, const void *data, size_t *len) {
    char h[512];
    size_t n = (size_t)snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    uint64_t count = 1;
    for (int d = 0; d < ndim; d++) {
        n += (size_t)snprintf(h + n, sizeof h - n, ndim == 1 ? "%lld," : d ? ", %lld" : "%lld", (long long)shape[d]);
        count *= (uint64_t)shape[d];
    }
    n += (size_t)snprintf(h + n, sizeof h - n, "), }");
    size_t total = (10 + n + 1 + 63) / 64 * 64; /* the data starts 64-byte aligned, as numpy writes it */
    size_t hl = total - 10, bytes = (size_t)count * (size_t)(descr[2] - '0');
    uint8_t *out = hfl_malloc(total + bytes);
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)hl, out[9] = (uint8_t)(hl >> 8);
    memcpy(out + 10, h, n);
    memset(out + 10 + n, ' ', hl - n - 1);
    out[total - 1] = '\n';
    if (bytes) memcpy(out + total, data, bytes);
    *len = total + bytes;
    return out;
}
