/* test_cases.c: the fixture that tests/util/cases.sh drives to test check.h's
 * case runner (check_run). Its three cases do nothing but say that they ran
 * ("ran alpha"), so the script can tell from the output alone which cases ran
 * and in what order, independent of what the runner itself prints.
 *
 * Switches, for the script only:
 *   CASES_FAIL=NAME         that case fails one check (the runner must say so
 *                           and the exit status must be 1);
 *   CASES_IGNORE_ARGV=1     pass argc 0, as an integration test does whose
 *                           arguments are program paths (names come from
 *                           HFL_TEST_CASE only);
 *   CASES_TABLE=dup         a table with two cases of one name (refused). */
#include "tests/check.h"

static void ran(const char *name) {
    printf("ran %s\n", name);
    const char *fail = getenv("CASES_FAIL");
    CHECK_MSG(!fail || strcmp(fail, name), "CASES_FAIL=%s", fail);
}

static void alpha(void) { ran("alpha"); }
static void beta(void) { ran("beta"); }
static void gamma_case(void) { ran("gamma"); }

static const check_case cases[] = {{"alpha", alpha}, {"beta", beta}, {"gamma", gamma_case}};
static const check_case dup_cases[] = {{"alpha", alpha}, {"alpha", beta}};

int main(int argc, char **argv) {
    const char *table = getenv("CASES_TABLE");
    if (table && !strcmp(table, "dup")) return check_run("test_cases", dup_cases, CHECK_CASES(dup_cases), argc, argv);
    if (getenv("CASES_IGNORE_ARGV")) argc = 0;
    return check_run("test_cases", cases, CHECK_CASES(cases), argc, argv);
}
