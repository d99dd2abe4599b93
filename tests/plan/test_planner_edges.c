/* test_planner_edges.c: the planner (plan/planner.c) and its placement
 * (plan/planner_place.c) on plans small enough to work out by hand, written
 * against mutants that survived scripts/mutate (docs/testing.md). Every
 * expected figure below is derived from planner.h's execution model, not read
 * back from the planner:
 *
 * 1. "d": input 4 -> dense 3 -> relu -> dense 2, batch 2, fp32, `none`. The
 *    ReLU joins the first dense's stage (2 stages). Buffers in creation
 *    order params(23 floats) grads(23) a0(8) labels(2 int32) a1(6) a2(4)
 *    g2(4) g1(6); ops LOAD, FORWARD l0 l1 l2, LOSS, BACKWARD l2 l1 l0,
 *    OPTIMIZER with every operand, every lifetime, the live bytes at each op
 *    (224 248 248 264 280 280 264 240 184), the peak (280 at the loss), its
 *    breakdown, chain_peak 96 and the placement: params, grads and a0 overlap
 *    every buffer and go at the bottom in table order (0, 128, 256), the rest
 *    needs four 64-byte slots at the loss: arena 576.
 * 2. "d" under `sqrt` (one segment, a1 internal): a1 lives over the forward
 *    only, the recompute writes a1.re from a0 and backward reads a1.re.
 * 3. "d" with prefetch, device scalars and a BLAS workspace: the second input
 *    slot, the scalars and ws.blas live over the whole step, a0 and labels
 *    too; chain_peak stays 96; the live peak moves to the first backward op.
 * 4. "d" in bf16: 2-byte weights and activations, fp32 master weights, and
 *    the loss's two-row fp32 workspace.
 * 5. pool, pool, dense under `sqrt`: the segment below the first parametric
 *    layer is neither recomputed nor run backward (7 ops).
 * 6. Refusals: NULL arguments, conv chunk outside [0, 4096], unknown
 *    precision and checkpoint kind, activation sizes; the overflow guard
 *    bounded by the widest layer output (not only the input).
 * 7. The conv chunk recorded in the plan's conv layers only, the backend's
 *    settings (hfl_plan_config_for_backend) and the names.
 * 8. hfl_plan_place on hand-made tables: buffers overlapping every other
 *    stacked at the bottom in table order; first fit versus the best arena;
 *    and the optimum (found by trying every order with first fit, which
 *    reaches it: placing an optimal layout's buffers by offset never puts one
 *    higher) on small tables built so that the largest-first greedy alone
 *    leaves a gap, and 300 random tables; three tables packed into their
 *    lower bound (the most aligned bytes alive at one op) only with the
 *    order by first op, the search's strict improvement and best fit among
 *    the greedy starts; a table of the most buffers a plan holds places
 *    within the search's work budget (milliseconds, where an unbounded
 *    search takes seconds).
 * 9. A 2-block GPT under sqrt: saved activations per forward op with the
 *    lifetimes worked out by hand (a dropped block's forward copy one op,
 *    its recompute copy until its backward), per-position labels, and
 *    2-byte token ids refused past their exact range.
 * 10. Allocation granularity: "d"'s 576-byte arena rounded up to a granule
 *    of 256 (768), of 1000 (1000: any granule, not only powers of two),
 *    kept by a granule it already is a multiple of (64) and by 0 and 1; the
 *    backend's granularity reaches the config; a granule whose rounding would
 *    overflow size_t is refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "model/gpt.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

static void spec_d(hfl_model_spec *s) {
    static const int dims[3] = {4, 3, 2};
    char err[HFL_ERR_LEN];
    REQUIRE(hfl_model_spec_mlp(s, "d", dims, 3, err) == 0);
}

static void spec_json(const char *json, hfl_model_spec *s) {
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(hfl_model_spec_from_json(json, strlen(json), s, err) == 0, "%s", err);
}

static int find_buffer(const hfl_plan *p, const char *name) {
    for (int i = 0; i < p->n_buffers; i++)
        if (!strcmp(p->buffers[i].name, name)) return i;
    return -1;
}

/* Buffer `i` is `name`, count x elem bytes, of category cat, alive [first, last]. */
static void check_buffer(const hfl_plan *p, int i, const char *name, hfl_buf_category cat, size_t count,
                         size_t elem, int first, int last) {
    if (!CHECK_MSG(i >= 0 && i < p->n_buffers, "buffer %s missing", name)) return;
    const hfl_plan_buffer *b = &p->buffers[i];
    CHECK_MSG(!strcmp(b->name, name), "buffer %d is %s, expected %s", i, b->name, name);
    CHECK_MSG(b->category == cat && b->count == count && b->elem_bytes == elem && b->bytes == count * elem,
              "%s: category %d count %zu elem %zu bytes %zu", name, (int)b->category, b->count,
              b->elem_bytes, b->bytes);
    CHECK_MSG(b->first_op == first && b->last_op == last, "%s lives [%d, %d], expected [%d, %d]", name,
              b->first_op, b->last_op, first, last);
}

