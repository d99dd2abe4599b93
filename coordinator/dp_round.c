/* dp_round.c: client-level differential privacy in the round engine (dp.h:
 * THE MECHANISM, THE ACCOUNTANT, ADAPTIVE CLIPPING).
 *
 * dp_init fixes the noise multiplier once: --dp-noise Z, or the smallest Z
 * whose planned rounds cost at most --dp-epsilon at --dp-delta. Each round
 * then gets its noise scale from its draw (dp_round_sigma: z_d w_max C on
 * the weighted sum, and sigma_b on the count of norms at most C when the
 * clip adapts), which rounds.c adds to the sum itself (central) or hands to
 * secure aggregation to share among the clients. Every round that sent
 * tasks is charged to the accountant when it closes, aggregated or not (a
 * failed round's clients may still have trained and sent), and the round's
 * entry, the event log and /metrics carry epsilon. Before a round opens,
 * dp_budget_left says whether one more would pass --dp-epsilon. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "coordinator/dp.h"
#include "proto/secagg.h"
#include "proto/secagg_crypto.h"
#include "util/util.h"

#define DP_DELTA_DEFAULT 1e-5 /* the delta epsilon is reported at without --dp-delta */

struct coord_dp {
    double z, z_update, q, delta;
    double sigma_b;     /* the count's noise, adaptive clipping (0: fixed clip) */
    hfl_rdp acc;
    double epsilon;     /* after the rounds charged so far */
    hfl_csprng *g;      /* central noise */
};

int dp_init(coord *c, int draw, char *err) {
    const coord_config *cfg = &c->cfg;
    if (cfg->dp_noise <= 0 && cfg->dp_epsilon <= 0) return 0;
    coord_dp *d = c->dp = hfl_calloc(1, sizeof *d);
    int population = cfg->min_clients > draw ? cfg->min_clients : draw;
    d->q = (double)draw / population;
    d->delta = cfg->dp_delta > 0 ? cfg->dp_delta : DP_DELTA_DEFAULT;
    d->z = cfg->dp_noise;
    if (d->z <= 0 && (d->z = hfl_dp_noise_for(d->q, cfg->rounds, cfg->dp_epsilon, d->delta)) < 0)
        return hfl_errf(err, "no noise multiplier up to 10^4 keeps %d rounds at sampling rate %.4g within epsilon %g "
                        "at delta %g", cfg->rounds, d->q, cfg->dp_epsilon, d->delta);
    d->z_update = d->z;
    if (cfg->clip_adaptive) { /* Andrew et al. 2021: sigma_b = m / 20, at least z so that z_d stays within 1.16 z */
        d->sigma_b = cfg->clients_per_round / 20.0 > d->z ? cfg->clients_per_round / 20.0 : d->z;
        d->z_update = hfl_dp_update_multiplier(d->z, d->sigma_b);
    }
    if (!cfg->secure_agg && !(d->g = hfl_csprng_new("hfl dp noise", err))) return -1;
    hfl_rdp planned;
    memset(&planned, 0, sizeof planned);
    hfl_rdp_compose(&planned, d->q, d->z, cfg->rounds);
    if (!cfg->quiet)
        printf("hfl-coordinator: differential privacy: noise multiplier %.4g (update %.4g, count sigma %.4g), "
               "sampling rate %.4g; %d rounds cost epsilon %.4g at delta %g\n",
               d->z, d->z_update, d->sigma_b, d->q, cfg->rounds, hfl_rdp_epsilon(&planned, d->delta, NULL), d->delta);
    return 0;
}

void dp_free(coord *c) {
    if (!c->dp) return;
    hfl_csprng_free(c->dp->g);
    free(c->dp);
    c->dp = NULL;
}

/* The largest weight of the open round's draw: its sensitivity per unit of clip. */
static double dp_w_max(const coord *c) {
    const coord_round *r = &c->r;
    double w = 0;
    for (int i = 0; i < r->n_selected; i++) {
        int id = r->selected[i];
        double s = (double)(r->slot[id].share_cap < r->slot[id].samples_at_select ? r->slot[id].share_cap : r->slot[id].samples_at_select);
        if (s / r->samples_planned > w) w = s / r->samples_planned;
    }
    return w;
}

void dp_round_sigma(const coord *c, double *sigma, double *sigma_count) {
    *sigma = *sigma_count = 0;
    if (!c->dp) return;
    *sigma = c->dp->z_update * dp_w_max(c) * c->r.clip;
    *sigma_count = c->dp->sigma_b;
}

int dp_budget_left(coord *c, char *why, size_t cap) {
    coord_dp *d = c->dp;
    if (!d || c->cfg.dp_epsilon <= 0) return 1;
    hfl_rdp next = d->acc;
    hfl_rdp_compose(&next, d->q, d->z, 1);
    double e = hfl_rdp_epsilon(&next, d->delta, NULL);
    if (e <= c->cfg.dp_epsilon) return 1;
    snprintf(why, cap, "privacy budget spent: round %d would bring epsilon from %.4g to %.4g, over --dp-epsilon %g "
             "at delta %g; run stopped", d->acc.rounds + 1, d->epsilon, e, c->cfg.dp_epsilon, d->delta);
    return 0;
}

int dp_add_central(coord *c, double sigma, char *err) {
    size_t n = c->agg.n;
    float *v = hfl_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = (float)(sigma * hfl_csprng_gauss_within(c->dp->g, SECAGG_NOISE_TAIL));
    int rc = hfl_agg_add_dense(&c->agg, v, 1.0, err);
    free(v);
    return rc;
}

double dp_noised_count(coord *c, double count) {
    coord_dp *d = c->dp;
    if (!d || d->sigma_b <= 0 || c->cfg.secure_agg) return count; /* secure aggregation's clients noised it */
    return count + d->sigma_b * hfl_csprng_gauss_within(d->g, SECAGG_NOISE_TAIL);
}

int dp_charge(coord *c, round_dp *o) {
    coord_dp *d = c->dp;
    if (!d) return 0;
    hfl_rdp_compose(&d->acc, d->q, d->z, 1);
    double order;
    d->epsilon = hfl_rdp_epsilon(&d->acc, d->delta, &order);
    *o = (round_dp){d->z, d->z_update, d->sigma_b, d->q, d->epsilon, d->delta, order, d->acc.rounds};
    if (!c->cfg.quiet)
        printf("round %d: differential privacy: epsilon %.4g at delta %g after %d rounds (order %g)\n", c->r.round,
               d->epsilon, d->delta, d->acc.rounds, order);
    return 1;
}

double dp_multiplier(const coord *c) { return c->dp ? c->dp->z_update : 0; }

int dp_rounds_charged(const coord *c) { return c->dp ? c->dp->acc.rounds : 0; }

void dp_restore(coord *c, int rounds) {
    coord_dp *d = c->dp;
    if (!d || rounds <= 0) return;
    memset(&d->acc, 0, sizeof d->acc);
    hfl_rdp_compose(&d->acc, d->q, d->z, rounds); /* q and z are the run's: the same spend */
    d->epsilon = hfl_rdp_epsilon(&d->acc, d->delta, NULL);
}

double dp_count_sigma(const coord *c) { return c->dp ? c->dp->sigma_b : 0; }

int dp_epsilon(const coord *c, double *eps, double *delta) {
    if (!c->dp) return 0;
    *eps = c->dp->epsilon, *delta = c->dp->delta;
    return 1;
}
