/* check.h: the one assertion the data tests share; counts failures and goes on. */
#ifndef HFL_TEST_DATA_CHECK_H
#define HFL_TEST_DATA_CHECK_H

#include <stdio.h>

static int check_failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            check_failures++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* Exit status: 0 if every CHECK held. */
static int check_report(const char *name) {
    if (check_failures) fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
    else printf("%s: all checks passed\n", name);
    return check_failures ? 1 : 0;
}

#endif