static void check_op(const hfl_plan *p, int o, hfl_plan_op_kind kind, int layer, int recompute, int in,
                     int out, int dout, int din, int ws, int labels) {
    if (!CHECK(o < p->n_ops)) return;
    const hfl_plan_op *x = &p->ops[o];
    CHECK_MSG(x->kind == kind && x->layer == layer && x->recompute == recompute && x->in == in &&
                  x->out == out && x->dout == dout && x->din == din && x->ws == ws && x->labels == labels,
              "op %d: kind %d layer %d re %d in %d out %d dout %d din %d ws %d labels %d", o, (int)x->kind,
              x->layer, x->recompute, x->in, x->out, x->dout, x->din, x->ws, x->labels);
}

static hfl_plan_config cfg_of(int batch, hfl_ckpt_kind kind) {
    return (hfl_plan_config){.batch = batch, .ckpt = kind, .ckpt_budget = SIZE_MAX};
}

static void test_d_none(void) {
    hfl_model_spec s;
    spec_d(&s);
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = cfg_of(2, HFL_CKPT_NONE);
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
    CHECK(p->n_stages == 2 && p->stage_first[0] == 0 && p->stage_first[1] == 2 && p->stage_first[2] == 3);
    CHECK(p->cfg.act_elem_bytes == 4);
    CHECK(p->n_buffers == 8 && p->n_ops == 9 && p->loss_op == 4 && p->optimizer_op == 8);
    CHECK(p->params == 0 && p->grads == 1 && p->input == 2 && p->labels == 3);
    CHECK(p->momentum == -1 && p->master == -1 && p->input_next == -1 && p->labels_next == -1 &&
          p->scalars == -1 && p->blas_ws == -1);
    check_buffer(p, 0, "params", HFL_BUF_WEIGHTS, 23, 4, 0, 8);
    check_buffer(p, 1, "grads", HFL_BUF_GRADS, 23, 4, 0, 8);
    check_buffer(p, 2, "a0", HFL_BUF_INPUT, 8, 4, 0, 7);
    check_buffer(p, 3, "labels", HFL_BUF_INPUT, 2, 4, 0, 4);
    check_buffer(p, 4, "a1", HFL_BUF_ACTIVATIONS, 6, 4, 1, 6);
    check_buffer(p, 5, "a2", HFL_BUF_ACTIVATIONS, 4, 4, 3, 4);
    check_buffer(p, 6, "g2", HFL_BUF_ACTIVATIONS, 4, 4, 4, 5);
    check_buffer(p, 7, "g1", HFL_BUF_ACTIVATIONS, 6, 4, 5, 7);
    static const int layer_of[8] = {-1, -1, -1, -1, 1, 2, -1, 1}; /* the spec layer that writes it */
    for (int i = 0; i < 8; i++)
        CHECK_MSG(p->buffers[i].layer == layer_of[i], "%s: layer %d", p->buffers[i].name, p->buffers[i].layer);
    /*                kind              layer re  in out dout din ws lab */
    check_op(p, 0, HFL_OP_LOAD, -1, 0, -1, 2, -1, -1, -1, 3);
    check_op(p, 1, HFL_OP_FORWARD, 0, 0, 2, 4, -1, -1, -1, -1);
    check_op(p, 2, HFL_OP_FORWARD, 1, 0, 4, 4, -1, -1, -1, -1);
    check_op(p, 3, HFL_OP_FORWARD, 2, 0, 4, 5, -1, -1, -1, -1);
    check_op(p, 4, HFL_OP_LOSS, -1, 0, 5, 6, -1, -1, -1, 3);
    check_op(p, 5, HFL_OP_BACKWARD, 2, 0, 4, -1, 6, 7, -1, -1);
    check_op(p, 6, HFL_OP_BACKWARD, 1, 0, -1, 4, 7, 7, -1, -1);
    check_op(p, 7, HFL_OP_BACKWARD, 0, 0, 2, -1, 7, -1, -1, -1);
    check_op(p, 8, HFL_OP_OPTIMIZER, -1, 0, -1, -1, -1, -1, -1, -1);
    static const size_t live[9] = {224, 248, 248, 264, 280, 280, 264, 240, 184};
    for (int o = 0; o < 9; o++)
        CHECK_MSG(hfl_plan_live_bytes(p, o) == live[o], "live at op %d: %zu, expected %zu", o,
                  hfl_plan_live_bytes(p, o), live[o]);
    CHECK(p->live_peak == 280 && p->peak_op == 4);
    CHECK(p->breakdown[HFL_BUF_WEIGHTS] == 92 && p->breakdown[HFL_BUF_GRADS] == 92 &&
          p->breakdown[HFL_BUF_ACTIVATIONS] == 56 && p->breakdown[HFL_BUF_INPUT] == 40 &&
          p->breakdown[HFL_BUF_MASTER] == 0 && p->breakdown[HFL_BUF_OPTIMIZER] == 0 &&
          p->breakdown[HFL_BUF_WORKSPACE] == 0);
    CHECK(p->chain_peak == 96 && p->ckpt.peak == 96);
    CHECK(p->buffers[0].offset == 0 && p->buffers[1].offset == 128 && p->buffers[2].offset == 256);
    for (int i = 3; i < 8; i++) CHECK(p->buffers[i].offset >= 320 && p->buffers[i].offset % 64 == 0);
    CHECK_MSG(p->arena_bytes == 576, "arena %zu", p->arena_bytes);

    /* momentum: one more whole-step buffer after grads, at the bottom too */
    cfg.momentum = 1;
    REQUIRE(hfl_plan_make(&s, &cfg, p, err) == 0);
    CHECK(p->momentum == 2 && p->input == 3);
    check_buffer(p, 2, "momentum", HFL_BUF_OPTIMIZER, 23, 4, 0, 8);
    CHECK(p->buffers[2].layer == -1 && p->buffers[3].layer == -1);
    CHECK(p->live_peak == 280 + 92 && p->arena_bytes == 576 + 128 && p->buffers[2].offset == 256);
    free(p);
}

