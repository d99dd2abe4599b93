/* secagg.h: secure aggregation on the coordinator, SecAgg+ style (Bonawitz
 * et al., "Practical Secure Aggregation for Privacy-Preserving Machine
 * Learning", CCS 2017; Bell et al., "Secure Single-Server Aggregation with
 * (Poly)Logarithmic Overhead", CCS 2020), over the exact fixed-point sums of
 * aggregate.h: the coordinator learns the round's sum and never one client's
 * update.
 *
 * THE RING. A client clips its own update to the round's clip C, weights it
 * by the share w its task announces (the sample share rounds.c would have
 * given it) and rounds every element to a multiple of 2^-S with
 * kernels/agg_hd.h's hfl_agg_round_fixed, exactly as the aggregator does
 * (S = F - e with C < 2^e <= 2C, frexp's e: ceil(log2 C), one more when C
 * is a power of two; the resolution is 2^-F of the clip's power of two,
 * --fixed-bits F, default 24). One more element carries 1 when its norm was
 * at most C (the adaptive clip's count, and the report's clipped count), in
 * units of 2^-8. Elements live in Z / 2^b, packed b bits each. The bound:
 *   |sum of one element| <= M = C 2^S W (1 + 1e-9) + n + 10 n s 2^S + 1
 * over the n drawn clients whose weights sum to W (at most 1), where n
 * covers each client's rounding (1/2) and noise share's, and 10 s 2^S each
 * client's noise share (s its standard deviation, drawn truncated at 10 s;
 * 0 without DP); the count element's bound is n 2^8 + 10 n s_b 2^8 + n.
 * b = ceil(log2(2 M + 1)), so the sum mod 2^b read as a signed value is the
 * sum itself: nothing can wrap. Rings of b <= 32 bits are computed in 32-bit
 * words, wider ones in 64-bit words, and b > 52 is refused (a client's
 * rounding, hfl_agg_round_fixed, holds for |y| < 2^51).
 *
 * THE PROTOCOL, per round, for the n drawn clients (--secure-agg):
 *   keys     each client sends two fresh X25519 public keys (c: sealing,
 *            s: masks) signed with its certificate's key, with its
 *            certificate; closes when all n sent or after the phase time;
 *   shares   each client gets its neighbours' keys and certificates (a
 *            random k-regular graph, k = 2 ceil(log2 n), complete when n - 1
 *            <= k: a Harary graph over a permutation drawn from the seed and
 *            the round), checks them, and Shamir-shares (proto/shamir.h) its
 *            s secret key and a fresh self-mask seed t-of-(k + 1) among its
 *            neighbours and itself, t = floor((k + 1) / 2) + 1, each share
 *            sealed (AES-GCM) under a key agreed with the neighbour's c key;
 *   input    each client gets the shares sealed for it (only from neighbours
 *            that shared: they are the ones it masks with), and sends its
 *            fixed-point update plus its self mask plus, per such neighbour
 *            v, the pairwise mask of their s keys' secret (+ when its id is
 *            below v's, - above), mod 2^b: an UPDATE whose payload is the
 *            packed ring; closes as a plain round closes (all in, K in, or
 *            the deadline with the quorum);
 *   unmask   the clients whose input arrived are named; each reveals, for
 *            each neighbour that shared (itself included), the share of its
 *            self-mask seed if that neighbour's input arrived, else the share
 *            of its s key, never both; with t shares of each the coordinator
 *            removes every self mask and the pairwise masks of the clients
 *            that dropped after sharing, checking each recovered s key
 *            against its public key.
 * Fewer than t clients at any step, or fewer than t shares of a secret,
 * fail the round with one line ("secure aggregation: ..."), and the global
 * model is kept. --client-clip runs the same clipping, rounding and packing
 * in the clear (no keys, no masks): the test twin of a secure run, whose
 * model is the same bits.
 *
 * The coordinator is trusted to follow the protocol (honest but curious):
 * it picks the graph, and the consistency round that protects clients from
 * a coordinator lying about who dropped is not run. Keys are bound to
 * certificates: a coordinator cannot put its own keys in a client's place.
 * With --insecure there are no certificates, and keys are taken on trust. */
#ifndef HFL_PROTO_SECAGG_H
#define HFL_PROTO_SECAGG_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define SECAGG_COUNT_SHIFT 8 /* the count element's units: 2^-8 */
#define SECAGG_MAX_BITS 52
#define SECAGG_NOISE_TAIL 10.0 /* noise shares are drawn truncated at this many standard deviations */

enum { SECAGG_OFF = 0, SECAGG_CLEAR = 1, SECAGG_MASKED = 2 };

/* The ring's size for a round: b bits from the bound M (see THE RING).
 * weight_total: W; n: drawn clients; sigma, sigma_count: each client's noise
 * standard deviation on the weighted update and on the count (0: no DP).
 * -1 with err when b would exceed SECAGG_MAX_BITS. */
int secagg_ring_bits(double clip, int shift, double weight_total, int n, double sigma, double sigma_count,
                     int *bits, double *bound, char *err);
/* S for clip and F (see THE RING). */
int secagg_shift(double clip, int fixed_bits);

/* The neighbour graph: member i's k neighbours (member indexes) into nb
 * (k of them), for n members, the permutation drawn from seed and round. */
int secagg_degree(int n);
void secagg_neighbours(uint64_t seed, int round, int n, int i, int *nb);

#endif
