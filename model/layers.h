/* layers.h: forward and backward of the layer kinds, written against the
 * backend interface so they run unchanged on the CPU and on a GPU.
 *
 * Shapes are row-major with the batch first: x[n, in], y[n, out], and a dense
 * layer's weight w[out, in] (PyTorch's nn.Linear layout) followed by b[out].
 * All pointers are backend (device) pointers. ReLU needs no wrapper: it is
 * be->relu_fwd / be->relu_bwd, which work in place. */
#ifndef HFL_LAYERS_H
#define HFL_LAYERS_H

#include "kernels/backend.h"

/* y = x w^T + b */
void hfl_dense_forward(const hfl_backend *be, const float *w, const float *b, const float *x,
                       float *y, int n, int in, int out);

/* dw = dy^T x and db = colsum(dy) (both overwritten, not accumulated);
 * dx = dy w when dx != NULL (pass NULL for a first layer: nobody needs it). */
void hfl_dense_backward(const hfl_backend *be, const float *w, const float *x, const float *dy,
                        float *dw, float *db, float *dx, int n, int in, int out);

#endif
