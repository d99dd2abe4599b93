/* op_cost.c: a step's time as the sum of its ops' costs, the calibration
 * that times each op kind on synthetic shapes, and the costs' JSON
 * (op_cost.h). */
#include "plan/op_cost.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/lm.h"
#include "util/util.h"

/* The two sizes each non-GEMM op is timed at, in elements of work
 * (step_ops.h): a call dominated by its fixed cost, and one past the
 * per-core L2 of current CPUs (1-2 MiB) as the larger tensors of a step are,
 * so that its cost per element is the streaming one. */
#define OP_COST_SMALL 4096.0
#define OP_COST_LARGE (256.0 * 1024)
#define OP_COST_BUFFERS 8   /* OP_COST_LARGE floats each */
#define OP_COST_MIN_S 1e-4  /* a timing repeats its call until it lasts this long */
#define OP_COST_ROUNDS 3    /* timings of each call; the fastest is kept: load only slows a call */

/* Synthetic geometries (none a built-in model's), sized by the work asked. */
#define SYN_CLASSES 64   /* softmax_xent's columns */
#define SYN_BIAS_COLS 256
#define SYN_LM_C 128     /* layer norm and embedding width */
#define SYN_LM_T 32      /* context */
#define SYN_LM_V 512
#define SYN_HEADS 4
#define SYN_HEAD_SIZE 32

/* GEMM shapes timed, each with the three transposes the layers use (x W^T
 * forward, dW = dy^T x, dx = dy W): tiny, square at three sizes, thin in
 * each dimension (one of m, n, k at 8 or 32, the others large: a small
 * batch's GEMMs, and K = 9 or 25 in a first convolution), and large with
 * one shorter side. Chosen so that the fit sees the per-call cost, the
 * packing of large operands around a thin one, and the large-GEMM rate
 * (a set of small shapes only, up to 512 x 128 x 128, put every model's
 * GEMMs at 0.5-0.8x their time here, and unevenly). */
static const int gemm_shapes[][3] = {
    {8, 8, 8},       {32, 32, 32},    {128, 128, 128}, {8, 512, 512},  {512, 8, 512},   {512, 512, 8},
    {128, 512, 512}, {512, 128, 512}, {512, 512, 128}, {2048, 32, 32}, {32, 2048, 32}, {32, 32, 2048},
};
static const int gemm_trans[][2] = {{0, 1}, {1, 0}, {0, 0}};
#define N_GEMM_SHAPES ((int)(sizeof gemm_shapes / sizeof *gemm_shapes))
#define N_GEMM_TIMINGS (N_GEMM_SHAPES * 3)

static int is_gemm(hfl_op_kind k) { return k == HFL_OPK_GEMM || k == HFL_OPK_GEMM_STRIDED; }

double hfl_op_cost_s(const hfl_op_cost_table *c, const hfl_step_op *op) {
    if (is_gemm(op->kind)) {
        double m = op->m, n = op->n, k = op->k;
        return op->count * (c->gemm[0] + c->gemm[1] * 2.0 * m * n * k + c->gemm[2] * (m * k + k * n + m * n));
    }
    return c->fixed[op->kind] + c->per_unit[op->kind] * op->work;
}

typedef struct {
    const hfl_op_cost_table *c;
    double s;
} step_sum;

static void sum_op(void *ctx, const hfl_step_op *op) {
    step_sum *s = ctx;
    s->s += hfl_op_cost_s(s->c, op);
}

double hfl_step_time_s(const hfl_op_costs *costs, const hfl_plan *plan, int step_batch, int opt_prox) {
    hfl_precision p = plan->cfg.precision;
    if (!costs || !(costs->precisions & (1u << p))) return 0;
    step_sum s = {&costs->p[p], 0};
    hfl_step_ops(plan, step_batch, opt_prox, sum_op, &s);
    return s.s;
}

/* ---- calibration ---- */

typedef struct {
    hfl_precision t;
    void *buf[OP_COST_BUFFERS]; /* device memory, zeroed: 0 in every type, token 0, label 0 */
    hfl_step_scalars *sc;
    void *ws;                   /* a 2-byte GEMM's fp32 staging on the CPU */
    float *host;                /* OP_COST_LARGE floats of host memory: upload, download */
} cal_bufs;

/* One timed call: an op kind at `size` elements of work, or a GEMM. */
typedef struct {
    hfl_op_kind kind;
    double size;
    int ta, tb, m, n, k;
} cal_call;

static int per(double size, int each) { return size / each < 1 ? 1 : (int)(size / each); }

