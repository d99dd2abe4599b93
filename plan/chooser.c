/* chooser.c: candidates, predictions and the choice (see chooser.h). */
#include "plan/chooser.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static const int chooser_ladder[] = {1, 8, 32, 128, 512};
static const hfl_ckpt_kind chooser_kinds[] = {HFL_CKPT_NONE, HFL_CKPT_SQRT, HFL_CKPT_OPTIMAL, HFL_CKPT_FULL};

/* One N^3 GEMM in precision p (ws: the staging of a 2-byte one on the CPU). */
static void calibrate_gemm(const hfl_backend *be, hfl_precision p, void *a, void *b, void *c, void *ws, int n) {
    be->gemm(p, 0, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, NULL, HFL_BIAS_NONE, ws);
}

/* The calibration's memory: three N x N fp32 matrices and a workspace, N as
 * asked or halved down to CAL_MIN_N while try_alloc refuses (a budget, a
 * card already full), so calibrating never exits the process. The workspace
 * is a 2-byte gemm's fp32 staging on the CPU and, on a device, the BLAS workspace
 * (blas_ws_bytes) handed to the library for the calibration and taken back
 * after: with one, cuBLAS runs its GEMMs in it and never creates a pool of
 * its own that would outlive the calibration, unplanned and unmeasured. */
#define CAL_MIN_N 64
typedef struct {
    int n;
    float *abc;
    void *ws;
    size_t ws_bytes;
} calibrate_memory;

static int calibrate_alloc(const hfl_backend *be, int n, calibrate_memory *m, char *err) {
    for (; n >= CAL_MIN_N; n /= 2) {
        m->n = n;
        m->ws_bytes =
            be->host_memory ? hfl_gemm_ws_bytes(HFL_PREC_BF16, 0, n, n, n) : be->blas_ws_bytes;
        m->abc = be->try_alloc(sizeof(float) * (size_t)n * n * 3, err);
        m->ws = m->abc && m->ws_bytes ? be->try_alloc(m->ws_bytes, err) : NULL;
        if (m->abc && (m->ws || !m->ws_bytes)) {
            if (!be->host_memory && m->ws) be->set_blas_workspace(m->ws, m->ws_bytes);
            return 0;
        }
        be->free(m->abc);
    }
    return -1;
}

static void calibrate_release(const hfl_backend *be, calibrate_memory *m) {
    if (!be->host_memory && m->ws) be->set_blas_workspace(NULL, 0); /* before the buffer goes */
    be->free(m->ws);
    be->free(m->abc);
}

/* GEMM rate per precision over 50 ms of N^3 GEMMs. A GPU needs a larger N
 * (a 256^3 GEMM there is launch latency, not throughput) and a sync before
 * the clock is read. */
static void chooser_calibrate_here(const hfl_backend *be, unsigned precisions, double gflops[3]) {
    calibrate_memory m;
    char err[HFL_ERR_LEN] = "";
    gflops[0] = gflops[1] = gflops[2] = 0;
    if (calibrate_alloc(be, be->host_memory ? 256 : 2048, &m, err) != 0) {
        fprintf(stderr, "hfl: calibration: no memory for even a %d^3 GEMM: %s\n", CAL_MIN_N, err);
        return;
    }
    const int N = m.n;
    float *a = m.abc, *b = a + (size_t)N * N, *c = b + (size_t)N * N;
    void *ws =
        be->host_memory ? m.ws : NULL;    /* a 2-byte gemm's staging; a device's is the library's */
    be->fill(a, 0.0f, (size_t)N * N * 3); /* zero bits are 0.0 in every precision */
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++) {
        if (!(precisions & (1u << p))) continue; /* e.g. bf16 on a GPU without it */
        calibrate_gemm(be, (hfl_precision)p, a, b, c, ws, N); /* warm up: BLAS buffers, caches */
        be->sync();
        double t0 = hfl_now(), t;
        int reps = 0;
        do {
            calibrate_gemm(be, (hfl_precision)p, a, b, c, ws, N);
            be->sync();
            reps++;
        } while ((t = hfl_now() - t0) < 0.05);
        gflops[p] = 2.0 * N * N * N * reps / t / 1e9;
    }
    calibrate_release(be, &m);
}

