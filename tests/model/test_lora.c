/* test_lora.c: LoRA specs (model.h, LANGUAGE MODELS) in the JSON format,
 * the parameter layout, initialisation, planner, trainer and safetensors.
 *
 * Oracles worked out by hand or from the definitions, not from the code:
 *   - a 2-block GPT (V 32, T 8, C 16) has 7,232 base parameters; rank 4
 *     adds 16 r C = 1,024 per block, so train_off = 7,232, n_trainable =
 *     2,048 and block b's adapters start at 7,232 + 1,024 b;
 *   - PEFT's start: every lora_B zero, every lora_A inside
 *     (-1/sqrt(in), 1/sqrt(in)) and not all zero; the base as without LoRA;
 *   - a plan keeps gradients (and momentum, AdamW's moments) for the
 *     adapters only: 4 n_trainable bytes each;
 *   - training steps move the adapters and leave every frozen parameter's
 *     bits as they were, in fp32 and bf16;
 *   - the JSON refusals each name what is wrong in one line; a printed spec
 *     parses back to the same layout;
 *   - safetensors: PEFT's adapter names and shapes, a round trip, and a base
 *     model's file (no adapters) loads into the LoRA spec, leaving the
 *     adapters at their start. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "model/safetensors.h"
#include "tests/check.h"
#include "util/util.h"

#define BASE "{\"name\": \"gpt-lora\", \"input\": [8], \"layers\": [" \
             "{\"type\": \"embedding\", \"vocab\": 32, \"width\": 16}," \
             "{\"type\": \"gpt_block\", \"heads\": 2}, {\"type\": \"gpt_block\", \"heads\": 2}," \
             "{\"type\": \"lm_head\"}]"

static void layout(hfl_model_spec *s, hfl_model_spec *base) {
    char err[HFL_ERR_LEN];
    static const char js[] = BASE ", \"lora\": {\"rank\": 4, \"alpha\": 8}}";
    REQUIRE(hfl_model_spec_from_json(BASE "}", strlen(BASE "}"), base, err) == 0);
    REQUIRE_MSG(hfl_model_spec_from_json(js, strlen(js), s, err) == 0, "%s", err);
    CHECK(base->n_params == 7232 && base->train_off == 0 && base->n_trainable == 7232);
    CHECK(s->n_params == 7232 + 2048 && s->train_off == 7232 && s->n_trainable == 2048);
    CHECK(s->lora_rank == 4 && s->lora_alpha == 8.0f);
    CHECK(s->layers[1].lora_off == 7232 && s->layers[2].lora_off == 8256);
    CHECK(s->layers[1].lora_scale == 2.0f && s->layers[0].lora_rank == 0 && s->layers[3].lora_rank == 0);
    for (int l = 0; l < 4; l++) CHECK(s->layers[l].frozen && !base->layers[l].frozen);
    CHECK(hfl_model_spec_check(s, err) == 0);
    char *printed = hfl_model_spec_to_json(s, err);
    hfl_model_spec back;
    CHECK(printed && strstr(printed, "\"lora\":{\"rank\":4,\"alpha\":8}"));
    CHECK(printed && hfl_model_spec_from_json(printed, strlen(printed), &back, err) == 0 &&
          back.n_params == s->n_params && back.train_off == s->train_off && back.layers[2].lora_off == 8256);
    free(printed);
    static const char one[] = BASE ", \"lora\": {\"rank\": 2}}"; /* alpha defaults to the rank */
    CHECK(hfl_model_spec_from_json(one, strlen(one), &back, err) == 0 && back.layers[1].lora_scale == 1.0f &&
          back.n_trainable == 2 * 16 * 2 * 16);
}

