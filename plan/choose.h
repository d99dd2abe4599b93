/* choose.h: the memory promise's entry point, and the one budget object.
 *
 * hfl_plan_choose takes a request (a model, a backend, a budget, the
 * optimizer state to plan) and returns a choice: the configuration chosen
 * (plan/chooser.h), on request verified by measurement and planned
 * (plan/planner.h), and the budget it was chosen within. What it runs is
 * declared below it: the GEMM rates (calibrate.c), the measurements kept in
 * the state directory and the overhead model fitted on them
 * (overhead_log.c), and a candidate's real peak (verify.c). */
#ifndef HFL_PLAN_CHOOSE_H
#define HFL_PLAN_CHOOSE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "plan/chooser.h"
#include "plan/device_cost.h"
#include "plan/overhead.h"

/* THE BUDGET, from --memory-budget to the last breach check. It says what
 * the chooser plans within (with its headroom), sets the process-wide cap
 * every backend allocation reserves against (kernels/budget.h) once a
 * configuration is chosen, and checks every measured figure against the
 * promise: a figure over `bytes` marks it breached, with one line naming
 * both. */
typedef struct {
    uint64_t bytes;         /* --memory-budget; 0: none, and no figure breaches it */
    uint64_t planned;       /* what the chooser plans within: bytes, else the device's free memory */
    double headroom;        /* the share of planned no prediction may use */
    uint64_t predicted;     /* the chosen configuration's predicted peak (hfl_mem_budget_arm) */
    uint64_t footprint;     /* the step's real footprint: its first step's growth, else predicted */
    uint64_t measured_peak; /* the largest figure measured (0: none yet) */
    int breached;           /* a check found more than bytes: the client stops */
} hfl_mem_budget;
void hfl_mem_budget_init(hfl_mem_budget *b, uint64_t bytes, uint64_t free_bytes, double headroom);
/* What predictions must fit: planned less the headroom. */
uint64_t hfl_mem_budget_usable(const hfl_mem_budget *b);
/* The configuration predicted to peak at `predicted` is chosen: the process
 * cap is set to bytes (when there is a budget), so a breach fails loudly. */
void hfl_mem_budget_arm(hfl_mem_budget *b, uint64_t predicted);
/* -1 with err (and b->breached set) when peak is over the budget. */
int hfl_mem_budget_check(hfl_mem_budget *b, uint64_t peak, const char *when, char *err);

typedef struct {
    const hfl_model_spec *spec;
    const hfl_backend *be;
    const char *device;      /* the device's name: keys what state_dir keeps */
    const char *state_dir;   /* NULL or "": nothing kept */
    hfl_mem_budget budget;   /* hfl_mem_budget_init'd */
    unsigned precisions;     /* bit (1 << hfl_precision) per precision it may use */
    unsigned opt_state;      /* HFL_OPT_* bits */
    int max_batch, prefer_batch, allow_smaller, conv_chunk; /* as hfl_chooser_input's */
    double fleet_overhead;   /* the coordinator's overhead estimate for this device (hfl_overhead_init) */
    int64_t data_rows;       /* an epoch's rows, for the tail shapes measured (0: not known) */
    int verify;              /* 1: measure until the choice is measured to fit, then plan it */
    const char *who;         /* verify: the prefix of its lines on stdout; NULL: quiet */
} hfl_plan_request;

typedef struct {
    hfl_choice table;        /* every candidate; table.chosen: the pick, -1 when nothing fits */
    hfl_candidate chosen;    /* verify: the row chosen */
    hfl_plan *plan;          /* verify: its plan (malloc'd; the caller frees it) */
    hfl_mem_budget budget;   /* the request's; verify: armed with the chosen prediction */
    hfl_device_cost cost;    /* a GPU's per-process cost, read before anything else ran */
    double gflops[3];        /* the GEMM rates the FLOP model predicts from */
    hfl_op_costs op_costs;   /* the per-op costs the speeds were predicted from (precisions 0: none) */
    const char *overhead_source; /* hfl_overhead_source of fp32 */
    int overhead_records;    /* measurements the overhead model was fitted on */
    int measured;            /* verify: the candidates measured on the way */
} hfl_plan_choice;

