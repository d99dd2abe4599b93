/* test_lm_rows.c: the lane trees of layer norm and the causal softmax
 * (kernels/lm_hd.h, "row reductions") on the CPU backend, against the same
 * fixed order computed here with its own code, bit for bit, and against
 * float64 within the bound of that order's reduction length.
 *
 * The order, as the CUDA kernels (one warp per row, kernels/cuda/lm.cu) run
 * it: value e of n goes to lane e % 32; a lane folds its values in
 * increasing e from +0 (from -inf for a max); the 32 lane partials then
 * combine as a tree written here recursively: node(j, s) = node(j, 2s) +
 * node(j + s, 2s), with node(j, 32) = lane j, the result node(0, 1) (the
 * same pairs as the backends' levels p[j] += p[j + half], half = 16 .. 1).
 * The ops' formulas (PyTorch's, see lm_hd.h) are written out here in fp32
 * in the same operation order, so the CPU's bits must match exactly; the
 * GPU test (tests/gpu/test_cuda_lm.c) then holds the CUDA kernels to the
 * CPU's bits. Shapes cover rows shorter than a warp, one lane value, many
 * lane values, softmax rows from 1 to 70 live scores, and layer norm's
 * weight-gradient columns over more than one CPU column tile (64) and more
 * rows than lanes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/lm.h"
#include "kernels/philox.h"
#include "tests/check.h"

#define LANES 32

static const hfl_lm_ops *lm;

static float *rnd(uint32_t tensor, size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * hfl_u01(hfl_philox_u32(11, 3, 0, 0, tensor, i)) - 1.0f);
    return p;
}

static float node_sum(const float *lane, int j, int s) {
    return s == LANES ? lane[j] : node_sum(lane, j, 2 * s) + node_sum(lane, j + s, 2 * s);
}

static float node_max(const float *lane, int j, int s) {
    if (s == LANES) return lane[j];
    float a = node_max(lane, j, 2 * s), b = node_max(lane, j + s, 2 * s);
    return b > a ? b : a;
}

/* The tree sum of v[0], v[stride], ..., n values. */
static float tree_sum(const float *v, int n, size_t stride) {
    float lane[LANES];
    for (int l = 0; l < LANES; l++) {
        lane[l] = 0.0f;
        for (int e = l; e < n; e += LANES) lane[l] += v[(size_t)e * stride];
    }
    return node_sum(lane, 0, 1);
}

static float tree_max(const float *v, int n) {
    float lane[LANES];
    for (int l = 0; l < LANES; l++) {
        lane[l] = -INFINITY;
        for (int e = l; e < n; e += LANES) lane[l] = v[e] > lane[l] ? v[e] : lane[l];
    }
    return node_max(lane, 0, 1);
}

/* gamma_k = k u / (1 - k u), u = 2^-24: the bound on k fp32 roundings
 * (Higham, ASNA 2nd ed., 3.1). A lane tree over n values puts each through
 * at most ceil(n / 32) - 1 + 5 additions. */
static double gamma_k(double k) { return k * 0x1p-24 / (1 - k * 0x1p-24); }
static double tree_k(int n) { return (double)((n + LANES - 1) / LANES) + 5; }

static int bits_same(const float *a, const float *b, size_t n, size_t *at) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return *at = i, 0;
    return 1;
}

static void same(const char *what, const float *got, const float *want, size_t n) {
    size_t at = 0;
    CHECK_MSG(bits_same(got, want, n, &at), "%s: [%zu] %.9g, the tree gives %.9g", what, at,
              (double)got[at], (double)want[at]);
}

/* Layer norm of rows x C, forward and backward (dx added onto a residual,
 * dw and db accumulated onto given values), against the tree written here;
 * mean, db and dw within float64's bound. Returns how many dw, db and mean
 * values differ from a sequential fp32 sum of the same values (the order the
 * op had before the tree). */
