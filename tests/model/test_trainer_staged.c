/* test_trainer_staged.c: the trainer's staged form and device-side step
 * scalars against the synchronous trainer as it was before they existed.
 *
 * GOLDEN. The digests below were printed by the same loops built against
 * commit fe79231, before the backend interface moved the loss, the finite
 * flag and fp16's loss scaler into hfl_step_scalars (the oracle is that
 * older code, not this one): FNV-1a 64 of each plan's arena bytes, live
 * peak and every buffer's name, offset, size and lifetime, and of a short
 * training run's per-step losses, final parameters, gradients, loss scale
 * and skipped steps (mlp 6 steps of 32, cnn 3 steps of 8, the last one
 * short; fp16 also with a loss scale of 1e30 that overflows every step).
 * Default plans (any precision for mlp, fp32 for cnn) must match byte for
 * byte; cnn's bf16/fp16 plans changed on purpose (2-byte im2col columns)
 * and are not compared; their training must still match bit for bit.
 *
 * The training digests hold for one OpenBLAS kernel set (its sgemm rounds
 * per kernel): they were recorded with OpenBLAS 0.3.21 (Debian 12), one
 * thread, for the Zen (= Haswell), Sandybridge and Nehalem kernels
 * (OPENBLAS_CORETYPE). On a CPU whose kernel set is none of these (SkylakeX
 * could not run where they were recorded) the training comparisons are
 * skipped, saying so; plans, which do not depend on BLAS, are always
 * compared, and so are the staged forms against the synchronous one.
 *
 * STAGED. Three staged runs (one input slot; a plan with two slots and
 * scalars in the arena, as a device backend gets; and that plan on the CPU
 * backend dressed as a device, so the trainer stages through host_alloc'd
 * memory and prefetch copies) end with the same parameters, loss scale and
 * skipped count as the synchronous run, and the loss read once at the end
 * is the sum of the per-step totals.
 *
 * CHUNKED CONV. The device-dressed backend asks for a conv chunk of 3, but
 * its staged run here keeps one sample at a time: a chunk's weight gradient
 * is one GEMM over the chunk (model/conv.c, NUMERICS), which sums in another
 * order than the synchronous per-sample run, so the two are no longer
 * bit-identical. tests/model/test_conv.c holds chunked layers to the bound
 * of that reordering, and tests/model/test_profile.c runs chunked steps on
 * the device-dressed backend. The planner grows each conv workspace by the
 * chunk's columns and transposed dy (test_conv_chunk_plan).
 *
 * The cnn's training digests were re-pinned when channel_bias_grad became
 * the fixed lane tree of kernels/ops_hd.h: a different summation
 * order of the bias gradient, within the bound that
 * tests/kernels/test_thread_bodies.c (test_channel_tree) checks against the
 * old sequential sum, so its bits after one step differ from fe79231's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "kernels/blas.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "plan/planner.h"
#include "tests/check.h"
#include "util/util.h"

static const char *const golden_plans[] = {
    "mlp fp32 0 1 7d0f8c77b11e0770",
    "mlp fp32 0 32 8f3aa686e44114ac",
    "mlp fp32 0 128 89f57f6b25d20e4f",
    "mlp fp32 1 1 19efd825d8e11661",
    "mlp fp32 1 32 46b4292f635af3ef",
    "mlp fp32 1 128 a54805d9ccc56cf1",
    "mlp fp32 2 1 7d0f8c77b11e0770",
    "mlp fp32 2 32 8f3aa686e44114ac",
    "mlp fp32 2 128 89f57f6b25d20e4f",
    "mlp fp32 3 1 19efd825d8e11661",
    "mlp fp32 3 32 46b4292f635af3ef",
    "mlp fp32 3 128 a54805d9ccc56cf1",
    "mlp bf16 0 1 cf06ebd8fede0c1c",
    "mlp bf16 0 32 6b26639aa345c2af",
    "mlp bf16 0 128 2e7744b563344730",
    "mlp bf16 1 1 825b84e02a6cb9dd",
    "mlp bf16 1 32 489436133e0c8327",
    "mlp bf16 1 128 7d0c2a116d207172",
    "mlp bf16 2 1 cf06ebd8fede0c1c",
    "mlp bf16 2 32 6b26639aa345c2af",
    "mlp bf16 2 128 2e7744b563344730",
    "mlp bf16 3 1 825b84e02a6cb9dd",
    "mlp bf16 3 32 489436133e0c8327",
    "mlp bf16 3 128 7d0c2a116d207172",
    "mlp fp16 0 1 cf06ebd8fede0c1c",
    "mlp fp16 0 32 6b26639aa345c2af",
    "mlp fp16 0 128 2e7744b563344730",
    "mlp fp16 1 1 825b84e02a6cb9dd",
    "mlp fp16 1 32 489436133e0c8327",
    "mlp fp16 1 128 7d0c2a116d207172",
    "mlp fp16 2 1 cf06ebd8fede0c1c",
    "mlp fp16 2 32 6b26639aa345c2af",
    "mlp fp16 2 128 2e7744b563344730",
    "mlp fp16 3 1 825b84e02a6cb9dd",
    "mlp fp16 3 32 489436133e0c8327",
    "mlp fp16 3 128 7d0c2a116d207172",
    "cnn fp32 0 1 d44c5edf34a5e13c",
    "cnn fp32 0 32 a456c114d23605bb",
    "cnn fp32 0 128 ccaa5eba0a79449f",
    "cnn fp32 1 1 d29e8c712ac49137",
    "cnn fp32 1 32 c9aee04546b8a2a3",
    "cnn fp32 1 128 d0df2255c1b839c9",
    "cnn fp32 2 1 d44c5edf34a5e13c",
    "cnn fp32 2 32 a456c114d23605bb",
    "cnn fp32 2 128 ccaa5eba0a79449f",
    "cnn fp32 3 1 4f30ba5e0f05ce00",
    "cnn fp32 3 32 7f39763bd3e19e34",
    "cnn fp32 3 128 a6fd2978d0116215",
};
/* "<OpenBLAS kernel set> <model> <precision> <sqrt schedule?> <digest>"; Haswell
 * runs the same kernels as Zen (checked: equal digests). */
