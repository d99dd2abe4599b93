/* pki.c: a throwaway certificate authority for hfl with mbedTLS 2.28: one CA,
 * one coordinator certificate and N client certificates (see pki.h).
 *
 * Keys are EC P-256, signatures ECDSA-SHA256, written without the NULL
 * parameter mbedTLS 2.28 puts in the signature algorithm (pki_der.c). The CA has basicConstraints
 * CA:true (path length 0) and keyUsage keyCertSign|cRLSign; leaves have
 * CA:false and keyUsage digitalSignature (what ECDHE-ECDSA needs on both
 * sides). Validity runs from a day ago (clock skew) to valid_days ahead.
 * Serials are 16 bytes: 12 random bytes, then the certificate's index, so they
 * are unique within one CA and unpredictable across CAs. Every file is written
 * to a temporary name with its final mode (0600 where it holds a key, 0644 for
 * ca.crt), fsync'd and renamed into place. */
#include "proto/pki.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pem.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/x509_crt.h>

#include "proto/identity.h"
#include "proto/pki_der.h"
#include "util/util.h"

#define PKI_CERT_PEM_MAX 4096
#define PKI_KEY_PEM_MAX 1024
#define PKI_PATH_MAX 4096

typedef struct {
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    char not_before[16], not_after[16];
} pki_ctx;

/* One generated key and its certificate, both PEM. */
typedef struct {
    mbedtls_pk_context key;
    char cert_pem[PKI_CERT_PEM_MAX];
    char key_pem[PKI_KEY_PEM_MAX];
} pki_entity;

static int pki_mbed_err(char *err, const char *what, int rv) {
    char msg[128];
    mbedtls_strerror(rv, msg, sizeof msg);
    return hfl_errf(err, "%s: mbedTLS error -0x%04x (%s)", what, (unsigned)-rv, msg);
}