static int check_layernorm(int rows, int C) {
    size_t N = (size_t)rows * C;
    float *x = rnd(1, N, 3), *w = rnd(2, C, 1.5f), *b = rnd(3, C, 1), *dy = rnd(4, N, 1), *res = rnd(5, N, 1);
    float *y = malloc(sizeof(float) * N), *dx = malloc(sizeof(float) * N), *ey = malloc(sizeof(float) * N);
    float *edx = malloc(sizeof(float) * N), *tmp = malloc(sizeof(float) * 2 * (N + rows + C)); /* scratch rows */
    float *mean = malloc(sizeof(float) * rows), *rstd = malloc(sizeof(float) * rows);
    float *em = malloc(sizeof(float) * rows), *ers = malloc(sizeof(float) * rows);
    float *dw = rnd(6, C, 1), *db = rnd(7, C, 1), *edw = malloc(sizeof(float) * C), *edb = malloc(sizeof(float) * C);
    memcpy(edw, dw, sizeof(float) * C), memcpy(edb, db, sizeof(float) * C);
    char what[96];
    int differ = 0;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C;
        float m = tree_sum(xr, C, 1) / C, seq = 0.0f;
        for (int c = 0; c < C; c++) tmp[c] = (xr[c] - m) * (xr[c] - m), seq += xr[c];
        differ += seq / C != m;
        float rs = 1.0f / sqrtf(tree_sum(tmp, C, 1) / C + 1e-5f);
        em[r] = m, ers[r] = rs;
        for (int c = 0; c < C; c++) ey[(size_t)r * C + c] = (xr[c] - m) * rs * w[c] + b[c];
    }
    lm->layernorm_fwd(HFL_PREC_FP32, y, mean, rstd, x, w, b, rows, C);
    snprintf(what, sizeof what, "layernorm_fwd %d x %d", rows, C);
    same(what, mean, em, rows), same(what, rstd, ers, rows), same(what, y, ey, N);
    for (int r = 0; r < rows; r++) { /* |mean - exact| <= (gamma_k S + u |exact|) / C, one more rounding for / C */
        double exact = 0, S = 0;
        for (int c = 0; c < C; c++) exact += x[(size_t)r * C + c], S += fabs(x[(size_t)r * C + c]);
        CHECK_MSG(fabs(mean[r] - exact / C) <= (gamma_k(tree_k(C)) * S + 0x1p-24 * fabs(exact)) / C,
                  "%s: row %d's mean %.9g, float64 %.17g", what, r, (double)mean[r], exact / C);
    }
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
        float m = mean[r], rs = rstd[r], *gx = tmp + C;
        for (int c = 0; c < C; c++) tmp[c] = dyr[c] * w[c], gx[c] = tmp[c] * (xr[c] - m) * rs;
        float sg = tree_sum(tmp, C, 1) / C, sgx = tree_sum(gx, C, 1) / C;
        for (int c = 0; c < C; c++)
            edx[(size_t)r * C + c] = res[(size_t)r * C + c] + rs * (tmp[c] - sg - (xr[c] - m) * rs * sgx);
    }
    for (int c = 0; c < C; c++) {
        float *dwv = tmp, *dbv = tmp + rows, seqw = 0.0f, seqb = 0.0f;
        for (int r = 0; r < rows; r++) {
            size_t at = (size_t)r * C + c;
            dwv[r] = dy[at] * (x[at] - mean[r]) * rstd[r], dbv[r] = dy[at];
            seqw += dwv[r], seqb += dbv[r];
        }
        float tw = tree_sum(dwv, rows, 1), tb = tree_sum(dbv, rows, 1);
        differ += seqw != tw, differ += seqb != tb;
        edw[c] += tw, edb[c] += tb;
    }
    memcpy(dx, res, sizeof(float) * N);
    float *dw0 = malloc(sizeof(float) * C), *db0 = malloc(sizeof(float) * C);
    memcpy(dw0, dw, sizeof(float) * C), memcpy(db0, db, sizeof(float) * C);
    lm->layernorm_bwd(HFL_PREC_FP32, dx, dw, db, dy, x, w, mean, rstd, rows, C, 1, 1);
    snprintf(what, sizeof what, "layernorm_bwd %d x %d", rows, C);
    same(what, dx, edx, N), same(what, dw, edw, C), same(what, db, edb, C);
    /* dw, db: the tree of rows values each made in at most 3 roundings
     * (x - mean, two products), then one addition onto the old value:
     * |got - exact| <= gamma_(k + 3) S + u |exact| */
    for (int c = 0; c < C; c++) {
        double ew = dw0[c], eb = db0[c], Sw = 0, Sb = 0;
        for (int r = 0; r < rows; r++) {
            size_t at = (size_t)r * C + c;
            double v = (double)dy[at] * ((double)x[at] - mean[r]) * rstd[r];
            ew += v, Sw += fabs(v), eb += dy[at], Sb += fabs(dy[at]);
        }
        double g = gamma_k(tree_k(rows) + 3);
        CHECK_MSG(fabs(dw[c] - ew) <= g * Sw + 0x1p-24 * fabs(ew) && fabs(db[c] - eb) <= g * Sb + 0x1p-24 * fabs(eb),
                  "%s: column %d: dw %.9g (float64 %.17g), db %.9g (float64 %.17g)", what, c, (double)dw[c], ew,
                  (double)db[c], eb);
    }
    void *all[] = {x, w, b, dy, res, y, dx, ey, edx, tmp, mean, rstd, em, ers, dw, db, edw, edb, dw0, db0};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    return differ;
}

