/* test_backend_cpu.c: every op of the CPU backend against a hand-computed or
 * naive reference: alignment, copies, sgemm in all four transpose forms with
 * alpha/beta and padded leading dimensions, bias add/grad, ReLU, softmax
 * cross-entropy (known losses, gradient, correct count, huge logits) and the
 * SGD update with momentum and weight decay. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "tests/check.h"

static float rnd(uint64_t i) { return 2.0f * hfl_u01(hfl_philox_u32(7, 99, 0, 0, 0, i)) - 1.0f; }

static void test_alloc_and_copies(const hfl_backend *be) {
    size_t sizes[] = {0, 1, 63, 64, 65, 4096 + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = be->alloc(sizes[i]);
        CHECK(p != NULL);
        CHECK((uintptr_t)p % 64 == 0);
        be->free(p);
    }
    float host[37], back[37];
    for (int i = 0; i < 37; i++) host[i] = rnd(i);
    float *a = be->alloc(sizeof host), *b = be->alloc(sizeof host);
    be->upload(a, host, sizeof host);
    be->copy(b, a, sizeof host);
    be->download(back, b, sizeof host);
    CHECK(memcmp(host, back, sizeof host) == 0);
    be->fill(a, 2.5f, 37);
    be->download(back, a, sizeof host);
    for (int i = 0; i < 37; i++) CHECK(back[i] == 2.5f);
    be->free(a);
    be->free(b);
}

/* C = alpha op(A) op(B) + beta C computed naively in double. */
static void ref_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[p * lda + i] : a[i * lda + p];
                double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += av * bv;
            }
            c[i * ldc + j] = (float)(alpha * s + beta * c[i * ldc + j]);
        }
}

static void test_sgemm(const hfl_backend *be) {
    enum { M = 5, N = 7, K = 9, PAD = 3 };
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
            int arows = ta ? K : M, brows = tb ? N : K;
            float *a = be->alloc(sizeof(float) * arows * lda);
            float *b = be->alloc(sizeof(float) * brows * ldb);
            float *c = be->alloc(sizeof(float) * M * ldc);
            float want[M * (N + PAD)];
            for (int i = 0; i < arows * lda; i++) a[i] = rnd(i);
            for (int i = 0; i < brows * ldb; i++) b[i] = rnd(1000 + i);
            for (int i = 0; i < M * ldc; i++) c[i] = want[i] = rnd(2000 + i);
            be->gemm(HFL_PREC_FP32, 0, ta, tb, M, N, K, 0.75f, a, lda, b, ldb, 0.5f, c, ldc, NULL,
                     HFL_BIAS_NONE, NULL);
            ref_gemm(ta, tb, M, N, K, 0.75f, a, lda, b, ldb, 0.5f, want, ldc);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < ldc; j++) CHECK_CLOSE(c[i * ldc + j], want[i * ldc + j], 1e-5, 1e-5);
            be->free(a);
            be->free(b);
            be->free(c);
        }
}

