/* test_auth.c: the coordinator's side of the proven hello, revocation and
 * re-authentication (coordinator/auth.c), driven in-process with a PKI
 * made by hfl_pki_create and hellos built as proto/hello.c builds them.
 *
 * 1. The exchange: a hello with a certificate and a nonce gets a CHALLENGE
 *    (64 hex digits, our name and certificate, this instance, and our
 *    signature over (HFL_SIG_CHALLENGE, nonce, challenge, client name),
 *    checked here with the coordinator's certificate); the hello signed
 *    over (HFL_SIG_HELLO, coordinator name, meta bytes) with the challenge is
 *    accepted once, under its certificate's name (a `name` field is not
 *    believed); replayed, it is refused with -2 (say hello again).
 * 2. Refusals: no certificate, a coordinator's certificate, a revoked name,
 *    no signature, a signature over other bytes or by another key, another
 *    client's challenge, a challenge never issued, one displaced by two later
 *    hellos on the same connection (CHALLENGES_PER_CONN, 2); a 257-byte
 *    signature is none, a 256-byte one
 *    (HFL_ID_SIG_B64_MAX) is checked. A 63-character name (the most) comes
 *    through whole.
 * 3. The challenge's lifetime, 30 s (the protocol's figure, written here as
 *    a literal so that a changed CHALLENGE_TTL_S fails): a challenge issued
 *    by auth_hello is spendable 29.5 s later and not 30.5 s later. The
 *    table's bounds are test_hello_guard.c's.
 * 4. auth_reload applies a new list to registered sessions (revoked, no
 *    plan, "certificate revoked", one client_revoked event, a line on stdout
 *    unless --quiet) and keeps the old
 *    list when the new one does not parse; --insecure takes the hello's name;
 *    auth_init refuses a client's certificate as the coordinator's;
 *    auth_equal; the reauth reply. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "proto/hello.h"
#include "coordinator/challenges.h"
#include "proto/pki.h"
#include "tests/coordinator/rounds_harness.h"

static char dir[] = "/tmp/hfl-test-auth-XXXXXX";
static char ca[300], cpem[300], revoked[300];
static hfl_identity *ids[4]; /* client-0, client-1, client-2, and one with the longest name */
#define LONG_NAME "a123456789b123456789c123456789d123456789e123456789f123456789ghi" /* 63 characters */
static hfl_identity *coord_id;

/* A HELLO with meta (and payload), decoded as the server would decode it. */
static int ask(const cJSON *meta, const char *sig, uint32_t conn, char name[HFL_ID_NAME_MAX + 1], cJSON **reply, char *err) {
    size_t len, rlen = 0;
    uint8_t *buf = hfl_msg_encode(HFL_MSG_HELLO, meta, sig, sig ? strlen(sig) : 0, &len);
    hfl_msg m;
    REQUIRE(hfl_msg_decode(buf, len, 1 << 20, &m, err) == 0);
    uint8_t *rep = NULL;
    name[0] = 0;
    int rc = auth_hello(&c, &m, conn, 0xA0 + conn, name, &rep, &rlen, err);
    hfl_msg_free(&m);
    free(buf);
    *reply = rep ? reply_meta(rep, rlen, HFL_MSG_CHALLENGE) : NULL;
    return rc;
}

