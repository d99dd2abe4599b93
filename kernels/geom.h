/* geom.h: the geometry of a sliding window over one [C, H, W] sample, shared
 * by the convolution (im2col, col2im) and pooling ops of both backends.
 *
 * A window of k x k taps moves with stride s over the input padded by p zeros
 * on each side, so the output has ho = (h + 2p - k) / s + 1 rows and
 * wo = (w + 2p - k) / s + 1 columns (PyTorch's floor rule). Output position
 * (oy, ox) reads input rows oy*s - p .. oy*s - p + k - 1 (likewise columns);
 * taps outside [0, h) x [0, w) read the padding. It is a plain struct passed
 * by value, so a CUDA kernel can take it as an argument unchanged. */
#ifndef HFL_GEOM_H
#define HFL_GEOM_H

typedef struct {
    int c, h, w;    /* input channels, rows, columns of one sample */
    int k, s, p;    /* window size, stride, zero padding (each side) */
    int ho, wo;     /* output rows and columns: (h + 2p - k) / s + 1 */
} hfl_window_geom;

/* Fills ho and wo from the rest; they are < 1 when the window does not fit. */
static inline hfl_window_geom hfl_window_geom_make(int c, int h, int w, int k, int s, int p) {
    hfl_window_geom g = {c, h, w, k, s, p, 0, 0};
    g.ho = h + 2 * p - k < 0 ? 0 : (h + 2 * p - k) / s + 1;
    g.wo = w + 2 * p - k < 0 ? 0 : (w + 2 * p - k) / s + 1;
    return g;
}

#endif
