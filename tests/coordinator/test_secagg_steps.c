/* test_secagg_steps.c: secure aggregation's steps on the coordinator
 * (coordinator/secagg.c) driven in-process through secagg_request, as
 * server.c calls it: 4 drawn clients without certificates (the harness's
 * coordinator has no trust store, as under --insecure), so keys are 32 zero
 * bytes and shares opaque strings of the sealed length; the masked sum
 * itself is checked end to end by tests/integration/secagg.sh.
 *
 * What it pins down: a second set of keys drops its sender with skip_round
 * (at 1,000 clients one client re-posted keys 82,714 times in a round before
 * this), keys after the phase closed likewise; the phases wait a quarter of
 * the deadline, at least 2 s and without a cap (1,000 clients on 2 cores
 * need over 60 s for their shares); the setup reply's fields against the
 * round's draw; and every malformed step an error reply of one line, the
 * global model untouched. */
#include "tests/coordinator/rounds_harness.h"

#include "proto/messages.h"
#include "proto/secagg.h"

#define ZERO_KEY "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" /* 32 zero bytes */

static int ids[4];

/* A masked round of 4 clients of 100 samples, all drawn, deadline_s given. */
static void open_masked(double deadline_s) {
    setup_config(4, 2, deadline_s, 1.0, "fedavg", 1.0, 0);
    c.cfg.secure_agg = SECAGG_MASKED, c.cfg.fixed_bits = 24;
    setup_start();
    char name[16];
    for (int i = 0; i < 4; i++) snprintf(name, sizeof name, "c%d", i), ids[i] = hello(name, 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.sa);
    for (int i = 0; i < 4; i++) pull(ids[i], HFL_MSG_TASK);
}

/* The harness's teardown, and the open round's secure aggregation. */
static void close_masked(void) {
    secagg_free(&c);
    teardown();
}

/* One step from client id: {round, step} and the fields of `extra` (JSON);
 * the reply's meta (to free), of type want. */
static cJSON *step(int id, const char *name, const char *extra, int want) {
    cJSON *m = extra ? cJSON_Parse(extra) : cJSON_CreateObject();
    REQUIRE(m != NULL);
    cJSON_AddNumberToObject(m, "round", c.r.round);
    cJSON_AddStringToObject(m, "step", name);
    size_t len = 0;
    uint8_t *rep = secagg_request(&c, id, m, 100, &len);
    cJSON_Delete(m);
    return reply_meta(rep, len, want);
}

static void keys(int id) {
    cJSON_Delete(step(id, "keys", "{\"c_pk\":\"" ZERO_KEY "\",\"s_pk\":\"" ZERO_KEY "\"}", HFL_MSG_SECAGG));
}

/* An error reply to the step whose text contains `want`, skip_round as `skip`. */
static void refused(int id, const char *name, const char *extra, const char *want, int skip) {
    cJSON *m = step(id, name, extra, HFL_MSG_ERROR);
    const char *e = str(m, "error");
    CHECK_MSG(e && strstr(e, want) && !strchr(e, '\n'), "%s: error '%s', expected '%s'", name, e ? e : "(none)", want);
    CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "skip_round")) == skip, "%s: skip_round not %d", name,
              skip);
    cJSON_Delete(m);
}

static void test_keys_repost(void) {
    open_masked(60);
    keys(ids[0]);
    CHECK(c.r.slot[ids[0]].refused == 0);
    /* the same client's keys again, the phase still open */
    refused(ids[0], "keys", "{\"c_pk\":\"" ZERO_KEY "\",\"s_pk\":\"" ZERO_KEY "\"}", "keys already taken", 1);
    CHECK_MSG(c.r.slot[ids[0]].refused == SLOT_DROPPED, "refused %d", c.r.slot[ids[0]].refused);
    keys(ids[1]), keys(ids[2]), keys(ids[3]); /* the phase closes: every member posted */
    /* keys after the phase closed: dropped too */
    CHECK(c.r.slot[ids[3]].refused == 0);
    refused(ids[3], "keys", "{\"c_pk\":\"" ZERO_KEY "\",\"s_pk\":\"" ZERO_KEY "\"}", "their phase closed", 1);
    CHECK(c.r.slot[ids[3]].refused == SLOT_DROPPED);
    CHECK(all_weights(0.0f));
    close_masked();
}

static void test_phase_length(void) {
    /* a quarter of the deadline, at least 2 s, no cap */
    const double deadline[] = {1, 8, 40, 240, 1000, 86400}, want[] = {2, 2, 10, 60, 250, 21600};
    for (int i = 0; i < 6; i++) {
        c.cfg.deadline_s = deadline[i];
        CHECK_MSG(secagg_phase_s(&c) == want[i], "deadline %g s: a phase of %g s, expected %g", deadline[i],
                  secagg_phase_s(&c), want[i]);
    }
    /* and a phase does close on it: 8 s gives 2 s, three of four keys in */
    open_masked(8);
    keys(ids[0]), keys(ids[1]), keys(ids[2]);
    secagg_tick(&c);
    CHECK(c.r.slot[ids[3]].refused == 0); /* not yet */
    hfl_sleep_ms(2100);
    secagg_tick(&c);
    CHECK_MSG(c.r.slot[ids[3]].refused == SLOT_DROPPED, "the keys phase did not close after 2.1 s");
    close_masked();
}

