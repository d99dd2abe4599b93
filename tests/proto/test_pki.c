/* test_pki.c: the hfl-pki program and hfl_pki_create (proto/pki.c,
 * proto/pki_main.c): argument handling and exit codes, the --json listing,
 * file modes, and the certificates themselves, parsed back with mbedTLS (CNs,
 * CA flag, key usage, chain verification, key/certificate pairs, distinct
 * serials, validity), hfl-pki issue and revoke, and proto/identity.h's
 * checks of roles, names, revocation and signatures. Usage: test_pki PATH-TO-hfl-pki */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

#include "proto/identity.h"
#include "proto/pki.h"
#include "tests/check.h"
#include "util/util.h"

static const char *pki_exe;

/* Runs hfl-pki with args; returns its exit status and its stdout+stderr in out. */
static int run_pki(const char *args, char *out, size_t outlen) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", pki_exe, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_arguments(const char *dir) {
    char out[8192], args[600];
    CHECK(run_pki("--help", out, sizeof out) == 0 && strstr(out, "usage: hfl-pki"));
    CHECK(run_pki("", out, sizeof out) == 2 && strstr(out, "required"));
    CHECK(run_pki("--out x --clients abc", out, sizeof out) == 2 && strstr(out, "--clients"));
    CHECK(run_pki("--out x --clients -1", out, sizeof out) == 2);
    CHECK(run_pki("--out x --clients 1 --days 0", out, sizeof out) == 2 && strstr(out, "--days"));
    CHECK(run_pki("--bogus", out, sizeof out) == 2 && strstr(out, "--bogus"));
    CHECK(run_pki("--out", out, sizeof out) == 2);
    CHECK(run_pki("--out x --clients 1 extra", out, sizeof out) == 2 && strstr(out, "extra"));
    snprintf(args, sizeof args, "--out %s/cn --clients 1 --cn 'a,b'", dir);
    CHECK(run_pki(args, out, sizeof out) == 1 && strstr(out, "server name"));
    /* a regular file in the way makes the directory uncreatable, even for root */
    char file[512];
    snprintf(file, sizeof file, "%s/plainfile", dir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f) fclose(f);
    snprintf(args, sizeof args, "--out %s/sub --clients 1", file);
    CHECK(run_pki(args, out, sizeof out) == 1 && strstr(out, "cannot create directory") &&
          strchr(out, '\n') == out + strlen(out) - 1);
}

static void check_cert(const char *path, const char *cn, int is_ca, mbedtls_x509_crt *ca,
                       unsigned char serials[][32], size_t *serial_lens, int idx) {
    mbedtls_x509_crt crt;
    mbedtls_pk_context key;
    mbedtls_x509_crt_init(&crt);
    mbedtls_pk_init(&key);
    CHECK(mbedtls_x509_crt_parse_file(&crt, path) == 0);
    char dn[128], want[100];
    /* leaves name their role in the OU: the coordinator is idx 1, clients follow */
    snprintf(want, sizeof want, "CN=%s%s", cn, idx == 0 ? "" : idx == 1 ? ", OU=coordinator" : ", OU=client");
    CHECK(mbedtls_x509_dn_gets(dn, sizeof dn, &crt.subject) > 0 && strcmp(dn, want) == 0);
    CHECK(mbedtls_x509_dn_gets(dn, sizeof dn, &crt.issuer) > 0 && strcmp(dn, "CN=hfl-ca") == 0);
    CHECK(crt.ca_istrue == is_ca);
    CHECK(mbedtls_x509_crt_check_key_usage(&crt, is_ca ? MBEDTLS_X509_KU_KEY_CERT_SIGN
                                                       : MBEDTLS_X509_KU_DIGITAL_SIGNATURE) == 0);
    CHECK(mbedtls_pk_get_type(&crt.pk) == MBEDTLS_PK_ECKEY && mbedtls_pk_get_bitlen(&crt.pk) == 256);
    CHECK(crt.sig_md == MBEDTLS_MD_SHA256);
    CHECK(mbedtls_x509_time_is_past(&crt.valid_from) && mbedtls_x509_time_is_future(&crt.valid_to));
    CHECK(crt.valid_to.year - crt.valid_from.year <= 1); /* --days 10 */
    uint32_t flags = 1;
    CHECK(mbedtls_x509_crt_verify(&crt, ca, NULL, NULL, &flags, NULL, NULL) == 0 && flags == 0);
    if (!is_ca) { /* the leaf file holds the key too, and it matches */
        CHECK(mbedtls_pk_parse_keyfile(&key, path, NULL) == 0);
        CHECK(mbedtls_pk_check_pair(&crt.pk, &key) == 0);
        struct stat st;
        CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    }
    CHECK(crt.serial.len <= 32);
    serial_lens[idx] = crt.serial.len;
    memcpy(serials[idx], crt.serial.p, crt.serial.len <= 32 ? crt.serial.len : 32);
    for (int j = 0; j < idx; j++)
        CHECK(serial_lens[j] != crt.serial.len || memcmp(serials[j], crt.serial.p, crt.serial.len));
    mbedtls_pk_free(&key);
    mbedtls_x509_crt_free(&crt);
}

