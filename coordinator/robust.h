/* robust.h: aggregation rules that tolerate a few bad updates (--strategy).
 *
 * FedAvg's weighted mean lets one update move the model anywhere its weight
 * and clip allow. These rules look at every update of the round at once
 * (held decoded and clipped: aggregate.h, hfl_agg_hold), unweighted:
 *   median           coordinate-wise median (Yin et al. 2018);
 *   trimmed[:beta]   coordinate-wise mean after dropping the floor(beta k)
 *                    smallest and largest values (beta 0.2; Yin et al. 2018);
 *   krum[:f]         the one update whose k - f - 2 nearest others are
 *                    closest in squared L2 distance (Blanchard et al. 2017;
 *                    f = the Byzantine updates tolerated, default 1);
 *   multikrum[:f[:m]] the mean of the m best-scored updates (m = k - f by
 *                    default; El Mhamdi et al. 2018).
 * The rows arrive in a fixed order (the round's selection), every reduction
 * runs in a fixed order in double (kernels/agg_hd.h: Krum's distances in the
 * norm's chunk-and-lane shape), and ties go to the lower row, so the result
 * is a fixed function of the set of updates, the same bits on the CPU and on
 * a GPU (the arithmetic runs through the backend's aggregation ops; Krum's
 * scores and picks on the host). */
#ifndef HFL_COORD_ROBUST_H
#define HFL_COORD_ROBUST_H

#include <stddef.h>

typedef enum { HFL_RULE_FEDAVG, HFL_RULE_MEDIAN, HFL_RULE_TRIMMED, HFL_RULE_KRUM, HFL_RULE_MULTIKRUM } hfl_rule_kind;

typedef struct {
    hfl_rule_kind kind;
    double beta; /* trimmed */
    int f, m;    /* krum, multikrum (m 0: k - f) */
} hfl_rule;

/* "fedavg", "median", "trimmed[:beta]", "krum[:f]", "multikrum[:f[:m]]";
 * -1 with err naming the forms. */
int hfl_rule_parse(const char *spec, hfl_rule *r, char *err);
const char *hfl_rule_name(const hfl_rule *r);

struct hfl_backend;
/* The rule on backend be's memory: rows holds k rows of n values one after
 * another, out gets n; pick (k ints) and dist_partials (k (k - 1) / 2 *
 * hfl_agg_chunks(n) doubles) are be's scratch for the Krum rules. For the
 * Krum rules selected[i] (host, may be NULL) = 1 for the rows it averaged;
 * *kept (may be NULL) the rows the rule averaged (k for the coordinate-wise
 * rules). -1 with err when k is too small for the rule (Krum needs
 * k > 2f + 2, a trimmed mean keeps at least one value). */
int hfl_rule_run(const hfl_rule *r, const struct hfl_backend *be, const float *rows, int k, size_t n, float *out,
                 int *pick, double *dist_partials, int *selected, int *kept, char *err);

#endif