static const char *const golden_train[] = {
    "Zen mlp fp32 0 b8e64867c901b259",
    "Zen mlp fp32 1 b8e64867c901b259",
    "Zen mlp bf16 0 109203d733240513",
    "Zen mlp bf16 1 109203d733240513",
    "Zen mlp fp16 0 e4a08a456b9701e6",
    "Zen mlp fp16 1 b9c2d04f4fea5d88",
    "Zen cnn fp32 0 a47285f61ead16b6",
    "Zen cnn fp32 1 a47285f61ead16b6",
    "Zen cnn bf16 0 271287594347d79a",
    "Zen cnn bf16 1 271287594347d79a",
    "Zen cnn fp16 0 b9757650a19bbf8b",
    "Zen cnn fp16 1 5b1af93170d322d7",
    "Sandybridge mlp fp32 0 330a6d8f86a04c11",
    "Sandybridge mlp fp32 1 330a6d8f86a04c11",
    "Sandybridge mlp bf16 0 ebe00e16e3d5300d",
    "Sandybridge mlp bf16 1 ebe00e16e3d5300d",
    "Sandybridge mlp fp16 0 e5f28ecf6dc1bff7",
    "Sandybridge mlp fp16 1 5960b43684a6a776",
    "Sandybridge cnn fp32 0 95cf8b555d45b72a",
    "Sandybridge cnn fp32 1 95cf8b555d45b72a",
    "Sandybridge cnn bf16 0 e4f0a06b5fd84c85",
    "Sandybridge cnn bf16 1 e4f0a06b5fd84c85",
    "Sandybridge cnn fp16 0 3a1fe35323c93628",
    "Sandybridge cnn fp16 1 cdad6a5b8d7e884a",
    "Nehalem mlp fp32 0 7a421e8cf4387bc4",
    "Nehalem mlp fp32 1 7a421e8cf4387bc4",
    "Nehalem mlp bf16 0 ebe00e16e3d5300d",
    "Nehalem mlp bf16 1 ebe00e16e3d5300d",
    "Nehalem mlp fp16 0 e5f28ecf6dc1bff7",
    "Nehalem mlp fp16 1 5960b43684a6a776",
    "Nehalem cnn fp32 0 eb71bee922397a92",
    "Nehalem cnn fp32 1 eb71bee922397a92",
    "Nehalem cnn bf16 0 e4f0a06b5fd84c85",
    "Nehalem cnn bf16 1 e4f0a06b5fd84c85",
    "Nehalem cnn fp16 0 3a1fe35323c93628",
    "Nehalem cnn fp16 1 cdad6a5b8d7e884a",
};

static const char *golden_core; /* the digests' name for this OpenBLAS core, or NULL */

