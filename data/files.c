/* files.c: datasets in .npz, safetensors and x.npy/y.npy files (see files.h). */
#include "data/files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/npy.h"
#include "util/stfile.h"
#include "util/util.h"

#define MAX_SAMPLES 100000000ull
#define MAX_FEATURES (1ull << 24)
#define MAX_LABEL_ROWS 65536

/* One array, whichever container it came from. */
typedef struct {
    char kind; /* 'u', 'i', 'f'; 0 for a dtype hfl does not read */
    int esize;
    char dtype[16];
    int ndim;
    int64_t shape[8];
    uint64_t count;
    const uint8_t *data;
} array;

static void from_npy(const hfl_npy *a, array *v) {
    v->kind = a->kind, v->esize = a->esize, v->ndim = a->ndim, v->count = a->count, v->data = a->data;
    memcpy(v->shape, a->shape, sizeof a->shape);
    snprintf(v->dtype, sizeof v->dtype, "%s%d", a->kind == 'u' ? "uint" : a->kind == 'i' ? "int" : "float", 8 * a->esize);
}

static void from_st(const hfl_st_tensor *t, array *v) {
    static const struct {
        const char *name;
        char kind;
    } map[] = {{"U8", 'u'}, {"U16", 'u'}, {"U32", 'u'}, {"U64", 'u'}, {"I8", 'i'},
               {"I16", 'i'}, {"I32", 'i'}, {"I64", 'i'}, {"F32", 'f'}, {"F64", 'f'}};
    v->kind = 0;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i].name, t->dtype)) v->kind = map[i].kind;
    v->esize = (int)t->esize, v->ndim = t->ndim, v->count = t->count, v->data = t->data;
    memcpy(v->shape, t->shape, sizeof v->shape);
    snprintf(v->dtype, sizeof v->dtype, "%s", t->dtype);
}

/* Element i of an integer array, sign-extended for signed kinds. */
static int64_t int_at(const array *v, uint64_t i) {
    uint64_t u = 0;
    const uint8_t *p = v->data + i * (uint64_t)v->esize;
    for (int b = 0; b < v->esize; b++) u |= (uint64_t)p[b] << (8 * b);
    if (v->kind == 'i' && v->esize < 8 && (u >> (8 * v->esize - 1)) & 1) u |= ~0ull << (8 * v->esize);
    return (int64_t)u;
}

static int to_dataset(const array *x, const array *y, hfl_dataset *out, char *err) {
    if (x->ndim < 1 || x->shape[0] < 1) return hfl_errf(err, "x must be shaped [n, ...] with n >= 1");
    uint64_t n = (uint64_t)x->shape[0], dim = x->count / n;
    if (n > MAX_SAMPLES) return hfl_errf(err, "x holds %llu samples (at most %llu)", (unsigned long long)n, MAX_SAMPLES);
    if (dim < 1 || dim > MAX_FEATURES) return hfl_errf(err, "x has %llu features per sample (1 to %llu)", (unsigned long long)dim, MAX_FEATURES);
    if (y->ndim < 1 || y->ndim > 2 || (uint64_t)y->shape[0] != n || (y->ndim == 2 && y->shape[1] < 1))
        return hfl_errf(err, "y must be shaped [%llu] (a label per sample of x) or [%llu, R] (R per "
                        "sample)", (unsigned long long)n, (unsigned long long)n);
    uint64_t rows = y->ndim == 2 ? (uint64_t)y->shape[1] : 1;
    if (rows > MAX_LABEL_ROWS)
        return hfl_errf(err, "y has %llu labels per sample (at most %d)", (unsigned long long)rows,
                        MAX_LABEL_ROWS);
    if (y->kind != 'u' && y->kind != 'i') return hfl_errf(err, "y has dtype %s; labels must be integers", y->dtype);
    if (!((x->kind == 'u' && x->esize == 1) || (x->kind == 'f' && x->esize == 4)))
        return hfl_errf(err, "x has dtype %s; features must be uint8 or float32", x->dtype);
    int32_t *labels = malloc(sizeof(int32_t) * n * rows);
    float *feat = malloc(sizeof(float) * n * dim);
    if (!labels || !feat) return free(labels), free(feat), hfl_errf(err, "out of memory for %llu samples", (unsigned long long)n);
    int32_t top = 0;
    for (uint64_t i = 0; i < n * rows; i++) {
        int64_t l = int_at(y, i);
        if (l < 0 || l >= HFL_DATA_MAX_CLASSES) { /* a uint64 past INT64_MAX reads as negative */
            free(labels), free(feat);
            return hfl_errf(err, "y[%llu] = %lld is not a label in [0, %d)", (unsigned long long)i, (long long)l, HFL_DATA_MAX_CLASSES);
        }
        labels[i] = (int32_t)l;
        if (labels[i] > top) top = labels[i];
    }
    for (uint64_t i = 0; i < n * dim; i++) {
        if (x->kind == 'u') {
            feat[i] = hfl_idx_pixel(x->data[i]);
            continue;
        }
        memcpy(&feat[i], x->data + 4 * i, 4);
        if (!isfinite(feat[i])) {
            free(labels), free(feat);
            return hfl_errf(err, "x[%llu][%llu] is not finite", (unsigned long long)(i / dim), (unsigned long long)(i % dim));
        }
    }
    *out = (hfl_dataset){.n = (int)n, .dim = (int)dim, .n_classes = top + 1, .x = feat, .y = labels,
                         .pixels = x->kind == 'u', .label_rows = (int)rows};
    return 0;
}