/* Step 1 for client i: its challenge (checked), into challenge. */
static int challenge_for(int i, char challenge[HFL_ID_NONCE_HEX + 1]) {
    char err[HFL_ERR_LEN] = "", name[HFL_ID_NAME_MAX + 1], nonce[HFL_ID_NONCE_HEX + 1];
    REQUIRE(hfl_random_hex(nonce, err) == 0);
    cJSON *meta = cJSON_CreateObject(), *rep;
    cJSON_AddStringToObject(meta, "cert", hfl_identity_cert(ids[i]));
    cJSON_AddStringToObject(meta, "nonce", nonce);
    int rc = ask(meta, NULL, (uint32_t)i + 1, name, &rep, err);
    cJSON_Delete(meta);
    if (!CHECK_MSG(rc == 0 && rep, "hello of client-%d without a challenge: %d %s", i, rc, err)) {
        cJSON_Delete(rep);
        return -1;
    }
    const char *ch = str(rep, "challenge"), *who = str(rep, "coordinator"), *cert = str(rep, "cert");
    const char *sig = str(rep, "signature"), *inst = str(rep, "instance");
    CHECK(ch && strlen(ch) == HFL_ID_NONCE_HEX && strspn(ch, "0123456789abcdef") == HFL_ID_NONCE_HEX);
    CHECK(who && !strcmp(who, "localhost") && cert && !strcmp(cert, hfl_identity_cert(coord_id)));
    CHECK(inst && !strcmp(inst, c.instance) && strlen(inst) == 32);
    /* the coordinator's signature over our nonce, checked with its certificate */
    hfl_trust *t;
    hfl_peer *p;
    REQUIRE(hfl_trust_load(ca, NULL, &t, err) == 0);
    REQUIRE_MSG(cert && hfl_trust_check(t, cert, HFL_ROLE_COORDINATOR, "localhost", &p, err) == 0, "%s", err);
    const char *me = hfl_identity_name(ids[i]);
    const void *parts[] = {HFL_SIG_CHALLENGE, nonce, ch, me};
    const size_t lens[] = {strlen(HFL_SIG_CHALLENGE), strlen(nonce), ch ? strlen(ch) : 0, strlen(me)};
    CHECK_MSG(sig && hfl_peer_verify(p, parts, lens, 4, sig, err) == 0, "challenge signature: %s", err);
    hfl_peer_free(p);
    hfl_trust_free(t);
    snprintf(challenge, HFL_ID_NONCE_HEX + 1, "%s", ch ? ch : "");
    cJSON_Delete(rep);
    return 0;
}

/* Client i's second hello: its fields with `challenge`, as sent. */
static cJSON *hello_meta(int i, const char *challenge) {
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "samples", 100);
    cJSON_AddStringToObject(meta, "name", "someone-else"); /* not believed */
    cJSON_AddStringToObject(meta, "cert", hfl_identity_cert(ids[i]));
    cJSON_AddStringToObject(meta, "challenge", challenge);
    return meta;
}

/* Step 2: client i's hello carrying `challenge`, signed by signer over
 * (HFL_SIG_HELLO, coord_name, the meta bytes) (no payload when signer < 0).
 * Returns auth_hello's answer, the proven name in name. */
static int answer(int i, const char *challenge, int signer, const char *coord_name, char name[HFL_ID_NAME_MAX + 1],
                  char *err) {
    cJSON *meta = hello_meta(i, challenge), *rep;
    char *text = cJSON_PrintUnformatted(meta), sig[HFL_ID_SIG_B64_MAX + 1] = "";
    const void *parts[] = {HFL_SIG_HELLO, coord_name, text};
    const size_t lens[] = {strlen(HFL_SIG_HELLO), strlen(coord_name), strlen(text)};
    if (signer >= 0) REQUIRE(hfl_identity_sign(ids[signer], parts, lens, 3, sig, err) == 0);
    cJSON_free(text);
    int rc = ask(meta, signer >= 0 ? sig : NULL, (uint32_t)i + 1, name, &rep, err);
    cJSON_Delete(meta);
    CHECK(rep == NULL);
    cJSON_Delete(rep);
    return rc;
}

/* Challenges pending now. */
static int pending(void) { return challenges_pending(c.challenges, hfl_now()); }

static void setup_auth(void) {
    char err[HFL_ERR_LEN] = "";
    setup(1, 1, 60, 1);
    c.cfg.tls.ca_file = ca;
    c.cfg.tls.cert_file = cpem;
    unlink(revoked);
    REQUIRE_MSG(auth_init(&c, revoked, err) == 0, "%s", err);
}

static void teardown_auth(void) {
    auth_free(&c);
    teardown();
}