static const hfl_precision precs[3] = {HFL_PREC_FP32, HFL_PREC_BF16, HFL_PREC_FP16};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int in_table(const char *const *table, size_t n, const char *line) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(table[i], line)) return 1;
    return 0;
}

static void test_golden_plans(void) {
    const char *models[2] = {"mlp", "cnn"};
    const hfl_ckpt_kind kinds[4] = {HFL_CKPT_NONE, HFL_CKPT_SQRT, HFL_CKPT_OPTIMAL, HFL_CKPT_FULL};
    const int batches[3] = {1, 32, 128};
    static hfl_plan plan;
    char err[HFL_ERR_LEN], line[128];
    int compared = 0;
    for (int m = 0; m < 2; m++) {
        hfl_model_spec spec;
        CHECK(hfl_model_builtin(models[m], &spec, err) == 0);
        for (int p = 0; p < 3; p++) {
            if (m == 1 && p) continue; /* cnn's 2-byte plans changed on purpose */
            for (int k = 0; k < 4; k++)
                for (int bi = 0; bi < 3; bi++) {
                    hfl_plan_config cfg = {.batch = batches[bi], .ckpt = kinds[k],
                                           .ckpt_budget = SIZE_MAX, .momentum = 1,
                                           .precision = precs[p]};
                    hfl_plan_config_for_backend(&cfg, hfl_backend_cpu()); /* adds nothing */
                    CHECK(hfl_plan_make(&spec, &cfg, &plan, err) == 0);
                    uint64_t h = 1469598103934665603ull;
                    h = fnv(h, &plan.arena_bytes, sizeof plan.arena_bytes);
                    h = fnv(h, &plan.live_peak, sizeof plan.live_peak);
                    for (int i = 0; i < plan.n_buffers; i++) {
                        const hfl_plan_buffer *x = &plan.buffers[i];
                        h = fnv(h, x->name, strlen(x->name));
                        h = fnv(h, &x->offset, sizeof x->offset);
                        h = fnv(h, &x->bytes, sizeof x->bytes);
                        h = fnv(h, &x->first_op, sizeof x->first_op);
                        h = fnv(h, &x->last_op, sizeof x->last_op);
                    }
                    snprintf(line, sizeof line, "%s %s %d %d %016llx", models[m],
                             hfl_precision_name(precs[p]), k, batches[bi], (unsigned long long)h);
                    if (!in_table(golden_plans, sizeof golden_plans / sizeof *golden_plans, line))
                        fprintf(stderr, "plan differs from fe79231: %s\n", line);
                    CHECK(in_table(golden_plans, sizeof golden_plans / sizeof *golden_plans, line));
                    compared++;
                }
        }
    }
    CHECK(compared == (int)(sizeof golden_plans / sizeof *golden_plans));
}

/* Batch s of a run: inputs in [0, 1), labels in 0..9. */
static void make_batch(float *x, int32_t *y, size_t nx, int b, int s) {
    for (size_t i = 0; i < nx; i++) x[i] = hfl_u01(hfl_philox_u32(11, 0, s, 0, 0, i));
    for (int i = 0; i < b; i++) y[i] = (int32_t)(hfl_philox_u32(12, 0, s, 0, 0, i) % 10);
}

/* The CPU backend dressed as a device one (host_memory 0): the trainer then
 * takes its device path (pinned staging from host_alloc, prefetch copies
 * into the input slots, scalars uploaded and downloaded) on memory the test
 * can still run, so that path is checked without a GPU. */
static hfl_backend device_like;

static hfl_trainer *make_trainer_on(const hfl_backend *be, const hfl_model_spec *spec,
                                    hfl_plan_config cfg, float *w) {
    static hfl_plan plan;
    char err[HFL_ERR_LEN];
    CHECK(hfl_plan_make(spec, &cfg, &plan, err) == 0);
    hfl_trainer *t = hfl_trainer_create_plan(spec, be, &plan, err);
    CHECK(t != NULL);
    hfl_model_init_params(spec, w, 7);
    hfl_trainer_set_params(t, w);
    return t;
}

static hfl_trainer *make_trainer(const hfl_model_spec *spec, hfl_plan_config cfg, float *w) {
    return make_trainer_on(hfl_backend_cpu(), spec, cfg, w);
}

