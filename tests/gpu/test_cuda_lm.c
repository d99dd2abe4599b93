/* test_cuda_lm.c: the transformer ops (kernels/lm.h), attention and a GPT
 * block (model/attention.h, model/gpt.h) on the CUDA backend against the CPU
 * backend on the same inputs (suite gpu; skips with exit 77 without a GPU).
 *
 * Bit for bit where both sides run the same IEEE operations in the same
 * order (built with -fmad=false; CUDA's sqrtf and division are correctly
 * rounded unless fast math): token and position embeddings and their
 * gradients, layer norm and its gradients, head gather and scatter, AdamW.
 * Within a relative 1e-5 of the largest magnitude where the device's expf
 * differs from glibc's in the last bits: GELU (and its backward) and the
 * causal softmax's forward; the softmax's backward, from the same
 * probabilities, bit for bit. Layer norm and the softmax run a warp per row
 * on the GPU and the lane tree's emulation on the CPU (kernels/lm_hd.h):
 * test_rows puts rows longer than a warp through both, and layer norm's
 * weight gradients over more rows than lanes and two column blocks; the
 * token gradient's buckets (a block per token) cross tiles in
 * test_embed_tiles. Attention and a whole block forward and
 * backward, whose GEMMs sum in cuBLAS's order: relative 1e-4 of each
 * tensor's largest magnitude. The ops in a 2-byte type likewise, the exp
 * ones within one 2-byte ulp. 2-byte attention and a 2-byte block
 * (forward and backward) run with every GEMM teacher-forced
 * (tests/kernels/rounding_check.h: each 2-byte gemm judged on the GPU's own
 * inputs, rounded once and flipping no more outputs than a legal reordering
 * may); their outputs then differ from the CPU's only where an upstream
 * rounding fell the other way, which a legal reordering does too: the CPU
 * runs the same layer with tests/kernels/gemm_emu.h's legal GEMMs (another
 * fp32 order) in this run, and the GPU may differ in no more outputs than 4
 * times that plus 8 (2-byte tensors), and its fp32 parameter gradients no
 * further than 4 times that run's relative gap plus 1e-5 (fp32's own
 * reordering). One line
 * per check. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/device.h"
#include "kernels/lm.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "kernels/select.h"
#include "model/attention.h"
#include "model/gpt.h"
#include "tests/check.h"
#include "tests/kernels/adamw_make.h"
#include "tests/kernels/gemm_emu.h"
#include "tests/kernels/rounding_check.h"
#include "util/util.h"

static const hfl_backend *G, *C;

static float *rnd(uint32_t tensor, size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * hfl_u01(hfl_philox_u32(3, 9, 0, 0, tensor, i)) - 1.0f);
    return p;
}

static float *dev(const float *host, size_t n) {
    float *d = G->alloc(sizeof(float) * (n ? n : 1));
    if (host) G->upload(d, host, sizeof(float) * n);
    return d;
}

/* The device's n floats against the CPU's: bit for bit (rtol 0), or within
 * rtol times the largest |want|. */
static void same(const char *what, const float *d, const float *want, size_t n, double rtol) {
    float *got = malloc(sizeof(float) * (n ? n : 1));
    G->download(got, d, sizeof(float) * n);
    double big = 0, worst = 0;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        worst = fmax(worst, e);
        if (rtol == 0 ? memcmp(&got[i], &want[i], sizeof(float)) != 0 : !(e <= rtol * big)) bad++;
    }
    int ok = bad == 0;
    printf("%s %s: %zu of %zu differ (max |err| %.3g, max |value| %.3g%s)\n", ok ? "ok  " : "FAIL", what, bad, n,
           worst, big, rtol == 0 ? ", bit for bit" : "");
    if (!ok) check_failures++;
    free(got);
}

