/* lr_schedule.c: warmup and cosine over a run's steps (lr_schedule.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/lr_schedule.h"
#include "util/util.h"

int hfl_lr_schedule_parse(const char *s, hfl_lr_schedule *out, char *err) {
    hfl_lr_schedule r = {0, 0, 0, 0.1};
    if (!strcmp(s, "constant")) {
        *out = r;
        return 0;
    }
    if (strncmp(s, "cosine", 6) != 0 || (s[6] != 0 && s[6] != ':'))
        return hfl_errf(err, "unknown schedule '%s' (constant, or cosine[:WARMUP[:MIN]])", s);
    r.cosine = 1;
    char a[64], *min;
    snprintf(a, sizeof a, "%s", s[6] ? s + 7 : "0");
    if ((min = strchr(a, ':'))) *min++ = 0;
    long warmup;
    if (hfl_parse_int(a, 0, 100000000, &warmup, err) != 0) return -1;
    if (min && hfl_parse_double(min, 0, 1, &r.min_ratio, err) != 0) return -1;
    r.warmup = warmup;
    *out = r;
    return 0;
}

double hfl_lr_at(const hfl_lr_schedule *s, double peak, int64_t t) {
    if (!s->cosine) return peak;
    if (t < s->warmup) return peak * (double)(t + 1) / (double)s->warmup;
    double p = s->total > s->warmup ? (double)(t - s->warmup) / (double)(s->total - s->warmup) : 1.0;
    if (p > 1) p = 1;
    return peak * (s->min_ratio + (1 - s->min_ratio) * 0.5 * (1 + cos(M_PI * p)));
}

void hfl_lr_schedule_name(const hfl_lr_schedule *s, char *buf, size_t n) {
    if (!s->cosine) snprintf(buf, n, "constant");
    else snprintf(buf, n, "cosine:%lld:%g", (long long)s->warmup, s->min_ratio);
}
