/* test_rounds_mut.c: the round engine (coordinator/rounds.c) and the
 * registry (coordinator/registry.c) at the edges test_rounds.c leaves open,
 * written against mutants that survived scripts/mutate (docs/testing.md).
 * Driven in-process as test_rounds.c does, with the event log in a temporary
 * file so that every logged field can be checked. Expected values are worked
 * out by hand from the headers' rules (the model is mlp: 199210 weights, all
 * zero; fp32 updates of one constant value v have norm |v| sqrt(199210); the
 * test set is 16 zero images of class 0, so a model whose weights are all
 * equal gives equal logits: accuracy 1, loss ln 10):
 *
 *  1. The registry: hello's refusals and bounds (samples in [1, 10^8],
 *     device and plan objects of at most 4096 bytes of JSON, a codec name of
 *     at most 31 bytes, at most 8 distinct client codecs, a codec that cannot
 *     take the run's block), ids by name, the token (32 hex digits, expiring
 *     after --token-ttl), the sample cap, a bye owed again after a new hello;
 *     registry_check's answers and its reauth flag; leaving; the report;
 *     the overhead estimate (the upper median); eviction of the idlest
 *     session not drawn in the open round, with its event.
 *  2. --clip-norm parsing.
 *  3. The draw: a partial Fisher-Yates shuffle from philox over the clients
 *     in name order (reimplemented here from the comment in rounds.c), the
 *     silent and the planless left out, the share caps F / (1 - F) x the
 *     others' samples (at least 1, at most the client's own), the task
 *     settings and the round_open event.
 *  4. Pulls: wait (200 ms), task (its bytes counted), bye once per client.
 *  5. Updates: every refusal with its message, the skip-the-round rule and
 *     the rejected count; an accepted update's weight (samples capped by the
 *     client's samples when drawn and by its share cap), norm, event fields,
 *     peaks, the ack.
 *  6. Closing: the round log's fields, the model's SHA-256 (by mbedTLS over
 *     the model's bytes), the run's end; the adaptive clip C exp(-0.2 (b -
 *     0.5)); the FedAvg divisor with updates missing (grown to the largest
 *     weight / F, at most the round's capped total); quorum, deadline,
 *     clients gone (left or told to skip); no client to draw; when a round
 *     opens; the robust rules (median kept 3, Krum without enough updates
 *     fails the round).
 *  7. Requests leave nothing allocated (mallinfo2 over 200 of each).
 *  8. Against the campaign after the redesign: registry_has_room and a
 *     cap of one session; the resend cap's message and event; a decline's
 *     ack; central DP noise's deviation (the sum's scale widened for it);
 *     the DP budget ending the run before a round; --client-clip's ring in
 *     the task and its exact sum; the tick signal for a fold and a fresh
 *     update under --async; a miss that accounts for the last drawn client
 *     wakes it too; a late task of a client that left is given up on; the
 *     secure sum needs the quorum at the deadline.
 *  9. A re-planned client's plan from its pull (coordinator/replan.c). */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/sha256.h>

#include "kernels/philox.h"
#include "proto/secagg.h"
#include "proto/secagg_crypto.h"
#include "tests/coordinator/rounds_harness.h"

static void sha_hex(char hex[65]) {
    unsigned char d[32];
    mbedtls_sha256_ret((const unsigned char *)c.global, c.spec.n_params * sizeof(float), d, 0);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* ---------------------------------------------------------------- 1 */

static void test_registry_hello(void) {
    setup(1, 1, 60, 1);
    char err[HFL_ERR_LEN] = "";
    CHECK(hello_full("z", 0, 1, NULL, err) == -1 && strstr(err, "samples"));
    CHECK(hello_full("z", 100000001, 1, NULL, err) == -1 && strstr(err, "samples"));
    CHECK(hello_full("z", 100000000, 1, NULL, err) == 0);
    CHECK(hello_full("y", 1, 1, NULL, err) == 1 && c.n_clients == 2);
    CHECK(hello_full("z", 5, 0, NULL, err) == 0 && c.n_clients == 2 && !c.clients[0].has_plan &&
          c.clients[0].samples == 5 && c.clients[0].declared == 5);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "samples", 10);
    cJSON_AddNumberToObject(m, "device", 3);
    CHECK(registry_hello(&c, "w", m, err) == -1 && strstr(err, "'device' must be an object"));
    cJSON_DeleteItemFromObject(m, "device");
    cJSON_AddStringToObject(m, "plan", "x");
    CHECK(registry_hello(&c, "w", m, err) == -1 && strstr(err, "'plan' must be an object"));
    cJSON_DeleteItemFromObject(m, "plan");
    /* device and plan: objects of known scalar fields (registry.c's schemas bound what a client sends) */
    cJSON *dev = cJSON_AddObjectToObject(m, "device");
    cJSON_AddStringToObject(dev, "name", "cpu");
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(m, "plan"), "batch", 32);
    CHECK_MSG(registry_hello(&c, "w", m, err) == 2, "%s", err);
    CHECK(cJSON_GetObjectItemCaseSensitive(c.clients[2].hello, "device") &&
          cJSON_GetObjectItemCaseSensitive(c.clients[2].hello, "plan") && c.clients[2].has_plan);
    cJSON_AddStringToObject(dev, "x", "y");
    CHECK(registry_hello(&c, "w", m, err) == -1 && strstr(err, "'device.x' is not one"));
    cJSON_Delete(m);

    /* tokens: 32 hex digits, new at every hello, expiring after --token-ttl */
    char tok[33];
    snprintf(tok, sizeof tok, "%s", c.clients[1].token);
    CHECK(strlen(tok) == 32 && strspn(tok, "0123456789abcdef") == 32);
    double t0 = hfl_now();
    CHECK(hello("y", 7) == 1 && strcmp(c.clients[1].token, tok) != 0 && !strcmp(c.clients[1].name, "y"));
    CHECK(fabs(c.clients[1].token_expires - (t0 + 3600)) < 5 && fabs(c.clients[1].last_seen - t0) < 5);
    teardown();

    /* the sample cap */
    setup(1, 1, 60, 1);
    c.cfg.max_client_samples = 150;
    CHECK(hello("a", 200) == 0 && c.clients[0].samples == 150 && c.clients[0].declared == 200);
    CHECK(hello("b", 150) == 1 && c.clients[1].samples == 150);
    CHECK(hello("c", 100) == 2 && c.clients[2].samples == 100);
    c.cfg.max_client_samples = 0;
    CHECK(hello("d", 100000) == 3 && c.clients[3].samples == 100000);
    /* a bye is owed again after a new hello, unless the run is over */
    c.clients[0].got_bye = 1, c.byes_sent = 1;
    snprintf(c.clients[0].left, sizeof c.clients[0].left, "gone");
    hello("a", 10);
    CHECK(!c.clients[0].got_bye && c.byes_sent == 0 && c.clients[0].left[0] == 0);
    c.clients[0].got_bye = 1, c.byes_sent = 1, c.done = 1;
    hello("a", 10);
    CHECK(c.clients[0].got_bye && c.byes_sent == 1);
    c.done = 0;
    /* revoked */
    c.clients[1].revoked = 1;
    char err2[HFL_ERR_LEN] = "";
    CHECK(hello_full("b", 10, 1, NULL, err2) == -1 && strstr(err2, "certificate of 'b' is revoked"));
    teardown();
}

static void test_registry_codecs(void) {
    setup(1, 1, 60, 1);
    char err[HFL_ERR_LEN] = "";
    CHECK(hello_full("a", 10, 1, "int8", err) == 0 && !strcmp(c.clients[0].codec->name, "int8"));
    CHECK(c.n_client_codecs == 1 && !strcmp(c.client_codecs[0]->name, "int8"));
    CHECK(hello_full("b", 10, 1, "int8", err) == 1 && c.n_client_codecs == 1);
    CHECK(hello_full("c", 10, 1, NULL, err) == 2 && c.clients[2].codec == c.codec);
    CHECK(hello_full("d", 10, 1, "int9", err) == -1 && strstr(err, "unknown codec"));
    CHECK(hello_full("d", 10, 1, "topk:0.0000000000000000000000001", err) == -1 && strstr(err, "'codec'"));
    CHECK(hello_full("d", 10, 1, "topk:0.500000000000000000000000", err) == 3 && /* 31 bytes */
          !strcmp(c.clients[3].codec->name, "topk:0.5") && c.n_client_codecs == 2);
    const char *more[] = {"fp32", "fp16", "bf16", "int4", "sign", "topk:0.25"};
    for (int i = 0; i < 6; i++) CHECK_MSG(hello_full("e", 10, 1, more[i], err) == 4, "%s: %s", more[i], err);
    CHECK(c.n_client_codecs == 8);
    CHECK(hello_full("f", 10, 1, "topk:0.125", err) == -1 && strstr(err, "already serves 8 client codecs"));
    CHECK(hello_full("f", 10, 1, "sign", err) == 5 && c.n_client_codecs == 8);
    /* A codec already served, spelled differently, is still the same codec. */
    CHECK_MSG(hello_full("g", 10, 1, "topk:0.50", err) == 6 && c.clients[6].codec == c.clients[3].codec,
              "%s", err);
    teardown();
    setup(1, 1, 60, 1);
    c.cfg.block = 0; /* a blocked codec cannot take it */
    CHECK(hello_full("a", 10, 1, "int8", err) == -1 && strstr(err, "block size 0"));
    CHECK(hello_full("a", 10, 1, "fp16", err) == 0);
    teardown();
}

static void test_registry_check(void) {
    setup(1, 1, 60, 1);
    hello("a", 10);
    hello("b", 10);
    char err[HFL_ERR_LEN] = "";
    int reauth = 7;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "client_id", 1);
    cJSON_AddStringToObject(m, "token", c.clients[1].token);
    CHECK(registry_check(&c, m, &reauth, err) == 1 && reauth == 0);
    c.clients[1].token_expires = hfl_now() - 1;
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 1 && strstr(err, "token of client 1 expired"));
    c.clients[1].token_expires = hfl_now() + 100;
    cJSON_ReplaceItemInObject(m, "token", cJSON_CreateString("0123456789abcdef0123456789abcdef"));
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 1 && strstr(err, "wrong token for client 1"));
    cJSON_ReplaceItemInObject(m, "token", cJSON_CreateString("0123456789abcdef0123456789abcdef0"));
    reauth = 7;
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 0 && strstr(err, "'token'"));
    cJSON_ReplaceItemInObject(m, "token", cJSON_CreateString(c.clients[1].token));
    cJSON_ReplaceItemInObject(m, "client_id", cJSON_CreateNumber(2));
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 1 && strstr(err, "unknown session for client 2"));
    char last[64];
    snprintf(last, sizeof last, "unknown session for client %d", COORD_MAX_CLIENTS - 1);
    cJSON_ReplaceItemInObject(m, "client_id", cJSON_CreateNumber(COORD_MAX_CLIENTS - 1));
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 1 && strstr(err, last));
    cJSON_ReplaceItemInObject(m, "client_id", cJSON_CreateNumber(COORD_MAX_CLIENTS));
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 0 && strstr(err, "'client_id'"));
    cJSON_ReplaceItemInObject(m, "client_id", cJSON_CreateNumber(-1));
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 0);
    cJSON_ReplaceItemInObject(m, "client_id", cJSON_CreateNumber(0));
    cJSON_ReplaceItemInObject(m, "token", cJSON_CreateString(c.clients[0].token));
    CHECK(registry_check(&c, m, &reauth, err) == 0 && reauth == 0);
    c.clients[0].revoked = 1;
    reauth = 7;
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 0 && strstr(err, "certificate of 'a' is revoked"));
    c.clients[0].revoked = 0;
    c.clients[0].token[0] = 0; /* a session forgotten */
    CHECK(registry_check(&c, m, &reauth, err) == -1 && reauth == 1 && strstr(err, "unknown session for client 0"));
    cJSON_Delete(m);
    teardown();
}

