/* test_identity.c: the revocation list and the identity edges of
 * proto/identity.c that test_pki.c (which drives hfl-pki) leaves open.
 *
 * 1. The list as people write it: CRLF line ends, blank lines, lines of
 *    spaces and tabs, whole-line and trailing '#' comments, names padded with
 *    spaces and tabs, and no newline after the last name. Each listed name is
 *    revoked (and a certificate of that name refused by hfl_trust_check,
 *    saying so), and nothing else is: not a commented name, not a prefix,
 *    not the name with its '\r'. A missing file and a file of comments are
 *    empty lists.
 * 2. Refusals, with the line's number: two names on a line, a name of 64
 *    characters (63 is the most) and a 300-character line; a reload that
 *    fails keeps the old list.
 * 3. hfl_revoke_name: it rewrites a CRLF list with the same names (one per
 *    line), adds a name once, keeps a list of 200 long names whole, and
 *    refuses what is not a certificate name.
 * 4. hfl_identity_load: a missing file, a key that is not the certificate's;
 *    a 63-character name (the most) loaded and checked whole; freeing NULL;
 *    hfl_random_hex: 64 lowercase hex digits, fresh each call.
 * Names and the expected answers are written out here, not derived from the
 * code. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/identity.h"
#include "proto/pki.h"
#include "tests/check.h"
#include "util/util.h"

static char dir[] = "/tmp/hfl-test-identity-XXXXXX";
static char ca[300], list[300];

static void write_text(const char *path, const char *text) {
    char err[HFL_ERR_LEN];
    REQUIRE_MSG(hfl_write_file_atomic(path, text, strlen(text), err) == 0, "%s", err);
}

static const char *const people_list =
    "# hfl revocation list, edited on a Windows laptop\r\n"
    "\r\n"
    "client-1\r\n"
    "  client-2 \t# stolen laptop\r\n"
    "\t \r\n"
    "#client-3\r\n"
    "   # client-4 is fine\r\n"
    "client-5#no space before the comment\r\n"
    "edge-9"; /* no newline at the end */

static void test_list_forms(void) {
    char err[HFL_ERR_LEN];
    write_text(list, people_list);
    hfl_trust *t;
    REQUIRE_MSG(hfl_trust_load(ca, list, &t, err) == 0, "%s", err);
    static const char *const revoked[] = {"client-1", "client-2", "client-5", "edge-9"};
    static const char *const kept[] = {"client-0", "client-3", "client-4", "client-", "client-1\r", "edge-", "edge-90",
                                       "#client-3", "", "client-2 "};
    for (size_t i = 0; i < sizeof revoked / sizeof *revoked; i++)
        CHECK_MSG(hfl_trust_is_revoked(t, revoked[i]), "'%s' is on the list but not revoked", revoked[i]);
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        CHECK_MSG(!hfl_trust_is_revoked(t, kept[i]), "'%s' is revoked but not on the list", kept[i]);
    /* a certificate of a listed name is refused, one of another name accepted */
    char pem[400];
    hfl_identity *c1, *c0;
    hfl_peer *p = NULL;
    snprintf(pem, sizeof pem, "%s/client-1.pem", dir);
    REQUIRE_MSG(hfl_identity_load(pem, &c1, err) == 0, "%s", err);
    snprintf(pem, sizeof pem, "%s/client-0.pem", dir);
    REQUIRE_MSG(hfl_identity_load(pem, &c0, err) == 0, "%s", err);
    CHECK_MSG(hfl_trust_check(t, hfl_identity_cert(c1), HFL_ROLE_CLIENT, NULL, &p, err) == -1 &&
                  !strcmp(err, "certificate of 'client-1' is revoked"),
              "client-1 (revoked in a CRLF list): %s", err);
    CHECK_MSG(hfl_trust_check(t, hfl_identity_cert(c0), HFL_ROLE_CLIENT, "client-0", &p, err) == 0, "%s", err);
    hfl_peer_free(p);
    hfl_identity_free(c1);
    hfl_identity_free(c0);
    hfl_trust_free(t);
    /* comments only, and no file at all: empty lists */
    write_text(list, "# nobody\n\n  # still nobody");
    REQUIRE_MSG(hfl_trust_load(ca, list, &t, err) == 0, "%s", err);
    CHECK(!hfl_trust_is_revoked(t, "client-1") && !hfl_trust_is_revoked(t, "nobody"));
    hfl_trust_free(t);
    char missing[400];
    snprintf(missing, sizeof missing, "%s/no-such-list.txt", dir);
    CHECK_MSG(hfl_trust_load(ca, missing, &t, err) == 0, "a missing list: %s", err);
    CHECK(!hfl_trust_is_revoked(t, "client-1"));
    hfl_trust_free(t);
    CHECK_MSG(hfl_trust_load(ca, NULL, &t, err) == 0, "no list: %s", err);
    hfl_trust_free(t);
}

