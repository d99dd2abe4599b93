/* rate.c: token buckets by key (see rate.h). A table of `slots` entries
 * scanned whole (4,096 for conns.c: microseconds, and only first hellos
 * look). */
#include "coordinator/rate.h"

#include <stdlib.h>

#include "util/util.h"

typedef struct {
    uint64_t key;
    int used;
    double tokens, at;
} rate_bucket;

struct rate_table {
    int slots;
    rate_bucket *b;
};

rate_table *rate_new(int slots) {
    rate_table *t = hfl_calloc(1, sizeof *t);
    t->slots = slots > 0 ? slots : 1;
    t->b = hfl_calloc((size_t)t->slots, sizeof *t->b);
    return t;
}

void rate_free(rate_table *t) {
    if (!t) return;
    free(t->b);
    free(t);
}

static double rate_burst(double rate) { return rate * RATE_BURST_S > 1 ? rate * RATE_BURST_S : 1; }

/* The tokens in b at now, refilled. */
static double rate_level(const rate_bucket *b, double rate, double now) {
    double v = b->tokens + (now - b->at) * rate, most = rate_burst(rate);
    return v < most ? v : most;
}

/* key's bucket, or a slot for it (a free one, else the fullest) set full. */
static rate_bucket *rate_find(rate_table *t, uint64_t key, double rate, double now) {
    int fullest = 0;
    for (int i = 0; i < t->slots; i++) {
        if (t->b[i].used && t->b[i].key == key) return &t->b[i];
        if (!t->b[fullest].used) continue;
        if (!t->b[i].used || rate_level(&t->b[i], rate, now) > rate_level(&t->b[fullest], rate, now)) fullest = i;
    }
    rate_bucket *b = &t->b[fullest];
    *b = (rate_bucket){.key = key, .used = 1, .tokens = rate_burst(rate), .at = now};
    return b;
}

int rate_has(rate_table *t, uint64_t key, double rate, double now, double *wait_s) {
    *wait_s = 0;
    if (rate <= 0) return 1;
    double level = rate_level(rate_find(t, key, rate, now), rate, now);
    if (level >= 1) return 1;
    *wait_s = (1 - level) / rate;
    return 0;
}

void rate_take(rate_table *t, uint64_t key, double rate, double now) {
    if (rate <= 0) return;
    rate_bucket *b = rate_find(t, key, rate, now);
    b->tokens = rate_level(b, rate, now) - 1;
    b->at = now;
}
