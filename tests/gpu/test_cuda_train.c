/* test_cuda_train.c: whole training steps on the GPU against the CPU, and
 * the planner's memory prediction against cudaMemGetInfo (suite gpu).
 *
 * Skips (exit 77, saying why) where no GPU is found; fails where a GPU is
 * found but the CUDA backend cannot be had. On a GPU:
 *   STEPS. mlp and cnn, fp32/bf16/fp16 (those the device offers): the same
 *   initial weights and batches on both backends. fp32: after one forward/
 *   backward the gradients and the loss agree within a relative 1e-4
 *   (cuBLAS sums in another order), and after five staged steps so do the
 *   weights. bf16/fp16 (tests/kernels/rounding_check.h, proven on the CPU by
 *   test_rounding_check.c): every GEMM of the step, teacher-forced (judged on
 *   the GPU's own inputs against the exact values and the CPU's bits), is
 *   rounded once and flips no more outputs than a legal reordering may; and
 *   the whole step's gradient, loss and five-step weights lie within
 *   rc_step_bound of the CPU's (about 3e-3 in bf16 and 2e-3 in fp16 for the
 *   mlp; k is the model's longest reduction), with a per-layer table when
 *   they do not. HFL_GPU_STANDIN=legal or split-k runs the mlp's steps on the
 *   CPU with tests/kernels/gemm_emu.h's GEMMs as "the GPU" instead (unit
 *   suite: legal passes, split-k fails).
 *   MEMORY. First, while the backend holds only what opening it took, the
 *   per-process cost (plan/device_cost.h: NVML's figure for this process;
 *   printed, or why NVML cannot say). TAIL SHAPES: after a measurement that
 *   ran mlp's batch 96 and its tail of 37, a training step of 37 rows adds
 *   no device memory (a tail of 53 no measurement ran is the control,
 *   printed). GRANULARITY: the driver's granule is a power of two, and an
 *   allocation of 3 granules and a byte takes 4 (NVML, else free memory).
 *   CALIBRATION: it leaves no hfl allocation live; what else it leaves is
 *   printed. Then mlp and cnn at batches 1..512, every offered precision
 *   and every schedule, each arena a whole number of granules, each
 *   measured with its tail shape (batch - 1; the trainer's row count shows
 *   the tail ran): the growth of used device memory over trainer creation,
 *   the steps and an evaluation (hfl_measure_step_on), and where NVML can
 *   say, what the process then holds beyond its per-process cost, each
 *   against the plan's arena plus an overhead learned from the OTHER
 *   configurations of the same model (median of figure - arena, leaving
 *   this one out, so no prediction is checked against the figure it was
 *   fitted on): within max(1%, 2 MiB).
 *   BUDGET. With a budget one byte short of the chosen configuration's
 *   prediction, the chooser picks another one, which then trains under that
 *   budget (the CUDA allocator enforces it); NVML's figure for the process
 *   then is at least its cost plus the arena, and at most the card. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/budget.h"
#include "kernels/philox.h"
#include "kernels/select.h"
#include "plan/chooser.h"
#include "plan/device_cost.h"
#include "plan/measure.h"
#include "tests/check.h"
#include "tests/kernels/gemm_emu.h"
#include "tests/kernels/rounding_check.h"
#include "util/util.h"

static const hfl_backend *gpu, *cpu;
static unsigned offered;
static hfl_device_cost cost; /* this process's per-process cost, measured first (NVML) */
static size_t granule;       /* gpu->alloc_granularity, 1 when the driver did not say */
static uint64_t device_total;

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void make_batch(float *x, int32_t *y, const hfl_model_spec *s, int b, int k) {
    for (size_t i = 0; i < (size_t)b * s->in_dim; i++) x[i] = hfl_u01(hfl_philox_u32(21, 0, k, 0, 0, i));
    for (int i = 0; i < b; i++) y[i] = (int32_t)(hfl_philox_u32(22, 0, k, 0, 0, i) % s->n_classes);
}

