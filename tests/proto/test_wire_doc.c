/* test_wire_doc.c: the protocol's message tables (proto/messages.c) against
 * docs/protocol.md's "Fields" tables, and the tables' encoder and decoder
 * (proto/wire.c) against hand-written JSON.
 *
 * The doc check reads each "### name" table under "## Fields" and fails on
 * a message the code has and the doc lacks (or the other way round), on a
 * field either side lacks, and on a field whose type or presence differs.
 * The round trip fills every table's struct at its fields' limits (the
 * longest strings, the range's ends), encodes, decodes into a fresh struct
 * and compares member by member. argv[1]: docs/protocol.md (so case names
 * come from HFL_TEST_CASE). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/messages.h"
#include "tests/check.h"

static const char *wire_kind(hfl_wire_kind k) {
    switch (k) {
    case HFL_WIRE_INT: return "int";
    case HFL_WIRE_NUM: return "number";
    case HFL_WIRE_STR: return "string";
    case HFL_WIRE_BOOL: return "bool";
    case HFL_WIRE_OBJ: return "object";
    case HFL_WIRE_LIST: return "array";
    }
    return "?";
}

static const char *field_kind(hfl_field_kind k) {
    switch (k) {
    case HFL_FIELD_INT: return "int";
    case HFL_FIELD_NUM: return "number";
    case HFL_FIELD_STR: return "string";
    case HFL_FIELD_BOOL: return "bool";
    case HFL_FIELD_NUM_OR_NULL: return "number or null";
    }
    return "?";
}

/* One row of the doc: message, field, type, presence. */
typedef struct {
    char msg[64], field[64], type[32], presence[16];
    int seen; /* matched a field of the code */
} doc_row;

static doc_row rows[400];
static int n_rows;

/* "| `name` | type | presence | meaning |" under "### msg" in "## Fields". */
static void read_doc(const char *path) {
    FILE *f = fopen(path, "r");
    REQUIRE_MSG(f != NULL, "cannot open %s", path);
    char line[2048], msg[64] = "";
    int in_fields = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "## ", 3)) in_fields = !strncmp(line, "## Fields", 9);
        if (!in_fields) continue;
        if (!strncmp(line, "### ", 4)) {
            snprintf(msg, sizeof msg, "%.*s", (int)strcspn(line + 4, "\n"), line + 4);
            continue;
        }
        doc_row r = {0};
        if (sscanf(line, "| `%63[^`]` | %31[^|]| %15[^| ] |", r.field, r.type, r.presence) != 3) continue;
        for (size_t n = strlen(r.type); n > 0 && r.type[n - 1] == ' '; n--) r.type[n - 1] = 0;
        snprintf(r.msg, sizeof r.msg, "%s", msg);
        REQUIRE(n_rows < (int)(sizeof rows / sizeof rows[0]));
        rows[n_rows++] = r;
    }
    fclose(f);
    REQUIRE_MSG(n_rows > 0, "%s has no field tables under '## Fields'", path);
}

static doc_row *doc_find(const char *msg, const char *field) {
    for (int i = 0; i < n_rows; i++)
        if (!strcmp(rows[i].msg, msg) && !strcmp(rows[i].field, field)) return &rows[i];
    return NULL;
}

static void check_field(const char *msg, const char *field, const char *type, int optional) {
    doc_row *r = doc_find(msg, field);
    if (!CHECK_MSG(r != NULL, "%s: field '%s' is in proto/messages.c but not in docs/protocol.md", msg, field))
        return;
    r->seen = 1;
    CHECK_MSG(!strcmp(r->type, type), "%s.%s: the doc says %s, the code %s", msg, field, r->type, type);
    CHECK_MSG(!strcmp(r->presence, optional ? "optional" : "required"), "%s.%s: the doc says %s, the code %s", msg,
              field, r->presence, optional ? "optional" : "required");
}

static void test_doc(const char *path) {
    read_doc(path);
    for (int i = 0; i < hfl_wire_n_all; i++) {
        const hfl_wire_msg *d = hfl_wire_all[i];
        for (int j = 0; j < d->n; j++)
            check_field(d->name, d->fields[j].name, wire_kind(d->fields[j].kind), d->fields[j].optional);
    }
    for (int j = 0; j < hfl_wire_n_device_fields; j++)
        check_field("hello.device", hfl_wire_device_fields[j].name, field_kind(hfl_wire_device_fields[j].kind), 1);
    for (int j = 0; j < hfl_wire_n_plan_fields; j++)
        check_field("hello.plan", hfl_wire_plan_fields[j].name, field_kind(hfl_wire_plan_fields[j].kind), 1);
    for (int i = 0; i < n_rows; i++)
        CHECK_MSG(rows[i].seen, "%s: field '%s' is in docs/protocol.md but not in proto/messages.c", rows[i].msg,
                  rows[i].field);
    printf("docs/protocol.md: %d fields compared\n", n_rows);
}

