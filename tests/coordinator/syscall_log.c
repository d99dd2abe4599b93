/* syscall_log.c: see syscall_log.h. */
#include "tests/coordinator/syscall_log.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int logging;
static char text[16384];
static size_t used;
static char last[4200]; /* the last line, to fold repeated writes */

static void record(const char *line) {
    if (!strncmp(line, "write ", 6) && !strcmp(line, last)) return;
    snprintf(last, sizeof last, "%s", line);
    size_t n = strlen(line);
    if (used + n + 2 > sizeof text) return; /* full: the comparison will show it */
    memcpy(text + used, line, n);
    text[used + n] = '\n';
    used += n + 1;
    text[used] = 0;
}

static void record_fd(const char *op, int fd) {
    char link[64], path[4096], line[4200];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    path[n > 0 ? n : 0] = 0;
    snprintf(line, sizeof line, "%s %s", op, path);
    record(line);
}

void syscall_log_start(void) {
    used = 0;
    text[0] = 0;
    last[0] = 0;
    logging = 1;
}

const char *syscall_log_stop(void) {
    logging = 0;
    return text;
}

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    ssize_t rc = real(fd, buf, count);
    if (logging && rc >= 0) record_fd("write", fd);
    return rc;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int rc = real(fd);
    if (logging && rc == 0) record_fd("fsync", fd);
    return rc;
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int rc = real(from, to);
    if (logging && rc == 0) {
        char line[8400];
        snprintf(line, sizeof line, "rename %s %s", from, to);
        record(line);
    }
    return rc;
}
