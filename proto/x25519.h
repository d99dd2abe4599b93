/* x25519.h: the X25519 function of RFC 7748 on 64-bit limbs
 * (proto/x25519.c), for secure aggregation's key agreement
 * (proto/secagg_crypto.c).
 *
 * mbedTLS 2.28 runs Curve25519 on its generic bignum code: 0.58 ms a
 * scalar multiplication here, 30 a round for a client with 14 neighbours
 * (docs/benchmarks.md). This is the same function, with the same bytes in
 * and out, in time that does not depend on the scalar or the point. */
#ifndef HFL_PROTO_X25519_H
#define HFL_PROTO_X25519_H

#include <stdint.h>

/* out = X25519(k, u) (RFC 7748 section 5): k is clamped here, u's top bit
 * is ignored and a u of p or more is taken mod p. 0, or -1 when the result
 * is all zeros (u of small order: RFC 7748 section 6.1's check, which
 * keeps a peer from forcing the shared secret). */
int hfl_x25519(const uint8_t k[32], const uint8_t u[32], uint8_t out[32]);

/* out = X25519(k, 9): the public key of k. */
void hfl_x25519_base(const uint8_t k[32], uint8_t out[32]);

#endif
