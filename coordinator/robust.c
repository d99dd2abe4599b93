/* robust.c: median, trimmed mean, Krum and Multi-Krum (see robust.h). */
#include "coordinator/robust.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/agg.h"
#include "kernels/backend.h"
#include "util/util.h"

static const char *const rule_names[] = {"fedavg", "median", "trimmed", "krum", "multikrum"};

int hfl_rule_parse(const char *spec, hfl_rule *r, char *err) {
    memset(r, 0, sizeof *r);
    r->beta = 0.2, r->f = 1;
    double v[2] = {NAN, NAN};
    int args, k = hfl_parse_choice(spec, rule_names, 5, v, 2, &args);
    double a = v[0], b = v[1];
    int max_args = k == HFL_RULE_TRIMMED || k == HFL_RULE_KRUM ? 1 : k == HFL_RULE_MULTIKRUM ? 2 : 0;
    if (k < 0 || args > max_args)
        return hfl_errf(err, "unknown strategy '%s' (fedavg, median, trimmed[:beta], krum[:f], multikrum[:f[:m]])",
                        spec);
    if ((args >= 1 && k != HFL_RULE_TRIMMED && !(a >= 0 && a <= 1000 && a == floor(a))) ||
        (args == 2 && !(b >= 1 && b <= 1000 && b == floor(b))))
        return hfl_errf(err, "strategy '%s': beta must be in [0, 0.5), f and m whole numbers (m >= 1)", spec);
    r->kind = (hfl_rule_kind)k;
    if (k == HFL_RULE_TRIMMED && args == 1) r->beta = a;
    if ((k == HFL_RULE_KRUM || k == HFL_RULE_MULTIKRUM) && args >= 1) r->f = (int)a;
    if (k == HFL_RULE_MULTIKRUM && args == 2) r->m = (int)b;
    if (!(r->beta >= 0 && r->beta < 0.5))
        return hfl_errf(err, "strategy '%s': beta must be in [0, 0.5), f and m whole numbers (m >= 1)", spec);
    return 0;
}

const char *hfl_rule_name(const hfl_rule *r) { return rule_names[r->kind]; }

/* Krum scores: for each row, the sum of its k - f - 2 smallest squared
 * distances d to the other rows; then the `m` best rows (ties: lower row)
 * into pick. */
static void krum_pick(const double *d, int k, int f, int m, int *pick) {
    double *score = hfl_malloc(sizeof(double) * (size_t)k), *tmp = hfl_malloc(sizeof(double) * (size_t)k);
    int near = k - f - 2;
    for (int i = 0; i < k; i++) {
        int t = 0;
        for (int j = 0; j < k; j++)
            if (j != i) tmp[t++] = d[i * k + j];
        for (int a = 1; a < t; a++)
            for (int b = a; b > 0 && tmp[b] < tmp[b - 1]; b--) {
                double x = tmp[b];
                tmp[b] = tmp[b - 1];
                tmp[b - 1] = x;
            }
        score[i] = 0;
        for (int j = 0; j < near; j++) score[i] += tmp[j];
    }
    memset(pick, 0, sizeof(int) * (size_t)k);
    for (int c = 0; c < m; c++) {
        int best = -1;
        for (int i = 0; i < k; i++)
            if (!pick[i] && (best < 0 || score[i] < score[best])) best = i;
        pick[best] = 1;
    }
    free(score);
    free(tmp);
}

int hfl_rule_run(const hfl_rule *r, const hfl_backend *be, const float *rows, int k, size_t n, float *out,
                 int *pick, double *dist_partials, int *selected, int *kept, char *err) {
    const hfl_agg_ops *ops = be->agg;
    if (k < 1 || k > 1024) return hfl_errf(err, "%s over %d updates: needs 1 to 1024", hfl_rule_name(r), k);
    if (kept) *kept = k;
    switch (r->kind) {
    case HFL_RULE_FEDAVG:
        return hfl_errf(err, "fedavg is the weighted sum (aggregate.h), not a rule over held updates");
    case HFL_RULE_MEDIAN:
        ops->coordinatewise(rows, k, n, 1, 0, out);
        return 0;
    case HFL_RULE_TRIMMED:
        ops->coordinatewise(rows, k, n, 0, (int)floor(r->beta * k), out);
        return 0;
    case HFL_RULE_KRUM:
    case HFL_RULE_MULTIKRUM: {
        if (k <= 2 * r->f + 2)
            return hfl_errf(err, "%s with f = %d needs more than %d updates, the round has %d", hfl_rule_name(r), r->f,
                            2 * r->f + 2, k);
        int m = r->kind == HFL_RULE_KRUM ? 1 : r->m > 0 ? r->m : k - r->f;
        if (m > k) m = k;
        double *d = hfl_malloc(sizeof(double) * (size_t)k * k);
        int *host_pick = hfl_malloc(sizeof(int) * (size_t)k);
        ops->distances(rows, k, n, dist_partials, d);
        krum_pick(d, k, r->f, m, host_pick);
        ops->stage(pick, host_pick, sizeof(int) * (size_t)k);
        ops->pick_mean(rows, k, n, pick, m, out);
        if (selected) memcpy(selected, host_pick, sizeof(int) * (size_t)k);
        if (kept) *kept = m;
        free(d);
        free(host_pick);
        return 0;
    }
    }
    return hfl_errf(err, "unknown rule");
}
