/* idx.c: the IDX reader (gzipped or plain, via zlib) and dataset helpers.
 *
 * Both headers are read and checked before any sample is, so a count
 * mismatch costs nothing. Image bytes are read in chunks into a buffer that
 * grows only as data actually arrives: a hostile header claiming 10M x 1M
 * pixels fails as "truncated" instead of asking for 40 TB up front. */
#include "data/idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "util/util.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_N 10000000u
#define IDX_MAX_DIM 1000000u
#define IDX_N_CLASSES 10
#define IDX_MEAN 0.2860f
#define IDX_STD 0.3530f
#define IDX_CHUNK (1 << 16)

float hfl_idx_pixel(uint8_t v) { return ((float)v * (1.0f / 255.0f) - IDX_MEAN) / IDX_STD; }

uint8_t hfl_idx_unpixel(float x) {
    double v = ((double)x * IDX_STD + IDX_MEAN) * 255.0;
    return (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : (int)(v + 0.5));
}

typedef struct {
    gzFile f;
    const char *path;
    uint32_t n, rows, cols; /* rows = cols = 1 for labels */
} idx_file;

/* Reads exactly len bytes; 1 on success, 0 on a short read, -1 on a zlib error. */
static int idx_read_exact(idx_file *fp, void *buf, size_t len, char *err) {
    unsigned char *p = buf;
    while (len > 0) {
        unsigned want = len > IDX_CHUNK ? IDX_CHUNK : (unsigned)len;
        int got = gzread(fp->f, p, want);
        if (got < 0) {
            int code;
            const char *msg = gzerror(fp->f, &code);
            size_t pl = strlen(fp->path); /* zlib's message starts "path: " */
            if (strncmp(msg, fp->path, pl) == 0 && strncmp(msg + pl, ": ", 2) == 0) msg += pl + 2;
            hfl_errf(err, "cannot read %s: %s", fp->path, code == Z_ERRNO ? strerror(errno) : msg);
            return -1;
        }
        if (got == 0) return 0;
        p += got;
        len -= (size_t)got;
    }
    return 1;
}

static int idx_read_fully(idx_file *fp, void *buf, size_t len, const char *what, char *err) {
    int r = idx_read_exact(fp, buf, len, err);
    if (r == 0) return hfl_errf(err, "%s is truncated (%s)", fp->path, what);
    return r < 0 ? -1 : 0;
}

static uint32_t idx_be32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Opens path and checks its header: magic, then n (and rows, cols for images). */
static int idx_open(idx_file *fp, const char *path, uint32_t magic, char *err) {
    fp->path = path;
    fp->rows = fp->cols = 1;
    errno = 0;
    fp->f = gzopen(path, "rb");
    if (!fp->f)
        return hfl_errf(err, "cannot open %s: %s", path, errno ? strerror(errno) : "out of memory");
    /* The magic first, so a labels file given as images says "bad magic". */
    int ndims = magic == IDX_MAGIC_IMAGES ? 3 : 1;
    unsigned char head[16];
    if (idx_read_fully(fp, head, 4, "header", err) != 0) goto fail;
    uint32_t got = idx_be32(head);
    if (got != magic) {
        hfl_errf(err, "%s: bad magic 0x%08x (expected 0x%08x for IDX %s)", path, got, magic,
                 magic == IDX_MAGIC_IMAGES ? "u8 images" : "u8 labels");
        goto fail;
    }
    if (idx_read_fully(fp, head + 4, 4 * (size_t)ndims, "header", err) != 0) goto fail;
    fp->n = idx_be32(head + 4);
    if (ndims == 3) {
        fp->rows = idx_be32(head + 8);
        fp->cols = idx_be32(head + 12);
    }
    if (fp->n == 0 || fp->n > IDX_MAX_N) {
        hfl_errf(err, "%s: sample count %u out of range [1, %u]", path, fp->n, IDX_MAX_N);
        goto fail;
    }
    if (fp->rows == 0 || fp->cols == 0 || (uint64_t)fp->rows * fp->cols > IDX_MAX_DIM) {
        hfl_errf(err, "%s: image size %ux%u out of range (1 to %u pixels)", path, fp->rows,
                 fp->cols, IDX_MAX_DIM);
        goto fail;
    }
    return 0;
fail:
    gzclose(fp->f);
    fp->f = NULL;
    return -1;
}

