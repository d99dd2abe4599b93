/* gpt_dump.c: a 2-layer GPT (model/gpt.h's blocks and head, the token and
 * position embeddings of kernels/lm.h) trained for one step's forward and
 * backward on the CPU backend, written as a safetensors file for
 * tests/model/gpt_torch.py to redo in PyTorch (the language model's requirement: "forward loss and
 * every gradient of a 2-layer model equal PyTorch's on the same weights").
 *
 * The parameter vector: wte [V, C], wpe [T, C], each block's parameters in
 * gpt.h's order, ln_f.weight, ln_f.bias [C]. Tokens [n, T + 1] are bytes-like
 * ids; the model reads the first T of each row and predicts the last T (the
 * mean cross-entropy over n*T positions). The file holds "tokens", "params",
 * "loss" (one value) and "grads"; metadata n, T, C, H, V, L and precision.
 *
 * With bf16 or fp16 the step runs in 2-byte storage (mixed precision:
 * 2-byte working weights and activations, fp32 gradients; fp16 with a loss
 * scale of 1024, divided out by unscale_grads); "params" then holds the
 * working weights widened, the values the model really used.
 *
 * With a schedule (none, sqrt, optimal, full) the same step runs instead
 * through the model spec (model.h's LANGUAGE MODELS, parsed from JSON), the
 * planner and the trainer, as a client runs it: `optimal` at a budget one
 * byte under what storing every block needs, so it must recompute; with
 * --micro M as micro-batches of M samples accumulated into one gradient.
 * Every schedule but `none` is also run beside `none` on one batch, and
 * their gradients and losses must be equal bit for bit (exit 1 otherwise).
 *
 * With `lora R ALPHA` each block also has LoRA adapters (model/lora.h; Hu et
 * al. 2021) of rank R, scale ALPHA / R, with NONZERO random A and B (PEFT
 * starts B at 0, which would make dA = 0), and the base is frozen: the file
 * adds "lora" (the adapters, L blocks of hfl_gpt_lora_n_params, working
 * copies widened in 2-byte storage), "lora_grads" and metadata lora_r and
 * lora_alpha. The block gradients, pre-filled with a NaN sentinel, must come
 * back untouched (they go into "grads" as such; embedding and head gradients
 * are still computed), and a second backward with accumulate must add the
 * same adapter gradients again (exit 1 otherwise).
 * Usage: gpt_dump OUT.safetensors [fp32|bf16|fp16] [SCHEDULE [--micro M] | lora R ALPHA] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/lm.h"
#include "kernels/ops_hd.h"
#include "kernels/philox.h"
#include "model/gpt.h"
#include "model/model.h"
#include "plan/planner.h"
#include "util/stfile.h"
#include "util/util.h"

/* The shape; width, heads and blocks can be set at build time, as
 * gpt_dump_gpt2 (tests/model/meson.build) does for GPT-2 small's 12 heads. */
#ifndef GPT_DUMP_C
#define GPT_DUMP_C 16
#endif
#ifndef GPT_DUMP_H
#define GPT_DUMP_H 2
#endif
#ifndef GPT_DUMP_L
#define GPT_DUMP_L 2
#endif
enum { N = 3, T = 8, C = GPT_DUMP_C, H = GPT_DUMP_H, V = 32, L = GPT_DUMP_L, ROWS = N * T };

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
/* n zeroed elements of type t. */
static void *zeros_of(hfl_precision t, size_t n) {
    return calloc(n ? n : 1, hfl_precision_bytes(t));
}

/* LoRA mode (file comment): rank R (0: off) and alpha; the adapters. */
static int lora_r;
static float lora_alpha;
static float *lora_w, *lora_g; /* L blocks of hfl_gpt_lora_n_params(C, R) */
static const uint32_t SENTINEL = 0x7fc0beefu; /* a quiet NaN no arithmetic writes */

static void fill_sentinel(float *g, size_t n) {
    for (size_t i = 0; i < n; i++) memcpy(g + i, &SENTINEL, sizeof SENTINEL);
}

