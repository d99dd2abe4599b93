/* identity.c: certificates as identities, with mbedTLS 2.28 (see identity.h).
 *
 * Decisions: a name is the certificate's CN and may hold only A-Z a-z 0-9
 * . - _ (what hfl-pki writes; it ends up in logs and file names); the role
 * is the OU. A peer certificate is at most 8 KiB of DER and must carry the
 * digitalSignature key usage. The revocation list is by name: a name is an
 * identity, and revoking it refuses every certificate issued under it.
 * Both objects may be used from several threads: signing is serialised (it
 * draws from one generator) and the revoked names sit behind a read-write
 * lock, so a coordinator checks hellos in parallel while SIGHUP reloads. */
#include "proto/identity.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <mbedtls/base64.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/x509_crt.h>

#include "util/util.h"

#define ID_CERT_DER_MAX 8192
#define ID_REVOKED_MAX 100000

struct hfl_identity {
    pthread_mutex_t mu; /* signing draws from the generator */
    mbedtls_x509_crt crt;
    mbedtls_pk_context key;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    char name[HFL_ID_NAME_MAX + 1], role[32];
    char *cert_b64;
};

struct hfl_trust {
    pthread_rwlock_t mu; /* the revoked names, re-read on SIGHUP while others check */
    mbedtls_x509_crt ca;
    char revoked_file[1024];
    char **revoked;
    int n_revoked;
};

struct hfl_peer {
    mbedtls_x509_crt crt;
    char name[HFL_ID_NAME_MAX + 1], role[32];
};

static int id_mbed_err(char *err, const char *what, int rv) {
    char msg[128];
    mbedtls_strerror(rv, msg, sizeof msg);
    return hfl_errf(err, "%s: %s", what, msg);
}

/* The subject attribute `oid` (CN or OU) into out; -1 when absent, too long or unsafe. */
static int id_subject_attr(const mbedtls_x509_crt *crt, const char *oid, size_t oid_len, char *out, size_t cap) {
    for (const mbedtls_x509_name *n = &crt->subject; n; n = n->next) {
        if (n->oid.len != oid_len || memcmp(n->oid.p, oid, oid_len) != 0) continue;
        if (n->val.len == 0 || n->val.len >= cap) return -1;
        for (size_t i = 0; i < n->val.len; i++) {
            unsigned char ch = n->val.p[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                  ch == '-' || ch == '_'))
                return -1;
        }
        memcpy(out, n->val.p, n->val.len);
        out[n->val.len] = 0;
        return 0;
    }
    return -1;
}

static int id_names(const mbedtls_x509_crt *crt, char *name, char *role, char *err) {
    if (id_subject_attr(crt, MBEDTLS_OID_AT_CN, MBEDTLS_OID_SIZE(MBEDTLS_OID_AT_CN), name, HFL_ID_NAME_MAX + 1) != 0)
        return hfl_errf(err, "certificate has no usable common name (1..%d of A-Z a-z 0-9 . - _)", HFL_ID_NAME_MAX);
    if (id_subject_attr(crt, MBEDTLS_OID_AT_ORG_UNIT, MBEDTLS_OID_SIZE(MBEDTLS_OID_AT_ORG_UNIT), role, 32) != 0)
        return hfl_errf(err, "certificate of '%s' names no role (OU); reissue it with this hfl-pki", name);
    return 0;
}

static void id_digest(const void *const parts[], const size_t lens[], int n, unsigned char hash[32]) {
    mbedtls_sha256_context h;
    mbedtls_sha256_init(&h);
    mbedtls_sha256_starts_ret(&h, 0);
    for (int i = 0; i < n; i++) {
        unsigned char len[4] = {(unsigned char)lens[i], (unsigned char)(lens[i] >> 8), (unsigned char)(lens[i] >> 16),
                                (unsigned char)(lens[i] >> 24)};
        mbedtls_sha256_update_ret(&h, len, 4);
        if (lens[i]) mbedtls_sha256_update_ret(&h, parts[i], lens[i]);
    }
    mbedtls_sha256_finish_ret(&h, hash);
    mbedtls_sha256_free(&h);
}

