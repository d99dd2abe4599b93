/* bench_coord.c: see bench_coord.h. */
#include "bench/bench_coord.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/util.h"

#define BENCH_COORD_MAX_ARGS 64

pid_t bench_coord_start(const char *who, const char *exe, const char *const args[], const char *dir, char *url,
                        size_t url_len) {
    char ready[600], log[600];
    snprintf(ready, sizeof ready, "%s/url", dir);
    snprintf(log, sizeof log, "%s/coordinator.log", dir);
    const char *argv[BENCH_COORD_MAX_ARGS + 4] = {exe};
    int n = 1;
    for (int i = 0; args[i] && n < BENCH_COORD_MAX_ARGS; i++) argv[n++] = args[i];
    argv[n++] = "--ready-file";
    argv[n++] = ready;
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (f) dup2(fileno(stdout), 2);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    url[0] = 0;
    for (double t0 = hfl_now(); pid > 0 && !url[0] && hfl_now() - t0 < 60; hfl_sleep_ms(20)) {
        FILE *f = fopen(ready, "r");
        if (f && fgets(url, (int)url_len, f)) url[strcspn(url, "\n")] = 0;
        if (f) fclose(f);
    }
    if (url[0]) return pid;
    fprintf(stderr, "%s: the coordinator did not start (see %s)\n", who, log);
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return -1;
}

void bench_coord_rss(pid_t pid, double *hwm, double *rss) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    *hwm = *rss = -1;
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "VmHWM:", 6)) *hwm = atof(line + 6) / 1024.0;
        if (!strncmp(line, "VmRSS:", 6)) *rss = atof(line + 6) / 1024.0;
    }
    fclose(f);
}
