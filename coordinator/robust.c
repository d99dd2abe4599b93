/* robust.c: median, trimmed mean, Krum and Multi-Krum (see robust.h). */
#include "coordinator/robust.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void sort_floats(float *v, int k) {
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

/* Coordinate-wise: the median, or the mean of the values left after
 * dropping `trim` at each end. */
static void coordinatewise(const float *const *rows, int k, size_t n, int median, int trim, float *out) {
    float v[1024];
    for (size_t i = 0; i < n; i++) {
        for (int j = 0; j < k; j++) v[j] = rows[j][i];
        sort_floats(v, k);
        if (median) {
            out[i] = k % 2 ? v[k / 2] : (float)(0.5 * ((double)v[k / 2 - 1] + v[k / 2]));
        } else {
            double s = 0;
            for (int j = trim; j < k - trim; j++) s += v[j];
            out[i] = (float)(s / (k - 2 * trim));
        }
    }
}

static double dist2(const float *a, const float *b, size_t n) {
    double s[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) {
            double d = (double)a[i + j] - b[i + j];
            s[j] += d * d;
        }
    for (int j = 0; i < n; i++, j++) {
        double d = (double)a[i] - b[i];
        s[j] += d * d;
    }
    return s[0] + s[1] + s[2] + s[3];
}

/* Krum scores: for each row, the sum of its k - f - 2 smallest squared
 * distances to the other rows; then the `m` best rows (ties: lower row). */
static void krum(const float *const *rows, int k, size_t n, int f, int m, float *out, int *selected) {
    double *d = hfl_calloc((size_t)k * k, sizeof(double)), *score = hfl_malloc(sizeof(double) * (size_t)k);
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++) d[i * k + j] = d[j * k + i] = dist2(rows[i], rows[j], n);
    int near = k - f - 2;
    double *tmp = hfl_malloc(sizeof(double) * (size_t)k);
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
    int *pick = hfl_calloc((size_t)k, sizeof(int));
    for (int c = 0; c < m; c++) {
        int best = -1;
        for (int i = 0; i < k; i++)
            if (!pick[i] && (best < 0 || score[i] < score[best])) best = i;
        pick[best] = 1;
    }
    for (size_t x = 0; x < n; x++) {
        double s = 0;
        for (int i = 0; i < k; i++)
            if (pick[i]) s += rows[i][x];
        out[x] = (float)(s / m);
    }
    if (selected) memcpy(selected, pick, sizeof(int) * (size_t)k);
    free(d);
    free(score);
    free(tmp);
    free(pick);
}

int hfl_rule_apply(const hfl_rule *r, const float *const *rows, int k, size_t n, float *out, int *selected,
                   char *err) {
    if (k < 1 || k > 1024) return hfl_errf(err, "%s over %d updates: needs 1 to 1024", hfl_rule_name(r), k);
    switch (r->kind) {
    case HFL_RULE_FEDAVG:
        return hfl_errf(err, "fedavg is the weighted sum (aggregate.h), not a rule over held updates");
    case HFL_RULE_MEDIAN:
        coordinatewise(rows, k, n, 1, 0, out);
        return 0;
    case HFL_RULE_TRIMMED:
        coordinatewise(rows, k, n, 0, (int)floor(r->beta * k), out);
        return 0;
    case HFL_RULE_KRUM:
    case HFL_RULE_MULTIKRUM: {
        if (k <= 2 * r->f + 2)
            return hfl_errf(err, "%s with f = %d needs more than %d updates, the round has %d", hfl_rule_name(r), r->f,
                            2 * r->f + 2, k);
        int m = r->kind == HFL_RULE_KRUM ? 1 : r->m > 0 ? r->m : k - r->f;
        if (m > k) m = k;
        krum(rows, k, n, r->f, m, out, selected);
        return 0;
    }
    }
    return hfl_errf(err, "unknown rule");
}