static hfl_trainer *trainer_on(const hfl_backend *be, const hfl_model_spec *s, hfl_precision p, int batch,
                               const float *w) {
    static hfl_plan plan;
    char err[HFL_ERR_LEN];
    hfl_plan_config cfg = {.batch = batch, .ckpt = HFL_CKPT_NONE, .ckpt_budget = SIZE_MAX, .momentum = 1,
                           .precision = p};
    hfl_plan_config_for_backend(&cfg, be);
    CHECK(hfl_plan_make(s, &cfg, &plan, err) == 0);
    hfl_trainer *t = hfl_trainer_create_plan(s, be, &plan, err);
    if (!t) fprintf(stderr, "%s\n", err);
    CHECK(t != NULL);
    hfl_trainer_set_params(t, w);
    return t;
}

/* Each parameter tensor's relative gap, layer by layer. */
static void report_layers(const hfl_model_spec *s, const float *got, const float *want) {
    printf("  per layer:");
    for (int l = 0; l < s->n_layers; l++)
        if (s->layers[l].n_params)
            printf(" %d: %.2e", l, rel_err(got + s->layers[l].param_off, want + s->layers[l].param_off,
                                           s->layers[l].n_params));
    printf("\n");
}

/* One teacher-forced forward/backward on the GPU: every 2-byte gemm judged. */
static void forced_step(const hfl_model_spec *s, hfl_precision p, int batch, const float *w,
                        const float *x, const int32_t *y) {
    hfl_trainer *t = trainer_on(rc_forcing(gpu), s, p, batch, w);
    hfl_trainer_accumulate(t, x, y, batch, batch);
    hfl_trainer_free(t);
    printf("%s: teacher-forced GEMMs: %d of %d rejected\n", hfl_precision_name(p), rc_forced.rejected,
           rc_forced.calls);
    CHECK(rc_forced.calls > 0 && rc_forced.rejected == 0);
}