/* On the CPU in a forked child (the parent's heap and BLAS buffers stay as
 * they were); a device backend in-process, since CUDA cannot be used in a
 * child forked after the parent initialised it. */
/* On the CPU, 2-byte storage is widened around the same fp32 GEMMs
 * (cpu_gemm), so it is never faster than fp32: a timing that says so is
 * noise (seen under load: 8 of 10 clients chose a 2-byte type), and the
 * device's capability decides. 2-byte precisions then win only on memory. */
static void cap_emulated(const hfl_backend *be, double gflops[3]) {
    if (!be->host_memory) return;
    for (int p = HFL_PREC_BF16; p <= HFL_PREC_FP16; p++)
        if (gflops[p] > gflops[HFL_PREC_FP32]) gflops[p] = gflops[HFL_PREC_FP32];
}

/* What the calibrating child sends back. */
typedef struct {
    double gflops[3];
    hfl_op_costs ops;
} calibration_result;

static void calibrate_here(const hfl_backend *be, unsigned precisions, int with_ops, calibration_result *r) {
    memset(r, 0, sizeof *r);
    chooser_calibrate_here(be, precisions, r->gflops);
    if (with_ops) hfl_op_costs_measure(be, precisions, &r->ops);
}

void hfl_chooser_calibrate_ops(const hfl_backend *be, unsigned precisions, double gflops[3], hfl_op_costs *ops) {
    calibration_result *r = hfl_calloc(1, sizeof *r);
    int fd[2];
    if (!be->host_memory) {
        calibrate_here(be, precisions, ops != NULL, r);
    } else if (pipe(fd) == 0) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            close(fd[0]);
            calibrate_here(be, precisions, ops != NULL, r);
            const char *p = (const char *)r;
            size_t left = sizeof *r;
            while (left > 0) { /* larger than an atomic pipe write */
                ssize_t w = write(fd[1], p, left);
                if (w <= 0) _exit(1);
                p += w, left -= (size_t)w;
            }
            _exit(0);
        }
        close(fd[1]);
        char *p = (char *)r;
        size_t got = 0;
        ssize_t n;
        while (pid > 0 && got < sizeof *r &&
               ((n = read(fd[0], p + got, sizeof *r - got)) > 0 || (n < 0 && errno == EINTR)))
            if (n > 0) got += (size_t)n;
        if (got != sizeof *r) memset(r, 0, sizeof *r);
        close(fd[0]);
        if (pid > 0) waitpid(pid, NULL, 0);
        cap_emulated(be, r->gflops);
    }
    memcpy(gflops, r->gflops, sizeof r->gflops);
    if (ops) *ops = r->ops;
    free(r);
}

void hfl_chooser_calibrate(const hfl_backend *be, unsigned precisions, double gflops[3]) {
    hfl_chooser_calibrate_ops(be, precisions, gflops, NULL);
}

unsigned hfl_chooser_device_precisions(int is_gpu, int cc_major, int cc_minor) {
    unsigned all = 1u << HFL_PREC_FP32 | 1u << HFL_PREC_BF16 | 1u << HFL_PREC_FP16;
    if (!is_gpu) return all;
    int cc = cc_major * 10 + cc_minor;
    return 1u << HFL_PREC_FP32 | (cc >= 75 ? 1u << HFL_PREC_FP16 : 0) |
           (cc >= 80 ? 1u << HFL_PREC_BF16 : 0);
}

void hfl_candidate_config(const hfl_candidate *c, unsigned opt_state, hfl_plan_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->batch = c->batch;
    cfg->ckpt = c->ckpt;
    cfg->ckpt_budget = c->ckpt_budget;
    cfg->precision = c->precision;
    cfg->momentum = (opt_state & HFL_OPT_MOMENTUM) != 0;
    cfg->anchor = (opt_state & HFL_OPT_ANCHOR) != 0;
    cfg->adamw = (opt_state & HFL_OPT_ADAMW) != 0;
    cfg->act_elem_bytes = 0; /* from the precision */
    cfg->conv_chunk = c->conv_chunk; /* 0: hfl_plan_config_for_backend gives the backend's */
}

/* The chunk a candidate of `batch` rows plans first (CONV CHUNK in
 * chooser.h): 0 for a model without conv layers, else the input's or the
 * backend's, at least one sample and at most the batch. */