/* Every table: names unique, strings fit their buffers, members inside the
 * struct, optional fields with a flag. */
static void test_tables(void) {
    for (int i = 0; i < hfl_wire_n_all; i++) {
        const hfl_wire_msg *d = hfl_wire_all[i];
        for (int j = 0; j < d->n; j++) {
            const hfl_wire_field *f = &d->fields[j];
            for (int k = 0; k < j; k++) CHECK_MSG(strcmp(d->fields[k].name, f->name) != 0, "%s: '%s' twice", d->name, f->name);
            if (f->kind == HFL_WIRE_STR)
                CHECK_MSG(f->hi >= 1 && f->hi < (double)f->size, "%s.%s: %g bytes in a %zu-byte buffer", d->name,
                          f->name, f->hi, f->size);
            CHECK_MSG(!f->optional || f->has != 0, "%s.%s: optional without a flag", d->name, f->name);
            CHECK_MSG(f->kind != HFL_WIRE_LIST || f->max_items >= 1, "%s.%s: a list without a cap", d->name, f->name);
        }
    }
}

/* Fills the struct at s for table d: each field at one end of its range
 * (which end by `end`), strings at their longest; every optional present. */
static void fill(const hfl_wire_msg *d, void *s, int end, cJSON *obj) {
    for (int j = 0; j < d->n; j++) {
        const hfl_wire_field *f = &d->fields[j];
        char *v = (char *)s + f->offset;
        if (f->optional) *(int *)((char *)s + f->has) = 1;
        switch (f->kind) {
        case HFL_WIRE_INT: *(int64_t *)v = end ? (f->hi > 9e15 ? 9007199254740992 : (int64_t)f->hi) : (int64_t)f->lo; break;
        case HFL_WIRE_NUM: *(double *)v = end ? f->hi : f->lo; break;
        case HFL_WIRE_STR: memset(v, 'a' + j % 26, (size_t)f->hi), v[(size_t)f->hi] = 0; break;
        case HFL_WIRE_BOOL: *(int *)v = end; break;
        case HFL_WIRE_OBJ:
            if (f->sub) fill(f->sub, v, end, obj);
            else *(const cJSON **)v = obj;
            break;
        case HFL_WIRE_LIST: { /* as many items as the cap allows, each filled the same way */
            hfl_wire_list *l = (hfl_wire_list *)v;
            l->n = f->max_items;
            l->v = calloc((size_t)l->n, f->size);
            for (int i = 0; i < l->n; i++) {
                char *x = (char *)l->v + (size_t)i * f->size;
                if (f->sub) fill(f->sub, x, end, obj);
                else *(int64_t *)x = end ? (int64_t)f->hi : (int64_t)f->lo;
            }
            break;
        }
        }
    }
}

static void compare(const hfl_wire_msg *d, const void *a, const void *b) {
    for (int j = 0; j < d->n; j++) {
        const hfl_wire_field *f = &d->fields[j];
        const char *x = (const char *)a + f->offset, *y = (const char *)b + f->offset;
        if (f->optional)
            CHECK_MSG(*(const int *)((const char *)b + f->has) == 1, "%s.%s: present, decoded as absent", d->name, f->name);
        if (f->kind == HFL_WIRE_LIST) {
            const hfl_wire_list *la = (const hfl_wire_list *)x, *lb = (const hfl_wire_list *)y;
            if (!CHECK_MSG(la->n == lb->n, "%s.%s: %d items, decoded %d", d->name, f->name, la->n, lb->n)) continue;
            for (int i = 0; i < la->n; i++) {
                const char *xa = (const char *)la->v + (size_t)i * f->size, *xb = (const char *)lb->v + (size_t)i * f->size;
                if (f->sub) compare(f->sub, xa, xb);
                else CHECK_MSG(!memcmp(xa, xb, f->size), "%s.%s[%d]: decoded differs", d->name, f->name, i);
            }
        } else if (f->kind == HFL_WIRE_OBJ && f->sub) compare(f->sub, x, y);
        else if (f->kind == HFL_WIRE_OBJ) CHECK_MSG(*(const cJSON *const *)y != NULL, "%s.%s: no object", d->name, f->name);
        else CHECK_MSG(!memcmp(x, y, f->size), "%s.%s: decoded differs from encoded", d->name, f->name);
    }
}

