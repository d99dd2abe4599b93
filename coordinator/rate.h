/* rate.h: token buckets by key, in a fixed table (rate.c).
 *
 * conns.c keeps one table for connections (key: NNG's pipe id) and one for
 * source addresses (key: the folded address) to limit the challenges each
 * may obtain (--hello-rate). A bucket holds at most RATE_BURST_S seconds of
 * tokens and starts full; a key not seen is a full bucket, so a bucket that
 * has filled again may be forgotten: when the table is full, the fullest
 * bucket's slot is taken (a key that returns then starts full, which it
 * would be by then or nearly). Not thread-safe: the caller locks. */
#ifndef HFL_COORD_RATE_H
#define HFL_COORD_RATE_H

#include <stdint.h>

#define RATE_BURST_S 2.0 /* a bucket holds this many seconds of its rate (at least one token) */

typedef struct rate_table rate_table;

rate_table *rate_new(int slots);
void rate_free(rate_table *t);
/* 1 when key's bucket, refilled at `rate` per second up to its burst, holds
 * a token at `now`; else 0 with *wait_s the time until it will. rate <= 0:
 * no limit (always 1). */
int rate_has(rate_table *t, uint64_t key, double rate, double now, double *wait_s);
/* Takes one token from key's bucket (after rate_has said there is one). */
void rate_take(rate_table *t, uint64_t key, double rate, double now);

#endif