/* Exits unless every g[i] still holds the sentinel. */
static void require_untouched(const float *g, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(g + i, &SENTINEL, sizeof SENTINEL) != 0) {
            fprintf(stderr, "gpt_dump: lora: %s [%zu] written (%g) though the base is frozen\n", what, i, g[i]);
            exit(1);
        }
}

/* Block l's adapter descriptor over the working copies w of type t. */
static hfl_gpt_lora lora_of(int l, hfl_precision t, void *w) {
    size_t nl = hfl_gpt_lora_n_params(C, lora_r);
    hfl_gpt_lora lo = {.r = lora_r,
                       .scale = lora_alpha / (float)lora_r,
                       .w = hfl_gpt_lora_view(t, hfl_at(t, w, (ptrdiff_t)(l * nl)), C, lora_r),
                       .d = hfl_gpt_lora_view(HFL_PREC_FP32, lora_g + l * nl, C, lora_r)};
    return lo;
}

/* After the accumulating second backward: lora_g must be 2 g1 (the first
 * pass's), up to the GEMMs' rounding; then lora_g = g1 again. */
static void require_accumulated(const float *g1) {
    size_t nl = L * hfl_gpt_lora_n_params(C, lora_r);
    for (size_t i = 0; i < nl; i++) {
        float want = 2.0f * g1[i];
        if (!(fabsf(lora_g[i] - want) <= 1e-6f + 1e-5f * fabsf(want))) {
            fprintf(stderr, "gpt_dump: lora: accumulate gave [%zu] %g, not 2 x %g\n", i, lora_g[i], g1[i]);
            exit(1);
        }
    }
    memcpy(lora_g, g1, nl * sizeof(float));
}

/* One step on the model's functions in type t: params (fp32 in; in a
 * 2-byte type replaced by the working weights widened), grads (fp32,
 * unscaled); returns the mean loss. */