static int first_chunk(const hfl_model_spec *spec, const hfl_chooser_input *in, int batch) {
    int conv = 0;
    for (int l = 0; l < spec->n_layers; l++) conv |= spec->layers[l].kind == HFL_LAYER_CONV2D;
    if (!conv) return 0;
    int chunk = in->conv_chunk ? in->conv_chunk : in->be ? in->be->conv_chunk : 1;
    return chunk < 1 ? 1 : chunk > batch ? batch : chunk;
}

/* Plans c into p at its chunk, halving the chunk while the prediction
 * (arena + extra) is over usable (CONV CHUNK in chooser.h). */
static int plan_candidate(const hfl_model_spec *spec, const hfl_chooser_input *in, hfl_candidate *c,
                          uint64_t extra, uint64_t usable, hfl_plan *p, char *err) {
    for (;;) {
        hfl_plan_config cfg;
        hfl_candidate_config(c, in->opt_state, &cfg);
        if (in->be) hfl_plan_config_for_backend(&cfg, in->be);
        if (hfl_plan_make(spec, &cfg, p, err) != 0) return -1;
        if (c->conv_chunk <= 1 || p->arena_bytes + extra <= usable) return 0;
        c->conv_chunk = (c->conv_chunk + 1) / 2;
    }
}

/* `optimal` gets the activation budget left once everything but activations is paid for. */
static size_t optimal_budget(const hfl_plan *none, uint64_t usable) {
    size_t other = none->arena_bytes > none->chain_peak ? none->arena_bytes - none->chain_peak : 0;
    return usable > other ? (size_t)(usable - other) : 0;
}

/* Predicted speeds closer than this (relative) are a tie: the rates behind
 * them are measurements, and a choice should not flip on their noise. */
#define CHOOSER_TIE 0.05

/* emulated: the backend widens 2-byte operands around fp32 GEMMs (the CPU,
 * cpu_gemm), so a 2-byte step is never faster there (a GPT block's step
 * measured ~2x slower in bf16: bench/lm_block.sh), and the 2048^3 GEMM the
 * calibration times hides the widening: its 2-byte rate lands within noise
 * of the 5% tie, and fresh state dirs chose fp32 or bf16 by chance. On such
 * a backend the precision is decided by capability, not timing: fp32
 * whenever an fp32 candidate fits, a 2-byte one only for memory. The run's
 * batch still comes first: with --allow-smaller-batch a 2-byte step over
 * the whole batch beats an fp32 one over fewer rows. */
static int better(const hfl_candidate *a, const hfl_candidate *b, int prefer, int emulated) {
    if (prefer > 0 && (a->step_batch == prefer) != (b->step_batch == prefer)) return a->step_batch == prefer;
    if (emulated && (a->precision == HFL_PREC_FP32) != (b->precision == HFL_PREC_FP32))
        return a->precision == HFL_PREC_FP32;
    double fa = a->samples_per_s, fb = b->samples_per_s;
    if (fa > fb * (1 + CHOOSER_TIE) || fb > fa * (1 + CHOOSER_TIE)) return fa > fb;
    if (a->batch != b->batch) return a->batch > b->batch;
    if (a->precision != b->precision) return a->precision < b->precision; /* fp32, bf16, fp16: widest first */
    if (fa != fb) return fa > fb; /* less recompute */
    /* the same work: the plainer schedule, so that the learned overhead's
     * noise (it differs by schedule and by what was measured first) never
     * flips the choice between runs (an mlp's optimal schedule drops nothing) */
    if (a->ckpt != b->ckpt) return a->ckpt < b->ckpt;
    return a->predicted < b->predicted;
}

/* The (micro-)batches to plan, smallest first, each with its accumulation
 * steps and rows per optimizer step (THE RUN'S BATCH in chooser.h). */
typedef struct {
    int batch, accum, step;
} chooser_batch;

