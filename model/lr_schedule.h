/* lr_schedule.h: the learning rate over a run's optimizer steps, the same
 * for every client. Constant, or a linear warmup followed by a cosine decay
 * to a floor, the inner schedule DiLoCo trains with (Douillard et al. 2023,
 * section 3: warmup, then cosine; nanoGPT's get_lr is the same curve).
 *
 * Step t counts from 0 over the whole run (round r's first step is
 * (r - 1) H with H local steps a round); total is the run's steps:
 *   t < warmup:          peak (t + 1) / warmup
 *   otherwise, p = min(1, (t - warmup) / (total - warmup)):
 *                        peak (min + (1 - min) (1 + cos(pi p)) / 2)
 * The coordinator names the schedule in every task with the round's first
 * step (proto: lr_schedule, lr_warmup, lr_total, lr_min, lr_step0), so a
 * client needs no state of the run to follow it. */
#ifndef HFL_LR_SCHEDULE_H
#define HFL_LR_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int cosine;       /* 0: the constant peak */
    int64_t warmup;   /* steps of linear warmup, < total */
    int64_t total;    /* the run's steps (set from rounds x local steps) */
    double min_ratio; /* the floor, as a fraction of the peak, in [0, 1] */
} hfl_lr_schedule;

/* "constant" or "cosine[:WARMUP[:MIN]]" (WARMUP steps, default 0; MIN the
 * floor as a fraction of the peak, default 0.1); total is left 0. */
int hfl_lr_schedule_parse(const char *s, hfl_lr_schedule *out, char *err);

/* The learning rate at step t of the run, for the peak rate peak. */
double hfl_lr_at(const hfl_lr_schedule *s, double peak, int64_t t);

/* The schedule as hfl_lr_schedule_parse reads it ("constant", "cosine:W:M"). */
void hfl_lr_schedule_name(const hfl_lr_schedule *s, char *buf, size_t n);

#endif
