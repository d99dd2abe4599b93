/* lm_layers.c: the language model's layer kinds behind hfl_layer_ops
 * (layers.h): embedding, gpt_block and lm_head, thin adapters from the
 * planner's buffers to model/gpt.h's passes and kernels/lm.h's ops.
 *
 * Shapes (model.h, LANGUAGE MODELS): embedding reads [n, T] token ids
 * (input [T], i.e. shape (T, 1, 1)) and writes [n, T, C] as (T, 1, C);
 * gpt_block maps (T, 1, C) to itself; lm_head maps (T, 1, C) to (T, 1, V).
 * Parameter blocks, in PyTorch/nanoGPT names and layouts:
 *   embedding: wte [V, C], wpe [T, C], both N(0, 0.02^2) (GPT-2);
 *   gpt_block: gpt.h's twelve tensors, Linear weights N(0, 0.02^2), biases
 *              0, layer-norm weights 1 and biases 0 (GPT-2's init without
 *              its 1/sqrt(2L) scaling of the residual projections);
 *   lm_head:   ln_f.weight (1), ln_f.bias (0) [C]; its projection is the
 *              embedding's wte (tie_off), which it reads and whose gradient
 *              it writes (overwrites, or adds when accumulating); the
 *              embedding's backward, which runs after it, then always adds
 *              its own part to dwte.
 * Saved activations (checkpoint.h): the block's gpt.h saved set, the head's
 * LN_f output and statistics; the embedding keeps only its input (ids).
 *
 * LoRA (model.h): a block with adapters reads them at lora_off (relative to
 * its own block, as the head's tie) and its backward writes only theirs:
 * the trainer hands it the adapters' gradients as dparams. A frozen
 * embedding's backward does nothing, and a frozen head's computes dx only
 * (dparams NULL; its workspace holds a scratch for LN_f's unused dw, db). */
#include <stdint.h>

#include "kernels/lm.h"
#include "kernels/ops_hd.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "util/util.h"

static int seq_len(const hfl_layer *ly) { return ly->in_shape.c; }
static int width(const hfl_layer *ly) { return ly->in_shape.w; }

/* ---- embedding ---- */

static int embed_shape(hfl_layer *ly, char *err) {
    if (ly->in_shape.h != 1 || ly->in_shape.w != 1)
        return hfl_errf(err, "input must be [T] token ids, got %dx%dx%d", ly->in_shape.c,
                        ly->in_shape.h, ly->in_shape.w);
    if (ly->vocab < 2 || ly->vocab > HFL_MODEL_MAX_DIM)
        return hfl_errf(err, "vocab %d outside [2, %d]", ly->vocab, HFL_MODEL_MAX_DIM);
    if (ly->units < 1 || ly->units > HFL_MODEL_MAX_DIM)
        return hfl_errf(err, "width %d outside [1, %d]", ly->units, HFL_MODEL_MAX_DIM);
    ly->out_shape = (hfl_shape){ly->in_shape.c, 1, ly->units};
    return 0;
}

static int embed_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    size_t nte = (size_t)ly->vocab * ly->units, npe = (size_t)seq_len(ly) * ly->units;
    out[0] = (hfl_param_tensor){"wte.weight", 0, nte, 1, HFL_INIT_NORMAL, 0.02f, ly->units};
    out[1] = (hfl_param_tensor){"wpe.weight", nte, npe, 1, HFL_INIT_NORMAL, 0.02f, ly->units};
    return 2;
}

static void embed_forward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                          const void *params, const void *in, void *out, void *saved, void *ws,
                          int batch) {
    (void)saved, (void)ws;
    int T = seq_len(ly), C = ly->units, V = ly->vocab;
    be->lm->embed_fwd(t, out, in, params, hfl_at(t, params, (size_t)V * C), batch * T, T, C, V);
}

/* dwte always adds: lm_head's backward wrote it first (file comment); dwpe
 * is zeroed first unless accumulating, so one call adds to both. */
