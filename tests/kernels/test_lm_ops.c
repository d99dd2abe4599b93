/* test_lm_ops.c: the transformer ops (kernels/lm.h on the CPU backend, and
 * model/attention.c) against references written here from the definitions
 * in double precision.
 *
 * Forward outputs are compared with the double reference; every gradient
 * with central finite differences of the double reference (step 1e-6) of
 * L = sum(R * out) for a random R, so the oracle shares no code with the op.
 * The bucket bodies the CUDA kernel runs, where the CPU scatters instead
 * (the token embedding's gradient), must give the CPU's results bit for
 * bit (layer norm's and the softmax's lane trees: test_lm_rows.c). AdamW's first step has a closed form
 * (m^ = g, v^ = g^2: w(1 - lr wd) - lr g / (|g| + eps)); later steps are
 * checked against Kingma & Ba's Algorithm 1 with decoupled decay, in double.
 * Each op in a 2-byte type must equal the op in fp32 on the widened inputs
 * with its 2-byte outputs rounded once, bit for bit, in bf16 and fp16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/lm.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "model/attention.h"
#include "tests/check.h"
#include "tests/kernels/adamw_make.h"

static const hfl_backend *be;
static const hfl_lm_ops *lm;

/* n values uniform in (-scale, scale), from philox stream `tensor`. */
static float *rnd(uint32_t tensor, size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * hfl_u01(hfl_philox_u32(7, 13, 0, 0, tensor, i)) - 1.0f);
    return p;
}

static double *widen(const float *x, size_t n) {
    double *d = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* Checks got[i] against want[i] within atol + rtol |want|; reports the worst. */
static void close_all(const char *what, const float *got, const double *want, size_t n, double atol,
                      double rtol) {
    size_t bad = 0, worst = 0;
    double worst_r = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]), lim = atol + rtol * fabs(want[i]);
        if (!(e <= lim)) bad++;
        if (e / lim > worst_r || isnan(e)) worst_r = e / lim, worst = i;
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu off, worst [%zu] %.9g vs %.9g", what, bad, n, worst,
              (double)got[worst], want[worst]);
}

/* ---- double references ---- */

static void ref_layernorm(double *y, const double *x, const double *w, const double *b, int rows, int C) {
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        v /= C;
        for (int c = 0; c < C; c++) y[(size_t)r * C + c] = (xr[c] - m) / sqrt(v + 1e-5) * w[c] + b[c];
    }
}

static double ref_gelu(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

/* y [n*T, C] from qkv [n*T, 3C]: per head, softmax over s <= t of q_t.k_s / sqrt(hs), times v. */
static void ref_attention(double *y, const double *qkv, int n, int T, int C, int H) {
    int hs = C / H;
    double *p = malloc(sizeof(double) * T);
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    const double *k = qkv + ((size_t)b * T + s) * 3 * C + C + h * hs;
                    double z = 0;
                    for (int d = 0; d < hs; d++) z += q[d] * k[d];
                    p[s] = z / sqrt(hs);
                    mx = p[s] > mx ? p[s] : mx;
                }
                for (int s = 0; s <= t; s++) sum += (p[s] = exp(p[s] - mx));
                for (int d = 0; d < hs; d++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++) acc += p[s] / sum * qkv[((size_t)b * T + s) * 3 * C + 2 * C + h * hs + d];
                    y[((size_t)b * T + t) * C + h * hs + d] = acc;
                }
            }
    free(p);
}

/* sum(R * f(x)) where f is one of the references above, for finite differences. */
typedef double (*loss_fn)(const double *x, void *ctx);

/* dL/dx[i] by central differences of f, step h. */
static void fd_grad(double *g, double *x, size_t n, loss_fn f, void *ctx) {
    const double h = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double up = f(x, ctx);
        x[i] = keep - h;
        double down = f(x, ctx);
        x[i] = keep;
        g[i] = (up - down) / (2 * h);
    }
}

/* ---- embeddings ---- */

/* dwte by lm_hd.h's buckets, as cuda/lm.cu's blocks run them: per token,
 * the tiles' compacted rows added column by column. The compaction here is
 * hfl_lm_embed_tile's loop; the kernel's ballot-and-prefix form of it is
 * checked on a GPU (tests/gpu/test_cuda_lm.c, embed_tiles). */