static float step_direct(const hfl_backend *be, hfl_precision t, float *params, float *grads,
                         size_t n_params, const float *x_in, const int32_t *targets) {
    const hfl_lm_ops *lm = be->lm;
    size_t nb = hfl_gpt_block_n_params(C), rc = (size_t)ROWS * C;
    void *w = zeros_of(t, n_params), *tok = zeros_of(t, ROWS);
    be->convert(t, w, params, n_params);
    be->convert(t, tok, x_in, ROWS);
    for (size_t i = 0; i < n_params; i++) params[i] = hfl_ld(t, w, i);
    void *wte = w, *wpe = hfl_at(t, wte, V * C), *blk = hfl_at(t, wpe, T * C);
    void *lnf_w = hfl_at(t, blk, (ptrdiff_t)(L * nb)), *lnf_b = hfl_at(t, lnf_w, C);
    float *dwte = grads, *dwpe = dwte + V * C, *dblk = dwpe + T * C, *dlnf_w = dblk + L * nb, *dlnf_b = dlnf_w + C;
    void *act[L + 1], *saved[L];
    size_t nl = L * hfl_gpt_lora_n_params(C, lora_r);
    void *lw = lora_r ? zeros_of(t, nl) : NULL;
    hfl_gpt_lora lo[L];
    if (lora_r) { /* the adapters' working copies, and the values they stand for */
        be->convert(t, lw, lora_w, nl);
        for (size_t i = 0; i < nl; i++) lora_w[i] = hfl_ld(t, lw, i);
        for (int l = 0; l < L; l++) lo[l] = lora_of(l, t, lw);
    }
    for (int l = 0; l <= L; l++) act[l] = zeros_of(t, rc);
    for (int l = 0; l < L; l++)
        saved[l] = calloc(1, hfl_gpt_block_saved_bytes(t, N, T, C, H, lora_r));
    size_t wsb = hfl_gpt_block_ws_bytes(t, N, T, C, H, lora_r),
           hwb = hfl_gpt_head_ws_bytes(t, ROWS, C, V);
    void *ws = calloc(1, wsb > hwb ? wsb : hwb);
    void *hf = zeros_of(t, rc), *logits = zeros_of(t, (size_t)ROWS * V),
         *dlogits = zeros_of(t, (size_t)ROWS * V);
    void *dx = zeros_of(t, rc), *dhf = zeros_of(t, rc);
    float *mean = zeros(ROWS), *rstd = zeros(ROWS), *lws = t == HFL_PREC_FP32 ? NULL : zeros(2 * V);

    lm->embed_fwd(t, act[0], tok, wte, wpe, ROWS, T, C, V);
    for (int l = 0; l < L; l++) {
        hfl_gpt_block_params p = hfl_gpt_block_view(t, hfl_at(t, blk, (ptrdiff_t)(l * nb)), C);
        hfl_gpt_block_saved s = hfl_gpt_block_saved_view(t, saved[l], N, T, C, H, lora_r);
        hfl_gpt_block_forward(be, t, &p, lora_r ? &lo[l] : NULL, act[l], act[l + 1], &s, ws, N, T,
                              C, H);
    }
    hfl_gpt_head_forward(be, t, act[L], lnf_w, lnf_b, wte, hf, mean, rstd, logits, ws, ROWS, C, V);
    hfl_step_scalars sc = {.loss_scale = t == HFL_PREC_FP16 ? 1024.0f : 1.0f};
    be->softmax_xent(t, logits, targets, dlogits, ROWS, V, ROWS, &sc, lws);
    hfl_gpt_head_backward(be, t, act[L], lnf_w, wte, hf, mean, rstd, dlogits, dwte, dlnf_w, dlnf_b,
                          dx, dhf, ws, ROWS, C, V, 0);
    void *dx_head = zeros_of(t, rc);
    float *g1 = zeros(nl);
    memcpy(dx_head, dx, rc * hfl_precision_bytes(t));
    for (int pass = 0; pass < (lora_r ? 2 : 1); pass++) { /* LoRA: again, accumulating */
        if (pass)
            memcpy(g1, lora_g, nl * sizeof(float)),
                memcpy(dx, dx_head, rc * hfl_precision_bytes(t));
        for (int l = L - 1; l >= 0; l--) {
            hfl_gpt_block_params p = hfl_gpt_block_view(t, hfl_at(t, blk, (ptrdiff_t)(l * nb)), C);
            hfl_gpt_block_params d = hfl_gpt_block_view(HFL_PREC_FP32, dblk + l * nb, C);
            hfl_gpt_block_saved s = hfl_gpt_block_saved_view(t, saved[l], N, T, C, H, lora_r);
            hfl_gpt_block_backward(be, t, &p, &d, lora_r ? &lo[l] : NULL, act[l], &s, dx, dx, ws, N,
                                   T, C, H, pass);
        }
    }
    be->fill(dwpe, 0.0f, (size_t)T * C); /* dwte holds the head's share: both accumulate */
    lm->embed_bwd(t, dwte, dwpe, dx, tok, ROWS, T, C, V, 1);
    if (lora_r) require_untouched(dblk, L * nb, "a block gradient"), require_accumulated(g1);
    if (t != HFL_PREC_FP32 &&
        lora_r) { /* the block gradients hold the sentinel: unscale the rest */
        int finite = 1;
        be->unscale_grads(dwte, (size_t)(V + T) * C, &sc), finite &= sc.finite;
        be->unscale_grads(dlnf_w, 2 * C, &sc), finite &= sc.finite;
        be->unscale_grads(lora_g, nl, &sc), sc.finite &= finite;
    } else if (t != HFL_PREC_FP32) be->unscale_grads(grads, n_params, &sc);
    if (t != HFL_PREC_FP32 && !sc.finite)
        fprintf(stderr, "gpt_dump: non-finite gradients in %s\n", hfl_precision_name(t));
    free(dx_head), free(g1), free(lw), free(tok);
    float loss = (float)(sc.loss_sum / ROWS);
    free(w), free(ws), free(hf), free(logits), free(dlogits), free(dx), free(dhf), free(mean),
        free(rstd), free(lws);
    for (int l = 0; l <= L; l++) free(act[l]);
    for (int l = 0; l < L; l++) free(saved[l]);
    return loss;
}

