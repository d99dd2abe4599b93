/* aes_ctr.h: AES-256-CTR's keystream on the CPU's AES instructions
 * (proto/aes_ctr.c), for secure aggregation's masks (hfl_mask_apply).
 *
 * Block b of the keystream is AES-256 under key of the 128-bit big-endian
 * counter b, as mbedTLS's mbedtls_aes_crypt_ctr gives it from a zero nonce
 * counter; the same bytes, faster. Where the CPU has no AES instructions
 * (or it is not x86-64) nothing is written and the caller uses mbedTLS. */
#ifndef HFL_PROTO_AES_CTR_H
#define HFL_PROTO_AES_CTR_H

#include <stddef.h>
#include <stdint.h>

/* 1 when hfl_aes256_ctr runs on this CPU. */
int hfl_aes256_ctr_available(void);

/* Keystream blocks first .. first + blocks - 1 (16 bytes each) into out;
 * -1 (nothing written) without the AES instructions. */
int hfl_aes256_ctr(const uint8_t key[32], uint64_t first, uint8_t *out, size_t blocks);

#endif