static void cal_issue_lm(const hfl_lm_ops *lm, cal_bufs *b, const cal_call *c) {
    hfl_precision t = b->t;
    void *x = b->buf[0], *y = b->buf[1], *z = b->buf[2], *u = b->buf[3];
    float *f6 = b->buf[6], *f7 = b->buf[7];
    size_t n = (size_t)c->size;
    int rows = per(c->size, SYN_LM_C), T = SYN_LM_T, C = SYN_LM_C, V = SYN_LM_V;
    int heads_n = per(c->size, T * SYN_HEADS * SYN_HEAD_SIZE), sm_rows = per(c->size, T);
    switch (c->kind) {
    case HFL_OPK_EMBED_FWD: lm->embed_fwd(t, y, x, z, u, rows, T, C, V); break;
    case HFL_OPK_EMBED_BWD: lm->embed_bwd(t, f6, f7, y, x, rows, T, C, V, 0); break;
    case HFL_OPK_LAYERNORM_FWD: lm->layernorm_fwd(t, y, f6, f7, x, z, u, rows, C); break;
    case HFL_OPK_LAYERNORM_BWD:
        lm->layernorm_bwd(t, b->buf[4], f6, f6 + C, y, x, z, f7, f7 + rows, rows, C, 0, 0);
        break;
    case HFL_OPK_GELU_FWD: lm->gelu_fwd(t, y, x, n); break;
    case HFL_OPK_GELU_BWD: lm->gelu_bwd(t, z, y, x, n); break;
    case HFL_OPK_HEADS_GATHER:
        lm->heads_gather(t, y, x, heads_n, T, SYN_HEADS, SYN_HEAD_SIZE, SYN_HEADS * SYN_HEAD_SIZE);
        break;
    case HFL_OPK_HEADS_SCATTER:
        lm->heads_scatter(t, y, x, heads_n, T, SYN_HEADS, SYN_HEAD_SIZE, SYN_HEADS * SYN_HEAD_SIZE);
        break;
    case HFL_OPK_CAUSAL_SOFTMAX: lm->causal_softmax(t, y, x, (size_t)sm_rows, T, 0.125f); break;
    case HFL_OPK_CAUSAL_SOFTMAX_BWD: lm->causal_softmax_bwd(t, z, y, x, (size_t)sm_rows, T, 0.125f); break;
    default: break;
    }
}

/* Issues call c on be (the real backend, or step_ops' recorder to learn
 * its work). prefetch is costed as upload (cal_fit): the same copy, without
 * the staging slots a lone call cannot have. */
static void cal_issue(const hfl_backend *be, cal_bufs *b, const cal_call *c) {
    hfl_precision t = b->t;
    void *x = b->buf[0], *y = b->buf[1], *z = b->buf[2], *u = b->buf[3], *v = b->buf[4];
    float *fx = x, *fy = y, *fz = z, *fu = u;
    size_t n = (size_t)c->size;
    hfl_window_geom conv = hfl_window_geom_make(4, 16, 16, 3, 1, 1), pool = hfl_window_geom_make(16, 16, 16, 2, 2, 0);
    int conv_n = per(c->size, 4 * 9 * 16 * 16), pool_n = per(c->size, 16 * 4 * 8 * 8);
    int xent_rows = per(c->size, SYN_CLASSES);
    hfl_adamw_args adam = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step_size = 1e-3f, .bc2_sqrt = 1};
    switch (c->kind) {
    case HFL_OPK_GEMM:
        be->gemm(t, 0, c->ta, c->tb, c->m, c->n, c->k, 1.0f, x, c->ta ? c->m : c->k, y, c->tb ? c->k : c->n, 0.0f, z,
                 c->n, NULL, HFL_BIAS_NONE, be->host_memory ? b->ws : NULL); /* a device's: the library's */
        break;
    case HFL_OPK_COPY: be->copy(y, x, n * 4); break;
    case HFL_OPK_UPLOAD: be->upload(y, b->host, n * 4); break;
    case HFL_OPK_DOWNLOAD: be->download(b->host, x, n * 4); break;
    case HFL_OPK_BIAS_GRAD: be->bias_grad(t, fy, x, per(c->size, SYN_BIAS_COLS), SYN_BIAS_COLS, 0); break;
    case HFL_OPK_RELU_FWD: be->relu_fwd(t, y, x, n); break;
    case HFL_OPK_RELU_BWD: be->relu_bwd(t, z, y, x, n); break;
    case HFL_OPK_SOFTMAX_XENT:
        be->softmax_xent(t, x, b->buf[5], y, xent_rows, SYN_CLASSES, xent_rows, b->sc,
                         t == HFL_PREC_FP32 ? NULL : fz);
        break;
    case HFL_OPK_SGD_STEP: be->sgd_step(t, fx, fy, fz, u, n, 0.01f, 0.9f, 0.0f, NULL); break;
    case HFL_OPK_ADAMW_STEP: be->adamw_step(t, fx, fy, fz, fu, v, n, adam, NULL); break;
    case HFL_OPK_PROX_GRAD: be->prox_grad(fx, fy, fz, n, 0.01f); break;
    case HFL_OPK_FILL: be->fill(fx, 0.0f, n); break;
    case HFL_OPK_CONVERT: be->convert(t, y, fx, n); break;
    case HFL_OPK_IM2COL: be->im2col(t, y, x, conv_n, conv); break;
    case HFL_OPK_COL2IM: be->col2im(t, x, fy, conv_n, conv); break;
    case HFL_OPK_MAXPOOL_FWD: be->maxpool_fwd(t, y, x, pool_n, pool); break;
    case HFL_OPK_MAXPOOL_BWD: be->maxpool_bwd(t, z, y, x, pool_n, pool); break;
    case HFL_OPK_CHANNEL_BIAS_GRAD: be->channel_bias_grad(t, fy, x, per(c->size, 16 * 256), 16, 256, 0); break;
    case HFL_OPK_UNSCALE_GRADS: be->unscale_grads(fx, n, b->sc); break;
    case HFL_OPK_SCALER_UPDATE: be->scaler_update(b->sc, 2000); break;
    default:
        if (be->lm) cal_issue_lm(be->lm, b, c);
        break;
    }
}