static void test_list_refusals(void) {
    char err[HFL_ERR_LEN], want[600], long_line[320];
    hfl_trust *t;
    static const struct {
        const char *text;
        int line;
    } bad[] = {{"client-1\nclient-2 client-3\n", 2},
               {"# 63 is the most\n\r\n"
                "a123456789b123456789c123456789d123456789e123456789f123456789ghij\r\n",
                3},
               {"client-1\tclient-2", 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(list, bad[i].text);
        snprintf(want, sizeof want, "revocation list %s line %d: not one certificate name", list, bad[i].line);
        CHECK_MSG(hfl_trust_load(ca, list, &t, err) == -1 && !strcmp(err, want), "case %zu: '%s'", i, err);
    }
    memset(long_line, 'x', 300);
    long_line[300] = '\n';
    long_line[301] = 0;
    write_text(list, long_line);
    CHECK_MSG(hfl_trust_load(ca, list, &t, err) == -1 && strstr(err, "line 1: not one certificate name"), "%s", err);
    /* 63 characters are a name */
    write_text(list, "a123456789b123456789c123456789d123456789e123456789f123456789ghi\n");
    REQUIRE_MSG(hfl_trust_load(ca, list, &t, err) == 0, "%s", err);
    CHECK(hfl_trust_is_revoked(t, "a123456789b123456789c123456789d123456789e123456789f123456789ghi"));
    /* a reload that fails keeps the old list; one that works replaces it */
    write_text(list, "client-1\nclient-2 client-3\n");
    CHECK(hfl_trust_reload(t, err) == -1 && strstr(err, "line 2"));
    CHECK(hfl_trust_is_revoked(t, "a123456789b123456789c123456789d123456789e123456789f123456789ghi") &&
          !hfl_trust_is_revoked(t, "client-1"));
    write_text(list, "client-1\r\n");
    CHECK_MSG(hfl_trust_reload(t, err) == 0, "%s", err);
    CHECK(hfl_trust_is_revoked(t, "client-1") &&
          !hfl_trust_is_revoked(t, "a123456789b123456789c123456789d123456789e123456789f123456789ghi"));
    hfl_trust_free(t);
}

static void test_revoke_name(void) {
    char err[HFL_ERR_LEN];
    write_text(list, people_list);
    CHECK_MSG(hfl_revoke_name(list, "client-7", err) == 0, "%s", err);
    CHECK_MSG(hfl_revoke_name(list, "client-1", err) == 0, "%s", err); /* already there */
    size_t len;
    char *text = hfl_read_file(list, &len, err);
    const char *want = "# hfl revocation list: one certificate name per line\n"
                       "client-1\nclient-2\nclient-5\nedge-9\nclient-7\n";
    CHECK_MSG(text && !strcmp(text, want), "revoke_name wrote:\n%s", text ? text : err);
    free(text);
    static const char *const bad[] = {"", "a b", "x#y", "tab\there", "cr\r", "lf\n",
                                      "a123456789b123456789c123456789d123456789e123456789f123456789ghij"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(hfl_revoke_name(list, bad[i], err) == -1 && strstr(err, "is not a certificate name"),
                  "'%s' taken as a name", bad[i]);
    /* a long list: every name kept once, in order, and the new one last */
    char *big = hfl_malloc(200 * 70 + 1), want_big[200 * 70 + 200];
    size_t at = 0, wat = (size_t)snprintf(want_big, sizeof want_big, "# hfl revocation list: one certificate name per line\n");
    for (int i = 0; i < 200; i++) {
        char n[80];
        snprintf(n, sizeof n, "%.*s-%03d", 58, "a123456789b123456789c123456789d123456789e123456789f1234567", i);
        at += (size_t)sprintf(big + at, "%s\r\n", n);
        wat += (size_t)sprintf(want_big + wat, "%s\n", n);
    }
    write_text(list, big);
    free(big);
    const char *longest = "a123456789b123456789c123456789d123456789e123456789f123456789ghi";
    CHECK_MSG(hfl_revoke_name(list, longest, err) == 0, "%s", err);
    snprintf(want_big + wat, sizeof want_big - wat, "%s\n", longest);
    text = hfl_read_file(list, &len, err);
    CHECK_MSG(text && !strcmp(text, want_big), "a list of 200 names and one more came back %zu bytes, want %zu", len,
              strlen(want_big));
    free(text);
    write_text(list, "client-1 client-2\n");
    CHECK(hfl_revoke_name(list, "client-3", err) == -1 && strstr(err, "line 1"));
    text = hfl_read_file(list, &len, err);
    CHECK_MSG(text && !strcmp(text, "client-1 client-2\n"), "a bad list was rewritten: %s", text ? text : err);
    free(text);
}

static void test_identity_edges(void) {
    char err[HFL_ERR_LEN], path[400], a[400], b[400];
    hfl_identity *id;
    snprintf(path, sizeof path, "%s/nobody.pem", dir);
    CHECK(hfl_identity_load(path, &id, err) == -1 && strstr(err, path));
    /* client-0's certificate with client-1's key */
    snprintf(a, sizeof a, "%s/client-0.pem", dir);
    snprintf(b, sizeof b, "%s/client-1.pem", dir);
    size_t la, lb;
    char *ta = hfl_read_file(a, &la, err), *tb = hfl_read_file(b, &lb, err);
    REQUIRE(ta && tb);
    char *key = strstr(tb, "-----BEGIN EC PRIVATE KEY-----");
    if (!key) key = strstr(tb, "-----BEGIN PRIVATE KEY-----");
    char *end = strstr(ta, "-----END CERTIFICATE-----");
    REQUIRE(key && end);
    end += strlen("-----END CERTIFICATE-----\n");
    char *mixed = hfl_malloc((size_t)(end - ta) + strlen(key) + 1);
    memcpy(mixed, ta, (size_t)(end - ta));
    strcpy(mixed + (end - ta), key);
    write_text(path, mixed);
    CHECK_MSG(hfl_identity_load(path, &id, err) == -1 && strstr(err, "the key does not belong to the certificate"),
              "%s", err);
    free(mixed);
    free(ta);
    free(tb);
    /* the longest name a certificate may carry: loaded and checked whole */
    const char *longest = "a123456789b123456789c123456789d123456789e123456789f123456789ghi";
    REQUIRE_MSG(hfl_pki_issue(dir, longest, HFL_ROLE_CLIENT, 1, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/%s.pem", dir, longest);
    REQUIRE_MSG(hfl_identity_load(path, &id, err) == 0, "the 63-character name: %s", err);
    CHECK(!strcmp(hfl_identity_name(id), longest) && !strcmp(hfl_identity_role(id), HFL_ROLE_CLIENT));
    hfl_trust *t;
    hfl_peer *p;
    REQUIRE_MSG(hfl_trust_load(ca, NULL, &t, err) == 0, "%s", err);
    CHECK_MSG(hfl_trust_check(t, hfl_identity_cert(id), HFL_ROLE_CLIENT, longest, &p, err) == 0, "%s", err);
    CHECK(!strcmp(hfl_peer_name(p), longest));
    hfl_peer_free(p);
    hfl_trust_free(t);
    hfl_identity_free(id);
    /* freeing nothing is allowed */
    hfl_peer_free(NULL);
    hfl_trust_free(NULL);
    hfl_identity_free(NULL);
    char x[HFL_ID_NONCE_HEX + 1], y[HFL_ID_NONCE_HEX + 1];
    REQUIRE(hfl_random_hex(x, err) == 0 && hfl_random_hex(y, err) == 0);
    CHECK(strlen(x) == HFL_ID_NONCE_HEX && strspn(x, "0123456789abcdef") == HFL_ID_NONCE_HEX && strcmp(x, y) != 0);
}

static const check_case cases[] = {
    {"list_forms", test_list_forms},
    {"list_refusals", test_list_refusals},
    {"revoke_name", test_revoke_name},
    {"identity_edges", test_identity_edges},
};

int main(int argc, char **argv) {
    char err[HFL_ERR_LEN];
    REQUIRE_MSG(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    REQUIRE_MSG(hfl_pki_create(dir, 2, "localhost", 1, err) == 0, "%s", err);
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    snprintf(list, sizeof list, "%s/revoked.txt", dir);
    int rc = check_run("test_identity", cases, CHECK_CASES(cases), argc, argv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