static void test_d_sqrt(void) {
    hfl_model_spec s;
    spec_d(&s);
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = cfg_of(2, HFL_CKPT_SQRT);
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
    CHECK(p->ckpt.n_segments == 1 && !p->ckpt.stored[1]);
    CHECK(p->n_buffers == 9 && p->n_ops == 11);
    check_buffer(p, 4, "a1", HFL_BUF_ACTIVATIONS, 6, 4, 1, 3);
    check_buffer(p, 7, "a1.re", HFL_BUF_ACTIVATIONS, 6, 4, 5, 8);
    check_buffer(p, 8, "g1", HFL_BUF_ACTIVATIONS, 6, 4, 7, 9);
    check_buffer(p, 2, "a0", HFL_BUF_INPUT, 8, 4, 0, 9);
    check_op(p, 5, HFL_OP_FORWARD, 0, 1, 2, 7, -1, -1, -1, -1);
    check_op(p, 6, HFL_OP_FORWARD, 1, 1, 7, 7, -1, -1, -1, -1);
    check_op(p, 7, HFL_OP_BACKWARD, 2, 0, 7, -1, 6, 8, -1, -1);
    check_op(p, 8, HFL_OP_BACKWARD, 1, 0, -1, 7, 8, 8, -1, -1);
    check_op(p, 9, HFL_OP_BACKWARD, 0, 0, 2, -1, 8, -1, -1, -1);
    check_op(p, 10, HFL_OP_OPTIMIZER, -1, 0, -1, -1, -1, -1, -1, -1);
    /* chain: at the recompute of layer 0 a0 + g2 + a1.re = 32 + 16 + 24; at
     * the first backward a0 + a1.re + g2 + g1 = 96, as under `none` */
    CHECK(p->chain_peak == 96);
    free(p);
}

static void test_d_device(void) {
    hfl_model_spec s;
    spec_d(&s);
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = cfg_of(2, HFL_CKPT_NONE);
    cfg.prefetch = 1;
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
    CHECK(p->input_next == 4 && p->labels_next == 5 && p->scalars == -1 && p->blas_ws == -1);
    check_buffer(p, 2, "a0", HFL_BUF_INPUT, 8, 4, 0, 8);
    check_buffer(p, 3, "labels", HFL_BUF_INPUT, 2, 4, 0, 8);
    check_buffer(p, 4, "a0.next", HFL_BUF_INPUT, 8, 4, 0, 8);
    check_buffer(p, 5, "labels.next", HFL_BUF_INPUT, 2, 4, 0, 8);
    /* 184 + 80 of input at every op; activations 56 at the loss, 64 at op 5 */
    CHECK(p->live_peak == 328 && p->peak_op == 5 && p->chain_peak == 96);
    CHECK(p->breakdown[HFL_BUF_INPUT] == 80 && p->breakdown[HFL_BUF_ACTIVATIONS] == 64);

    cfg.prefetch = 0;
    cfg.device_scalars = 1;
    cfg.blas_ws_bytes = 1000;
    REQUIRE_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
    CHECK(p->input_next == -1 && p->scalars == 4 && p->blas_ws == 5);
    check_buffer(p, 4, "scalars", HFL_BUF_WORKSPACE, 1, sizeof(hfl_step_scalars), 0, 8);
    check_buffer(p, 5, "ws.blas", HFL_BUF_WORKSPACE, 1000, 1, 0, 8);
    check_buffer(p, 3, "labels", HFL_BUF_INPUT, 2, 4, 0, 4);
    CHECK(p->live_peak == 280 + 64 + 1000 && p->peak_op == 4 && p->breakdown[HFL_BUF_WORKSPACE] == 1064);
    free(p);
}

static void test_d_bf16(void) {
    hfl_model_spec s;
    spec_d(&s);
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = cfg_of(2, HFL_CKPT_NONE);
    cfg.precision = HFL_PREC_BF16;
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
    CHECK(p->cfg.act_elem_bytes == 2 && p->master == 1 && p->grads == 2 && p->input == 3);
    check_buffer(p, 0, "params", HFL_BUF_WEIGHTS, 23, 2, 0, p->n_ops - 1);
    check_buffer(p, 1, "master", HFL_BUF_MASTER, 23, 4, 0, p->n_ops - 1);
    check_buffer(p, 3, "a0", HFL_BUF_INPUT, 8, 2, 0, 7);
    int ws = find_buffer(p, "ws.loss");
    check_buffer(p, ws, "ws.loss", HFL_BUF_WORKSPACE, 4, 4, 4, 4);
    CHECK(ws >= 0 && p->ops[4].kind == HFL_OP_LOSS && p->ops[4].ws == ws);
    free(p);
}

