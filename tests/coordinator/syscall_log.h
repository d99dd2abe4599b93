/* syscall_log.h: which files a piece of code writes, flushes and renames, and
 * in what order (test_persist.c checks the state's write protocol with it).
 *
 * syscall_log.c defines write, fsync and rename, so every call the test's
 * code makes to them (util.c's hfl_write_file_atomic and hfl_fsync_dir_of,
 * persist.c's renames) goes through it first, as through an LD_PRELOAD shim;
 * each is passed on to the C library's (dlsym RTLD_NEXT). Linked into the
 * test rather than preloaded, so the sanitizer build's own interceptors
 * (which sit in the executable, ahead of any preloaded library) cannot hide
 * the calls. stdio's internal writes do not pass through here.
 *
 * While logging is on, each call that succeeds is recorded as one line,
 * "write PATH", "fsync PATH" or "rename FROM TO", with a descriptor's path
 * read from /proc/self/fd; consecutive writes to one file count once. */
#ifndef HFL_TESTS_COORDINATOR_SYSCALL_LOG_H
#define HFL_TESTS_COORDINATOR_SYSCALL_LOG_H

#include <stddef.h>

/* Starts a fresh log (its previous lines dropped). */
void syscall_log_start(void);
/* Stops logging; returns the lines so far, "\n"-terminated (owned by the log). */
const char *syscall_log_stop(void);

#endif
