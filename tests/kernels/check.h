/* check.h: the few assertion helpers the kernels, model and proto tests share
 * (the proto tests through tests/proto/check.h).
 *
 * CHECK records a failure with its file and line and carries on, so one run
 * reports every broken case; a test's main returns check_exit_code(). They
 * stay active under NDEBUG (release builds), unlike assert. */
#ifndef HFL_TEST_CHECK_H
#define HFL_TEST_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_failures;

/* How a failure line names the failed check; an includer may spell it its
 * own way by defining it first (tests/proto/check.h: "check failed"). */
#ifndef CHECK_FAILED_TEXT
#define CHECK_FAILED_TEXT "CHECK failed"
#endif

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: " CHECK_FAILED_TEXT ": %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                         \
        }                                                                             \
    } while (0)

/* |got - want| <= atol + rtol * |want|, reported with both values. */
#define CHECK_CLOSE(got, want, atol, rtol)                                                    \
    do {                                                                                      \
        double g_ = (double)(got), w_ = (double)(want);                                       \
        if (!(fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_))) {                                 \
            fprintf(stderr, "%s:%d: %s = %.9g, expected %s = %.9g\n", __FILE__, __LINE__, #got, \
                    g_, #want, w_);                                                           \
            check_failures++;                                                                 \
        }                                                                                     \
    } while (0)

static inline int check_exit_code(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