static void test_below_first_param(void) {
    hfl_model_spec s;
    spec_json("{\"name\": \"pp\", \"input\": [1, 8, 8], \"layers\": [{\"type\": \"maxpool2d\", \"size\": 2},"
              "{\"type\": \"maxpool2d\", \"size\": 2}, {\"type\": \"dense\", \"out\": 2}]}", &s);
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = cfg_of(1, HFL_CKPT_SQRT);
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
    /* 3 stages, sqrt: round(sqrt 3) = 2 segments, stored 0, 2, 3 */
    CHECK(p->n_stages == 3 && p->ckpt.n_segments == 2 && p->ckpt.stored[2] && !p->ckpt.stored[1]);
    /* LOAD, three forwards, LOSS, the dense's backward (it computes no input
     * gradient), OPTIMIZER */
    CHECK_MSG(p->n_ops == 7, "%d ops", p->n_ops);
    for (int o = 0; o < p->n_ops; o++) CHECK(!p->ops[o].recompute);
    check_op(p, 5, HFL_OP_BACKWARD, 2, 0, find_buffer(p, "a2"), -1, find_buffer(p, "g3"), -1, -1, -1);
    CHECK(find_buffer(p, "g2") < 0 && find_buffer(p, "a1.re") < 0);
    free(p);
}

static void test_refusals(void) {
    hfl_model_spec s;
    spec_d(&s);
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = cfg_of(2, HFL_CKPT_NONE);
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_plan_make(NULL, &cfg, p, err) == -1 && strstr(err, "NULL argument"));
    CHECK(hfl_plan_make(&s, NULL, p, err) == -1 && strstr(err, "NULL argument"));
    CHECK(hfl_plan_make(&s, &cfg, NULL, err) == -1 && strstr(err, "NULL argument"));
    cfg.conv_chunk = -1;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 && strstr(err, "conv chunk -1"));
    cfg.conv_chunk = 4097;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 && strstr(err, "conv chunk 4097"));
    cfg.conv_chunk = 4096;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == 0);
    cfg.conv_chunk = 0;
    cfg.precision = (hfl_precision)(HFL_PREC_FP16 + 1);
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 && strstr(err, "unknown precision"));
    cfg.precision = HFL_PREC_FP16;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == 0 && p->cfg.act_elem_bytes == 2);
    cfg.act_elem_bytes = 4;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 && strstr(err, "2 bytes an element, not 4"));
    cfg.precision = HFL_PREC_FP32;
    cfg.act_elem_bytes = 2; /* the what-if: fp32 weights, 2-byte activations */
    CHECK(hfl_plan_make(&s, &cfg, p, err) == 0 && p->cfg.act_elem_bytes == 2 && p->buffers[p->input].elem_bytes == 2 &&
          p->buffers[p->params].elem_bytes == 4);
    cfg.act_elem_bytes = 8;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 && strstr(err, "element size 8"));
    cfg.act_elem_bytes = 0;
    cfg.ckpt = (hfl_ckpt_kind)(HFL_CKPT_FULL + 1);
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 && strstr(err, "unknown checkpoint kind"));
    cfg.ckpt = HFL_CKPT_FULL;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == 0);

    /* The guard: batch x the widest tensor x 8 bytes must stay under
     * room = SIZE_MAX / HFL_PLAN_MAX_BUFFERS - 2^40. A 1x1 conv to 32
     * channels, after one to a single channel, makes the widest tensor the
     * second layer's output (2^23 features), 32 times the input's and the
     * first layer's. */
    spec_json("{\"name\": \"wide\", \"input\": [1, 512, 512], \"layers\": ["
              "{\"type\": \"conv2d\", \"out\": 1, \"kernel\": 1}, {\"type\": \"conv2d\", \"out\": 32, \"kernel\": 1},"
              "{\"type\": \"dense\", \"out\": 2}]}", &s);
    size_t room = SIZE_MAX / HFL_PLAN_MAX_BUFFERS - ((size_t)1 << 40), widest = (size_t)1 << 23;
    size_t most = room / 8 / widest; /* the largest batch accounted */
    CHECK(most < INT32_MAX && most > (size_t)1 << 29);
    cfg = cfg_of((int)most + 1, HFL_CKPT_NONE);
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 && strstr(err, "too large to account"));
    cfg.batch = (int)most;
    CHECK_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
    free(p);
}