static int write_dump(const char *path, hfl_precision prec, const float *tokens, const float *params,
                      const float *grads, size_t n_params, float loss) {
    int64_t nl = L * (int64_t)hfl_gpt_lora_n_params(C, lora_r);
    hfl_st_put put[6] = {
        {.name = "tokens", .dtype = "F32", .ndim = 2, .shape = {N, T + 1}, .data = tokens},
        {.name = "params", .dtype = "F32", .ndim = 1, .shape = {(int64_t)n_params}, .data = params},
        {.name = "loss", .dtype = "F32", .ndim = 1, .shape = {1}, .data = &loss},
        {.name = "grads", .dtype = "F32", .ndim = 1, .shape = {(int64_t)n_params}, .data = grads},
        {.name = "lora", .dtype = "F32", .ndim = 1, .shape = {nl}, .data = lora_w},
        {.name = "lora_grads", .dtype = "F32", .ndim = 1, .shape = {nl}, .data = lora_g},
    };
    char nv[16], tv[16], cv[16], hv[16], vv[16], lv[16], rv[16], av[32], err[HFL_ERR_LEN];
    snprintf(nv, sizeof nv, "%d", N), snprintf(tv, sizeof tv, "%d", T), snprintf(cv, sizeof cv, "%d", C);
    snprintf(hv, sizeof hv, "%d", H), snprintf(vv, sizeof vv, "%d", V), snprintf(lv, sizeof lv, "%d", L);
    snprintf(rv, sizeof rv, "%d", lora_r), snprintf(av, sizeof av, "%.9g", lora_alpha);
    const char *meta[] = {"n", nv, "T", tv, "C", cv, "H", hv, "V", vv, "L", lv, "precision", hfl_precision_name(prec),
                          "lora_r", rv, "lora_alpha", av};
    size_t len;
    uint8_t *buf = hfl_st_encode(put, lora_r ? 6 : 4, meta, lora_r ? 9 : 7, &len, err);
    int bad = !buf || hfl_write_file_atomic(path, buf, len, err) != 0;
    if (bad) fprintf(stderr, "gpt_dump: %s\n", err);
    else printf("gpt_dump: %s, %zu parameters, loss %.6f, to %s\n", hfl_precision_name(prec), n_params, loss, path);
    free(buf);
    return bad;
}

/* The JSON spec of this shape, with LoRA when lora_r > 0. */
static void spec_json(char *js, size_t cap) {
    int at = snprintf(js, cap, "{\"name\": \"gpt-dump\", \"input\": [%d], \"layers\": ["
                      "{\"type\": \"embedding\", \"vocab\": %d, \"width\": %d}", T, V, C);
    for (int l = 0; l < L; l++) at += snprintf(js + at, cap - at, ", {\"type\": \"gpt_block\", \"heads\": %d}", H);
    at += snprintf(js + at, cap - at, ", {\"type\": \"lm_head\"}]");
    if (lora_r) at += snprintf(js + at, cap - at, ", \"lora\": {\"rank\": %d, \"alpha\": %.9g}", lora_r, lora_alpha);
    snprintf(js + at, cap - at, "}");
}

/* A trainer for spec under `kind` (optimal: one byte under none's chain peak). */
static hfl_trainer *make_trainer(const hfl_model_spec *spec, hfl_precision prec, hfl_ckpt_kind kind,
                                 int batch, const float *params, hfl_plan *plan) {
    char err[HFL_ERR_LEN];
    hfl_plan_config cfg = {.batch = batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX,
                           .precision = prec};
    if (hfl_plan_make(spec, &cfg, plan, err) != 0) goto fail;
    cfg.ckpt = kind;
    if (kind == HFL_CKPT_OPTIMAL) cfg.ckpt_budget = plan->ckpt.peak - 1;
    if (hfl_plan_make(spec, &cfg, plan, err) != 0) goto fail;
    if (kind == HFL_CKPT_OPTIMAL && !(plan->ckpt.feasible && plan->ckpt.recompute > 0)) {
        fprintf(stderr, "gpt_dump: optimal under %zu bytes: feasible %d, recompute %g\n",
                cfg.ckpt_budget, plan->ckpt.feasible, plan->ckpt.recompute);
        exit(1);
    }
    hfl_trainer *t = hfl_trainer_create_plan(spec, hfl_backend_cpu(), plan, err);
    if (!t) goto fail;
    hfl_trainer_set_params(t, params);
    if (prec == HFL_PREC_FP16) hfl_trainer_set_loss_scale(t, 1024.0f);
    return t;
fail:
    fprintf(stderr, "gpt_dump: %s\n", err);
    exit(1);
}