static void take_op(void *ctx, const hfl_step_op *op) { *(hfl_step_op *)ctx = *op; }

/* The work of call c as step_ops.h defines it: the recorder's record of it;
 * 0 when the call issued no op of its kind, or none with work (an op kind
 * cal_issue does not know: its timing would be of nothing). */
static double cal_work(cal_bufs *b, const cal_call *c) {
    hfl_step_op op = {.kind = HFL_OPK_COUNT};
    cal_issue(hfl_step_ops_recorder(take_op, &op), b, c);
    return op.kind == c->kind && op.work > 0 ? op.work : 0;
}

/* Seconds per call of c: enough back-to-back calls (then one sync) to
 * last OP_COST_MIN_S. */
static double cal_time(const hfl_backend *be, cal_bufs *b, const cal_call *c) {
    for (int reps = 1;; reps *= 2) {
        double t0 = hfl_now();
        for (int i = 0; i < reps; i++) cal_issue(be, b, c);
        be->sync();
        double t = hfl_now() - t0;
        if (t >= OP_COST_MIN_S || reps >= 1 << 14) return t / reps;
    }
}

/* Each call's fastest of OP_COST_ROUNDS timings, taken in sweeps over all
 * of them, so that a burst of load from elsewhere slows one timing of a
 * call rather than all of them. The first sweep warms each call (first
 * touch, caches, the BLAS's buffers) before timing it. */
static void cal_sweeps(const hfl_backend *be, cal_bufs *b, const cal_call *calls, int n, double *secs) {
    for (int i = 0; i < n; i++) secs[i] = INFINITY;
    for (int r = 0; r < OP_COST_ROUNDS; r++)
        for (int i = 0; i < n; i++) {
            if (r == 0) {
                cal_issue(be, b, &calls[i]);
                be->sync();
            }
            double t = cal_time(be, b, &calls[i]);
            if (t < secs[i]) secs[i] = t;
        }
}

void hfl_op_cost_fit_line(double ws, double ts, double wl, double tl, double *fixed, double *per_unit) {
    double slope = wl > ws && tl > ts ? (tl - ts) / (wl - ws) : 0;
    *per_unit = slope;
    *fixed = ts - slope * ws > 0 ? ts - slope * ws : 0;
}

/* Normal equations of the relative-error least squares, solved by
 * Gauss-Jordan elimination with partial pivoting (3 unknowns). */