static void test_round_trip(void) {
    cJSON *obj = cJSON_CreateObject(); /* a valid device, plan and model_spec alike */
    for (int i = 0; i < hfl_wire_n_all; i++) {
        const hfl_wire_msg *d = hfl_wire_all[i];
        for (int end = 0; end < 2; end++) {
            size_t size = 0;
            for (int j = 0; j < d->n; j++)
                if (d->fields[j].offset + d->fields[j].size > size) size = d->fields[j].offset + d->fields[j].size;
            void *a = calloc(1, size + 64), *b = calloc(1, size + 64);
            fill(d, a, end, obj);
            cJSON *meta = hfl_wire_encode(d, a);
            char err[HFL_ERR_LEN] = "";
            CHECK_MSG(meta && hfl_wire_decode(d, meta, b, err) == 0, "%s: %s", d->name, err);
            compare(d, a, b);
            hfl_wire_free(d, a), hfl_wire_free(d, b);
            cJSON_Delete(meta);
            free(a), free(b);
        }
    }
    cJSON_Delete(obj);
}

/* Decodes text with table d into s; returns the error ("" when it took it). */
static const char *decode(const hfl_wire_msg *d, const char *text, void *s) {
    static char err[HFL_ERR_LEN];
    err[0] = 0;
    cJSON *meta = cJSON_Parse(text);
    REQUIRE_MSG(meta != NULL, "bad JSON in the test: %s", text);
    if (hfl_wire_decode(d, meta, s, err) == 0) err[0] = 0;
    cJSON_Delete(meta);
    return err;
}