/* Chooses a configuration for rq. Without verify: the chooser's table under
 * the overhead model (0 even when nothing fits: table.chosen is -1). With
 * verify, nothing is trusted unmeasured: a chosen configuration the state
 * directory has no measurement of is measured first (verify.c) and
 * recorded, and the chooser runs again with it, until it picks one measured
 * to fit; that one is planned and the budget armed. On a cold start the
 * overhead model's prior is conservative, so the first pick is small and
 * safe, and its measurement teaches the model the real overhead; when
 * nothing is predicted to fit, the smallest unmeasured candidate whose arena
 * fits is measured (the prior may be what rules it out). Each pass adds one
 * measured configuration, so the loop ends. -1 with err when the
 * chooser fails, or (verify) nothing fits, nothing was verified in
 * HFL_PLAN_VERIFY_MAX measurements, a measurement or its record failed. */
#define HFL_PLAN_VERIFY_MAX 8
int hfl_plan_choose(const hfl_plan_request *rq, hfl_plan_choice *out, char *err);

/* GEMM rates per precision for the chooser (plan/calibrate.c): the first
 * stored for this device and backend in state_dir that covers `precisions`,
 * else measured until stable (and stored when there is a state dir). With
 * ops and a state dir, the per-op costs (plan/op_cost.h) likewise: the
 * first stored that cover `precisions`, else measured once and stored
 * (ops->precisions 0 when that failed, or without a state dir: the FLOP
 * model). Returns the GEMM timing runs made (0: the stored rates). */
int hfl_calibrate(const char *state_dir, const char *device, const hfl_backend *be, unsigned precisions,
                  double gflops[3], hfl_op_costs *ops);
/* The overhead outside the arena (plan/overhead_log.c): the model
 * (plan/overhead.h) fitted on every measurement of this device and backend
 * under state_dir, and this model's configurations measured themselves. */
#define HFL_EXACT_MAX 256
typedef struct {
    hfl_overhead_model model;
    int n_exact;
    int exact_next; /* when full, the slot the next new configuration takes (the oldest) */
    struct {
        hfl_precision precision;
        int batch;
        hfl_ckpt_kind ckpt;
        int conv_chunk;  /* the candidate's (0: none, or a record from before chunks were kept) */
        double overhead; /* the largest measured - arena */
    } exact[HFL_EXACT_MAX];
} hfl_overhead_log;
/* spec must outlive ov (its predictions add spec's BLAS footprints).
 * held_basis: 1 where a GPU's figures are what the process holds beyond its
 * per-process cost (hfl_held_bytes works): only records measured so are
 * loaded; 0: only records measured otherwise (RSS, free device memory). */
void hfl_overhead_log_load(const char *state_dir, const char *device, const hfl_backend *be,
                           const hfl_model_spec *spec, double fleet_estimate, int held_basis,
                           hfl_overhead_log *ov);
/* What this process holds on a GPU beyond its per-process cost: NVML's
 * figure for it (*process, may be NULL) less cost->bytes. 0 when both are
 * known, -1 otherwise (the CPU backend; NVML cannot say): the caller then
 * measures as before (RSS, free device memory, hfl's allocator). */
int hfl_held_bytes(const hfl_backend *be, const hfl_device_cost *cost, uint64_t *held, uint64_t *process);
/* The running OpenBLAS core's blocking (plan/blas_footprint.h), NULL where
 * it is not modelled: a device backend, another core, more than one thread. */
const hfl_blas_blocking *hfl_blas_blocking_running(const hfl_backend *be);
/* Adds a measurement of candidate c of this model (in memory only). */
void hfl_overhead_log_add(hfl_overhead_log *ov, const hfl_candidate *c, uint64_t staging,
                          uint64_t measured);
/* 1 and the overhead when candidate c's configuration, its conv chunk
 * included, was measured itself, else 0. */