/* The step through spec, planner and trainer (file comment); params as in
 * step_lp. Returns the mean loss. */
static float step_trainer(hfl_precision prec, hfl_ckpt_kind kind, int micro, float *base,
                          float *grads, size_t n_params, const float *x_in, const int32_t *targets) {
    char err[HFL_ERR_LEN], js[1024];
    hfl_model_spec spec;
    size_t nl = L * hfl_gpt_lora_n_params(C, lora_r); /* with lora: the spec's adapters, after the rest */
    float *params = base;
    spec_json(js, sizeof js);
    if (hfl_model_spec_from_json(js, strlen(js), &spec, err) != 0) {
        fprintf(stderr, "gpt_dump: %s\n", err);
        exit(1);
    }
    if (spec.n_params != n_params + nl || spec.n_trainable != (lora_r ? nl : n_params) ||
        spec.label_rows != T || spec.n_classes != V || spec.in_dim != T) {
        fprintf(stderr, "gpt_dump: the spec has %zu parameters, %d label rows, %d classes\n",
                spec.n_params, spec.label_rows, spec.n_classes);
        exit(1);
    }
    static hfl_plan plan, plan_none;
    size_t nt = spec.n_trainable;
    float *all = zeros(spec.n_params); /* the base, then the adapters */
    memcpy(all, params, n_params * sizeof(float));
    if (lora_r) memcpy(all + n_params, lora_w, nl * sizeof(float));
    params = all;
    hfl_trainer *t = make_trainer(&spec, prec, kind, micro, params, &plan);
    float loss = hfl_trainer_accumulate(t, x_in, targets, N, micro);
    hfl_trainer_get_grads(t, lora_r ? lora_g : grads);
    printf("gpt_dump: trainer, %s, %d micro-batch(es): arena %zu bytes, chain peak %zu, "
           "recompute %.0f of %.0f forward FLOPs\n", hfl_ckpt_name(kind), (N + micro - 1) / micro,
           plan.arena_bytes, plan.ckpt.peak, plan.ckpt.recompute, plan.ckpt.forward);
    if (kind != HFL_CKPT_NONE) { /* the same batch without checkpointing: equal bits */
        hfl_trainer *u = make_trainer(&spec, prec, HFL_CKPT_NONE, N, params, &plan_none);
        float *g0 = zeros(nt), *g1 = zeros(nt);
        float l0 = hfl_trainer_accumulate(u, x_in, targets, N, N);
        hfl_trainer_get_grads(u, g0);
        hfl_trainer_free(u);
        hfl_trainer *v = make_trainer(&spec, prec, kind, N, params, &plan);
        float l1 = hfl_trainer_accumulate(v, x_in, targets, N, N);
        hfl_trainer_get_grads(v, g1);
        hfl_trainer_free(v);
        int same = memcmp(g0, g1, nt * sizeof(float)) == 0 && memcmp(&l0, &l1, sizeof l0) == 0;
        printf("gpt_dump: %s against none at batch %d (arena %zu vs %zu bytes): gradients and "
               "loss %s\n", hfl_ckpt_name(kind), N, plan.arena_bytes, plan_none.arena_bytes,
               same ? "equal bit for bit" : "DIFFER");
        free(g0), free(g1);
        if (!same) exit(1);
    }
    hfl_trainer_free(t);
    if (prec != HFL_PREC_FP32) /* the working weights the step used */
        for (size_t i = 0; i < spec.n_params; i++) params[i] = hfl_op_widen(prec, hfl_op_narrow(prec, params[i]));
    memcpy(base, params, n_params * sizeof(float));
    if (lora_r) memcpy(lora_w, params + n_params, nl * sizeof(float));
    free(all);
    return loss;
}