static void embed_backward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                           const void *params, const void *in, const void *out, const void *dout,
                           void *din, float *dparams, const void *saved, void *ws, int batch,
                           int accumulate) {
    (void)params, (void)out, (void)din, (void)saved, (void)ws;
    if (ly->frozen) return;
    int T = seq_len(ly), C = ly->units, V = ly->vocab;
    float *dwte = dparams, *dwpe = dparams + (size_t)V * C;
    if (!accumulate) be->fill(dwpe, 0.0f, (size_t)T * C);
    be->lm->embed_bwd(t, dwte, dwpe, dout, in, batch * T, T, C, V, 1);
}

/* A gather and an add per output element. */
static uint64_t embed_flops(const hfl_layer *ly) { return (uint64_t)seq_len(ly) * ly->units; }

const hfl_layer_ops hfl_embed_ops = {
    .name = "embedding",
    .infer_shape = embed_shape,
    .param_tensors = embed_tensors,
    .forward = embed_forward,
    .backward = embed_backward,
    .fwd_workspace_bytes = hfl_layer_no_workspace,
    .bwd_workspace_bytes = hfl_layer_no_workspace,
    .keeps = HFL_KEEP_INPUT,
    .flops = embed_flops,
};

/* ---- gpt_block ---- */

static int block_shape(hfl_layer *ly, char *err) {
    int C = width(ly);
    if (ly->in_shape.h != 1 || C < 2)
        return hfl_errf(err, "input must be (T, 1, C) from an embedding or a block, got %dx%dx%d",
                        ly->in_shape.c, ly->in_shape.h, ly->in_shape.w);
    if (ly->heads < 1 || ly->heads > C || C % ly->heads != 0)
        return hfl_errf(err, "heads %d must divide the width %d", ly->heads, C);
    ly->out_shape = ly->in_shape;
    return 0;
}

static int block_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    static const char *const names[12] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    int C = width(ly);
    size_t off[12];
    hfl_gpt_block_offsets(C, off);
    for (int i = 0; i < 12; i++) {
        size_t end = i < 11 ? off[i + 1] : hfl_gpt_block_n_params(C);
        int ln = i == 0 || i == 1 || i == 6 || i == 7, weight = i % 2 == 0;
        out[i] = (hfl_param_tensor){names[i], off[i], end - off[i], 1,
                                    ln || !weight ? HFL_INIT_CONST : HFL_INIT_NORMAL,
                                    ln && weight ? 1.0f : !weight ? 0.0f : 0.02f,
                                    weight && !ln ? (i == 10 ? 4 * C : C) : 0};
    }
    return 12;
}

/* The block's adapters (file comment), of type t, and their gradients d
 * when dparams. */
static ptrdiff_t lora_rel(const hfl_layer *ly) { return (ptrdiff_t)ly->lora_off - (ptrdiff_t)ly->param_off; }
static hfl_gpt_lora block_lora(const hfl_layer *ly, hfl_precision t, const void *p,
                               float *dparams) {
    hfl_gpt_lora lo = {.r = ly->lora_rank, .scale = ly->lora_scale};
    int C = width(ly);
    lo.w = hfl_gpt_lora_view(t, hfl_at(t, p, lora_rel(ly)), C, ly->lora_rank);
    if (dparams) lo.d = hfl_gpt_lora_view(HFL_PREC_FP32, dparams, C, ly->lora_rank);
    return lo;
}

/* The forward writes none of the parameters the view lets it reach. */
static void block_forward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                          const void *params, const void *in, void *out, void *saved, void *ws,
                          int batch) {
    int T = seq_len(ly), C = width(ly), H = ly->heads;
    hfl_gpt_block_params p = hfl_gpt_block_view(t, (void *)params, C);
    hfl_gpt_block_saved s = hfl_gpt_block_saved_view(t, saved, batch, T, C, H, ly->lora_rank);
    hfl_gpt_lora lo = block_lora(ly, t, params, NULL);
    hfl_gpt_block_forward(be, t, &p, ly->lora_rank ? &lo : NULL, in, out, &s, ws, batch, T, C, H);
}