static void bucket_wte(hfl_precision t, float *dwte, const void *dy, const void *tokens, int rows,
                       int C, int V, int accumulate) {
    int list[HFL_LM_EMBED_TILE];
    for (int v = 0; v < V; v++) {
        float *drow = dwte + (size_t)v * C;
        if (!accumulate) memset(drow, 0, sizeof *drow * (size_t)C);
        for (int r0 = 0; r0 < rows; r0 += HFL_LM_EMBED_TILE) {
            int n = hfl_lm_embed_tile(t, list, tokens, r0, rows, V, v);
            for (size_t c = 0; c < (size_t)C; c++) hfl_lm_embed_bucket_add(c, t, drow, dy, list, n, C);
        }
    }
}

static void test_embed(void) {
    enum { N = 3, T = 4, C = 5, V = 7, ROWS = N * T };
    float tokens[ROWS];
    for (int r = 0; r < ROWS; r++) tokens[r] = (float)((r * 5 + 3) % V);
    tokens[2] = tokens[9] = 6; /* a token seen twice, others never */
    float *wte = rnd(1, V * C, 1), *wpe = rnd(2, T * C, 1), *dy = rnd(3, ROWS * C, 1);
    float y[ROWS * C], dwte[V * C], dwpe[T * C], gather[V * C];
    lm->embed_fwd(HFL_PREC_FP32, y, tokens, wte, wpe, ROWS, T, C, V);
    int exact = 1;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < C; c++)
            exact &= y[r * C + c] == wte[(int)tokens[r] * C + c] + wpe[(r % T) * C + c];
    CHECK_MSG(exact, "embedding forward is not wte[token] + wpe[position]");
    lm->embed_bwd(HFL_PREC_FP32, dwte, dwpe, dy, tokens, ROWS, T, C, V, 0);
    double want_te[V * C], want_pe[T * C];
    memset(want_te, 0, sizeof want_te);
    memset(want_pe, 0, sizeof want_pe);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < C; c++) {
            want_te[(int)tokens[r] * C + c] += dy[r * C + c];
            want_pe[(r % T) * C + c] += dy[r * C + c];
        }
    close_all("dwte", dwte, want_te, V * C, 1e-6, 1e-6);
    close_all("dwpe", dwpe, want_pe, T * C, 1e-6, 1e-6);
    bucket_wte(HFL_PREC_FP32, gather, dy, tokens, ROWS, C, V, 0);
    CHECK_MSG(memcmp(gather, dwte, sizeof gather) == 0, "the bucket bodies' dwte differs from the CPU's");
    /* accumulate adds a second batch's gradient onto the first */
    lm->embed_bwd(HFL_PREC_FP32, dwte, dwpe, dy, tokens, ROWS, T, C, V, 1);
    for (int i = 0; i < V * C; i++) want_te[i] *= 2;
    for (int i = 0; i < T * C; i++) want_pe[i] *= 2;
    close_all("dwte accumulated", dwte, want_te, V * C, 1e-6, 1e-6);
    close_all("dwpe accumulated", dwpe, want_pe, T * C, 1e-6, 1e-6);
    bucket_wte(HFL_PREC_FP32, gather, dy, tokens, ROWS, C, V, 0);
    bucket_wte(HFL_PREC_FP32, gather, dy, tokens, ROWS, C, V, 1);
    CHECK_MSG(memcmp(gather, dwte, sizeof gather) == 0, "the bucket bodies' accumulated dwte differs");
    free(wte), free(wpe), free(dy);
    /* ids outside [0, V) never index outside the table */
    CHECK(hfl_lm_token(-3.0f, V) == 0 && hfl_lm_token(1e10f, V) == V - 1 && hfl_lm_token(NAN, V) == V - 1);
    CHECK(hfl_lm_token((float)V, V) == V - 1 && hfl_lm_token(2.0f, V) == 2 && hfl_lm_token(-INFINITY, V) == 0);
}

/* ---- layer norm ---- */

