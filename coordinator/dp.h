/* dp.h: client-level differential privacy: the Gaussian mechanism on the
 * round's sum of clipped updates, and its Rényi DP accountant.
 *
 * THE MECHANISM (McMahan et al., "Learning Differentially Private Recurrent
 * Language Models", ICLR 2018). Each round's weighted sum of updates, each
 * clipped to C and weighted by at most w_max (the largest sample share of the
 * round's draw), changes by at most w_max C when one client is added or
 * removed; Gaussian noise of standard deviation z w_max C on every element
 * (z the noise multiplier) makes the round a subsampled Gaussian mechanism.
 * Without secure aggregation the coordinator adds it to the sum (central
 * mode); under secure aggregation each of the round's clients adds a share
 * of standard deviation z w_max C / sqrt(m), m the fewest clients whose sum
 * the round will aggregate (its threshold or quorum), so the total reaches
 * z w_max C whenever the round is aggregated, and no one sees the sum
 * without it. Shares are drawn from a CSPRNG (proto/secagg_crypto.h) and
 * truncated at SECAGG_NOISE_TAIL standard deviations, so the ring's bound
 * holds; the truncation changes each draw's distribution by under 2e-23 in
 * total variation (P(|N(0,1)| > 10)), which the accountant leaves out.
 *
 * THE ACCOUNTANT (Mironov, Talwar and Zhang, "Rényi Differential Privacy of
 * the Sampled Gaussian Mechanism", 2019). A round samples each client with
 * probability q (taken as the draw over the fleet, --min-clients; with no
 * fleet size q = 1, which claims no amplification). Its RDP at order a is
 * log(A_a) / (a - 1), A_a the paper's section 3.3 series: for integer a
 *   A_a = sum_{k=0}^{a} C(a,k) (1-q)^{a-k} q^k exp((k^2 - k) / (2 z^2)),
 * for fractional a the two infinite series with erfc and
 * z0 = z^2 log(1/q - 1) + 1/2. Rounds compose by adding RDP, and (epsilon,
 * delta) follows from the conversion of Canonne, Kamath and Steinke 2020
 * (Proposition 12; Balle et al. 2020, Theorem 21):
 *   epsilon = min over a of rdp(a) + log((a - 1) / a) - (log delta + log a) / (a - 1).
 * tests/coordinator/test_dp.c checks it against the definition integrated
 * numerically.
 *
 * ADAPTIVE CLIPPING under DP (Andrew et al., "Differentially Private
 * Learning with Adaptive Clipping", NeurIPS 2021): the count of updates whose
 * norm is at most C is noised with standard deviation sigma_b (the expected
 * clients a round / 20, as the paper sets it, at least z), and the update's
 * noise multiplier becomes z_d = (z^-2 - (2 sigma_b)^-2)^(-1/2), so the pair
 * costs what z alone would (their Theorem 1); the accountant counts z. */
#ifndef HFL_COORD_DP_H
#define HFL_COORD_DP_H

#define HFL_RDP_ORDERS 156

typedef struct {
    double rdp[HFL_RDP_ORDERS]; /* accumulated, at hfl_rdp_order(i) */
    int rounds;
} hfl_rdp;

/* Order i of the accountant's grid: 1.1, 1.2, ..., 10.9, 11, 12, ..., 63, 64, 128, 256, 512. */
double hfl_rdp_order(int i);
/* One round's RDP at order a > 1 for sampling rate q in [0, 1] and noise multiplier z > 0. */
double hfl_rdp_sampled_gaussian(double q, double z, double a);
/* Adds `rounds` rounds at (q, z). */
void hfl_rdp_compose(hfl_rdp *acc, double q, double z, int rounds);
/* epsilon at delta (0 < delta < 1) of what acc holds; *order (may be NULL): the order that gave it. */
double hfl_rdp_epsilon(const hfl_rdp *acc, double delta, double *order);
/* The smallest noise multiplier (to 0.1%) whose `rounds` rounds at q cost at
 * most epsilon at delta; -1 when even z = 10^4 does not. */
double hfl_dp_noise_for(double q, int rounds, double epsilon, double delta);
/* Andrew et al.'s split: the update's multiplier z_d for a total z and the count's sigma_b. */
double hfl_dp_update_multiplier(double z, double sigma_b);

#endif
