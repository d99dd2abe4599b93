/* util.h: the small helpers every part of hfl shares.
 *
 * Errors: functions that can fail take `char err[HFL_ERR_LEN]`, write one
 * human-readable line there (no trailing newline) and return -1; 0 is success.
 * Checked allocation (hfl_malloc) prints and exits on out-of-memory, as llm.c's
 * mallocCheck does: nothing past it can recover. */
#ifndef HFL_UTIL_H
#define HFL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define HFL_ERR_LEN 256

/* printf into err (may be NULL), control characters replaced by '?' so an
 * error is always one printable line; always returns -1 so callers can
 * `return hfl_errf(...)`. */
int hfl_errf(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A program's error: "program: err" on stderr; returns status, for
 * `return hfl_fail("hfl-client", err, 1);` in main. */
int hfl_fail(const char *program, const char *err, int status);

void *hfl_malloc(size_t bytes);          /* exits with a one-line message on failure */
void *hfl_calloc(size_t n, size_t size);
void *hfl_realloc(void *p, size_t bytes);
char *hfl_strdup(const char *s);

double hfl_now(void);                    /* monotonic seconds */
void hfl_sleep_ms(int ms);

/* Reads a whole file; *len gets its size. Returns NULL and fills err on failure. */
char *hfl_read_file(const char *path, size_t *len, char *err);
/* Writes via a temporary file, fsync, rename and an fsync of the directory,
 * so readers never see half a file and the new one survives a crash. */
int hfl_write_file_atomic(const char *path, const void *data, size_t len, char *err);
/* The same for a file made of n parts written in turn, so a large file
 * (a model, the coordinator's state) is never assembled in memory first. */
typedef struct {
    const void *data;
    size_t len;
} hfl_part;
int hfl_write_parts_atomic(const char *path, const hfl_part *parts, int n, char *err);
/* Appends line and a newline to path (made if absent) in one write(2) on
 * an O_APPEND descriptor, so processes appending to one file at once never
 * interleave their lines, whatever their length (stdio writes a long line
 * in buffer-sized pieces). 0, or -1 with err naming path. */
int hfl_append_line(const char *path, const char *line, char *err);
/* fsync of the directory holding path (makes a rename in it durable). */
int hfl_fsync_dir_of(const char *path, char *err);
/* n bytes at offset off of fd, whatever pread and pwrite split them into
 * (EINTR retried); -1 with err (the system's reason, or "the file ends
 * early" / "nothing written") at an error. */
int hfl_pread_all(int fd, void *dst, size_t n, uint64_t off, char *err);
int hfl_pwrite_all(int fd, const void *src, size_t n, uint64_t off, char *err);

/* "512M", "4G", "1.5GiB", "1048576" -> bytes. Returns -1 on a malformed size. */
int hfl_parse_size(const char *s, uint64_t *bytes, char *err);
/* "ROUND:SIZE" (hfl-client --budget-at, a scenario's memory_budget_at): a
 * round in [1, 2^30] and a size above 0 as hfl_parse_size reads it. */
int hfl_parse_round_size(const char *s, int *round, uint64_t *bytes, char *err);
/* Strict integer / double parsing of a whole string within [lo, hi]. */
int hfl_parse_int(const char *s, long lo, long hi, long *out, char *err);
int hfl_parse_double(const char *s, double lo, double hi, double *out, char *err);
/* "name[:number[:number...]]" (a lower-case name, then up to max_args numbers
 * each after a colon, nothing else): the name into name (cap bytes) and the
 * numbers into args; returns how many numbers, or -1 when s is not of that
 * form. */
int hfl_parse_name_args(const char *s, char *name, size_t cap, double *args, int max_args);
/* hfl_parse_name_args whose name must be one of names[0..n_names): its index,
 * or -1 when s is not of that form or names none of them. */
int hfl_parse_choice(const char *s, const char *const *names, int n_names, double *args, int max_args,
                     int *n_args);

/* The median of v[0..n) (the mean of the middle two for even n; 0 for n = 0).
 * Sorts v. */
double hfl_median(double *v, size_t n);

/* bytes in MiB, rounded up (down) to a hundredth, for "%.2f MiB" in
 * messages: a budget named as enough must be enough when typed back, and a
 * floor named must not be above the true one. */
double hfl_mib_up(uint64_t bytes);
double hfl_mib_down(uint64_t bytes);

/* mkdir -p: creates dir and its parents; -1 with err unless dir ends up a directory. */
int hfl_mkdirs(const char *dir, char *err);

/* FNV-1a hash of a string: a stable 32-bit id for a name (e.g. a client's random stream). */
uint32_t hfl_hash32(const char *s);

/* Crash tests (tests/integration/test_resume.c): when the environment holds
 * HFL_TEST_CRASH=point:round and this is that point in that round, the
 * process says so on stderr and kills itself with SIGKILL, as kill -9 would. */
void hfl_test_crash(const char *point, int round);

/* Directory holding the running executable (to find sibling programs). */
int hfl_exe_dir(char *out, size_t outlen);

/* n bytes as 2n lowercase hex digits and a NUL into out. */
void hfl_hex(const uint8_t *b, size_t n, char *out);

#endif
