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
 * (release builds), unlike assert.
 *
 * Named cases, as NNG's tests list theirs: a test file keeps its cases in a
 * table and its main hands the table to check_run, which returns the exit
 * status (check_exit_code, or 2 for a name it does not know):
 *
 *     static const check_case cases[] = {{"refusals", test_refusals}, {"topk", test_topk}};
 *     int main(int argc, char **argv) {
 *         return check_run("test_codec_edges", cases, CHECK_CASES(cases), argc, argv);
 *     }
 *
 * With no name it runs every case in the table's order. Names on the command
 * line (test_codec_edges topk refusals) run those cases alone, in the order
 * given; --list prints the names, one a line, and runs nothing. A test whose
 * arguments are not names (integration tests get program paths from meson)
 * passes argc 0, and the names come from the environment instead:
 * HFL_TEST_CASE=topk,refusals (also read by every test given no names). A
 * name the table lacks is refused before anything runs: one line naming it
 * and the known ones, and exit status 2, never a silent pass. Each case is
 * announced on stdout ("-- test/case"), and a case that failed checks says
 * how many on stderr. Setup that every case shares runs in main before
 * check_run; a case that needs its own (a fresh fixture) does it itself. */
#ifndef HFL_TESTS_CHECK_H
#define HFL_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* One named case of a test file: what one types to run it alone, and the
 * function that runs it (its checks record failures as everywhere else). */
typedef struct {
    const char *name;
    void (*fn)(void);
} check_case;

#define CHECK_CASES(table) ((int)(sizeof(table) / sizeof((table)[0])))

/* The index of the case named `name` in cases[0..n), or -1. */
static inline int check_find_case(const check_case *cases, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(cases[i].name, name)) return i;
    return -1;
}

/* Refuses a name the table lacks: one line on stderr, naming the known ones. */
static inline int check_unknown_case(const char *test, const check_case *cases, int n, const char *name) {
    fflush(stdout);
    fprintf(stderr, "%s: no case named '%s' (cases:", test, name);
    for (int i = 0; i < n; i++) fprintf(stderr, " %s", cases[i].name);
    fputs(")\n", stderr);
    return 2;
}

/* Runs cases[i], announcing it and counting the failures it added. */
static inline void check_run_case(const char *test, const check_case *c) {
    int before = check_failures;
    printf("-- %s/%s\n", test, c->name);
    fflush(stdout);
    c->fn();
    int failed = check_failures - before;
    if (failed) {
        fflush(stdout);
        fprintf(stderr, "%s/%s: %d check(s) failed\n", test, c->name, failed);
    }
}

/* Splits HFL_TEST_CASE ("a,b,c") into names[] (at most max); returns the
 * count, or -1 when there are more. buf holds the copy the names point into. */
static inline int check_env_names(char *buf, size_t cap, const char **names, int max) {
    const char *env = getenv("HFL_TEST_CASE");
    if (!env || !*env) return 0;
    if (strlen(env) >= cap) return -1;
    strcpy(buf, env);
    int k = 0;
    for (char *tok = buf; tok;) {
        char *comma = strchr(tok, ',');
        if (comma) *comma = '\0';
        if (*tok) {
            if (k == max) return -1;
            names[k++] = tok;
        }
        tok = comma ? comma + 1 : NULL;
    }
    return k;
}

/* The runner: every case, the named ones, or --list (see the header comment).
 * argc 0 says the test's arguments are not names: only HFL_TEST_CASE is read. */
static inline int check_run(const char *test, const check_case *cases, int n, int argc, char **argv) {
    for (int i = 0; i < n; i++)
        if (check_find_case(cases, i, cases[i].name) >= 0) {
            fprintf(stderr, "%s: two cases are named '%s'\n", test, cases[i].name);
            return 2;
        }
    enum { MAX_NAMES = 64 };
    const char *names[MAX_NAMES];
    char env_buf[1024];
    int k = 0;
    if (argc > 1) {
        if (argc - 1 > MAX_NAMES) {
            fprintf(stderr, "%s: more than %d case names\n", test, MAX_NAMES);
            return 2;
        }
        for (int i = 1; i < argc; i++) names[k++] = argv[i];
    } else {
        k = check_env_names(env_buf, sizeof env_buf, names, MAX_NAMES);
        if (k < 0) {
            fprintf(stderr, "%s: HFL_TEST_CASE is too long (more than %d names or %zu bytes)\n", test, MAX_NAMES,
                    sizeof env_buf - 1);
            return 2;
        }
    }
    for (int j = 0; j < k; j++)
        if (!strcmp(names[j], "--list")) {
            for (int i = 0; i < n; i++) printf("%s\n", cases[i].name);
            return 0;
        }
    for (int j = 0; j < k; j++)
        if (check_find_case(cases, n, names[j]) < 0) return check_unknown_case(test, cases, n, names[j]);
    if (k == 0)
        for (int i = 0; i < n; i++) check_run_case(test, &cases[i]);
    for (int j = 0; j < k; j++) check_run_case(test, &cases[check_find_case(cases, n, names[j])]);
    return check_exit_code(test);
}

#endif