static int idx_read_labels(idx_file *fp, int32_t *y, char *err) {
    unsigned char *raw = hfl_malloc(fp->n);
    int rc = idx_read_fully(fp, raw, fp->n, "labels", err);
    for (uint32_t i = 0; rc == 0 && i < fp->n; i++) {
        if (raw[i] >= IDX_N_CLASSES)
            rc = hfl_errf(err, "%s: label %u of sample %u is not below %d", fp->path, raw[i], i,
                          IDX_N_CLASSES);
        y[i] = raw[i];
    }
    free(raw);
    return rc;
}

/* Reads n*dim pixels into *x (malloc'd, standardised); grows with the data read. */
static int idx_read_pixels(idx_file *fp, float **x, char *err) {
    size_t total = (size_t)fp->n * fp->rows * fp->cols, done = 0, cap = 0;
    unsigned char raw[IDX_CHUNK];
    float *buf = NULL;
    while (done < total) {
        size_t want = total - done < IDX_CHUNK ? total - done : IDX_CHUNK;
        if (idx_read_fully(fp, raw, want, "images", err) != 0) {
            free(buf);
            return -1;
        }
        if (done + want > cap) {
            cap = cap * 2 > done + want ? cap * 2 : done + want;
            if (cap > total) cap = total;
            float *nb = realloc(buf, cap * sizeof(float));
            if (!nb) {
                free(buf);
                return hfl_errf(err, "out of memory reading %s", fp->path);
            }
            buf = nb;
        }
        for (size_t i = 0; i < want; i++)
            buf[done + i] = hfl_idx_pixel(raw[i]);
        done += want;
    }
    *x = buf;
    return 0;
}

int hfl_idx_load(const char *images_path, const char *labels_path, hfl_dataset *out, char *err) {
    memset(out, 0, sizeof *out);
    idx_file im = {0}, lb = {0};
    float *x = NULL;
    int32_t *y = NULL;
    int rc = -1;
    if (idx_open(&im, images_path, IDX_MAGIC_IMAGES, err) != 0) return -1;
    if (idx_open(&lb, labels_path, IDX_MAGIC_LABELS, err) != 0) goto done;
    if (im.n != lb.n) {
        hfl_errf(err, "%s has %u images but %s has %u labels", images_path, im.n, labels_path,
                 lb.n);
        goto done;
    }
    y = hfl_malloc((size_t)lb.n * sizeof *y);
    if (idx_read_labels(&lb, y, err) != 0) goto done;
    if (idx_read_pixels(&im, &x, err) != 0) goto done;
    out->n = (int)im.n;
    out->dim = (int)(im.rows * im.cols);
    out->n_classes = IDX_N_CLASSES;
    out->pixels = 1;
    out->x = x;
    out->y = y;
    x = NULL;
    y = NULL;
    rc = 0;
done:
    free(x);
    free(y);
    gzclose(im.f);
    if (lb.f) gzclose(lb.f);
    return rc;
}

/* The images of fp, keeping sample i at row pos[i] of x (pos -1: skipped).
 * Runs of skipped rows are passed over with gzseek: in a plain (decompressed)
 * file that is a real seek, so a client reads just its rows; in a gzip file
 * zlib decompresses past them. A file shorter than its header says is
 * "truncated" even when the rows it lacks are skipped ones. */
static int idx_read_picked(idx_file *fp, const int *pos, float *x, char *err) {
    size_t dim = (size_t)fp->rows * fp->cols;
    unsigned char *raw = hfl_malloc(dim);
    int rc = 0;
    for (uint32_t i = 0; rc == 0 && i < fp->n;) {
        uint32_t run = 0;
        while (i + run < fp->n && pos[i + run] < 0) run++;
        if (run > 0) {
            i += run;
            /* the last skipped byte is read, so a short file cannot pass unseen */
            if (gzseek(fp->f, (z_off_t)(run * dim - 1), SEEK_CUR) < 0)
                rc = hfl_errf(err, "%s is truncated (images)", fp->path);
            else
                rc = idx_read_fully(fp, raw, 1, "images", err);
            continue;
        }
        rc = idx_read_fully(fp, raw, dim, "images", err);
        if (rc != 0) break;
        float *row = x + (size_t)pos[i] * dim;
        for (size_t j = 0; j < dim; j++) row[j] = hfl_idx_pixel(raw[j]);
        i++;
    }
    free(raw);
    return rc;
}