typedef struct {
    int rows, C, which; /* 0: d/dx, 1: d/dw, 2: d/db */
    double *x, *w, *b, *R;
} ln_ctx;

static double ln_loss(const double *v, void *arg) {
    ln_ctx *k = arg;
    size_t n = (size_t)k->rows * k->C;
    const double *x = k->which == 0 ? v : k->x, *w = k->which == 1 ? v : k->w, *b = k->which == 2 ? v : k->b;
    double *y = malloc(sizeof(double) * n), L = 0;
    ref_layernorm(y, x, w, b, k->rows, k->C);
    for (size_t i = 0; i < n; i++) L += k->R[i] * y[i];
    free(y);
    return L;
}

static void test_layernorm(void) {
    enum { ROWS = 6, C = 16, N = ROWS * C };
    float *x = rnd(10, N, 2), *w = rnd(11, C, 1.5f), *b = rnd(12, C, 1), *R = rnd(13, N, 1);
    for (int c = 0; c < C; c++) x[3 * C + c] = 0.25f + 1e-3f * (float)c; /* a nearly constant row */
    float y[N], mean[ROWS], rstd[ROWS], dx[N], dw[C], db[C], gw[C];
    lm->layernorm_fwd(HFL_PREC_FP32, y, mean, rstd, x, w, b, ROWS, C);
    ln_ctx k = {ROWS, C, 0, widen(x, N), widen(w, C), widen(b, C), widen(R, N)};
    double want[N];
    ref_layernorm(want, k.x, k.w, k.b, ROWS, C);
    close_all("layernorm forward", y, want, N, 1e-5, 1e-5);
    lm->layernorm_bwd(HFL_PREC_FP32, dx, dw, db, R, x, w, mean, rstd, ROWS, C, 0, 0);
    double g[N];
    fd_grad(g, k.x, N, ln_loss, &k);
    close_all("layernorm dx", dx, g, N, 2e-4, 1e-3);
    k.which = 1;
    fd_grad(g, k.w, C, ln_loss, &k);
    close_all("layernorm dw", dw, g, C, 1e-4, 1e-4);
    k.which = 2;
    fd_grad(g, k.b, C, ln_loss, &k);
    close_all("layernorm db", db, g, C, 1e-4, 1e-4);
    memcpy(gw, dw, sizeof gw); /* the lane tree's order: tests/kernels/test_lm_rows.c */
    /* in place: dx over dy gives the same dx */
    float inplace[N];
    memcpy(inplace, R, sizeof inplace);
    lm->layernorm_bwd(HFL_PREC_FP32, inplace, dw, db, inplace, x, w, mean, rstd, ROWS, C, 1, 0);
    CHECK_MSG(memcmp(inplace, dx, sizeof dx) == 0, "layernorm backward in place differs");
    for (int c = 0; c < C; c++) CHECK_CLOSE(dw[c], 2.0 * gw[c], 1e-6, 1e-6);
    /* dx_add: a residual's gradient plus the layer norm's */
    float *res = rnd(14, N, 1), joined[N];
    memcpy(joined, res, sizeof joined);
    lm->layernorm_bwd(HFL_PREC_FP32, joined, dw, db, R, x, w, mean, rstd, ROWS, C, 0, 1);
    int added = 1;
    for (int i = 0; i < N; i++) added &= joined[i] == res[i] + dx[i];
    CHECK_MSG(added, "layernorm backward with dx_add is not the residual plus dx");
    free(res);
    free(x), free(w), free(b), free(R), free(k.x), free(k.w), free(k.b), free(k.R);
}

/* ---- GELU ---- */

static void test_gelu(void) {
    enum { N = 41 };
    float x[N], y[N], dx[N], ones[N];
    double want[N], g[N];
    for (int i = 0; i < N; i++) x[i] = -5.0f + 0.25f * (float)i, ones[i] = 1.0f;
    lm->gelu_fwd(HFL_PREC_FP32, y, x, N);
    lm->gelu_bwd(HFL_PREC_FP32, dx, ones, x, N);
    for (int i = 0; i < N; i++) {
        want[i] = ref_gelu(x[i]);
        g[i] = (ref_gelu(x[i] + 1e-6) - ref_gelu(x[i] - 1e-6)) / 2e-6;
    }
    close_all("gelu forward", y, want, N, 1e-6, 1e-5);
    close_all("gelu backward", dx, g, N, 1e-5, 1e-4);
}

