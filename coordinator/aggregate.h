/* aggregate.h: the round's aggregator: weighted, clipped updates summed
 * exactly, so the result does not depend on the order they arrive in.
 *
 * A float accumulator gives a different last bit for every arrival order
 * (two quickstart runs with one seed ended at 0.8419 and 0.8437), so a
 * restarted run could never equal an uninterrupted one. Here each update is
 * validated by its codec on the host (nothing invalid touches the sum), its
 * L2 norm is taken (in double, in kernels/agg_hd.h's fixed chunk-and-lane
 * shape), it is scaled by weight * min(1, clip / norm), and every element is
 * rounded to a 64-bit fixed-point integer with the round's scale 2^S and
 * added. Integer addition is associative, so the sum is the same bits in any
 * order and from any number of threads; the rounding happens per update,
 * before the sum, where it depends on nothing but that update.
 *
 * WHERE IT RUNS. The aggregator lives on a backend (kernels/agg.h): the CPU's
 * (host memory; a payload is read where it lies), or the GPU's (the sum, the
 * held rows, the mean and the server optimizer's state in device memory; a
 * payload's body staged through a pinned ring on a stream of its own). Both
 * run the same kernels/agg_hd.h bodies, so they give the same bits
 * (tests/gpu/test_cuda_agg.c). The host keeps the decisions: validation,
 * topk's index expansion, the clip factor from the norm (a 16-byte read), the
 * rule's scores and picks, and the global model, which it uploads before the
 * server step and downloads after it (the source of truth for the downlink,
 * checkpoints and the SHA-256).
 *
 * THE SCALE. reset(bound) fixes S for the round from a bound B on any
 * weighted element: with clipping, |w * c * v_i| <= w * clip <= clip (a
 * weight is a sample share, at most 1, and |v_i| <= ||v||); without it the
 * caller passes a value bound and add() refuses an update with a larger
 * element. S = 50 - e with B < 2^e <= 2B (frexp's e: ceil(log2 B), one
 * more when B is a power of two) keeps every weighted element below 2^50,
 * where it is rounded by the exact add-and-subtract trick (agg_hd.h), and
 * shares summing to at most 1 keep every partial sum within 2^50 too (a
 * caller's shares may even sum to 8000 before an int64 could overflow). The
 * resolution, 2^-S, is B / 2^50 or finer, 9e-16 B: for a clip of 2, 2e-15
 * per element, far below fp32's rounding of the values themselves.
 *
 * mean() writes sum / weight_sum as floats (the FedAvg mean of the clipped
 * updates); weight_sum is passed by the caller from integer sample counts, so
 * it too is exact.
 *
 * ON DISK (hfl_agg_on_disk). The whole int64 sum is 8 bytes a value, twice
 * the model: with the model itself, 3x its size before anything else. On
 * disk, an update is validated, its norm taken and its factor fixed as it
 * comes, as above, and its body is appended to a file (agg_disk.h) instead
 * of being added. mean() then sums block by block: every update's piece of
 * a block into a block-sized int64 sum, whose mean is written before the
 * next block. The integers, and so the bits, are the ones the sum in memory
 * gives (tests/coordinator/test_agg_disk.c compares them for every codec).
 * What memory holds is a block's buffers, and the mean from mean() to
 * step(), which frees it (or to the next reset, where the round failed).
 * For the CPU's aggregator, FedAvg's sum (no held rows). The file is read
 * back once a round (topk's entries by the block starts kept at the put),
 * at the close and under the caller's lock, so the close takes the adds the
 * sum in memory spread over the uploads (docs/benchmarks.md measures it).
 * Central DP's noise vector goes to the file too, as a dense update: the
 * file is unlinked, but its blocks hold the noise until they are reused. */
#ifndef HFL_COORD_AGGREGATE_H
#define HFL_COORD_AGGREGATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"
#include "coordinator/agg_disk.h"
#include "coordinator/robust.h"
#include "coordinator/server_opt.h"
#include "kernels/agg.h"
#include "kernels/backend.h"

typedef struct {
    size_t n;
    int threads;       /* decode threads per update (the CPU's ops use one) */
    double bound;      /* B of THE SCALE */
    double clip;       /* > 0: clip norms to this; 0: no clipping, |v_i| <= bound */
    int shift;         /* S */
    const hfl_backend *be;
    const hfl_agg_ops *ops;
    /* backend memory */
    int64_t *acc;      /* the fixed-point sum */
    int acc_zero;      /* acc's values are zeros, not yet written (reset's zeroing waits for the next pass) */
    float *mean;       /* mean() and rule() write here */
    double *partials;  /* the norm's chunk sums */
    float *dense;      /* topk's values scattered into a dense vector */
    uint8_t *topk_vals;     /* a device backend's staged topk values and indices */
    uint32_t *topk_idx_dev;
    size_t topk_cap;        /* entries they hold */
    uint32_t *topk_idx;     /* host: the expanded indices */
    float *rows;       /* hold mode: n_rows decoded, clipped updates (robust.h) */
    int n_rows;
    int *pick;         /* hold mode: Krum's picks for pick_mean */
    double *dist_partials; /* hold mode: the distances' chunk sums */
    float *x, *m, *v;  /* a device backend's copies of the global model and the server optimizer's moments */
    /* Updates waiting to be added, several in one pass over acc (ADDING in
     * aggregate.c): their payloads in backend memory, their factors. */
    hfl_payload pending[HFL_AGG_MAX_BATCH];
    double pending_f[HFL_AGG_MAX_BATCH];
    uint8_t *pending_copy[HFL_AGG_MAX_BATCH];
    size_t pending_room[HFL_AGG_MAX_BATCH], pending_bytes;
    int n_pending;
    unsigned char *present; /* host, [n_rows]: row added this round */
    agg_disk *disk;         /* ON DISK: the round's updates; NULL: the sum in memory */
    char disk_err[256];     /* ON DISK: why mean() failed */
    int disk_refused;       /* ON DISK: the last add was valid, but the file would not take it */
    pthread_mutex_t lock; /* add() may be called from several threads */
} hfl_agg;

