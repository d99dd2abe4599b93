/* pki_der.c: certificates without the NULL parameter (pki_der.h).
 *
 * mbedTLS 2.28.3 writes every signature AlgorithmIdentifier with a NULL
 * parameter (mbedtls_x509write_crt_der calls mbedtls_x509_write_sig, which
 * calls mbedtls_asn1_write_algorithm_identifier with par_len 0, and that
 * writes NULL; Mbed-TLS/mbedtls#2924, fixed by pull request #7788 after 2.28.3). RFC 5758
 * sec. 3.2 says that for ecdsa-with-SHA256 "the encoding MUST omit the
 * parameters field", and strict readers refuse such certificates (Python's
 * cryptography warns from 41.0.1 that it will). The identifier appears twice
 * (RFC 5280 sec. 4.1): inside the signed tbsCertificate and beside the
 * signature, so removing it changes the signed bytes. Here the certificate is
 * taken apart with mbedTLS's ASN.1 reader, its tbsCertificate written again
 * with the bare identifier SEQUENCE { OID } (mbedTLS's ASN.1 writer, which
 * writes backwards from the end of a buffer), signed again with the issuer's
 * key, and the certificate SEQUENCE { tbsCertificate, SEQUENCE { OID }, BIT
 * STRING signature } written around it. */
#include "proto/pki_der.h"

#include <stdlib.h>
#include <string.h>

#include <mbedtls/asn1.h>
#include <mbedtls/asn1write.h>
#include <mbedtls/oid.h>
#include <mbedtls/sha256.h>

#include "util/util.h"

#define DER_SEQ (MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE)
#define DER_VERSION_TAG (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_ASN1_CONSTRUCTED | 0)

/* Adds an ASN.1 writer's result (bytes written, or a negative error) to *total. */
static int der_add(size_t *total, int rv) {
    if (rv < 0) return rv;
    *total += (size_t)rv;
    return 0;
}

/* Writes SEQUENCE { OID } backwards at *p (above start); its length into *n. */
static int der_write_alg(unsigned char **p, unsigned char *start, const unsigned char *oid, size_t oid_len,
                         size_t *n) {
    *n = 0;
    int rv;
    if ((rv = der_add(n, mbedtls_asn1_write_oid(p, start, (const char *)oid, oid_len))) != 0) return rv;
    if ((rv = der_add(n, mbedtls_asn1_write_len(p, start, *n))) != 0) return rv;
    return der_add(n, mbedtls_asn1_write_tag(p, start, DER_SEQ));
}

/* The parts of a certificate this rewrite needs, as pointers into it. */
typedef struct {
    const unsigned char *tbs_body, *alg, *alg_end, *tbs_end; /* tbsCertificate's contents, its signature field */
    const unsigned char *oid;
    size_t oid_len;
} der_cert;

static int der_parse(const unsigned char *der, size_t len, der_cert *d, char *err) {
    unsigned char *p = (unsigned char *)der, *end = p + len, *q;
    size_t n, oid_len;
    if (mbedtls_asn1_get_tag(&p, end, &n, DER_SEQ) != 0 || p + n != end ||
        mbedtls_asn1_get_tag(&p, end, &n, DER_SEQ) != 0)
        return hfl_errf(err, "certificate DER: no tbsCertificate");
    d->tbs_body = p, d->tbs_end = p + n;
    q = p;
    if (q < d->tbs_end && *q == DER_VERSION_TAG) { /* version [0] EXPLICIT, absent for v1 */
        if (mbedtls_asn1_get_tag(&q, d->tbs_end, &n, DER_VERSION_TAG) != 0)
            return hfl_errf(err, "certificate DER: bad version");
        q += n;
    }
    if (mbedtls_asn1_get_tag(&q, d->tbs_end, &n, MBEDTLS_ASN1_INTEGER) != 0)
        return hfl_errf(err, "certificate DER: no serial number");
    q += n;
    d->alg = q;
    if (mbedtls_asn1_get_tag(&q, d->tbs_end, &n, DER_SEQ) != 0) return hfl_errf(err, "certificate DER: no signature field");
    d->alg_end = q + n;
    if (mbedtls_asn1_get_tag(&q, d->alg_end, &oid_len, MBEDTLS_ASN1_OID) != 0)
        return hfl_errf(err, "certificate DER: signature field without an algorithm");
    d->oid = q, d->oid_len = oid_len;
    q += oid_len;
    int params_null = d->alg_end - q == 2 && q[0] == MBEDTLS_ASN1_NULL && q[1] == 0;
    if (q != d->alg_end && !params_null)
        return hfl_errf(err, "certificate DER: signature parameters other than NULL");
    const char *want;
    size_t want_len;
    if (mbedtls_oid_get_oid_by_sig_alg(MBEDTLS_PK_ECDSA, MBEDTLS_MD_SHA256, &want, &want_len) != 0 ||
        want_len != oid_len || memcmp(want, d->oid, oid_len) != 0)
        return hfl_errf(err, "certificate DER: not signed with ecdsa-with-SHA256");
    return 0;
}