/* ---- attention ---- */

typedef struct {
    int n, T, C, H;
    double *R;
} att_ctx;

static double att_loss(const double *qkv, void *arg) {
    att_ctx *k = arg;
    size_t n = (size_t)k->n * k->T * k->C;
    double *y = malloc(sizeof(double) * n), L = 0;
    ref_attention(y, qkv, k->n, k->T, k->C, k->H);
    for (size_t i = 0; i < n; i++) L += k->R[i] * y[i];
    free(y);
    return L;
}

static void test_attention(int n, int T, int C, int H) {
    size_t rows = (size_t)n * T, nq = rows * 3 * C, ny = rows * C;
    float *qkv = rnd(20, nq, 1.5f), *R = rnd(21, ny, 1);
    float *y = malloc(ny * sizeof *y), *att = malloc((size_t)n * H * T * T * sizeof *att);
    float *dqkv = malloc(nq * sizeof *dqkv);
    float *ws = malloc(hfl_attention_bwd_ws_bytes(HFL_PREC_FP32, n, T, C, H));
    CHECK(hfl_attention_fwd_ws_bytes(HFL_PREC_FP32, n, T, C, H) <=
          hfl_attention_bwd_ws_bytes(HFL_PREC_FP32, n, T, C, H));
    hfl_attention_forward(be, HFL_PREC_FP32, y, att, qkv, ws, n, T, C, H);
    att_ctx k = {n, T, C, H, widen(R, ny)};
    double *dq = widen(qkv, nq), *want = malloc(ny * sizeof *want), *g = malloc(nq * sizeof *g);
    ref_attention(want, dq, n, T, C, H);
    char what[64];
    snprintf(what, sizeof what, "attention forward n%d T%d C%d H%d", n, T, C, H);
    close_all(what, y, want, ny, 1e-5, 1e-5);
    int causal = 1;
    for (size_t r = 0; r < (size_t)n * H * T; r++)
        for (int s = (int)(r % T) + 1; s < T; s++) causal &= att[r * T + s] == 0.0f;
    CHECK_MSG(causal, "attention probabilities above the diagonal are not 0");
    hfl_attention_backward(be, HFL_PREC_FP32, dqkv, R, qkv, att, ws, n, T, C, H);
    /* the CPU's head copies against the thread bodies the CUDA kernels run */
    float *h1 = malloc(ny * sizeof *h1), *h2 = malloc(ny * sizeof *h2), *r1 = malloc(nq * sizeof *r1);
    float *r2 = malloc(nq * sizeof *r2);
    lm->heads_gather(HFL_PREC_FP32, h1, qkv + C, n, T, H, C / H, 3 * C);
    for (size_t i = 0; i < ny; i++)
        hfl_lm_thread_heads_gather(i, HFL_PREC_FP32, h2, qkv + C, T, H, C / H, 3 * C);
    memcpy(r1, qkv, nq * sizeof *r1), memcpy(r2, qkv, nq * sizeof *r2);
    lm->heads_scatter(HFL_PREC_FP32, r1 + 2 * C, h1, n, T, H, C / H, 3 * C);
    for (size_t i = 0; i < ny; i++)
        hfl_lm_thread_heads_scatter(i, HFL_PREC_FP32, r2 + 2 * C, h2, T, H, C / H, 3 * C);
    CHECK_MSG(memcmp(h1, h2, ny * sizeof *h1) == 0, "heads_gather differs from its thread body");
    CHECK_MSG(memcmp(r1, r2, nq * sizeof *r1) == 0, "heads_scatter differs from its thread body");
    free(h1), free(h2), free(r1), free(r2);
    fd_grad(g, dq, nq, att_loss, &k);
    snprintf(what, sizeof what, "attention dqkv n%d T%d C%d H%d", n, T, C, H);
    close_all(what, dqkv, g, nq, 1e-4, 1e-3);
    free(qkv), free(R), free(y), free(att), free(dqkv), free(ws), free(k.R), free(dq), free(want), free(g);
}