static void test_registry_leave_report(void) {
    setup(1, 1, 60, 1);
    hello("a", 10);
    hello("b", 20);
    char err[HFL_ERR_LEN] = "";
    cJSON *m = cJSON_CreateObject();
    CHECK(registry_leave(&c, 0, m, err) == 0 && c.clients[0].left[0] == 0 && c.clients[0].has_plan &&
          !c.clients[0].got_bye && c.byes_sent == 0); /* a plain goodbye */
    cJSON_AddStringToObject(m, "error", "over budget");
    cJSON_AddNumberToObject(m, "measured_peak_bytes", 5e9);
    cJSON_AddNumberToObject(m, "predicted_peak_bytes", 4e9);
    cJSON_AddNumberToObject(m, "budget_bytes", 6e9);
    CHECK(registry_leave(&c, 0, m, err) == 0);
    CHECK(!strcmp(c.clients[0].left, "over budget") && !c.clients[0].has_plan && c.clients[0].got_bye &&
          c.byes_sent == 1 && c.clients[0].measured_peak == 5e9 && c.clients[0].predicted_peak == 4e9);
    CHECK(registry_leave(&c, 0, m, err) == 0 && c.byes_sent == 1); /* counted once */
    cJSON *ev = events("client_left");
    const cJSON *e = cJSON_GetArrayItem(ev, 0);
    CHECK(cJSON_GetArraySize(ev) == 2 && num(e, "client") == 0 && !strcmp(str(e, "name"), "a") &&
          !strcmp(str(e, "reason"), "over budget") && num(e, "measured_peak_bytes") == 5e9 &&
          num(e, "budget_bytes") == 6e9);
    cJSON_Delete(ev);
    /* without measured or budget figures: none kept, none logged */
    cJSON *m2 = cJSON_CreateObject();
    cJSON_AddStringToObject(m2, "error", "bye");
    cJSON_AddNumberToObject(m2, "measured_peak_bytes", 0);
    cJSON_AddNumberToObject(m2, "predicted_peak_bytes", 3);
    CHECK(registry_leave(&c, 1, m2, err) == 0 && c.clients[1].measured_peak == 0 && c.clients[1].predicted_peak == 0);
    ev = events("client_left");
    e = cJSON_GetArrayItem(ev, 2);
    CHECK(e && !cJSON_GetObjectItemCaseSensitive(e, "measured_peak_bytes") &&
          !cJSON_GetObjectItemCaseSensitive(e, "budget_bytes"));
    cJSON_Delete(ev);
    cJSON_Delete(m2);
    /* an error alone: no peaks; a reason of 255 bytes (the most kept: a
     * one-line error, HFL_ERR_LEN - 1) */
    c.clients[1].got_bye = 0;
    cJSON *m3 = cJSON_CreateObject();
    char why[HFL_ERR_LEN + 1];
    memset(why, 'w', HFL_ERR_LEN - 1);
    why[HFL_ERR_LEN - 1] = 0;
    cJSON_AddStringToObject(m3, "error", why);
    CHECK(registry_leave(&c, 1, m3, err) == 0 && strlen(c.clients[1].left) == HFL_ERR_LEN - 1 &&
          c.clients[1].measured_peak == 0 && c.clients[1].predicted_peak == 0);
    why[HFL_ERR_LEN - 1] = 'w', why[HFL_ERR_LEN] = 0;
    cJSON_ReplaceItemInObject(m3, "error", cJSON_CreateString(why));
    CHECK(registry_leave(&c, 1, m3, err) == -1 && strstr(err, "'error'"));
    cJSON_ReplaceItemInObject(m3, "error", cJSON_CreateString("bye"));
    CHECK(registry_leave(&c, 1, m3, err) == 0);
    /* a measured peak without a predicted one: the prediction is 0 */
    cJSON_AddNumberToObject(m3, "measured_peak_bytes", 7e9);
    CHECK(registry_leave(&c, 1, m3, err) == 0 && c.clients[1].measured_peak == 7e9 && c.clients[1].predicted_peak == 0);
    c.clients[1].measured_peak = 0;
    cJSON_Delete(m3);
    /* malformed fields */
    const char *bad[] = {"{\"error\":5}", "{\"error\":\"\"}", "{\"measured_peak_bytes\":-1}",
                         "{\"predicted_peak_bytes\":\"x\"}", "{\"budget_bytes\":2e18}"};
    for (int i = 0; i < 5; i++) {
        cJSON *b = cJSON_Parse(bad[i]);
        CHECK_MSG(registry_leave(&c, 1, b, err) == -1, "%s accepted", bad[i]);
        cJSON_Delete(b);
    }
    cJSON_Delete(m);

    /* the report */
    c.clients[1].updates = 3;
    cJSON_AddNumberToObject(cJSON_GetObjectItemCaseSensitive(c.clients[0].hello, "plan"), "batch", 32);
    cJSON *rep = registry_report(&c);
    CHECK(cJSON_GetArraySize(rep) == 2);
    const cJSON *a = cJSON_GetArrayItem(rep, 0), *b = cJSON_GetArrayItem(rep, 1);
    CHECK(num(a, "id") == 0 && !strcmp(str(a, "name"), "a") && num(a, "samples") == 10 &&
          !strcmp(str(a, "codec"), "fp32") && num(a, "updates") == 0 && num(a, "predicted_peak_bytes") == 4e9 &&
          num(a, "measured_peak_bytes") == 5e9 && !strcmp(str(a, "left"), "over budget") &&
          num(cJSON_GetObjectItemCaseSensitive(a, "plan"), "batch") == 32 &&
          !cJSON_GetObjectItemCaseSensitive(a, "device"));
    CHECK(num(b, "id") == 1 && num(b, "samples") == 20 && num(b, "updates") == 3 &&
          !cJSON_GetObjectItemCaseSensitive(b, "measured_peak_bytes") && !strcmp(str(b, "left"), "bye"));
    cJSON_Delete(rep);
    teardown();
}

static void add_device_plan(int id, const char *device, double overhead, double records) {
    cJSON *h = c.clients[id].hello;
    cJSON_DeleteItemFromObject(h, "device");
    cJSON_DeleteItemFromObject(h, "plan");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(h, "device"), "name", device);
    cJSON *p = cJSON_AddObjectToObject(h, "plan");
    cJSON_AddNumberToObject(p, "overhead_bytes", overhead);
    cJSON_AddNumberToObject(p, "overhead_records", records);
}

/* A plan as a client sends it: the keys coordinator/replan.c reports, and one it does not. */
static cJSON *plan_of(int batch, int accum, double predicted, double budget) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "batch", batch);
    cJSON_AddNumberToObject(p, "accumulation_steps", accum);
    cJSON_AddNumberToObject(p, "step_batch", batch * accum);
    cJSON_AddStringToObject(p, "precision", "fp32");
    cJSON_AddStringToObject(p, "checkpoint", "none");
    cJSON_AddNumberToObject(p, "predicted_peak_bytes", predicted);
    cJSON_AddNumberToObject(p, "budget_bytes", budget);
    cJSON_AddNumberToObject(p, "overhead_records", 3);
    return p;
}

/* The report's replans, parsed from report_render (NULL when absent); *dropped: replans_dropped (0 absent). */
static cJSON *rendered_replans(double *dropped) {
    size_t len;
    char *text = report_render(&c, &len); /* not NUL-terminated */
    cJSON *rep = cJSON_ParseWithLength(text, len);
    free(text);
    cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(rep, "replans");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(rep, "replans_dropped");
    *dropped = cJSON_IsNumber(d) ? d->valuedouble : 0;
    cJSON_Delete(rep);
    return r;
}

/* replan_take(id, plan, round) with stdout caught: its first line into line ("" when none). */
static void replan_line(int id, const cJSON *plan, int round, char *line, size_t cap) {
    int quiet = c.cfg.quiet;
    fflush(stdout);
    int saved = dup(1);
    FILE *out = tmpfile();
    REQUIRE(saved >= 0 && out && dup2(fileno(out), 1) == 1);
    c.cfg.quiet = quiet;
    replan_take(&c, id, plan, round);
    fflush(stdout);
    REQUIRE(dup2(saved, 1) == 1);
    close(saved);
    rewind(out);
    if (!fgets(line, (int)cap, out)) line[0] = 0;
    fclose(out);
}

/* 9. A re-planned client's plan from its pull (coordinator/replan.c): the
 * record takes it, the report and the event say round, client, old and new
 * choice (the seven keys, not the rest) and the budget; the same plan again,
 * a client that left: nothing; a client without a plan gets one (old null);
 * round 0, or one past the open round, means the open round; past 1024
 * entries, counted, with no event. */
static void test_replan(void) {
    setup(1, 1, 60, 1);
    hello("a", 10);
    hello("b", 10);
    hello("gone", 10);
    c.r.round = 3; /* the rounds below re-plan in: 2 and 3 */
    cJSON_ReplaceItemInObject(c.clients[0].hello, "plan", plan_of(256, 1, 4.27e6, 8388608));
    double dropped;
    cJSON *r = rendered_replans(&dropped);
    CHECK(cJSON_IsArray(r) && cJSON_GetArraySize(r) == 0 && dropped == 0); /* none yet: an empty list */
    cJSON_Delete(r);
    cJSON *np = plan_of(64, 4, 2.08e6, 3145728);
    replan_take(&c, 0, np, 2);
    r = rendered_replans(&dropped);
    const cJSON *e = cJSON_GetArrayItem(r, 0);
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(e, "old"), *new = cJSON_GetObjectItemCaseSensitive(e, "new");
    CHECK(cJSON_GetArraySize(r) == 1 && num(e, "round") == 2 && num(e, "client") == 0 && !strcmp(str(e, "name"), "a") &&
          num(e, "budget_bytes") == 3145728);
    CHECK(num(old, "batch") == 256 && num(old, "accumulation_steps") == 1 && num(old, "step_batch") == 256 &&
          !strcmp(str(old, "precision"), "fp32") && !strcmp(str(old, "checkpoint"), "none") &&
          num(old, "predicted_peak_bytes") == 4.27e6 && num(old, "budget_bytes") == 8388608 &&
          cJSON_GetArraySize(old) == 7);
    CHECK(num(new, "batch") == 64 && num(new, "accumulation_steps") == 4 && num(new, "step_batch") == 256 &&
          num(new, "predicted_peak_bytes") == 2.08e6 && num(new, "budget_bytes") == 3145728 &&
          cJSON_GetArraySize(new) == 7);
    CHECK(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(c.clients[0].hello, "plan"), np, 1) && c.clients[0].has_plan);
    cJSON_Delete(r);
    cJSON *ev = events("client_replanned");
    e = cJSON_GetArrayItem(ev, 0);
    CHECK(cJSON_GetArraySize(ev) == 1 && num(e, "round") == 2 && !strcmp(str(e, "name"), "a") &&
          num(cJSON_GetObjectItemCaseSensitive(e, "new"), "batch") == 64 && num(e, "budget_bytes") == 3145728);
    cJSON_Delete(ev);
    /* the same plan again (a pull sent twice): nothing */
    replan_take(&c, 0, np, 3);
    r = rendered_replans(&dropped);
    ev = events("client_replanned");
    CHECK(cJSON_GetArraySize(r) == 1 && cJSON_GetArraySize(ev) == 1);
    cJSON_Delete(r);
    cJSON_Delete(ev);
    /* the same choice with more overhead records (a breach's re-plan that
     * chose it again): the record takes it, unlisted */
    cJSON *more = plan_of(64, 4, 2.08e6, 3145728);
    cJSON_ReplaceItemInObject(more, "overhead_records", cJSON_CreateNumber(4));
    replan_take(&c, 0, more, 3);
    r = rendered_replans(&dropped);
    ev = events("client_replanned");
    CHECK(cJSON_GetArraySize(r) == 1 && cJSON_GetArraySize(ev) == 1 &&
          num(cJSON_GetObjectItemCaseSensitive(c.clients[0].hello, "plan"), "overhead_records") == 4);
    cJSON_Delete(r);
    cJSON_Delete(ev);
    cJSON_Delete(more);
    /* the same configuration with a predicted peak 16 KiB higher (the
     * overhead learned from one more measured step, as a breach's re-plan
     * at the same budget sends it): the record takes it, unlisted */
    more = plan_of(64, 4, 2.08e6 + 16384, 3145728);
    replan_take(&c, 0, more, 3);
    r = rendered_replans(&dropped);
    ev = events("client_replanned");
    CHECK(cJSON_GetArraySize(r) == 1 && cJSON_GetArraySize(ev) == 1 &&
          num(cJSON_GetObjectItemCaseSensitive(c.clients[0].hello, "plan"), "predicted_peak_bytes") == 2.08e6 + 16384);
    cJSON_Delete(r);
    cJSON_Delete(ev);
    cJSON_Delete(more);
    /* one configuration key changed (the checkpoint schedule): listed */
    more = plan_of(64, 4, 2.08e6, 3145728);
    cJSON_ReplaceItemInObject(more, "checkpoint", cJSON_CreateString("sqrt"));
    replan_take(&c, 0, more, 3);
    r = rendered_replans(&dropped);
    CHECK(cJSON_GetArraySize(r) == 2 && !strcmp(str(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r, 1), "new"), "checkpoint"), "sqrt"));
    cJSON_DeleteItemFromArray(c.replans, 1); /* the counts below start from one entry */
    cJSON_Delete(r);
    cJSON_Delete(more);
    cJSON_ReplaceItemInObject(c.clients[0].hello, "plan", cJSON_Duplicate(np, 1));
    /* a client that left keeps its record (a one-character reason is a reason) */
    snprintf(c.clients[2].left, sizeof c.clients[2].left, "x");
    c.clients[2].has_plan = 0;
    replan_take(&c, 2, np, 2);
    CHECK(!c.clients[2].has_plan && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c.clients[2].hello, "plan")) == 0);
    /* no plan held: old is null; round 0: the open round's */
    cJSON_DeleteItemFromObject(c.clients[1].hello, "plan");
    c.clients[1].has_plan = 0;
    c.r.round = 5;
    replan_take(&c, 1, np, 0);
    r = rendered_replans(&dropped);
    e = cJSON_GetArrayItem(r, 1);
    CHECK(cJSON_GetArraySize(r) == 2 && num(e, "round") == 5 && num(e, "client") == 1 &&
          cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "old")) &&
          c.clients[1].has_plan == 1); /* 1: metrics.c sums has_plan into the planned clients */
    cJSON_Delete(r);
    /* the progress line without --quiet: round 1 is the client's, not the open round's (5) */
    c.cfg.quiet = 0;
    /* 2102395 bytes are 2.0050001 MiB: printed 2.01 (by 1048577 it would be 2.0049982, 2.00) */
    cJSON *p1 = plan_of(32, 8, 1.5e6, 2102395);
    char line[256] = "";
    replan_line(1, p1, 1, line, sizeof line);
    CHECK_MSG(!strcmp(line, "coordinator: b re-planned at round 1: batch 64 fp32 none -> batch 32 fp32 none, budget "
                            "2.01 MiB\n"), "stdout '%s'", line);
    r = rendered_replans(&dropped);
    CHECK(num(cJSON_GetArrayItem(r, 2), "round") == 1);
    cJSON_Delete(r);
    cJSON_DeleteItemFromObject(c.clients[1].hello, "plan");
    replan_line(1, np, 0, line, sizeof line); /* no plan held: "none" */
    CHECK_MSG(!strcmp(line, "coordinator: b re-planned at round 5: none -> batch 64 fp32 none, budget 3.00 MiB\n"),
              "stdout '%s'", line);
    cJSON *nob = plan_of(16, 16, 1.2e6, 0); /* a plan without its budget: the line says none */
    cJSON_DeleteItemFromObject(nob, "budget_bytes");
    replan_line(1, nob, 4, line, sizeof line);
    CHECK_MSG(!strcmp(line, "coordinator: b re-planned at round 4: batch 64 fp32 none -> batch 16 fp32 none\n"),
              "stdout '%s'", line);
    r = rendered_replans(&dropped);
    CHECK(cJSON_GetArraySize(r) == 5 && !cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r, 4), "budget_bytes"));
    cJSON_Delete(r);
    cJSON_Delete(nob);
    c.cfg.quiet = 1;
    replan_line(1, p1, 2, line, sizeof line); /* --quiet: nothing */
    CHECK_MSG(line[0] == 0, "stdout under --quiet: '%s'", line);
    cJSON_Delete(p1);
    /* a plan whose choice is held leaves nothing allocated (200 of them) */
    for (int pass = 0; pass < 2; pass++) {
        size_t before = mallinfo2().uordblks;
        for (int t = 0; t < 200; t++) replan_take(&c, 1, np, 5);
        size_t after = mallinfo2().uordblks;
        if (pass == 1) /* a one-off lazy allocation is not a leak: 200 leaked choices would be kilobytes */
            CHECK_MSG(after < before + 1024, "%zu bytes left allocated by 200 re-plans", after - before);
    }
    /* a round past the open one (a coordinator restarted from an older
     * state): listed as the open round's (5); the same plan again, with
     * such a round: unlisted */
    cJSON *later = plan_of(8, 32, 0.9e6, 1048576);
    int listed = cJSON_GetArraySize(c.replans);
    replan_take(&c, 1, later, 6);
    replan_take(&c, 1, later, 7);
    r = rendered_replans(&dropped);
    e = cJSON_GetArrayItem(r, listed);
    CHECK(cJSON_GetArraySize(r) == listed + 1 && num(e, "round") == 5 &&
          cJSON_Compare(cJSON_GetObjectItemCaseSensitive(c.clients[1].hello, "plan"), later, 1));
    cJSON_Delete(r), cJSON_Delete(later);
    /* full: counted, not kept, and no event either (a client alternating
     * between two plans cannot grow the event log without bound) */
    while (cJSON_GetArraySize(c.replans) < COORD_MAX_REPLANS) cJSON_AddItemToArray(c.replans, cJSON_CreateObject());
    cJSON *other = plan_of(32, 8, 1e6, 2097152);
    ev = events("client_replanned");
    int events_before = cJSON_GetArraySize(ev);
    cJSON_Delete(ev);
    replan_take(&c, 0, other, 4);
    r = rendered_replans(&dropped);
    ev = events("client_replanned");
    CHECK(cJSON_GetArraySize(r) == COORD_MAX_REPLANS && dropped == 1 &&
          cJSON_Compare(cJSON_GetObjectItemCaseSensitive(c.clients[0].hello, "plan"), other, 1));
    CHECK_MSG(cJSON_GetArraySize(ev) == events_before, "%d client_replanned events, %d before", cJSON_GetArraySize(ev),
              events_before);
    cJSON_Delete(ev);
    cJSON_Delete(r);
    cJSON_Delete(other);
    cJSON_Delete(np);
    teardown();
}

