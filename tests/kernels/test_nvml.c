/* test_nvml.c: the NVML loader (kernels/nvml.c) on a machine without the
 * NVIDIA driver.
 *
 * Without the library every query fails with one line and nothing else
 * breaks: hfl_nvml_process_bytes says "NVML unavailable: cannot open ...",
 * and so does the CPU backend's hfl_backend_process_bytes, with its own
 * reason. With the stand-in library fake_nvml.c (argv[1], loaded through
 * $HFL_NVML_LIBRARY) the loader must find this process among 20 (growing
 * its buffer past the first 16), sum its two entries, and refuse a process
 * that is not listed, has no figure, or a device that is not there. Each
 * case runs in a child process, since the library is loaded once per
 * process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/nvml.h"
#include "kernels/select.h"
#include "tests/check.h"
#include "util/util.h"

typedef struct {
    int rc;
    uint64_t bytes;
    char why[HFL_ERR_LEN];
} nvml_answer;

/* hfl_nvml_process_bytes(bus, getpid()) in a child whose $HFL_NVML_LIBRARY is
 * lib (NULL: unset) and $FAKE_NVML mode. */
static nvml_answer ask(const char *lib, const char *mode, const char *bus) {
    nvml_answer a = {.rc = -2};
    int fd[2];
    if (!CHECK(pipe(fd) == 0)) return a;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (lib) setenv("HFL_NVML_LIBRARY", lib, 1);
        else unsetenv("HFL_NVML_LIBRARY");
        setenv("FAKE_NVML", mode, 1);
        nvml_answer r = {0};
        r.rc = hfl_nvml_process_bytes(bus, (long)getpid(), &r.bytes, r.why, sizeof r.why);
        _exit(write(fd[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    if (read(fd[0], &a, sizeof a) != (ssize_t)sizeof a) a.rc = -2;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    printf("%-28s %-9s %-14s -> %d %llu %s\n", lib ? strrchr(lib, '/') ? strrchr(lib, '/') + 1 : lib : "(default)",
           mode, bus, a.rc, (unsigned long long)a.bytes, a.why);
    return a;
}

static void test_unavailable(void) {
    nvml_answer a = ask("/nonexistent/libnvidia-ml.so.1", "list", "0000:3B:00.0");
    CHECK(a.rc == -1 && strstr(a.why, "NVML unavailable: cannot open /nonexistent/libnvidia-ml.so.1"));
    /* a library that is not NVML: libm has none of its functions */
    a = ask("libm.so.6", "list", "0000:3B:00.0");
    CHECK(a.rc == -1 && strstr(a.why, "NVML unavailable: libm.so.6 lacks nvmlInit_v2"));
    /* this machine's own: no driver here, and on a GPU machine no compute
     * context in the child; either way one line, never a crash */
    a = ask(NULL, "list", "0000:3B:00.0");
    CHECK(a.rc == -1 && a.why[0]);
    char why[HFL_ERR_LEN] = "";
    uint64_t bytes = 7;
    CHECK(hfl_backend_process_bytes(hfl_backend_cpu(), &bytes, why) == -1 && bytes == 7);
    CHECK(strstr(why, "cpu backend") != NULL);
}

static void test_fake(const char *fake) {
    nvml_answer a = ask(fake, "list", "0000:3b:00.0");
    CHECK_MSG(a.rc == 0 && a.bytes == 1234, "rc %d bytes %llu", a.rc, (unsigned long long)a.bytes);
    a = ask(fake, "absent", "0000:3b:00.0");
    CHECK(a.rc == -1 && strstr(a.why, "does not list this process") && strstr(a.why, "among the 20"));
    a = ask(fake, "nofigure", "0000:3b:00.0");
    CHECK(a.rc == -1 && strstr(a.why, "no memory figure"));
    a = ask(fake, "zero", "0000:3b:00.0");
    CHECK(a.rc == -1 && strstr(a.why, "no memory figure"));
    a = ask(fake, "list", "0000:af:00.0");
    CHECK(a.rc == -1 && strstr(a.why, "no device at PCI bus id 0000:af:00.0: Not Found"));
    a = ask(fake, "list", "");
    CHECK(a.rc == -1 && strstr(a.why, "no PCI bus id"));
    a = ask(fake, "initfail", "0000:3b:00.0");
    CHECK(a.rc == -1 && strstr(a.why, "NVML unavailable: nvmlInit_v2 failed: Driver Not Loaded"));
}

static const char *fake_library; /* argv[1]: the stand-in NVML library */

static void case_fake(void) { test_fake(fake_library); }

static const check_case cases[] = {
    {"unavailable", test_unavailable},
    {"fake", case_fake},
};

int main(int argc, char **argv) {
    REQUIRE_MSG(argc == 2, "usage: test_nvml FAKE_NVML_LIBRARY");
    fake_library = argv[1];
    /* argv holds the library's path, not case names: argc 0, cases from HFL_TEST_CASE */
    return check_run("test_nvml", cases, CHECK_CASES(cases), 0, argv);
}
