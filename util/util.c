/* util.c: errors, checked allocation, time, whole-file I/O and number parsing. */
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int hfl_errf(char *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, HFL_ERR_LEN, fmt, ap);
        va_end(ap);
        /* Errors quote what they were given (keys, names, paths): keep them one
         * printable line whatever that was. */
        for (char *p = err; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    }
    return -1;
}

int hfl_fail(const char *program, const char *err, int status) {
    fprintf(stderr, "%s: %s\n", program, err);
    return status;
}

void *hfl_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "hfl: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

void *hfl_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "hfl: out of memory allocating %zu x %zu bytes\n", n, size);
        exit(1);
    }
    return p;
}

void *hfl_realloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) {
        fprintf(stderr, "hfl: out of memory reallocating %zu bytes\n", bytes);
        exit(1);
    }
    return q;
}

char *hfl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(hfl_malloc(n), s, n);
}

double hfl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void hfl_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

char *hfl_read_file(const char *path, size_t *len, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        hfl_errf(err, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = hfl_malloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            fclose(f);
            hfl_errf(err, "out of memory reading %s", path);
            return NULL;
        }
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        hfl_errf(err, "cannot read %s", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int hfl_write_parts_atomic(const char *path, const hfl_part *parts, int n, char *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return hfl_errf(err, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return hfl_errf(err, "cannot create %s: %s", tmp, strerror(errno));
    for (int i = 0; i < n; i++) {
        const char *p = parts[i].data;
        size_t left = parts[i].len;
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0) {
                if (errno == EINTR) continue;
                int e = errno;
                close(fd);
                unlink(tmp);
                return hfl_errf(err, "cannot write %s: %s", tmp, strerror(e));
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(tmp);
        return hfl_errf(err, "cannot flush %s: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return hfl_errf(err, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    return hfl_fsync_dir_of(path, err);
}

int hfl_append_line(const char *path, const char *line, char *err) {
    size_t n = strlen(line);
    char *buf = hfl_malloc(n + 1);
    memcpy(buf, line, n);
    buf[n] = '\n';
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644), rc = 0;
    ssize_t w = fd < 0 ? -1 : write(fd, buf, n + 1);
    if (fd < 0 || w != (ssize_t)(n + 1))
        rc = hfl_errf(err, "cannot append to %s: %s", path, w < 0 ? strerror(errno) : "a short write");
    if (fd >= 0 && close(fd) != 0 && rc == 0) rc = hfl_errf(err, "cannot append to %s: %s", path, strerror(errno));
    free(buf);
    return rc;
}

int hfl_write_file_atomic(const char *path, const void *data, size_t len, char *err) {
    hfl_part one = {data, len};
    return hfl_write_parts_atomic(path, &one, 1, err);
}

int hfl_fsync_dir_of(const char *path, char *err) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return hfl_errf(err, "cannot open directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd) == 0 || errno == EINVAL ? 0 : hfl_errf(err, "cannot flush directory %s: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

int hfl_pread_all(int fd, void *dst, size_t n, uint64_t off, char *err) {
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(fd, (char *)dst + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return hfl_errf(err, "%s", r < 0 ? strerror(errno) : "the file ends early");
        got += (size_t)r;
    }
    return 0;
}

int hfl_pwrite_all(int fd, const void *src, size_t n, uint64_t off, char *err) {
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, (const char *)src + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return hfl_errf(err, "%s", w < 0 ? strerror(errno) : "nothing written");
        done += (size_t)w;
    }
    return 0;
}

int hfl_parse_size(const char *s, uint64_t *bytes, char *err) {
    if (!s || !*s) return hfl_errf(err, "empty size");
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || !isfinite(v)) return hfl_errf(err, "bad size '%s'", s);
    double mul = 1;
    if (*end) {
        char c = *end++;
        switch (c) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1024.0 * 1024; break;
        case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        case 'b': case 'B': end--; break;
        default: return hfl_errf(err, "bad size '%s' (use e.g. 512M, 4G)", s);
        }
        if (!strcasecmp(end, "ib") || !strcasecmp(end, "b")) end += strlen(end);
        if (*end) return hfl_errf(err, "bad size '%s' (use e.g. 512M, 4G)", s);
    }
    double b = v * mul;
    if (b > 1.8e19) return hfl_errf(err, "size '%s' too large", s);
    *bytes = (uint64_t)b;
    return 0;
}

int hfl_parse_round_size(const char *s, int *round, uint64_t *bytes, char *err) {
    const char *colon = s ? strchr(s, ':') : NULL;
    char head[16];
    long r;
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof head)
        return hfl_errf(err, "'%s': use ROUND:SIZE, e.g. 2:3M", s ? s : "");
    memcpy(head, s, (size_t)(colon - s));
    head[colon - s] = 0;
    if (hfl_parse_int(head, 1, 1 << 30, &r, NULL) != 0)
        return hfl_errf(err, "'%s': the round must be a whole number from 1", s);
    if (hfl_parse_size(colon + 1, bytes, err) != 0) return -1;
    if (*bytes == 0) return hfl_errf(err, "'%s': the size must be more than 0", s);
    *round = (int)r;
    return 0;
}

int hfl_parse_int(const char *s, long lo, long hi, long *out, char *err) {
    if (!s || !*s) return hfl_errf(err, "empty number");
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno) return hfl_errf(err, "'%s' is not an integer", s);
    if (v < lo || v > hi) return hfl_errf(err, "%ld out of range [%ld, %ld]", v, lo, hi);
    *out = v;
    return 0;
}

