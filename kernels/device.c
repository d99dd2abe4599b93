/* device.c: the CPU's description from /proc (a GPU's comes from the CUDA
 * module: hfl_cuda_probe, kernels/select.c), and the host memory a process
 * may still take: MemAvailable within its memory cgroup's limits (a
 * container's, a Kubernetes pod's, a Slurm job's). */
#include "kernels/device.h"
#include "kernels/blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HFL_CG_PATH 4096 /* a cgroup path and its file; longer ones are not read */

void hfl_device_probe_cpu(hfl_device_info *info) {
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "model name", 10)) {
                char *colon = strchr(line, ':');
                if (colon) {
                    colon += 1 + (colon[1] == ' ');
                    colon[strcspn(colon, "\n")] = 0;
                    snprintf(info->name, sizeof info->name, "%s", colon);
                }
                break;
            }
        }
        fclose(f);
    }
    /* the kernel set is part of the device: the calibration and the learned
     * overhead (plan/overhead_log.c) differ between OpenBLAS's kernel sets */
    size_t n = strlen(info->name);
    snprintf(info->name + n, sizeof info->name - n, " (OpenBLAS %s)", hfl_blas_core_name());
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    info->cores = cores > 0 ? (int)cores : 1;
    f = fopen("/proc/meminfo", "r");
    if (f) {
        char key[64];
        unsigned long long kb;
        while (fscanf(f, "%63s %llu kB\n", key, &kb) == 2)
            if (!strcmp(key, "MemTotal:")) info->total_bytes = kb * 1024ull;
        fclose(f);
    }
    uint64_t free_bytes;
    info->free_bytes = hfl_host_free_now(&free_bytes) == 0 ? free_bytes : 0;
}

/* The first number in `path` ("max": UINT64_MAX); 0, or -1 when unreadable. */
static int read_bytes(const char *path, uint64_t *v) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char word[32];
    int rc = fscanf(f, "%31s", word) == 1 ? 0 : -1;
    fclose(f);
    if (rc == 0) *v = !strcmp(word, "max") ? UINT64_MAX : strtoull(word, NULL, 10);
    return rc;
}

/* `key`'s value in a "key value" file (memory.stat; /proc/meminfo in kB); 0 when absent. */
static uint64_t read_key(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char k[64];
    unsigned long long v, out = 0;
    while (fscanf(f, "%63s %llu%*[^\n]\n", k, &v) == 2)
        if (!strcmp(k, key)) out = v;
    fclose(f);
    return out;
}

/* What one cgroup level still lets its processes take: its limit (v2: the
 * lower of memory.max and memory.high, above which the kernel throttles and
 * reclaims) less its usage, the file cache not counted (active and
 * inactive: the kernel reclaims it before it fails a charge, as
 * MemAvailable counts it free). UINT64_MAX when the level sets no limit;
 * the limit itself when its usage cannot be read. */
static uint64_t level_room(const char *dir, int v2) {
    char path[HFL_CG_PATH];
    uint64_t limit, high, usage;
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (read_bytes(path, &limit) != 0) limit = UINT64_MAX;
    snprintf(path, sizeof path, "%s/memory.high", dir);
    if (v2 && read_bytes(path, &high) == 0 && high < limit) limit = high;
    if (limit == UINT64_MAX) return UINT64_MAX;
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    if (read_bytes(path, &usage) != 0) return limit;
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    uint64_t cache = read_key(path, v2 ? "active_file" : "total_active_file") +
                     read_key(path, v2 ? "inactive_file" : "total_inactive_file");
    uint64_t used = usage > cache ? usage - cache : 0;
    return limit > used ? limit - used : 0;
}

/* The least room of the levels from mount/path up to mount (a child's
 * limit does not lift its parent's; in a container the levels above its
 * own are not mounted, and the walk ends at what is). A path that climbs
 * ("..": a process outside its cgroup namespace's root) is not read. */
static uint64_t tree_room(const char *mount, const char *path, int v2) {
    char dir[HFL_CG_PATH];
    size_t root = strlen(mount);
    if (strstr(path, "/..") || snprintf(dir, sizeof dir, "%s%s", mount, path) >= (int)sizeof dir) return UINT64_MAX;
    uint64_t room = UINT64_MAX;
    for (;;) {
        size_t n = strlen(dir);
        while (n > root && dir[n - 1] == '/') dir[--n] = 0;
        uint64_t r = level_room(dir, v2);
        if (r < room) room = r;
        char *slash = strrchr(dir + root, '/');
        if (n <= root || !slash) break;
        *slash = 0;
    }
    return room;
}

int hfl_host_free_bytes(const char *proc, const char *cgroup, uint64_t *out) {
    char path[HFL_CG_PATH];
    snprintf(path, sizeof path, "%s/meminfo", proc);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    fclose(f);
    uint64_t free_bytes = read_key(path, "MemAvailable:") * 1024ull;
    if (!free_bytes) return -1; /* a kernel before 3.14, or no such line */
    snprintf(path, sizeof path, "%s/self/cgroup", proc);
    f = fopen(path, "r");
    if (f) {
        char line[HFL_CG_PATH], mount[HFL_CG_PATH];
        while (fgets(line, sizeof line, f)) {
            /* "hierarchy-ID:controllers:path": "0::/path" is v2's unified
             * hierarchy, "4:memory:/path" v1's memory controller */
            line[strcspn(line, "\n")] = 0;
            char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (!c2) continue;
            *c1 = *c2 = 0;
            const char *controllers = c1 + 1, *cg = c2 + 1;
            uint64_t room = UINT64_MAX;
            if (!strcmp(line, "0") && !*controllers) {
                room = tree_room(cgroup, cg, 1);
            } else {
                char list[256];
                snprintf(list, sizeof list, ",%s,", controllers);
                if (!strstr(list, ",memory,")) continue;
                snprintf(mount, sizeof mount, "%s/memory", cgroup);
                room = tree_room(mount, cg, 0);
            }
            if (room < free_bytes) free_bytes = room;
        }
        fclose(f);
    }
    *out = free_bytes;
    return 0;
}

int hfl_host_free_now(uint64_t *out) {
    const char *cg = getenv("HFL_TEST_CGROUP_ROOT");
    return hfl_host_free_bytes("/proc", cg && *cg ? cg : "/sys/fs/cgroup", out);
}