static int chooser_batches(const hfl_chooser_input *in, chooser_batch *out) {
    int n = 0, B = in->prefer_batch;
    if (B <= 0) {
        for (size_t i = 0; i < sizeof chooser_ladder / sizeof *chooser_ladder; i++)
            if (chooser_ladder[i] <= in->max_batch)
                out[n++] = (chooser_batch){chooser_ladder[i], 1, chooser_ladder[i]};
        return n;
    }
    out[n++] = (chooser_batch){B, 1, B};
    if (in->allow_smaller) {
        for (size_t i = 0; i < sizeof chooser_ladder / sizeof *chooser_ladder; i++)
            if (chooser_ladder[i] < B) out[n++] = (chooser_batch){chooser_ladder[i], 1, chooser_ladder[i]};
    } else {
        for (int k = 2, last = B; last > 1 && n < 17; k *= 2) {
            int m = (B + k - 1) / k;
            if (m == last) continue;
            out[n++] = (chooser_batch){m, (B + m - 1) / m, B};
            last = m;
        }
    }
    /* Smallest first, a real batch before a micro-batch of the same size. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (out[j].batch < out[j - 1].batch ||
                                  (out[j].batch == out[j - 1].batch && out[j].accum < out[j - 1].accum)); j--) {
            chooser_batch t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

int hfl_choose(const hfl_model_spec *spec, const hfl_chooser_input *in, hfl_choice *out, char *err) {
    memset(out, 0, sizeof *out);
    out->chosen = -1;
    out->min_budget = out->min_arena_budget = UINT64_MAX;
    uint64_t usable = (uint64_t)((double)in->budget * (1.0 - in->headroom));
    int emulated = in->be && in->be->host_memory;
    double fwd = (double)hfl_model_forward_flops(spec);
    hfl_plan *plan = hfl_malloc(sizeof *plan), *none = hfl_malloc(sizeof *none);
    chooser_batch batches[24];
    int n_batches = chooser_batches(in, batches);
    int rc = 0;
    for (int bp = 0; bp < n_batches * 3 && rc == 0; bp++) {
        int batch = batches[bp / 3].batch;
        hfl_precision prec = (hfl_precision)(bp % 3);
        if (!(in->precisions & (1u << prec))) continue;
        for (size_t ki = 0; ki < sizeof chooser_kinds / sizeof *chooser_kinds; ki++) {
            hfl_candidate *c = &out->rows[out->n];
            c->batch = batch;
            c->accum = batches[bp / 3].accum;
            c->step_batch = batches[bp / 3].step;
            c->precision = prec;
            c->ckpt = chooser_kinds[ki];
            uint64_t extra = in->overhead ? in->overhead(in->overhead_ctx, prec, batch, c->ckpt) : 0;
            c->ckpt_budget = c->ckpt == HFL_CKPT_OPTIMAL ? optimal_budget(none, usable > extra ? usable - extra : 0)
                                                         : SIZE_MAX;
            c->conv_chunk = first_chunk(spec, in, batch);
            hfl_plan *p = c->ckpt == HFL_CKPT_NONE ? none : plan;
            if ((rc = plan_candidate(spec, in, c, extra, usable, p, err)) != 0) break;
            c->arena = p->arena_bytes;
            c->predicted = p->arena_bytes + extra;
            double step_s = hfl_step_time_s(in->op_costs, p, c->step_batch, p->anchor >= 0);
            double flops = 3.0 * fwd * batch + p->ckpt.recompute;
            c->per_op = step_s > 0 && isfinite(c->step_batch / step_s); /* subnormal costs kept in a state file: the FLOP model */
            if (c->per_op) c->samples_per_s = c->step_batch / step_s;
            else c->samples_per_s = in->gflops[prec] > 0 ? batch / (flops / (in->gflops[prec] * 1e9)) : 0;
            c->fits = c->predicted <= usable;
            uint64_t need = (uint64_t)ceil((double)c->predicted / (1.0 - in->headroom));
            if (need < out->min_budget) out->min_budget = need;
            need = (uint64_t)ceil((double)c->arena / (1.0 - in->headroom));
            if (need < out->min_arena_budget) out->min_arena_budget = need;
            if (c->fits && (out->chosen < 0 || better(c, &out->rows[out->chosen], in->prefer_batch, emulated))) out->chosen = out->n;
            out->n++;
        }
    }
    free(plan);
    free(none);
    return rc;
}

const char *hfl_choice_speed_model(const hfl_choice *ch) {
    int per_op = 0;
    for (int i = 0; i < ch->n; i++) per_op += ch->rows[i].per_op;
    return per_op == 0 ? "flops" : per_op == ch->n ? "per-op" : "mixed";
}
