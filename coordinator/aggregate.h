/* aggregate.h: the round's aggregator: weighted, clipped updates summed
 * exactly, so the result does not depend on the order they arrive in.
 *
 * A float accumulator gives a different last bit for every arrival order
 * (two quickstart runs with one seed ended at 0.8419 and 0.8437), so a
 * restarted run could never equal an uninterrupted one. Here each update is
 * validated and decoded by its codec into a scratch vector (nothing invalid
 * touches the sum), its L2 norm is taken (in double, in index order), it is
 * scaled by weight * min(1, clip / norm), and every element is rounded to a
 * 64-bit fixed-point integer with the round's scale 2^S and added. Integer
 * addition is associative, so the sum is the same bits in any order and from
 * any number of threads; the rounding happens per update, before the sum,
 * where it depends on nothing but that update.
 *
 * THE SCALE. reset(bound) fixes S for the round from a bound B on any
 * weighted element: with clipping, |w * c * v_i| <= w * clip <= clip (a
 * weight is a sample share, at most 1, and |v_i| <= ||v||); without it the
 * caller passes a value bound and add() refuses an update with a larger
 * element. S = 50 - ceil(log2 B) keeps every weighted element below 2^50,
 * where it is rounded by the exact add-and-subtract trick (aggregate.c), and
 * shares summing to at most 1 keep every partial sum within 2^50 too (a
 * caller's shares may even sum to 8000 before an int64 could overflow). The
 * resolution, 2^-S, is B / 2^50 or finer, 9e-16 B: for a clip of 2, 2e-15
 * per element, far below fp32's rounding of the values themselves.
 *
 * finish() writes sum / weight_sum as floats (the FedAvg mean of the clipped
 * updates); weight_sum is passed by the caller from integer sample counts, so
 * it too is exact. */
#ifndef HFL_COORD_AGGREGATE_H
#define HFL_COORD_AGGREGATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"

typedef struct {
    size_t n;
    int threads;       /* decode threads per update */
    double bound;      /* B of THE SCALE */
    double clip;       /* > 0: clip norms to this; 0: no clipping, |v_i| <= bound */
    int shift;         /* S */
    int64_t *acc;      /* the fixed-point sum */
    float *scratch;    /* one decoded update */
    float *rows;       /* hold mode: n_rows decoded, clipped updates (robust.h) */
    int n_rows;
    unsigned char *present; /* [n_rows]: row added this round */
    pthread_mutex_t lock; /* add() may be called from several threads */
} hfl_agg;

/* What add() saw of one update. */
typedef struct {
    double norm;   /* L2 norm of the decoded update, before clipping */
    int clipped;   /* norm > clip: scaled down to it */
} hfl_agg_update;

/* An aggregator for n values (decode with `threads` threads); -1 with err
 * when memory is short. */
int hfl_agg_init(hfl_agg *a, size_t n, int threads, char *err);
void hfl_agg_free(hfl_agg *a);

/* Starts a round: the sum is zeroed and the scale fixed from the bound
 * (clip > 0: the clip norm itself; else value_bound). */
void hfl_agg_reset(hfl_agg *a, double clip, double value_bound);

/* Validates and decodes one update of codec c, clips it, and adds weight
 * (a sample share in (0, 1]) times it to the sum. -1 with err, the sum
 * untouched, for a malformed payload, a non-finite value or norm, or (no
 * clipping) a value beyond the bound. */
int hfl_agg_add(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, double weight,
                hfl_agg_update *info, char *err);

/* out[i] = sum_i / weight_sum (weight_sum > 0). */
void hfl_agg_finish(const hfl_agg *a, double weight_sum, float *out);

/* HOLD MODE, for rules that need every update at once (robust.h): room for
 * `rows` decoded updates, refused with err naming the limit when rows * n
 * floats exceed limit_bytes. */
int hfl_agg_hold(hfl_agg *a, int rows, uint64_t limit_bytes, char *err);
/* As add, unweighted, into row `row` (clipped in place): the rows are the
 * round's selection order, so the set does not depend on arrival order. -1
 * with err (the row left absent) as add refuses. */
int hfl_agg_add_row(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, int row,
                    hfl_agg_update *info, char *err);

#endif