void hfl_op_cost_fit_gemm(const double feat[][3], const double *t, int n, double g[3]) {
    int use[3] = {1, 1, 1};
    for (int round = 0; round < 3; round++) {
        double a[3][4] = {{0}};
        for (int i = 0; i < n; i++)
            for (int r = 0; r < 3; r++) {
                for (int c = 0; c < 3; c++) a[r][c] += feat[i][r] * feat[i][c] / (t[i] * t[i]);
                a[r][3] += feat[i][r] / t[i];
            }
        for (int r = 0; r < 3; r++) /* a dropped term: its row and column say g_r = 0 */
            if (!use[r]) {
                for (int c = 0; c < 3; c++) a[r][c] = a[c][r] = 0;
                a[r][3] = 0;
                a[r][r] = 1;
            }
        for (int r = 0; r < 3; r++) { /* Gauss-Jordan with partial pivoting */
            int p = r;
            for (int q = r + 1; q < 3; q++)
                if (fabs(a[q][r]) > fabs(a[p][r])) p = q;
            for (int c = 0; c < 4; c++) {
                double s = a[r][c];
                a[r][c] = a[p][c];
                a[p][c] = s;
            }
            for (int q = 0; q < 3; q++) {
                if (q == r || a[r][r] == 0) continue;
                double f = a[q][r] / a[r][r];
                for (int c = 0; c < 4; c++) a[q][c] -= f * a[r][c];
            }
        }
        int negative = 0;
        for (int r = 0; r < 3; r++) {
            g[r] = use[r] && a[r][r] != 0 ? a[r][3] / a[r][r] : 0;
            if (g[r] < 0 || !isfinite(g[r])) use[r] = 0, negative = 1;
        }
        if (!negative) return;
    }
    for (int r = 0; r < 3; r++) if (g[r] < 0 || !isfinite(g[r])) g[r] = 0;
}

/* Every op kind at both sizes, and the GEMM shapes, in precision b->t; -1
 * (one line on stderr, the table empty) when a kind's calls issued nothing
 * to time, so that no op is priced at nothing: the FLOP model stands. */
#define N_CAL_CALLS (N_GEMM_TIMINGS + 2 * HFL_OPK_COUNT)
static int cal_precision(const hfl_backend *be, cal_bufs *b, hfl_op_cost_table *out) {
    memset(out, 0, sizeof *out);
    cal_call calls[N_CAL_CALLS];
    double feat[N_GEMM_TIMINGS][3], secs[N_CAL_CALLS];
    int n = 0;
    for (int i = 0; i < N_GEMM_TIMINGS; i++) {
        const int *s = gemm_shapes[i / 3], *tr = gemm_trans[i % 3];
        calls[n++] = (cal_call){.kind = HFL_OPK_GEMM, .ta = tr[0], .tb = tr[1], .m = s[0], .n = s[1], .k = s[2]};
        double m = s[0], nn = s[1], k = s[2];
        feat[i][0] = 1, feat[i][1] = 2 * m * nn * k, feat[i][2] = m * k + k * nn + m * nn;
    }
    for (int k = 0; k < HFL_OPK_COUNT; k++) {
        if (is_gemm((hfl_op_kind)k) || k == HFL_OPK_PREFETCH || (k >= HFL_OPK_EMBED_FWD && !be->lm)) continue;
        calls[n++] = (cal_call){.kind = (hfl_op_kind)k, .size = OP_COST_SMALL};
        calls[n++] = (cal_call){.kind = (hfl_op_kind)k, .size = OP_COST_LARGE};
    }
    cal_sweeps(be, b, calls, n, secs);
    hfl_op_cost_fit_gemm((const double(*)[3])feat, secs, N_GEMM_TIMINGS, out->gemm);
    for (int i = N_GEMM_TIMINGS; i < n; i += 2) {
        hfl_op_kind k = calls[i].kind;
        double ws = cal_work(b, &calls[i]), wl = cal_work(b, &calls[i + 1]);
        if (!(ws > 0 && wl >= ws)) { /* equal: work that does not grow (scaler_update) */
            fprintf(stderr, "hfl: per-op calibration: op kind %d issued nothing to time in %s; speeds from FLOPs\n",
                    (int)k, hfl_precision_name(b->t));
            memset(out, 0, sizeof *out);
            return -1;
        }
        hfl_op_cost_fit_line(ws, secs[i], wl, secs[i + 1], &out->fixed[k], &out->per_unit[k]);
    }
    out->fixed[HFL_OPK_PREFETCH] = out->fixed[HFL_OPK_UPLOAD];
    out->per_unit[HFL_OPK_PREFETCH] = out->per_unit[HFL_OPK_UPLOAD];
    return 0;
}