static void test_registry_overhead(void) {
    setup(1, 1, 60, 1);
    for (int i = 0; i < 8; i++) {
        char name[8];
        snprintf(name, sizeof name, "c%d", i);
        hello(name, 10);
    }
    CHECK(registry_overhead_estimate(&c, "gpu") == -1);
    add_device_plan(0, "gpu", 300, 1);
    add_device_plan(1, "gpu", 100, 2);
    add_device_plan(2, "gpu", 200, 5);
    add_device_plan(3, "cpu", 1, 1);     /* another device */
    add_device_plan(4, "gpu", 50, 0);    /* no measurement */
    add_device_plan(5, "gpu", -5, 1);    /* negative: ignored */
    CHECK(registry_overhead_estimate(&c, "gpu") == 200); /* median of 100, 200, 300 */
    add_device_plan(6, "gpu", 0, 1);
    CHECK(registry_overhead_estimate(&c, "gpu") == 200); /* 0, 100, 200, 300: the upper median */
    CHECK(registry_overhead_estimate(&c, "cpu") == 1);
    CHECK(registry_overhead_estimate(&c, "tpu") == -1);
    teardown();
}

static void test_registry_evict(void) {
    setup(1, 1, 60, 1);
    char name[32], err[HFL_ERR_LEN] = "";
    for (int i = 0; i < COORD_MAX_CLIENTS; i++) {
        snprintf(name, sizeof name, "n-%d", i);
        hello(name, 10);
    }
    double now = hfl_now();
    c.clients[5].last_seen = now - 1000; /* idlest, but drawn in the open round */
    c.r.open = 1, c.r.slot[5].selected = 1;
    c.clients[7].last_seen = now - 900; /* the victim */
    c.clients[7].got_bye = 1, c.byes_sent = 1;
    c.clients[9].last_seen = now - 800;
    c.clients[11].last_seen = now - 599; /* not idle for --session-ttl */
    int id = hello_full("new", 10, 1, NULL, err);
    CHECK_MSG(id == 7 && !strcmp(c.clients[7].name, "new") && c.byes_sent == 0 && !c.clients[7].got_bye, "id %d: %s",
              id, err);
    cJSON *ev = events("session_evicted");
    const cJSON *e = cJSON_GetArrayItem(ev, 0);
    CHECK(cJSON_GetArraySize(ev) == 1 && num(e, "client") == 7 && !strcmp(str(e, "name"), "n-7") &&
          num(e, "idle_s") >= 900 && num(e, "idle_s") < 960);
    cJSON_Delete(ev);
    CHECK(hello_full("new2", 10, 1, NULL, err) == 9);
    CHECK(hello_full("new3", 10, 1, NULL, err) == -1 && strstr(err, "registry full"));
    c.r.open = 0; /* a closed round protects no one */
    CHECK(hello_full("new3", 10, 1, NULL, err) == 5);
    /* the first slot can go too; of two equally idle, the lower id */
    now = hfl_now();
    c.clients[0].last_seen = now - 5000;
    c.clients[30].last_seen = now - 1000; /* idle enough, but less than the first */
    CHECK(hello_full("new4", 10, 1, NULL, err) == 0);
    c.clients[20].last_seen = c.clients[21].last_seen = now - 3000;
    CHECK(hello_full("new5", 10, 1, NULL, err) == 20);
    CHECK(hello_full("new6", 10, 1, NULL, err) == 21);
    teardown();
}

/* ---------------------------------------------------------------- 2 */

static void test_parse_clip(void) {
    coord_config cfg;
    char err[HFL_ERR_LEN];
    memset(&cfg, 0, sizeof cfg);
    cfg.clip_norm = 5, cfg.clip_adaptive = 1, err[0] = 0;
    coord_parse_clip("off", &cfg, err);
    CHECK(cfg.clip_norm == 0 && cfg.clip_adaptive == 0 && !err[0]);
    coord_parse_clip("adaptive", &cfg, err);
    CHECK(cfg.clip_norm == COORD_CLIP_DEFAULT && cfg.clip_adaptive == 1 && !err[0]);
    coord_parse_clip("adaptive:3.5", &cfg, err);
    CHECK(cfg.clip_norm == 3.5 && cfg.clip_adaptive == 1 && !err[0]);
    coord_parse_clip("adaptive:1e-6", &cfg, err);
    CHECK(cfg.clip_norm == 1e-6 && !err[0]);
    coord_parse_clip("adaptive:junk", &cfg, err);
    CHECK(err[0] && cfg.clip_norm == COORD_CLIP_DEFAULT && cfg.clip_adaptive == 1);
    err[0] = 0;
    coord_parse_clip("1.5", &cfg, err);
    CHECK(cfg.clip_norm == 1.5 && cfg.clip_adaptive == 0 && !err[0]);
    coord_parse_clip("1e6", &cfg, err);
    CHECK(cfg.clip_norm == 1e6 && !err[0]);
    coord_parse_clip("adaptivex", &cfg, err);
    CHECK(!strcmp(err, "'adaptivex' is not off, adaptive[:C0] or a norm in [1e-6, 1e6]") && cfg.clip_norm == 1e6);
    err[0] = 0;
    coord_parse_clip("1e-7", &cfg, err);
    CHECK(strstr(err, "'1e-7' is not off") && cfg.clip_norm == 1e6);
}

/* ---------------------------------------------------------------- 3, 4 */

static void test_draw(void) {
    setup(3, 3, 60, 0.5);
    /* hello order e c a d b; names in order a b c d e are ids 2 4 1 3 0 */
    int e = hello("e", 100), cc = hello("c", 200), a = hello("a", 300), d = hello("d", 400), b = hello("b", 500);
    char err[HFL_ERR_LEN];
    int np = hello_full("np", 900, 0, NULL, err); /* no plan: never drawn */
    int quiet = hello("quiet", 50);
    c.clients[quiet].last_seen = hfl_now() - 61; /* silent for --liveness */
    (void)np;
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 1);
    int ids[5] = {a, b, cc, d, e}, n = 5;
    for (int i = 0; i < 3; i++) {
        uint32_t u = hfl_philox_u32(7, HFL_STREAM_SHUFFLE, 1, 0xFFFFFFFFu, 0, (uint64_t)i);
        int j = i + (int)((uint64_t)u * (uint64_t)(n - i) >> 32);
        int t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    CHECK(c.r.n_selected == 3 && c.r.n_silent == 1);
    double planned = 0;
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(c.r.selected[i] == ids[i], "selected[%d] = %d, expected %d", i, c.r.selected[i], ids[i]);
        planned += (double)c.clients[ids[i]].samples;
    }
    int sel = 0;
    for (int i = 0; i < c.n_clients; i++) sel += c.r.slot[i].selected;
    CHECK(sel == 3 && !c.r.slot[np].selected && !c.r.slot[quiet].selected);
    CHECK(c.r.samples_planned == planned);
    int64_t total = 0;
    for (int i = 0; i < 3; i++) {
        int s = ids[i];
        int64_t own = c.clients[s].samples;
        double others = planned - (double)own; /* F / (1 - F) = 1 */
        int64_t cap = others < (double)own ? (int64_t)others : own;
        CHECK_MSG(c.r.slot[s].share_cap == cap, "client %d cap %lld, expected %lld", s, (long long)c.r.slot[s].share_cap,
                  (long long)cap);
        CHECK(c.r.slot[s].samples_at_select == own && c.r.slot[s].declared == own);
        total += cap;
    }
    CHECK(c.r.cap_total == total);
    /* the task settings */
    cJSON *t = hfl_wire_encode(&hfl_wire_task, &c.r.task); /* as the wire carries them */
    CHECK(num(t, "round") == 1 && num(t, "version") == 0 && !strcmp(str(t, "model"), "mlp") && num(t, "params") == NP &&
          num(t, "local_epochs") == 3 && num(t, "batch") == 16 && num(t, "lr") == 0.25 && num(t, "momentum") == 0.5 &&
          num(t, "weight_decay") == 0.125 && !strcmp(str(t, "codec"), "fp32") && num(t, "block") == 256 &&
          num(t, "seed") == 7 && num(t, "deadline_ms") == 60000);
    cJSON_Delete(t);
    cJSON *ev = events("round_open");
    const cJSON *o = cJSON_GetArrayItem(ev, 0);
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(o, "selected");
    CHECK(cJSON_GetArraySize(ev) == 1 && num(o, "round") == 1 && num(o, "silent") == 1 && cJSON_GetArraySize(sa) == 3);
    CHECK_MSG(num(o, "eligible") == 5, "eligible %g, expected 5 (a b c d e: np has no plan, quiet is silent)",
              num(o, "eligible"));
    for (int i = 0; i < 3 && i < cJSON_GetArraySize(sa); i++) CHECK(cJSON_GetArrayItem(sa, i)->valuedouble == ids[i]);
    cJSON_Delete(ev);

    /* pulls */
    int out = -1;
    for (int i = 0; i < 5 && out < 0; i++)
        if (!c.r.slot[(int[]){a, b, cc, d, e}[i]].selected) out = (int[]){a, b, cc, d, e}[i];
    size_t len;
    uint8_t *rep = rounds_pull(&c, out, -1, &len);
    cJSON *w = reply_meta(rep, len, HFL_MSG_WAIT);
    CHECK(num(w, "ms") == 200 && !c.r.slot[out].tasked);
    cJSON_Delete(w);
    size_t l1 = pull(ids[0], HFL_MSG_TASK), l2 = pull(ids[0], HFL_MSG_TASK); /* asked twice: sent twice */
    CHECK(c.r.slot[ids[0]].tasked && c.r.bytes_down == l1 + l2 && c.r.tasks_delta == 0 && l1 > (size_t)NP * 4);
    teardown();

    /* caps: at least 1, at most the client's own; F >= 1 or a round of one: own */
    setup(2, 2, 60, 0.2);
    int x = hello("x", 1), y = hello("y", 1000);
    rounds_tick(&c);
    CHECK(c.r.slot[y].share_cap == 1 && c.r.slot[x].share_cap == 1 && c.r.cap_total == 2); /* 0.25 x 1 -> 0 -> 1; 250 > 1 */
    teardown();
    setup(3, 3, 60, 0.2);
    x = hello("x", 100), y = hello("y", 200);
    int z = hello("z", 700);
    rounds_tick(&c);
    CHECK(c.r.slot[x].share_cap == 100 && c.r.slot[y].share_cap == 200 && c.r.slot[z].share_cap == 75 && c.r.cap_total == 375);
    teardown();
    setup(1, 1, 60, 0.2);
    x = hello("x", 100);
    rounds_tick(&c);
    CHECK(c.r.slot[x].share_cap == 100 && c.r.cap_total == 100);
    teardown();
    setup(2, 2, 60, 1);
    x = hello("x", 100), y = hello("y", 700);
    rounds_tick(&c);
    CHECK(c.r.slot[x].share_cap == 100 && c.r.slot[y].share_cap == 700);
    teardown();
}

/* ---------------------------------------------------------------- 5, 6 */