static void test_chunk_and_backend(void) {
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    REQUIRE(hfl_model_builtin("cnn", &s, err) == 0);
    hfl_plan *p = hfl_malloc(sizeof *p);
    hfl_plan_config cfg = cfg_of(4, HFL_CKPT_NONE);
    cfg.conv_chunk = 3;
    REQUIRE(hfl_plan_make(&s, &cfg, p, err) == 0);
    for (int l = 0; l < s.n_layers; l++)
        CHECK(p->spec.layers[l].chunk == (s.layers[l].kind == HFL_LAYER_CONV2D ? 3 : 0));
    cfg.conv_chunk = 1;
    REQUIRE(hfl_plan_make(&s, &cfg, p, err) == 0);
    for (int l = 0; l < s.n_layers; l++) CHECK(p->spec.layers[l].chunk == 0);
    free(p);

    hfl_backend be = *hfl_backend_cpu();
    /* a config's own conv chunk (a chooser candidate's) stays; 0 takes the backend's */
    hfl_plan_config c = {.batch = 1, .prefetch = 7, .device_scalars = 7, .blas_ws_bytes = 9, .conv_chunk = 9};
    be.host_memory = 0, be.blas_ws_bytes = 4096, be.conv_chunk = 16;
    hfl_plan_config_for_backend(&c, &be);
    CHECK(c.prefetch == 1 && c.device_scalars == 1 && c.blas_ws_bytes == 4096 && c.conv_chunk == 9 && c.batch == 1);
    c.conv_chunk = 0;
    hfl_plan_config_for_backend(&c, &be);
    CHECK(c.conv_chunk == 16);
    be.host_memory = 1, be.blas_ws_bytes = 0, be.conv_chunk = 0;
    c.conv_chunk = 0;
    hfl_plan_config_for_backend(&c, &be);
    CHECK(c.prefetch == 0 && c.device_scalars == 0 && c.blas_ws_bytes == 0 && c.conv_chunk == 0);

    static const char *cats[] = {"weights", "master_weights", "gradients", "optimizer", "activations",
                                 "workspace", "input"};
    for (int k = 0; k < HFL_BUF_N_CATEGORIES; k++) CHECK(!strcmp(hfl_plan_category_name((hfl_buf_category)k), cats[k]));
    CHECK(!strcmp(hfl_plan_category_name(HFL_BUF_N_CATEGORIES), "?"));
    static const char *ops[] = {"load", "forward", "loss", "backward", "optimizer"};
    for (int k = 0; k <= HFL_OP_OPTIMIZER; k++) CHECK(!strcmp(hfl_plan_op_name((hfl_plan_op_kind)k), ops[k]));
    CHECK(!strcmp(hfl_plan_op_name((hfl_plan_op_kind)(HFL_OP_OPTIMIZER + 1)), "?"));
}

static void test_granularity(void) {
    hfl_model_spec s;
    spec_d(&s);
    hfl_plan *p = hfl_malloc(sizeof *p);
    char err[HFL_ERR_LEN] = "";
    static const size_t granule[] = {0, 1, 64, 256, 1000}, want[] = {576, 576, 576, 768, 1000};
    for (size_t k = 0; k < sizeof granule / sizeof *granule; k++) {
        hfl_plan_config cfg = cfg_of(2, HFL_CKPT_NONE);
        cfg.alloc_granularity = granule[k];
        REQUIRE_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
        CHECK_MSG(p->arena_bytes == want[k], "granule %zu: arena %zu, want %zu", granule[k], p->arena_bytes,
                  want[k]);
        CHECK(p->live_peak == 280); /* the buffers themselves do not move */
    }
    hfl_plan_config cfg = cfg_of(2, HFL_CKPT_NONE);
    cfg.alloc_granularity = SIZE_MAX - 100;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 && strstr(err, "too large to round"));
    hfl_backend be = *hfl_backend_cpu();
    CHECK(be.alloc_granularity <= 1);
    be.alloc_granularity = (size_t)2 << 20;
    hfl_plan_config_for_backend(&cfg, &be);
    CHECK(cfg.alloc_granularity == (size_t)2 << 20);
    free(p);
}

/* ---- hfl_plan_place on hand-made tables ---- */

typedef struct {
    size_t bytes;
    int first, last;
} buf_spec;

static void table(hfl_plan *p, const buf_spec *b, int n, int n_ops) {
    memset(p, 0, sizeof *p);
    p->n_buffers = n;
    p->n_ops = n_ops;
    for (int i = 0; i < n; i++) {
        snprintf(p->buffers[i].name, sizeof p->buffers[i].name, "b%d", i);
        p->buffers[i].count = b[i].bytes;
        p->buffers[i].elem_bytes = 1;
        p->buffers[i].bytes = b[i].bytes;
        p->buffers[i].first_op = b[i].first;
        p->buffers[i].last_op = b[i].last;
        p->buffers[i].offset = 12345; /* must be overwritten */
    }
}

static int alive_together(const hfl_plan_buffer *a, const hfl_plan_buffer *b) {
    return a->first_op <= b->last_op && b->first_op <= a->last_op;
}

/* Valid: aligned, inside the arena, no two buffers alive together sharing a byte. */
static void check_valid(const hfl_plan *p) {
    for (int i = 0; i < p->n_buffers; i++) {
        const hfl_plan_buffer *a = &p->buffers[i];
        CHECK_MSG(a->offset % 64 == 0 && a->offset + a->bytes <= p->arena_bytes, "%s at %zu of %zu", a->name,
                  a->offset, p->arena_bytes);
        for (int j = i + 1; j < p->n_buffers; j++) {
            const hfl_plan_buffer *b = &p->buffers[j];
            CHECK_MSG(!(alive_together(a, b) && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes),
                      "%s and %s overlap", a->name, b->name);
        }
    }
}