static void test_exchange(void) {
    char err[HFL_ERR_LEN] = "", ch[HFL_ID_NONCE_HEX + 1], name[HFL_ID_NAME_MAX + 1];
    setup_auth();
    CHECK(strlen(c.instance) == 32 && strspn(c.instance, "0123456789abcdef") == 32);
    REQUIRE(challenge_for(0, ch) == 0);
    CHECK(pending() == 1 && challenges_known(c.challenges, ch, hfl_now()));
    CHECK_MSG(answer(0, ch, 0, "localhost", name, err) == 1 && !strcmp(name, "client-0"), "%s", err);
    CHECK(pending() == 0);
    CHECK(answer(0, ch, 0, "localhost", name, err) == -2 && strstr(err, "no challenge of ours that is fresh and unspent"));
    /* two clients at once: each spends its own */
    char ch1[HFL_ID_NONCE_HEX + 1], ch2[HFL_ID_NONCE_HEX + 1];
    REQUIRE(challenge_for(1, ch1) == 0 && challenge_for(2, ch2) == 0);
    CHECK(pending() == 2);
    CHECK_MSG(answer(2, ch2, 2, "localhost", name, err) == 1 && !strcmp(name, "client-2"), "%s", err);
    CHECK(pending() == 1 && challenges_known(c.challenges, ch1, hfl_now()));
    CHECK_MSG(answer(1, ch1, 1, "localhost", name, err) == 1 && !strcmp(name, "client-1"), "%s", err);
    teardown_auth();
}

static void test_refusals(void) {
    char err[HFL_ERR_LEN] = "", ch[HFL_ID_NONCE_HEX + 1], ch1[HFL_ID_NONCE_HEX + 1], name[HFL_ID_NAME_MAX + 1];
    setup_auth();
    cJSON *meta = cJSON_CreateObject(), *rep;
    cJSON_AddStringToObject(meta, "nonce", "00");
    CHECK(ask(meta, NULL, 9, name, &rep, err) == -1 && strstr(err, "hello carries no certificate ('cert')"));
    cJSON_AddStringToObject(meta, "cert", hfl_identity_cert(coord_id));
    CHECK(ask(meta, NULL, 9, name, &rep, err) == -1 && strstr(err, "coordinator role, not client"));
    cJSON_Delete(meta);
    REQUIRE(challenge_for(0, ch) == 0);
    CHECK(answer(0, ch, -1, "localhost", name, err) == -1 && strstr(err, "hello carries no signature"));
    CHECK(answer(0, ch, 0, "another-coordinator", name, err) == -1 && strstr(err, "does not verify"));
    CHECK(answer(0, ch, 1, "localhost", name, err) == -1 && strstr(err, "does not verify"));
    /* a failed signature spends nothing: the right answer still works */
    CHECK(pending() == 1 && challenges_known(c.challenges, ch, hfl_now()));
    /* client-1 cannot use client-0's challenge, nor one never issued */
    REQUIRE(challenge_for(1, ch1) == 0);
    CHECK(answer(1, ch, 1, "localhost", name, err) == -2 && strstr(err, "hello of 'client-1' carries no challenge"));
    char made_up[HFL_ID_NONCE_HEX + 1];
    memset(made_up, 'a', HFL_ID_NONCE_HEX);
    made_up[HFL_ID_NONCE_HEX] = 0;
    CHECK(answer(0, made_up, 0, "localhost", name, err) == -2 && strstr(err, "say hello again"));
    /* a wrong answer does not spend the pending challenge */
    CHECK_MSG(answer(0, ch, 0, "localhost", name, err) == 1 && !strcmp(name, "client-0"), "%s", err);
    /* a connection keeps its two latest challenges: a third hello on it displaces the first */
    char first[HFL_ID_NONCE_HEX + 1], second[HFL_ID_NONCE_HEX + 1];
    REQUIRE(challenge_for(0, first) == 0 && challenge_for(0, second) == 0 && challenge_for(0, ch) == 0);
    CHECK(strcmp(first, ch) != 0 && strcmp(second, ch) != 0 && pending() == 3); /* client-1's, and two */
    CHECK(answer(0, first, 0, "localhost", name, err) == -2);
    CHECK_MSG(answer(0, second, 0, "localhost", name, err) == 1, "%s", err);
    CHECK_MSG(answer(0, ch, 0, "localhost", name, err) == 1, "%s", err);
    /* a signature payload of 256 bytes (HFL_ID_SIG_B64_MAX) is checked, one of 257 is not a signature */
    char big[HFL_ID_SIG_B64_MAX + 2];
    memset(big, 'A', sizeof big - 1);
    big[sizeof big - 1] = 0;
    REQUIRE(challenge_for(0, ch) == 0);
    cJSON *m2 = hello_meta(0, ch), *rep2;
    CHECK_MSG(ask(m2, big, 1, name, &rep2, err) == -1 && strstr(err, "hello carries no signature"), "257 bytes: %s", err);
    big[HFL_ID_SIG_B64_MAX] = 0;
    CHECK_MSG(ask(m2, big, 1, name, &rep2, err) == -1 && strstr(err, "signature of 'client-0' does not verify"),
              "256 bytes: %s", err);
    cJSON_Delete(m2);
    /* a revoked name gets no challenge */
    FILE *f = fopen(revoked, "w");
    REQUIRE(f != NULL);
    fputs("client-2\n", f);
    fclose(f);
    auth_reload(&c);
    meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "cert", hfl_identity_cert(ids[2]));
    cJSON_AddStringToObject(meta, "nonce", "00");
    CHECK(ask(meta, NULL, 3, name, &rep, err) == -1 && strstr(err, "certificate of 'client-2' is revoked"));
    cJSON_Delete(meta);
    teardown_auth();
}