/* What add() saw of one update. */
typedef struct {
    double norm;   /* L2 norm of the decoded update, before clipping */
    int clipped;   /* norm > clip: scaled down to it */
} hfl_agg_update;

/* An aggregator for n values on backend be; -1 with err when memory is
 * short or the backend has no aggregation ops. */
int hfl_agg_init_on(hfl_agg *a, const hfl_backend *be, size_t n, int threads, char *err);
void hfl_agg_free(hfl_agg *a);

/* Starts a round: the sum is zeroed and the scale fixed from the bound
 * (clip > 0: the clip norm itself; else value_bound). */
void hfl_agg_reset(hfl_agg *a, double clip, double value_bound);

/* Widens the round's scale so that values up to bound fit (call after
 * reset, before any add): central DP noise (coordinator/dp.h) adds to the
 * sum beyond the clip. */
void hfl_agg_widen(hfl_agg *a, double bound);

/* Adds factor * v (host, n floats, |factor * v_i| <= the bound) to the sum
 * (central DP noise); -1 with err when backend memory is short. */
int hfl_agg_add_dense(hfl_agg *a, const float *v, double factor, char *err);

/* Replaces the sum with sum (host, n integers) at scale 2^shift (secure
 * aggregation's unmasked sum, proto/secagg.h); mean() then reads it. */
void hfl_agg_load_sum(hfl_agg *a, const int64_t *sum, int shift);

/* The sum at the round's scale into out (host, n integers), after the
 * updates that wait are added: what an aggregator of a tier sends its root. */
void hfl_agg_read_sum(hfl_agg *a, int64_t *out);

/* Adds sum (host, n integers at scale 2^shift, another aggregator's
 * hfl_agg_read_sum) to the sum exactly: integer addition, so a sum of group
 * sums is the same bits as one sum of every update. -1 with err, nothing
 * added, for another shift, the sum on disk, a value that would overflow, or
 * a device backend's memory short. */
int hfl_agg_add_sum(hfl_agg *a, const int64_t *sum, int shift, char *err);

/* Validates and decodes one update of codec c, clips it, and adds weight
 * (a sample share in (0, 1]) times it to the sum. -1 with err, the sum
 * untouched, for a malformed payload, a non-finite value or norm, or (no
 * clipping) a value beyond the bound. */
int hfl_agg_add(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, double weight,
                hfl_agg_update *info, char *err);

/* ON DISK from now on: the round's updates in a new, unlinked file in dir,
 * summed `block` values at a time (0: AGG_DISK_BLOCK), the sum and the mean
 * in memory freed. Before any add; a host-memory backend without held rows.
 * -1 with err. */
int hfl_agg_on_disk(hfl_agg *a, const char *dir, size_t block, char *err);

/* The mean, sum / weight_sum (weight_sum > 0), into a->mean; returns 1 when
 * every element is finite, 0 when one is not, and -1 ON DISK when the
 * updates cannot be read back or the mean has no memory (a->disk_err says
 * which). */
int hfl_agg_mean(hfl_agg *a, double weight_sum);

/* HOLD MODE, for rules that need every update at once (robust.h): room for
 * `rows` decoded updates, refused with err naming the limit when rows * n
 * floats exceed limit_bytes, or rows exceed what the backend's rule ops
 * take (hfl_agg_ops.max_rule_rows). */
int hfl_agg_hold(hfl_agg *a, int rows, uint64_t limit_bytes, char *err);
/* As add, unweighted, into row `row` (clipped in place): the rows are the
 * round's selection order, so the set does not depend on arrival order. -1
 * with err (the row left absent) as add refuses. */
int hfl_agg_add_row(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, int row,
                    hfl_agg_update *info, char *err);
/* The rule over the rows added this round (in row order) into a->mean;
 * selected[i] (may be NULL; i counts the present rows) as hfl_rule_run;
 * *finite as mean(). -1 with err as the rule refuses. Compacts the rows. */
int hfl_agg_rule(hfl_agg *a, const hfl_rule *r, int *selected, int *kept, int *finite, char *err);

/* One server step from a->mean: global (host, the trainable part) and o's
 * state move as hfl_sopt_step_on would move them, on the aggregator's backend.
 * -1 with err (nothing moved) when a device's memory is short. */
int hfl_agg_step(hfl_agg *a, hfl_server_opt *o, float *global, char *err);

#endif
