/* pki_der.h: a certificate as mbedTLS 2.28 writes it, made standard
 * (pki_der.c; used by pki.c). */
#ifndef HFL_PKI_DER_H
#define HFL_PKI_DER_H

#include <stddef.h>

#include <mbedtls/pk.h>

/* Rewrites the DER certificate der (len bytes, signed ECDSA-SHA256) with
 * the NULL parameter taken out of its two signature AlgorithmIdentifiers
 * (the tbsCertificate's and the outer one), signing the new tbsCertificate
 * with issuer's key. The result goes into out (cap bytes), *out_len its
 * length. A certificate whose identifiers carry no parameter is rewritten
 * the same way (and comes out the same but for its signature). */
int hfl_pki_der_without_null(const unsigned char *der, size_t len, mbedtls_pk_context *issuer,
                             int (*rng)(void *, unsigned char *, size_t), void *rng_ctx, unsigned char *out,
                             size_t cap, size_t *out_len, char *err);

#endif