static void test_updates(void) {
    setup(3, 3, 60, 1);
    c.cfg.max_client_samples = 200;
    int a = hello("a", 100), b = hello("b", 300), d = hello("d", 100), n4 = hello("n4", 50);
    c.cfg.clients_per_round = 3;
    c.clients[n4].has_plan = 0; /* only a, b, d are drawn */
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.slot[a].selected && c.r.slot[b].selected && c.r.slot[d].selected);
    CHECK(c.r.samples_planned == 400 && c.r.slot[b].declared == 300 && c.r.slot[b].samples_at_select == 200);
    /* refusals before anything is pulled: no task, so nobody is told to skip */
    refuse(a, 1, 100, 0.5, "fp32", NULL, "client 0 was given no task in round 1", 0);
    refuse(n4, 1, 50, 0.5, "fp32", NULL, "was given no task", 0);
    pull(a, HFL_MSG_TASK);
    pull(b, HFL_MSG_TASK);
    pull(d, HFL_MSG_TASK);
    refuse(a, 2, 100, 0.5, "fp32", NULL, "update for round 2, but round 1 is open", 0);
    refuse(a, 0, 100, 0.5, "fp32", NULL, "'round'", 0);
    refuse(a, 1, 0, 0.5, "fp32", NULL, "'samples'", 1);
    CHECK(c.r.slot[a].refused && c.r.n_refused == 1);
    refuse(a, 1, 100, 0.5, "fp32", NULL, "client 0 was told to skip round 1", 0);
    c.r.slot[a].refused = 0, c.r.n_refused = 0;
    refuse(a, 1, 100, -0.5, "fp32", NULL, "'loss'", 1);
    c.r.slot[a].refused = 0, c.r.n_refused = 0;
    refuse(a, 1, 100, 2e30, "fp32", NULL, "'loss'", 1);
    c.r.slot[a].refused = 0;
    refuse(a, 1, 100, 0.5, "fp32", "{\"peak_bytes\": -1}", "'peak_bytes'", 1);
    c.r.slot[a].refused = 0;
    refuse(a, 1, 100, 0.5, "fp32", "{\"train_s\": 2e9}", "'train_s'", 1);
    c.r.slot[a].refused = 0;
    refuse(a, 1, 100, 0.5, "fp32", "{\"predicted_peak_bytes\": -1}", "'predicted_peak_bytes'", 1);
    c.r.slot[a].refused = 0;
    refuse(a, 1, 100, 0.5, "fp32", "{\"measured_peak_bytes\": 2e18}", "'measured_peak_bytes'", 1);
    c.r.slot[a].refused = 0;
    refuse(a, 1, 100, 0.5, "int8", NULL, "update uses codec 'int8', client 0 uses 'fp32'", 1);
    c.r.slot[a].refused = 0;
    refuse(a, 1, 101, 0.5, "fp32", NULL, "update weighted by 101 samples, but client 0 declared 100 when drawn", 1);
    c.r.slot[a].refused = 0, c.r.n_refused = 0;
    CHECK(c.rejected == 14 && c.r.n_received == 0);
    /* and by kind, for --metrics: 3 untasked or skipped, 1 wrong round, 8 bad meta, 1 codec, 1 sample claim */
    CHECK(c.rejected_update[COORD_REJ_TASK] == 3 && c.rejected_update[COORD_REJ_ROUND] == 1 &&
          c.rejected_update[COORD_REJ_MALFORMED] == 8 && c.rejected_update[COORD_REJ_CODEC] == 1 &&
          c.rejected_update[COORD_REJ_SAMPLES] == 1 && c.rejected_update[COORD_REJ_PAYLOAD] == 0 &&
          c.rejected_update[COORD_REJ_LATE] == 0);

    /* accepted: b declared 300, drawn with 200 (the cap): 250 samples weigh 200 */
    cJSON *ack = send(b, 1, 250, 1.0, 3.0f, "fp32",
                      "{\"peak_bytes\": 1234, \"train_s\": 2.5, \"predicted_peak_bytes\": 900, \"measured_peak_bytes\": 1000}",
                      777, HFL_MSG_ACK);
    CHECK(num(ack, "round") == 1);
    cJSON_Delete(ack);
    CHECK(c.r.slot[b].received && c.r.n_received == 1 && c.r.weight_samples == 200 && c.r.weight_max == 200 &&
          c.r.samples_sum == 250 && c.r.loss_sum == 250 && c.r.bytes_up == 777);
    CHECK(c.clients[b].updates == 1 && c.clients[b].predicted_peak == 900 && c.clients[b].measured_peak == 1000);
    CHECK_CLOSE(c.r.norms[0], 3.0 * sqrt((double)NP), 0, 1e-12);
    refuse(b, 1, 250, 1.0, "fp32", NULL, "round 1 already has an update from client 1", 0);
    cJSON *ev = events("update");
    const cJSON *u = cJSON_GetArrayItem(ev, 0);
    CHECK(cJSON_GetArraySize(ev) == 1 && num(u, "round") == 1 && num(u, "client") == b && num(u, "samples") == 250 &&
          num(u, "weight") == 0.5 && num(u, "loss") == 1.0 && num(u, "peak_bytes") == 1234 && num(u, "train_s") == 2.5 &&
          num(u, "predicted_peak_bytes") == 900 && num(u, "measured_peak_bytes") == 1000 && num(u, "bytes") == 777 &&
          cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(u, "clipped")));
    CHECK_CLOSE(num(u, "norm"), 3.0 * sqrt((double)NP), 0, 1e-12);
    cJSON_Delete(ev);
    /* a's update without peak figures: measured 0 keeps none */
    c.clients[a].predicted_peak = 11, c.clients[a].measured_peak = 22;
    cJSON_Delete(send(a, 1, 100, 0.5, 1.0f, "fp32", "{\"predicted_peak_bytes\": 5, \"measured_peak_bytes\": 0}", 100,
                      HFL_MSG_ACK));
    CHECK(c.clients[a].predicted_peak == 11 && c.clients[a].measured_peak == 22);
    ev = events("update");
    u = cJSON_GetArrayItem(ev, 1);
    CHECK(u && !cJSON_GetObjectItemCaseSensitive(u, "measured_peak_bytes") && num(u, "peak_bytes") == 0 &&
          num(u, "train_s") == 0 && num(u, "weight") == 0.25);
    cJSON_Delete(ev);
    CHECK(c.r.weight_samples == 300 && c.r.weight_max == 200);
    accept(d, 100, 0.25, 1.0f);
    /* pulls after the update: wait */
    pull(b, HFL_MSG_WAIT);
    uint64_t down = c.r.bytes_down;
    rounds_tick(&c);
    CHECK(!c.r.open && c.version == 1);
    /* mean: (200 x 3 + 100 x 1 + 100 x 1) / 400 = 2 */
    CHECK(all_weights(2.0f));
    const cJSON *r = last_round();
    char sha[65];
    sha_hex(sha);
    CHECK(!strcmp(str(r, "status"), "ok") && num(r, "round") == 1 && num(r, "clients") == 3 &&
          num(r, "selected") == 3 && num(r, "samples") == 450 && num(r, "bytes_up") == 777 + 100 + 1000 &&
          num(r, "bytes_down") == (double)down && num(r, "tasks_delta") == 0 && num(r, "version") == 1 &&
          cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r, "clip_norm")) && num(r, "clipped") == 0 &&
          num(r, "refused") == 0 && !cJSON_GetObjectItemCaseSensitive(r, "rule_kept") &&
          !cJSON_GetObjectItemCaseSensitive(r, "reason") && !strcmp(str(r, "model_sha256"), sha) &&
          !strcmp(c.final_sha256, sha));
    CHECK_CLOSE(num(r, "train_loss"), (250 * 1.0 + 100 * 0.5 + 100 * 0.25) / 450, 0, 1e-12);
    CHECK_CLOSE(num(r, "test_acc"), 1.0, 0, 0);
    CHECK_CLOSE(num(r, "test_loss"), log(10.0), 1e-5, 0);
    CHECK_CLOSE(num(r, "update_norm_median"), sqrt((double)NP), 0, 1e-12);
    CHECK_CLOSE(num(r, "update_norm_max"), 3 * sqrt((double)NP), 0, 1e-12);
    CHECK(num(r, "wall_s") >= 0 && num(r, "wall_s") < 60);
    CHECK(!c.done);
    cJSON *rev = events("round");
    CHECK(cJSON_GetArraySize(rev) == 1 && !strcmp(str(cJSON_GetArrayItem(rev, 0), "model_sha256"), sha));
    cJSON_Delete(rev);
    /* a closed round refuses, skipping nobody */
    refuse(a, 1, 100, 0.5, "fp32", NULL, "update for round 1, but round 1 is closed", 0);
    /* round 2 is the last: the run is done, pulls get bye once per client */
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2);
    CHECK(c.r.task.version == 1 && c.r.task.round == 2);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 1.0f), accept(d, 100, 0.5, 1.0f);
    rounds_tick(&c);
    CHECK(c.done && c.version == 2 && all_weights(3.0f));
    size_t len;
    uint8_t *rep = rounds_pull(&c, a, -1, &len);
    cJSON *bye = reply_meta(rep, len, HFL_MSG_BYE);
    CHECK(bye && !strcmp(str(bye, "reason"), "run complete") && c.clients[a].got_bye && c.byes_sent == 1);
    cJSON_Delete(bye);
    pull(a, HFL_MSG_BYE);
    pull(n4, HFL_MSG_BYE);
    CHECK(c.byes_sent == 2);
    int rounds_before = c.rounds.n;
    rounds_tick(&c); /* done: nothing more */
    CHECK(c.rounds.n == rounds_before && !c.r.open);
    teardown();
}

static void test_clip(void) {
    double n1 = sqrt((double)NP);
    /* adaptive, C = 1000: norms n1 (below) and 3 n1 (above): b = 0.5, C stays */
    setup_full(2, 2, 60, 1, "fedavg", 1000, 1);
    CHECK(c.clip == 1000);
    int a = hello("a", 100), b = hello("b", 100);
    rounds_tick(&c);
    CHECK(c.r.clip == 1000);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 3.0f);
    rounds_tick(&c);
    CHECK(c.clip == 1000 && num(last_round(), "clip_norm") == 1000 && num(last_round(), "clipped") == 1);
    cJSON *ev = events("update");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ev, 1), "clipped")));
    cJSON_Delete(ev);
    /* mean of 1 and 3 scaled to 1000 / (3 n1) */
    CHECK_CLOSE(c.global[0], 0.5 * 1.0 + 0.5 * 1000.0 / n1, 0, 1e-6);
    /* round 2: both below, b = 1: C exp(-0.1) */
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 1.0f);
    rounds_tick(&c);
    CHECK_CLOSE(c.clip, 1000 * exp(-0.1), 0, 1e-15);
    teardown();
    /* both above: b = 0, C exp(0.1); and an update exactly at C counts as below */
    setup_full(2, 2, 60, 1, "fedavg", 100, 1);
    a = hello("a", 100), b = hello("b", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 2.0f);
    rounds_tick(&c);
    CHECK_CLOSE(c.clip, 100 * exp(0.1), 0, 1e-15);
    teardown();
    /* a fixed clip does not move */
    setup_full(2, 2, 60, 1, "fedavg", 100, 0);
    a = hello("a", 100), b = hello("b", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 2.0f);
    rounds_tick(&c);
    CHECK(c.clip == 100 && num(last_round(), "clipped") == 2);
    teardown();
}

static void test_divisor(void) {
    /* F = 0.5, three of 100, one update at the deadline: the divisor grows
     * from 100 to 100 / 0.5 = 200 (of 300 capped): the model moves by v / 2 */
    setup(3, 1, 0.2, 0.5);
    int a = hello("a", 100);
    hello("b", 100), hello("c", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK);
    accept(a, 100, 0.5, 4.0f);
    hfl_sleep_ms(300);
    rounds_tick(&c);
    CHECK(c.version == 1 && all_weights(2.0f));
    teardown();
    /* F = 0.2, two of 100: caps 25 each (0.25 x 100), one update weighing 25:
     * 25 / 0.2 = 125 exceeds the capped total 50, which is the divisor: v / 2 */
    setup(2, 1, 0.2, 0.2);
    a = hello("a", 100);
    hello("b", 100);
    rounds_tick(&c);
    CHECK(c.r.cap_total == 50);
    pull(a, HFL_MSG_TASK);
    accept(a, 100, 0.5, 4.0f);
    CHECK(c.r.weight_samples == 25 && c.r.weight_max == 25);
    hfl_sleep_ms(300);
    rounds_tick(&c);
    CHECK(c.version == 1 && all_weights(2.0f));
    teardown();
    /* F = 1: plain FedAvg over what came, the mean of the update itself */
    setup(3, 1, 0.2, 1);
    a = hello("a", 100);
    hello("b", 100), hello("c", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK);
    accept(a, 100, 0.5, 4.0f);
    hfl_sleep_ms(300);
    rounds_tick(&c);
    CHECK(c.version == 1 && all_weights(4.0f));
    teardown();
}

static void test_closing(void) {
    /* gone: one selected client leaves; the other two answered: the round
     * closes at once, long before its deadline */
    setup(3, 2, 60, 1);
    int a = hello("a", 100), b = hello("b", 100), d = hello("d", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 3.0f);
    rounds_tick(&c);
    CHECK(c.r.open); /* d may still answer */
    cJSON *m = cJSON_CreateObject();
    char err[HFL_ERR_LEN];
    cJSON_AddStringToObject(m, "error", "out of memory");
    CHECK(registry_leave(&c, d, m, err) == 0);
    cJSON_Delete(m);
    rounds_tick(&c);
    CHECK(!c.r.open && c.version == 1 && all_weights(2.0f) && !strcmp(str(last_round(), "status"), "ok"));
    /* the next round opens without d: two live planned, one left, K = 3 */
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 2 && !c.r.slot[d].selected);
    teardown();

    /* gone but short of the quorum: failed, model kept */
    setup(3, 3, 60, 1);
    a = hello("a", 100), b = hello("b", 100), d = hello("d", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 3.0f);
    refuse(d, 1, 100, 0.5, "int8", NULL, "uses codec", 1); /* told to skip: gone */
    rounds_tick(&c);
    const cJSON *r = last_round();
    CHECK(!c.r.open && c.version == 0 && all_weights(0.0f) && !strcmp(str(r, "status"), "failed") &&
          !strcmp(str(r, "reason"), "quorum not reached, global model kept") && num(r, "refused") == 1 &&
          num(r, "clients") == 2);
    CHECK_CLOSE(num(r, "test_acc"), 0.0, 0, 0); /* no evaluation: the last accuracy, none yet */
    teardown();

    /* the deadline with no update at all (quorum 0): failed, not aggregated */
    setup(2, 0, 0.2, 1);
    hello("a", 100), hello("b", 100);
    rounds_tick(&c);
    hfl_sleep_ms(300);
    rounds_tick(&c);
    CHECK(!c.r.open && c.version == 0 && !strcmp(str(last_round(), "reason"), "quorum not reached, global model kept"));
    teardown();

    /* when a round opens: K = 3, quorum 2, two planned clients wait */
    setup(3, 2, 60, 1);
    a = hello("a", 100), b = hello("b", 100);
    char err2[HFL_ERR_LEN];
    hello_full("noplan", 100, 0, NULL, err2);
    rounds_tick(&c);
    CHECK(!c.r.open);
    c.clients[b].last_seen = hfl_now() - 120; /* silent: one live */
    d = hello("d", 100);
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "error", "bye");
    registry_leave(&c, d, m, err2); /* planned 2 + left 1 >= K, but one live < quorum */
    cJSON_Delete(m);
    rounds_tick(&c);
    CHECK(!c.r.open);
    c.clients[b].last_seen = hfl_now();
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 2 && c.r.slot[a].selected && c.r.slot[b].selected);
    teardown();

    /* K = 2, quorum 1: one live planned client and one silent one open a
     * round of one; with quorum 0 and no live client, nothing opens */
    setup(2, 1, 60, 1);
    a = hello("a", 100), b = hello("b", 100);
    c.clients[b].last_seen = hfl_now() - 120;
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 1 && c.r.slot[a].selected && c.r.n_silent == 1);
    teardown();
    setup(2, 0, 60, 1);
    a = hello("a", 100), b = hello("b", 100);
    c.clients[a].last_seen = c.clients[b].last_seen = hfl_now() - 120;
    rounds_tick(&c);
    CHECK(!c.r.open && c.r.round == 0);
    teardown();

    /* K = 0: nobody drawn; the round fails at the next tick */
    setup(0, 0, 60, 1);
    hello("a", 100);
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 0);
    rounds_tick(&c);
    CHECK(!c.r.open && !strcmp(str(last_round(), "reason"), "no live client to draw, global model kept"));
    teardown();
}