/* The causal softmax of n_rows rows of T (query q = row % T), forward and
 * backward, against the tree written here; each forward row sums to 1
 * within the bound of its q + 1 probabilities. */
static void check_softmax(int n_rows, int T, float scale) {
    size_t N = (size_t)n_rows * T;
    float *z = rnd(20, N, 4), *dp = rnd(21, N, 1), *p = malloc(sizeof(float) * N), *ep = malloc(sizeof(float) * N);
    float *dz = malloc(sizeof(float) * N), *edz = malloc(sizeof(float) * N), *tmp = malloc(sizeof(float) * T);
    for (int i = 0; i < n_rows; i++) {
        int q = i % T;
        const float *zr = z + (size_t)i * T;
        float zmax = tree_max(zr, q + 1);
        for (int s = 0; s <= q; s++) tmp[s] = expf(scale * (zr[s] - zmax));
        float inv = 1.0f / tree_sum(tmp, q + 1, 1);
        for (int s = 0; s < T; s++) ep[(size_t)i * T + s] = s <= q ? tmp[s] * inv : 0.0f;
    }
    char what[80];
    lm->causal_softmax(HFL_PREC_FP32, p, z, n_rows, T, scale);
    snprintf(what, sizeof what, "causal_softmax %d rows of %d", n_rows, T);
    same(what, p, ep, N);
    for (int i = 0; i < n_rows; i++) {
        /* exp's own error cancels (the same e_s in the sum and in each p_s);
         * the tree sum of positive e_s is sum(e) (1 + theta), |theta| <=
         * gamma_k; the reciprocal and each product round once: sum(p) =
         * (1 + d1)(1 + d2) / (1 + theta), |d| <= u; plus float64's own
         * q + 1 additions here */
        int q = i % T;
        double total = 0, u = 0x1p-24;
        for (int s = 0; s <= q; s++) total += p[(size_t)i * T + s];
        double bound = (1 + u) * (1 + u) / (1 - gamma_k(tree_k(q + 1))) - 1 + (q + 1) * 0x1p-52;
        CHECK_MSG(fabs(total - 1) <= bound, "%s: row %d sums to %.17g (bound %.3g)", what, i, total, bound);
    }
    for (int i = 0; i < n_rows; i++) {
        int q = i % T;
        const float *pr = p + (size_t)i * T, *dr = dp + (size_t)i * T;
        for (int s = 0; s <= q; s++) tmp[s] = pr[s] * dr[s];
        float dot = tree_sum(tmp, q + 1, 1);
        for (int s = 0; s < T; s++) edz[(size_t)i * T + s] = s <= q ? scale * pr[s] * (dr[s] - dot) : 0.0f;
    }
    memcpy(dz, dp, sizeof(float) * N);
    lm->causal_softmax_bwd(HFL_PREC_FP32, dz, dz, p, n_rows, T, scale); /* in place over dp */
    snprintf(what, sizeof what, "causal_softmax_bwd %d rows of %d", n_rows, T);
    same(what, dz, edz, N);
    free(z), free(dp), free(p), free(ep), free(dz), free(edz), free(tmp);
}

static void case_layernorm(void) {
    static const int ln[][2] = {{5, 7}, {3, 32}, {40, 48}, {33, 100}, {70, 200}, {2, 1}};
    int differ = 0;
    for (size_t k = 0; k < sizeof ln / sizeof *ln; k++) differ += check_layernorm(ln[k][0], ln[k][1]);
    CHECK(differ > 0); /* the tree sums in another order than a sequential loop: some sums must show it */
    printf("layer norm: CPU = the lane tree written here, bit for bit, 6 shapes; within float64's bound "
           "(%d sums differ from a sequential fp32 sum)\n", differ);
}

static void case_softmax(void) {
    check_softmax(3 * 5, 5, 0.5f);
    check_softmax(2 * 33, 33, 0.3f);
    check_softmax(70, 70, 0.125f);
    printf("causal softmax: CPU = the lane tree written here, bit for bit, T = 5, 33, 70\n");
}

static const check_case cases[] = {
    {"layernorm", case_layernorm},
    {"softmax", case_softmax},
};

int main(int argc, char **argv) {
    lm = hfl_backend_cpu()->lm;
    return check_run("test_lm_rows", cases, CHECK_CASES(cases), argc, argv);
}
