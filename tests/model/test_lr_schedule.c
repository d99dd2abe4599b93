/* test_lr_schedule.c: the learning rate over a run (model/lr_schedule.h).
 *
 * Values worked out by hand for peak 1, warmup 2, total 10, floor 0.1:
 *   t = 0, 1:  1/2, 2/2 (the warmup's line)
 *   t = 2:     p = 0:    1
 *   t = 6:     p = 1/2:  0.1 + 0.9 (1 + cos(pi/2)) / 2 = 0.55
 *   t = 4:     p = 1/4:  0.1 + 0.9 (1 + sqrt(2)/2) / 2 = 0.86819805...
 *   t = 10:    p = 1:    0.1, and it stays there (t = 25)
 * and with peak 0.3 every value scales by 0.3; no warmup starts at the
 * peak; constant is the peak throughout. The parser's accepted forms and
 * its refusals, and the name it prints reads back as the same schedule. */
#include <math.h>
#include <string.h>

#include "model/lr_schedule.h"
#include "tests/check.h"
#include "util/util.h"

static void case_cosine(void) {
    char err[HFL_ERR_LEN];
    hfl_lr_schedule s;
    CHECK(hfl_lr_schedule_parse("cosine:2:0.1", &s, err) == 0);
    s.total = 10;
    static const struct { long t; double want; } hand[] = {
        {0, 0.5}, {1, 1.0}, {2, 1.0}, {4, 0.86819805153394637}, {6, 0.55}, {10, 0.1}, {25, 0.1}};
    for (size_t i = 0; i < sizeof hand / sizeof *hand; i++) {
        CHECK_CLOSE(hfl_lr_at(&s, 1.0, hand[i].t), hand[i].want, 1e-15, 1e-15);
        CHECK_CLOSE(hfl_lr_at(&s, 0.3, hand[i].t), 0.3 * hand[i].want, 1e-15, 1e-15);
    }
    CHECK(hfl_lr_schedule_parse("cosine", &s, err) == 0 && s.cosine && s.warmup == 0 && s.min_ratio == 0.1);
    s.total = 4;
    CHECK_CLOSE(hfl_lr_at(&s, 2.0, 0), 2.0, 0, 0);      /* no warmup: the peak first */
    CHECK_CLOSE(hfl_lr_at(&s, 2.0, 2), 2.0 * 0.55, 1e-15, 1e-15);
    CHECK(hfl_lr_schedule_parse("constant", &s, err) == 0 && !s.cosine);
    CHECK(hfl_lr_at(&s, 0.7, 0) == 0.7 && hfl_lr_at(&s, 0.7, 123456) == 0.7);
}

static void case_names(void) {
    char err[HFL_ERR_LEN], name[64];
    hfl_lr_schedule s;
    CHECK(hfl_lr_schedule_parse("cosine:100:0", &s, err) == 0 && s.warmup == 100 && s.min_ratio == 0);
    hfl_lr_schedule_name(&s, name, sizeof name);
    hfl_lr_schedule back;
    CHECK_MSG(hfl_lr_schedule_parse(name, &back, err) == 0 && !memcmp(&back, &s, sizeof s), "'%s' did not read back", name);
    static const char *const bad[] = {"cosin", "cosine:", "cosine:-1", "cosine:5:1.5", "cosine:5:x", "linear", "cosinex", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(hfl_lr_schedule_parse(bad[i], &s, err) != 0 && err[0], "'%s' was accepted", bad[i]);
}

static const check_case cases[] = {
    {"cosine", case_cosine},
    {"names", case_names},
};

int main(int argc, char **argv) {
    return check_run("test_lr_schedule", cases, CHECK_CASES(cases), argc, argv);
}