/* The report's per-client record, summed from the round log by hand: a round
 * where a (100 samples in 0.5 s) and b (100 in 0.25 s) answer and d is told
 * to skip, then one where a declines, b answers and d misses the deadline. */
static void test_client_records(void) {
    setup(3, 2, 0.3, 1);
    int a = hello("a", 100), b = hello("b", 100), d = hello("d", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK);
    cJSON_Delete(send(a, 1, 100, 0.5, 1.0f, "fp32", "{\"train_s\": 0.5}", 1000, HFL_MSG_ACK));
    cJSON_Delete(send(b, 1, 100, 0.5, 1.0f, "fp32", "{\"train_s\": 0.25}", 3000, HFL_MSG_ACK));
    refuse(d, 1, 100, 0.5, "int8", NULL, "uses codec", 1);
    rounds_tick(&c);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2 && c.r.n_selected == 3);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK);
    cJSON_Delete(send(a, 2, 100, 0.5, 1.0f, "fp32", "{\"declined\": true}", 100, HFL_MSG_ACK));
    cJSON_Delete(send(b, 2, 50, 0.5, 1.0f, "fp32", "{\"train_s\": 0.5}", 2000, HFL_MSG_ACK));
    hfl_sleep_ms(400);
    rounds_tick(&c);
    REQUIRE(!c.r.open && c.rounds.n == 2);
    cJSON *rep = registry_report(&c);
    const double want[3][5] = {/* joined, failures, declined, bytes_up, samples/s */
                               {2, 0, 1, 1000, 200}, {2, 0, 0, 5000, 150.0 / 0.75}, {2, 2, 0, 0, -1}};
    for (int i = 0; i < 3; i++) {
        const cJSON *o = cJSON_GetArrayItem(rep, i);
        CHECK_MSG(num(o, "rounds_joined") == want[i][0] && num(o, "failures") == want[i][1] &&
                      num(o, "declined") == want[i][2] && num(o, "bytes_up") == want[i][3],
                  "client %d: joined %g failures %g declined %g bytes %g", i, num(o, "rounds_joined"),
                  num(o, "failures"), num(o, "declined"), num(o, "bytes_up"));
        const cJSON *sps = cJSON_GetObjectItemCaseSensitive(o, "samples_per_s");
        if (want[i][4] < 0) CHECK_MSG(!sps, "client %d trained nothing, yet has samples_per_s", i);
        else CHECK_CLOSE(cJSON_GetNumberValue(sps), want[i][4], 1e-9, 0);
    }
    cJSON_Delete(rep);
    teardown();
}

/* --over-select: K = 2 with F = 0.5 draws 3 of 4 (the same first two as
 * without it: the shuffle's prefix), the first 2 updates close the round,
 * the third drawn client is "late" and its update is refused; with 2
 * eligible only 2 are drawn and both are waited for. */
static void test_over_select(void) {
    setup(2, 2, 60, 1);
    int ids[4];
    const char *names[4] = {"a", "b", "d", "e"};
    for (int i = 0; i < 4; i++) ids[i] = hello(names[i], 100);
    rounds_tick(&c);
    int plain[2] = {c.r.selected[0], c.r.selected[1]};
    teardown();
    setup(2, 2, 60, 1);
    c.cfg.over_select = 0.5;
    for (int i = 0; i < 4; i++) ids[i] = hello(names[i], 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 3 && c.r.n_target == 2);
    CHECK(c.r.selected[0] == plain[0] && c.r.selected[1] == plain[1]);
    int x = c.r.selected[0], y = c.r.selected[2], z = c.r.selected[1];
    pull(x, HFL_MSG_TASK), pull(y, HFL_MSG_TASK), pull(z, HFL_MSG_TASK);
    accept(x, 100, 0.5, 1.0f);
    rounds_tick(&c);
    CHECK(c.r.open); /* one of two */
    accept(y, 100, 0.5, 3.0f);
    rounds_tick(&c);
    CHECK(!c.r.open && c.version == 1 && all_weights(2.0f));
    const cJSON *r = last_round(), *p;
    CHECK(num(r, "target") == 2 && num(r, "selected") == 3 && num(r, "clients") == 2);
    int late = 0, ok = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(r, "participants")) {
        late += !strcmp(str(p, "status"), "late") && num(p, "client") == z;
        ok += !strcmp(str(p, "status"), "ok");
    }
    CHECK(late == 1 && ok == 2);
    refuse(z, 1, 100, 0.5, "fp32", NULL, "round 1 is closed", 0);
    cJSON *rep = registry_report(&c);
    CHECK(num(cJSON_GetArrayItem(rep, z), "late") == 1 && num(cJSON_GetArrayItem(rep, z), "failures") == 0 &&
          num(cJSON_GetArrayItem(rep, x), "late") == 0);
    cJSON_Delete(rep);
    (void)ids;
    teardown();
    setup(2, 2, 60, 1);
    c.cfg.over_select = 0.5;
    hello("a", 100), hello("b", 100);
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 2 && c.r.n_target == 2);
    teardown();
}

/* --late fold: over-selected (3 drawn, target 2), the third drawn client of
 * round 1 is late; its update for round 1 comes while round 2 is open and
 * joins it at half weight: round 1 moves the model to 2 (updates 1 and 3),
 * round 2 takes two fresh updates of 0.5 (100 samples each) and the late 3
 * (100 samples, half weight): 2 + (50 + 50 + 150) / 250 = 3. A second late
 * update is refused; without --late fold, the late one is refused. */
static void test_late_fold(void) {
    for (int fold = 0; fold <= 1; fold++) {
        setup(2, 2, 60, 1);
        c.cfg.over_select = 0.5, c.cfg.late_fold = fold;
        hello("a", 100), hello("b", 100), hello("d", 100), hello("e", 100);
        rounds_tick(&c);
        int x = c.r.selected[0], y = c.r.selected[1], z = c.r.selected[2];
        pull(x, HFL_MSG_TASK), pull(y, HFL_MSG_TASK), pull(z, HFL_MSG_TASK);
        accept(x, 100, 0.5, 1.0f), accept(y, 100, 0.5, 3.0f);
        rounds_tick(&c);
        rounds_tick(&c);
        REQUIRE(c.r.open && c.r.round == 2 && c.version == 1);
        CHECK(c.clients[z].late_round == (fold ? 1 : 0));
        if (!fold) {
            refuse(z, 1, 100, 0.5, "fp32", NULL, "round 2 is open", 0);
            teardown();
            continue;
        }
        cJSON *ack = send(z, 1, 100, 0.5, 3.0f, "fp32", NULL, 1000, HFL_MSG_ACK);
        CHECK(num(ack, "folded_into") == 2);
        cJSON_Delete(ack);
        refuse(z, 1, 100, 0.5, "fp32", NULL, "round 2 is open", 0); /* once only */
        CHECK(c.r.n_stale == 1 && c.r.weight_stale == 50);
        int a2 = c.r.selected[0], b2 = c.r.selected[1];
        pull(a2, HFL_MSG_TASK), pull(b2, HFL_MSG_TASK);
        accept(a2, 100, 0.5, 0.5f), accept(b2, 100, 0.5, 0.5f);
        rounds_tick(&c);
        REQUIRE(!c.r.open && c.version == 2);
        int near = 1;
        for (size_t i = 0; i < c.spec.n_params; i++) near &= fabsf(c.global[i] - 3.0f) < 1e-5f;
        CHECK_MSG(near, "weight 0 is %.9g, expected 3", (double)c.global[0]);
        const cJSON *folded = cJSON_GetObjectItemCaseSensitive(last_round(), "folded");
        CHECK(cJSON_GetArraySize(folded) == 1 && num(cJSON_GetArrayItem(folded, 0), "client") == z &&
              num(cJSON_GetArrayItem(folded, 0), "from_round") == 1);
        CHECK(num(last_round(), "late_folded") == 1); /* written under --late fold, not only --async */
        teardown();
    }
}

/* --virtual-time: four drawn; a says sim_s 12.5 (1.0 everywhere), b 60, the
 * deadline itself (3.0: on time), d says no sim_s (refused, told to skip), e
 * 60.5 (9.0: missed, ACKed with missed_deadline, not summed). The round
 * closes at once, without its 60 s deadline, on a and b: mean 2. Without
 * --virtual-time a sim_s of 600 is a record only: (1 + 2 + 9) / 3; a
 * malformed one is refused either way. */
static void test_virtual_time(void) {
    setup(4, 2, 60, 1);
    c.cfg.virtual_time = 1;
    int a = hello("a", 100), b = hello("b", 100), d = hello("d", 100), e = hello("e", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 4);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK), pull(e, HFL_MSG_TASK);
    cJSON_Delete(send(a, 1, 100, 0.5, 1.0f, "fp32", "{\"sim_s\": 12.5}", 1000, HFL_MSG_ACK));
    cJSON_Delete(send(b, 1, 100, 0.5, 3.0f, "fp32", "{\"sim_s\": 60}", 1000, HFL_MSG_ACK));
    refuse(d, 1, 100, 0.5, "fp32", NULL, "carries no sim_s", 1);
    cJSON *ack = send(e, 1, 100, 0.5, 9.0f, "fp32", "{\"sim_s\": 60.5}", 1000, HFL_MSG_ACK);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ack, "missed_deadline")));
    cJSON_Delete(ack);
    rounds_tick(&c);
    REQUIRE_MSG(!c.r.open && c.version == 1, "the round did not close on its on-time updates");
    CHECK(all_weights(2.0f));
    const cJSON *r = last_round(), *p;
    CHECK(num(r, "missed_deadline") == 1 && num(r, "refused") == 1 && num(r, "clients") == 2);
    int seen = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(r, "participants")) {
        int id = (int)num(p, "client");
        const char *st = str(p, "status");
        seen += id == e && !strcmp(st, "missed_deadline") && num(p, "sim_s") == 60.5;
        seen += id == a && !strcmp(st, "ok") && num(p, "sim_s") == 12.5;
        seen += id == d && !strcmp(st, "refused") && !cJSON_GetObjectItemCaseSensitive(p, "sim_s");
    }
    CHECK_MSG(seen == 3, "participants: %d of 3 as expected", seen);
    cJSON *ev = events("missed_deadline");
    CHECK(cJSON_GetArraySize(ev) == 1 && num(cJSON_GetArrayItem(ev, 0), "client") == e);
    cJSON_Delete(ev);
    cJSON *rep = registry_report(&c);
    CHECK(num(cJSON_GetArrayItem(rep, e), "late") == 1 && num(cJSON_GetArrayItem(rep, e), "failures") == 0);
    cJSON_Delete(rep);
    teardown();

    setup(4, 3, 60, 1);
    a = hello("a", 100), b = hello("b", 100), d = hello("d", 100), e = hello("e", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK), pull(e, HFL_MSG_TASK);
    cJSON_Delete(send(a, 1, 100, 0.5, 1.0f, "fp32", "{\"sim_s\": 12.5}", 1000, HFL_MSG_ACK));
    cJSON_Delete(send(b, 1, 100, 0.5, 2.0f, "fp32", NULL, 1000, HFL_MSG_ACK));
    refuse(d, 1, 100, 0.5, "fp32", "{\"sim_s\": -1}", "sim_s", 1);
    cJSON_Delete(send(e, 1, 100, 0.5, 9.0f, "fp32", "{\"sim_s\": 600}", 1000, HFL_MSG_ACK));
    rounds_tick(&c);
    CHECK(!c.r.open && all_weights(4.0f) && !cJSON_GetObjectItemCaseSensitive(last_round(), "missed_deadline"));
    teardown();
}

/* A hello whose plan declares a speed (capacity_samples_per_s, or only the
 * measured prediction when capacity is 0). */
static int hello_speed(const char *name, int samples, double capacity, double predicted) {
    char err[HFL_ERR_LEN] = "";
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "samples", samples);
    cJSON *plan = cJSON_AddObjectToObject(m, "plan");
    if (capacity > 0) cJSON_AddNumberToObject(plan, "capacity_samples_per_s", capacity);
    if (predicted > 0) cJSON_AddNumberToObject(plan, "predicted_samples_per_s", predicted);
    int id = registry_hello(&c, name, m, err);
    cJSON_Delete(m);
    CHECK_MSG(id >= 0, "hello %s: %s", name, err);
    return id;
}