static size_t up64(size_t x) { return (x + 63) / 64 * 64; }

/* The least arena: every order of the buffers placed by first fit (lowest
 * aligned offset clear of every placed buffer alive together). */
static size_t best_end;
static void search(const buf_spec *b, int n, int *order, int k, size_t *off, int *used) {
    if (k == n) {
        size_t end = 0;
        for (int i = 0; i < n; i++)
            if (off[i] + up64(b[i].bytes) > end) end = off[i] + up64(b[i].bytes);
        if (end < best_end) best_end = end;
        return;
    }
    for (int x = 0; x < n; x++) {
        if (used[x]) continue;
        /* lowest offset among 0 and the ends of placed neighbours that fits */
        size_t cand[16], nc = 0, at = SIZE_MAX;
        cand[nc++] = 0;
        for (int j = 0; j < k; j++) cand[nc++] = off[order[j]] + up64(b[order[j]].bytes);
        for (size_t c = 0; c < nc; c++) {
            int ok = 1;
            for (int j = 0; j < k && ok; j++) {
                int y = order[j];
                int overlap_t = b[x].first <= b[y].last && b[y].first <= b[x].last;
                ok = !(overlap_t && cand[c] < off[y] + up64(b[y].bytes) && off[y] < cand[c] + up64(b[x].bytes));
            }
            if (ok && cand[c] < at) at = cand[c];
        }
        off[x] = at;
        used[x] = 1;
        order[k] = x;
        search(b, n, order, k + 1, off, used);
        used[x] = 0;
    }
}

static size_t optimum(const buf_spec *b, int n) {
    int order[16], used[16] = {0};
    size_t off[16];
    best_end = SIZE_MAX;
    search(b, n, order, 0, off, used);
    return best_end;
}

/* The most aligned bytes alive at one op: a lower bound on any arena. */
static size_t live_bound(const buf_spec *b, int n, int n_ops) {
    size_t most = 0;
    for (int o = 0; o < n_ops; o++) {
        size_t live = 0;
        for (int i = 0; i < n; i++)
            if (b[i].first <= o && o <= b[i].last) live += up64(b[i].bytes);
        if (live > most) most = live;
    }
    return most;
}

