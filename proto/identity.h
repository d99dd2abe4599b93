/* identity.h: who is speaking, proven with certificates at the application
 * level (NNG 1.5 does not expose the TLS peer's certificate).
 *
 * Every hfl certificate names its holder (CN) and its role (OU: "client" or
 * "coordinator", written by hfl-pki). A side loads its own identity (the PEM
 * file holding its certificate and key) and a trust store (the CA and the
 * list of revoked names). A peer proves an identity by sending its
 * certificate (base64 DER) and signing, with the certificate's key, data the
 * other side chose fresh: hfl_hello (proto/hello.h) runs that exchange.
 *
 * Signatures are ECDSA (or whatever key the certificate holds) over SHA-256
 * of length-prefixed parts, with a domain string as the first part, so one
 * kind of signature can never be replayed as another. Every function here
 * may be called from several threads at once. */
#ifndef HFL_IDENTITY_H
#define HFL_IDENTITY_H

#include <stddef.h>

#define HFL_ROLE_CLIENT "client"
#define HFL_ROLE_COORDINATOR "coordinator"
#define HFL_ROLE_AGGREGATOR "aggregator" /* a tier's aggregator, to its root (coordinator/upstream.c) */
#define HFL_ID_NAME_MAX 63  /* a certificate's CN as hfl uses it */
#define HFL_ID_SIG_B64_MAX 256
#define HFL_ID_NONCE_HEX 64 /* 32 random bytes as hex */

typedef struct hfl_identity hfl_identity; /* our own certificate and key */
typedef struct hfl_trust hfl_trust;       /* the CA and the revoked names */
typedef struct hfl_peer hfl_peer;         /* a verified peer certificate */

/* Loads the certificate (first in the file) and key from a PEM file; its CN
 * and OU become the name and role. */
int hfl_identity_load(const char *pem_file, hfl_identity **out, char *err);
void hfl_identity_free(hfl_identity *id);
const char *hfl_identity_name(const hfl_identity *id);
const char *hfl_identity_role(const hfl_identity *id);
/* Our certificate as base64 DER (owned by id). */
const char *hfl_identity_cert(const hfl_identity *id);
/* Signs SHA-256 over the n length-prefixed parts; the signature as base64 into sig. */
int hfl_identity_sign(hfl_identity *id, const void *const parts[], const size_t lens[], int n,
                      char sig[HFL_ID_SIG_B64_MAX + 1], char *err);

/* The CA file and the revocation list: a text file, one revoked certificate
 * name per line ('#' starts a comment); a missing file is an empty list. */
int hfl_trust_load(const char *ca_file, const char *revoked_file, hfl_trust **out, char *err);
void hfl_trust_free(hfl_trust *t);
/* Re-reads the revocation list (SIGHUP); the old list stays on error. */
int hfl_trust_reload(hfl_trust *t, char *err);
int hfl_trust_is_revoked(const hfl_trust *t, const char *name);
/* Parses and verifies a peer's base64 DER certificate: issued by the CA,
 * within its validity, of `role`, named `expect_name` when that is not NULL,
 * not revoked. */
int hfl_trust_check(const hfl_trust *t, const char *cert_b64, const char *role, const char *expect_name,
                    hfl_peer **out, char *err);
const char *hfl_peer_name(const hfl_peer *p);
/* Verifies sig (base64) over the parts with the peer's key. */
int hfl_peer_verify(hfl_peer *p, const void *const parts[], const size_t lens[], int n, const char *sig,
                    char *err);
void hfl_peer_free(hfl_peer *p);

/* 32 fresh random bytes from the kernel as 64 hex digits. */
int hfl_random_hex(char out[HFL_ID_NONCE_HEX + 1], char *err);
/* Revocation list file lines: appends name (when not already there), atomically. */
int hfl_revoke_name(const char *revoked_file, const char *name, char *err);

#endif
