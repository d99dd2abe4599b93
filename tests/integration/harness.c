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
static pid_t pids[64];
static int n_pids;

const char *harness_tmpdir(void) {
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/hfl-test-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
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
    check_on_stop(harness_cleanup);
    return harness_tmpdir();
}

pid_t harness_spawn(char *const argv[], const char *log_path) {
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
    if (pid > 0 && n_pids < 64) pids[n_pids++] = pid;
    return pid;
}

static void forget(pid_t pid) {
    for (int i = 0; i < n_pids; i++)
        if (pids[i] == pid) pids[i] = 0;
}

int harness_wait(pid_t pid, double timeout_s) {
    double t0 = hfl_now();
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            forget(pid);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (hfl_now() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            forget(pid);
            return -1;
        }
        hfl_sleep_ms(10);
    }
}

int harness_poll(pid_t pid) {
    int st;
    if (waitpid(pid, &st, WNOHANG) != pid) return -2;
    forget(pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

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
    for (int i = 0; i < n_pids; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
    n_pids = 0;
    if (tmpdir[0] && !getenv("HFL_KEEP_TMP")) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
    }
}