/* --local-work capacity (setup: 3 local epochs, batch 16): speeds 100, 200
 * and 400 samples/s (the last only as its measured prediction) with 100
 * samples each take 3, 1.5 and 0.75 s for their epochs; the median 1.5 s
 * gives ceil(1.5 x speed / 16) = 10, 19 and 38 steps, sent in each task and
 * logged per participant. A client of unknown speed keeps the round on
 * epochs; so does --local-work epochs. */
static void test_capacity_work(void) {
    for (int mode = 0; mode < 3; mode++) {
        setup(3, 3, 60, 1);
        c.cfg.capacity_work = mode != 0;
        int ids[3] = {hello_speed("a", 100, 100, 999), hello_speed("b", 100, 200, 0),
                      hello_speed("d", 100, 0, mode == 2 ? 0 : 400)};
        rounds_tick(&c);
        REQUIRE(c.r.open && c.r.n_selected == 3);
        const int want[3][3] = {{0, 0, 0}, {10, 19, 38}, {0, 0, 0}};
        for (int i = 0; i < 3; i++) {
            size_t len = 0;
            uint8_t *rep = rounds_pull(&c, ids[i], -1, &len);
            cJSON *m = reply_meta(rep, len, HFL_MSG_TASK);
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(m, "local_steps");
            CHECK_MSG(want[mode][i] ? cJSON_IsNumber(st) && st->valueint == want[mode][i] : !st,
                      "mode %d client %d: local_steps %g, expected %d", mode, i, cJSON_GetNumberValue(st),
                      want[mode][i]);
            CHECK(num(m, "local_epochs") == 3);
            cJSON_Delete(m);
        }
        if (mode == 1) {
            for (int i = 0; i < 3; i++)
                cJSON_Delete(send(ids[i], 1, 100, 0.5, 1.0f, "fp32", "{\"trained_samples\": 160}", 1000, HFL_MSG_ACK));
            rounds_tick(&c);
            const cJSON *p;
            int seen = 0;
            cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(last_round(), "participants"))
                seen += num(p, "trained_samples") == 160 && num(p, "local_steps") > 0;
            CHECK(seen == 3);
        }
        teardown();
    }
}

/* A folded update is capped and clipped as a fresh one would be: with
 * --max-share 0.25 over a round of 3 x 100 planned samples it weighs at most
 * floor(0.25 / 0.75 x 300) = 100 of its 1000 claimed, half of that folded
 * (50); with a fixed clip of 1 its update of norm > 1 is counted clipped;
 * the event names the round it came from. */
static void test_late_fold_caps(void) {
    setup_full(2, 2, 60, 0.25, "fedavg", 1, 0);
    c.cfg.over_select = 0.5, c.cfg.late_fold = 1;
    hello("a", 100), hello("b", 100), hello("d", 1000), hello("e", 100);
    rounds_tick(&c);
    int x = c.r.selected[0], y = c.r.selected[1], z = c.r.selected[2];
    pull(x, HFL_MSG_TASK), pull(y, HFL_MSG_TASK), pull(z, HFL_MSG_TASK);
    accept(x, c.clients[x].samples, 0.5, 1e-4f), accept(y, c.clients[y].samples, 0.5, 1e-4f);
    rounds_tick(&c);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2);
    c.clients[z].samples = 100000; /* above the share cap whichever client was late */
    c.clients[z].last_seen = 0;
    double planned = c.r.samples_planned, cap = floor(0.25 / 0.75 * planned);
    int64_t own = c.clients[z].samples, weighed = own < cap ? own : (int64_t)cap;
    int clipped = c.r.n_clipped;
    cJSON_Delete(send(z, 1, (int)own, 0.5, 1.0f, "fp32", NULL, 1000, HFL_MSG_ACK));
    CHECK_MSG(c.r.weight_stale == 0.5 * (double)weighed, "folded weight %g, expected %g (own %lld, cap %g)",
              c.r.weight_stale, 0.5 * (double)weighed, (long long)own, cap);
    CHECK(weighed == (int64_t)cap); /* the cap, not the claim, weighs it */
    CHECK(c.r.n_clipped == clipped + 1); /* norm sqrt(199210) > 1 */
    CHECK(hfl_now() - c.clients[z].last_seen < 60); /* a fold is a sign of life */
    cJSON *ev = events("update_folded");
    CHECK(cJSON_GetArraySize(ev) == 1 && num(cJSON_GetArrayItem(ev, 0), "from_round") == 1 &&
          num(cJSON_GetArrayItem(ev, 0), "round") == 2);
    cJSON_Delete(ev);
    teardown();
}

/* Waits (up to 5 s) for the evaluation thread to finish its round. */
static int eval_settled(void) {
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&c.lock);
        int busy = eval_busy(&c);
        pthread_mutex_unlock(&c.lock);
        if (!busy) return 1;
        hfl_sleep_ms(10);
    }
    return 0;
}

/* The evaluation thread (evaluate.c). Holding the coordinator lock keeps it
 * from publishing, so the order is fixed: round 1 closes with its accuracy
 * still null, round 2 opens at once, and its update does not close it while
 * round 1 is unpublished; once the lock is let go, round 1 gets accuracy 1
 * and loss ln 10 (all weights equal: equal logits, class 0 first), then round
 * 2 closes and the run is done only after its own evaluation. */
static void test_eval_thread(void) {
    setup(1, 1, 60, 1);
    char err[HFL_ERR_LEN];
    REQUIRE_MSG(eval_start(&c, err) == 0, "%s", err);
    int a = hello("a", 100);
    pthread_mutex_lock(&c.lock);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f);
    rounds_tick(&c);
    const cJSON *r1 = cJSON_GetArrayItem(log_as_json(), 0);
    CHECK(c.version == 1 && !c.r.open && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r1, "test_acc")) &&
          eval_busy(&c));
    rounds_tick(&c);
    CHECK(c.r.open && c.r.round == 2);
    pull(a, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f);
    rounds_tick(&c);
    CHECK(c.r.open && c.version == 1); /* waits for round 1's publication */
    pthread_mutex_unlock(&c.lock);
    CHECK(eval_settled());
    pthread_mutex_lock(&c.lock);
    r1 = cJSON_GetArrayItem(log_as_json(), 0); /* as evaluated */
    CHECK_CLOSE(num(r1, "test_acc"), 1.0, 0, 0);
    CHECK_CLOSE(num(r1, "test_loss"), log(10.0), 1e-5, 0);
    CHECK(c.final_acc == 1.0f);
    rounds_tick(&c);
    CHECK(!c.r.open && c.version == 2 && c.done_pending && !c.done);
    pthread_mutex_unlock(&c.lock);
    CHECK(eval_settled());
    pthread_mutex_lock(&c.lock);
    CHECK(c.done && !isnan(num(last_round(), "test_acc")));
    pthread_mutex_unlock(&c.lock);
    cJSON *opens = events("round_open"), *closes = events("round");
    CHECK(cJSON_GetArraySize(opens) == 2 && cJSON_GetArraySize(closes) == 2 &&
          num(cJSON_GetArrayItem(closes, 0), "t") >= num(cJSON_GetArrayItem(opens, 1), "t"));
    cJSON_Delete(opens);
    cJSON_Delete(closes);
    eval_stop(&c);
    teardown();
}

/* A task sent as a delta against the version the client holds is counted. */
static void test_delta_tasks(void) {
    setup(1, 1, 60, 1);
    char err[HFL_ERR_LEN];
    downlink_free(&c);
    CHECK_MSG(downlink_init(&c, "fp32", 1, 0, err) == 0, "%s", err); /* deltas on: the history kept */
    int a = hello("a", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK);
    CHECK(c.r.tasks_delta == 0); /* it holds nothing (-1): a full task */
    accept(a, 100, 0.5, 1.0f);
    rounds_tick(&c);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2 && c.version == 1);
    size_t len;
    uint8_t *rep = rounds_pull(&c, a, 0, &len); /* it holds version 0 */
    cJSON_Delete(reply_meta(rep, len, HFL_MSG_TASK));
    CHECK(c.r.tasks_delta == 1);
    pull(a, HFL_MSG_TASK);
    CHECK(c.r.tasks_delta == 1);
    accept(a, 100, 0.5, 1.0f);
    rounds_tick(&c);
    CHECK(num(last_round(), "tasks_delta") == 1);
    teardown();
}

/* registry.c's survivors (docs/testing.md): the session cap at exactly
 * --max-sessions, a token read through fd 0, a leave's 1-byte peak, and the
 * report's device copy. */
static void test_registry_edges(void) {
    char err[HFL_ERR_LEN] = "";
    setup(1, 1, 60, 1);
    c.cfg.max_sessions = 3, c.cfg.session_ttl_s = 1e9; /* none ever idle enough */
    CHECK(hello("s0", 10) == 0 && hello("s1", 10) == 1 && hello("s2", 10) == 2);
    CHECK(hello_full("s3", 10, 1, NULL, err) == -1 && strstr(err, "registry full: 3 sessions") && c.n_clients == 3);
    teardown();
    /* with stdin closed, /dev/urandom opens as fd 0, a valid descriptor */
    setup(1, 1, 60, 1);
    int saved = dup(0);
    REQUIRE(saved >= 0);
    close(0);
    int id = hello_full("fd0", 10, 1, NULL, err);
    REQUIRE(dup2(saved, 0) == 0);
    close(saved);
    CHECK_MSG(id == 0 && strlen(c.clients[0].token) == 32, "hello with fd 0 free: %d, %s", id, err);
    /* a peak of one byte is a peak: kept and logged */
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "error", "tiny");
    cJSON_AddNumberToObject(m, "measured_peak_bytes", 1);
    cJSON_AddNumberToObject(m, "predicted_peak_bytes", 1);
    CHECK(registry_leave(&c, 0, m, err) == 0 && c.clients[0].measured_peak == 1 && c.clients[0].predicted_peak == 1);
    cJSON_Delete(m);
    cJSON *ev = events("client_left");
    CHECK(cJSON_GetArraySize(ev) == 1 && num(cJSON_GetArrayItem(ev, 0), "measured_peak_bytes") == 1);
    cJSON_Delete(ev);
    /* the report copies the hello's device */
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c.clients[0].hello, "device"), "name", "gpu-x");
    cJSON *rep = registry_report(&c);
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rep, 0), "device");
    CHECK(dev && !strcmp(str(dev, "name"), "gpu-x"));
    cJSON_Delete(rep);
    teardown();
}

/* A pull from a client that holds the current version (hfl-client
 * --init-model, or a second pull after training on it) carries no weights. */
static void test_held_tasks(void) {
    setup(1, 1, 60, 1);
    int a = hello("a", 100);
    rounds_tick(&c);
    size_t len;
    uint8_t *rep = rounds_pull(&c, a, 0, &len); /* holds version 0, the current one */
    hfl_msg msg;
    char err[HFL_ERR_LEN] = "";
    REQUIRE(hfl_msg_decode(rep, len, (size_t)1 << 30, &msg, err) == 0);
    CHECK(msg.type == HFL_MSG_TASK && msg.payload_len == 0 && !strcmp(str(msg.meta, "weights"), "held") &&
          num(msg.meta, "base_version") == 0 && c.r.tasks_held == 1 && c.r.tasks_delta == 0);
    hfl_msg_free(&msg);
    free(rep);
    const hfl_codec *fp32 = c.down.codec; /* a lossy downlink: everyone gets its rounding, never held */
    c.down.codec = hfl_codec_find("fp16", NULL);
    downlink_reset_cache(&c);
    c.r.slot[a].tasked = 0; /* each pull here as a first one: a repeat gets no weights (rounds.c, round_pull) */
    rep = rounds_pull(&c, a, 0, &len);
    REQUIRE(hfl_msg_decode(rep, len, (size_t)1 << 30, &msg, err) == 0);
    CHECK(!strcmp(str(msg.meta, "weights"), "full") && msg.payload_len > 0 && c.r.tasks_held == 1);
    hfl_msg_free(&msg);
    free(rep);
    c.down.codec = fp32;
    downlink_reset_cache(&c);
    c.r.slot[a].tasked = 0;
    size_t full = pull(a, HFL_MSG_TASK); /* holds nothing: the whole model */
    CHECK(full > c.spec.n_params * sizeof(float) && c.r.tasks_held == 1);
    accept(a, 100, 0.5, 1.0f);
    rounds_tick(&c);
    CHECK(num(last_round(), "tasks_held") == 1);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.version == 1);
    rep = rounds_pull(&c, a, 0, &len); /* version 0 is old now: weights travel */
    REQUIRE(hfl_msg_decode(rep, len, (size_t)1 << 30, &msg, err) == 0);
    CHECK(strcmp(str(msg.meta, "weights"), "held") && msg.payload_len > 0 && c.r.tasks_held == 0);
    hfl_msg_free(&msg);
    free(rep);
    teardown();
}

/* rounds.c's survivors (docs/testing.md): a speed below 1 sample/s is still
 * a speed; a decline's round is range-checked; a failed round has a train
 * loss of 0, not 0/0; the last round closing failed ends the run; one
 * update is enough to adapt the clip. */
