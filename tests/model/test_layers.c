/* test_layers.c: finite-difference gradient checks for each layer kind on the
 * CPU backend: dense (weights, bias and input), ReLU, and softmax
 * cross-entropy. A scalar loss L = sum(out * R) with a fixed random R turns
 * each layer's backward into a gradient we can check by central differences. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/philox.h"
#include "model/layers.h"
#include "tests/check.h"

static float rnd(uint32_t tensor, uint64_t i) {
    return 2.0f * hfl_u01(hfl_philox_u32(11, 99, 0, 0, tensor, i)) - 1.0f;
}

enum { N = 3, IN = 5, OUT = 4 };

/* L = sum(dense(x) * R), in double. */
static double dense_loss(const hfl_backend *be, const float *w, const float *b, const float *x,
                         const float *r) {
    float y[N * OUT];
    hfl_dense_forward(be, HFL_PREC_FP32, w, b, x, y, N, IN, OUT, NULL);
    double s = 0.0;
    for (int i = 0; i < N * OUT; i++) s += (double)y[i] * r[i];
    return s;
}

/* Central difference of dense_loss in element *p. */
static double dense_fd(const hfl_backend *be, float *p, const float *w, const float *b,
                       const float *x, const float *r) {
    const float eps = 1e-2f;
    float keep = *p;
    *p = keep + eps;
    double lp = dense_loss(be, w, b, x, r);
    *p = keep - eps;
    double lm = dense_loss(be, w, b, x, r);
    *p = keep;
    return (lp - lm) / (2.0 * eps);
}

static void test_dense(const hfl_backend *be) {
    float w[OUT * IN], b[OUT], x[N * IN], r[N * OUT], y[N * OUT];
    for (int i = 0; i < OUT * IN; i++) w[i] = rnd(1, i);
    for (int i = 0; i < OUT; i++) b[i] = rnd(2, i);
    for (int i = 0; i < N * IN; i++) x[i] = rnd(3, i);
    for (int i = 0; i < N * OUT; i++) r[i] = rnd(4, i);

    /* Forward against the definition y = x w^T + b. */
    hfl_dense_forward(be, HFL_PREC_FP32, w, b, x, y, N, IN, OUT, NULL);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double s = b[o];
            for (int i = 0; i < IN; i++) s += (double)x[n * IN + i] * w[o * IN + i];
            CHECK_CLOSE(y[n * OUT + o], s, 1e-5, 1e-5);
        }

    /* Backward: the outputs are overwritten, so start them dirty. */
    float dw[OUT * IN], db[OUT], dx[N * IN];
    for (int i = 0; i < OUT * IN; i++) dw[i] = 100.0f;
    for (int i = 0; i < OUT; i++) db[i] = 100.0f;
    hfl_dense_backward(be, HFL_PREC_FP32, w, x, r, dw, db, dx, N, IN, OUT, NULL, 0);
    for (int i = 0; i < OUT * IN; i++) CHECK_CLOSE(dw[i], dense_fd(be, &w[i], w, b, x, r), 1e-3, 1e-3);
    for (int i = 0; i < OUT; i++) CHECK_CLOSE(db[i], dense_fd(be, &b[i], w, b, x, r), 1e-3, 1e-3);
    for (int i = 0; i < N * IN; i++) CHECK_CLOSE(dx[i], dense_fd(be, &x[i], w, b, x, r), 1e-3, 1e-3);

    /* dx == NULL skips the input gradient but still fills dw and db. */
    float dw2[OUT * IN], db2[OUT];
    hfl_dense_backward(be, HFL_PREC_FP32, w, x, r, dw2, db2, NULL, N, IN, OUT, NULL, 0);
    for (int i = 0; i < OUT * IN; i++) CHECK(dw2[i] == dw[i]);
    for (int i = 0; i < OUT; i++) CHECK(db2[i] == db[i]);
}

static double relu_loss(const hfl_backend *be, const float *x, const float *r, int n) {
    float y[64];
    be->relu_fwd(HFL_PREC_FP32, y, x, (size_t)n);
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)y[i] * r[i];
    return s;
}

static void test_relu(const hfl_backend *be) {
    enum { M = 24 };
    float x[M], r[M], y[M], dx[M];
    /* Keep inputs at least 0.1 from the kink so x +- eps stays on one side. */
    for (int i = 0; i < M; i++) {
        float v = rnd(5, i);
        x[i] = v >= 0 ? v + 0.1f : v - 0.1f;
        r[i] = rnd(6, i);
    }
    be->relu_fwd(HFL_PREC_FP32, y, x, M);
    be->relu_bwd(HFL_PREC_FP32, dx, r, y, M);
    int active = 0;
    for (int i = 0; i < M; i++) {
        const float eps = 1e-3f;
        float keep = x[i];
        x[i] = keep + eps;
        double lp = relu_loss(be, x, r, M);
        x[i] = keep - eps;
        double lm = relu_loss(be, x, r, M);
        x[i] = keep;
        CHECK_CLOSE(dx[i], (lp - lm) / (2.0 * eps), 1e-3, 1e-3);
        active += x[i] > 0;
    }
    CHECK(active > 0 && active < M); /* both sides of the kink were exercised */
}

/* The mean loss of the backend op through fresh step scalars. */
static double mean_xent(const hfl_backend *be, const float *z, const int32_t *lab, float *d,
                        int rows, int cols) {
    hfl_step_scalars sc = {.loss_scale = 1.0f, .finite = 1};
    be->softmax_xent(HFL_PREC_FP32, z, lab, d, rows, cols, rows, &sc, NULL);
    return sc.loss_sum / rows;
}

static void test_softmax_xent(const hfl_backend *be) {
    enum { R = 4, C = 6 };
    float z[R * C], d[R * C];
    int32_t lab[R] = {0, 5, 2, 2};
    for (int i = 0; i < R * C; i++) z[i] = 3.0f * rnd(7, i);
    mean_xent(be, z, lab, d, R, C);
    for (int i = 0; i < R * C; i++) {
        const float eps = 1e-2f;
        float keep = z[i];
        z[i] = keep + eps;
        double lp = mean_xent(be, z, lab, NULL, R, C);
        z[i] = keep - eps;
        double lm = mean_xent(be, z, lab, NULL, R, C);
        z[i] = keep;
        CHECK_CLOSE(d[i], (lp - lm) / (2.0 * eps), 2e-4, 1e-2);
    }
}

static void case_dense(void) { test_dense(hfl_backend_cpu()); }
static void case_relu(void) { test_relu(hfl_backend_cpu()); }
static void case_softmax_xent(void) { test_softmax_xent(hfl_backend_cpu()); }

static const check_case cases[] = {
    {"dense", case_dense},
    {"relu", case_relu},
    {"softmax_xent", case_softmax_xent},
};

int main(int argc, char **argv) {
    return check_run("test_layers", cases, CHECK_CASES(cases), argc, argv);
}