/* k_max: the model's longest reduction (rc_step_bound). */
static void test_steps(const char *model, int batch, int k_max) {
    hfl_model_spec s;
    CHECK(hfl_model_builtin(model, &s, NULL) == 0);
    size_t np = s.n_params;
    float *w = malloc(np * 4), *ga = malloc(np * 4), *gb = malloc(np * 4), *g32 = malloc(np * 4);
    float *x = malloc((size_t)batch * s.in_dim * 4);
    int32_t *y = malloc((size_t)batch * 4);
    for (int p = 0; p < 3; p++) {
        if (!(offered & (1u << p))) continue;
        const char *pn = hfl_precision_name((hfl_precision)p);
        hfl_model_init_params(&s, w, 5);
        hfl_trainer *tg = trainer_on(gpu, &s, (hfl_precision)p, batch, w);
        hfl_trainer *tc = trainer_on(cpu, &s, (hfl_precision)p, batch, w);
        make_batch(x, y, &s, batch, 0);
        float lg = hfl_trainer_accumulate(tg, x, y, batch, batch);
        float lc = hfl_trainer_accumulate(tc, x, y, batch, batch);
        hfl_trainer_get_grads(tg, ga);
        hfl_trainer_get_grads(tc, gb);
        double tol = 1e-4; /* fp32: only cuBLAS's summation order differs */
        if (p == HFL_PREC_FP32) {
            memcpy(g32, gb, np * 4);
        } else {
            double e = rel_err(gb, g32, np);
            tol = rc_step_bound((hfl_precision)p, e, k_max, 3.0);
            printf("%s %s: the CPU's own 2-byte error against its fp32 gradients %.2e: whole-step bound %.2e\n",
                   model, pn, e, tol);
            forced_step(&s, (hfl_precision)p, batch, w, x, y);
        }
        double eg = rel_err(ga, gb, np), el = fabs((double)lg - lc) / fabs((double)lc);
        printf("%s %s: one step: gradient rel err %.2e, loss %.6f vs %.6f (bound %.2e)\n", model, pn, eg,
               lg, lc, tol);
        if (!(eg <= tol)) report_layers(&s, ga, gb);
        CHECK(eg <= tol && el <= tol);
        for (int k = 1; k <= 5; k++) {
            make_batch(x, y, &s, batch, k);
            hfl_trainer_stage(tg, x, y, batch);
            hfl_trainer_step_staged(tg, 0.05f, 0.9f, 0.0f);
            hfl_trainer_step(tc, x, y, batch, 0.05f, 0.9f, 0.0f);
        }
        hfl_trainer_get_params(tg, ga);
        hfl_trainer_get_params(tc, gb);
        double ew = rel_err(ga, gb, np);
        printf("%s %s: five steps: weight rel err %.2e\n", model, pn, ew);
        if (!(ew <= tol)) report_layers(&s, ga, gb);
        CHECK(ew <= tol);
        hfl_trainer_free(tg);
        hfl_trainer_free(tc);
    }
    free(w), free(ga), free(gb), free(g32), free(x), free(y);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Each configuration's figure against its arena plus the median overhead
 * (figure - arena) of the OTHER configurations: within max(1%, 2 MiB).
 * Returns how many are not. */
static int predict_report(const char *model, const char *what, char name[][48], const size_t *arena,
                          const uint64_t *figure, int n) {
    int bad = 0;
    printf("%s, %s:\n", model, what);
    for (int i = 0; i < n; i++) {
        int64_t others[64];
        int m = 0;
        for (int j = 0; j < n; j++)
            if (j != i) others[m++] = (int64_t)figure[j] - (int64_t)arena[j];
        qsort(others, m, sizeof *others, cmp_i64);
        int64_t over = m ? others[m / 2] : 0, pred = (int64_t)arena[i] + over;
        double err_b = fabs((double)pred - (double)figure[i]);
        double allowed = fmax(0.01 * figure[i], 2.0 * 1048576);
        int ok = err_b <= allowed;
        bad += !ok;
        printf("%-28s arena %9.2f MiB measured %9.2f MiB predicted %9.2f MiB error %6.2f MiB%s\n", name[i],
               arena[i] / 1048576.0, figure[i] / 1048576.0, pred / 1048576.0, err_b / 1048576.0,
               ok ? "" : "  OVER");
    }
    printf("%s: %d of %d configurations within max(1%%, 2 MiB)\n", model, n - bad, n);
    return bad;
}

static void test_memory(const char *model) {
    enum { MAXC = 64 };
    static const int batches[] = {1, 8, 32, 128, 512};
    static const hfl_ckpt_kind kinds[] = {HFL_CKPT_NONE, HFL_CKPT_SQRT, HFL_CKPT_OPTIMAL, HFL_CKPT_FULL};
    hfl_model_spec s;
    CHECK(hfl_model_builtin(model, &s, NULL) == 0);
    static hfl_plan plan;
    size_t arena[MAXC];
    uint64_t growth[MAXC], held[MAXC];
    int n = 0, all_held = cost.known;
    char err[HFL_ERR_LEN], name[MAXC][48];
    float *w = malloc(s.n_params * 4), *x = malloc((size_t)512 * s.in_dim * 4);
    int32_t *y = malloc(512 * 4);
    hfl_model_init_params(&s, w, 1);
    make_batch(x, y, &s, 512, 0);
    for (size_t b = 0; b < sizeof batches / sizeof *batches; b++)
        for (int p = 0; p < 3; p++)
            for (size_t k = 0; k < sizeof kinds / sizeof *kinds && n < MAXC; k++) {
                if (!(offered & (1u << p))) continue;
                hfl_plan_config cfg = {.batch = batches[b], .ckpt = kinds[k], .momentum = 1,
                                       .precision = (hfl_precision)p, .ckpt_budget = SIZE_MAX};
                hfl_plan_config_for_backend(&cfg, gpu);
                if (hfl_plan_make(&s, &cfg, &plan, err) != 0) continue;
                CHECK(plan.arena_bytes % granule == 0);
                int tails[HFL_MEASURE_TAILS], n_tails = hfl_measure_tails(batches[b], batches[b], 0, tails);
                hfl_step_measure m;
                if (hfl_measure_step_on(gpu, &s, &plan, w, x, y, tails, n_tails, &m, err) != 0) {
                    fprintf(stderr, "measure: %s\n", err);
                    CHECK(0);
                    continue;
                }
                /* the tail step ran: the trainer counted its rows */
                CHECK(m.rows == batches[b] + (n_tails ? tails[0] : 0));
                arena[n] = plan.arena_bytes;
                growth[n] = m.growth;
                all_held = all_held && m.process_bytes;
                held[n] = all_held && m.process_bytes > cost.bytes ? m.process_bytes - cost.bytes : 0;
                snprintf(name[n], sizeof name[n], "%s b%d %s %s", model, batches[b],
                         hfl_precision_name((hfl_precision)p), hfl_ckpt_name(kinds[k]));
                n++;
            }
    int bad = predict_report(model, "growth of used device memory (cudaMemGetInfo)", name, arena, growth, n);
    if (all_held) bad += predict_report(model, "held beyond the per-process cost (NVML)", name, arena, held, n);
    else printf("%s: no per-process figures: %s\n", model, cost.known ? "NVML stopped answering" : cost.why);
    CHECK(n > 0 && bad == 0);
    free(w), free(x), free(y);
}

static void test_budget(void) {
    hfl_model_spec s;
    CHECK(hfl_model_builtin("cnn", &s, NULL) == 0);
    char err[HFL_ERR_LEN];
    hfl_chooser_input in = {.be = gpu, .budget = UINT64_MAX / 4, .opt_state = HFL_OPT_MOMENTUM, .max_batch = 128,
                            .prefer_batch = 128, .precisions = 1u << HFL_PREC_FP32,
                            .gflops = {100, 100, 100}};
    hfl_choice ch;
    CHECK(hfl_choose(&s, &in, &ch, err) == 0 && ch.chosen >= 0);
    hfl_candidate first = ch.rows[ch.chosen];
    in.budget = first.predicted - 1;
    CHECK(hfl_choose(&s, &in, &ch, err) == 0 && ch.chosen >= 0);
    hfl_candidate second = ch.rows[ch.chosen];
    CHECK(second.predicted < first.predicted);
    /* the same batch at a smaller conv chunk, or a smaller batch or a schedule (plan/chooser.h) */
    printf("budget %zu - 1: chose batch %d %s conv chunk %d (arena %zu) instead of batch %d %s chunk %d\n",
           (size_t)first.predicted, second.batch, hfl_ckpt_name(second.ckpt), second.conv_chunk, second.arena,
           first.batch, hfl_ckpt_name(first.ckpt), first.conv_chunk);
    hfl_plan_config cfg;
    hfl_candidate_config(&second, HFL_OPT_MOMENTUM, &cfg);
    hfl_plan_config_for_backend(&cfg, gpu);
    static hfl_plan plan;
    CHECK(hfl_plan_make(&s, &cfg, &plan, err) == 0);
    hfl_budget_set(in.budget);
    float *w = malloc(s.n_params * 4), *x = malloc((size_t)second.batch * s.in_dim * 4);
    int32_t *y = malloc((size_t)second.batch * 4);
    hfl_model_init_params(&s, w, 3);
    make_batch(x, y, &s, second.batch, 1);
    hfl_trainer *t = hfl_trainer_create_plan(&s, gpu, &plan, err);
    CHECK(t != NULL);
    if (t) {
        float l = hfl_trainer_step(t, x, y, second.batch, 0.05f, 0.9f, 0.0f);
        CHECK(isfinite(l));
        /* NVML's figure holds at least the cost and the arena, and no more than the card */
        uint64_t process;
        if (cost.known && hfl_backend_process_bytes(gpu, &process, err) == 0) {
            printf("under the budget: the process holds %.2f MiB: %.2f MiB cost + %.2f MiB (arena %.2f MiB)\n",
                   process / 1048576.0, cost.bytes / 1048576.0, (process - cost.bytes) / 1048576.0,
                   plan.arena_bytes / 1048576.0);
            CHECK(process >= cost.bytes + plan.arena_bytes && process <= device_total);
        }
        hfl_trainer_free(t);
    }
    /* One byte less than this plan's arena is refused by the allocator itself. */
    hfl_budget_set(plan.arena_bytes - 1);
    CHECK(hfl_trainer_create_plan(&s, gpu, &plan, err) == NULL);
    CHECK(strstr(err, "memory budget") != NULL);
    hfl_budget_set(0);
    free(w), free(x), free(y);
}

/* This process's device memory now: NVML's figure, else 0 (and the caller
 * falls back to free memory). */
static uint64_t process_now(void) {
    uint64_t b;
    gpu->sync();
    return hfl_backend_process_bytes(gpu, &b, NULL) == 0 ? b : 0;
}

static uint64_t free_now(void) {
    uint64_t f = 0, t;
    gpu->sync();
    gpu->mem_info(&f, &t);
    return f;
}

/* The granule the driver names is the one cudaMalloc maps: an allocation of
 * 3 granules and a byte takes 4 whole granules, by NVML's figure for this
 * process (other processes cannot move it) and by free memory's. */
static void test_granularity(void) {
    printf("allocation granularity: %zu bytes\n", granule);
    CHECK(granule >= 4096 && (granule & (granule - 1)) == 0);
    size_t bytes = 3 * granule + 1;
    uint64_t p0 = process_now(), f0 = free_now();
    char err[HFL_ERR_LEN];
    void *b = gpu->try_alloc(bytes, err);
    REQUIRE_MSG(b != NULL, "%s", err);
    uint64_t p1 = process_now(), f1 = free_now();
    gpu->free(b);
    printf("cudaMalloc of %zu bytes: process +%lld bytes (NVML%s), free memory -%lld bytes\n", bytes,
           (long long)(p1 - p0), p0 ? "" : ": unavailable", (long long)(f0 - f1));
    if (p0 && p1) CHECK_MSG(p1 - p0 == 4 * granule, "NVML: +%llu, want %zu", (unsigned long long)(p1 - p0),
                            4 * granule);
    else CHECK_MSG(f0 - f1 == 4 * granule, "free memory: -%llu, want %zu", (unsigned long long)(f0 - f1),
                   4 * granule);
}

/* The tail shapes: once a measurement (hfl_measure_step_on) has run a step at
 * a tail shape, a training run's step at that shape adds no device memory
 * (its kernels are loaded), where it would have were the tail left out of
 * the measurement. mlp at batch 96 (a batch no other test here runs) and
 * its tail of 37; the control, a tail of 53 no measurement ran, says
 * whether lazy loading adds anything on this GPU at all (if it adds nothing,
 * the check had no teeth here, and it says so). Before every other test, so
 * that no shape here was seen before. */
static void test_tail_shapes(void) {
    hfl_model_spec s;
    CHECK(hfl_model_builtin("mlp", &s, NULL) == 0);
    static hfl_plan plan;
    char err[HFL_ERR_LEN];
    hfl_plan_config cfg = {.batch = 96, .ckpt = HFL_CKPT_NONE, .momentum = 1, .ckpt_budget = SIZE_MAX};
    hfl_plan_config_for_backend(&cfg, gpu);
    REQUIRE(hfl_plan_make(&s, &cfg, &plan, err) == 0);
    float *w = malloc(s.n_params * 4), *x = malloc((size_t)96 * s.in_dim * 4);
    int32_t *y = malloc(96 * 4);
    hfl_model_init_params(&s, w, 2);
    make_batch(x, y, &s, 96, 3);
    int tail = 37;
    hfl_step_measure m;
    REQUIRE_MSG(hfl_measure_step_on(gpu, &s, &plan, w, x, y, &tail, 1, &m, err) == 0, "%s", err);
    CHECK(m.rows == 96 + 37);
    int nvml = process_now() != 0;
    hfl_trainer *t = hfl_trainer_create_plan(&s, gpu, &plan, err);
    REQUIRE_MSG(t != NULL, "%s", err);
    hfl_trainer_set_params(t, w);
    hfl_trainer_step(t, x, y, 96, 0.05f, 0.9f, 0.0f);
    uint64_t a = nvml ? process_now() : free_now();
    hfl_trainer_step(t, x, y, 37, 0.05f, 0.9f, 0.0f);
    uint64_t b = nvml ? process_now() : free_now();
    hfl_trainer_step(t, x, y, 53, 0.05f, 0.9f, 0.0f);
    uint64_t c = nvml ? process_now() : free_now();
    hfl_trainer_free(t);
    long long measured_tail = nvml ? (long long)(b - a) : (long long)(a - b);
    long long control = nvml ? (long long)(c - b) : (long long)(b - c);
    printf("tail shapes (%s): the measured tail of 37 added %lld bytes, the unmeasured control of 53 %lld%s\n",
           nvml ? "NVML" : "free memory", measured_tail, control,
           control ? "" : " (lazy loading added nothing here: this check had no teeth on this GPU)");
    CHECK(measured_tail == 0);
    free(w), free(x), free(y);
}

/* The calibration's GEMMs run in a workspace it gives cuBLAS and takes back:
 * it leaves no hfl allocation behind, and what it leaves in the process (the
 * kernels it loaded; a cuBLAS pool, were one made) is printed for the run to
 * read. */
static void test_calibration(void) {
    uint64_t live = hfl_budget_live_bytes(), p0 = process_now();
    double g[3];
    hfl_chooser_calibrate(gpu, offered, g);
    uint64_t p1 = process_now();
    printf("calibration: fp32 %.0f bf16 %.0f fp16 %.0f GFLOP/s; it left %lld bytes in the process (NVML%s)\n", g[0],
           g[1], g[2], (long long)(p1 - p0), p0 ? "" : ": unavailable");
    CHECK(g[HFL_PREC_FP32] > 0);
    CHECK(hfl_budget_live_bytes() == live);
}

static void test_steps_mlp(void) { test_steps("mlp", 64, 784); }
static void test_steps_cnn(void) { test_steps("cnn", 32, 3136); }
static void test_memory_mlp(void) { test_memory("mlp"); }
static void test_memory_cnn(void) { test_memory("cnn"); }

/* The GPU's cases; the stand-in runs steps_mlp alone (main). */
static const check_case cases[] = {
    {"tail_shapes", test_tail_shapes},
    {"granularity", test_granularity},
    {"calibration", test_calibration},
    {"steps_mlp", test_steps_mlp},
    {"steps_cnn", test_steps_cnn},
    {"budget", test_budget},
    {"memory_mlp", test_memory_mlp},
    {"memory_cnn", test_memory_cnn},
};

int main(int argc, char **argv) {
    hfl_device_info info;
    char why[HFL_ERR_LEN], err[HFL_ERR_LEN];
    const char *standin = getenv("HFL_GPU_STANDIN"); /* header comment */
    if (standin) {
        int legal = strcmp(standin, "legal") == 0;
        REQUIRE_MSG(legal || strcmp(standin, "split-k") == 0, "HFL_GPU_STANDIN=%s: expected legal or split-k",
                    standin);
        gpu = emu_backend(legal ? EMU_LEGAL : EMU_SPLITK, 2);
        cpu = hfl_backend_cpu();
        offered = 7;
        printf("stand-in: the CPU backend with the %s GEMM emulation\n", emu_names[legal ? EMU_LEGAL : EMU_SPLITK]);
        test_steps("mlp", 64, 784);
        return check_exit_code("test_cuda_train (stand-in)");
    }
    if (hfl_cuda_probe(&info, why, sizeof why) != 0) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    /* A GPU is there: failing to get the backend now is a failure, not a skip. */
    gpu = hfl_backend_select("cuda", &info, why, err);
    REQUIRE_MSG(gpu != NULL, "a GPU is present but the CUDA backend is not: %s", err);
    cpu = hfl_backend_cpu();
    offered = hfl_chooser_device_precisions(info.is_gpu, info.cc_major, info.cc_minor);
    printf("GPU: %s, cc %d.%d, PCI %s\n", info.name, info.cc_major, info.cc_minor, info.pci_bus_id);
    /* first, while the backend holds nothing but what opening it took */
    hfl_device_cost_get(NULL, info.name, gpu, &cost);
    granule = gpu->alloc_granularity > 1 ? gpu->alloc_granularity : 1;
    device_total = info.total_bytes;
    if (cost.known) printf("per-process cost (context and libraries, NVML): %.2f MiB\n", cost.bytes / 1048576.0);
    else printf("per-process cost unknown: %s\n", cost.why);
    return check_run("test_cuda_train", cases, CHECK_CASES(cases), argc, argv);
}
