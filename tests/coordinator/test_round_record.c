/* test_round_record.c: the round log's one renderer (coordinator/round_record.c)
 * against JSON written by hand: every field in its place and order, the
 * optional ones present exactly when their flag is set, the unknown figures
 * null; and a saved log read back into records that render to the same
 * bytes, with the entries it cannot read refused by name. The keys and their
 * order are those the coordinator wrote before the record was typed (reports
 * and state dirs of earlier runs hold them). */
#include <math.h>
#include <string.h>

#include "coordinator/round_record.h"
#include "tests/check.h"

/* Every optional field present: a failed round of a masked, DP run with a
 * folded update, one participant with all of its figures, one past the
 * deadline, and a language model's test_bpb. */
static const char *full_json =
    "{\"round\":7,\"status\":\"failed\",\"reason\":\"quorum not reached, global model kept\",\"test_acc\":0.5,"
    "\"test_loss\":1.25,\"train_loss\":0.75,\"clients\":2,\"late_folded\":1,\"selected\":3,\"target\":2,\"quorum\":2,"
    "\"eligible\":4,\"samples\":300,\"bytes_up\":1000,\"bytes_down\":2000,\"tasks_delta\":1,\"tasks_held\":0,"
    "\"tasks_resent\":1,\"tasks_short\":0,\"benched\":1,\"wall_s\":0.125,\"version\":6,\"clip_norm\":1.5,\"clipped\":1,"
    "\"refused\":0,\"declined\":0,\"missed_deadline\":1,\"rule_kept\":2,\"update_norm_median\":0.25,"
    "\"update_norm_max\":3,\"secure_agg\":{\"mode\":\"masked\",\"bits\":20,\"word_bits\":32,\"shift\":10,"
    "\"bound\":1048576,\"elements\":100,\"input_bytes\":250,\"members\":3,\"protocol_bytes_up\":900,"
    "\"protocol_bytes_down\":800,\"degree\":2,\"threshold\":2,\"keys\":3,\"shared\":3,\"unmasked\":2,\"inputs\":2,"
    "\"phase_s\":{\"keys\":0.5,\"shares\":0.25,\"input\":1,\"unmask\":0.125},\"unmask_compute_s\":0.0625,"
    "\"dropped\":[5,9]},\"dp\":{\"noise_multiplier\":1.5,\"update_multiplier\":1.75,\"count_sigma\":2,"
    "\"sampling_rate\":0.5,\"epsilon\":3.5,\"delta\":0.001,\"order\":8,\"rounds_charged\":7},"
    "\"model_sha256\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\",\"participants\":["
    "{\"client\":0,\"name\":\"a\",\"status\":\"ok\",\"samples\":100,\"weight\":0.5,\"norm\":2,\"clipped\":true,"
    "\"loss\":0.75,\"train_s\":1.5,\"bytes_up\":500,\"measured_peak_bytes\":4096,\"trained_samples\":100,"
    "\"lr_first\":0.125,\"lr_last\":0.0625,\"sim_s\":2.5,\"bytes_down\":1000,\"downloads\":1,\"resent\":1,"
    "\"local_steps\":4,\"mid_round\":true},"
    "{\"client\":5,\"name\":\"b\",\"status\":\"missed_deadline\",\"sim_s\":40,\"bytes_down\":1000,\"downloads\":1}],"
    "\"folded\":[{\"client\":2,\"name\":\"c\",\"from_round\":6,\"samples\":50,\"weight\":0.25,\"norm\":1,"
    "\"bytes_up\":400,\"trained_samples\":50}],\"test_bpb\":1.75}";

/* No optional field: a round not yet evaluated, without a clip, under clear
 * secure aggregation (no norms), its one client refused. */