int hfl_identity_load(const char *pem_file, hfl_identity **out, char *err) {
    hfl_identity *id = hfl_calloc(1, sizeof *id);
    pthread_mutex_init(&id->mu, NULL);
    mbedtls_x509_crt_init(&id->crt);
    mbedtls_pk_init(&id->key);
    mbedtls_entropy_init(&id->entropy);
    mbedtls_ctr_drbg_init(&id->drbg);
    int rv;
    size_t olen = 0;
    static const char pers[] = "hfl-identity";
    if ((rv = mbedtls_x509_crt_parse_file(&id->crt, pem_file)) < 0) {
        id_mbed_err(err, pem_file, rv);
    } else if ((rv = mbedtls_pk_parse_keyfile(&id->key, pem_file, NULL)) != 0) {
        id_mbed_err(err, pem_file, rv);
    } else if ((rv = mbedtls_pk_check_pair(&id->crt.pk, &id->key)) != 0) {
        hfl_errf(err, "%s: the key does not belong to the certificate", pem_file);
    } else if ((rv = id_names(&id->crt, id->name, id->role, err)) != 0) {
    } else if ((rv = mbedtls_ctr_drbg_seed(&id->drbg, mbedtls_entropy_func, &id->entropy,
                                           (const unsigned char *)pers, sizeof pers - 1)) != 0) {
        id_mbed_err(err, "cannot seed the random generator", rv);
    } else {
        mbedtls_base64_encode(NULL, 0, &olen, id->crt.raw.p, id->crt.raw.len);
        id->cert_b64 = hfl_malloc(olen + 1);
        rv = mbedtls_base64_encode((unsigned char *)id->cert_b64, olen + 1, &olen, id->crt.raw.p, id->crt.raw.len);
        if (rv != 0) id_mbed_err(err, "cannot encode the certificate", rv);
    }
    if (rv != 0) {
        hfl_identity_free(id);
        return -1;
    }
    *out = id;
    return 0;
}

void hfl_identity_free(hfl_identity *id) {
    if (!id) return;
    mbedtls_x509_crt_free(&id->crt);
    mbedtls_pk_free(&id->key);
    mbedtls_ctr_drbg_free(&id->drbg);
    mbedtls_entropy_free(&id->entropy);
    free(id->cert_b64);
    pthread_mutex_destroy(&id->mu);
    free(id);
}

const char *hfl_identity_name(const hfl_identity *id) { return id->name; }
const char *hfl_identity_role(const hfl_identity *id) { return id->role; }
const char *hfl_identity_cert(const hfl_identity *id) { return id->cert_b64; }

