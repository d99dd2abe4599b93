/* test_host_free.c: hfl_host_free_bytes (kernels/device.h) on /proc and
 * cgroup trees written here, in the kernel's formats (Documentation/admin-
 * guide/cgroup-v2.rst: memory.max "max" or bytes, memory.current,
 * memory.stat "inactive_file N"; cgroup-v1/memory.rst: memory.limit_in_bytes,
 * memory.usage_in_bytes, "total_inactive_file N"; /proc/self/cgroup
 * "ID:controllers:path"). The oracle is each case's sum by hand, in MiB.
 * One case reads this machine's own /proc: never more than MemAvailable. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/device.h"
#include "tests/check.h"

#define MiB (1024ull * 1024ull)

static char root[256];

/* Writes root/rel (its folders made), printf-style. */
__attribute__((format(printf, 2, 3))) static void put(const char *rel, const char *fmt, ...) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    if (!CHECK_MSG(f != NULL, "%s", path)) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

/* A fresh tree with MemAvailable `avail_mib` and /proc/self/cgroup `self`. */
static void fresh(unsigned avail_mib, const char *self) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    mkdir(root, 0755);
    put("proc/meminfo", "MemTotal:       %u kB\nMemFree:        1024 kB\nMemAvailable:   %u kB\nBuffers:  0 kB\n",
        4 * avail_mib * 1024, avail_mib * 1024);
    put("proc/self/cgroup", "%s", self);
}

#define UNKNOWN UINT64_MAX /* free_now: hfl_host_free_bytes could not tell */

static uint64_t free_now(void) {
    char proc[300], cg[300];
    snprintf(proc, sizeof proc, "%s/proc", root);
    snprintf(cg, sizeof cg, "%s/cg", root);
    uint64_t v;
    return hfl_host_free_bytes(proc, cg, &v) == 0 ? v : UNKNOWN;
}

/* No limit anywhere: MemAvailable. */
static void test_no_limit(void) {
    fresh(1000, "0::/\n");
    put("cg/memory.max", "max\n");
    put("cg/memory.current", "%llu\n", 50 * MiB);
    CHECK_MSG(free_now() == 1000 * MiB, "%llu", (unsigned long long)free_now());
    fresh(700, "0::/user.slice\n"); /* no files at all */
    CHECK(free_now() == 700 * MiB);
}

/* v2: a pod's limit, usage with reclaimable cache, a parent's tighter limit. */
static void test_v2(void) {
    fresh(1000, "0::/kubepods/pod1/c1\n");
    put("cg/kubepods/pod1/c1/memory.max", "%llu\n", 512 * MiB);
    put("cg/kubepods/pod1/c1/memory.current", "%llu\n", 200 * MiB);
    put("cg/kubepods/pod1/c1/memory.stat", "anon 100\nfile 150\ninactive_file %llu\nactive_file %llu\nslab 9\n",
        50 * MiB, 20 * MiB);
    CHECK_MSG(free_now() == (512 - 130) * MiB, "%.1f MiB", free_now() / (double)MiB);
    /* memory.high below memory.max: the kernel throttles above it */
    put("cg/kubepods/pod1/c1/memory.high", "%llu\n", 400 * MiB);
    CHECK_MSG(free_now() == (400 - 130) * MiB, "%.1f MiB", free_now() / (double)MiB);
    put("cg/kubepods/pod1/c1/memory.high", "max\n");
    CHECK(free_now() == (512 - 130) * MiB);
    /* the pod above it leaves 300 - 250 = 50 */
    put("cg/kubepods/pod1/memory.max", "%llu\n", 300 * MiB);
    put("cg/kubepods/pod1/memory.current", "%llu\n", 250 * MiB);
    CHECK_MSG(free_now() == 50 * MiB, "%.1f MiB", free_now() / (double)MiB);
    /* MemAvailable lower still */
    put("proc/meminfo", "MemAvailable:   %llu kB\n", 20 * 1024ull);
    CHECK(free_now() == 20 * MiB);
    /* usage over the limit: nothing left (known), not a wrapped figure */
    fresh(1000, "0::/a/\n");
    put("cg/a/memory.max", "%llu\n", 64 * MiB);
    put("cg/a/memory.current", "%llu\n", 80 * MiB);
    CHECK(free_now() == 0);
    /* a limit whose usage cannot be read still bounds */
    fresh(1000, "0::/b\n");
    put("cg/b/memory.max", "%llu\n", 64 * MiB);
    CHECK(free_now() == 64 * MiB);
    /* a path that climbs out of the mount is not read */
    fresh(1000, "0::/../escape\n");
    put("escape/memory.max", "%llu\n", 1 * MiB);
    put("escape/memory.current", "0\n");
    CHECK_MSG(free_now() == 1000 * MiB, "%.1f MiB", free_now() / (double)MiB);
    /* a root-level limit (a container's own cgroup namespace: "0::/") */
    fresh(1000, "0::/\n");
    put("cg/memory.max", "%llu\n", 256 * MiB);
    put("cg/memory.current", "%llu\n", 56 * MiB);
    CHECK(free_now() == 200 * MiB);
}