static void block_backward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                           const void *params, const void *in, const void *out, const void *dout,
                           void *din, float *dparams, const void *saved, void *ws, int batch,
                           int accumulate) {
    (void)out;
    int T = seq_len(ly), C = width(ly), H = ly->heads;
    hfl_gpt_block_params p = hfl_gpt_block_view(t, (void *)params, C);
    hfl_gpt_block_saved s =
        hfl_gpt_block_saved_view(t, (void *)saved, batch, T, C, H, ly->lora_rank);
    if (ly->lora_rank) {
        hfl_gpt_lora lo = block_lora(ly, t, params, dparams);
        hfl_gpt_block_backward(be, t, &p, NULL, &lo, in, &s, dout, din, ws, batch, T, C, H,
                               accumulate);
        return;
    }
    hfl_gpt_block_params d = hfl_gpt_block_view(HFL_PREC_FP32, dparams, C);
    hfl_gpt_block_backward(be, t, &p, &d, NULL, in, &s, dout, din, ws, batch, T, C, H, accumulate);
}

static size_t block_fwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    return hfl_gpt_block_fwd_ws_bytes(t, batch, seq_len(ly), width(ly), ly->heads, ly->lora_rank);
}
static size_t block_bwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    return hfl_gpt_block_ws_bytes(t, batch, seq_len(ly), width(ly), ly->heads, ly->lora_rank);
}
static size_t block_saved(const hfl_layer *ly, hfl_precision t, int batch) {
    return hfl_gpt_block_saved_bytes(t, batch, seq_len(ly), width(ly), ly->heads, ly->lora_rank);
}

/* Per sample: the four projections (24 T C^2) and attention's two T x T x C
 * products (2 T^2 C, causal masking not discounted). */
static uint64_t block_flops(const hfl_layer *ly) {
    uint64_t T = (uint64_t)seq_len(ly), C = (uint64_t)width(ly);
    return 24 * T * C * C + 4 * T * T * C;
}

const hfl_layer_ops hfl_gpt_block_ops = {
    .name = "gpt_block",
    .infer_shape = block_shape,
    .param_tensors = block_tensors,
    .forward = block_forward,
    .backward = block_backward,
    .fwd_workspace_bytes = block_fwd_ws,
    .bwd_workspace_bytes = block_bwd_ws,
    .keeps = HFL_KEEP_INPUT,
    .bwd_in_place = 1,
    .flops = block_flops,
    .saved_bytes = block_saved,
};

/* ---- lm_head ---- */

static int head_shape(hfl_layer *ly, char *err) {
    if (ly->in_shape.h != 1 || ly->in_shape.w < 1)
        return hfl_errf(err, "input must be (T, 1, C), got %dx%dx%d", ly->in_shape.c,
                        ly->in_shape.h, ly->in_shape.w);
    ly->out_shape = (hfl_shape){ly->in_shape.c, 1, ly->vocab};
    return 0;
}

static int head_tensors(const hfl_layer *ly, hfl_param_tensor out[HFL_MAX_PARAM_TENSORS]) {
    size_t C = (size_t)width(ly);
    out[0] = (hfl_param_tensor){"ln_f.weight", 0, C, 1, HFL_INIT_CONST, 1.0f, 0};
    out[1] = (hfl_param_tensor){"ln_f.bias", C, C, 1, HFL_INIT_CONST, 0.0f, 0};
    return 2;
}

/* The tied wte: tie_off is absolute in the parameter vector, params is this
 * layer's block inside that same vector. */
