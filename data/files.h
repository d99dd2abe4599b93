/* files.h: datasets held in a user's own files, read and written.
 *
 * A dataset file holds two arrays: x, the features, shaped [n, ...] (each
 * sample's values flattened in C order), and y, the labels, shaped [n], or
 * [n, R] for R labels per sample (a language model's next token at each of
 * R = T positions, with x the T token ids as float32: hfl-data text).
 * Three containers carry them:
 *   - a NumPy .npz archive with members x.npy and y.npy (np.savez or
 *     np.savez_compressed);
 *   - a directory holding x.npy and y.npy;
 *   - a safetensors file with tensors "x" and "y".
 * x is uint8 (taken as pixel bytes, hfl_idx_pixel, exactly as Fashion-MNIST's
 * IDX files are) or float32 (taken as is; every value must be finite); y is
 * any integer type with values in [0, HFL_DATA_MAX_CLASSES). Other members
 * or tensors are ignored. The dataset's n_classes is its largest label + 1;
 * the programs check it against the model's outputs.
 *
 * The writer (hfl-data split) stores x as uint8 when the dataset came from
 * bytes (hfl_dataset.pixels) and float32 otherwise, y as int64 (PyTorch's
 * label type), so a shard reads back to the same features, bit for bit. */
#ifndef HFL_DATA_FILES_H
#define HFL_DATA_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "data/idx.h"

#define HFL_DATA_MAX_CLASSES 65536

typedef enum { HFL_DATA_NPZ = 1, HFL_DATA_SAFETENSORS = 2 } hfl_data_format;

int hfl_data_format_parse(const char *text, hfl_data_format *f, char *err);
const char *hfl_data_format_ext(hfl_data_format f); /* "npz", "safetensors" */

/* 1 when path names a dataset hfl_data_load reads (a file, or a directory
 * holding x.npy) rather than a Fashion-MNIST IDX directory; a path that does
 * not exist is a dataset file when its name ends .npz, .npy or .safetensors,
 * so each reader reports the missing path its own way. */
int hfl_data_is_file(const char *path);
/* Reads and validates the dataset at path; -1 with a one-line err that
 * names the path. */
int hfl_data_load(const char *path, hfl_dataset *out, char *err);
/* The same on a file's bytes (.npz or safetensors). */
int hfl_data_decode(const uint8_t *buf, size_t len, hfl_dataset *out, char *err);
/* Writes d to path in format f, atomically. */
int hfl_data_save(const char *path, const hfl_dataset *d, hfl_data_format f, char *err);

#endif
