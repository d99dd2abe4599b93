/* test_meta_bounds.c: bounded client JSON (docs/architecture.md, Validate at the boundary): metadata nested at
 * most HFL_MSG_MAX_DEPTH deep (proto/msg.c), and objects held to a schema of
 * known fields (proto/schema.c).
 *   - hfl_json_depth on hand-counted texts: brackets in strings and after
 *     escaped quotes do not count, and counting stops at `stop`;
 *   - a message whose meta nests 16 deep decodes, 17 and 600 are refused in
 *     one line naming the limit;
 *   - hfl_meta_check_fields takes every kind at its bounds and refuses, each
 *     in one line naming the field: an unknown field, a name given twice, the
 *     wrong type, a number out of range, a fraction for an integer, a string
 *     too long or holding a control character, a non-object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/messages.h"
#include "proto/msg.h"
#include "tests/check.h"
#include "util/util.h"

/* {"a":{"a":...{}...}} nested `depth` objects deep, as text (malloc'd). */
static char *nested(int depth) {
    size_t n = (size_t)depth * 6 + 2;
    char *s = hfl_malloc(n + 1), *p = s;
    for (int i = 0; i < depth - 1; i++) p += sprintf(p, "{\"a\":");
    p += sprintf(p, "{}");
    for (int i = 0; i < depth - 1; i++) *p++ = '}';
    *p = 0;
    return s;
}

static void test_depth(void) {
    CHECK(hfl_json_depth("1", 1, 100) == 0);
    CHECK(hfl_json_depth("{}", 2, 100) == 1);
    CHECK(hfl_json_depth("[]", 2, 100) == 1);
    const char *t = "{\"a\":[{\"b\":[1,2]},{}]}";
    CHECK(hfl_json_depth(t, strlen(t), 100) == 4);
    t = "{\"a\":\"[[[{{{\",\"b\":{}}";
    CHECK(hfl_json_depth(t, strlen(t), 100) == 2);
    t = "{\"a\":\"\\\"[[[\",\"b\":1}"; /* an escaped quote does not end the string */
    CHECK(hfl_json_depth(t, strlen(t), 100) == 1);
    t = "{\"a\":\"\\\\\",\"b\":[{}]}"; /* an escaped backslash does: [{}] counts */
    CHECK(hfl_json_depth(t, strlen(t), 100) == 3);
    char *deep = nested(600);
    CHECK(hfl_json_depth(deep, strlen(deep), 1000) == 600);
    CHECK(hfl_json_depth(deep, strlen(deep), 17) == 17);
    CHECK(hfl_json_depth(deep, 5, 1000) == 1); /* only the bytes given */
    free(deep);
}

/* Encodes a HELLO whose meta is {"device": nested(depth - 1)} and decodes it. */
static int decode_nested(int depth, char *err) {
    char *inner = nested(depth - 1);
    size_t n = strlen(inner) + 16;
    char *text = hfl_malloc(n);
    snprintf(text, n, "{\"device\":%s}", inner);
    free(inner);
    size_t meta_len = strlen(text);
    uint8_t *buf = hfl_malloc(HFL_MSG_HEADER_BYTES + meta_len);
    size_t len;
    uint8_t *hdr = hfl_msg_encode(HFL_MSG_HELLO, NULL, NULL, 0, &len); /* a header to patch */
    memcpy(buf, hdr, HFL_MSG_HEADER_BYTES);
    free(hdr);
    memcpy(buf + HFL_MSG_HEADER_BYTES, text, meta_len);
    for (int i = 0; i < 4; i++) buf[8 + i] = (uint8_t)(meta_len >> (8 * i));
    uint32_t crc = hfl_crc32c(0, buf + HFL_MSG_HEADER_BYTES, meta_len);
    for (int i = 0; i < 4; i++) buf[16 + i] = (uint8_t)(crc >> (8 * i));
    hfl_msg m;
    int rc = hfl_msg_decode(buf, HFL_MSG_HEADER_BYTES + meta_len, 0, &m, err);
    if (rc == 0) hfl_msg_free(&m);
    free(buf);
    free(text);
    return rc;
}

static void test_decode(void) {
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(decode_nested(HFL_MSG_MAX_DEPTH, err) == 0, "16 deep: %s", err);
    CHECK(decode_nested(HFL_MSG_MAX_DEPTH + 1, err) == -1 && strstr(err, "deeper than 16") && !strchr(err, '\n'));
    CHECK(decode_nested(600, err) == -1 && strstr(err, "deeper than 16"));
    printf("600 deep: %s\n", err);
}

static const hfl_field schema[] = {
    {"s", HFL_FIELD_STR, 0, 4},
    {"n", HFL_FIELD_NUM, -1.5, 2.5},
    {"i", HFL_FIELD_INT, 0, 10},
    {"b", HFL_FIELD_BOOL, 0, 0},
    {"z", HFL_FIELD_NUM_OR_NULL, 0, 8},
};