static void test_ops(void) {
    enum { N = 3, T = 17, Cc = 48, V = 61, ROWS = N * T, RC = ROWS * Cc };
    const hfl_lm_ops *g = G->lm, *c = C->lm;
    float tokens[ROWS];
    for (int r = 0; r < ROWS; r++) tokens[r] = (float)(hfl_philox_u32(3, 9, 0, 0, 99, (uint64_t)r) % V);
    float *wte = rnd(1, V * Cc, 1), *wpe = rnd(2, T * Cc, 1), *dy = rnd(3, RC, 1);
    float *y = malloc(sizeof(float) * RC), *dwte = malloc(sizeof(float) * V * Cc), *dwpe = malloc(sizeof(float) * T * Cc);
    float *d_tok = dev(tokens, ROWS), *d_wte = dev(wte, V * Cc), *d_wpe = dev(wpe, T * Cc), *d_dy = dev(dy, RC);
    float *d_y = dev(NULL, RC), *d_dwte = dev(NULL, V * Cc), *d_dwpe = dev(NULL, T * Cc);
    c->embed_fwd(HFL_PREC_FP32, y, tokens, wte, wpe, ROWS, T, Cc, V);
    g->embed_fwd(HFL_PREC_FP32, d_y, d_tok, d_wte, d_wpe, ROWS, T, Cc, V);
    same("embed_fwd", d_y, y, RC, 0);
    for (int acc = 0; acc < 2; acc++) {
        c->embed_bwd(HFL_PREC_FP32, dwte, dwpe, dy, tokens, ROWS, T, Cc, V, acc);
        g->embed_bwd(HFL_PREC_FP32, d_dwte, d_dwpe, d_dy, d_tok, ROWS, T, Cc, V, acc);
        same(acc ? "embed_bwd dwte (accumulated)" : "embed_bwd dwte", d_dwte, dwte, V * Cc, 0);
        same(acc ? "embed_bwd dwpe (accumulated)" : "embed_bwd dwpe", d_dwpe, dwpe, T * Cc, 0);
    }

    float *x = rnd(4, RC, 3), *w = rnd(5, Cc, 2), *b = rnd(6, Cc, 1), *mean = malloc(sizeof(float) * ROWS);
    float *rstd = malloc(sizeof(float) * ROWS), *dx = rnd(7, RC, 1), *dw = malloc(sizeof(float) * Cc), *db = malloc(sizeof(float) * Cc);
    float *d_x = dev(x, RC), *d_w = dev(w, Cc), *d_b = dev(b, Cc), *d_mean = dev(NULL, ROWS), *d_rstd = dev(NULL, ROWS);
    float *d_dx = dev(dx, RC), *d_dw = dev(NULL, Cc), *d_db = dev(NULL, Cc);
    c->layernorm_fwd(HFL_PREC_FP32, y, mean, rstd, x, w, b, ROWS, Cc);
    g->layernorm_fwd(HFL_PREC_FP32, d_y, d_mean, d_rstd, d_x, d_w, d_b, ROWS, Cc);
    same("layernorm_fwd y", d_y, y, RC, 0);
    same("layernorm_fwd mean", d_mean, mean, ROWS, 0);
    same("layernorm_fwd rstd", d_rstd, rstd, ROWS, 0);
    c->layernorm_bwd(HFL_PREC_FP32, dx, dw, db, dy, x, w, mean, rstd, ROWS, Cc, 0,
                     1); /* dx_add onto dx's contents */
    g->layernorm_bwd(HFL_PREC_FP32, d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, ROWS, Cc, 0,
                     1);
    same("layernorm_bwd dx (added)", d_dx, dx, RC, 0);
    same("layernorm_bwd dw", d_dw, dw, Cc, 0);
    same("layernorm_bwd db", d_db, db, Cc, 0);

    c->gelu_fwd(HFL_PREC_FP32, y, x, RC);
    g->gelu_fwd(HFL_PREC_FP32, d_y, d_x, RC);
    same("gelu_fwd", d_y, y, RC, 1e-5);
    c->gelu_bwd(HFL_PREC_FP32, dx, dy, x, RC);
    g->gelu_bwd(HFL_PREC_FP32, d_dx, d_dy, d_x, RC);
    same("gelu_bwd", d_dx, dx, RC, 1e-5);

    enum { H = 4, HS = Cc / H, NR = N * H * T };
    float *heads = malloc(sizeof(float) * RC), *d_heads = dev(NULL, RC);
    c->heads_gather(HFL_PREC_FP32, heads, x, N, T, H, HS, Cc);
    g->heads_gather(HFL_PREC_FP32, d_heads, d_x, N, T, H, HS, Cc);
    same("heads_gather", d_heads, heads, RC, 0);
    c->heads_scatter(HFL_PREC_FP32, y, heads, N, T, H, HS, Cc);
    g->heads_scatter(HFL_PREC_FP32, d_y, d_heads, N, T, H, HS, Cc);
    same("heads_scatter", d_y, y, RC, 0);

    float *z = rnd(8, (size_t)NR * T, 4), *dp = rnd(9, (size_t)NR * T, 1), *p = malloc(sizeof(float) * NR * T);
    float *d_z = dev(z, (size_t)NR * T), *d_dp = dev(dp, (size_t)NR * T), *d_p = dev(NULL, (size_t)NR * T);
    c->causal_softmax(HFL_PREC_FP32, p, z, NR, T, 0.3f);
    g->causal_softmax(HFL_PREC_FP32, d_p, d_z, NR, T, 0.3f);
    same("causal_softmax", d_p, p, (size_t)NR * T, 1e-5);
    G->upload(d_p, p, sizeof(float) * NR * T); /* the backward from the same probabilities */
    c->causal_softmax_bwd(HFL_PREC_FP32, z, dp, p, NR, T, 0.3f);
    g->causal_softmax_bwd(HFL_PREC_FP32, d_z, d_dp, d_p, NR, T, 0.3f);
    same("causal_softmax_bwd", d_z, z, (size_t)NR * T, 0);

    float *m = rnd(10, RC, 0.1f), *v = rnd(11, RC, 0.1f);
    for (size_t i = 0; i < RC; i++) v[i] = fabsf(v[i]);
    float *d_m = dev(m, RC), *d_v = dev(v, RC);
    hfl_adamw_args a = adamw_make(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
    C->adamw_step(HFL_PREC_FP32, x, m, v, dy, x, RC, a, NULL);
    G->adamw_step(HFL_PREC_FP32, d_x, d_m, d_v, d_dy, d_x, RC, a, NULL);
    same("adamw_step w", d_x, x, RC, 0);
    same("adamw_step m", d_m, m, RC, 0);
    same("adamw_step v", d_v, v, RC, 0);
    /* The trainer's form: three steps counted in the device scalars
     * (a.sc), the bias corrections made there; the block too, bit for bit. */
    hfl_step_scalars sc = {.loss_scale = 1.0f, .finite = 1, .adam_beta1_pow = 1.0, .adam_beta2_pow = 1.0};
    hfl_step_scalars *d_sc = G->alloc(sizeof sc), got_sc;
    G->upload(d_sc, &sc, sizeof sc);
    for (int step = 0; step < 3; step++) {
        hfl_adamw_args ac = adamw_make(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1), ag = ac;
        ac.sc = &sc, ag.sc = d_sc;
        C->adamw_step(HFL_PREC_FP32, x, m, v, dy, x, RC, ac, NULL);
        G->adamw_step(HFL_PREC_FP32, d_x, d_m, d_v, d_dy, d_x, RC, ag, NULL);
    }
    same("adamw_step w, 3 steps counted on the device", d_x, x, RC, 0);
    same("adamw_step v, 3 steps counted on the device", d_v, v, RC, 0);
    G->download(&got_sc, d_sc, sizeof got_sc);
    int sc_same = memcmp(&got_sc, &sc, sizeof sc) == 0 && sc.adam_steps == 3;
    printf("%s adamw_step's step scalars after 3 steps: %d steps, bit for bit\n", sc_same ? "ok  " : "FAIL",
           got_sc.adam_steps);
    if (!sc_same) check_failures++;
    G->free(d_sc);

    float *all[] = {wte, wpe, dy, y, dwte, dwpe, x, w, b, mean, rstd, dx, dw, db, heads, z, dp, p, m, v};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    float *dall[] = {d_tok, d_wte, d_wpe, d_dy, d_y, d_dwte, d_dwpe, d_x, d_w, d_b, d_mean, d_rstd,
                     d_dx, d_dw, d_db, d_heads, d_z, d_dp, d_p, d_m, d_v};
    for (size_t i = 0; i < sizeof dall / sizeof *dall; i++) G->free(dall[i]);
}

/* Rows longer than a warp: layer norm of 70 rows of 200 (forward, dx added
 * onto a residual, dw and db accumulated), the causal softmax of T = 70. */
static void test_rows(void) {
    enum { ROWS = 70, CC = 200, RC = ROWS * CC, T = 70, NR = 2 * T, NS = NR * T };
    const hfl_lm_ops *g = G->lm, *c = C->lm;
    float *x = rnd(40, RC, 3), *w = rnd(41, CC, 2), *b = rnd(42, CC, 1), *dy = rnd(43, RC, 1), *dx = rnd(44, RC, 1);
    float *dw = rnd(45, CC, 1), *db = rnd(46, CC, 1), *y = malloc(sizeof(float) * RC), *mean = malloc(sizeof(float) * ROWS);
    float *rstd = malloc(sizeof(float) * ROWS);
    float *d_x = dev(x, RC), *d_w = dev(w, CC), *d_b = dev(b, CC), *d_dy = dev(dy, RC), *d_dx = dev(dx, RC);
    float *d_dw = dev(dw, CC), *d_db = dev(db, CC), *d_y = dev(NULL, RC), *d_mean = dev(NULL, ROWS), *d_rstd = dev(NULL, ROWS);
    c->layernorm_fwd(HFL_PREC_FP32, y, mean, rstd, x, w, b, ROWS, CC);
    g->layernorm_fwd(HFL_PREC_FP32, d_y, d_mean, d_rstd, d_x, d_w, d_b, ROWS, CC);
    same("layernorm_fwd y, 70 x 200", d_y, y, RC, 0);
    same("layernorm_fwd rstd, 70 x 200", d_rstd, rstd, ROWS, 0);
    c->layernorm_bwd(HFL_PREC_FP32, dx, dw, db, dy, x, w, mean, rstd, ROWS, CC, 1, 1);
    g->layernorm_bwd(HFL_PREC_FP32, d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, ROWS, CC, 1, 1);
    same("layernorm_bwd dx (added), 70 x 200", d_dx, dx, RC, 0);
    same("layernorm_bwd dw (accumulated), 70 x 200", d_dw, dw, CC, 0);
    same("layernorm_bwd db (accumulated), 70 x 200", d_db, db, CC, 0);
    float *z = rnd(47, NS, 4), *dp = rnd(48, NS, 1), *p = malloc(sizeof(float) * NS);
    float *d_z = dev(z, NS), *d_dp = dev(dp, NS), *d_p = dev(NULL, NS);
    c->causal_softmax(HFL_PREC_FP32, p, z, NR, T, 0.2f);
    g->causal_softmax(HFL_PREC_FP32, d_p, d_z, NR, T, 0.2f);
    same("causal_softmax, T = 70", d_p, p, NS, 1e-5);
    G->upload(d_p, p, sizeof(float) * NS);
    c->causal_softmax_bwd(HFL_PREC_FP32, z, dp, p, NR, T, 0.2f);
    g->causal_softmax_bwd(HFL_PREC_FP32, d_z, d_dp, d_p, NR, T, 0.2f);
    same("causal_softmax_bwd, T = 70", d_z, z, NS, 0);
    float *all[] = {x, w, b, dy, dx, dw, db, y, mean, rstd, z, dp, p};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    float *dall[] = {d_x, d_w, d_b, d_dy, d_dx, d_dw, d_db, d_y, d_mean, d_rstd, d_z, d_dp, d_p};
    for (size_t i = 0; i < sizeof dall / sizeof *dall; i++) G->free(dall[i]);
}

/* 2-byte device values against the CPU's: bit for bit (ulps 0), or within
 * `ulps` units in the last place of the 2-byte type, relative to |want| (or
 * to a sixteenth of the tensor's largest value, for sums that cancel). */
static void same_lp(const char *what, hfl_precision lp, const uint16_t *d, const uint16_t *want,
                    size_t n, int ulps) {
    uint16_t *got = malloc(sizeof(uint16_t) * (n ? n : 1));
    G->download(got, d, sizeof(uint16_t) * n);
    double unit = lp == HFL_PREC_BF16 ? 1.0 / 128 : 1.0 / 1024, big = 0;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(hfl_op_widen(lp, want[i])));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double a = hfl_op_widen(lp, got[i]), b = hfl_op_widen(lp, want[i]);
        bad += ulps == 0 ? got[i] != want[i] : !(fabs(a - b) <= ulps * unit * fmax(fabs(b), big / 16));
    }
    printf("%s %s (%s): %zu of %zu differ%s\n", bad ? "FAIL" : "ok  ", what, lp == HFL_PREC_BF16 ? "bf16" : "fp16",
           bad, n, ulps == 0 ? ", bit for bit" : "");
    if (bad) check_failures++;
    free(got);
}