static void test_rounds_edges(void) {
    setup(1, 1, 60, 1);
    c.cfg.capacity_work = 1;
    int s = hello_speed("slow", 100, 0.5, 0);
    rounds_tick(&c);
    REQUIRE_MSG(c.r.open && c.r.n_selected == 1, "open %d, selected %d", c.r.open, c.r.n_selected);
    size_t len = 0;
    uint8_t *rep = rounds_pull(&c, s, -1, &len);
    cJSON *m = reply_meta(rep, len, HFL_MSG_TASK);
    /* T = 3 epochs x 100 / 0.5 = 600 s; 600 x 0.5 / batch 16 -> 19 steps */
    CHECK_MSG(num(m, "local_steps") == 19, "local_steps %g", num(m, "local_steps"));
    cJSON_Delete(m);
    m = send(s, 0, 100, 0.5, 1.0f, "fp32", "{\"declined\": true}", 100, HFL_MSG_ERROR);
    CHECK_MSG(strstr(str(m, "error"), "is outside [1, "), "decline of round 0: %s", str(m, "error"));
    cJSON_Delete(m);
    teardown();
    /* the last round fails at its deadline: no updates, loss 0, the run done */
    setup(1, 1, 0.05, 1);
    c.cfg.rounds = 1;
    int a = hello("a", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK);
    hfl_sleep_ms(120);
    rounds_tick(&c);
    const cJSON *r = last_round();
    CHECK_MSG(r && !strcmp(str(r, "status"), "failed") && num(r, "train_loss") == 0 && c.done,
              "status %s, train_loss %g, done %d", r ? str(r, "status") : "-", r ? num(r, "train_loss") : -1, c.done);
    teardown();
    /* adaptive clip from a single update: below C, so C shrinks by exp(-0.1);
     * and --save-model with a one-character name is saved too */
    setup_full(1, 1, 60, 1, "fedavg", 1000, 1);
    char dir[] = "/tmp/hfl-test-save-XXXXXX", cwd[4096];
    REQUIRE(mkdtemp(dir) && getcwd(cwd, sizeof cwd) && chdir(dir) == 0);
    snprintf(c.cfg.save_model, sizeof c.cfg.save_model, "m");
    a = hello("a", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f);
    rounds_tick(&c);
    CHECK_CLOSE(c.clip, 1000 * exp(-0.1), 0, 1e-15);
    CHECK_MSG(access("m", R_OK) == 0, "no model saved as 'm'");
    unlink("m");
    REQUIRE(chdir(cwd) == 0);
    rmdir(dir);
    teardown();
}

static void test_robust(void) {
    setup_full(3, 3, 60, 1, "median", 0, 0);
    int a = hello("a", 100), b = hello("b", 100), d = hello("d", 500);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 2.0f), accept(d, 500, 0.5, 10.0f);
    rounds_tick(&c);
    CHECK(c.version == 1 && all_weights(2.0f) && num(last_round(), "rule_kept") == 3);
    teardown();
    /* Krum needs more than 2f + 2 = 4 updates: three fail the round, the model kept */
    setup_full(3, 3, 60, 1, "krum", 1000, 1);
    a = hello("a", 100), b = hello("b", 100), d = hello("d", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK);
    accept(a, 100, 0.5, 1.0f), accept(b, 100, 0.5, 1.0f), accept(d, 100, 0.5, 1.0f);
    rounds_tick(&c);
    const cJSON *r = last_round();
    CHECK(c.version == 0 && all_weights(0.0f) && !strcmp(str(r, "status"), "failed") &&
          strstr(str(r, "reason"), "global model kept"));
    CHECK_CLOSE(c.clip, 1000 * exp(-0.1), 0, 1e-15); /* the clip still adapts */
    teardown();
    /* Krum over 5 (f = 1): one update kept */
    setup_full(5, 5, 60, 1, "krum", 0, 0);
    int ids[5];
    for (int i = 0; i < 5; i++) {
        char name[4] = {'k', (char)('0' + i), 0};
        ids[i] = hello(name, 100);
    }
    rounds_tick(&c);
    for (int i = 0; i < 5; i++) pull(ids[i], HFL_MSG_TASK);
    for (int i = 0; i < 5; i++) accept(ids[i], 100, 0.5, i == 4 ? 50.0f : 1.0f + 0.125f * (float)i);
    rounds_tick(&c);
    CHECK(c.version == 1 && num(last_round(), "rule_kept") == 1);
    teardown();
}

/* registry.c's second set of survivors (docs/testing.md): --max-sessions 1
 * is a cap of one; registry_has_room (asked before a hello's challenge is
 * issued) says yes to a known name, the first included, when the registry
 * is full, yes while there is room even if no session is idle, and yes when
 * full with an idle one to evict; a revoked first client is refused again;
 * a leave prints its line when not --quiet; the report names the round a
 * benched client comes back in, only while it is still ahead. */
static void test_registry_room(void) {
    char err[HFL_ERR_LEN] = "";
    setup(1, 1, 60, 1);
    c.cfg.max_sessions = 1, c.cfg.session_ttl_s = 1e9;
    CHECK(hello("s0", 10) == 0);
    CHECK(hello_full("s1", 10, 1, NULL, err) == -1 && strstr(err, "registry full: 1 sessions") && c.n_clients == 1);
    teardown();

    setup(1, 1, 60, 1);
    c.cfg.max_sessions = 2, c.cfg.session_ttl_s = 1e9; /* none ever idle enough */
    int a = hello("a", 10);
    CHECK_MSG(registry_has_room(&c, "new"), "room for 1 of 2, none idle: no room"); /* room, nothing to evict */
    hello("b", 10);
    CHECK(!registry_has_room(&c, "new"));
    CHECK_MSG(registry_has_room(&c, "a") && registry_has_room(&c, "b"), "full: a known name has no room");
    c.clients[a].last_seen = hfl_now() - 2e9; /* idle past --session-ttl: evictable */
    CHECK_MSG(registry_has_room(&c, "new"), "full with an idle session: no room");
    /* the first client revoked says hello again: refused */
    c.clients[a].last_seen = hfl_now();
    c.clients[a].revoked = 1;
    CHECK_MSG(hello_full("a", 10, 1, NULL, err) == -1 && strstr(err, "certificate of 'a' is revoked"),
              "revoked client 0's hello: %s", err);
    c.clients[a].revoked = 0;

    /* a leave's line on stdout, without --quiet */
    c.cfg.quiet = 0;
    fflush(stdout);
    int saved = dup(1);
    FILE *out = tmpfile();
    REQUIRE(saved >= 0 && out && dup2(fileno(out), 1) == 1);
    cJSON *m = cJSON_Parse("{\"error\": \"out of memory\"}");
    int rc = registry_leave(&c, 1, m, err);
    cJSON_Delete(m);
    fflush(stdout);
    REQUIRE(dup2(saved, 1) == 1);
    close(saved);
    char line[256] = "";
    rewind(out);
    if (!fgets(line, sizeof line, out)) line[0] = 0;
    fclose(out);
    c.cfg.quiet = 1;
    CHECK_MSG(rc == 0 && !strcmp(line, "coordinator: b left: out of memory\n"), "stdout '%s'", line);

    /* benched until round 3, seen at round 1 (named) and at round 3 (back: not named) */
    c.clients[a].benched_until = 3, c.r.round = 1;
    cJSON *rep = registry_report(&c);
    CHECK_MSG(num(cJSON_GetArrayItem(rep, a), "benched_until_round") == 3, "benched_until_round %g",
              num(cJSON_GetArrayItem(rep, a), "benched_until_round"));
    CHECK(!cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rep, 1), "benched_until_round"));
    cJSON_Delete(rep);
    c.r.round = 3;
    rep = registry_report(&c);
    CHECK(!cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rep, a), "benched_until_round"));
    cJSON_Delete(rep);
    teardown();
}

/* The resend cap (COORD_MAX_RESENDS = 1): a pull, one re-download, and the
 * next re-download is refused with skip_round, its message naming the round,
 * the client and the 2 times sent, and a resend_capped event. */
static void test_resend_capped(void) {
    setup(1, 1, 60, 1);
    int a = hello("a", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.slot[a].selected);
    pull(a, HFL_MSG_TASK);
    size_t len;
    uint8_t *rep = rounds_pull_again(&c, a, -1, &len); /* the one re-download */
    cJSON_Delete(reply_meta(rep, len, HFL_MSG_TASK));
    CHECK_MSG(c.r.tasks_resent == 1 && c.r.slot[a].resent == 1, "one re-download counted as %d (round), %d (client)",
              (int)c.r.tasks_resent, c.r.slot[a].resent);
    rep = rounds_pull_again(&c, a, -1, &len);
    cJSON *m = reply_meta(rep, len, HFL_MSG_ERROR);
    const char *e = str(m, "error");
    CHECK_MSG(e && !strcmp(e, "round 1's task was sent to client 0 2 times already (skip the round)"), "error '%s'",
              e ? e : "(none)");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "skip_round")) && c.r.slot[a].refused == SLOT_REFUSED &&
          c.r.n_refused == 1);
    cJSON_Delete(m);
    cJSON *ev = events("resend_capped");
    CHECK_MSG(cJSON_GetArraySize(ev) == 1 && num(cJSON_GetArrayItem(ev, 0), "round") == 1 &&
                  num(cJSON_GetArrayItem(ev, 0), "client") == a,
              "%d resend_capped events", cJSON_GetArraySize(ev));
    cJSON_Delete(ev);
    teardown();
}

/* What an answer leaves behind: a decline's ack says nothing of a missed
 * deadline (it was not simulated late); an update's measured peak of one
 * byte is a peak, kept with its prediction and logged in its event; an accepted update's learning
 * rates are its participant's in the round log. */
static void test_update_records(void) {
    setup(3, 2, 60, 1);
    int a = hello("a", 100), b = hello("b", 100), d = hello("d", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 3);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK), pull(d, HFL_MSG_TASK);
    cJSON *ack = send(a, 1, 100, 0.5, 1.0f, "fp32", "{\"declined\": true}", 100, HFL_MSG_ACK);
    CHECK_MSG(ack && num(ack, "round") == 1 && !cJSON_GetObjectItemCaseSensitive(ack, "missed_deadline") &&
                  !cJSON_GetObjectItemCaseSensitive(ack, "folded_into"),
              "a decline's ack carries missed_deadline or folded_into");
    cJSON_Delete(ack);
    cJSON_Delete(send(b, 1, 100, 0.5, 1.0f, "fp32", "{\"measured_peak_bytes\": 1, \"predicted_peak_bytes\": 1}", 100,
                      HFL_MSG_ACK));
    CHECK_MSG(c.clients[b].measured_peak == 1 && c.clients[b].predicted_peak == 1, "peaks %g, %g",
              c.clients[b].measured_peak, c.clients[b].predicted_peak);
    cJSON *ev = events("update"); /* and logged with its update */
    const cJSON *u = cJSON_GetArrayItem(ev, 0);
    CHECK_MSG(cJSON_GetArraySize(ev) == 1 && num(u, "client") == b && num(u, "measured_peak_bytes") == 1 &&
                  num(u, "predicted_peak_bytes") == 1,
              "the update event's peaks: %g, %g", num(u, "measured_peak_bytes"), num(u, "predicted_peak_bytes"));
    cJSON_Delete(ev);
    cJSON_Delete(send(d, 1, 100, 0.5, 1.0f, "fp32", "{\"lr_first\": 0.25, \"lr_last\": 0.125}", 100, HFL_MSG_ACK));
    rounds_tick(&c);
    REQUIRE(!c.r.open && c.rounds.n == 1);
    const cJSON *p;
    int seen = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(last_round(), "participants")) {
        if (num(p, "client") == d) seen += num(p, "lr_first") == 0.25 && num(p, "lr_last") == 0.125;
        if (num(p, "client") == b) seen += !cJSON_GetObjectItemCaseSensitive(p, "lr_first");
    }
    CHECK_MSG(seen == 2, "participants' lr_first/lr_last: %d of 2 as expected", seen);
    teardown();
}

/* Central DP (dp.h): one client of 100 samples, clip 1, noise multiplier 8:
 * sigma = z w_max C = 8 x 1 x 1, and an update of zeros leaves the model
 * at the noise itself (the FedAvg divisor is the update's weight, 1). Its
 * 199210 values have mean 0 and standard deviation 8 (truncated at 10
 * sigma, which changes neither visibly). The bounds: the sample mean's
 * standard error is 8 / sqrt(199210) = 0.018, so 0.2 is 11 of them; the
 * sample deviation's is 8 / sqrt(2 x 199210) = 0.013, so 2% (0.16) is 12 of
 * them. A sum whose scale held only the clip (2^-49 per unit) would wrap
 * every value past 4 in the fixed-point rounding. */
static void test_dp_central(void) {
    setup_config(1, 1, 60, 1, "fedavg", 1, 0);
    c.cfg.dp_noise = 8;
    setup_start();
    int a = hello("a", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.dp_sigma == 8);
    pull(a, HFL_MSG_TASK);
    accept(a, 100, 0.5, 0.0f);
    rounds_tick(&c);
    REQUIRE(!c.r.open && c.version == 1);
    double sum = 0, sq = 0, top = 0;
    for (size_t i = 0; i < c.spec.n_params; i++) {
        double x = c.global[i];
        sum += x, sq += x * x, top = fmax(top, fabs(x));
    }
    double n = (double)c.spec.n_params, mean = sum / n, sd = sqrt(sq / n - mean * mean);
    CHECK_MSG(fabs(mean) < 0.2 && fabs(sd - 8) < 0.16 && top <= 80, "noise mean %g, deviation %g (want 8), max %g",
              mean, sd, top);
    dp_free(&c);
    teardown();
}

/* --dp-epsilon: a budget the first round would pass stops the run before
 * it opens (z = 1, every client drawn, q = 1: one round costs epsilon of
 * several units at delta 1e-5, over 0.5): the run is done, the stopped
 * event names the budget, and a pull gets bye. */
static void test_dp_budget_stop(void) {
    setup_config(1, 1, 60, 1, "fedavg", 1, 0);
    c.cfg.dp_noise = 1, c.cfg.dp_epsilon = 0.5, c.cfg.dp_delta = 1e-5;
    setup_start();
    int a = hello("a", 100);
    FILE *devnull = fopen("/dev/null", "w"); /* the one-line stop goes to stderr */
    int saved = dup(2);
    REQUIRE(devnull && saved >= 0 && dup2(fileno(devnull), 2) == 2);
    rounds_tick(&c);
    fflush(stderr);
    REQUIRE(dup2(saved, 2) == 2);
    close(saved), fclose(devnull);
    CHECK_MSG(c.done && !c.r.open && c.r.round == 0, "done %d, open %d, round %d", c.done, c.r.open, c.r.round);
    cJSON *ev = events("stopped");
    const char *why = cJSON_GetArraySize(ev) == 1 ? str(cJSON_GetArrayItem(ev, 0), "reason") : NULL;
    const char *head = "privacy budget spent: round 1 would bring epsilon from 0 to ";
    CHECK_MSG(why && !strncmp(why, head, strlen(head)) &&
                  strstr(why, "over --dp-epsilon 0.5 at delta 1e-05; run stopped"),
              "stopped: %s", why ? why : "(no one event)");
    cJSON_Delete(ev);
    pull(a, HFL_MSG_BYE);
    dp_free(&c);
    teardown();
}