/* Checks text against the schema as object "dev"; returns 0 or -1 with err. */
static int check(const char *text, const char *what, char *err) {
    cJSON *o = cJSON_Parse(text);
    if (!o) return hfl_errf(err, "test JSON does not parse: %s", text);
    int rc = hfl_meta_check_fields(o, what, schema, 5, err);
    cJSON_Delete(o);
    return rc;
}

static void refused(const char *text, const char *want) {
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(check(text, "dev", err) == -1 && strstr(err, want) && !strchr(err, '\n'), "%s: '%s', expected '%s'",
              text, err, want);
}

static void test_schema(void) {
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(check("{}", "dev", err) == 0, "%s", err);
    CHECK_MSG(check("{\"s\":\"abcd\",\"n\":-1.5,\"i\":10,\"b\":false}", "dev", err) == 0, "%s", err);
    CHECK_MSG(check("{\"s\":\"\",\"n\":2.5,\"i\":0,\"b\":true}", "dev", err) == 0, "%s", err);
    refused("{\"x\":1}", "'dev.x' is not one");
    refused("{\"s\":\"a\",\"s\":\"b\"}", "'dev.s' appears twice");
    refused("{\"s\":\"abcde\"}", "'dev.s' is 5 bytes long (limit 4)");
    refused("{\"s\":\"a\\nb\"}", "'dev.s' holds a control character");
    refused("{\"s\":1}", "'dev.s' is not a string");
    refused("{\"n\":2.5000001}", "'dev.n' = 2.5 is outside");
    refused("{\"n\":-1.6}", "'dev.n' = -1.6 is outside");
    refused("{\"n\":\"1\"}", "'dev.n' is not a finite number");
    refused("{\"i\":1.5}", "'dev.i' is not an integer");
    refused("{\"i\":11}", "'dev.i' = 11 is outside [0, 10]");
    refused("{\"b\":1}", "'dev.b' is not true or false");
    refused("{\"b\":{\"deep\":[]}}", "'dev.b' is not true or false");
    refused("[1]", "'dev' must be an object");
    /* a figure that may be unknown: null or a number in range, nothing else */
    CHECK_MSG(check("{\"z\":null}", "dev", err) == 0 && check("{\"z\":8}", "dev", err) == 0, "%s", err);
    refused("{\"z\":9}", "'dev.z' = 9 is outside");
    refused("{\"z\":\"7\"}", "'dev.z' is not a finite number");
    refused("{\"n\":null}", "'dev.n' is not a finite number");
    /* the top level names fields alone; a control character in a name is not echoed */
    CHECK(check("{\"q\\u0001\":1}", NULL, err) == -1 && strstr(err, "field 'q?' is not one"));
}

/* A pull's plan (a re-planned client's, client/replan.c) is held to the
 * hello's plan table: its fields in range are taken, anything else refuses
 * the pull in one line; plan_round from 1. */
static int pull_decode(const char *text, hfl_pull_msg *p, char *err) {
    cJSON *o = cJSON_Parse(text);
    if (!o) return hfl_errf(err, "test JSON does not parse: %s", text);
    memset(p, 0, sizeof *p);
    int rc = hfl_wire_decode(&hfl_wire_pull, o, p, err);
    cJSON_Delete(o);
    return rc;
}

static void test_pull_plan(void) {
    char err[HFL_ERR_LEN] = "";
    hfl_pull_msg p;
    CHECK_MSG(pull_decode("{\"have_version\":3,\"plan\":{\"batch\":64,\"accumulation_steps\":4,\"step_batch\":256,"
                          "\"precision\":\"fp32\",\"checkpoint\":\"none\",\"budget_bytes\":3145728},\"plan_round\":2}",
                          &p, err) == 0 && p.has_plan && p.has_plan_round && p.plan_round == 2,
              "a plan in range: %s", err);
    CHECK_MSG(pull_decode("{\"have_version\":3}", &p, err) == 0 && !p.has_plan && !p.has_plan_round, "no plan: %s", err);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"plan\":{\"batch\":0}}", "'plan.batch' = 0 is outside"},
        {"{\"plan\":{\"batch\":65537}}", "'plan.batch' = 65537 is outside"},
        {"{\"plan\":{\"layers\":[1,2]}}", "'plan.layers' is not one"},
        {"{\"plan\":{\"precision\":{\"deep\":1}}}", "'plan.precision' is not a string"},
        {"{\"plan\":[1]}", "'plan' must be an object"},
        {"{\"plan\":{},\"plan_round\":0}", "plan_round"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = pull_decode(bad[i].text, &p, err);
        CHECK_MSG(rc == -1 && strstr(err, bad[i].want) && !strchr(err, '\n'), "%s: rc %d '%s', expected '%s'",
                  bad[i].text, rc, err, bad[i].want);
    }
}

static const check_case cases[] = {
    {"pull_plan", test_pull_plan},
    {"depth", test_depth},
    {"decode", test_decode},
    {"schema", test_schema},
};

int main(int argc, char **argv) {
    return check_run("test_meta_bounds", cases, CHECK_CASES(cases), argc, argv);
}