static void test_output(const char *dir) {
    char out[8192], args[600], path[600];
    snprintf(args, sizeof args, "--out %s/pki/nested --clients 3 --cn coord.example --days 10 --json", dir);
    CHECK(run_pki(args, out, sizeof out) == 0);
    cJSON *j = cJSON_Parse(out);
    CHECK(cJSON_IsObject(j));
    const cJSON *clients = cJSON_GetObjectItemCaseSensitive(j, "clients");
    CHECK(cJSON_GetArraySize(clients) == 3);
    snprintf(path, sizeof path, "%s/pki/nested/client-2.pem", dir);
    CHECK(cJSON_IsString(cJSON_GetArrayItem(clients, 2)) &&
          strcmp(cJSON_GetArrayItem(clients, 2)->valuestring, path) == 0);
    const cJSON *ca_path = cJSON_GetObjectItemCaseSensitive(j, "ca_cert");
    const cJSON *key_path = cJSON_GetObjectItemCaseSensitive(j, "ca_key");
    const cJSON *coord_path = cJSON_GetObjectItemCaseSensitive(j, "coordinator");
    if (!CHECK(cJSON_IsString(ca_path) && cJSON_IsString(key_path) && cJSON_IsString(coord_path) &&
               cJSON_GetArraySize(clients) == 3)) {
        cJSON_Delete(j);
        return;
    }
    mbedtls_x509_crt ca;
    mbedtls_pk_context ca_key;
    mbedtls_x509_crt_init(&ca);
    mbedtls_pk_init(&ca_key);
    CHECK(mbedtls_x509_crt_parse_file(&ca, ca_path->valuestring) == 0);
    CHECK(mbedtls_pk_parse_keyfile(&ca_key, key_path->valuestring, NULL) == 0);
    CHECK(mbedtls_pk_check_pair(&ca.pk, &ca_key) == 0);
    struct stat st;
    CHECK(stat(key_path->valuestring, &st) == 0 && (st.st_mode & 0777) == 0600);
    unsigned char serials[5][32];
    size_t serial_lens[5];
    check_cert(ca_path->valuestring, "hfl-ca", 1, &ca, serials, serial_lens, 0);
    check_cert(coord_path->valuestring, "coord.example", 0, &ca, serials, serial_lens, 1);
    for (int i = 0; i < 3; i++) {
        char cn[32];
        snprintf(cn, sizeof cn, "client-%d", i);
        check_cert(cJSON_GetArrayItem(clients, i)->valuestring, cn, 0, &ca, serials, serial_lens, 2 + i);
    }
    /* a second CA's certificates do not verify against the first */
    char err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/other", dir);
    CHECK(hfl_pki_create(path, 0, "localhost", 1, err) == 0);
    snprintf(path, sizeof path, "%s/other/coordinator.pem", dir);
    mbedtls_x509_crt other;
    mbedtls_x509_crt_init(&other);
    uint32_t flags = 0;
    CHECK(mbedtls_x509_crt_parse_file(&other, path) == 0);
    CHECK(mbedtls_x509_crt_verify(&other, &ca, NULL, NULL, &flags, NULL, NULL) != 0 && flags != 0);
    CHECK(hfl_pki_create(path, 0, "", 1, err) == -1 && strstr(err, "server name"));
    CHECK(hfl_pki_create(dir, -1, "localhost", 1, err) == -1);
    CHECK(hfl_pki_create(dir, 1, "localhost", 0, err) == -1);
    mbedtls_x509_crt_free(&other);
    mbedtls_pk_free(&ca_key);
    mbedtls_x509_crt_free(&ca);
    cJSON_Delete(j);
}