static int decode_npz(const uint8_t *buf, size_t len, hfl_dataset *out, char *err) {
    uint8_t *xb = NULL, *yb = NULL;
    size_t xl, yl;
    hfl_npy xa, ya;
    array x, y;
    char e[HFL_ERR_LEN];
    int rc = hfl_zip_read(buf, len, "x.npy", &xb, &xl, e) != 0 ? -1 : hfl_zip_read(buf, len, "y.npy", &yb, &yl, e) != 0 ? -1 : 0;
    if (rc != 0) hfl_errf(err, "%s", e);
    else if (hfl_npy_parse(xb, xl, &xa, e) != 0) rc = hfl_errf(err, "x.npy: %s", e);
    else if (hfl_npy_parse(yb, yl, &ya, e) != 0) rc = hfl_errf(err, "y.npy: %s", e);
    else from_npy(&xa, &x), from_npy(&ya, &y), rc = to_dataset(&x, &y, out, err);
    free(xb), free(yb);
    return rc;
}

static int decode_st(const uint8_t *buf, size_t len, hfl_dataset *out, char *err) {
    hfl_st_file f;
    if (hfl_st_parse(buf, len, &f, err) != 0) return -1;
    const hfl_st_tensor *tx = hfl_st_get(&f, "x"), *ty = hfl_st_get(&f, "y");
    int rc;
    array x, y;
    if (!tx || !ty) {
        rc = hfl_errf(err, "safetensors file has no tensor '%s' (a dataset holds x and y)", tx ? "y" : "x");
    } else {
        from_st(tx, &x), from_st(ty, &y);
        rc = to_dataset(&x, &y, out, err);
    }
    hfl_st_free(&f);
    return rc;
}

int hfl_data_decode(const uint8_t *buf, size_t len, hfl_dataset *out, char *err) {
    memset(out, 0, sizeof *out);
    if (len >= 4 && !memcmp(buf, "PK", 2)) return decode_npz(buf, len, out, err);
    if (len >= 6 && !memcmp(buf, "\x93NUMPY", 6))
        return hfl_errf(err, "a .npy file holds one array; give an .npz with x and y, or a directory of x.npy and y.npy");
    return decode_st(buf, len, out, err);
}

int hfl_data_is_file(const char *path) {
    struct stat st;
    char xp[4200];
    if (stat(path, &st) != 0) { /* missing: a dataset file by its name, else a directory */
        const char *dot = strrchr(path, '.');
        return dot && (!strcmp(dot, ".npz") || !strcmp(dot, ".npy") || !strcmp(dot, ".safetensors"));
    }
    if (!S_ISDIR(st.st_mode)) return 1;
    snprintf(xp, sizeof xp, "%s/x.npy", path);
    return access(xp, F_OK) == 0;
}

