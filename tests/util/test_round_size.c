/* test_round_size.c: "ROUND:SIZE" (hfl_parse_round_size, util/util.h), what
 * hfl-client --budget-at and a scenario's memory_budget_at read. The
 * figures are worked by hand: 3M is 3 x 1048576 = 3145728 bytes, 1.5K is
 * 1536. */
#include <string.h>

#include "tests/check.h"
#include "util/util.h"

static void case_good(void) {
    static const struct {
        const char *s;
        int round;
        uint64_t bytes;
    } ok[] = {{"2:3M", 2, 3145728}, {"1:1", 1, 1}, {"1073741824:1.5K", 1073741824, 1536}, {"7:2G", 7, 2147483648ull}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int r = -1;
        uint64_t b = 0;
        char err[HFL_ERR_LEN] = "";
        int rc = hfl_parse_round_size(ok[i].s, &r, &b, err);
        CHECK_MSG(rc == 0 && r == ok[i].round && b == ok[i].bytes, "'%s': rc %d round %d bytes %llu (%s)", ok[i].s, rc,
                  r, (unsigned long long)b, err);
    }
}

static void case_bad(void) {
    static const char *const bad[] = {"3M", ":3M", "0:3M", "-1:3M", "1073741825:3M", "2:", "2:0", "2:lots",
                                      "2x:3M", "2:3M:4", "12345678901234567:1M", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = -1;
        uint64_t b = 0;
        char err[HFL_ERR_LEN] = "";
        int rc = hfl_parse_round_size(bad[i], &r, &b, err);
        CHECK_MSG(rc == -1 && err[0] && !strchr(err, '\n') && r == -1, "'%s' was taken: rc %d round %d (%s)", bad[i],
                  rc, r, err);
    }
}

static const check_case cases[] = {
    {"good", case_good},
    {"bad", case_bad},
};

int main(int argc, char **argv) {
    return check_run("util_round_size", cases, CHECK_CASES(cases), argc, argv);
}