int hfl_parse_double(const char *s, double lo, double hi, double *out, char *err) {
    if (!s || !*s) return hfl_errf(err, "empty number");
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v)) return hfl_errf(err, "'%s' is not a number", s);
    if (v < lo || v > hi) return hfl_errf(err, "%g out of range [%g, %g]", v, lo, hi);
    *out = v;
    return 0;
}

int hfl_mkdirs(const char *dir, char *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return hfl_errf(err, "directory name too long: %s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char c = *p;
        *p = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return hfl_errf(err, "cannot create directory %s: %s", path, strerror(errno));
        *p = c;
        if (c == 0) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return hfl_errf(err, "%s is not a directory", dir);
    return 0;
}

uint32_t hfl_hash32(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

int hfl_exe_dir(char *out, size_t outlen) {
    ssize_t n = readlink("/proc/self/exe", out, outlen - 1);
    if (n <= 0) return -1;
    out[n] = 0;
    char *slash = strrchr(out, '/');
    if (!slash) return -1;
    *slash = 0;
    return 0;
}

int hfl_parse_name_args(const char *s, char *name, size_t cap, double *args, int max_args) {
    size_t n = 0;
    while (s[n] >= 'a' && s[n] <= 'z') n++;
    if (n == 0 || n >= cap) return -1;
    memcpy(name, s, n);
    name[n] = 0;
    int count = 0;
    const char *p = s + n;
    while (*p == ':') {
        char *end;
        double v = strtod(p + 1, &end);
        if (end == p + 1 || count == max_args) return -1;
        args[count++] = v;
        p = end;
    }
    return *p ? -1 : count;
}

int hfl_parse_choice(const char *s, const char *const *names, int n_names, double *args, int max_args,
                     int *n_args) {
    char name[32];
    *n_args = hfl_parse_name_args(s, name, sizeof name, args, max_args);
    for (int i = 0; *n_args >= 0 && i < n_names; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

static int cmp_double_asc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double hfl_median(double *v, size_t n) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double_asc);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double hfl_mib_up(uint64_t bytes) { return (double)((bytes * 100 + 1048575) / 1048576) / 100.0; }
double hfl_mib_down(uint64_t bytes) { return (double)(bytes * 100 / 1048576) / 100.0; }

void hfl_test_crash(const char *point, int round) {
    const char *spec = getenv("HFL_TEST_CRASH");
    size_t n = strlen(point);
    if (spec && !strncmp(spec, point, n) && spec[n] == ':' && atoi(spec + n + 1) == round) {
        fprintf(stderr, "HFL_TEST_CRASH: killed at %s in round %d\n", point, round);
        fflush(NULL);
        raise(SIGKILL);
    }
}

void hfl_hex(const uint8_t *b, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) out[2 * i] = digits[b[i] >> 4], out[2 * i + 1] = digits[b[i] & 15];
    out[2 * n] = 0;
}