/* Writes the tbsCertificate again with the bare identifier, backwards into
 * buf (cap bytes); *tbs points at it and *n is its length. */
static int der_write_tbs(const der_cert *d, unsigned char *buf, size_t cap, unsigned char **tbs, size_t *n) {
    unsigned char *p = buf + cap;
    size_t alg_len;
    int rv;
    *n = 0;
    if ((rv = der_add(n, mbedtls_asn1_write_raw_buffer(&p, buf, d->alg_end, (size_t)(d->tbs_end - d->alg_end)))) ||
        (rv = der_write_alg(&p, buf, d->oid, d->oid_len, &alg_len)) || (rv = der_add(n, (int)alg_len)) ||
        (rv = der_add(n, mbedtls_asn1_write_raw_buffer(&p, buf, d->tbs_body, (size_t)(d->alg - d->tbs_body)))) ||
        (rv = der_add(n, mbedtls_asn1_write_len(&p, buf, *n))) || (rv = der_add(n, mbedtls_asn1_write_tag(&p, buf, DER_SEQ))))
        return rv;
    *tbs = p;
    return 0;
}

int hfl_pki_der_without_null(const unsigned char *der, size_t len, mbedtls_pk_context *issuer,
                             int (*rng)(void *, unsigned char *, size_t), void *rng_ctx, unsigned char *out,
                             size_t cap, size_t *out_len, char *err) {
    der_cert d = {0};
    if (der_parse(der, len, &d, err) != 0) return -1;
    /* the new tbsCertificate is no longer than the old one */
    size_t scratch_cap = (size_t)(d.tbs_end - d.tbs_body) + 16, tbs_len, alg_len, total = 0, sig_len = 0;
    unsigned char *scratch = hfl_malloc(scratch_cap), *tbs, hash[32], sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
    int rv = der_write_tbs(&d, scratch, scratch_cap, &tbs, &tbs_len);
    if (rv == 0 && (rv = mbedtls_sha256_ret(tbs, tbs_len, hash, 0)) == 0)
        rv = mbedtls_pk_sign(issuer, MBEDTLS_MD_SHA256, hash, sizeof hash, sig, &sig_len, rng, rng_ctx);
    if (rv != 0) {
        free(scratch);
        return hfl_errf(err, "cannot sign the certificate again: mbedTLS error -0x%04x", (unsigned)-rv);
    }
    /* Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }, backwards */
    unsigned char *p = out + cap;
    if ((rv = der_add(&total, mbedtls_asn1_write_bitstring(&p, out, sig, sig_len * 8))) ||
        (rv = der_write_alg(&p, out, d.oid, d.oid_len, &alg_len)) || (rv = der_add(&total, (int)alg_len)) ||
        (rv = der_add(&total, mbedtls_asn1_write_raw_buffer(&p, out, tbs, tbs_len))) ||
        (rv = der_add(&total, mbedtls_asn1_write_len(&p, out, total))) ||
        (rv = der_add(&total, mbedtls_asn1_write_tag(&p, out, DER_SEQ)))) {
        free(scratch);
        return hfl_errf(err, "certificate DER: %zu bytes of room are too few (mbedTLS error -0x%04x)", cap,
                        (unsigned)-rv);
    }
    free(scratch);
    memmove(out, p, total);
    *out_len = total;
    return 0;
}