/* The longest name a certificate may carry comes through whole. */
static void test_long_name(void) {
    char err[HFL_ERR_LEN] = "", ch[HFL_ID_NONCE_HEX + 1], name[HFL_ID_NAME_MAX + 1];
    setup_auth();
    REQUIRE(challenge_for(3, ch) == 0);
    CHECK(pending() == 1);
    CHECK_MSG(answer(3, ch, 3, "localhost", name, err) == 1 && !strcmp(name, LONG_NAME), "'%s' %s", name, err);
    teardown_auth();
}

static void test_lifetime(void) {
    char ch[HFL_ID_NONCE_HEX + 1], ch2[HFL_ID_NONCE_HEX + 1];
    setup_auth();
    double before = hfl_now();
    REQUIRE(challenge_for(0, ch) == 0 && challenge_for(1, ch2) == 0);
    double after = hfl_now();
    /* issued in [before, after]: at after + 29.5 it is at most 29.5 s + (after - before) old */
    CHECK_MSG(challenges_spend(c.challenges, "client-0", ch, after + 29.5) == 0, "a challenge 29.5 s old was refused");
    /* at before + 30.5 it is at least 30.5 s - (after - before) old */
    REQUIRE(after - before < 0.4);
    CHECK_MSG(challenges_spend(c.challenges, "client-1", ch2, before + 30.5) == -1,
              "a challenge 30.5 s old (past its 30 s) was accepted");
    teardown_auth();
}

