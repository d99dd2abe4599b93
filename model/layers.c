/* layers.c: dense forward/backward as backend sgemm calls (see layers.h). */
#include "model/layers.h"

void hfl_dense_forward(const hfl_backend *be, const float *w, const float *b, const float *x,
                       float *y, int n, int in, int out) {
    /* y[n,out] = x[n,in] * w[out,in]^T */
    be->sgemm(0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    be->bias_add(y, b, n, out);
}

void hfl_dense_backward(const hfl_backend *be, const float *w, const float *x, const float *dy,
                        float *dw, float *db, float *dx, int n, int in, int out) {
    /* dw[out,in] = dy[n,out]^T * x[n,in]; beta 0 overwrites, so the gradient
     * buffer needs no clearing pass. */
    be->sgemm(1, 0, out, in, n, 1.0f, dy, out, x, in, 0.0f, dw, in);
    /* bias_grad accumulates, so clear the (short) bias gradient first. */
    be->fill(db, 0.0f, (size_t)out);
    be->bias_grad(db, dy, n, out);
    /* dx[n,in] = dy[n,out] * w[out,in] */
    if (dx) be->sgemm(0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}
