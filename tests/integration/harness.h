/* harness.h: starting hfl's programs from integration tests.
 *
 * Tests run real processes: a coordinator on an ephemeral loopback port,
 * clients, the simulator. These helpers spawn them with their output in a
 * log file, wait with a time limit, and read what they wrote.
 *
 * A test stops at the first process that fails, rather than waiting out its
 * time limit for a run that cannot finish: while harness_wait waits for one
 * process, and whenever a test's own loop calls harness_watch, every other
 * process it started is checked, and one that exited non-zero or died of a
 * signal stops the test at once (as a failed REQUIRE), naming it and
 * printing the end of its log. A process expected to fail is waited for by
 * name (harness_wait returns its status) or excluded (harness_unwatch).
 * harness_start_coordinator stops waiting for the ready file as soon as the
 * coordinator exits.
 *
 * Checks are tests/check.h's. The first harness_tmpdir registers
 * harness_cleanup to run at exit, so a failed REQUIRE in any file kills
 * every process still running; a test's main also calls harness_cleanup
 * itself before it returns check_exit_code. */
#ifndef HFL_TEST_HARNESS_H
#define HFL_TEST_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "tests/check.h"

/* The start of a test that runs hfl-coordinator and hfl-client (argv[1],
 * argv[2]) on Fashion-MNIST: checks the arguments (exit 2 with a usage line),
 * skips (exit 77) without the dataset, registers harness_stop for
 * REQUIRE, and returns the test's temporary directory. */
const char *harness_begin(int argc, const char *name);
/* A fresh temporary directory for this test (removed by harness_cleanup unless HFL_KEEP_TMP is set). */
const char *harness_tmpdir(void);
/* Starts argv[0]; stdout and stderr go to log_path. The pid is remembered for cleanup. */
pid_t harness_spawn(char *const argv[], const char *log_path);
/* Waits up to timeout_s for pid; returns its exit status, 128+signal, or -1
 * on time-out (then kills it). Stops the test when another watched process
 * fails meanwhile (harness_watch). */
int harness_wait(pid_t pid, double timeout_s);
/* -2 while pid runs, else its exit status or 128+signal (it is then reaped). */
int harness_poll(pid_t pid);
/* Stops the test when a watched process has failed (exited non-zero, died
 * of a signal); reaps and forgets those that exited with 0. */
void harness_watch(void);
/* pid may fail: harness_watch leaves it to the test (harness_poll, harness_wait). */
void harness_unwatch(pid_t pid);
/* Stops the test (a failed REQUIRE): pid, by its log's name, ended with
 * `status` (harness_wait's); the end of its log is printed. */
_Noreturn void harness_fail(pid_t pid, int status, const char *why);
/* Starts hfl-coordinator with extra args, waits for its ready file and
 * writes its URL into url; -1 when it exited first or was not ready in 30 s
 * (its log says why). */
pid_t harness_start_coordinator(const char *exe, char *const extra[], char *url, size_t n);
/* Kills every process still running and removes the temporary directory. */
void harness_cleanup(void);
/* A failed REQUIRE's hook (check_on_stop): prints the end of every started
 * process's log that harness_fail has not shown, so that a failure in CI,
 * whose temporary directory is gone, still says what each process was
 * doing; then harness_cleanup. */
void harness_stop(void);

#endif
