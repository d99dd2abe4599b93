/* bench_coord.h: starting an hfl-coordinator from a benchmark and reading
 * its memory (bench-load-tls, bench-fleet). */
#ifndef HFL_BENCH_COORD_H
#define HFL_BENCH_COORD_H

#include <stddef.h>
#include <sys/types.h>

/* Runs exe with args (NULL-terminated, without argv[0]) plus --ready-file
 * dir/url, its output in dir/coordinator.log, and waits up to 60 s for its
 * URL. Returns its pid with url filled, or -1 (it is killed, and the reason
 * printed on stderr under the name `who`). */
pid_t bench_coord_start(const char *who, const char *exe, const char *const args[], const char *dir, char *url,
                        size_t url_len);
/* VmHWM and VmRSS of pid in MiB (-1 when unreadable). */
void bench_coord_rss(pid_t pid, double *hwm, double *rss);

#endif