static void test_bias_and_relu(const hfl_backend *be) {
    /* y = x I^T + bias, per column and per row (exact values) */
    float x6[6] = {1, 2, 3, 4, 5, 6}, eye[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, y[6];
    float bias[3] = {10, 20, 30}, row_bias[2] = {100, 200};
    be->gemm(HFL_PREC_FP32, 0, 0, 1, 2, 3, 3, 1.0f, x6, 3, eye, 3, 0.0f, y, 3, bias, HFL_BIAS_COL,
             NULL);
    float want_y[6] = {11, 22, 33, 14, 25, 36};
    for (int i = 0; i < 6; i++) CHECK(y[i] == want_y[i]);
    be->gemm(HFL_PREC_FP32, 0, 0, 1, 2, 3, 3, 1.0f, x6, 3, eye, 3, 0.0f, y, 3, row_bias,
             HFL_BIAS_ROW, NULL);
    float want_row[6] = {101, 102, 103, 204, 205, 206};
    for (int i = 0; i < 6; i++) CHECK(y[i] == want_row[i]);

    float db[3] = {1, 1, 1}, dy[6] = {1, 2, 3, 4, 5, 6};
    be->bias_grad(HFL_PREC_FP32, db, dy, 2, 3, 1); /* accumulates onto what is there */
    CHECK(db[0] == 6.0f && db[1] == 8.0f && db[2] == 10.0f);
    be->bias_grad(HFL_PREC_FP32, db, dy, 2, 3, 0); /* overwrites: the column sums alone */
    CHECK(db[0] == 5.0f && db[1] == 7.0f && db[2] == 9.0f);

    float x[5] = {-2.0f, -0.0f, 0.0f, 0.5f, 3.0f}, r[5];
    be->relu_fwd(HFL_PREC_FP32, r, x, 5);
    float want_r[5] = {0, 0, 0, 0.5f, 3.0f};
    for (int i = 0; i < 5; i++) CHECK(r[i] == want_r[i]);
    float g[5] = {1, 2, 3, 4, 5};
    be->relu_bwd(HFL_PREC_FP32, g, g, r, 5); /* in place: dx aliases dy */
    float want_g[5] = {0, 0, 0, 4, 5};
    for (int i = 0; i < 5; i++) CHECK(g[i] == want_g[i]);
}

/* The op through fresh step scalars: the mean loss, and the correct rows. */
static float xent(const hfl_backend *be, const float *z, const int32_t *lab, float *d, int rows,
                  int cols, int *correct) {
    hfl_step_scalars sc = {.loss_scale = 1.0f, .finite = 1};
    be->softmax_xent(HFL_PREC_FP32, z, lab, d, rows, cols, rows, &sc, NULL);
    CHECK(sc.rows == rows);
    if (correct) *correct = (int)sc.correct;
    return (float)(sc.loss_sum / rows);
}

static void test_softmax_xent(const hfl_backend *be) {
    /* Uniform logits: loss log(10) for any label, gradient (0.1 - onehot)/rows. */
    enum { R = 3, C = 10 };
    float z[R * C], d[R * C];
    int32_t lab[R] = {0, 4, 9};
    for (int i = 0; i < R * C; i++) z[i] = 1.5f;
    int correct = -1;
    float loss = xent(be, z, lab, d, R, C, &correct);
    CHECK_CLOSE(loss, logf(10.0f), 1e-6, 1e-6);
    CHECK(correct == 1); /* a tie's argmax is index 0, which only row 0 has as label */
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            CHECK_CLOSE(d[r * C + c], (0.1 - (c == lab[r])) / R, 1e-7, 1e-5);

    /* Two classes, logits (0, log 3): p = (1/4, 3/4). */
    float z2[4] = {0.0f, logf(3.0f), 5.0f, -5.0f};
    int32_t lab2[2] = {0, 0};
    loss = xent(be, z2, lab2, NULL, 2, 2, &correct);
    double want = 0.5 * (log(4.0) + log1p(exp(-10.0)));
    CHECK_CLOSE(loss, want, 1e-6, 1e-6);
    CHECK(correct == 1); /* argmaxes are (1, 0): only row 1 is right */
    /* With labels (1, 1) only row 0 is right. */
    lab2[0] = 1;
    lab2[1] = 1;
    xent(be, z2, lab2, NULL, 2, 2, &correct);
    CHECK(correct == 1);
    /* The scalars accumulate over calls: two batches add their sums, rows and hits. */
    hfl_step_scalars sc = {.loss_scale = 1.0f};
    be->softmax_xent(HFL_PREC_FP32, z2, lab2, NULL, 2, 2, 2, &sc, NULL);
    double first = sc.loss_sum;
    be->softmax_xent(HFL_PREC_FP32, z2, lab2, NULL, 2, 2, 2, &sc, NULL);
    CHECK(sc.rows == 4 && sc.correct == 2 && sc.loss_sum == 2 * first);

    /* Huge logits must not overflow: (1000, 0) against label 1 costs 1000. */
    float z3[2] = {1000.0f, 0.0f}, d3[2];
    int32_t lab3[1] = {1};
    loss = xent(be, z3, lab3, d3, 1, 2, NULL);
    CHECK(isfinite(loss));
    CHECK_CLOSE(loss, 1000.0, 1e-3, 1e-6);
    CHECK_CLOSE(d3[0], 1.0, 1e-6, 0);
    CHECK_CLOSE(d3[1], -1.0, 1e-6, 0);
}

static void test_sgd(const hfl_backend *be) {
    /* Hand-computed: w=1, g=0.5, lr=0.1, momentum=0.9, wd=0.01.
     * step 1: g'=0.51, v=0.51, w=0.949
     * step 2: g'=0.5+0.00949=0.50949, v=0.9*0.51+0.50949=0.96849, w=0.949-0.096849=0.852151 */
    float w[2] = {1.0f, -2.0f}, v[2] = {0, 0}, g[2] = {0.5f, 0.25f};
    be->sgd_step(HFL_PREC_FP32, w, v, g, w, 2, 0.1f, 0.9f, 0.01f, NULL);
    CHECK_CLOSE(w[0], 0.949, 1e-6, 0);
    CHECK_CLOSE(v[0], 0.51, 1e-6, 0);
    be->sgd_step(HFL_PREC_FP32, w, v, g, w, 2, 0.1f, 0.9f, 0.01f, NULL);
    CHECK_CLOSE(v[0], 0.96849, 1e-6, 0);
    CHECK_CLOSE(w[0], 0.852151, 1e-6, 0);
    /* element 1: step 1 g'=0.25-0.02=0.23, v=0.23, w=-2.023;
     * step 2 g'=0.25-0.02023=0.22977, v=0.207+0.22977=0.43677, w=-2.023-0.043677=-2.066677 */
    CHECK_CLOSE(w[1], -2.066677, 1e-6, 0);
    CHECK_CLOSE(v[1], 0.43677, 1e-6, 0);

    /* Without momentum v is neither read nor written (and may be NULL). */
    float w2[1] = {1.0f}, v2[1] = {7.0f}, g2[1] = {0.5f};
    be->sgd_step(HFL_PREC_FP32, w2, v2, g2, w2, 1, 0.1f, 0.0f, 0.01f, NULL);
    CHECK_CLOSE(w2[0], 0.949, 1e-6, 0);
    CHECK(v2[0] == 7.0f);
    be->sgd_step(HFL_PREC_FP32, w2, NULL, g2, w2, 1, 0.1f, 0.0f, 0.0f, NULL);
    CHECK_CLOSE(w2[0], 0.899, 1e-6, 0);

    /* The shared element body agrees with the backend loop. */
    float ve = 0.0f;
    CHECK_CLOSE(hfl_op_sgd(1.0f, &ve, 0.5f, 0.1f, 0.9f, 0.01f), 0.949, 1e-6, 0);

    /* FedProx, by hand: g += mu * (w - anchor); w=1, anchor=0.25, mu=0.1:
     * 0.5 + 0.075 = 0.575; w=-2, anchor=1: 0.25 - 0.3 = -0.05. */
    float gp[2] = {0.5f, 0.25f}, wp[2] = {1.0f, -2.0f}, ap[2] = {0.25f, 1.0f};
    be->prox_grad(gp, wp, ap, 2, 0.1f);
    CHECK_CLOSE(gp[0], 0.575, 1e-6, 0);
    CHECK_CLOSE(gp[1], -0.05, 1e-6, 0);
    CHECK(wp[0] == 1.0f && ap[0] == 0.25f); /* w and the anchor are read only */
}

/* fp16's loss scaler, by hand (GradScaler's rule with interval 2): a
 * non-finite step is skipped and halves S, two clean steps in a row double
 * it; unscale_grads sets the flag it reads and divides by S. */
static void test_loss_scaler(const hfl_backend *be) {
    hfl_step_scalars sc = {.loss_scale = 1024.0f, .finite = 1};
    float g[3] = {2048.0f, -512.0f, 0.0f};
    be->unscale_grads(g, 3, &sc);
    CHECK(sc.finite == 1 && g[0] == 2.0f && g[1] == -0.5f && g[2] == 0.0f);
    g[1] = INFINITY;
    be->unscale_grads(g, 3, &sc);
    CHECK(sc.finite == 0);
    be->scaler_update(&sc, 2); /* skipped: 512 */
    CHECK(sc.loss_scale == 512.0f && sc.skipped == 1 && sc.clean_steps == 0);
    sc.finite = 1;
    be->scaler_update(&sc, 2); /* one clean step */
    CHECK(sc.loss_scale == 512.0f && sc.clean_steps == 1);
    be->scaler_update(&sc, 2); /* two: doubled, count restarts */
    CHECK(sc.loss_scale == 1024.0f && sc.clean_steps == 0 && sc.skipped == 1);
    sc.finite = 0;
    be->scaler_update(&sc, 2);
    CHECK(sc.loss_scale == 512.0f && sc.skipped == 2);
    /* sgd_step does nothing when told to skip on a 0 flag, and steps otherwise. */
    float master[1] = {1.0f}, grad[1] = {1.0f};
    uint16_t w[1] = {0};
    be->sgd_step(HFL_PREC_FP16, master, NULL, grad, w, 1, 0.5f, 0.0f, 0.0f, &sc);
    CHECK(master[0] == 1.0f && w[0] == 0);
    sc.finite = 1;
    be->sgd_step(HFL_PREC_FP16, master, NULL, grad, w, 1, 0.5f, 0.0f, 0.0f, &sc);
    CHECK(master[0] == 0.5f && w[0] == 0x3800); /* 0.5 in fp16 */
}

static void case_name(void) { CHECK(strcmp(hfl_backend_cpu()->name, "cpu") == 0); }
static void case_alloc_and_copies(void) { test_alloc_and_copies(hfl_backend_cpu()); }
static void case_sgemm(void) { test_sgemm(hfl_backend_cpu()); }
static void case_bias_and_relu(void) { test_bias_and_relu(hfl_backend_cpu()); }
static void case_softmax_xent(void) { test_softmax_xent(hfl_backend_cpu()); }
static void case_sgd(void) { test_sgd(hfl_backend_cpu()); }
static void case_loss_scaler(void) { test_loss_scaler(hfl_backend_cpu()); }

static const check_case cases[] = {
    {"name", case_name},
    {"alloc_and_copies", case_alloc_and_copies},
    {"sgemm", case_sgemm},
    {"bias_and_relu", case_bias_and_relu},
    {"softmax_xent", case_softmax_xent},
    {"sgd", case_sgd},
    {"loss_scaler", case_loss_scaler},
};

int main(int argc, char **argv) {
    return check_run("test_backend_cpu", cases, CHECK_CASES(cases), argc, argv);
}