static void test_by_hand(void) {
    hfl_wait_msg w = {0};
    CHECK(!strcmp(decode(&hfl_wire_wait, "{\"ms\":250,\"later\":1}", &w), "") && w.ms == 250);
    CHECK(!strcmp(decode(&hfl_wire_wait, "{}", &w), "missing field 'ms'"));
    CHECK(!strcmp(decode(&hfl_wire_wait, "{\"ms\":60001}", &w), "field 'ms' = 60001 is outside [0, 60000]"));
    CHECK(!strcmp(decode(&hfl_wire_wait, "{\"ms\":1.5}", &w), "field 'ms' is not an integer"));

    hfl_ack_msg a = {.round = 3, .missed_deadline = 1, .has_missed_deadline = 1};
    cJSON *o = hfl_wire_encode(&hfl_wire_ack, &a);
    char *t = cJSON_PrintUnformatted(o);
    CHECK_MSG(!strcmp(t, "{\"round\":3,\"missed_deadline\":true}"), "%s", t);
    cJSON_free(t), cJSON_Delete(o);
    a.has_missed_deadline = 0, a.folded_into = 5, a.has_folded_into = 1;
    o = hfl_wire_encode(&hfl_wire_ack, &a);
    t = cJSON_PrintUnformatted(o);
    CHECK_MSG(!strcmp(t, "{\"round\":3,\"folded_into\":5}"), "%s", t);
    cJSON_free(t), cJSON_Delete(o);

    hfl_pull_msg p = {0};
    hfl_session_msg se = {0};
    const char *pull = "{\"client_id\":2,\"token\":\"ab\",\"resend\":true}";
    CHECK(!strcmp(decode(&hfl_wire_pull, pull, &p), "") && p.resend && p.has_resend && !p.has_have_version);
    CHECK(!strcmp(decode(&hfl_wire_session, pull, &se), "") && se.client_id == 2 && !strcmp(se.token, "ab"));
    CHECK(!strcmp(decode(&hfl_wire_pull, "{\"resend\":\"yes\"}", &p), "field 'resend' is not true or false"));
    CHECK(strstr(decode(&hfl_wire_session, "{\"client_id\":16384,\"token\":\"ab\"}", &se), "outside [0, 16383]"));
    CHECK(!strcmp(decode(&hfl_wire_session, "{\"client_id\":1}", &se), "missing field 'token'"));

    /* a task with secure aggregation, as rounds.c and secagg.c write one */
    hfl_task_msg k = {0};
    const char *task = "{\"round\":4,\"version\":3,\"model\":\"mlp\",\"params\":10,\"trainable\":10,\"local_epochs\":1,"
                       "\"batch\":8,\"lr\":0.5,\"momentum\":0,\"weight_decay\":0,\"codec\":\"int8\",\"block\":256,"
                       "\"seed\":7,\"deadline_ms\":1000,\"secagg\":{\"mode\":\"masked\",\"clip\":2,\"shift\":-20,"
                       "\"bits\":40},\"weights\":\"delta\",\"base_version\":2,\"downlink\":\"fp32\"}";
    CHECK(!strcmp(decode(&hfl_wire_task, task, &k), "") && k.round == 4 && k.has_secagg &&
          !strcmp(k.secagg.mode, "masked") && k.secagg.shift == -20 && k.secagg.bits == 40 && k.base_version == 2 &&
          !strcmp(k.weights, "delta") && !k.has_local_steps && !k.has_optimizer);
    char *bad = strdup(task);
    memcpy(strstr(bad, "\"bits\":40"), "\"bits\":99", 9);
    CHECK_MSG(strstr(decode(&hfl_wire_task, bad, &k), "field 'bits' = 99"), "%s", decode(&hfl_wire_task, bad, &k));
    free(bad);

    /* a hello is strict: what the coordinator keeps holds nothing else */
    hfl_hello_msg *h = calloc(1, sizeof *h);
    CHECK(!strcmp(decode(&hfl_wire_hello, "{\"samples\":5,\"device\":{\"kind\":\"cpu\",\"cores\":2}}", h), "") &&
          h->samples == 5 && h->has_device && !h->has_plan);
    CHECK(!strcmp(decode(&hfl_wire_hello, "{\"samples\":5,\"extra\":1}", h),
                  "field 'extra' is not one this coordinator knows"));
    CHECK(!strcmp(decode(&hfl_wire_hello, "{\"samples\":5,\"samples\":6}", h), "field 'samples' appears twice"));
    CHECK(!strcmp(decode(&hfl_wire_hello, "{\"samples\":5,\"device\":{\"color\":\"red\"}}", h),
                  "field 'device.color' is not one this coordinator knows"));
    CHECK(!strcmp(decode(&hfl_wire_hello, "{\"samples\":5,\"plan\":[]}", h), "field 'plan' must be an object"));
    free(h);

    /* secure aggregation's lists: capped before they are allocated, items checked */
    hfl_secagg_unmask_list_msg u = {0};
    CHECK(!strcmp(decode(&hfl_wire_secagg_unmask_list, "{\"round\":2,\"alive\":[3,1],\"dropped\":[]}", &u), "") &&
          u.alive.n == 2 && ((int64_t *)u.alive.v)[0] == 3 && ((int64_t *)u.alive.v)[1] == 1 && u.dropped.n == 0);
    hfl_wire_free(&hfl_wire_secagg_unmask_list, &u);
    char many[1024] = "{\"round\":2,\"dropped\":[],\"alive\":[0";
    for (int i = 1; i < 65; i++) snprintf(many + strlen(many), sizeof many - strlen(many), ",%d", i);
    strcat(many, "]}");
    memset(&u, 0, sizeof u);
    CHECK_MSG(!strcmp(decode(&hfl_wire_secagg_unmask_list, many, &u), "field 'alive' holds 65 items, more than 64"),
              "%s", decode(&hfl_wire_secagg_unmask_list, many, &u));
    CHECK(u.alive.v == NULL);
    CHECK(!strcmp(decode(&hfl_wire_secagg_unmask_list, "{\"round\":2,\"alive\":[16384],\"dropped\":[]}", &u),
                  "field 'alive' holds an item that is not an integer in [0, 16383]"));
    hfl_wire_free(&hfl_wire_secagg_unmask_list, &u);
    hfl_secagg_setup_msg *st = calloc(1, sizeof *st);
    const char *setup = "{\"round\":1,\"weight\":0.5,\"bits\":40,\"shift\":-20,\"clip\":1,\"sigma\":0,"
                        "\"sigma_count\":0,\"threshold\":2,\"holders\":[{\"id\":4,\"x\":1,\"name\":\"c4\","
                        "\"c_pk\":\"AAAA\",\"s_pk\":\"BBBB\"}]}";
    CHECK(!strcmp(decode(&hfl_wire_secagg_setup, setup, st), "") && st->holders.n == 1);
    const hfl_secagg_holder *hd = st->holders.v;
    CHECK(hd && hd->id == 4 && hd->x == 1 && !strcmp(hd->name, "c4") && !hd->has_cert && !hd->has_sig);
    hfl_wire_free(&hfl_wire_secagg_setup, st);
    memset(st, 0, sizeof *st);
    char *nox = strdup(setup);
    memcpy(strstr(nox, "\"x\":1"), "\"x\":0", 5);
    CHECK_MSG(strstr(decode(&hfl_wire_secagg_setup, nox, st), "field 'x' = 0 is outside [1, 64]"), "%s",
              decode(&hfl_wire_secagg_setup, nox, st));
    hfl_wire_free(&hfl_wire_secagg_setup, st);
    free(nox), free(st);
}

static const char *doc_path;
static void case_doc(void) { test_doc(doc_path); }

static const check_case cases[] = {
    {"tables", test_tables},
    {"round_trip", test_round_trip},
    {"by_hand", test_by_hand},
    {"doc", case_doc},
};

int main(int argc, char **argv) {
    REQUIRE_MSG(argc == 2, "usage: test_wire_doc docs/protocol.md");
    doc_path = argv[1];
    return check_run("test_wire_doc", cases, CHECK_CASES(cases), 0, argv);
}