static void test_setup(void) {
    open_masked(60);
    for (int i = 0; i < 4; i++) keys(ids[i]);
    cJSON *m = step(ids[1], "setup", NULL, HFL_MSG_SECAGG);
    hfl_secagg_setup_msg o = {0};
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(m && hfl_wire_decode(&hfl_wire_secagg_setup, m, &o, err) == 0, "%s", err);
    /* 4 members: degree min(2 ceil(log2 4), 3) = 3, threshold (3 + 1) / 2 + 1 = 3 */
    CHECK(o.round == c.r.round && o.threshold == 3);
    CHECK_MSG(fabs(o.weight - 0.25) < 1e-15, "weight %.17g: 100 of 400 samples", o.weight);
    CHECK(o.clip == 1.0 && o.sigma == 0 && o.sigma_count == 0);
    CHECK(o.bits >= 1 && o.bits <= SECAGG_MAX_BITS);
    CHECK_MSG(o.holders.n == 4, "%d holders", o.holders.n);
    const hfl_secagg_holder *h = o.holders.v;
    for (int j = 0; j < o.holders.n; j++) { /* by client id, x its place + 1, no certificate */
        CHECK(h[j].id == ids[j] && h[j].x == j + 1 && !h[j].has_cert && !h[j].has_sig);
        char name[16];
        snprintf(name, sizeof name, "c%d", j);
        CHECK(!strcmp(h[j].name, name) && !strcmp(h[j].c_pk, ZERO_KEY) && !strcmp(h[j].s_pk, ZERO_KEY));
    }
    hfl_wire_free(&hfl_wire_secagg_setup, &o);
    cJSON_Delete(m);
    close_masked();
}

static void test_malformed(void) {
    open_masked(60);
    int a = ids[0];
    refused(a, "keys", "{\"c_pk\":\"abc\",\"s_pk\":\"" ZERO_KEY "\"}", "c_pk and s_pk must be 32 bytes", 0);
    refused(a, "keys", "{\"s_pk\":\"" ZERO_KEY "\"}", "secagg keys: missing field 'c_pk'", 0);
    refused(a, "keys", "{\"c_pk\":7,\"s_pk\":\"" ZERO_KEY "\"}", "field 'c_pk'", 0);
    refused(a, "dance", NULL, "unknown step", 0);
    refused(a, "shares", "{\"shares\":[]}", "not taking shares now", 0);
    for (int i = 0; i < 4; i++) keys(ids[i]);
    refused(a, "shares", "{\"shares\":{}}", "field 'shares' must be an array", 0);
    refused(a, "shares", "{\"shares\":[{\"to\":9999,\"ct\":\"AAAA\"}]}", "not for an advertised neighbour", 0);
    refused(a, "shares", "{\"shares\":[{\"to\":1}]}", "missing field 'ct'", 0);
    refused(a, "shares", "{\"shares\":[{\"to\":16384,\"ct\":\"AAAA\"}]}", "outside [0, 16383]", 0);
    refused(a, "shares", "{\"shares\":[]}", "shares must go to every advertised neighbour", 0);
    /* 65 items: refused by the table's cap before any is read */
    char many[2048] = "{\"shares\":[";
    for (int i = 0; i < 65; i++) strcat(many, i ? ",{}" : "{}");
    strcat(many, "]}");
    refused(a, "shares", many, "holds 65 items, more than 64", 0);
    refused(a, "unmask", many, "not taking unmask shares now", 0);
    /* a step without its header */
    cJSON *m = cJSON_Parse("{\"step\":\"setup\"}");
    size_t len = 0;
    uint8_t *rep = secagg_request(&c, a, m, 10, &len);
    cJSON *r = reply_meta(rep, len, HFL_MSG_ERROR);
    CHECK_MSG(r && strstr(str(r, "error"), "secagg: missing field 'round'"), "%s", r ? str(r, "error") : "(none)");
    cJSON_Delete(r), cJSON_Delete(m);
    /* none of it dropped the client or touched the model */
    CHECK(c.r.slot[a].refused == 0);
    CHECK(all_weights(0.0f));
    close_masked();
}

static const check_case cases[] = {
    {"keys_repost", test_keys_repost},
    {"phase_length", test_phase_length},
    {"setup", test_setup},
    {"malformed", test_malformed},
};

int main(int argc, char **argv) {
    return check_run("test_secagg_steps", cases, CHECK_CASES(cases), argc, argv);
}
