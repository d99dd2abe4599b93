/* harness.c: see harness.h. */
#include "tests/integration/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/util.h"

static char tmpdir[256];
/* Every process started: live until reaped (then its status is kept for
 * harness_wait and harness_poll); watched unless the test expects it may fail. */
static struct {
    pid_t pid;
    int live, watched, status, tail_shown;
    char log[400];
} procs[128];
static int n_procs;

const char *harness_tmpdir(void) {
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/hfl-test-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(harness_cleanup); /* a REQUIRE's exit(1), in whichever file, kills what runs */
    }
    return tmpdir;
}

const char *harness_begin(int argc, const char *name) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s HFL_COORDINATOR HFL_CLIENT\n", name);
        exit(2);
    }
    if (access("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: Fashion-MNIST not installed\n");
        exit(77);
    }
    check_on_stop(harness_stop);
    return harness_tmpdir();
}

pid_t harness_spawn(char *const argv[], const char *log_path) {
    REQUIRE_MSG(n_procs < (int)(sizeof procs / sizeof *procs), "more than %d processes started", n_procs);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (pid > 0) {
        procs[n_procs].pid = pid;
        procs[n_procs].live = 1;
        procs[n_procs].watched = 1;
        procs[n_procs].tail_shown = 0;
        snprintf(procs[n_procs].log, sizeof procs[n_procs].log, "%s", log_path);
        n_procs++;
    }
    return pid;
}

static int find(pid_t pid) {
    for (int i = n_procs - 1; i >= 0; i--)
        if (procs[i].pid == pid) return i;
    return -1;
}

static int status_of(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

/* Reaps pid if it ended: its status, or -2 while it runs. */
static int reap(pid_t pid) {
    int i = find(pid), st;
    if (i >= 0 && !procs[i].live) return procs[i].status; /* reaped before, by harness_watch */
    if (waitpid(pid, &st, WNOHANG) != pid) return -2;
    if (i >= 0) procs[i].live = 0, procs[i].status = status_of(st);
    return status_of(st);
}

void harness_unwatch(pid_t pid) {
    int i = find(pid);
    if (i >= 0) procs[i].watched = 0;
}

/* Prints the last lines of a log, indented, on stderr below the failure. */
static void print_tail(const char *path, int lines) {
    size_t len = 0;
    char err[HFL_ERR_LEN], *text = hfl_read_file(path, &len, err);
    if (!text) {
        fprintf(stderr, "    (%s)\n", err);
        return;
    }
    size_t at = len;
    char *lsan = strstr(text, "-----------------------------------------------------\nSuppressions used:");
    if (lsan) at = (size_t)(lsan - text); /* LeakSanitizer's table of suppressions says nothing about the run */
    while (at > 0 && text[at - 1] == '\n') at--;
    for (int seen = 0; at > 0; at--)
        if (text[at - 1] == '\n' && ++seen == lines) break;
    for (char *line = strtok(text + at, "\n"); line; line = strtok(NULL, "\n")) fprintf(stderr, "    %s\n", line);
    free(text);
}

void harness_fail(pid_t pid, int status, const char *why) {
    int i = find(pid);
    const char *log = i >= 0 ? procs[i].log : "?", *base = strrchr(log, '/');
    base = base ? base + 1 : log;
    int n = (int)strcspn(base, ".");
    char what[64];
    if (status == -1) snprintf(what, sizeof what, "still ran at the time limit");
    else if (status > 128) snprintf(what, sizeof what, "died of signal %d", status - 128);
    else snprintf(what, sizeof what, "exited with %d", status);
    fflush(stdout);
    check_fail(__FILE__, __LINE__, "REQUIRE", "a started process failed", "%s%s%.*s (pid %d) %s; the end of %s:",
               why ? why : "", why ? ": " : "", n, base, (int)pid, what, log);
    fflush(stderr);
    if (i >= 0) print_tail(log, 12), procs[i].tail_shown = 1;
    check_stop(1);
}

void harness_stop(void) {
    for (int i = 0; i < n_procs; i++) {
        if (procs[i].tail_shown) continue;
        fprintf(stderr, "  the end of %s (pid %d, %s):\n", procs[i].log, (int)procs[i].pid,
                procs[i].live ? "running" : "ended");
        print_tail(procs[i].log, 12);
    }
    harness_cleanup();
}

void harness_watch(void) {
    for (int i = 0; i < n_procs; i++) {
        if (!procs[i].live || !procs[i].watched) continue;
        int st = reap(procs[i].pid);
        if (st > 0) harness_fail(procs[i].pid, st, NULL);
    }
}

int harness_wait(pid_t pid, double timeout_s) {
    double t0 = hfl_now();
    harness_unwatch(pid); /* its own status is returned, whatever it is */
    for (;;) {
        int st = reap(pid);
        if (st >= 0) return st;
        if (hfl_now() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            int i = find(pid);
            if (i >= 0) procs[i].live = 0, procs[i].status = -1;
            return -1;
        }
        harness_watch(); /* another process failed: no use waiting */
        hfl_sleep_ms(10);
    }
}

int harness_poll(pid_t pid) { return reap(pid); }

pid_t harness_start_coordinator(const char *exe, char *const extra[], char *url, size_t n) {
    char ready[400], log[400];
    snprintf(ready, sizeof ready, "%s/coordinator.url", harness_tmpdir());
    snprintf(log, sizeof log, "%s/coordinator.log", harness_tmpdir());
    unlink(ready);
    char *argv[64];
    int k = 0;
    argv[k++] = (char *)exe;
    argv[k++] = "--ready-file";
    argv[k++] = ready;
    for (int i = 0; extra[i] && k < 62; i++) argv[k++] = extra[i];
    argv[k] = NULL;
    pid_t pid = harness_spawn(argv, log);
    double t0 = hfl_now();
    url[0] = 0;
    while (!url[0] && hfl_now() - t0 < 30) {
        int st = harness_poll(pid);
        if (st >= 0) {
            printf("harness: the coordinator exited with %d before it was ready (%s)\n", st, log);
            return -1;
        }
        FILE *f = fopen(ready, "r");
        if (f) {
            if (!fgets(url, (int)n, f)) url[0] = 0;
            url[strcspn(url, "\n")] = 0;
            fclose(f);
        }
        if (!url[0]) hfl_sleep_ms(20);
    }
    return url[0] ? pid : -1;
}

void harness_cleanup(void) {
    for (int i = 0; i < n_procs; i++)
        if (procs[i].live) {
            kill(procs[i].pid, SIGKILL);
            waitpid(procs[i].pid, NULL, 0);
            procs[i].live = 0;
        }
    n_procs = 0;
    if (tmpdir[0] && !getenv("HFL_KEEP_TMP")) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
        tmpdir[0] = 0;
    }
}
