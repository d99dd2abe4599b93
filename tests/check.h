/* check.h: the assertions of every test under tests/ (include "tests/check.h").
 *
 * CHECK(cond) and CHECK_MSG(cond, fmt, ...) record a failure, with its file,
 * line, condition and (CHECK_MSG) a printf-style message, on stderr and carry
 * on, so one run reports every broken case. Both are expressions worth 1 when
 * the condition held and 0 when it failed, so a test can skip what depends on
 * a failed check: if (!CHECK(p != NULL)) return;
 * CHECK_CLOSE(got, want, atol, rtol) checks |got - want| <= atol + rtol |want|
 * and reports both values.
 *
 * REQUIRE(cond) and REQUIRE_MSG(cond, fmt, ...) are for what the rest of a
 * test cannot do without (a process that did not start, a file that is not
 * there): they record the failure as CHECK does, then stop the test, calling
 * the hook registered with check_on_stop first (integration tests register
 * harness_cleanup, so no child process outlives them) and exiting with 1.
 *
 * check_failures is the count so far; check_fail records a failure that a
 * helper found on behalf of its caller (at the caller's line, say).
 *
 * A test's main returns check_exit_code(name): 1 when any check failed, which
 * meson counts as a failed test, else 0. Everything stays active under NDEBUG
 * (release builds), unlike assert. */
#ifndef HFL_TESTS_CHECK_H
#define HFL_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static void (*check_stop_hook)(void);

/* Records one failure: "file:line: KIND failed: cond[: message]". Returns 0,
 * the value of a failed CHECK. fmt may be NULL (no message). */
__attribute__((format(printf, 5, 6))) static inline int check_fail(const char *file, int line,
                                                                  const char *kind, const char *cond,
                                                                  const char *fmt, ...) {
    __atomic_fetch_add(&check_failures, 1, __ATOMIC_RELAXED); /* CHECKs may run on several threads */
    fflush(stdout); /* what the test printed so far comes first in a shared log */
    fprintf(stderr, "%s:%d: %s failed: %s", file, line, kind, cond);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    return 0;
}

#define CHECK(cond) ((cond) ? 1 : check_fail(__FILE__, __LINE__, "CHECK", #cond, NULL))
#define CHECK_MSG(cond, ...) ((cond) ? 1 : check_fail(__FILE__, __LINE__, "CHECK", #cond, __VA_ARGS__))

static inline int check_close(double got, double want, double atol, double rtol, const char *file,
                              int line, const char *what) {
    if (fabs(got - want) <= atol + rtol * fabs(want)) return 1;
    return check_fail(file, line, "CHECK_CLOSE", what, "%.9g vs %.9g (atol %g, rtol %g)", got, want, atol,
                      rtol);
}

#define CHECK_CLOSE(got, want, atol, rtol) \
    check_close((double)(got), (double)(want), (atol), (rtol), __FILE__, __LINE__, #got " ~ " #want)

/* What a REQUIRE runs before the test exits; one hook, the last registered. */
static inline void check_on_stop(void (*hook)(void)) { check_stop_hook = hook; }

/* Stops the test after a failed REQUIRE (whose check_fail gives `failed`). */
_Noreturn static inline void check_stop(int failed) {
    (void)failed;
    fprintf(stderr, "stopping after %d failed check(s)\n", check_failures);
    fflush(NULL);
    if (check_stop_hook) check_stop_hook();
    exit(1);
}

#define REQUIRE(cond) ((cond) ? (void)0 : check_stop(check_fail(__FILE__, __LINE__, "REQUIRE", #cond, NULL)))
#define REQUIRE_MSG(cond, ...) \
    ((cond) ? (void)0 : check_stop(check_fail(__FILE__, __LINE__, "REQUIRE", #cond, __VA_ARGS__)))

/* The exit status for main: 0 when every check held, else 1 (with a count). */
static inline int check_exit_code(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