static ptrdiff_t tie(const hfl_layer *ly) { return (ptrdiff_t)ly->tie_off - (ptrdiff_t)ly->param_off; }
static size_t head_rows(const hfl_layer *ly, int batch) { return (size_t)batch * seq_len(ly); }

/* saved: hf (type t), then fp32 mean and rstd. */
static float *head_stats(const hfl_layer *ly, hfl_precision t, const void *saved, int batch) {
    return (float *)((char *)saved + hfl_region_bytes(t, head_rows(ly, batch) * width(ly) *
                                                             hfl_precision_bytes(t)));
}

static size_t head_fwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    return hfl_gpt_head_ws_bytes(t, (int)head_rows(ly, batch), width(ly), ly->vocab);
}

static void head_forward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                         const void *params, const void *in, void *out, void *saved, void *ws,
                         int batch) {
    int C = width(ly), rows = (int)head_rows(ly, batch);
    float *mean = head_stats(ly, t, saved, batch);
    hfl_gpt_head_forward(be, t, in, params, hfl_at(t, params, (size_t)C),
                         hfl_at(t, params, tie(ly)), saved, mean, mean + rows, out, ws, rows, C,
                         ly->vocab);
}

/* ws: dhf (type t), then the gemm's staging; frozen, then a scratch for
 * LN_f's unused dw, db. */
static void head_backward(const hfl_backend *be, hfl_precision t, const hfl_layer *ly,
                          const void *params, const void *in, const void *out, const void *dout,
                          void *din, float *dparams, const void *saved, void *ws, int batch,
                          int accumulate) {
    (void)out;
    int C = width(ly), rows = (int)head_rows(ly, batch);
    const float *mean = head_stats(ly, t, saved, batch);
    const void *lnf_w = params, *wte = hfl_at(t, params, tie(ly));
    void *dhf = ws,
         *stage = (char *)ws + hfl_region_bytes(t, (size_t)rows * C * hfl_precision_bytes(t));
    if (ly->frozen) { /* dx only: LN_f's dw, db into the scratch after the staging */
        float *scratch = (float *)((char *)stage + hfl_region_bytes(t, head_fwd_ws(ly, t, batch)));
        hfl_gpt_head_backward(be, t, in, lnf_w, wte, saved, mean, mean + rows, dout, NULL, scratch,
                              scratch + C, din, dhf, stage, rows, C, ly->vocab, 0);
        return;
    }
    hfl_gpt_head_backward(be, t, in, lnf_w, wte, saved, mean, mean + rows, dout, dparams + tie(ly),
                          dparams, dparams + C, din, dhf, stage, rows, C, ly->vocab, accumulate);
}

static size_t head_bwd_ws(const hfl_layer *ly, hfl_precision t, int batch) {
    size_t stage = head_fwd_ws(ly, t, batch);
    return hfl_region_bytes(t, head_rows(ly, batch) * width(ly) * hfl_precision_bytes(t)) +
           (ly->frozen ? hfl_region_bytes(t, stage) + 2 * (size_t)width(ly) * sizeof(float)
                       : stage);
}
static size_t head_saved(const hfl_layer *ly, hfl_precision t, int batch) {
    return hfl_region_bytes(t, head_rows(ly, batch) * width(ly) * hfl_precision_bytes(t)) +
           head_rows(ly, batch) * 2 * sizeof(float);
}

static uint64_t head_flops(const hfl_layer *ly) {
    return 2 * (uint64_t)seq_len(ly) * width(ly) * ly->vocab;
}

const hfl_layer_ops hfl_lm_head_ops = {
    .name = "lm_head",
    .infer_shape = head_shape,
    .param_tensors = head_tensors,
    .forward = head_forward,
    .backward = head_backward,
    .fwd_workspace_bytes = head_fwd_ws,
    .bwd_workspace_bytes = head_bwd_ws,
    .keeps = HFL_KEEP_INPUT,
    .flops = head_flops,
    .saved_bytes = head_saved,
};