static const char *bare_json =
    "{\"round\":1,\"status\":\"ok\",\"test_acc\":null,\"test_loss\":null,\"train_loss\":0,\"clients\":0,"
    "\"selected\":1,\"target\":1,\"quorum\":1,\"eligible\":1,\"samples\":0,\"bytes_up\":0,\"bytes_down\":10,"
    "\"tasks_delta\":0,\"tasks_held\":0,\"tasks_resent\":0,\"tasks_short\":0,\"benched\":0,\"wall_s\":0.5,"
    "\"version\":0,\"clip_norm\":null,\"clipped\":0,\"refused\":1,\"declined\":0,\"update_norm_median\":null,"
    "\"update_norm_max\":null,\"secure_agg\":{\"mode\":\"clear\",\"bits\":16,\"word_bits\":32,\"shift\":8,"
    "\"bound\":2,\"elements\":10,\"input_bytes\":20,\"members\":1,\"protocol_bytes_up\":0,"
    "\"protocol_bytes_down\":0,\"inputs\":0,\"phase_s\":{\"input\":0.5,\"unmask\":0},\"unmask_compute_s\":0,"
    "\"dropped\":[]},\"model_sha256\":\"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\","
    "\"participants\":[{\"client\":3,\"name\":\"z\",\"status\":\"refused\",\"bytes_down\":10,\"downloads\":1}]}";

static void check_render(const round_record *r, const char *want, const char *what) {
    cJSON *o = round_record_json(r);
    char *t = cJSON_PrintUnformatted(o);
    CHECK_MSG(t && !strcmp(t, want), "%s rendered as\n%s\nwant\n%s", what, t ? t : "(nothing)", want);
    cJSON_free(t);
    cJSON_Delete(o);
}

static void test_full(void) {
    static int64_t dropped[] = {5, 9};
    round_participant p[2] = {
        {.client = 0, .name = "a", .status = "ok", .ok = 1, .samples = 100, .weight = 0.5, .has_norm = 1, .norm = 2,
         .clipped = 1, .loss = 0.75, .train_s = 1.5, .bytes_up = 500, .has_measured_peak_bytes = 1,
         .measured_peak_bytes = 4096, .has_trained_samples = 1, .trained_samples = 100, .has_lr = 1,
         .lr_first = 0.125, .lr_last = 0.0625, .has_sim_s = 1, .sim_s = 2.5, .bytes_down = 1000, .downloads = 1,
         .has_resent = 1, .resent = 1, .has_local_steps = 1, .local_steps = 4, .has_mid_round = 1, .mid_round = 1},
        {.client = 5, .name = "b", .status = "missed_deadline", .has_sim_s = 1, .sim_s = 40, .bytes_down = 1000,
         .downloads = 1, .samples = 9, .norm = 9, .lr_first = 9}, /* figures without their flag stay out */
    };
    round_folded f = {.client = 2, .name = "c", .from_round = 6, .samples = 50, .weight = 0.25, .norm = 1,
                      .bytes_up = 400, .has_trained_samples = 1, .trained_samples = 50};
    round_record r = {
        .round = 7, .status = "failed", .has_reason = 1, .reason = "quorum not reached, global model kept",
        .has_test = 1, .test_acc = 0.5, .test_loss = 1.25, .train_loss = 0.75, .clients = 2, .has_late_folded = 1,
        .late_folded = 1, .selected = 3, .target = 2, .quorum = 2, .eligible = 4, .samples = 300, .bytes_up = 1000,
        .bytes_down = 2000, .tasks_delta = 1, .tasks_resent = 1, .benched = 1, .wall_s = 0.125, .version = 6,
        .has_clip_norm = 1, .clip_norm = 1.5, .clipped = 1, .has_missed_deadline = 1, .missed_deadline = 1,
        .has_rule_kept = 1, .rule_kept = 2, .has_norms = 1, .update_norm_median = 0.25, .update_norm_max = 3,
        .has_secure_agg = 1,
        .secure_agg = {.mode = "masked", .bits = 20, .word_bits = 32, .shift = 10, .bound = 1048576, .elements = 100,
                       .input_bytes = 250, .members = 3, .protocol_bytes_up = 900, .protocol_bytes_down = 800,
                       .masked = 1, .degree = 2, .threshold = 2, .keys = 3, .shared = 3, .unmasked = 2, .inputs = 2,
                       .phase_s = {1, 0.5, 0.25, 1, 0.125}, .unmask_compute_s = 0.0625, .dropped = {dropped, 2}},
        .has_dp = 1, .dp = {1.5, 1.75, 2, 0.5, 3.5, 0.001, 8, 7},
        .model_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        .participants = {p, 2}, .has_folded = 1, .folded = {&f, 1}, .has_test_bpb = 1, .test_bpb = 1.75};
    check_render(&r, full_json, "the full record");
}