/* ---- AdamW ---- */

static void test_adamw(void) {
    enum { N = 9 };
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    float *w = rnd(30, N, 1), m[N] = {0}, v[N] = {0};
    double dw[N], w0[N], dm[N] = {0}, dv[N] = {0};
    for (int i = 0; i < N; i++) dw[i] = w0[i] = w[i];
    for (long step = 1; step <= 3; step++) {
        float *g = rnd(30 + (uint32_t)step, N, 2);
        be->adamw_step(HFL_PREC_FP32, w, m, v, g, w, N, adamw_make(lr, b1, b2, eps, wd, step),
                       NULL);
        for (int i = 0; i < N; i++) { /* Kingma & Ba 2015, Algorithm 1; Loshchilov & Hutter 2019 decay */
            dm[i] = b1 * dm[i] + (1 - b1) * g[i];
            dv[i] = b2 * dv[i] + (1 - b2) * (double)g[i] * g[i];
            double mh = dm[i] / (1 - pow(b1, step)), vh = dv[i] / (1 - pow(b2, step));
            dw[i] = dw[i] * (1 - (double)lr * wd) - lr * mh / (sqrt(vh) + eps);
            if (step == 1) /* the closed form of the first step */
                CHECK_CLOSE(w[i], w0[i] * (1 - (double)lr * wd) - lr * g[i] / (fabs(g[i]) + eps), 1e-7, 1e-6);
        }
        char what[32];
        snprintf(what, sizeof what, "adamw step %ld", step);
        close_all(what, w, dw, N, 1e-7, 1e-6);
        free(g);
    }
    free(w);
}

/* ---- 2-byte storage: each op is its fp32 self on the widened inputs, rounded ---- */

static uint16_t *narrow_all(hfl_precision lp, float *x, size_t n) { /* x becomes its widened self */
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = hfl_op_narrow(lp, x[i]), x[i] = hfl_op_widen(lp, h[i]);
    return h;
}

/* got (2-byte) == want (fp32) rounded, bit for bit */
static void same_lp(const char *what, hfl_precision lp, const uint16_t *got, const float *want, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != hfl_op_narrow(lp, want[i]);
    CHECK_MSG(bad == 0, "%s (%s): %zu of %zu differ from the fp32 op's result rounded", what,
              lp == HFL_PREC_BF16 ? "bf16" : "fp16", bad, n);
}

static void same_f32(const char *what, hfl_precision lp, const float *got, const float *want, size_t n) {
    CHECK_MSG(memcmp(got, want, n * sizeof *got) == 0, "%s (%s): differs from the fp32 op's", what,
              lp == HFL_PREC_BF16 ? "bf16" : "fp16");
}