/* The golden training digests, then the staged forms on the same batches. */
static void test_training(const char *model, int B, int steps) {
    char err[HFL_ERR_LEN], line[128];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin(model, &spec, err) == 0);
    size_t nx = (size_t)B * spec.in_dim;
    float *x = malloc(nx * sizeof(float)), *w = malloc(spec.n_params * sizeof(float));
    float *ws = malloc(spec.n_params * sizeof(float));
    int32_t *y = malloc((size_t)B * sizeof(int32_t));
    for (int p = 0; p < 3; p++)
        for (int k = 0; k < 2; k++) {
            hfl_plan_config cfg = {.batch = B, .ckpt = k ? HFL_CKPT_SQRT : HFL_CKPT_NONE,
                                   .ckpt_budget = SIZE_MAX, .momentum = 1, .precision = precs[p]};
            int overflow = precs[p] == HFL_PREC_FP16 && k;
            hfl_trainer *t = make_trainer(&spec, cfg, w);
            if (overflow) hfl_trainer_set_loss_scale(t, 1e30f);
            uint64_t h = 1469598103934665603ull;
            double total = 0.0;
            for (int s = 0; s < steps; s++) {
                make_batch(x, y, nx, B, s);
                int n = s == steps - 1 ? B - 3 : B;
                float l = hfl_trainer_step(t, x, y, n, 0.05f, 0.9f, 1e-4f);
                h = fnv(h, &l, sizeof l);
            }
            hfl_trainer_get_params(t, w);
            h = fnv(h, w, spec.n_params * sizeof(float));
            hfl_trainer_get_grads(t, ws);
            h = fnv(h, ws, spec.n_params * sizeof(float));
            float scale = hfl_trainer_loss_scale(t);
            uint64_t skipped = hfl_trainer_skipped_steps(t);
            h = fnv(h, &scale, sizeof scale);
            h = fnv(h, &skipped, sizeof skipped);
            snprintf(line, sizeof line, "%s %s %d %016llx", model, hfl_precision_name(precs[p]), k,
                     (unsigned long long)h);
            char keyed[160];
            snprintf(keyed, sizeof keyed, "%s %s", golden_core ? golden_core : "", line);
            int known = !golden_core ||
                        in_table(golden_train, sizeof golden_train / sizeof *golden_train, keyed);
            if (!known) fprintf(stderr, "training differs from fe79231: %s\n", line);
            CHECK(known);
            CHECK(!overflow || skipped == (uint64_t)steps);
            hfl_trainer_free(t);

            /* Staged, with one slot (take the loss after every step to get the
             * per-step totals), then with two slots and scalars in the arena
             * (staging one batch ahead, the loss taken once at the end), on
             * the CPU backend and on it dressed as a device (form 2). */
            for (int form = 0; form < 3; form++) {
                hfl_plan_config c2 = cfg;
                c2.prefetch = c2.device_scalars = form > 0;
                if (form == 2) hfl_plan_config_for_backend(&c2, &device_like);
                c2.conv_chunk = 0; /* one sample at a time: CHUNKED CONV in the header */
                t = make_trainer_on(form == 2 ? &device_like : hfl_backend_cpu(), &spec, c2, ws);
                if (overflow) hfl_trainer_set_loss_scale(t, 1e30f);
                CHECK(hfl_trainer_stage_slots(t) == (form ? 2 : 1));
                double sum = 0.0;
                int64_t rows = 0, staged = 0;
                for (int s = 0; s < steps; s++) {
                    while (staged < steps && staged - s < hfl_trainer_stage_slots(t)) {
                        make_batch(x, y, nx, B, (int)staged);
                        hfl_trainer_stage(t, x, y, staged == steps - 1 ? B - 3 : B);
                        staged++;
                    }
                    hfl_trainer_step_staged(t, 0.05f, 0.9f, 1e-4f);
                    if (form == 0) {
                        double step_sum;
                        int64_t r;
                        hfl_trainer_take_loss(t, &step_sum, &r, NULL);
                        total += step_sum, rows += r;
                    }
                }
                if (form) hfl_trainer_take_loss(t, &sum, &rows, NULL);
                CHECK(rows == (int64_t)steps * B - 3);
                if (form) CHECK(sum == total); /* the same doubles added in the same order */
                hfl_trainer_get_params(t, ws);
                CHECK(memcmp(ws, w, spec.n_params * sizeof(float)) == 0);
                CHECK(hfl_trainer_skipped_steps(t) == skipped);
                CHECK(hfl_trainer_loss_scale(t) == scale);
                /* Nothing left to take: the accumulators were reset. */
                double rest;
                hfl_trainer_take_loss(t, &rest, &rows, NULL);
                CHECK(rest == 0.0 && rows == 0);
                hfl_trainer_free(t);
            }
        }
    free(x);
    free(w);
    free(ws);
    free(y);
}