void hfl_op_costs_measure(const hfl_backend *be, unsigned precisions, hfl_op_costs *out) {
    memset(out, 0, sizeof *out);
    size_t each = (size_t)OP_COST_LARGE * sizeof(float);
    size_t ws_bytes = be->host_memory ? hfl_gemm_ws_bytes(HFL_PREC_BF16, 0, 512, 512, 512) : be->blas_ws_bytes;
    char err[HFL_ERR_LEN] = "";
    char *mem = be->try_alloc(each * OP_COST_BUFFERS + 64 + ws_bytes, err);
    float *host = be->host_alloc(each);
    if (!mem || !host) {
        fprintf(stderr, "hfl: per-op calibration: no memory for its buffers%s%s\n", err[0] ? ": " : "", err);
        be->free(mem);
        if (host) be->host_free(host);
        return;
    }
    cal_bufs b = {.sc = (hfl_step_scalars *)(mem + each * OP_COST_BUFFERS), .host = host};
    for (int i = 0; i < OP_COST_BUFFERS; i++) b.buf[i] = mem + each * i;
    b.ws = ws_bytes ? mem + each * OP_COST_BUFFERS + 64 : NULL;
    if (!be->host_memory && b.ws) be->set_blas_workspace(b.ws, ws_bytes); /* no pool of cuBLAS's own */
    be->fill((float *)mem, 0.0f, each * OP_COST_BUFFERS / sizeof(float));
    memset(host, 0, each);
    hfl_step_scalars sc = {.loss_scale = 1.0f, .finite = 1, .adam_beta1_pow = 1, .adam_beta2_pow = 1};
    be->upload(b.sc, &sc, sizeof sc);
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++) {
        if (!(precisions & (1u << p))) continue;
        b.t = (hfl_precision)p;
        if (cal_precision(be, &b, &out->p[p]) == 0) out->precisions |= 1u << p;
    }
    be->sync();
    if (!be->host_memory && b.ws) be->set_blas_workspace(NULL, 0);
    be->free(mem);
    be->host_free(host);
}

/* ---- JSON ---- */

cJSON *hfl_op_costs_json(const hfl_op_costs *c) {
    cJSON *o = cJSON_CreateObject();
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++) {
        if (!(c->precisions & (1u << p))) continue;
        cJSON *pj = cJSON_AddObjectToObject(o, hfl_precision_name((hfl_precision)p));
        cJSON_AddItemToObject(pj, "gemm", cJSON_CreateDoubleArray(c->p[p].gemm, 3));
        cJSON *ops = cJSON_AddObjectToObject(pj, "ops");
        for (int k = 0; k < HFL_OPK_COUNT; k++) {
            if (is_gemm((hfl_op_kind)k)) continue;
            double pair[2] = {c->p[p].fixed[k], c->p[p].per_unit[k]};
            cJSON_AddItemToObject(ops, hfl_op_kind_name((hfl_op_kind)k), cJSON_CreateDoubleArray(pair, 2));
        }
    }
    return o;
}

/* n seconds from array a into out: each a finite number in [0, 1). */
static int parse_costs(const cJSON *a, int n, double *out) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) return -1;
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 || v->valuedouble >= 1) return -1;
        out[i] = v->valuedouble;
    }
    return 0;
}

int hfl_op_costs_parse(const cJSON *o, unsigned precisions, hfl_op_costs *out, char *err) {
    memset(out, 0, sizeof *out);
    for (int p = HFL_PREC_FP32; p <= HFL_PREC_FP16; p++) {
        if (!(precisions & (1u << p))) continue;
        const char *name = hfl_precision_name((hfl_precision)p);
        const cJSON *pj = cJSON_GetObjectItemCaseSensitive(o, name);
        hfl_op_cost_table *t = &out->p[p];
        if (parse_costs(cJSON_GetObjectItemCaseSensitive(pj, "gemm"), 3, t->gemm) != 0)
            return hfl_errf(err, "op costs: %s: no gemm [g0, g1, g2] of seconds", name);
        const cJSON *ops = cJSON_GetObjectItemCaseSensitive(pj, "ops");
        for (int k = 0; k < HFL_OPK_COUNT; k++) {
            if (is_gemm((hfl_op_kind)k)) continue;
            double pair[2];
            const char *kn = hfl_op_kind_name((hfl_op_kind)k);
            if (parse_costs(cJSON_GetObjectItemCaseSensitive(ops, kn), 2, pair) != 0)
                return hfl_errf(err, "op costs: %s: no %s [fixed, per_unit] of seconds", name, kn);
            t->fixed[k] = pair[0];
            t->per_unit[k] = pair[1];
        }
        out->precisions |= 1u << p;
    }
    return 0;
}