static void refusals(void) {
    static const struct {
        const char *json, *want;
    } bad[] = {
        {BASE ", \"lora\": {\"rank\": 0}}", "rank 0 must be at least 1"},
        {BASE ", \"lora\": {\"rank\": 17}}", "LoRA rank 17 outside [1, 16]"},
        {BASE ", \"lora\": {\"rank\": 4, \"alpha\": -1}}", "alpha -1 outside"},
        {BASE ", \"lora\": {\"rank\": 4, \"alpha\": \"8\"}}", "\"alpha\" must be a number"},
        {BASE ", \"lora\": {\"rank\": 4, \"dropout\": 0.1}}", "unknown key \"dropout\""},
        {BASE ", \"lora\": 4}", "must be an object"},
        {"{\"name\": \"m\", \"input\": [4], \"layers\": [{\"type\": \"dense\", \"out\": 2}], "
         "\"lora\": {\"rank\": 1}}", "need a language model"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[HFL_ERR_LEN] = "";
        hfl_model_spec s;
        int rc = hfl_model_spec_from_json(bad[i].json, strlen(bad[i].json), &s, err);
        CHECK_MSG(rc == -1 && strstr(err, bad[i].want) && !strchr(err, '\n'), "case %zu: rc %d, '%s', want '%s'",
                  i, rc, err, bad[i].want);
        printf("refused: %s\n", err);
    }
}

static void init(const hfl_model_spec *s, const hfl_model_spec *base) {
    float *p = hfl_malloc(sizeof(float) * s->n_params), *q = hfl_malloc(sizeof(float) * base->n_params);
    hfl_model_init_params(s, p, 7);
    hfl_model_init_params(base, q, 7);
    CHECK(memcmp(p, q, sizeof(float) * base->n_params) == 0);
    int C = 16, r = 4, in[4] = {C, C, C, 4 * C}, out[4] = {3 * C, C, 4 * C, C};
    for (int b = 0; b < 2; b++) {
        const float *a = p + s->layers[1 + b].lora_off;
        for (int j = 0; j < 4; j++) {
            double bound = 1.0 / sqrt(in[j]), amax = 0, bmax = 0;
            for (int i = 0; i < r * in[j]; i++) amax = fmax(amax, fabs(a[i]));
            a += r * in[j];
            for (int i = 0; i < out[j] * r; i++) bmax = fmax(bmax, fabs(a[i]));
            a += out[j] * r;
            CHECK_MSG(amax > 0.5 * bound && amax < bound && bmax == 0, "block %d projection %d: |A| %g of %g, |B| %g",
                      b, j, amax, bound, bmax);
        }
        CHECK(a == p + s->layers[1 + b].lora_off + 16 * r * C);
    }
    free(p), free(q);
}

/* x rounded to the 2-byte type (to nearest, ties to even) and widened back,
 * not by hfl's code: bf16 by the bit recipe; fp16 (finite, in range) as a
 * multiple of its quantum, 2^(e - 10) for |x| in [2^e, 2^(e+1)) and 2^-24
 * below 2^-14, rounded by rint (ties to even in the default mode). */
static float via_lp(hfl_precision prec, float x) {
    if (prec == HFL_PREC_FP16) {
        int e;
        frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
        double q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
        return (float)(rint(x / q) * q);
    }
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static void plan_and_train(const hfl_model_spec *s, hfl_precision prec) {
    char err[HFL_ERR_LEN];
    hfl_plan *plan = hfl_malloc(sizeof *plan), *full = hfl_malloc(sizeof *full);
    hfl_plan_config cfg = {.batch = 4, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .momentum = 1,
                           .adamw = 1, .precision = prec};
    REQUIRE_MSG(hfl_plan_make(s, &cfg, plan, err) == 0, "%s", err);
    int bufs[4] = {plan->grads, plan->momentum, plan->adam_m, plan->adam_v};
    for (int k = 0; k < 4; k++)
        CHECK(bufs[k] >= 0 && plan->buffers[bufs[k]].bytes == 4 * s->n_trainable);
    CHECK(plan->buffers[plan->params].count == s->n_params);
    /* 2-byte: masters for the adapters only; the frozen base is its working copy */
    CHECK(prec == HFL_PREC_FP32 ? plan->master < 0 : plan->buffers[plan->master].bytes == 4 * s->n_trainable);
    hfl_trainer *t = hfl_trainer_create_plan(s, hfl_backend_cpu(), plan, err);
    REQUIRE_MSG(t, "%s", err);
    float *w0 = hfl_malloc(sizeof(float) * s->n_params), *w = hfl_malloc(sizeof(float) * s->n_params);
    hfl_model_init_params(s, w0, 3);
    hfl_trainer_set_params(t, w0);
    float x[4 * 8];
    int32_t y[4 * 8];
    for (int i = 0; i < 32; i++) x[i] = (float)(hfl_philox_u32(9, 0, 0, 0, 0, (uint64_t)i) % 32),
                                 y[i] = (int32_t)(hfl_philox_u32(9, 0, 0, 0, 1, (uint64_t)i) % 32);
    float first = 0, last = 0;
    for (int k = 0; k < 20; k++) {
        float l = hfl_trainer_step(t, x, y, 4, 0.05f, 0.9f, 0.0f);
        if (k == 0) first = l;
        last = l;
    }
    hfl_trainer_get_params(t, w);
    float *tail = hfl_malloc(sizeof(float) * s->n_trainable); /* what a client sends the change of */
    hfl_trainer_get_trainable(t, tail);
    CHECK(memcmp(tail, w + s->train_off, sizeof(float) * s->n_trainable) == 0);
    free(tail);
    /* fp32: the frozen weights as set; 2-byte: as their working copy holds them */
    int frozen_same = 1, moved = 0;
    for (size_t i = 0; i < s->train_off; i++)
        frozen_same &= w[i] == (prec == HFL_PREC_FP32 ? w0[i] : via_lp(prec, w0[i]));
    for (size_t i = s->train_off; i < s->n_params; i++) moved += w[i] != w0[i];
    printf("test_lora: %s: 20 SGD steps on one batch: loss %.4f -> %.4f, %d of %zu adapter weights moved, "
           "frozen %s\n", hfl_precision_name(prec), first, last, moved, s->n_trainable,
           frozen_same ? "untouched" : "CHANGED");
    CHECK(frozen_same && moved > (int)s->n_trainable / 2 && last < first - 0.05f);
    hfl_trainer_free(t);
    free(plan), free(full), free(w0), free(w);
}

static void safetensors(const hfl_model_spec *s, const hfl_model_spec *base) {
    char err[HFL_ERR_LEN];
    float *p = hfl_malloc(sizeof(float) * s->n_params), *q = hfl_calloc(s->n_params, sizeof(float));
    for (size_t i = 0; i < s->n_params; i++) p[i] = (float)i;
    size_t len;
    uint8_t *b = hfl_safetensors_encode(s, p, &len, err);
    REQUIRE(b);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    cJSON *h = cJSON_ParseWithLength((const char *)b + 8, hl);
    REQUIRE(h);
    /* block 1's mlp.c_proj lora_B [16, 4]: the last 64 floats of the vector */
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(h, "transformer.h.1.mlp.c_proj.lora_B.weight");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape"), *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    CHECK(e && cJSON_GetArraySize(sh) == 2 && cJSON_GetArrayItem(sh, 0)->valueint == 16 &&
          cJSON_GetArrayItem(sh, 1)->valueint == 4 && cJSON_GetArrayItem(of, 0)->valuedouble == 4.0 * (9280 - 64) &&
          cJSON_GetArrayItem(of, 1)->valuedouble == 4.0 * 9280);
    e = cJSON_GetObjectItemCaseSensitive(h, "transformer.h.0.attn.c_attn.lora_A.weight");
    sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    CHECK(e && cJSON_GetArrayItem(sh, 0)->valueint == 4 && cJSON_GetArrayItem(sh, 1)->valueint == 16);
    CHECK(cJSON_GetArraySize(h) == 1 + 28 + 16);
    cJSON_Delete(h);
    CHECK(hfl_safetensors_decode(b, len, s, q, err) == 0 && memcmp(p, q, sizeof(float) * s->n_params) == 0);
    free(b);
    /* a base model's file: the adapters keep what the vector held */
    b = hfl_safetensors_encode(base, p, &len, err);
    REQUIRE(b);
    for (size_t i = 0; i < s->n_params; i++) q[i] = -1.0f;
    CHECK_MSG(hfl_safetensors_decode(b, len, s, q, err) == 0, "%s", err);
    int ok = memcmp(p, q, sizeof(float) * base->n_params) == 0;
    for (size_t i = s->train_off; i < s->n_params; i++) ok &= q[i] == -1.0f;
    CHECK_MSG(ok, "a base file into the LoRA spec");
    free(b), free(p), free(q);
}

/* Backward stops at the first layer that trains: with LoRA the frozen
 * embedding (layer 0) has no backward op and the first block computes no
 * input gradient (din -1); the base model backpropagates into both. Both
 * under `optimal` too, whose recomputation must not reach the embedding. */
static void backward_extent(const hfl_model_spec *s, const hfl_model_spec *base) {
    char err[HFL_ERR_LEN];
    hfl_plan *p = hfl_malloc(sizeof *p);
    for (int k = 0; k < 2; k++) {
        const hfl_model_spec *m = k ? base : s;
        for (int ck = 0; ck < 2; ck++) {
            hfl_plan_config cfg = {.batch = 2, .ckpt = ck ? HFL_CKPT_FULL : HFL_CKPT_NONE,
                                   .ckpt_budget = SIZE_MAX, .momentum = 1};
            REQUIRE_MSG(hfl_plan_make(m, &cfg, p, err) == 0, "%s", err);
            int emb = 0, din = -2;
            for (int i = 0; i < p->n_ops; i++) {
                if (p->ops[i].kind != HFL_OP_BACKWARD) continue;
                emb += p->ops[i].layer == 0;
                if (p->ops[i].layer == 1) din = p->ops[i].din;
            }
            CHECK_MSG(k ? emb == 1 && din >= 0 : emb == 0 && din == -1, "%s %s: embedding backward ops %d, "
                      "first block's din %d", k ? "base" : "lora", ck ? "full" : "none", emb, din);
        }
    }
    free(p);
}

static hfl_model_spec spec, base; /* the LoRA spec and its base, read in main for every case */

/* layout's checks on specs of its own (main read the shared ones). */
static void case_layout(void) {
    hfl_model_spec s, b;
    layout(&s, &b);
}
static void case_init(void) { init(&spec, &base); }
static void case_train_fp32(void) { plan_and_train(&spec, HFL_PREC_FP32); }
static void case_train_bf16(void) { plan_and_train(&spec, HFL_PREC_BF16); }
static void case_train_fp16(void) { plan_and_train(&spec, HFL_PREC_FP16); }
static void case_safetensors(void) { safetensors(&spec, &base); }
static void case_backward_extent(void) { backward_extent(&spec, &base); }

static const check_case cases[] = {
    {"layout", case_layout},
    {"refusals", refusals},
    {"init", case_init},
    {"train_fp32", case_train_fp32},
    {"train_bf16", case_train_bf16},
    {"train_fp16", case_train_fp16},
    {"safetensors", case_safetensors},
    {"backward_extent", case_backward_extent},
};

int main(int argc, char **argv) {
    char err[HFL_ERR_LEN];
    static const char js[] = BASE ", \"lora\": {\"rank\": 4, \"alpha\": 8}}";
    REQUIRE(hfl_model_spec_from_json(BASE "}", strlen(BASE "}"), &base, err) == 0);
    REQUIRE_MSG(hfl_model_spec_from_json(js, strlen(js), &spec, err) == 0, "%s", err);
    return check_run("test_lora", cases, CHECK_CASES(cases), argc, argv);
}