/* hfl-pki issue and revoke, and what proto/identity.h makes of the result:
 * roles, names, revocation, a foreign CA, signatures and their tampering. */
static void test_issue_revoke(const char *dir) {
    char out[8192], args[900], pki[600], path[700], err[HFL_ERR_LEN];
    snprintf(pki, sizeof pki, "%s/ir", dir);
    CHECK(hfl_pki_create(pki, 1, "localhost", 1, err) == 0);
    snprintf(args, sizeof args, "issue edge-7 --out %s", pki);
    CHECK_MSG(run_pki(args, out, sizeof out) == 0 && strstr(out, "role client"), "%s", out);
    snprintf(args, sizeof args, "issue backup --role coordinator --out %s", pki);
    CHECK_MSG(run_pki(args, out, sizeof out) == 0 && strstr(out, "role coordinator"), "%s", out);
    snprintf(args, sizeof args, "issue 'a b' --out %s", pki);
    CHECK_MSG(run_pki(args, out, sizeof out) == 1 && strstr(out, "certificate name"), "%s", out);
    snprintf(args, sizeof args, "issue x --role admin --out %s", pki);
    CHECK_MSG(run_pki(args, out, sizeof out) == 1 && strstr(out, "role"), "%s", out);
    CHECK(run_pki("revoke", out, sizeof out) == 2);
    hfl_trust *trust;
    hfl_identity *edge, *backup, *c0;
    hfl_peer *peer = NULL;
    snprintf(path, sizeof path, "%s/revoked.txt", pki);
    REQUIRE_MSG(hfl_trust_load(strcat(strcpy(out, pki), "/ca.crt"), path, &trust, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/edge-7.pem", pki);
    REQUIRE_MSG(hfl_identity_load(path, &edge, err) == 0, "%s", err);
    CHECK(!strcmp(hfl_identity_name(edge), "edge-7") && !strcmp(hfl_identity_role(edge), HFL_ROLE_CLIENT));
    snprintf(path, sizeof path, "%s/backup.pem", pki);
    REQUIRE_MSG(hfl_identity_load(path, &backup, err) == 0, "%s", err);
    CHECK(!strcmp(hfl_identity_role(backup), HFL_ROLE_COORDINATOR));
    snprintf(path, sizeof path, "%s/client-0.pem", pki);
    REQUIRE_MSG(hfl_identity_load(path, &c0, err) == 0, "%s", err);
    /* roles and names */
    CHECK_MSG(hfl_trust_check(trust, hfl_identity_cert(edge), HFL_ROLE_CLIENT, NULL, &peer, err) == 0, "%s", err);
    hfl_peer_free(peer);
    CHECK(hfl_trust_check(trust, hfl_identity_cert(edge), HFL_ROLE_COORDINATOR, NULL, &peer, err) == -1 &&
          strstr(err, "client role"));
    CHECK(hfl_trust_check(trust, hfl_identity_cert(backup), HFL_ROLE_COORDINATOR, "localhost", &peer, err) == -1 &&
          strstr(err, "expected 'localhost'"));
    CHECK(hfl_trust_check(trust, "not base64!", HFL_ROLE_CLIENT, NULL, &peer, err) == -1);
    /* signatures: good, over other data, by another key */
    const char *msg = "challenge-1234";
    const void *parts[] = {"domain", msg};
    size_t lens[] = {6, strlen(msg)};
    char sig[HFL_ID_SIG_B64_MAX + 1];
    REQUIRE(hfl_identity_sign(edge, parts, lens, 2, sig, err) == 0);
    REQUIRE_MSG(hfl_trust_check(trust, hfl_identity_cert(edge), HFL_ROLE_CLIENT, NULL, &peer, err) == 0, "%s", err);
    CHECK_MSG(hfl_peer_verify(peer, parts, lens, 2, sig, err) == 0, "%s", err);
    lens[1]--; /* one byte less signed: the length prefix differs */
    CHECK(hfl_peer_verify(peer, parts, lens, 2, sig, err) == -1 && strstr(err, "does not verify"));
    lens[1]++;
    char other[HFL_ID_SIG_B64_MAX + 1];
    REQUIRE(hfl_identity_sign(c0, parts, lens, 2, other, err) == 0);
    CHECK(hfl_peer_verify(peer, parts, lens, 2, other, err) == -1);
    hfl_peer_free(peer);
    /* revocation: by name, once per name, applied on reload */
    snprintf(args, sizeof args, "revoke edge-7 --out %s", pki);
    CHECK_MSG(run_pki(args, out, sizeof out) == 0, "%s", out);
    CHECK_MSG(run_pki(args, out, sizeof out) == 0, "%s", out);
    CHECK_MSG(hfl_trust_check(trust, hfl_identity_cert(edge), HFL_ROLE_CLIENT, NULL, &peer, err) == 0,
              "revoked before the list was reloaded");
    hfl_peer_free(peer);
    CHECK(hfl_trust_reload(trust, err) == 0 && hfl_trust_is_revoked(trust, "edge-7") &&
          !hfl_trust_is_revoked(trust, "client-0"));
    CHECK(hfl_trust_check(trust, hfl_identity_cert(edge), HFL_ROLE_CLIENT, NULL, &peer, err) == -1 &&
          strstr(err, "revoked"));
    snprintf(path, sizeof path, "%s/revoked.txt", pki);
    size_t len;
    char *text = hfl_read_file(path, &len, err);
    const char *first = text ? strstr(text, "\nedge-7\n") : NULL;
    CHECK_MSG(first && !strstr(first + 1, "\nedge-7\n"), "edge-7 not listed once in revoked.txt: %s", text ? text : err);
    free(text);
    /* a foreign CA's client */
    snprintf(path, sizeof path, "%s/foreign", dir);
    CHECK(hfl_pki_create(path, 1, "localhost", 1, err) == 0);
    hfl_identity *alien;
    snprintf(path, sizeof path, "%s/foreign/client-0.pem", dir);
    REQUIRE_MSG(hfl_identity_load(path, &alien, err) == 0, "%s", err);
    CHECK(hfl_trust_check(trust, hfl_identity_cert(alien), HFL_ROLE_CLIENT, NULL, &peer, err) == -1 &&
          strstr(err, "not accepted"));
    hfl_identity_free(alien);
    hfl_identity_free(edge);
    hfl_identity_free(backup);
    hfl_identity_free(c0);
    hfl_trust_free(trust);
}

static char dir[] = "/tmp/hfl-test-pki-XXXXXX"; /* made in main, shared by the cases */

static void case_arguments(void) { test_arguments(dir); }
static void case_output(void) { test_output(dir); }
static void case_issue_revoke(void) { test_issue_revoke(dir); }

static const check_case cases[] = {
    {"arguments", case_arguments},
    {"output", case_output},
    {"issue_revoke", case_issue_revoke},
};

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_pki PATH-TO-hfl-pki\n");
        return 2;
    }
    pki_exe = argv[1];
    REQUIRE_MSG(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    /* argv holds hfl-pki's path, not case names: argc 0, cases from HFL_TEST_CASE */
    int rc = check_run("test_pki", cases, CHECK_CASES(cases), 0, argv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