int main(int argc, char **argv) {
    hfl_precision prec = HFL_PREC_FP32;
    hfl_ckpt_kind kind = HFL_CKPT_NONE;
    int lora = argc == 6 && strcmp(argv[3], "lora") == 0, trainer = argc >= 4 && !lora, micro = N;
    int trainer_lora = argc == 7 && strcmp(argv[4], "lora") == 0; /* SCHEDULE lora R ALPHA */
    char err[HFL_ERR_LEN];
    if (lora) lora_r = atoi(argv[4]), lora_alpha = strtof(argv[5], NULL);
    if (trainer_lora) lora = 1, lora_r = atoi(argv[5]), lora_alpha = strtof(argv[6], NULL);
    if (argc == 6 && strcmp(argv[4], "--micro") == 0) micro = atoi(argv[5]);
    if (argc < 2 || (argc > 6 && !trainer_lora) || argc == 5 ||
        (argc == 6 && !lora && strcmp(argv[4], "--micro") != 0) ||
        micro < 1 || micro > N || (lora && (lora_r < 1 || lora_r > C || !(lora_alpha > 0.0f))) ||
        (argc >= 3 && hfl_precision_parse(argv[2], &prec, err) != 0) ||
        (trainer && hfl_ckpt_parse(argv[3], &kind, err) != 0)) {
        fprintf(stderr, "usage: gpt_dump OUT.safetensors [fp32|bf16|fp16] "
                        "[none|sqrt|optimal|full [--micro 1..%d | lora R ALPHA] | lora R ALPHA (R in 1..%d)]\n",
                N, C);
        return 2;
    }
    const hfl_backend *be = hfl_backend_cpu();
    size_t nb = hfl_gpt_block_n_params(C);
    size_t n_params = (size_t)V * C + (size_t)T * C + L * nb + 2 * C;
    float *params = zeros(n_params), *grads = zeros(n_params);
    for (size_t i = 0; i < n_params; i++) /* U(-0.3, 0.3): big enough to move every path */
        params[i] = 0.6f * hfl_u01(hfl_philox_u32(5, 1, 0, 0, 0, i)) - 0.3f;
    float *blk = params + V * C + T * C, *lnf_w = blk + L * nb, *dblk = grads + V * C + T * C;
    for (int c = 0; c < C; c++)
        lnf_w[c] += 1.0f; /* layer norm weights near 1, as trained models have them */
    for (int l = 0; l < L; l++) {
        hfl_gpt_block_params p = hfl_gpt_block_view(HFL_PREC_FP32, blk + l * nb, C);
        for (int c = 0; c < C; c++) ((float *)p.ln1_w)[c] += 1.0f, ((float *)p.ln2_w)[c] += 1.0f;
    }
    if (lora) { /* adapters U(-0.3, 0.3), B too; every gradient a NaN sentinel */
        size_t nl = L * hfl_gpt_lora_n_params(C, lora_r);
        lora_w = zeros(nl), lora_g = zeros(nl);
        for (size_t i = 0; i < nl; i++) lora_w[i] = 0.6f * hfl_u01(hfl_philox_u32(5, 3, 0, 0, 0, i)) - 0.3f;
        fill_sentinel(dblk, L * nb);
        fill_sentinel(lora_g, nl);
    }

    float tokens[N * (T + 1)], x_in[ROWS];
    int32_t targets[ROWS];
    for (int i = 0; i < N * (T + 1); i++) tokens[i] = (float)(hfl_philox_u32(5, 2, 0, 0, 0, (uint64_t)i) % V);
    for (int b = 0; b < N; b++)
        for (int t = 0; t < T; t++) {
            x_in[b * T + t] = tokens[b * (T + 1) + t];
            targets[b * T + t] = (int32_t)tokens[b * (T + 1) + t + 1];
        }

    if (trainer) {
        float loss = step_trainer(prec, kind, micro, params, grads, n_params, x_in, targets);
        int bad = write_dump(argv[1], prec, tokens, params, grads, n_params, loss);
        free(params), free(grads);
        return bad;
    }
    float loss = step_direct(be, prec, params, grads, n_params, x_in, targets);
    int rc_out = write_dump(argv[1], prec, tokens, params, grads, n_params, loss);
    free(params), free(grads), free(lora_w), free(lora_g);
    return rc_out;
}