static void test_bare(void) {
    round_participant p = {.client = 3, .name = "z", .status = "refused", .bytes_down = 10, .downloads = 1};
    round_record r = {
        .round = 1, .status = "ok", .test_acc = 9, .selected = 1, .target = 1, .quorum = 1, .eligible = 1,
        .bytes_down = 10, .wall_s = 0.5, .clip_norm = 9, .refused = 1, .late_folded = 9, .rule_kept = 9,
        .update_norm_max = 9, .has_secure_agg = 1,
        .secure_agg = {.mode = "clear", .bits = 16, .word_bits = 32, .shift = 8, .bound = 2, .elements = 10,
                       .input_bytes = 20, .members = 1, .degree = 9, .phase_s = {0, 9, 9, 0.5, 0}},
        .dp = {.epsilon = 9}, .model_sha256 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
        .participants = {&p, 1}, .test_bpb = 9};
    check_render(&r, bare_json, "the bare record");
}

/* Both logs read back and rendered again, byte for byte, and a few members. */
static void test_read_back(void) {
    char text[8192], err[HFL_ERR_LEN] = "";
    snprintf(text, sizeof text, "[%s,%s]", full_json, bare_json);
    cJSON *a = cJSON_Parse(text);
    REQUIRE(a != NULL);
    round_log log = {0};
    CHECK_MSG(round_log_read(a, &log, err) == 0, "%s", err);
    cJSON_Delete(a);
    REQUIRE(log.n == 2);
    const round_record *f = &log.v[0], *b = &log.v[1];
    const round_participant *p = f->participants.v;
    CHECK(f->has_test && f->test_loss == 1.25 && f->has_reason && f->has_dp && f->dp.rounds_charged == 7);
    CHECK(f->secure_agg.dropped.n == 2 && ((int64_t *)f->secure_agg.dropped.v)[1] == 9 && f->secure_agg.masked);
    CHECK(f->participants.n == 2 && p[0].ok && p[0].mid_round && !p[1].ok && p[1].has_sim_s && p[1].sim_s == 40);
    CHECK(f->has_folded && f->folded.n == 1 && ((round_folded *)f->folded.v)->from_round == 6 && f->has_test_bpb);
    CHECK(!b->has_test && !b->has_clip_norm && !b->has_norms && !b->has_dp && !b->has_folded && !b->has_reason);
    CHECK(!b->secure_agg.masked && !b->secure_agg.phase_s.masked && b->secure_agg.dropped.n == 0);
    cJSON *again = round_log_json(&log);
    char *t = cJSON_PrintUnformatted(again);
    CHECK_MSG(t && !strcmp(t, text), "the log read back renders as\n%s", t ? t : "(nothing)");
    cJSON_free(t);
    cJSON_Delete(again);
    round_log_free(&log);
    CHECK(log.n == 0 && log.v == NULL);
}

/* A diverged model's evaluation: its loss and bits per byte are NaN, which
 * cJSON writes as null. The saved log reads back (a restart continues the
 * run) and renders the same: test_acc a number beside a null test_loss. */