/* v1: the memory controller's own mount, the hierarchical cache figure, the
 * "unlimited" value, and a hybrid host with both lines. */
static void test_v1(void) {
    fresh(1000, "12:pids:/x\n4:cpu,memory:/slurm/uid_0/job_7\n1:name=systemd:/\n0::/\n");
    put("cg/memory/slurm/uid_0/job_7/memory.limit_in_bytes", "%llu\n", 128 * MiB);
    put("cg/memory/slurm/uid_0/job_7/memory.usage_in_bytes", "%llu\n", 100 * MiB);
    put("cg/memory/slurm/uid_0/job_7/memory.stat", "inactive_file %llu\nactive_file %llu\ntotal_inactive_file %llu\n"
        "total_active_file %llu\n", 1 * MiB, 2 * MiB, 20 * MiB, 10 * MiB);
    put("cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("cg/memory/memory.usage_in_bytes", "%llu\n", 900 * MiB);
    CHECK_MSG(free_now() == 58 * MiB, "%.1f MiB", free_now() / (double)MiB);
    /* a v2 line limits too, where the unified hierarchy has memory */
    put("cg/memory.max", "%llu\n", 40 * MiB);
    put("cg/memory.current", "%llu\n", 0ull);
    CHECK(free_now() == 40 * MiB);
    /* "memory" must be a controller of its own, not a prefix */
    fresh(1000, "4:memoryx:/a\n");
    put("cg/memory/a/memory.limit_in_bytes", "%llu\n", 1 * MiB);
    put("cg/memory/a/memory.usage_in_bytes", "0\n");
    CHECK(free_now() == 1000 * MiB);
}

/* No /proc/meminfo: unknown, whatever the cgroup says. */
static void test_unreadable(void) {
    fresh(1000, "0::/\n");
    char path[300];
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    remove(path);
    put("cg/memory.max", "%llu\n", 64 * MiB);
    put("cg/memory.current", "0\n");
    CHECK(free_now() == UNKNOWN);
}

/* This machine: known, and at most its MemAvailable, read here from
 * /proc/meminfo by the test's own parse (plus 1 GiB: other processes move
 * memory between the two readings). */
static void test_this_machine(void) {
    uint64_t mine, avail = 0;
    CHECK(hfl_host_free_bytes("/proc", "/sys/fs/cgroup", &mine) == 0);
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "MemAvailable:", 13)) avail = strtoull(line + 13, NULL, 10) * 1024;
    if (f) fclose(f);
    CHECK_MSG(avail > 0 && mine <= avail + 1024 * MiB, "%llu of %llu", (unsigned long long)mine, (unsigned long long)avail);
}

static const check_case cases[] = {
    {"no_limit", test_no_limit}, {"v2", test_v2}, {"v1", test_v1},
    {"unreadable", test_unreadable}, {"this_machine", test_this_machine},
};

int main(int argc, char **argv) {
    snprintf(root, sizeof root, "/tmp/hfl-test-host-free-%d", (int)getpid());
    int rc = check_run("test_host_free", cases, CHECK_CASES(cases), argc, argv);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return rc;
}