static void test_lp(hfl_precision lp) {
    enum { N = 2, T = 6, C = 8, V = 11, H = 2, ROWS = N * T, RC = ROWS * C, NR = N * H * T };
    float tok[ROWS];
    for (int r = 0; r < ROWS; r++) tok[r] = (float)((r * 7 + 2) % V);
    float *wte = rnd(50, V * C, 1), *wpe = rnd(51, T * C, 1), *dy = rnd(52, RC, 1), *x = rnd(53, RC, 3);
    float *w = rnd(54, C, 2), *b = rnd(55, C, 1), *res = rnd(56, RC, 1);
    uint16_t *htok = narrow_all(lp, tok, ROWS), *hwte = narrow_all(lp, wte, V * C), *hwpe = narrow_all(lp, wpe, T * C);
    uint16_t *hdy = narrow_all(lp, dy, RC), *hx = narrow_all(lp, x, RC), *hw = narrow_all(lp, w, C);
    uint16_t *hb = narrow_all(lp, b, C), *hres = narrow_all(lp, res, RC);
    float y[RC], g1[V * C], g2[V * C], p1[T * C], p2[T * C], mean[ROWS], rstd[ROWS], mean2[ROWS], rstd2[ROWS];
    uint16_t hy[RC];
    lm->embed_fwd(HFL_PREC_FP32, y, tok, wte, wpe, ROWS, T, C, V);
    lm->embed_fwd(lp, hy, htok, hwte, hwpe, ROWS, T, C, V);
    same_lp("embed_fwd", lp, hy, y, RC);
    lm->embed_bwd(HFL_PREC_FP32, g1, p1, dy, tok, ROWS, T, C, V, 0);
    lm->embed_bwd(lp, g2, p2, hdy, htok, ROWS, T, C, V, 0);
    same_f32("embed_bwd dwte", lp, g2, g1, V * C);
    same_f32("embed_bwd dwpe", lp, p2, p1, T * C);
    bucket_wte(lp, g1, hdy, htok, ROWS, C, V, 0);
    same_f32("the bucket bodies of embed_bwd", lp, g1, g2, V * C);

    lm->layernorm_fwd(HFL_PREC_FP32, y, mean, rstd, x, w, b, ROWS, C);
    lm->layernorm_fwd(lp, hy, mean2, rstd2, hx, hw, hb, ROWS, C);
    same_lp("layernorm_fwd", lp, hy, y, RC);
    same_f32("layernorm_fwd statistics", lp, rstd2, rstd, ROWS);
    float dw1[C], db1[C], dw2[C], db2[C];
    memcpy(y, res, sizeof y);
    memcpy(hy, hres, sizeof hy);
    lm->layernorm_bwd(HFL_PREC_FP32, y, dw1, db1, dy, x, w, mean, rstd, ROWS, C, 0, 1);
    lm->layernorm_bwd(lp, hy, dw2, db2, hdy, hx, hw, mean, rstd, ROWS, C, 0, 1);
    same_lp("layernorm_bwd dx (added)", lp, hy, y, RC);
    same_f32("layernorm_bwd dw", lp, dw2, dw1, C);
    same_f32("layernorm_bwd db", lp, db2, db1, C);

    lm->gelu_fwd(HFL_PREC_FP32, y, x, RC);
    lm->gelu_fwd(lp, hy, hx, RC);
    same_lp("gelu_fwd", lp, hy, y, RC);
    uint16_t pairs[RC]; /* the CUDA kernels' two elements a thread (thread_hd.h's PAIRS) */
    for (size_t j = 0; j < RC / 2; j++) hfl_lm_pair_gelu_fwd(j, lp, pairs, hx);
    CHECK_MSG(memcmp(pairs, hy, sizeof pairs) == 0, "gelu_fwd pairs differ from the CPU's");
    lm->gelu_bwd(HFL_PREC_FP32, y, dy, x, RC);
    lm->gelu_bwd(lp, hy, hdy, hx, RC);
    same_lp("gelu_bwd", lp, hy, y, RC);
    for (size_t j = 0; j < RC / 2; j++) hfl_lm_pair_gelu_bwd(j, lp, pairs, hdy, hx);
    CHECK_MSG(memcmp(pairs, hy, sizeof pairs) == 0, "gelu_bwd pairs differ from the CPU's");

    uint16_t heads[RC], back[RC];
    lm->heads_gather(lp, heads, hx, N, T, H, C / H, C);
    lm->heads_scatter(lp, back, heads, N, T, H, C / H, C);
    lm->heads_gather(HFL_PREC_FP32, y, x, N, T, H, C / H, C);
    same_lp("heads_gather", lp, heads, y, RC);
    CHECK_MSG(memcmp(back, hx, sizeof back) == 0, "heads_scatter does not undo heads_gather_lp");

    float *z = rnd(57, NR * T, 4), *dp = rnd(58, NR * T, 1), pz[NR * T];
    uint16_t *hz = narrow_all(lp, z, NR * T), *hdp = narrow_all(lp, dp, NR * T), hp[NR * T];
    lm->causal_softmax(HFL_PREC_FP32, pz, z, NR, T, 0.5f);
    lm->causal_softmax(lp, hp, hz, NR, T, 0.5f);
    same_lp("causal_softmax", lp, hp, pz, NR * T);
    for (int i = 0; i < NR * T; i++) pz[i] = hfl_op_widen(lp, hp[i]); /* backward from the 2-byte probabilities */
    lm->causal_softmax_bwd(HFL_PREC_FP32, z, dp, pz, NR, T, 0.5f);
    lm->causal_softmax_bwd(lp, hz, hdp, hp, NR, T, 0.5f);
    same_lp("causal_softmax_bwd", lp, hz, z, NR * T);

    float *m1 = rnd(59, RC, 0.1f), *v1 = rnd(60, RC, 0.1f), m2[RC], v2[RC], master[RC];
    for (int i = 0; i < RC; i++) v1[i] = fabsf(v1[i]);
    memcpy(m2, m1, sizeof m2), memcpy(v2, v1, sizeof v2), memcpy(master, x, sizeof master);
    hfl_adamw_args a = adamw_make(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
    hfl_step_scalars sc = {.finite = 0};
    be->adamw_step(lp, master, m2, v2, dy, hy, RC, a, &sc); /* fp16's skipped step: nothing moves */
    CHECK_MSG(memcmp(master, x, sizeof master) == 0 && memcmp(m2, m1, sizeof m2) == 0,
              "a skipped adamw_step moved");
    sc.finite = 1;
    be->adamw_step(HFL_PREC_FP32, x, m1, v1, dy, x, RC, a, NULL);
    be->adamw_step(lp, master, m2, v2, dy, hy, RC, a, &sc);
    same_f32("adamw_step masters", lp, master, x, RC);
    same_f32("adamw_step second moments", lp, v2, v1, RC);
    same_lp("adamw_step working weights", lp, hy, x, RC);

    void *all[] = {wte, wpe, dy, x, w, b, res, htok, hwte, hwpe, hdy, hx, hw, hb, hres, z, dp, hz, hdp, m1, v1};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

/* Attention in 2-byte storage against fp32 attention on the same (widened)
 * inputs: the scores, probabilities and outputs are each rounded once more,
 * so within `ulps` 2-byte units in the last place of the tensor's largest value. */
static void close_lp(const char *what, hfl_precision lp, const uint16_t *got, const float *want, size_t n,
                     double ulps) {
    double big = 0, worst = 0;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(hfl_op_widen(lp, got[i]) - want[i]));
    double unit = lp == HFL_PREC_BF16 ? 1.0 / 256 : 1.0 / 2048;
    CHECK_MSG(worst <= ulps * unit * big, "%s (%s): max |err| %.3g over %.3g ulps of max |value| %.3g", what,
              lp == HFL_PREC_BF16 ? "bf16" : "fp16", worst, ulps, big);
}

static void test_attention_lp(hfl_precision lp, int n, int T, int C, int H) {
    size_t rows = (size_t)n * T, nq = rows * 3 * C, ny = rows * C, na = (size_t)n * H * T * T;
    float *qkv = rnd(70, nq, 1.5f), *dy = rnd(71, ny, 1);
    uint16_t *hq = narrow_all(lp, qkv, nq), *hdy = narrow_all(lp, dy, ny);
    float *y = malloc(ny * sizeof *y), *att = malloc(na * sizeof *att), *dqkv = malloc(nq * sizeof *dqkv);
    uint16_t *hy = malloc(ny * 2), *hatt = malloc(na * 2), *hd = malloc(nq * 2);
    float *ws = malloc(hfl_attention_bwd_ws_bytes(HFL_PREC_FP32, n, T, C, H));
    void *hws = malloc(hfl_attention_bwd_ws_bytes(lp, n, T, C, H));
    CHECK(hfl_attention_fwd_ws_bytes(lp, n, T, C, H) <= hfl_attention_bwd_ws_bytes(lp, n, T, C, H));
    hfl_attention_forward(be, HFL_PREC_FP32, y, att, qkv, ws, n, T, C, H);
    hfl_attention_backward(be, HFL_PREC_FP32, dqkv, dy, qkv, att, ws, n, T, C, H);
    hfl_attention_forward(be, lp, hy, hatt, hq, hws, n, T, C, H);
    hfl_attention_backward(be, lp, hd, hdy, hq, hatt, hws, n, T, C, H);
    close_lp("attention probabilities", lp, hatt, att, na, 2); /* seen: at most 0.65 */
    close_lp("attention forward", lp, hy, y, ny, 3);           /* 1.17 */
    close_lp("attention dqkv", lp, hd, dqkv, nq, 3);           /* 0.93 */
    free(qkv), free(dy), free(hq), free(hdy), free(y), free(att), free(dqkv), free(hy), free(hatt), free(hd);
    free(ws), free(hws);
}

/* Buckets across tiles: 700 rows (three tiles, the last short) of 5
 * tokens, one of them never seen and one only in the last tile, each sum
 * ~140 adds of values of mixed sign, so an add out of row order changes the
 * bits. The CPU backend's scatter is the oracle; both modes, both widths. */
static void test_embed_tiles(void) {
    enum { ROWS = 700, T = 7, C = 3, V = 5 };
    float tokens[ROWS];
    for (int r = 0; r < ROWS; r++) tokens[r] = (float)(hfl_philox_u32(5, 1, 0, 0, 3, (uint64_t)r) % 3);
    tokens[699] = 4; /* token 3 never, token 4 once, in the last tile */
    float *dy = rnd(60, ROWS * C, 1e3f); /* magnitudes 2^20 apart: even bf16 values' sums round */
    for (int i = 0; i < ROWS * C; i += 2) dy[i] *= 1e-6f;
    for (int acc = 0; acc < 2; acc++)
        for (int p = 0; p < 2; p++) {
            hfl_precision t = p ? HFL_PREC_BF16 : HFL_PREC_FP32;
            float tw[ROWS], dw[ROWS * C], *g = malloc(sizeof(float) * V * C), *b = malloc(sizeof(float) * V * C);
            float pe[T * C] = {0};
            memcpy(tw, tokens, sizeof tw);
            memcpy(dw, dy, sizeof dw);
            uint16_t *ht = p ? narrow_all(t, tw, ROWS) : NULL, *hd = p ? narrow_all(t, dw, ROWS * C) : NULL;
            const void *tk = p ? (const void *)ht : tw, *d = p ? (const void *)hd : dw;
            for (int i = 0; i < V * C; i++) g[i] = b[i] = (float)(i % 7) - 3.5f;
            lm->embed_bwd(t, g, pe, d, tk, ROWS, T, C, V, acc);
            bucket_wte(t, b, d, tk, ROWS, C, V, acc);
            CHECK_MSG(memcmp(g, b, sizeof(float) * V * C) == 0,
                      "bucketed dwte over 3 tiles (%s, accumulate %d) differs from the CPU's", p ? "bf16" : "fp32", acc);
            CHECK_MSG(g[3 * C] == (acc ? (float)(3 * C % 7) - 3.5f : 0.0f), "an unseen token's row moved");
            free(g), free(b), free(ht), free(hd);
        }
    free(dy);
}

static void case_attention(void) {
    test_attention(2, 5, 8, 2);
    test_attention(1, 9, 12, 3);
    test_attention(3, 1, 4, 1); /* one token: the softmax is 1 */
}

static void case_lp_bf16(void) { test_lp(HFL_PREC_BF16); }
static void case_lp_fp16(void) { test_lp(HFL_PREC_FP16); }
static void case_attention_lp(void) {
    for (hfl_precision lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
        test_attention_lp(lp, 2, 5, 8, 2);
        test_attention_lp(lp, 2, 33, 64, 4); /* more than one GEMM tile deep */
    }
}

static const check_case cases[] = {
    {"embed", test_embed},
    {"embed_tiles", test_embed_tiles},
    {"layernorm", test_layernorm},
    {"gelu", test_gelu},
    {"attention", case_attention},
    {"adamw", test_adamw},
    {"lp_bf16", case_lp_bf16},
    {"lp_fp16", case_lp_fp16},
    {"attention_lp", case_attention_lp},
};

int main(int argc, char **argv) {
    be = hfl_backend_cpu();
    lm = be->lm;
    if (!CHECK(lm != NULL)) return check_exit_code("test_lm_ops");
    return check_run("test_lm_ops", cases, CHECK_CASES(cases), argc, argv);
}
