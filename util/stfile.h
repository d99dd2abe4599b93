/* stfile.h: the safetensors container, independent of what its tensors mean.
 *
 * The format (huggingface/safetensors, docs "Format"): an unsigned 64-bit
 * little-endian header length N, N bytes of JSON, then the data buffer. The
 * JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin,
 * end]} (byte offsets into the data buffer) and may hold "__metadata__", a
 * map of strings. Tensors are little-endian and row-major.
 *
 * hfl_st_parse validates the whole container before anyone reads a byte of
 * data: the header length against the file, the JSON (an object, padded
 * only with spaces), every entry's dtype (one the format names), shape and
 * offsets (in range, matching shape times the dtype's size), and the buffer
 * indexed exactly once, with no overlaps and no holes, as the reference
 * implementation requires. What the tensors must be is the caller's check:
 * model/safetensors.c wants a model's F32 weights, data/files.c a dataset's
 * x and y. Every refusal is one line in err. */
#ifndef HFL_UTIL_STFILE_H
#define HFL_UTIL_STFILE_H

#include <stddef.h>
#include <stdint.h>

#define HFL_ST_MAX_HEADER (100u << 20) /* the reference reader's own limit */
#define HFL_ST_MAX_TENSORS 1024        /* a file with more is refused before anything is sorted */
#define HFL_ST_MAX_DIMS 8

typedef struct {
    const char *name;       /* points into the parsed header */
    char dtype[8];          /* "F32", "U8", "I64", ... */
    size_t esize;           /* bytes per element */
    int ndim;
    int64_t shape[HFL_ST_MAX_DIMS];
    uint64_t count;         /* elements */
    const uint8_t *data;    /* count * esize bytes inside the parsed buffer; NULL from hfl_st_open */
    uint64_t offset;        /* where they start in the file */
} hfl_st_tensor;

typedef struct {
    void *json;             /* the header (cJSON), owned */
    int n;
    hfl_st_tensor *t;       /* in header order */
    int fd, has_fd;         /* hfl_st_open's file, read by hfl_st_read */
} hfl_st_file;

/* Validates buf and indexes its tensors; the index points into buf, which
 * must outlive it. -1 with err (and nothing to free) on any fault. */
int hfl_st_parse(const uint8_t *buf, size_t len, hfl_st_file *f, char *err);
/* The same checks with only the header read from path (its 8-byte length
 * and JSON), the data buffer's size taken from the file's: a tensor's bytes
 * are then read by hfl_st_read where the caller wants them, so a model is
 * never whole in memory twice. The file stays open until hfl_st_free. -1
 * with err (naming path), nothing to free. */
int hfl_st_open(const char *path, hfl_st_file *f, char *err);
/* Tensor t's count * esize bytes into dst: from the parsed buffer, or read
 * from hfl_st_open's file. -1 with err when the read fails (a file that
 * shrank since it was opened). */
int hfl_st_read(const hfl_st_file *f, const hfl_st_tensor *t, void *dst, char *err);
const hfl_st_tensor *hfl_st_get(const hfl_st_file *f, const char *name);
void hfl_st_free(hfl_st_file *f);
/* "[2, 3]" into out. */
void hfl_st_shape_text(const int64_t *shape, int ndim, char *out, size_t n);

/* One tensor to write. */
typedef struct {
    const char *name, *dtype;
    int ndim;
    int64_t shape[HFL_ST_MAX_DIMS];
    const void *data;       /* shape's product times the dtype's size bytes, little-endian */
} hfl_st_put;

/* The file's bytes: the tensors' data laid out in the order given, the
 * header padded with spaces so the data starts 8-byte aligned, and meta's
 * key/value pairs (meta[2i], meta[2i+1]) as __metadata__. NULL with err on
 * an unknown dtype or out of memory. */
uint8_t *hfl_st_encode(const hfl_st_put *t, int n, const char *const *meta, int n_meta, size_t *len, char *err);
/* The same file written to path (hfl_write_parts_atomic), the tensors'
 * data straight from where it lies: never the whole file in memory. 0, or
 * -1 with err. */
int hfl_st_write(const char *path, const hfl_st_put *t, int n, const char *const *meta, int n_meta, char *err);

#endif
