/* idx.h: datasets in memory and the IDX file reader (gzipped or plain).
 *
 * IDX (LeCun's MNIST format): big-endian magic 0x00000803 for u8 images
 * [n, rows, cols] and 0x00000801 for u8 labels [n]. Fashion-MNIST ships as
 * gzipped IDX in /usr/share/datasets/fashion-mnist (Debian's
 * dataset-fashion-mnist). Pixels are scaled to [0, 1] and standardised with
 * the training set's mean 0.2860 and std 0.3530. */
#ifndef HFL_IDX_H
#define HFL_IDX_H

#include <stdint.h>

#define HFL_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct {
    int n;          /* samples */
    int dim;        /* features per sample (rows * cols) */
    int n_classes;  /* 10 for Fashion-MNIST */
    float *x;       /* n * dim */
    int32_t *y;     /* n * hfl_dataset_label_rows labels in [0, n_classes) */
    int pixels;     /* every feature is hfl_idx_pixel of a byte (IDX files, uint8 arrays), so
                       the set can be written back as bytes (hfl_idx_unpixel) */
    int label_rows; /* labels per sample: 0 or 1 for one (a class), T for a language
                       model's next token at each of T positions (model.h) */
} hfl_dataset;

/* Labels per sample (label_rows, with 0 read as 1). */
static inline int hfl_dataset_label_rows(const hfl_dataset *d) {
    return d->label_rows > 1 ? d->label_rows : 1;
}

/* A pixel byte as a feature: scaled to [0, 1] and standardised with
 * Fashion-MNIST's mean and std (the same for every byte-valued dataset);
 * and back, exact for every value hfl_idx_pixel gives. */
float hfl_idx_pixel(uint8_t v);
uint8_t hfl_idx_unpixel(float x);

/* Reads an image file and its label file; checks magics, dimensions, counts
 * agreeing, and labels < 10. Returns -1 with a one-line err on any problem. */
int hfl_idx_load(const char *images_path, const char *labels_path, hfl_dataset *out, char *err);
/* dir/train-*-ubyte (train=1) or dir/t10k-*-ubyte (train=0), each file
 * plain when it is there, else its .gz. */
int hfl_fmnist_load(const char *dir, int train, hfl_dataset *out, char *err);
/* Chooses the samples to keep from the labels (y[0..n)): their indices, in
 * the order wanted, into *idx (malloc'd); returns how many, or -1 with err. */
typedef int (*hfl_idx_picker)(void *ctx, const int32_t *y, int n, int **idx, char *err);
/* As hfl_idx_load, then hfl_dataset_subset with pick's indices, without
 * ever holding the unpicked images: the labels are read first, pick chooses,
 * and the images stream past keeping only the chosen ones (a client's share
 * of Fashion-MNIST costs its share, not the 188 MB of the whole set). */
int hfl_idx_load_picked(const char *images_path, const char *labels_path, hfl_idx_picker pick, void *ctx,
                        hfl_dataset *out, char *err);
/* Writes src (an IDX file, gzipped or not) decompressed to dst, atomically
 * (dst.tmp, then rename); -1 with err. */
int hfl_idx_decompress(const char *src, const char *dst, char *err);
/* The four Fashion-MNIST .gz files of src decompressed into dst (made if
 * missing), so that loads from dst read just the rows they keep; -1 with err. */
int hfl_fmnist_unpack(const char *src, const char *dst, char *err);
int hfl_fmnist_load_picked(const char *dir, int train, hfl_idx_picker pick, void *ctx, hfl_dataset *out,
                           char *err);
/* New dataset holding the listed samples of src, in that order. */
void hfl_dataset_subset(const hfl_dataset *src, const int *idx, int n, hfl_dataset *out);
/* Appends src's samples to dst (same dim and label rows, or dst empty). */
void hfl_dataset_append(hfl_dataset *dst, const hfl_dataset *src);
void hfl_dataset_free(hfl_dataset *d);

#endif
