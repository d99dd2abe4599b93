/* shamir.h: Shamir's t-of-n secret sharing (Shamir, "How to share a
 * secret", CACM 1979) byte by byte over GF(2^8), as secure aggregation
 * shares its seeds (proto/secagg.h).
 *
 * Each byte of the secret is the constant term of its own random polynomial
 * of degree t - 1 over GF(2^8) (AES's field: x^8 + x^4 + x^3 + x + 1); the
 * share of holder x (1..255) is the polynomials' values at x. Any t shares
 * give the secret back by Lagrange interpolation at 0; fewer than t say
 * nothing about it (every secret is equally likely given them). */
#ifndef HFL_SHAMIR_H
#define HFL_SHAMIR_H

#include <stddef.h>
#include <stdint.h>

#include "proto/secagg_crypto.h"

#define HFL_SHAMIR_MAX_HOLDERS 255

/* Splits secret (len bytes) for holders x = 1..n (n <= 255) with threshold
 * t (1 <= t <= n): shares is n rows of len bytes, row x - 1 holder x's.
 * Coefficients come from g; -1 with err. */
int hfl_shamir_split(hfl_csprng *g, const uint8_t *secret, size_t len, int t, int n, uint8_t *shares, char *err);
/* The secret (len bytes) from k shares: share j (len bytes at shares[j])
 * held by xs[j], the xs distinct and in 1..255. k must be at least the
 * threshold the secret was split with (more are fine; fewer give a wrong
 * answer, undetectably). -1 with err for repeated or zero holders. */
int hfl_shamir_combine(const uint8_t *const *shares, const uint8_t *xs, int k, size_t len, uint8_t *secret,
                       char *err);

#endif
