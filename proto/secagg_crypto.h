/* secagg_crypto.h: the cryptography of secure aggregation
 * (proto/secagg.h, client/secagg.c), on mbedTLS 2.28, and the ring it
 * masks in.
 *
 *   a CSPRNG     CTR-DRBG (AES-256, NIST SP 800-90A) seeded from the
 *                kernel's entropy: every secret and every noise draw;
 *   X25519       key pairs and their Diffie-Hellman secrets (RFC 7748;
 *                mbedTLS's Curve25519 group, the key a 32-byte little-endian
 *                string clamped as RFC 7748 section 5 says);
 *   HKDF-SHA256  (RFC 5869) a 32-byte key from a secret, a label and the
 *                round and parties it is for, so a key never serves two uses;
 *   masks        AES-256-CTR's keystream under such a key (counter from 0),
 *                read as little-endian words (4 bytes an element for rings of
 *                at most 32 bits, 8 above) cut to `bits`, added to or
 *                subtracted from ring elements mod 2^bits;
 *   sealing      AES-256-GCM with a 12-byte random nonce and a 16-byte tag,
 *                the nonce first: a sealed message is n + 28 bytes;
 *   the ring     Z / 2^bits with 1 <= bits <= 64, elements held in uint64_t
 *                and sent packed: element i takes bits i*bits .. i*bits +
 *                bits - 1 of a little-endian bit stream.
 *
 * Everything here may be called from several threads at once, except that a
 * hfl_csprng serves one thread at a time. */
#ifndef HFL_SECAGG_CRYPTO_H
#define HFL_SECAGG_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#define HFL_X25519_BYTES 32
#define HFL_SEAL_OVERHEAD 28 /* nonce 12 + tag 16 */

typedef struct hfl_csprng hfl_csprng;
/* A generator seeded from the kernel's entropy; NULL with err when it cannot be seeded. */
hfl_csprng *hfl_csprng_new(const char *personal, char *err);
void hfl_csprng_free(hfl_csprng *g);
/* n random bytes; -1 with err on the generator's failure. */
int hfl_csprng_bytes(hfl_csprng *g, void *buf, size_t n, char *err);
/* A standard normal draw (Box-Muller on two 53-bit uniforms). */
double hfl_csprng_gauss(hfl_csprng *g);
/* The same, drawn again until |x| <= tail (DP noise shares: coordinator/dp.h). */
double hfl_csprng_gauss_within(hfl_csprng *g, double tail);

/* A fresh X25519 key pair; -1 with err. */
int hfl_x25519_keypair(hfl_csprng *g, uint8_t sk[HFL_X25519_BYTES], uint8_t pk[HFL_X25519_BYTES], char *err);
/* The public key of sk (which is clamped first); -1 with err. */
int hfl_x25519_public(const uint8_t sk[HFL_X25519_BYTES], uint8_t pk[HFL_X25519_BYTES], char *err);
/* The shared secret of sk and a peer's public key; -1 with err for a public
 * key that is not on the curve. */
int hfl_x25519_shared(const uint8_t sk[HFL_X25519_BYTES], const uint8_t peer[HFL_X25519_BYTES],
                      uint8_t out[HFL_X25519_BYTES], char *err);

/* key = HKDF-SHA256(secret, salt "hfl secagg", info label || the n_ctx
 * values as 4-byte little-endian words). */
void hfl_secagg_kdf(const uint8_t *secret, size_t len, const char *label, const uint32_t *ctx, int n_ctx,
                    uint8_t key[32]);

/* acc[i] = acc[i] + sign * mask_i mod 2^bits for i < n (sign +1 or -1),
 * mask_i the keystream's element i under key. */
void hfl_mask_apply(const uint8_t key[32], int bits, int sign, uint64_t *acc, size_t n);

/* Seals pt (n bytes) into out (n + HFL_SEAL_OVERHEAD) with aad bound to it; -1 with err. */
int hfl_seal(hfl_csprng *g, const uint8_t key[32], const void *aad, size_t aad_len, const uint8_t *pt, size_t n,
             uint8_t *out, char *err);
/* Opens a sealed message of n bytes into out (n - HFL_SEAL_OVERHEAD); -1
 * with err when it is too short or was not sealed under key with aad. */
int hfl_open(const uint8_t key[32], const void *aad, size_t aad_len, const uint8_t *ct, size_t n, uint8_t *out,
             char *err);

/* The ring: bytes of n packed elements; packing (each v[i] cut to bits);
 * unpacking added into acc (mod 2^bits). */
size_t hfl_ring_bytes(size_t n, int bits);
void hfl_ring_pack(const uint64_t *v, size_t n, int bits, uint8_t *out);
void hfl_ring_unpack_add(const uint8_t *in, size_t n, int bits, uint64_t *acc);
/* x mod 2^bits read as a signed value in [-2^(bits-1), 2^(bits-1)). */
int64_t hfl_ring_signed(uint64_t x, int bits);

/* Base64 (RFC 4648) of n bytes into out, cap >= 4 * ceil(n / 3) + 1 bytes
 * (-1 and "" when smaller); decoding into out (cap bytes) returns the
 * length, or -1 when s is not base64 or too long. */
int hfl_b64_encode(const uint8_t *p, size_t n, char *out, size_t cap);
long hfl_b64_decode(const char *s, uint8_t *out, size_t cap);

#endif