static int pki_write_file(const char *dir, const char *name, const char *a, const char *b,
                          mode_t mode, char *err) {
    char path[PKI_PATH_MAX], tmp[PKI_PATH_MAX + 16];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return hfl_errf(err, "path too long: %s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0) return hfl_errf(err, "cannot create %s: %s", tmp, strerror(errno));
    size_t la = strlen(a), lb = b ? strlen(b) : 0;
    int ok = fchmod(fd, mode) == 0 && write(fd, a, la) == (ssize_t)la &&
             (lb == 0 || write(fd, b, lb) == (ssize_t)lb) && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        unlink(tmp);
        return hfl_errf(err, "cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

static int pki_gen_key(pki_ctx *c, pki_entity *ent, char *err) {
    int rv = mbedtls_pk_setup(&ent->key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY));
    if (rv == 0)
        rv = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(ent->key),
                                 mbedtls_ctr_drbg_random, &c->drbg);
    if (rv != 0) return pki_mbed_err(err, "cannot generate an EC P-256 key", rv);
    rv = mbedtls_pk_write_key_pem(&ent->key, (unsigned char *)ent->key_pem, sizeof ent->key_pem);
    if (rv != 0) return pki_mbed_err(err, "cannot write a key as PEM", rv);
    return 0;
}

static int pki_serial(pki_ctx *c, unsigned index, mbedtls_mpi *serial) {
    unsigned char b[16];
    int rv = mbedtls_ctr_drbg_random(&c->drbg, b, 12);
    if (rv != 0) return rv;
    b[0] = (unsigned char)((b[0] & 0x7f) | 0x40); /* positive, full length */
    for (int i = 0; i < 4; i++) b[12 + i] = (unsigned char)(index >> (24 - 8 * i));
    return mbedtls_mpi_read_binary(serial, b, sizeof b);
}

/* Writes crt as DER, takes the NULL parameter out of its signature
 * algorithm identifiers (pki_der.c: RFC 5758 wants none, mbedTLS 2.28 writes
 * one), signs it again and stores it as PEM in subject->cert_pem. */
static int pki_write_pem(pki_ctx *c, mbedtls_x509write_cert *crt, pki_entity *issuer, pki_entity *subject,
                         const char *subject_cn, char *err) {
    unsigned char der[PKI_CERT_PEM_MAX], fixed[PKI_CERT_PEM_MAX];
    int n = mbedtls_x509write_crt_der(crt, der, sizeof der, mbedtls_ctr_drbg_random, &c->drbg);
    if (n < 0) return pki_mbed_err(err, subject_cn, n);
    size_t len, olen;
    char e[HFL_ERR_LEN];
    /* mbedtls_x509write_crt_der writes at the end of the buffer */
    if (hfl_pki_der_without_null(der + sizeof der - (size_t)n, (size_t)n, &issuer->key, mbedtls_ctr_drbg_random,
                                 &c->drbg, fixed, sizeof fixed, &len, e) != 0)
        return hfl_errf(err, "%s: %s", subject_cn, e);
    int rv = mbedtls_pem_write_buffer("-----BEGIN CERTIFICATE-----\n", "-----END CERTIFICATE-----\n", fixed, len,
                                      (unsigned char *)subject->cert_pem, sizeof subject->cert_pem, &olen);
    return rv == 0 ? 0 : pki_mbed_err(err, subject_cn, rv);
}

/* Signs subject's certificate with issuer's key (issuer == subject for the CA). */
static int pki_sign_cert(pki_ctx *c, pki_entity *subject, const char *subject_cn, const char *role,
                         pki_entity *issuer, unsigned index, int is_ca, char *err) {
    char name[128];
    if (snprintf(name, sizeof name, role ? "CN=%s,OU=%s" : "CN=%s", subject_cn, role) >= (int)sizeof name)
        return hfl_errf(err, "common name too long: %s", subject_cn);
    mbedtls_x509write_cert crt;
    mbedtls_mpi serial;
    mbedtls_x509write_crt_init(&crt);
    mbedtls_mpi_init(&serial);
    mbedtls_x509write_crt_set_version(&crt, MBEDTLS_X509_CRT_VERSION_3);
    mbedtls_x509write_crt_set_md_alg(&crt, MBEDTLS_MD_SHA256);
    mbedtls_x509write_crt_set_subject_key(&crt, &subject->key);
    mbedtls_x509write_crt_set_issuer_key(&crt, &issuer->key);
    unsigned char usage = is_ca ? MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN
                                : MBEDTLS_X509_KU_DIGITAL_SIGNATURE;
    int rv;
    if ((rv = pki_serial(c, index, &serial)) != 0 ||
        (rv = mbedtls_x509write_crt_set_serial(&crt, &serial)) != 0 ||
        (rv = mbedtls_x509write_crt_set_subject_name(&crt, name)) != 0 ||
        (rv = mbedtls_x509write_crt_set_issuer_name(&crt, "CN=hfl-ca")) != 0 ||
        (rv = mbedtls_x509write_crt_set_validity(&crt, c->not_before, c->not_after)) != 0 ||
        (rv = mbedtls_x509write_crt_set_basic_constraints(&crt, is_ca, is_ca ? 0 : -1)) != 0 ||
        (rv = mbedtls_x509write_crt_set_key_usage(&crt, usage)) != 0 ||
        (rv = mbedtls_x509write_crt_set_subject_key_identifier(&crt)) != 0 ||
        (rv = mbedtls_x509write_crt_set_authority_key_identifier(&crt)) != 0)
        pki_mbed_err(err, subject_cn, rv);
    if (rv == 0) rv = pki_write_pem(c, &crt, issuer, subject, subject_cn, err);
    mbedtls_mpi_free(&serial);
    mbedtls_x509write_crt_free(&crt);
    return rv == 0 ? 0 : -1;
}

static int pki_init(pki_ctx *c, int valid_days, char *err) {
    time_t now = time(NULL);
    time_t from = now - 86400, to = now + (time_t)valid_days * 86400;
    struct tm tf, tt;
    if (!gmtime_r(&from, &tf) || !gmtime_r(&to, &tt) ||
        strftime(c->not_before, sizeof c->not_before, "%Y%m%d%H%M%S", &tf) != 14 ||
        strftime(c->not_after, sizeof c->not_after, "%Y%m%d%H%M%S", &tt) != 14)
        return hfl_errf(err, "cannot format the validity period");
    static const char pers[] = "hfl-pki";
    int rv = mbedtls_ctr_drbg_seed(&c->drbg, mbedtls_entropy_func, &c->entropy,
                                   (const unsigned char *)pers, sizeof pers - 1);
    if (rv != 0) return pki_mbed_err(err, "cannot seed the random generator", rv);
    return 0;
}

/* A seeded generator and an empty CA entity; pki_end frees and wipes them. */
static int pki_begin(pki_ctx **c, pki_entity **ca, int valid_days, char *err) {
    *c = hfl_calloc(1, sizeof **c);
    *ca = hfl_calloc(1, sizeof **ca);
    mbedtls_entropy_init(&(*c)->entropy);
    mbedtls_ctr_drbg_init(&(*c)->drbg);
    mbedtls_pk_init(&(*ca)->key);
    return pki_init(*c, valid_days, err);
}

static void pki_end(pki_ctx *c, pki_entity *ca) {
    mbedtls_pk_free(&ca->key);
    mbedtls_platform_zeroize(ca, sizeof *ca);
    mbedtls_ctr_drbg_free(&c->drbg);
    mbedtls_entropy_free(&c->entropy);
    free(ca);
    free(c);
}

/* Host names only: letters, digits, '.', '-' and '_' (keeps the X.509 name string unambiguous). */
static int pki_check_cn(const char *cn, const char *what, char *err) {
    size_t n = cn ? strlen(cn) : 0;
    if (n == 0 || n > HFL_ID_NAME_MAX) return hfl_errf(err, "%s must be 1..%d characters", what, HFL_ID_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        char ch = cn[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '-' || ch == '_'))
            return hfl_errf(err, "%s '%s' has a character other than A-Z a-z 0-9 . - _", what, cn);
    }
    return 0;
}

