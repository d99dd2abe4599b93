/* harness.h: starting hfl's programs from integration tests.
 *
 * Tests run real processes: a coordinator on an ephemeral loopback port,
 * clients, the simulator. These helpers spawn them with their output in a
 * log file, wait with a time limit, and read what they wrote.
 *
 * Checks are tests/check.h's. A test's main registers harness_cleanup with
 * check_on_stop before it starts anything, so a failed REQUIRE kills every
 * process still running, and calls harness_cleanup itself before it returns
 * check_exit_code. */
#ifndef HFL_TEST_HARNESS_H
#define HFL_TEST_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "tests/check.h"

/* The start of a test that runs hfl-coordinator and hfl-client (argv[1],
 * argv[2]) on Fashion-MNIST: checks the arguments (exit 2 with a usage line),
 * skips (exit 77) without the dataset, registers harness_cleanup for
 * REQUIRE, and returns the test's temporary directory. */
const char *harness_begin(int argc, const char *name);
/* A fresh temporary directory for this test (removed by harness_cleanup unless HFL_KEEP_TMP is set). */
const char *harness_tmpdir(void);
/* Starts argv[0]; stdout and stderr go to log_path. The pid is remembered for cleanup. */
pid_t harness_spawn(char *const argv[], const char *log_path);
/* Waits up to timeout_s for pid; returns its exit status, 128+signal, or -1 on time-out (then kills it). */
int harness_wait(pid_t pid, double timeout_s);
/* -2 while pid runs, else its exit status or 128+signal (it is then reaped). */
int harness_poll(pid_t pid);
/* Starts hfl-coordinator with extra args, waits for its ready file and writes its URL into url. */
pid_t harness_start_coordinator(const char *exe, char *const extra[], char *url, size_t n);
/* Kills every process still running and removes the temporary directory. */
void harness_cleanup(void);

#endif
