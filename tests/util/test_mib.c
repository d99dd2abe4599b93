/* test_mib.c: MiB figures in messages round the safe way (util/util.h).
 *
 * A refusal names the smallest budget that would fit and a floor below which
 * nothing can: printed with two decimals, the first must not be below the
 * true figure (typed back, it must be enough) and the second not above it.
 * The cases are bytes worked by hand: 1.16 MiB is 1,216,348.16 bytes. */
#include <stdio.h>
#include <string.h>

#include "tests/check.h"
#include "util/util.h"

static void expect(double mib, const char *want, uint64_t bytes, const char *which) {
    char got[32];
    snprintf(got, sizeof got, "%.2f", mib);
    CHECK_MSG(!strcmp(got, want), "%s(%llu) printed %s, want %s", which, (unsigned long long)bytes, got,
              want);
}

static void case_examples(void) {
    /* just above 1.16 MiB: the nearest hundredth would name 1.16, not enough */
    expect(hfl_mib_up(1216349), "1.17", 1216349, "hfl_mib_up");
    expect(hfl_mib_down(1216349), "1.16", 1216349, "hfl_mib_down");
    /* just below 1.17 MiB (1,226,833.92 bytes): the nearest would name 1.17 as a floor */
    expect(hfl_mib_up(1226833), "1.17", 1226833, "hfl_mib_up");
    expect(hfl_mib_down(1226833), "1.16", 1226833, "hfl_mib_down");
    /* exact hundredths stay: 1.25 MiB is 1,310,720 bytes */
    expect(hfl_mib_up(1310720), "1.25", 1310720, "hfl_mib_up");
    expect(hfl_mib_down(1310720), "1.25", 1310720, "hfl_mib_down");
    expect(hfl_mib_up(0), "0.00", 0, "hfl_mib_up");
    /* 80 GiB: no overflow in the arithmetic */
    expect(hfl_mib_up(85899345921ull), "81920.01", 85899345921ull, "hfl_mib_up");
}

static void case_bracket(void) {
    /* every byte count in a range: the printed figure brackets the true one */
    for (uint64_t b = 1000000; b < 1300000; b += 7) {
        double up, down, t = (double)b / 1048576.0;
        char s[32];
        snprintf(s, sizeof s, "%.2f", hfl_mib_up(b));
        sscanf(s, "%lf", &up);
        snprintf(s, sizeof s, "%.2f", hfl_mib_down(b));
        sscanf(s, "%lf", &down);
        if (!CHECK_MSG(up >= t && down <= t && up - down <= 0.0100001, "%llu bytes: %.2f..%.2f around %.6f",
                       (unsigned long long)b, down, up, t))
            break;
    }
}

static const check_case cases[] = {
    {"examples", case_examples},
    {"bracket", case_bracket},
};

int main(int argc, char **argv) {
    return check_run("util_mib", cases, CHECK_CASES(cases), argc, argv);
}