int hfl_identity_sign(hfl_identity *id, const void *const parts[], const size_t lens[], int n,
                      char sig[HFL_ID_SIG_B64_MAX + 1], char *err) {
    unsigned char hash[32], raw[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
    size_t raw_len = 0, olen = 0;
    id_digest(parts, lens, n, hash);
    pthread_mutex_lock(&id->mu);
    int rv = mbedtls_pk_sign(&id->key, MBEDTLS_MD_SHA256, hash, 0, raw, &raw_len, mbedtls_ctr_drbg_random, &id->drbg);
    pthread_mutex_unlock(&id->mu);
    if (rv != 0) return id_mbed_err(err, "cannot sign", rv);
    rv = mbedtls_base64_encode((unsigned char *)sig, HFL_ID_SIG_B64_MAX + 1, &olen, raw, raw_len);
    if (rv != 0) return id_mbed_err(err, "cannot encode the signature", rv);
    return 0;
}

static void trust_clear_revoked(hfl_trust *t) {
    for (int i = 0; i < t->n_revoked; i++) free(t->revoked[i]);
    free(t->revoked);
    t->revoked = NULL;
    t->n_revoked = 0;
}

/* Reads the list into names (malloc'd); a missing file is an empty list. */
static int trust_read_revoked(const char *path, char ***names, int *n, char *err) {
    *names = NULL;
    *n = 0;
    if (!path[0]) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : hfl_errf(err, "cannot read revocation list %s: %s", path, strerror(errno));
    char line[256];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strcspn(line, "#\r\n");
        while (len && (line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
        size_t start = strspn(line, " \t");
        if (start >= len) continue;
        line[len] = 0;
        const char *name = line + start;
        if (strlen(name) > HFL_ID_NAME_MAX || strpbrk(name, " \t") || *n >= ID_REVOKED_MAX) {
            rc = hfl_errf(err, "revocation list %s line %d: not one certificate name", path, lineno);
            break;
        }
        *names = hfl_realloc(*names, sizeof(char *) * (size_t)(*n + 1));
        (*names)[(*n)++] = hfl_strdup(name);
    }
    fclose(f);
    if (rc != 0) {
        for (int i = 0; i < *n; i++) free((*names)[i]);
        free(*names);
        *names = NULL;
        *n = 0;
    }
    return rc;
}

int hfl_trust_load(const char *ca_file, const char *revoked_file, hfl_trust **out, char *err) {
    hfl_trust *t = hfl_calloc(1, sizeof *t);
    pthread_rwlock_init(&t->mu, NULL);
    mbedtls_x509_crt_init(&t->ca);
    snprintf(t->revoked_file, sizeof t->revoked_file, "%s", revoked_file ? revoked_file : "");
    int rv = mbedtls_x509_crt_parse_file(&t->ca, ca_file);
    if (rv != 0) {
        id_mbed_err(err, ca_file, rv);
        hfl_trust_free(t);
        return -1;
    }
    if (trust_read_revoked(t->revoked_file, &t->revoked, &t->n_revoked, err) != 0) {
        hfl_trust_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void hfl_trust_free(hfl_trust *t) {
    if (!t) return;
    mbedtls_x509_crt_free(&t->ca);
    trust_clear_revoked(t);
    pthread_rwlock_destroy(&t->mu);
    free(t);
}

int hfl_trust_reload(hfl_trust *t, char *err) {
    char **names;
    int n;
    if (trust_read_revoked(t->revoked_file, &names, &n, err) != 0) return -1;
    pthread_rwlock_wrlock(&t->mu);
    trust_clear_revoked(t);
    t->revoked = names;
    t->n_revoked = n;
    pthread_rwlock_unlock(&t->mu);
    return 0;
}

int hfl_trust_is_revoked(const hfl_trust *t, const char *name) {
    hfl_trust *w = (hfl_trust *)t; /* the lock is not the list */
    int found = 0;
    pthread_rwlock_rdlock(&w->mu);
    for (int i = 0; i < t->n_revoked && !found; i++) found = !strcmp(t->revoked[i], name);
    pthread_rwlock_unlock(&w->mu);
    return found;
}

int hfl_trust_check(const hfl_trust *t, const char *cert_b64, const char *role, const char *expect_name,
                    hfl_peer **out, char *err) {
    unsigned char *der = hfl_malloc(ID_CERT_DER_MAX);
    size_t der_len = 0;
    hfl_peer *p = hfl_calloc(1, sizeof *p);
    mbedtls_x509_crt_init(&p->crt);
    uint32_t flags = 0;
    int rv = -1;
    if (strlen(cert_b64) > ID_CERT_DER_MAX * 4 / 3 + 4 ||
        mbedtls_base64_decode(der, ID_CERT_DER_MAX, &der_len, (const unsigned char *)cert_b64, strlen(cert_b64)) != 0) {
        hfl_errf(err, "certificate is not base64 DER of at most %d bytes", ID_CERT_DER_MAX);
    } else if ((rv = mbedtls_x509_crt_parse_der(&p->crt, der, der_len)) != 0) {
        id_mbed_err(err, "certificate does not parse", rv);
    } else if ((rv = mbedtls_x509_crt_verify(&p->crt, (mbedtls_x509_crt *)&t->ca, NULL, NULL, &flags, NULL, NULL)) != 0) {
        char info[256];
        mbedtls_x509_crt_verify_info(info, sizeof info, "", flags);
        info[strcspn(info, "\n")] = 0;
        hfl_errf(err, "certificate not accepted: %s", flags ? info : "verification failed");
    } else if ((rv = mbedtls_x509_crt_check_key_usage(&p->crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE)) != 0) {
        hfl_errf(err, "certificate may not sign (no digitalSignature key usage)");
    } else if ((rv = id_names(&p->crt, p->name, p->role, err)) != 0) {
    } else if ((rv = strcmp(p->role, role)) != 0) {
        hfl_errf(err, "certificate of '%s' was issued for the %s role, not %s", p->name, p->role, role);
    } else if (expect_name && (rv = strcmp(p->name, expect_name)) != 0) {
        hfl_errf(err, "certificate names '%s', expected '%s'", p->name, expect_name);
    } else if ((rv = hfl_trust_is_revoked(t, p->name)) != 0) {
        hfl_errf(err, "certificate of '%s' is revoked", p->name);
    }
    free(der);
    if (rv != 0) {
        hfl_peer_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

const char *hfl_peer_name(const hfl_peer *p) { return p->name; }

int hfl_peer_verify(hfl_peer *p, const void *const parts[], const size_t lens[], int n, const char *sig,
                    char *err) {
    unsigned char hash[32], raw[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
    size_t raw_len = 0;
    if (strlen(sig) > HFL_ID_SIG_B64_MAX ||
        mbedtls_base64_decode(raw, sizeof raw, &raw_len, (const unsigned char *)sig, strlen(sig)) != 0)
        return hfl_errf(err, "signature is not base64 of at most %d bytes", (int)sizeof raw);
    id_digest(parts, lens, n, hash);
    if (mbedtls_pk_verify(&p->crt.pk, MBEDTLS_MD_SHA256, hash, 0, raw, raw_len) != 0)
        return hfl_errf(err, "signature of '%s' does not verify", p->name);
    return 0;
}

void hfl_peer_free(hfl_peer *p) {
    if (!p) return;
    mbedtls_x509_crt_free(&p->crt);
    free(p);
}

int hfl_random_hex(char out[HFL_ID_NONCE_HEX + 1], char *err) {
    unsigned char b[HFL_ID_NONCE_HEX / 2];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return hfl_errf(err, "cannot read random bytes: %s", strerror(errno));
    for (size_t i = 0; i < sizeof b; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}

int hfl_revoke_name(const char *revoked_file, const char *name, char *err) {
    char **names;
    int n;
    if (!name[0] || strlen(name) > HFL_ID_NAME_MAX || strpbrk(name, " \t\r\n#"))
        return hfl_errf(err, "'%s' is not a certificate name", name);
    if (trust_read_revoked(revoked_file, &names, &n, err) != 0) return -1;
    int have = 0;
    size_t cap = 64;
    for (int i = 0; i < n; i++) {
        have |= !strcmp(names[i], name);
        cap += strlen(names[i]) + 1;
    }
    char *text = hfl_malloc(cap + strlen(name) + 1);
    size_t len = (size_t)snprintf(text, cap, "# hfl revocation list: one certificate name per line\n");
    for (int i = 0; i < n; i++) len += (size_t)sprintf(text + len, "%s\n", names[i]);
    if (!have) len += (size_t)sprintf(text + len, "%s\n", name);
    int rc = hfl_write_file_atomic(revoked_file, text, len, err);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(text);
    return rc;
}