int hfl_idx_decompress(const char *src, const char *dst, char *err) {
    errno = 0;
    gzFile in = gzopen(src, "rb");
    if (!in) return hfl_errf(err, "cannot open %s: %s", src, errno ? strerror(errno) : "out of memory");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    FILE *out = fopen(tmp, "wb");
    int got = 0, rc = 0;
    unsigned char *buf = hfl_malloc(IDX_CHUNK);
    if (!out) rc = hfl_errf(err, "cannot write %s: %s", tmp, strerror(errno));
    while (out && rc == 0 && (got = gzread(in, buf, IDX_CHUNK)) > 0)
        if (fwrite(buf, 1, (size_t)got, out) != (size_t)got) rc = hfl_errf(err, "cannot write %s: %s", tmp, strerror(errno));
    if (out && rc == 0 && got < 0) rc = hfl_errf(err, "cannot read %s: %s", src, gzerror(in, &got));
    if (out && fclose(out) != 0 && rc == 0) rc = hfl_errf(err, "cannot write %s: %s", tmp, strerror(errno));
    if (out && rc == 0 && rename(tmp, dst) != 0) rc = hfl_errf(err, "cannot rename %s: %s", tmp, strerror(errno));
    if (out && rc != 0) remove(tmp);
    free(buf);
    gzclose(in);
    return rc;
}

int hfl_idx_load_picked(const char *images_path, const char *labels_path, hfl_idx_picker pick, void *ctx,
                        hfl_dataset *out, char *err) {
    memset(out, 0, sizeof *out);
    idx_file im = {0}, lb = {0};
    int32_t *y = NULL;
    int *idx = NULL, *pos = NULL, k = 0, rc = -1;
    if (idx_open(&im, images_path, IDX_MAGIC_IMAGES, err) != 0) return -1;
    if (idx_open(&lb, labels_path, IDX_MAGIC_LABELS, err) != 0) goto done;
    if (im.n != lb.n) {
        hfl_errf(err, "%s has %u images but %s has %u labels", images_path, im.n, labels_path, lb.n);
        goto done;
    }
    y = hfl_malloc((size_t)lb.n * sizeof *y);
    if (idx_read_labels(&lb, y, err) != 0 || (k = pick(ctx, y, (int)lb.n, &idx, err)) < 0) goto done;
    pos = hfl_malloc((size_t)lb.n * sizeof *pos);
    for (uint32_t i = 0; i < lb.n; i++) pos[i] = -1;
    for (int j = 0; j < k; j++) {
        if (idx[j] < 0 || (uint32_t)idx[j] >= lb.n || pos[idx[j]] >= 0) {
            hfl_errf(err, "sample %d picked twice or outside the %u of %s", idx[j], lb.n, images_path);
            goto done;
        }
        pos[idx[j]] = j;
    }
    out->dim = (int)(im.rows * im.cols);
    /* malloc, not hfl_malloc: a header claiming absurd images fails in one line */
    out->x = malloc((size_t)(k ? k : 1) * (size_t)out->dim * sizeof(float));
    if (!out->x) {
        hfl_errf(err, "out of memory for %d images of %d pixels from %s", k, out->dim, images_path);
        goto done;
    }
    if (idx_read_picked(&im, pos, out->x, err) != 0) {
        hfl_dataset_free(out);
        goto done;
    }
    out->y = hfl_malloc((size_t)(k ? k : 1) * sizeof(int32_t));
    for (int j = 0; j < k; j++) out->y[j] = y[idx[j]];
    out->n = k;
    out->n_classes = IDX_N_CLASSES;
    out->pixels = 1;
    rc = 0;
done:
    free(y);
    free(idx);
    free(pos);
    gzclose(im.f);
    if (lb.f) gzclose(lb.f);
    return rc;
}

/* dir/<prefix>-{images-idx3,labels-idx1}-ubyte into images and labels: each
 * plain file when it is there decompressed (hfl-sim writes them so
 * that each client reads only its rows), else the .gz files. */