/* The device buffers appear only when asked for, and a prefetch plan keeps
 * both input slots over the whole step without changing the chain. */
static void test_device_buffers(void) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin("cnn", &spec, err) == 0);
    static hfl_plan a, b;
    hfl_plan_config cfg = {.batch = 32, .ckpt = HFL_CKPT_SQRT, .ckpt_budget = SIZE_MAX,
                           .momentum = 1};
    CHECK(hfl_plan_make(&spec, &cfg, &a, err) == 0);
    CHECK(a.input_next < 0 && a.labels_next < 0 && a.scalars < 0 && a.blas_ws < 0);
    cfg.prefetch = cfg.device_scalars = 1;
    cfg.blas_ws_bytes = 4u << 20;
    CHECK(hfl_plan_make(&spec, &cfg, &b, err) == 0);
    CHECK(b.input_next >= 0 && b.labels_next >= 0 && b.scalars >= 0 && b.blas_ws >= 0);
    CHECK(b.buffers[b.scalars].bytes == sizeof(hfl_step_scalars));
    CHECK(b.buffers[b.blas_ws].bytes == 4u << 20);
    CHECK(b.buffers[b.input_next].bytes == b.buffers[b.input].bytes);
    int whole[6] = {b.input, b.labels, b.input_next, b.labels_next, b.scalars, b.blas_ws};
    for (int k = 0; k < 6; k++)
        CHECK(b.buffers[whole[k]].first_op == 0 && b.buffers[whole[k]].last_op == b.n_ops - 1);
    CHECK(b.chain_peak == a.chain_peak && b.ckpt.peak == a.ckpt.peak);
    size_t added = 2 * b.buffers[b.input].bytes + 2 * b.buffers[b.labels].bytes + (4u << 20) +
                   sizeof(hfl_step_scalars);
    CHECK(b.live_peak >= a.live_peak + (4u << 20));
    CHECK(b.live_peak <= a.live_peak + added);
    /* No two buffers alive at one op share a byte (placement kept its promise). */
    for (int i = 0; i < b.n_buffers; i++)
        for (int j = i + 1; j < b.n_buffers; j++) {
            const hfl_plan_buffer *p = &b.buffers[i], *q = &b.buffers[j];
            int overlap_time = p->first_op <= q->last_op && q->first_op <= p->last_op;
            int overlap_bytes = p->offset < q->offset + q->bytes && q->offset < p->offset + p->bytes;
            CHECK(!(overlap_time && overlap_bytes && p->bytes && q->bytes));
        }
    /* A backend whose memory is not the host's gets all three. */
    hfl_backend fake = *hfl_backend_cpu();
    fake.host_memory = 0;
    fake.blas_ws_bytes = 1234;
    hfl_plan_config c = {.batch = 1};
    hfl_plan_config_for_backend(&c, &fake);
    CHECK(c.prefetch == 1 && c.device_scalars == 1 && c.blas_ws_bytes == 1234);
    /* ... and a trainer refuses to run such a backend without scalars in the plan. */
    cfg.prefetch = cfg.device_scalars = 0;
    cfg.blas_ws_bytes = 0;
    CHECK(hfl_plan_make(&spec, &cfg, &a, err) == 0);
    CHECK(hfl_trainer_create_plan(&spec, &fake, &a, err) == NULL);
    CHECK(strstr(err, "device scalars") != NULL);
}

/* A conv chunk multiplies each conv layer's workspace by min(chunk, batch),
 * is recorded in the plan's conv layers only, and is bounded. */