static void test_diverged(void) {
    round_participant p = {.client = 3, .name = "z", .status = "refused", .bytes_down = 10, .downloads = 1};
    round_record r = {.round = 2, .status = "ok", .has_test = 1, .test_acc = 0.1, .test_loss = NAN,
                      .model_sha256 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
                      .participants = {&p, 1}, .has_test_bpb = 1, .test_bpb = NAN};
    cJSON *one = round_record_json(&r), *a = cJSON_CreateArray();
    REQUIRE(one && a);
    cJSON_AddItemToArray(a, one);
    char *text = cJSON_PrintUnformatted(a), err[HFL_ERR_LEN] = "";
    REQUIRE(text != NULL);
    CHECK_MSG(strstr(text, "\"test_acc\":0.1,\"test_loss\":null,") && strstr(text, "\"test_bpb\":null}"),
              "rendered as %s", text);
    cJSON_Delete(a);
    a = cJSON_Parse(text); /* as a restart reads the state file */
    REQUIRE(a != NULL);
    round_log log = {0};
    CHECK_MSG(round_log_read(a, &log, err) == 0, "%s", err);
    cJSON_Delete(a);
    if (log.n == 1) {
        CHECK(log.v[0].has_test && log.v[0].test_acc == 0.1 && isnan(log.v[0].test_loss));
        CHECK(log.v[0].has_test_bpb && isnan(log.v[0].test_bpb));
        cJSON *again = round_log_json(&log);
        char *t = again ? cJSON_PrintUnformatted(again) : NULL;
        CHECK_MSG(t && !strcmp(t, text), "read back and rendered again as\n%s\nnot\n%s", t ? t : "(nothing)", text);
        cJSON_free(t);
        cJSON_Delete(again);
    }
    round_log_free(&log);
    cJSON_free(text);
}

/* An entry the table cannot read refuses the whole log, naming the entry and
 * the field, and leaves nothing behind. */
static void test_refusals(void) {
    static const struct {
        const char *from, *to, *says;
    } cases[] = {
        {"\"round\":1,", "", "entry 2: missing field 'round'"},
        {"\"test_acc\":null", "\"test_acc\":\"high\"", "entry 2: field 'test_acc' is not a number"},
        {"\"dropped\":[]", "\"dropped\":[1.5]", "entry 2: field 'dropped' holds an item that is not an integer"},
        {"\"dropped\":[]", "\"dropped\":[-1]", "entry 2: field 'dropped' holds an item that is not an integer"},
        {"\"dropped\":[]", "\"dropped\":{}", "entry 2: field 'dropped' must be an array"},
        {"\"participants\":[{", "\"participants\":[7,{", "entry 2: field 'participants' holds an item that is not"},
        {"\"status\":\"refused\",", "", "entry 2: missing field 'status'"},
        {"\"phase_s\":{\"input\":0.5,", "\"phase_s\":{", "entry 2: missing field 'input'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[8192], err[HFL_ERR_LEN] = "";
        int n = snprintf(text, sizeof text, "[%s,", full_json);
        const char *at = strstr(bare_json, cases[i].from);
        REQUIRE(at != NULL);
        n += snprintf(text + n, sizeof text - (size_t)n, "%.*s%s%s]", (int)(at - bare_json), bare_json, cases[i].to,
                      at + strlen(cases[i].from));
        cJSON *a = cJSON_Parse(text);
        REQUIRE_MSG(a != NULL, "bad JSON in case %zu", i);
        round_log log = {0};
        CHECK_MSG(round_log_read(a, &log, err) == -1 && strstr(err, cases[i].says), "case %zu: %s", i, err);
        CHECK(log.n == 0 && log.v == NULL);
        cJSON_Delete(a);
    }
    char err[HFL_ERR_LEN];
    cJSON *o = cJSON_CreateObject();
    round_log log = {0};
    CHECK(round_log_read(o, &log, err) == -1 && !strcmp(err, "its round log is malformed"));
    cJSON_Delete(o);
}

static const check_case cases[] = {
    {"full", test_full},
    {"bare", test_bare},
    {"read_back", test_read_back},
    {"diverged", test_diverged},
    {"refusals", test_refusals},
};

int main(int argc, char **argv) { return check_run("test_round_record", cases, CHECK_CASES(cases), argc, argv); }