int hfl_overhead_log_exact(const hfl_overhead_log *ov, const hfl_candidate *c, uint64_t *overhead);
/* hfl_chooser_input's callback: a measured configuration's own overhead
 * (the largest over the conv chunks it was measured at: the bytes outside
 * the arena, which the chunk moves little; its arena the planner gives),
 * else the model's. */
uint64_t hfl_overhead_log_fn(void *ctx, hfl_precision p, int batch, hfl_ckpt_kind ckpt);
/* A GPU's memory figures as keys of o (a plan, hfl-client --plan --json):
 * context_bytes (the per-process cost; null when not known), context_source
 * (plan/device_cost.h), process_device_bytes (what NVML says this process
 * holds now, context included; null on the CPU or where NVML cannot say)
 * and alloc_granularity (1 on the CPU). */
void hfl_device_memory_json(cJSON *o, const hfl_backend *be, const hfl_device_cost *cost);
/* The same as one line on stdout, on a GPU only: who holds what, or why
 * there is no per-process figure. */
void hfl_device_memory_say(const char *who, const hfl_backend *be, const hfl_device_cost *cost);
/* Appends one measurement of candidate c, with NVML's figure for the whole
 * process then (process_bytes, 0: unknown) and, when `measured` is what the
 * process held beyond the per-process cost (hfl_held_bytes), that cost
 * (held_cost; NULL: `measured` is RSS growth or free memory's fall); -1
 * with err when the file cannot be written. */
int hfl_overhead_log_record(const char *state_dir, const char *device, const hfl_backend *be,
                            const hfl_model_spec *spec, const hfl_candidate *c, uint64_t staging,
                            uint64_t measured, uint64_t process_bytes, const hfl_device_cost *held_cost,
                            char *err);

/* Synthetic inputs and labels for `rows` samples of the model's shape (the
 * memory a step takes does not depend on the values): x rows * in_dim (token
 * ids below the vocabulary for a language model), y rows * label_rows;
 * plan/verify.c. */
void hfl_synthetic_batch(const hfl_model_spec *spec, int rows, float *x, int32_t *y);
/* Synthetic batches for measuring candidates of one model (plan/verify.c),
 * for a client whose epoch has data_rows rows (0: not known), which decide
 * the tail shapes measured with each step (plan/measure.h). */
typedef struct hfl_probe hfl_probe;
hfl_probe *hfl_probe_new(const hfl_model_spec *spec, int max_batch, int64_t data_rows);
void hfl_probe_free(hfl_probe *p);
/* The real peak of one step of candidate c on be, with its tail shapes: the
 * median of three measurements (plan/measure.h; two when the first two
 * agree, as they are then the median): on a GPU whose cost is
 * known, what the process then holds beyond it (as hfl_held_bytes; *held
 * = 1), else RSS growth or the fall of free device memory (*held = 0);
 * *process: NVML's figure for the whole process after the last one (0:
 * unknown). -1 with err when it cannot be planned or measured (e.g. its
 * arena does not fit the device). */
int hfl_probe_measure(hfl_probe *p, const hfl_backend *be, const hfl_candidate *c,
                      unsigned opt_state, const hfl_device_cost *cost, uint64_t *measured,
                      int *held, uint64_t *process, char *err);
/* The plan candidate c is trained with on backend be (hfl_candidate_config,
 * the backend's device buffers, hfl_plan_make); -1 with err. */
int hfl_candidate_plan(const hfl_model_spec *spec, const hfl_backend *be, const hfl_candidate *c,
                       unsigned opt_state, hfl_plan *plan, char *err);
/* 1 when plans a and b run the same step: the same arena, buffers (name,
 * category, layer, size, lifetime, offset), ops and buffer roles, as two
 * checkpoint kinds that reach one schedule do (`optimal` storing everything
 * is `none`); then one measurement stands for both. Configs are not
 * compared: the caller compares the rest (batch, precision, optimizer). */
int hfl_plan_same_step(const hfl_plan *a, const hfl_plan *b);

#endif