/* Issues one leaf certificate and writes "<name>.pem" (certificate then key). */
static int pki_issue_leaf(pki_ctx *c, pki_entity *ca, const char *dir, const char *file,
                          const char *cn, const char *role, unsigned index, char *err) {
    pki_entity *leaf = hfl_calloc(1, sizeof *leaf);
    mbedtls_pk_init(&leaf->key);
    int rv = pki_gen_key(c, leaf, err);
    if (rv == 0) rv = pki_sign_cert(c, leaf, cn, role, ca, index, 0, err);
    if (rv == 0) rv = pki_write_file(dir, file, leaf->cert_pem, leaf->key_pem, 0600, err);
    mbedtls_pk_free(&leaf->key);
    mbedtls_platform_zeroize(leaf, sizeof *leaf);
    free(leaf);
    return rv;
}

int hfl_pki_create(const char *dir, int n_clients, const char *server_cn, int valid_days,
                   char *err) {
    if (!dir || !*dir) return hfl_errf(err, "no output directory given");
    if (n_clients < 0 || n_clients > 100000)
        return hfl_errf(err, "client count %d is outside [0, 100000]", n_clients);
    if (valid_days < 1 || valid_days > 36500)
        return hfl_errf(err, "validity of %d days is outside [1, 36500]", valid_days);
    if (pki_check_cn(server_cn, "server name", err) != 0 || hfl_mkdirs(dir, err) != 0) return -1;
    pki_ctx *c;
    pki_entity *ca;
    int rv = pki_begin(&c, &ca, valid_days, err);
    if (rv == 0) rv = pki_gen_key(c, ca, err);
    if (rv == 0) rv = pki_sign_cert(c, ca, "hfl-ca", NULL, ca, 0, 1, err);
    if (rv == 0) rv = pki_write_file(dir, "ca.crt", ca->cert_pem, NULL, 0644, err);
    if (rv == 0) rv = pki_write_file(dir, "ca.key", ca->key_pem, NULL, 0600, err);
    if (rv == 0) rv = pki_issue_leaf(c, ca, dir, "coordinator.pem", server_cn, HFL_ROLE_COORDINATOR, 1, err);
    for (int i = 0; rv == 0 && i < n_clients; i++) {
        char cn[32], file[48];
        snprintf(cn, sizeof cn, "client-%d", i);
        snprintf(file, sizeof file, "%s.pem", cn);
        rv = pki_issue_leaf(c, ca, dir, file, cn, HFL_ROLE_CLIENT, 2u + (unsigned)i, err);
    }
    pki_end(c, ca);
    return rv;
}

int hfl_pki_issue(const char *dir, const char *name, const char *role, int valid_days, char *err) {
    char path[PKI_PATH_MAX], file[HFL_ID_NAME_MAX + 8];
    if (!dir || !*dir) return hfl_errf(err, "no CA directory given");
    if (strcmp(role, HFL_ROLE_CLIENT) && strcmp(role, HFL_ROLE_COORDINATOR) && strcmp(role, HFL_ROLE_AGGREGATOR))
        return hfl_errf(err, "role '%s' is not client, coordinator or aggregator", role);
    if (valid_days < 1 || valid_days > 36500)
        return hfl_errf(err, "validity of %d days is outside [1, 36500]", valid_days);
    if (pki_check_cn(name, "certificate name", err) != 0) return -1;
    if (!strcmp(name, "ca")) return hfl_errf(err, "'ca' names the CA's own files");
    snprintf(file, sizeof file, "%s.pem", name);
    snprintf(path, sizeof path, "%s/ca.key", dir);
    pki_ctx *c;
    pki_entity *ca;
    int rv = pki_begin(&c, &ca, valid_days, err);
    if (rv == 0 && (rv = mbedtls_pk_parse_keyfile(&ca->key, path, NULL)) != 0) pki_mbed_err(err, path, rv);
    /* serials: 12 random bytes, then a hash of the name */
    if (rv == 0) rv = pki_issue_leaf(c, ca, dir, file, name, role, hfl_hash32(name), err);
    pki_end(c, ca);
    return rv == 0 ? 0 : -1;
}