/* 2-byte outputs whose bits differ. */
static size_t n_differ(const uint16_t *a, const uint16_t *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The device's 2-byte tensor against the CPU's (want), allowed to differ in
 * 4 times as many outputs as the legal emulation (legal) did, plus 8. */
static void within_legal_lp(const char *what, hfl_precision lp, const uint16_t *d,
                            const uint16_t *want, const uint16_t *legal, size_t n) {
    uint16_t *got = malloc(sizeof(uint16_t) * (n ? n : 1));
    G->download(got, d, sizeof(uint16_t) * n);
    size_t dg = n_differ(got, want, n), dl = n_differ(legal, want, n);
    double cap = 4.0 * (double)dl + 8.0;
    int ok = (double)dg <= cap;
    printf("%s %s (%s): %zu of %zu differ; a legal reordering on the CPU: %zu (cap %.0f)\n",
           ok ? "ok  " : "FAIL", what, lp == HFL_PREC_BF16 ? "bf16" : "fp16", dg, n, dl, cap);
    if (!ok) check_failures++;
    free(got);
}

/* The same for fp32 tensors: relative L2 gap within 4 times the legal one's plus 1e-5. */
static void within_legal(const char *what, const float *d, const float *want, const float *legal,
                         size_t n) {
    float *got = malloc(sizeof(float) * (n ? n : 1));
    G->download(got, d, sizeof(float) * n);
    double eg = rel_l2(got, want, n), el = rel_l2(legal, want, n), cap = 4.0 * el + 1e-5;
    int ok = eg <= cap;
    printf("%s %s: relative gap %.2e; a legal reordering on the CPU: %.2e (cap %.2e)\n",
           ok ? "ok  " : "FAIL", what, eg, el, cap);
    if (!ok) check_failures++;
    free(got);
}

/* The GEMMs the teacher-forced run (rc_forcing) judged since it was made. */
static void forced_verdict(const char *what) {
    int ok = rc_forced.calls > 0 && rc_forced.rejected == 0;
    printf("%s %s: teacher-forced GEMMs: %d of %d rejected\n", ok ? "ok  " : "FAIL", what,
           rc_forced.rejected, rc_forced.calls);
    if (!ok) check_failures++;
}

static uint16_t *dev16(const uint16_t *host, size_t n) {
    uint16_t *d = G->alloc(sizeof(uint16_t) * (n ? n : 1));
    if (host) G->upload(d, host, sizeof(uint16_t) * n);
    return d;
}

static uint16_t *rnd16(hfl_precision lp, uint32_t tensor, size_t n, float scale) {
    float *f = rnd(tensor, n, scale);
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = hfl_op_narrow(lp, f[i]);
    free(f);
    return h;
}

static void test_ops_lp(hfl_precision lp) {
    enum { N = 3, T = 17, Cc = 48, V = 61, H = 4, ROWS = N * T, RC = ROWS * Cc, NR = N * H * T };
    const hfl_lm_ops *g = G->lm, *c = C->lm;
    uint16_t tok[ROWS];
    for (int r = 0; r < ROWS; r++) tok[r] = hfl_op_narrow(lp, (float)(hfl_philox_u32(3, 9, 0, 0, 98, (uint64_t)r) % V));
    uint16_t *wte = rnd16(lp, 60, V * Cc, 1), *wpe = rnd16(lp, 61, T * Cc, 1), *dy = rnd16(lp, 62, RC, 1);
    uint16_t *x = rnd16(lp, 63, RC, 3), *w = rnd16(lp, 64, Cc, 2), *b = rnd16(lp, 65, Cc, 1);
    uint16_t *y = malloc(sizeof(uint16_t) * RC), *dx = rnd16(lp, 66, RC, 1);
    float *f1 = malloc(sizeof(float) * V * Cc), *f2 = malloc(sizeof(float) * T * Cc), mean[ROWS], rstd[ROWS];
    uint16_t *d_tok = dev16(tok, ROWS), *d_wte = dev16(wte, V * Cc), *d_wpe = dev16(wpe, T * Cc), *d_dy = dev16(dy, RC);
    uint16_t *d_x = dev16(x, RC), *d_w = dev16(w, Cc), *d_b = dev16(b, Cc), *d_y = dev16(NULL, RC), *d_dx = dev16(dx, RC);
    float *d_f1 = dev(NULL, V * Cc), *d_f2 = dev(NULL, T * Cc), *d_mean = dev(NULL, ROWS), *d_rstd = dev(NULL, ROWS);
    c->embed_fwd(lp, y, tok, wte, wpe, ROWS, T, Cc, V);
    g->embed_fwd(lp, d_y, d_tok, d_wte, d_wpe, ROWS, T, Cc, V);
    same_lp("embed_fwd", lp, d_y, y, RC, 0);
    for (int acc = 0; acc < 2; acc++) {
        c->embed_bwd(lp, f1, f2, dy, tok, ROWS, T, Cc, V, acc);
        g->embed_bwd(lp, d_f1, d_f2, d_dy, d_tok, ROWS, T, Cc, V, acc);
        same(acc ? "embed_bwd dwte (accumulated)" : "embed_bwd dwte", d_f1, f1, V * Cc, 0);
        same(acc ? "embed_bwd dwpe (accumulated)" : "embed_bwd dwpe", d_f2, f2, T * Cc, 0);
    }
    c->layernorm_fwd(lp, y, mean, rstd, x, w, b, ROWS, Cc);
    g->layernorm_fwd(lp, d_y, d_mean, d_rstd, d_x, d_w, d_b, ROWS, Cc);
    same_lp("layernorm_fwd", lp, d_y, y, RC, 0);
    c->layernorm_bwd(lp, dx, f1, f2, dy, x, w, mean, rstd, ROWS, Cc, 0, 1);
    g->layernorm_bwd(lp, d_dx, d_f1, d_f2, d_dy, d_x, d_w, d_mean, d_rstd, ROWS, Cc, 0, 1);
    same_lp("layernorm_bwd dx (added)", lp, d_dx, dx, RC, 0);
    same("layernorm_bwd dw", d_f1, f1, Cc, 0);
    same("layernorm_bwd db", d_f2, f2, Cc, 0);
    c->gelu_fwd(lp, y, x, RC);
    g->gelu_fwd(lp, d_y, d_x, RC);
    same_lp("gelu_fwd", lp, d_y, y, RC, 1);
    c->gelu_bwd(lp, y, dy, x, RC);
    g->gelu_bwd(lp, d_y, d_dy, d_x, RC);
    same_lp("gelu_bwd", lp, d_y, y, RC, 1);
    c->heads_gather(lp, y, x, N, T, H, Cc / H, Cc);
    g->heads_gather(lp, d_y, d_x, N, T, H, Cc / H, Cc);
    same_lp("heads_gather", lp, d_y, y, RC, 0);
    c->heads_scatter(lp, dx, y, N, T, H, Cc / H, Cc);
    g->heads_scatter(lp, d_dx, d_y, N, T, H, Cc / H, Cc);
    same_lp("heads_scatter", lp, d_dx, dx, RC, 0);
    /* AdamW on fp32 masters with 2-byte working weights; a skipped step first */
    float *master = rnd(68, RC, 1), *m = rnd(69, RC, 0.1f), *v = rnd(70, RC, 0.1f), *gr = rnd(71, RC, 1);
    for (size_t i = 0; i < RC; i++) v[i] = fabsf(v[i]);
    float *d_master = dev(master, RC), *d_m = dev(m, RC), *d_v = dev(v, RC), *d_gr = dev(gr, RC);
    hfl_step_scalars sc = {.loss_scale = 1.0f, .finite = 0};
    hfl_step_scalars *d_sc = G->alloc(sizeof sc);
    G->upload(d_sc, &sc, sizeof sc);
    hfl_adamw_args a = adamw_make(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    G->adamw_step(lp, d_master, d_m, d_v, d_gr, d_y, RC, a, d_sc);
    same("adamw_step skipped: masters unmoved", d_master, master, RC, 0);
    sc.finite = 1;
    G->upload(d_sc, &sc, sizeof sc);
    C->adamw_step(lp, master, m, v, gr, y, RC, a, &sc);
    G->adamw_step(lp, d_master, d_m, d_v, d_gr, d_y, RC, a, d_sc);
    same("adamw_step masters", d_master, master, RC, 0);
    same("adamw_step m", d_m, m, RC, 0);
    same_lp("adamw_step working weights", lp, d_y, y, RC, 0);
    /* counted in the device scalars: a skipped step (not counted), then two */
    sc = (hfl_step_scalars){.loss_scale = 1.0f, .finite = 0, .adam_beta1_pow = 1.0, .adam_beta2_pow = 1.0};
    G->upload(d_sc, &sc, sizeof sc);
    for (int step = 0; step < 3; step++) {
        sc.finite = step > 0; /* the flag alone: the device keeps its own count */
        G->upload((char *)d_sc + offsetof(hfl_step_scalars, finite), &sc.finite, sizeof sc.finite);
        hfl_adamw_args ac = a, ag = a;
        ac.sc = &sc, ag.sc = d_sc;
        C->adamw_step(lp, master, m, v, gr, y, RC, ac, &sc);
        G->adamw_step(lp, d_master, d_m, d_v, d_gr, d_y, RC, ag, d_sc);
    }
    same("adamw_step masters, counted on the device", d_master, master, RC, 0);
    hfl_step_scalars got_sc;
    G->download(&got_sc, d_sc, sizeof got_sc);
    int sc_same = memcmp(&got_sc, &sc, sizeof sc) == 0 && sc.adam_steps == 2;
    printf("%s adamw_step's step scalars (one step skipped): %d steps, bit for bit\n",
           sc_same ? "ok  " : "FAIL", got_sc.adam_steps);
    if (!sc_same) check_failures++;
    free(master), free(m), free(v), free(gr);
    G->free(d_master), G->free(d_m), G->free(d_v), G->free(d_gr), G->free(d_sc);
    uint16_t *z = rnd16(lp, 67, (size_t)NR * T, 4), *p = malloc(sizeof(uint16_t) * NR * T);
    uint16_t *d_z = dev16(z, (size_t)NR * T), *d_p = dev16(NULL, (size_t)NR * T);
    c->causal_softmax(lp, p, z, NR, T, 0.3f);
    g->causal_softmax(lp, d_p, d_z, NR, T, 0.3f);
    same_lp("causal_softmax", lp, d_p, p, (size_t)NR * T, 1);
    G->upload(d_p, p, sizeof(uint16_t) * NR * T);
    c->causal_softmax_bwd(lp, z, z, p, NR, T, 0.3f); /* dp = the scores, in place */
    g->causal_softmax_bwd(lp, d_z, d_z, d_p, NR, T, 0.3f);
    same_lp("causal_softmax_bwd (in place)", lp, d_z, z, (size_t)NR * T, 0);
    free(wte), free(wpe), free(dy), free(x), free(w), free(b), free(y), free(dx), free(f1), free(f2), free(z), free(p);
    void *dall[] = {d_tok, d_wte, d_wpe, d_dy, d_x, d_w, d_b, d_y, d_dx, d_f1, d_f2, d_mean, d_rstd, d_z, d_p};
    for (size_t i = 0; i < sizeof dall / sizeof *dall; i++) G->free(dall[i]);
}

static void test_attention_lp(hfl_precision lp, int n, int T, int Cc, int H) {
    size_t nq = (size_t)n * T * 3 * Cc, ny = (size_t)n * T * Cc, na = (size_t)n * H * T * T;
    size_t wsb = hfl_attention_bwd_ws_bytes(lp, n, T, Cc, H);
    uint16_t *qkv = rnd16(lp, 70, nq, 1.5f), *dy = rnd16(lp, 71, ny, 1);
    uint16_t *y = malloc(ny * 2), *att = malloc(na * 2), *dq = malloc(nq * 2);
    uint16_t *ly = malloc(ny * 2), *latt = malloc(na * 2), *ldq = malloc(nq * 2);
    void *ws = malloc(wsb), *d_ws = G->alloc(wsb);
    uint16_t *d_qkv = dev16(qkv, nq), *d_dy = dev16(dy, ny), *d_y = dev16(NULL, ny), *d_att = dev16(NULL, na);
    uint16_t *d_dq = dev16(NULL, nq);
    const hfl_backend *E = emu_backend(EMU_LEGAL, 1), *F = rc_forcing(G);
    hfl_attention_forward(C, lp, y, att, qkv, ws, n, T, Cc, H);
    hfl_attention_forward(E, lp, ly, latt, qkv, ws, n, T, Cc, H);
    hfl_attention_forward(F, lp, d_y, d_att, d_qkv, d_ws, n, T, Cc, H);
    forced_verdict("attention_forward");
    within_legal_lp("attention_forward", lp, d_y, y, ly, ny);
    G->upload(d_att, att, na * 2); /* the backward from the CPU's probabilities */
    hfl_attention_backward(C, lp, dq, dy, qkv, att, ws, n, T, Cc, H);
    hfl_attention_backward(E, lp, ldq, dy, qkv, att, ws, n, T, Cc, H);
    F = rc_forcing(G);
    hfl_attention_backward(F, lp, d_dq, d_dy, d_qkv, d_att, d_ws, n, T, Cc, H);
    forced_verdict("attention_backward");
    within_legal_lp("attention_backward", lp, d_dq, dq, ldq, nq);
    free(qkv), free(dy), free(y), free(att), free(dq), free(ws), free(ly), free(latt), free(ldq);
    G->free(d_ws), G->free(d_qkv), G->free(d_dy), G->free(d_y), G->free(d_att), G->free(d_dq);
}

static void test_block(int n, int T, int Cc, int H) {
    const hfl_precision f = HFL_PREC_FP32;
    size_t rc = (size_t)n * T * Cc, np = hfl_gpt_block_n_params(Cc),
           sf = hfl_gpt_block_saved_bytes(f, n, T, Cc, H, 0) / 4;
    size_t wsf = hfl_gpt_block_ws_bytes(f, n, T, Cc, H, 0) / sizeof(float);
    float *pw = rnd(20, np, 0.2f), *x = rnd(21, rc, 1), *dout = rnd(22, rc, 1);
    float *out = malloc(sizeof(float) * rc), *saved = malloc(sizeof(float) * sf), *ws = malloc(sizeof(float) * wsf);
    float *grads = malloc(sizeof(float) * np), *dx = malloc(sizeof(float) * rc);
    float *d_pw = dev(pw, np), *d_x = dev(x, rc), *d_dout = dev(dout, rc), *d_out = dev(NULL, rc);
    float *d_saved = dev(NULL, sf), *d_ws = dev(NULL, wsf), *d_grads = dev(NULL, np), *d_dx = dev(NULL, rc);
    hfl_gpt_block_params p = hfl_gpt_block_view(f, pw, Cc), d = hfl_gpt_block_view(f, grads, Cc);
    hfl_gpt_block_params gp = hfl_gpt_block_view(f, d_pw, Cc),
                         gd = hfl_gpt_block_view(f, d_grads, Cc);
    hfl_gpt_block_saved s = hfl_gpt_block_saved_view(f, saved, n, T, Cc, H, 0);
    hfl_gpt_block_saved gs = hfl_gpt_block_saved_view(f, d_saved, n, T, Cc, H, 0);
    hfl_gpt_block_forward(C, f, &p, NULL, x, out, &s, ws, n, T, Cc, H);
    hfl_gpt_block_forward(G, f, &gp, NULL, d_x, d_out, &gs, d_ws, n, T, Cc, H);
    char what[96];
    snprintf(what, sizeof what, "block forward n%d T%d C%d H%d", n, T, Cc, H);
    same(what, d_out, out, rc, 1e-4);
    hfl_gpt_block_backward(C, f, &p, &d, NULL, x, &s, dout, dx, ws, n, T, Cc, H, 0);
    hfl_gpt_block_backward(G, f, &gp, &gd, NULL, d_x, &gs, d_dout, d_dx, d_ws, n, T, Cc, H, 0);
    snprintf(what, sizeof what, "block backward dx n%d T%d C%d H%d", n, T, Cc, H);
    same(what, d_dx, dx, rc, 1e-4);
    snprintf(what, sizeof what, "block backward parameter gradients n%d T%d C%d H%d", n, T, Cc, H);
    same(what, d_grads, grads, np, 1e-4);
    free(pw), free(x), free(dout), free(out), free(saved), free(ws), free(grads), free(dx);
    G->free(d_pw), G->free(d_x), G->free(d_dout), G->free(d_out), G->free(d_saved), G->free(d_ws);
    G->free(d_grads), G->free(d_dx);
}

static void test_block_lp(hfl_precision lp, int n, int T, int Cc, int H) {
    size_t rc = (size_t)n * T * Cc, np = hfl_gpt_block_n_params(Cc);
    size_t sb = hfl_gpt_block_saved_bytes(lp, n, T, Cc, H, 0),
           wsb = hfl_gpt_block_ws_bytes(lp, n, T, Cc, H, 0);
    uint16_t *pw = rnd16(lp, 80, np, 0.2f), *x = rnd16(lp, 81, rc, 1), *dout = rnd16(lp, 82, rc, 1);
    uint16_t *out = malloc(rc * 2), *dx = malloc(rc * 2), *lout = malloc(rc * 2), *ldx = malloc(rc * 2);
    float *grads = malloc(sizeof(float) * np), *lgrads = malloc(sizeof(float) * np);
    void *saved = malloc(sb), *lsaved = malloc(sb), *ws = malloc(wsb), *d_saved = G->alloc(sb), *d_ws = G->alloc(wsb);
    uint16_t *d_pw = dev16(pw, np), *d_x = dev16(x, rc), *d_dout = dev16(dout, rc), *d_out = dev16(NULL, rc);
    uint16_t *d_dx = dev16(NULL, rc);
    float *d_grads = dev(NULL, np);
    const hfl_precision f = HFL_PREC_FP32;
    hfl_gpt_block_params p = hfl_gpt_block_view(lp, pw, Cc), gp = hfl_gpt_block_view(lp, d_pw, Cc);
    hfl_gpt_block_params d = hfl_gpt_block_view(f, grads, Cc),
                         gd = hfl_gpt_block_view(f, d_grads, Cc);
    hfl_gpt_block_params ld = hfl_gpt_block_view(f, lgrads, Cc);
    hfl_gpt_block_saved s = hfl_gpt_block_saved_view(lp, saved, n, T, Cc, H, 0);
    hfl_gpt_block_saved ls = hfl_gpt_block_saved_view(lp, lsaved, n, T, Cc, H, 0);
    hfl_gpt_block_saved gs = hfl_gpt_block_saved_view(lp, d_saved, n, T, Cc, H, 0);
    const hfl_backend *E = emu_backend(EMU_LEGAL, 1), *F = rc_forcing(G);
    hfl_gpt_block_forward(C, lp, &p, NULL, x, out, &s, ws, n, T, Cc, H);
    hfl_gpt_block_forward(E, lp, &p, NULL, x, lout, &ls, ws, n, T, Cc, H);
    hfl_gpt_block_forward(F, lp, &gp, NULL, d_x, d_out, &gs, d_ws, n, T, Cc, H);
    forced_verdict("block forward");
    within_legal_lp("block forward", lp, d_out, out, lout, rc);
    hfl_gpt_block_backward(C, lp, &p, &d, NULL, x, &s, dout, dx, ws, n, T, Cc, H, 0);
    hfl_gpt_block_backward(E, lp, &p, &ld, NULL, x, &ls, dout, ldx, ws, n, T, Cc, H, 0);
    F = rc_forcing(G);
    hfl_gpt_block_backward(F, lp, &gp, &gd, NULL, d_x, &gs, d_dout, d_dx, d_ws, n, T, Cc, H, 0);
    forced_verdict("block backward");
    within_legal_lp("block backward dx", lp, d_dx, dx, ldx, rc);
    within_legal(lp == HFL_PREC_BF16 ? "block backward parameter gradients (bf16)"
                                     : "block backward parameter gradients (fp16)",
                 d_grads, grads, lgrads, np);
    free(pw), free(x), free(dout), free(out), free(dx), free(grads), free(saved), free(ws);
    free(lout), free(ldx), free(lgrads), free(lsaved);
    G->free(d_saved), G->free(d_ws), G->free(d_pw), G->free(d_x), G->free(d_dout), G->free(d_out), G->free(d_dx);
    G->free(d_grads);
}

/* HFL_GPU_STANDIN=split-k or pre-round: the 2-byte attention and block
 * checks alone, with G the CPU backend whose 2-byte gemm is that emulation
 * (tests/kernels/gemm_emu.h), so every build runs this file's harness; both
 * must fail (tests/gpu/meson.build). */
static int run_standin(const char *kind) {
    int k = strcmp(kind, "split-k") == 0 ? EMU_SPLITK : strcmp(kind, "pre-round") == 0 ? EMU_PREROUND : -1;
    REQUIRE_MSG(k >= 0, "HFL_GPU_STANDIN=%s: expected split-k or pre-round", kind);
    G = emu_backend(k, 2);
    C = hfl_backend_cpu();
    printf("stand-in: the CPU backend with the %s GEMM emulation\n", emu_names[k]);
    for (hfl_precision lp = HFL_PREC_BF16; lp <= HFL_PREC_FP16; lp++) {
        test_attention_lp(lp, 2, 64, 128, 4);
        test_block_lp(lp, 4, 64, 128, 8);
    }
    return check_exit_code("test_cuda_lm (stand-in)");
}

static void case_ops_bf16(void) { test_ops_lp(HFL_PREC_BF16); }
static void case_ops_fp16(void) { test_ops_lp(HFL_PREC_FP16); }
static void case_attention_bf16(void) { test_attention_lp(HFL_PREC_BF16, 2, 64, 128, 4); }
static void case_attention_fp16(void) { test_attention_lp(HFL_PREC_FP16, 2, 64, 128, 4); }
static void case_block(void) {
    test_block(2, 16, 32, 4);
    test_block(4, 64, 128, 8);
}

static void case_block_bf16(void) { test_block_lp(HFL_PREC_BF16, 4, 64, 128, 8); }
static void case_block_fp16(void) { test_block_lp(HFL_PREC_FP16, 4, 64, 128, 8); }

/* The token gradient's buckets across tiles (kernels/lm_hd.h): 700 rows
 * (three tiles of a block's compaction, the last short) of 3 of 5 tokens,
 * one token only in the last row and one never, and 301 features (more than
 * a block's threads, so a thread adds two columns), with magnitudes 2^20
 * apart so an add out of row order changes the bits: the CPU's scatter bit
 * for bit, in both modes. */
static void test_embed_tiles(void) {
    enum { ROWS = 700, T = 7, Cc = 301, V = 5 }; /* odd: the small values fall in every column */
    float tokens[ROWS];
    for (int r = 0; r < ROWS; r++) tokens[r] = (float)(hfl_philox_u32(5, 1, 0, 0, 3, (uint64_t)r) % 3);
    tokens[ROWS - 1] = 4;
    float *dy = rnd(70, ROWS * Cc, 1e3f), *dwte = rnd(71, V * Cc, 1), *dwpe = rnd(72, T * Cc, 1);
    for (int i = 0; i < ROWS * Cc; i += 2) dy[i] *= 1e-6f;
    float *d_tok = dev(tokens, ROWS), *d_dy = dev(dy, ROWS * Cc), *d_dwte = dev(dwte, V * Cc);
    float *d_dwpe = dev(dwpe, T * Cc);
    for (int acc = 1; acc >= 0; acc--) { /* accumulating first, onto the random start */
        C->lm->embed_bwd(HFL_PREC_FP32, dwte, dwpe, dy, tokens, ROWS, T, Cc, V, acc);
        G->lm->embed_bwd(HFL_PREC_FP32, d_dwte, d_dwpe, d_dy, d_tok, ROWS, T, Cc, V, acc);
        same(acc ? "embed_bwd dwte over tiles (accumulated)" : "embed_bwd dwte over tiles", d_dwte, dwte, V * Cc, 0);
    }
    G->free(d_tok), G->free(d_dy), G->free(d_dwte), G->free(d_dwpe);
    free(dy), free(dwte), free(dwpe);
}

static const check_case cases[] = {
    {"ops", test_ops},
    {"embed_tiles", test_embed_tiles},
    {"rows", test_rows},
    {"ops_bf16", case_ops_bf16},
    {"ops_fp16", case_ops_fp16},
    {"attention_bf16", case_attention_bf16},
    {"attention_fp16", case_attention_fp16},
    {"block", case_block},
    {"block_bf16", case_block_bf16},
    {"block_fp16", case_block_fp16},
};

int main(int argc, char **argv) {
    hfl_device_info info;
    char reason[HFL_ERR_LEN] = "", err[HFL_ERR_LEN] = "";
    memset(&info, 0, sizeof info);
    const char *standin = getenv("HFL_GPU_STANDIN");
    if (standin) return run_standin(standin);
    if (hfl_cuda_probe(&info, reason, sizeof reason) != 0) {
        printf("SKIP: %s\n", reason);
        return 77;
    }
    G = hfl_backend_select("cuda", &info, NULL, err);
    REQUIRE_MSG(G != NULL, "a GPU is present (%s) but the CUDA backend is not: %s", info.name, err);
    REQUIRE_MSG(G->lm != NULL, "the CUDA backend has no transformer ops");
    C = hfl_backend_cpu();
    printf("GPU: %s, cc %d.%d\n", info.name, info.cc_major, info.cc_minor);
    int rc = check_run("test_cuda_lm", cases, CHECK_CASES(cases), argc, argv);
    G->sync();
    return rc;
}
