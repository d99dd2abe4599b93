/* npy.h: NumPy's .npy arrays and the zip archives (.npz) that hold them.
 *
 * .npy (numpy.lib.format, "NEP 1"): the magic "\x93NUMPY", a major and a
 * minor version byte, the header's length (2 bytes little-endian in version
 * 1, 4 in versions 2 and 3), then the header, a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), } padded
 * with spaces and ended by a newline, then the data in C order. hfl reads
 * plain numeric dtypes (descr '|u1', '<i8', '<f4', ...; little-endian, or
 * byte-sized) and refuses Fortran order, structured and object dtypes.
 *
 * .npz (numpy.savez, savez_compressed): a zip archive whose members are
 * .npy files named after the arrays ("x.npy"). The reader goes by the
 * central directory (zip64 included, which numpy writes for every member),
 * takes stored and deflated members (zlib) and checks each one's CRC-32.
 * The writer stores members uncompressed with fixed timestamps, so the same
 * arrays always give the same bytes.
 *
 * Every refusal is one line in err; nothing is allocated past a size the
 * file could not back (a deflated member may claim at most 1032 times its
 * compressed size, deflate's own limit). */
#ifndef HFL_DATA_NPY_H
#define HFL_DATA_NPY_H

#include <stddef.h>
#include <stdint.h>

#define HFL_NPY_MAX_DIMS 8

typedef struct {
    char kind;              /* 'u' unsigned integer, 'i' signed integer, 'f' float */
    int esize;              /* bytes per element: 1, 2, 4 or 8 */
    int ndim;
    int64_t shape[HFL_NPY_MAX_DIMS];
    uint64_t count;         /* elements */
    const uint8_t *data;    /* count * esize bytes inside the parsed buffer */
} hfl_npy;

/* Validates buf as one .npy file; the result points into buf. */
int hfl_npy_parse(const uint8_t *buf, size_t len, hfl_npy *a, char *err);
/* A version 1.0 .npy file of descr ("|u1", "<i8", "<f4"), shape and data
 * (little-endian, C order). malloc'd; *len gets its size. */
uint8_t *hfl_npy_encode(const char *descr, const int64_t *shape, int ndim, const void *data, size_t *len);

/* The bytes of member name in the zip archive buf, decompressed and
 * CRC-checked, into *out (malloc'd). 0, or 1 when there is no such member
 * (err says so), or -1 with err when the archive is broken. */
int hfl_zip_read(const uint8_t *buf, size_t len, const char *name, uint8_t **out, size_t *out_len, char *err);
/* A zip archive of n stored members; NULL with err when it would need
 * zip64 (any member or the whole past 4 GiB). */
uint8_t *hfl_zip_write(const char *const *names, const uint8_t *const *data, const size_t *lens, int n, size_t *len,
                       char *err);

#endif