static void test_reload_and_more(void) {
    char err[HFL_ERR_LEN] = "", name[HFL_ID_NAME_MAX + 1];
    setup_auth();
    int a = hello("client-0", 100), b = hello("client-1", 100);
    FILE *f = fopen(revoked, "w");
    REQUIRE(f != NULL);
    fputs("# revoked\r\nclient-1\r\n", f);
    fclose(f);
    /* said on stdout unless --quiet */
    c.cfg.quiet = 0;
    char said[400];
    snprintf(said, sizeof said, "%s/said.txt", dir);
    fflush(stdout);
    int saved = dup(1), fd = open(said, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(saved >= 0 && fd >= 0 && dup2(fd, 1) == 1);
    auth_reload(&c);
    fflush(stdout);
    dup2(saved, 1);
    close(saved), close(fd);
    c.cfg.quiet = 1;
    size_t slen;
    char *text = hfl_read_file(said, &slen, err);
    CHECK_MSG(text && !strcmp(text, "coordinator: client-1 revoked\n"), "said: '%s'", text ? text : err);
    free(text);
    CHECK(!c.clients[a].revoked && c.clients[a].has_plan && !c.clients[a].left[0]);
    CHECK(c.clients[b].revoked && !c.clients[b].has_plan && !strcmp(c.clients[b].left, "certificate revoked"));
    auth_reload(&c); /* once revoked, not again */
    cJSON *ev = events("client_revoked");
    CHECK(cJSON_GetArraySize(ev) == 1 && num(cJSON_GetArrayItem(ev, 0), "client") == b &&
          !strcmp(str(cJSON_GetArrayItem(ev, 0), "name"), "client-1"));
    cJSON_Delete(ev);
    /* a list that does not parse: the old one stays */
    f = fopen(revoked, "w");
    REQUIRE(f != NULL);
    fputs("client-0 client-2\n", f);
    fclose(f);
    auth_reload(&c);
    CHECK(!c.clients[a].revoked && hfl_trust_is_revoked(c.trust, "client-1") && !hfl_trust_is_revoked(c.trust, "client-0"));
    teardown_auth();

    /* --insecure: the name is taken from the hello */
    setup(1, 1, 60, 1);
    REQUIRE(auth_init(&c, NULL, err) == 0);
    CHECK(c.trust == NULL && strlen(c.instance) == 32);
    cJSON *meta = cJSON_CreateObject(), *rep;
    cJSON_AddStringToObject(meta, "name", "lab-box");
    CHECK(ask(meta, NULL, 1, name, &rep, err) == 1 && !strcmp(name, "lab-box") && rep == NULL);
    cJSON_DeleteItemFromObject(meta, "name");
    CHECK(ask(meta, NULL, 1, name, &rep, err) == -1);
    cJSON_Delete(meta);
    auth_reload(&c); /* nothing to reload */
    teardown_auth();

    /* auth_init: a client's certificate is not the coordinator's; files that do not load */
    setup(1, 1, 60, 1);
    char c0[400];
    snprintf(c0, sizeof c0, "%s/client-0.pem", dir);
    c.cfg.tls.ca_file = ca;
    c.cfg.tls.cert_file = c0;
    CHECK(auth_init(&c, NULL, err) == -1 && strstr(err, "--cert: the certificate of 'client-0' was issued for the client role"));
    auth_free(&c);
    c.cfg.tls.cert_file = revoked; /* not a PEM */
    CHECK(auth_init(&c, NULL, err) == -1 && !strncmp(err, "--cert: ", 8));
    auth_free(&c);
    c.cfg.tls.cert_file = cpem;
    c.cfg.tls.ca_file = revoked;
    CHECK(auth_init(&c, NULL, err) == -1 && !strncmp(err, "--ca: ", 6));
    auth_free(&c);
    teardown();

    CHECK(auth_equal("abc", "abc") && auth_equal("", ""));
    CHECK(!auth_equal("abc", "abd") && !auth_equal("abc", "xbc") && !auth_equal("abc", "ab") && !auth_equal("ab", "abc"));
    size_t len;
    uint8_t *rp = coord_reauth_reply("token expired", &len);
    cJSON *m = reply_meta(rp, len, HFL_MSG_ERROR);
    CHECK(m && !strcmp(str(m, "error"), "token expired") && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "reauth")));
    cJSON_Delete(m);
}

static const check_case cases[] = {
    {"exchange", test_exchange},
    {"refusals", test_refusals},
    {"long_name", test_long_name},
    {"lifetime", test_lifetime},
    {"reload_and_more", test_reload_and_more},
};

/* The PKI and the identities every case uses, made once; then the cases. */
int main(int argc, char **argv) {
    char err[HFL_ERR_LEN];
    REQUIRE_MSG(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    REQUIRE_MSG(hfl_pki_create(dir, 3, "localhost", 1, err) == 0, "%s", err);
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", dir);
    snprintf(revoked, sizeof revoked, "%s/revoked.txt", dir);
    for (int i = 0; i < 3; i++) {
        char pem[400];
        snprintf(pem, sizeof pem, "%s/client-%d.pem", dir, i);
        REQUIRE_MSG(hfl_identity_load(pem, &ids[i], err) == 0, "%s", err);
    }
    char pem[400];
    REQUIRE_MSG(hfl_pki_issue(dir, LONG_NAME, HFL_ROLE_CLIENT, 1, err) == 0, "%s", err);
    snprintf(pem, sizeof pem, "%s/%s.pem", dir, LONG_NAME);
    REQUIRE_MSG(hfl_identity_load(pem, &ids[3], err) == 0, "%s", err);
    REQUIRE_MSG(hfl_identity_load(cpem, &coord_id, err) == 0, "%s", err);
    int rc = check_run("test_auth", cases, CHECK_CASES(cases), argc, argv);
    for (int i = 0; i < 4; i++) hfl_identity_free(ids[i]);
    hfl_identity_free(coord_id);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
