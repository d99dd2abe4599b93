/* profile.h: a per-op profile of training steps on either backend
 * (hfl-client --plan --trial-step --profile, bench-gpu-train --profile).
 *
 * hfl_profile_wrap(be) returns a copy of be's table (and of its be->lm
 * table) whose device ops pass through one counting function before they
 * call be's: the ops are counted in that one place, not in each op. A
 * trainer made with the wrapped table runs exactly as with be; between
 * hfl_profile_begin and hfl_profile_end every op is counted by name and,
 * where the backend can time (be->mark), a timing mark is recorded before
 * it and one after the last: an op's time is from its mark to the next
 * one's, on the device's clock (cudaEvents on the compute stream, so it
 * includes the device's idle wait for the host to enqueue the next op) or
 * the CPU's. Outside a profile the wrapper only forwards: no mark, no sync.
 *
 * What counts as an op: everything a step enqueues on the device, that is
 * every compute op of kernels/backend.h and kernels/lm.h and the copies
 * (copy, upload, download, prefetch). Not ops: memory management, waits
 * and stream bookkeeping (alloc, free, sync, stage_wait, await_prefetch,
 * release_input, set_blas_workspace, host_waits, mem_info). Synchronisations
 * are the backend's own count of host waits (kernels/backend.h, HOST WAITS:
 * downloads, uploads and syncs) over the profile; reading the marks at the
 * end is not among them.
 *
 * One profile per process: the wrapper's ops cannot carry a context, so the
 * wrapped backend and the counts are the module's. */
#ifndef HFL_KERNELS_PROFILE_H
#define HFL_KERNELS_PROFILE_H

#include <stdio.h>

#include "kernels/backend.h"

#define HFL_PROFILE_MAX_OPS 48 /* op names: backend.h's and lm.h's device ops */

/* The ops counted, in table order (plan/step_ops.h lists a step's by the
 * same kinds, so its counts compare with a profile's by name). */
typedef enum {
    HFL_OPK_COPY, HFL_OPK_UPLOAD, HFL_OPK_DOWNLOAD, HFL_OPK_PREFETCH,
    HFL_OPK_GEMM, HFL_OPK_GEMM_STRIDED, HFL_OPK_BIAS_GRAD, HFL_OPK_RELU_FWD, HFL_OPK_RELU_BWD,
    HFL_OPK_SOFTMAX_XENT, HFL_OPK_SGD_STEP, HFL_OPK_ADAMW_STEP, HFL_OPK_PROX_GRAD, HFL_OPK_FILL,
    HFL_OPK_CONVERT, HFL_OPK_IM2COL, HFL_OPK_COL2IM, HFL_OPK_MAXPOOL_FWD, HFL_OPK_MAXPOOL_BWD,
    HFL_OPK_CHANNEL_BIAS_GRAD, HFL_OPK_UNSCALE_GRADS, HFL_OPK_SCALER_UPDATE,
    HFL_OPK_EMBED_FWD, HFL_OPK_EMBED_BWD, HFL_OPK_LAYERNORM_FWD, HFL_OPK_LAYERNORM_BWD,
    HFL_OPK_GELU_FWD, HFL_OPK_GELU_BWD, HFL_OPK_HEADS_GATHER, HFL_OPK_HEADS_SCATTER,
    HFL_OPK_CAUSAL_SOFTMAX, HFL_OPK_CAUSAL_SOFTMAX_BWD,
    HFL_OPK_COUNT
} hfl_op_kind;

/* The op's name in a profile: "gemm", "im2col", "lm.layernorm_fwd"; "?" out of range. */
const char *hfl_op_kind_name(hfl_op_kind k);

typedef struct {
    const char *name;  /* the op's slot in the table: "gemm", "im2col", "lm.layernorm_fwd" */
    double count;      /* calls per step */
    double ms;         /* milliseconds per step (0 when untimed) */
} hfl_profile_row;

typedef struct {
    int steps;             /* the steps the profile covered (hfl_profile_end's) */
    int timed;             /* 1: every op was timed (the backend marks, and they fitted) */
    double ops_per_step;   /* every op counted, per step */
    double syncs_per_step; /* host waits per step */
    double ms_per_step;    /* the profile's time from first mark to last, per step */
    int n_rows;            /* rows: the ops called at least once, in table order */
    hfl_profile_row rows[HFL_PROFILE_MAX_OPS];
} hfl_profile_report;

/* The counting table around be (which must outlive it). Wrapping again
 * replaces the wrapped backend; a profile must not be running. */
const hfl_backend *hfl_profile_wrap(const hfl_backend *be);
/* Zeroes the counts and starts counting and marking. */
void hfl_profile_begin(void);
/* Stops, reads the marks (waiting for the device) and writes the counts
 * and times divided by `steps` (>= 1) into *out. */
void hfl_profile_end(int steps, hfl_profile_report *out);

/* The report as a table, one line per op and a totals line; clock: "cpu
 * clock" or "device events" (be->host_memory). */
void hfl_profile_print(FILE *f, const hfl_profile_report *p, const char *clock);

#endif