static void test_place(void) {
    hfl_plan *p = hfl_malloc(sizeof *p);
    /* b0 and b2 overlap every buffer: at the bottom in table order; b1 [0,1]
     * and b3 [2,3] share a slot above them. */
    static const buf_spec base[] = {{100, 0, 3}, {64, 0, 1}, {10, 0, 3}, {64, 2, 3}};
    table(p, base, 4, 4);
    hfl_plan_place(p);
    check_valid(p);
    CHECK(p->buffers[0].offset == 0 && p->buffers[2].offset == 128);
    CHECK(p->buffers[1].offset == 192 && p->buffers[3].offset == 192);
    CHECK_MSG(p->arena_bytes == 256, "arena %zu", p->arena_bytes);

    /* Tables where placing by decreasing size with first fit leaves a gap
     * (1792 against 1472 for the first), and tables (random finds) on each
     * of which one part of the placer is needed for the optimum: the
     * whole-step order, the size tie-break, the last moves of the local
     * search, the base's overlap test with the first buffer, the order by
     * size. The other orders and the local search must find the optimum. */
    static const struct {
        int n, n_ops;
        buf_spec b[8];
    } hard[] = {
        {7, 10, {{448, 3, 3}, {320, 2, 4}, {256, 2, 8}, {448, 6, 7}, {384, 5, 7}, {448, 3, 5}, {256, 4, 6}}},
        {7, 10, {{384, 1, 3}, {128, 3, 5}, {448, 0, 1}, {256, 2, 6}, {256, 4, 4}, {128, 3, 6}, {64, 8, 8}}},
        {7, 10, {{320, 1, 5}, {192, 6, 7}, {320, 1, 5}, {512, 1, 1}, {512, 0, 3}, {192, 2, 7}, {320, 2, 7}}},
        {7, 10, {{448, 4, 5}, {256, 5, 7}, {448, 6, 6}, {64, 0, 4}, {512, 1, 4}, {256, 1, 6}, {64, 7, 7}}},
        {7, 10, {{320, 3, 6}, {512, 0, 2}, {448, 2, 3}, {256, 6, 6}, {384, 0, 1}, {384, 4, 7}, {384, 2, 3}}},
        {7, 10, {{512, 7, 9}, {256, 3, 8}, {448, 2, 5}, {448, 0, 2}, {256, 3, 9}, {448, 1, 4}, {448, 4, 9}}},
        {7, 8, {{128, 4, 6}, {64, 0, 5}, {64, 4, 6}, {384, 4, 5}, {512, 6, 7}, {512, 0, 1}, {192, 4, 6}}},
        {8, 9, {{384, 1, 2}, {384, 0, 4}, {448, 0, 7}, {64, 2, 8}, {448, 0, 1}, {448, 5, 5}, {128, 2, 5}, {512, 3, 8}}},
        {5, 11, {{192, 2, 8}, {448, 0, 2}, {384, 4, 10}, {256, 0, 0}, {192, 3, 5}}},
        {8, 12, {{64, 1, 9}, {64, 2, 8}, {320, 0, 0}, {256, 1, 1}, {384, 3, 3}, {256, 9, 10}, {256, 0, 2}, {192, 0, 4}}},
        {5, 11, {{320, 2, 6}, {384, 6, 9}, {64, 1, 10}, {128, 7, 9}, {384, 1, 9}}},
        {8, 11, {{384, 7, 10}, {128, 5, 6}, {256, 1, 6}, {192, 0, 1}, {128, 3, 6}, {192, 8, 8}, {256, 0, 8}, {128, 1, 7}}},
    };
    for (size_t t = 0; t < sizeof hard / sizeof hard[0]; t++) {
        table(p, hard[t].b, hard[t].n, hard[t].n_ops);
        hfl_plan_place(p);
        check_valid(p);
        size_t opt = optimum(hard[t].b, hard[t].n);
        CHECK_MSG(p->arena_bytes == opt, "hard table %zu: arena %zu, the optimum is %zu", t, p->arena_bytes, opt);
    }
    /* Tables (random finds) that the placer packs into their lower bound,
     * the most aligned bytes alive at one op (live_bound: no arena is
     * smaller, so this is the optimum), each only through one more part of
     * it: the order by first op (placed latest-first, every order and fit
     * with the search end 128 bytes over), the search's strict improvement
     * (a search that also keeps moves to an equal arena ends 64 over), and
     * best fit among the greedy starts (with first fit alone, 64 over). */
    static const struct {
        int n, n_ops;
        size_t bound;
        buf_spec b[9];
    } tight[] = {
        {6, 6, 512, {{320, 1, 1}, {192, 0, 2}, {256, 4, 5}, {128, 2, 3}, {192, 2, 4}, {128, 3, 3}}},
        {7, 9, 1344, {{320, 1, 7}, {448, 1, 4}, {256, 4, 5}, {384, 0, 2}, {320, 5, 7}, {320, 6, 6}, {320, 4, 7}}},
        {9, 7, 896,
         {{128, 3, 4}, {320, 6, 6}, {256, 2, 4}, {512, 0, 0}, {192, 1, 2}, {384, 2, 3}, {192, 4, 5}, {128, 3, 6},
          {448, 5, 6}}},
    };
    for (size_t t = 0; t < sizeof tight / sizeof tight[0]; t++) {
        table(p, tight[t].b, tight[t].n, tight[t].n_ops);
        hfl_plan_place(p);
        check_valid(p);
        size_t bound = live_bound(tight[t].b, tight[t].n, tight[t].n_ops);
        CHECK_MSG(bound == tight[t].bound && p->arena_bytes == bound, "tight table %zu: arena %zu, bound %zu", t,
                  p->arena_bytes, bound);
    }

    /* 300 random tables of 5 to 7 buffers over 6 to 10 ops (xorshift, fixed
     * seed): every placement valid and, as on every such table tried when
     * this test was written, optimal. A miss is a loss of placement quality
     * (a hand-made 7-buffer table exists where the placer is 64 bytes over). */
    uint64_t st = 88172645463325252ull;
    int misses = 0;
    for (int t = 0; t < 300; t++) {
        buf_spec b[7];
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        int n = 5 + (int)(st % 3), n_ops = 6 + (int)(st / 3 % 5);
        for (int i = 0; i < n; i++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            int a = (int)(st % (uint64_t)n_ops), c = (int)(st / 16 % (uint64_t)n_ops);
            b[i] = (buf_spec){(size_t)(1 + st / 256 % 512), a < c ? a : c, a < c ? c : a};
        }
        table(p, b, n, n_ops);
        hfl_plan_place(p);
        check_valid(p);
        size_t opt = optimum(b, n);
        CHECK(p->arena_bytes >= opt);
        misses += p->arena_bytes != opt;
    }
    CHECK_MSG(misses == 0, "%d of 300 random tables placed above their optimum", misses);

    /* The search's work budget: the most buffers a plan holds, crowded into
     * 91 ops, place in milliseconds (an unbounded local search takes
     * seconds on this table). */
    buf_spec big[HFL_PLAN_MAX_BUFFERS];
    for (int i = 0; i < HFL_PLAN_MAX_BUFFERS; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        int a = (int)(st % 50), len = 1 + (int)(st / 400 % 40);
        big[i] = (buf_spec){(size_t)(64 + st / 65536 % 100000), a, a + len};
    }
    table(p, big, HFL_PLAN_MAX_BUFFERS, 91);
    double t0 = hfl_now();
    hfl_plan_place(p);
    double dt = hfl_now() - t0;
    check_valid(p);
    CHECK_MSG(dt < 1.0, "placing %d buffers took %.2f s", HFL_PLAN_MAX_BUFFERS, dt);
    free(p);
}