/* dir/x.npy and dir/y.npy. */
static int load_npy_dir(const char *dir, hfl_dataset *out, char *err) {
    char xp[4200], yp[4200], e[HFL_ERR_LEN];
    snprintf(xp, sizeof xp, "%s/x.npy", dir);
    snprintf(yp, sizeof yp, "%s/y.npy", dir);
    size_t xl, yl;
    uint8_t *xb = (uint8_t *)hfl_read_file(xp, &xl, err), *yb = NULL;
    if (!xb) return -1;
    if (!(yb = (uint8_t *)hfl_read_file(yp, &yl, err))) return free(xb), -1;
    hfl_npy xa, ya;
    array x, y;
    int rc;
    if (hfl_npy_parse(xb, xl, &xa, e) != 0) rc = hfl_errf(err, "%s: %s", xp, e);
    else if (hfl_npy_parse(yb, yl, &ya, e) != 0) rc = hfl_errf(err, "%s: %s", yp, e);
    else if (from_npy(&xa, &x), from_npy(&ya, &y), to_dataset(&x, &y, out, e) != 0) rc = hfl_errf(err, "%s: %s", dir, e);
    else rc = 0;
    free(xb), free(yb);
    return rc;
}

int hfl_data_load(const char *path, hfl_dataset *out, char *err) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return load_npy_dir(path, out, err);
    size_t len;
    char e[HFL_ERR_LEN];
    uint8_t *buf = (uint8_t *)hfl_read_file(path, &len, err);
    if (!buf) return -1;
    int rc = hfl_data_decode(buf, len, out, e);
    free(buf);
    return rc == 0 ? 0 : hfl_errf(err, "%s: %s", path, e);
}

int hfl_data_format_parse(const char *text, hfl_data_format *f, char *err) {
    if (!strcmp(text, "npz")) *f = HFL_DATA_NPZ;
    else if (!strcmp(text, "safetensors")) *f = HFL_DATA_SAFETENSORS;
    else return hfl_errf(err, "unknown data format '%s' (npz or safetensors)", text);
    return 0;
}

const char *hfl_data_format_ext(hfl_data_format f) { return f == HFL_DATA_NPZ ? "npz" : "safetensors"; }

int hfl_data_save(const char *path, const hfl_dataset *d, hfl_data_format f, char *err) {
    size_t n = (size_t)d->n, dim = (size_t)d->dim;
    void *xd;
    if (d->pixels) {
        uint8_t *b = hfl_malloc(n * dim + 1);
        for (size_t i = 0; i < n * dim; i++) b[i] = hfl_idx_unpixel(d->x[i]);
        xd = b;
    } else {
        xd = d->x;
    }
    size_t r = (size_t)hfl_dataset_label_rows(d);
    int64_t *yd = hfl_malloc(sizeof(int64_t) * (n ? n * r : 1));
    for (size_t i = 0; i < n * r; i++) yd[i] = d->y[i];
    int64_t xs[2] = {d->n, d->dim}, ys[2] = {d->n, (int64_t)r};
    int y_ndim = r > 1 ? 2 : 1;
    uint8_t *file = NULL;
    size_t len = 0;
    char e[HFL_ERR_LEN];
    if (f == HFL_DATA_NPZ) {
        size_t lens[2];
        uint8_t *parts[2] = {hfl_npy_encode(d->pixels ? "|u1" : "<f4", xs, 2, xd, &lens[0]),
                             hfl_npy_encode("<i8", ys, y_ndim, yd, &lens[1])};
        const char *names[2] = {"x.npy", "y.npy"};
        file = hfl_zip_write(names, (const uint8_t *const *)parts, lens, 2, &len, e);
        free(parts[0]), free(parts[1]);
    } else {
        hfl_st_put t[2] = {{.name = "x", .dtype = d->pixels ? "U8" : "F32", .ndim = 2, .shape = {d->n, d->dim}, .data = xd},
                           {.name = "y", .dtype = "I64", .ndim = y_ndim, .shape = {d->n, (int64_t)r},
                            .data = yd}};
        file = hfl_st_encode(t, 2, NULL, 0, &len, e);
    }
    if (xd != d->x) free(xd);
    free(yd);
    if (!file) return hfl_errf(err, "%s: %s", path, e);
    int rc = hfl_write_file_atomic(path, file, len, err);
    free(file);
    return rc;
}