static int fmnist_paths(const char *dir, int train, char *images, char *labels, size_t cap, char *err) {
    const char *prefix = train ? "train" : "t10k";
    int a = snprintf(images, cap, "%s/%s-images-idx3-ubyte", dir, prefix);
    int b = snprintf(labels, cap, "%s/%s-labels-idx1-ubyte", dir, prefix);
    if (a < 0 || b < 0 || a + 3 >= (int)cap || b + 3 >= (int)cap)
        return hfl_errf(err, "dataset directory path too long: %.200s...", dir);
    if (access(images, R_OK) != 0) strcat(images, ".gz");
    if (access(labels, R_OK) != 0) strcat(labels, ".gz");
    return 0;
}

int hfl_fmnist_load_picked(const char *dir, int train, hfl_idx_picker pick, void *ctx, hfl_dataset *out,
                           char *err) {
    char images[4096], labels[4096];
    memset(out, 0, sizeof *out);
    if (fmnist_paths(dir, train, images, labels, sizeof images, err) != 0) return -1;
    return hfl_idx_load_picked(images, labels, pick, ctx, out, err);
}

int hfl_fmnist_unpack(const char *src, const char *dst, char *err) {
    static const char *names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                   "t10k-labels-idx1-ubyte"};
    char from[4096], to[4096];
    if (hfl_mkdirs(dst, err) != 0) return -1;
    for (int i = 0; i < 4; i++) {
        int a = snprintf(from, sizeof from, "%s/%s.gz", src, names[i]);
        int b = snprintf(to, sizeof to, "%s/%s", dst, names[i]);
        if (a < 0 || b < 0 || a >= (int)sizeof from || b >= (int)sizeof to)
            return hfl_errf(err, "dataset directory path too long: %.200s...", a >= (int)sizeof from ? src : dst);
        if (hfl_idx_decompress(from, to, err) != 0) return -1;
    }
    return 0;
}

int hfl_fmnist_load(const char *dir, int train, hfl_dataset *out, char *err) {
    char images[4096], labels[4096];
    memset(out, 0, sizeof *out);
    if (fmnist_paths(dir, train, images, labels, sizeof images, err) != 0) return -1;
    return hfl_idx_load(images, labels, out, err);
}

void hfl_dataset_subset(const hfl_dataset *src, const int *idx, int n, hfl_dataset *out) {
    out->n = n;
    out->dim = src->dim;
    out->n_classes = src->n_classes;
    out->pixels = src->pixels;
    out->label_rows = src->label_rows;
    size_t r = (size_t)hfl_dataset_label_rows(src);
    out->x = hfl_malloc((size_t)n * (size_t)src->dim * sizeof(float));
    out->y = hfl_malloc((size_t)n * r * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        memcpy(out->x + (size_t)i * src->dim, src->x + (size_t)idx[i] * src->dim,
               (size_t)src->dim * sizeof(float));
        memcpy(out->y + (size_t)i * r, src->y + (size_t)idx[i] * r, r * sizeof(int32_t));
    }
}

void hfl_dataset_append(hfl_dataset *dst, const hfl_dataset *src) {
    if (src->n == 0) return;
    if (dst->n == 0) {
        dst->dim = src->dim;
        dst->n_classes = src->n_classes;
        dst->label_rows = src->label_rows;
        dst->pixels = src->pixels;
    }
    size_t r = (size_t)hfl_dataset_label_rows(src), n = (size_t)dst->n + (size_t)src->n;
    dst->x = hfl_realloc(dst->x, sizeof(float) * n * (size_t)src->dim);
    dst->y = hfl_realloc(dst->y, sizeof(int32_t) * n * r);
    memcpy(dst->x + (size_t)dst->n * src->dim, src->x, sizeof(float) * (size_t)src->n * src->dim);
    memcpy(dst->y + (size_t)dst->n * r, src->y, sizeof(int32_t) * (size_t)src->n * r);
    if (src->n_classes > dst->n_classes) dst->n_classes = src->n_classes;
    dst->n = (int)n;
}

void hfl_dataset_free(hfl_dataset *d) {
    if (!d) return;
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}