/* --client-clip (secure aggregation's clear twin, secagg.h): two clients of
 * 100 samples, clip 0.75, --fixed-bits 24. The task announces the ring:
 * mode clear, clip 0.75, S = 24 - ceil(log2 0.75) = 24 and b = ceil(log2(2M
 * + 1)) with M = 0.75 x 2^24 (1 + 1e-9) + 2 + 1: 2M + 1 = 25165831.03 lies
 * between 2^24 and 2^25, so 25 bits. Each client sends its update weighted
 * by its share (1/2) in units of 2^-24, packed 25 bits an element, and 1 in
 * the count element (norms 2^-11 and 3 x 2^-11 times sqrt(199210), 0.22
 * and 0.65, within the clip) in units of 2^-8: 4096 and 12288 an element
 * sum to 2^14, so the model moves to 2^14 x 2^-24 = 2^-10 exactly; none
 * clipped. */
static void send_ring(int id, int64_t value, int bits) {
    size_t n = c.spec.n_trainable + 1, len;
    uint64_t *v = hfl_malloc(sizeof *v * n);
    for (size_t i = 0; i + 1 < n; i++) v[i] = (uint64_t)value;
    v[n - 1] = 1u << SECAGG_COUNT_SHIFT;
    uint8_t *buf = hfl_calloc(hfl_ring_bytes(n, bits), 1);
    hfl_ring_pack(v, n, bits, buf);
    cJSON *m = cJSON_Parse("{\"round\": 1, \"samples\": 100, \"loss\": 0.5, \"codec\": \"fp32\"}");
    uint8_t *rep = rounds_update(&c, id, m, buf, hfl_ring_bytes(n, bits), 1000, &len);
    cJSON_Delete(m);
    free(v), free(buf);
    hfl_msg msg;
    char err[HFL_ERR_LEN] = "";
    if (rep && hfl_msg_decode(rep, len, (size_t)1 << 30, &msg, err) == 0) {
        CHECK_MSG(msg.type == HFL_MSG_ACK, "client %d's input: %s", id, str(msg.meta, "error"));
        hfl_msg_free(&msg);
    }
    free(rep);
}

static void test_secagg_clear(void) {
    setup_config(2, 2, 60, 1, "fedavg", 0.75, 0);
    c.cfg.secure_agg = SECAGG_CLEAR, c.cfg.fixed_bits = 24;
    setup_start();
    int a = hello("a", 100), b = hello("b", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 2);
    size_t len;
    uint8_t *rep = rounds_pull(&c, a, -1, &len);
    cJSON *t = reply_meta(rep, len, HFL_MSG_TASK);
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(t, "secagg");
    CHECK_MSG(sa && !strcmp(str(sa, "mode"), "clear") && num(sa, "clip") == 0.75 && num(sa, "shift") == 24 &&
                  num(sa, "bits") == 25,
              "the task's secagg: %s", sa ? "mode, clip, shift or bits differ" : "absent");
    cJSON_Delete(t);
    pull(b, HFL_MSG_TASK);
    send_ring(a, 4096, 25);
    send_ring(b, 12288, 25);
    rounds_tick(&c);
    REQUIRE_MSG(!c.r.open && c.version == 1, "open %d, version %d", c.r.open, c.version);
    CHECK(all_weights(0x1p-10f));
    const cJSON *r = last_round();
    CHECK(!strcmp(str(r, "status"), "ok") && num(r, "clients") == 2 && num(r, "clipped") == 0 &&
          !strcmp(str(cJSON_GetObjectItemCaseSensitive(r, "secure_agg"), "mode"), "clear"));
    secagg_free(&c);
    teardown();
}

/* The main loop sleeps on c->tick and closes a round at once when a handler
 * signals it (rounds.c's header). --async C = 3, K = 2, four clients: round
 * 1 closes on two of three, the third is late; round 2 draws two, the late
 * update folds in (1 of K: no signal needed), and the first fresh update
 * makes 2 of K: a thread waiting on c->tick under c->lock is woken (within
 * 5 s: a signal is instant, so only a missing one waits the time out). */
typedef struct {
    int ready, rc;
} tick_waiter;

static void *tick_wait(void *arg) {
    tick_waiter *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&c.lock);
    w->ready = 1;
    w->rc = pthread_cond_timedwait(&c.tick, &c.lock, &until);
    pthread_mutex_unlock(&c.lock);
    return NULL;
}

/* Runs accept(id, ...) while a thread waits on c->tick; the wait's result. */
static int accept_woke(int id, float v) {
    tick_waiter w = {0, -1};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, tick_wait, &w) == 0);
    for (;;) { /* once the lock is ours with ready set, the waiter is inside the wait */
        pthread_mutex_lock(&c.lock);
        if (w.ready) break;
        pthread_mutex_unlock(&c.lock);
        hfl_sleep_ms(1);
    }
    accept(id, 100, 0.5, v);
    pthread_mutex_unlock(&c.lock);
    pthread_join(th, NULL);
    return w.rc;
}

static void test_tick_signal(void) {
    setup(2, 1, 60, 1);
    c.cfg.async_concurrency = 3, c.cfg.rounds = 100;
    pthread_cond_init(&c.tick, NULL);
    hello("a", 100), hello("b", 100), hello("d", 100), hello("e", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 3 && c.r.n_target == 2);
    int x = c.r.selected[0], y = c.r.selected[1], z = c.r.selected[2];
    pull(x, HFL_MSG_TASK), pull(y, HFL_MSG_TASK), pull(z, HFL_MSG_TASK);
    accept(x, 100, 0.5, 1.0f);
    CHECK_MSG(accept_woke(y, 1.0f) == 0, "round 1's second of K woke nobody");
    rounds_tick(&c);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2 && c.r.n_selected == 2 && c.clients[z].late_round == 1);
    cJSON *ack = send(z, 1, 100, 0.5, 1.0f, "fp32", NULL, 1000, HFL_MSG_ACK);
    CHECK(num(ack, "folded_into") == 2 && c.r.n_stale == 1);
    cJSON_Delete(ack);
    int f = c.r.selected[0];
    pull(f, HFL_MSG_TASK);
    CHECK_MSG(accept_woke(f, 1.0f) == 0, "a folded and a fresh update (2 of K) woke nobody");
    pthread_cond_destroy(&c.tick);
    teardown();
}

/* --virtual-time: two drawn, a on time, then b's update simulated past the
 * deadline: every drawn client is accounted for (1 received + 1 missed of
 * 2), so the waiting tick thread is woken by the miss itself. */
static int missed_woke(int id) {
    tick_waiter w = {0, -1};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, tick_wait, &w) == 0);
    for (;;) {
        pthread_mutex_lock(&c.lock);
        if (w.ready) break;
        pthread_mutex_unlock(&c.lock);
        hfl_sleep_ms(1);
    }
    cJSON *ack = send(id, 1, 100, 0.5, 9.0f, "fp32", "{\"sim_s\": 60.5}", 1000, HFL_MSG_ACK);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ack, "missed_deadline")));
    cJSON_Delete(ack);
    pthread_mutex_unlock(&c.lock);
    pthread_join(th, NULL);
    return w.rc;
}

static void test_missed_signal(void) {
    setup(2, 2, 60, 1);
    c.cfg.virtual_time = 1;
    pthread_cond_init(&c.tick, NULL);
    int a = hello("a", 100), b = hello("b", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 2);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    cJSON_Delete(send(a, 1, 100, 0.5, 1.0f, "fp32", "{\"sim_s\": 12.5}", 1000, HFL_MSG_ACK));
    CHECK_MSG(missed_woke(b) == 0, "the last drawn client's missed deadline (2 of 2 accounted for) woke nobody");
    pthread_cond_destroy(&c.tick);
    teardown();
}

/* --async C = 3, K = 2: round 1 closes on two of three and the third (z)
 * is late; z then leaves with a one-character reason ("x": a reason is any
 * string). rounds.c gives up on a late task held by a client that left, so
 * when round 3 is drawn z holds no task in flight (its staleness, 2, is far
 * under the bound of 8, so only the leave can clear it). */
static void test_async_left(void) {
    setup(2, 1, 60, 1);
    c.cfg.async_concurrency = 3, c.cfg.rounds = 100;
    hello("a", 100), hello("b", 100), hello("d", 100), hello("e", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 3 && c.r.n_target == 2);
    int x = c.r.selected[0], y = c.r.selected[1], z = c.r.selected[2];
    pull(x, HFL_MSG_TASK), pull(y, HFL_MSG_TASK), pull(z, HFL_MSG_TASK);
    accept(x, 100, 0.5, 1.0f), accept(y, 100, 0.5, 1.0f);
    rounds_tick(&c);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.round == 2 && c.clients[z].late_round == 1);
    char err[HFL_ERR_LEN] = "";
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "error", "x");
    CHECK_MSG(registry_leave(&c, z, m, err) == 0 && !strcmp(c.clients[z].left, "x"), "leave: %s", err);
    cJSON_Delete(m);
    for (int i = 0; i < c.r.n_selected; i++) {
        int s = c.r.selected[i];
        pull(s, HFL_MSG_TASK);
        accept(s, 100, 0.5, 1.0f);
    }
    rounds_tick(&c);
    rounds_tick(&c);
    REQUIRE_MSG(c.r.open && c.r.round == 3, "open %d, round %d", c.r.open, (int)c.r.round);
    CHECK_MSG(c.clients[z].late_round == 0 && c.n_inflight == 0,
              "a client that left still holds round %d's task (%d in flight)", c.clients[z].late_round, c.n_inflight);
    teardown();
}

/* Secure aggregation (clear), K = 3, quorum 2, a 0.2 s deadline: only one
 * input comes. At the deadline the sum needs the quorum, so the round fails
 * with secure aggregation's reason and the model stays zero. */
static void test_secagg_deadline(void) {
    setup_config(3, 2, 0.2, 1, "fedavg", 0.75, 0);
    c.cfg.secure_agg = SECAGG_CLEAR, c.cfg.fixed_bits = 24;
    setup_start();
    int a = hello("a", 100);
    hello("b", 100), hello("d", 100);
    rounds_tick(&c);
    REQUIRE(c.r.open && c.r.n_selected == 3);
    pull(a, HFL_MSG_TASK);
    send_ring(a, 4096, 25);
    hfl_sleep_ms(300);
    rounds_tick(&c);
    const cJSON *r = last_round();
    const char *why = r ? str(r, "reason") : NULL;
    CHECK_MSG(!c.r.open && c.version == 0 && all_weights(0.0f) && why &&
                  !strcmp(why, "secure aggregation: only 1 inputs arrived (threshold 1, quorum 2), global model kept"),
              "open %d, version %d, reason '%s'", c.r.open, c.version, why ? why : "(none)");
    secagg_free(&c);
    teardown();
}

/* ---------------------------------------------------------------- 7 */

/* What the engine allocates for a request it frees: 200 of each leave
 * nothing allocated (mallinfo2). */
static void test_no_leak(void) {
    setup(2, 2, 60, 1);
    int a = hello("a", 100);
    hello("b", 100);
    hello("idle", 100);
    rounds_tick(&c);
    pull(a, HFL_MSG_TASK);
    int idle = c.r.slot[2].selected ? (c.r.slot[0].selected ? 1 : 0) : 2; /* a client not drawn */
    char err[HFL_ERR_LEN];
    cJSON *hm = cJSON_CreateObject();
    cJSON_AddNumberToObject(hm, "samples", 100);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(hm, "device"), "name", "cpu");
    cJSON_AddObjectToObject(hm, "plan");
    for (int pass = 0; pass < 2; pass++) {
        size_t before = mallinfo2().uordblks;
        for (int t = 0; t < 200; t++) {
            size_t len;
            free(coord_error_reply("no", &len));
            free(rounds_pull(&c, idle, -1, &len)); /* wait */
            registry_hello(&c, "idle", hm, err);   /* the old session's hello freed */
            cJSON_Delete(send(a, 5, 100, 0.5, 1.0f, "fp32", NULL, 10, HFL_MSG_ERROR)); /* refused */
            cJSON_Delete(registry_report(&c));
        }
        size_t after = mallinfo2().uordblks;
        if (pass == 1) /* a one-off lazy allocation is not a leak: 200 leaked replies would be kilobytes */
            CHECK_MSG(after < before + 1024, "%zu bytes left allocated by 200 requests of each kind", after - before);
    }
    cJSON_Delete(hm);
    teardown();
}

static const check_case cases[] = {
    {"registry_hello", test_registry_hello},
    {"registry_codecs", test_registry_codecs},
    {"registry_check", test_registry_check},
    {"registry_leave_report", test_registry_leave_report},
    {"registry_overhead", test_registry_overhead},
    {"replan", test_replan},
    {"registry_evict", test_registry_evict},
    {"registry_edges", test_registry_edges},
    {"parse_clip", test_parse_clip},
    {"draw", test_draw},
    {"updates", test_updates},
    {"clip", test_clip},
    {"divisor", test_divisor},
    {"closing", test_closing},
    {"delta_tasks", test_delta_tasks},
    {"held_tasks", test_held_tasks},
    {"rounds_edges", test_rounds_edges},
    {"client_records", test_client_records},
    {"eval_thread", test_eval_thread},
    {"over_select", test_over_select},
    {"late_fold", test_late_fold},
    {"late_fold_caps", test_late_fold_caps},
    {"capacity_work", test_capacity_work},
    {"virtual_time", test_virtual_time},
    {"robust", test_robust},
    {"registry_room", test_registry_room},
    {"resend_capped", test_resend_capped},
    {"update_records", test_update_records},
    {"dp_central", test_dp_central},
    {"dp_budget_stop", test_dp_budget_stop},
    {"secagg_clear", test_secagg_clear},
    {"tick_signal", test_tick_signal},
    {"missed_signal", test_missed_signal},
    {"async_left", test_async_left},
    {"secagg_deadline", test_secagg_deadline},
    {"no_leak", test_no_leak},
};

int main(int argc, char **argv) {
    return check_run("test_rounds_mut", cases, CHECK_CASES(cases), argc, argv);
}
