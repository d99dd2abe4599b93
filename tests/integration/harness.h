/* harness.h: starting hfl's programs from integration tests.
 *
 * Tests run real processes: a coordinator on an ephemeral loopback port,
 * clients, the simulator. These helpers spawn them with their output in a
 * log file, wait with a time limit, and read what they wrote. */
#ifndef HFL_TEST_HARNESS_H
#define HFL_TEST_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
            harness_cleanup();                                                  \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

/* A fresh temporary directory for this test (removed by harness_cleanup on success). */
const char *harness_tmpdir(void);
/* Starts argv[0]; stdout and stderr go to log_path. The pid is remembered for cleanup. */
pid_t harness_spawn(char *const argv[], const char *log_path);
/* Waits up to timeout_s for pid; returns its exit status, 128+signal, or -1 on time-out (then kills it). */
int harness_wait(pid_t pid, double timeout_s);
/* Starts hfl-coordinator with extra args, waits for its ready file and writes its URL into url. */
pid_t harness_start_coordinator(const char *exe, char *const extra[], char *url, size_t n);
/* Kills every process still running and removes the temporary directory. */
void harness_cleanup(void);

#endif