/* A 2-block GPT under sqrt (4 stages, a_1 and a_3 dropped): each block's
 * saved activations are one buffer per forward op, read by its backward;
 * the dropped block's forward copy lives one op and its recompute copy
 * until the backward; per-position labels; 2-byte token ids refused past
 * their exact range. Op order: load 0, forward 1-4, loss 5, recompute of
 * layer 2 at 6, backward of 3 and 2 at 7-8, recompute of layer 0 at 9,
 * backward of 1 and 0 at 10-11, optimizer 12. */
static void test_lm_plan(void) {
    hfl_model_spec s;
    spec_json("{\"name\": \"g\", \"input\": [8], \"layers\": [{\"type\": \"embedding\", "
              "\"vocab\": 300, \"width\": 16}, {\"type\": \"gpt_block\", \"heads\": 2}, "
              "{\"type\": \"gpt_block\", \"heads\": 2}, {\"type\": \"lm_head\"}]}", &s);
    hfl_plan *p = calloc(1, sizeof *p);
    char err[HFL_ERR_LEN];
    hfl_plan_config cfg = cfg_of(2, HFL_CKPT_SQRT);
    REQUIRE_MSG(hfl_plan_make(&s, &cfg, p, err) == 0, "%s", err);
    CHECK(p->n_stages == 4 && p->ckpt.stored[2] && !p->ckpt.stored[1] && !p->ckpt.stored[3]);
    /* 16 rows of 15 C + 4 floats (gpt.h's saved set) and 2 x 2 heads of 8 x 8 */
    size_t sb = hfl_gpt_block_saved_bytes(HFL_PREC_FP32, 2, 8, 16, 2, 0) / 4;
    CHECK(sb == 16 * (15 * 16 + 4) + 2 * 2 * 8 * 8);
    /* A block of 3 rows of width 6 (no region a multiple of 64 bytes): fp32
     * regions packed, as fp32 plans always had them (saved: 15 C + 4 floats
     * a row and the 2 x 3 x 3 scores; backward workspace: 6 C a row and
     * attention's 4 C a row and scores), 2-byte ones 64-byte aligned
     * (saved: h1, ya, x2, h2 of 36 bytes, qkv 108, f and g 144 each, the
     * scores 36, and four 12-byte statistics). */
    CHECK(hfl_gpt_block_saved_bytes(HFL_PREC_FP32, 1, 3, 6, 2, 0) == 4 * (3 * (15 * 6 + 4) + 2 * 3 * 3));
    CHECK(hfl_gpt_block_ws_bytes(HFL_PREC_FP32, 1, 3, 6, 2, 0) == 4 * (3 * 6 * 6 + 4 * 3 * 6 + 2 * 3 * 3));
    CHECK(hfl_gpt_block_saved_bytes(HFL_PREC_BF16, 1, 3, 6, 2, 0) == 4 * 64 + 128 + 2 * 192 + 64 + 4 * 64);
    check_buffer(p, find_buffer(p, "s1"), "s1", HFL_BUF_ACTIVATIONS, sb * 4, 1, 2, 10);
    check_buffer(p, find_buffer(p, "s2"), "s2", HFL_BUF_ACTIVATIONS, sb * 4, 1, 3, 3);
    check_buffer(p, find_buffer(p, "s2.re"), "s2.re", HFL_BUF_ACTIVATIONS, sb * 4, 1, 6, 8);
    check_buffer(p, find_buffer(p, "s3"), "s3", HFL_BUF_ACTIVATIONS, 2 * 8 * (16 + 2) * 4, 1, 4, 7);
    CHECK(find_buffer(p, "s1.re") < 0 && find_buffer(p, "s0") < 0 && find_buffer(p, "s3.re") < 0);
    CHECK(p->ops[8].kind == HFL_OP_BACKWARD && p->ops[8].layer == 2 &&
          p->ops[8].saved == find_buffer(p, "s2.re") && p->ops[10].saved == find_buffer(p, "s1"));
    CHECK(p->buffers[p->labels].count == 2 * 8 && p->chain_peak == p->ckpt.peak);
    cfg.precision = HFL_PREC_BF16;
    CHECK(hfl_plan_make(&s, &cfg, p, err) == -1 &&
          !strcmp(err, "planner: a vocabulary of 300 tokens does not fit bf16 token ids (at most 256)"));
    cfg.precision = HFL_PREC_FP16;
    CHECK_MSG(hfl_plan_make(&s, &cfg, p, err) == 0 && p->chain_peak == p->ckpt.peak, "%s", err);
    free(p);
}

static const check_case cases[] = {
    {"d_none", test_d_none},
    {"d_sqrt", test_d_sqrt},
    {"d_device", test_d_device},
    {"d_bf16", test_d_bf16},
    {"below_first_param", test_below_first_param},
    {"refusals", test_refusals},
    {"chunk_and_backend", test_chunk_and_backend},
    {"granularity", test_granularity},
    {"place", test_place},
    {"lm_plan", test_lm_plan},
};

int main(int argc, char **argv) {
    return check_run("test_planner_edges", cases, CHECK_CASES(cases), argc, argv);
}