static void test_conv_chunk_plan(void) {
    char err[HFL_ERR_LEN];
    hfl_model_spec spec;
    CHECK(hfl_model_builtin("cnn", &spec, err) == 0);
    static hfl_plan a, b, c;
    for (int p = 0; p < 3; p++) {
        hfl_plan_config cfg = {.batch = 8, .ckpt_budget = SIZE_MAX, .precision = precs[p]};
        CHECK(hfl_plan_make(&spec, &cfg, &a, err) == 0);
        cfg.conv_chunk = 3;
        CHECK(hfl_plan_make(&spec, &cfg, &b, err) == 0);
        cfg.conv_chunk = 64; /* more than the batch: the batch is the chunk */
        CHECK(hfl_plan_make(&spec, &cfg, &c, err) == 0);
        int convs = 0;
        for (int l = 0; l < spec.n_layers; l++) {
            int conv = spec.layers[l].kind == HFL_LAYER_CONV2D;
            CHECK(a.spec.layers[l].chunk == 0);
            CHECK(b.spec.layers[l].chunk == (conv ? 3 : 0));
            convs += conv;
        }
        CHECK(convs == 2);
        size_t ws_a = 0, ws_b = 0, ws_c = 0;
        for (int i = 0; i < a.n_buffers; i++)
            if (!strncmp(a.buffers[i].name, "ws.", 3) && strcmp(a.buffers[i].name, "ws.blas")) {
                ws_a = a.buffers[i].bytes > ws_a ? a.buffers[i].bytes : ws_a;
                ws_b = b.buffers[i].bytes > ws_b ? b.buffers[i].bytes : ws_b;
                ws_c = c.buffers[i].bytes > ws_c ? c.buffers[i].bytes : ws_c;
            }
        /* The largest workspace is the second conv's backward: one sample's
         * fp32 columns (col) plus, in 2-byte precisions, a GEMM's staging
         * that does not grow; chunks of 3 and 8 (the batch) add 2 and 7
         * samples' columns and the chunk's transposed dy (dyt per sample, of
         * the precision's size, a multiple of 64 bytes here). */
        const hfl_layer *c2 = &spec.layers[3];
        size_t hw = (size_t)c2->out_shape.h * c2->out_shape.w;
        size_t col = (size_t)c2->in_shape.c * c2->kernel * c2->kernel * hw * sizeof(float);
        size_t dyt = (size_t)c2->units * hw * hfl_precision_bytes(precs[p]);
        CHECK(c2->kind == HFL_LAYER_CONV2D);
        /* in 2-byte precisions the dW GEMM's staging tile grows with its K
         * (chunk * hw) up to HFL_GEMM_TILE_K */
        int ckk = c2->in_shape.c * c2->kernel * c2->kernel;
        size_t dcols = hfl_gemm_ws_bytes(precs[p], HFL_GEMM_C_F32, ckk, (int)hw, c2->units), st[3];
        for (int q = 0; q < 3; q++) {
            size_t dw = hfl_gemm_ws_bytes(precs[p], HFL_GEMM_C_F32, c2->units, ckk, (int)hw * (q ? 5 * q - 2 : 1));
            st[q] = dw > dcols ? dw : dcols; /* chunks 1, 3, 8 */
        }
        CHECK(ws_b - ws_a == 2 * col + 3 * dyt + st[1] - st[0] &&
              ws_c - ws_a == 7 * col + 8 * dyt + st[2] - st[0]);
        CHECK(p || (ws_a == col && ws_b == 3 * col + 3 * dyt));
        CHECK(b.arena_bytes > a.arena_bytes);
    }
    hfl_plan_config bad = {.batch = 8, .conv_chunk = -1};
    CHECK(hfl_plan_make(&spec, &bad, &a, err) != 0 && strstr(err, "conv chunk") != NULL);
    bad.conv_chunk = 5000;
    CHECK(hfl_plan_make(&spec, &bad, &a, err) != 0 && strstr(err, "conv chunk") != NULL);
}

static void case_training_mlp(void) { test_training("mlp", 32, 6); }
static void case_training_cnn(void) { test_training("cnn", 8, 3); }

static const check_case cases[] = {
    {"golden_plans", test_golden_plans},
    {"device_buffers", test_device_buffers},
    {"conv_chunk_plan", test_conv_chunk_plan},
    {"training_mlp", case_training_mlp},
    {"training_cnn", case_training_cnn},
};

int main(int argc, char **argv) {
    hfl_blas_set_threads(1);
    device_like = *hfl_backend_cpu();
    device_like.host_memory = 0;
    device_like.conv_chunk = 3;
    const char *core = hfl_blas_core_name();
    golden_core = !strcmp(core, "Zen") || !strcmp(core, "Haswell") ? "Zen"
                  : !strcmp(core, "Sandybridge")                   ? "Sandybridge"
                  : !strcmp(core, "Nehalem")                       ? "Nehalem"
                                                                   : NULL;
    if (!golden_core)
        printf("note: no golden training digests for OpenBLAS core %s: not compared (plans "
               "and staged-vs-synchronous checks still run)\n", core);
    return check_run("test_trainer_staged", cases, CHECK_CASES(cases), argc, argv);
}
