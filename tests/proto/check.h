/* check.h: the tiny assertion helpers shared by the proto tests. CHECK records
 * a failure with its location and carries on, so one run reports every broken
 * case; check_exit turns the count into the exit status meson reads. */
#ifndef HFL_TESTS_PROTO_CHECK_H
#define HFL_TESTS_PROTO_CHECK_H

#include <stdio.h>

static int check_failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                        \
        }                                                                            \
    } while (0)

static inline int check_exit(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
