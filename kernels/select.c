/* select.c: which backend a process runs on (kernels/select.h), and the
 * loader of the CUDA module libhfl_cuda.so (kernels/cuda_module.h).
 *
 * The module is looked for, in order, at $HFL_CUDA_MODULE (when set, the
 * only place), then relative to the executable: ../lib (a bundle), . and
 * ../kernels/cuda (the build tree's programs live in build/<dir>/), and last
 * where this build put it (HFL_CUDA_MODULE_BUILD_PATH, set by meson). The
 * first file that loads and carries our ABI wins; a file that exists but
 * does not load (no cuBLAS, wrong CUDA major) is reported if none loads.
 * Loading, probing and opening happen once per process, on the first
 * "auto" or "cuda" request, and the outcome is kept: "cpu" never loads
 * CUDA. The module gets the process-wide budget functions of budget.h.
 *
 * Before the module is loaded, the NVIDIA driver's own small library
 * (libcuda.so.1) is asked whether there is a GPU at all (cuInit,
 * cuDeviceGetCount: driver API calls as old as CUDA itself). Loading the
 * module maps cuBLAS, whose relocations alone cost ~95 MiB of private memory
 * in every process (measured: hfl-client --plan, --device auto, 223 MiB peak
 * RSS against 6 MiB with --device cpu); on a machine without a GPU that was
 * paid for nothing, by every client of a simulated fleet.
 *
 * What the process holds on the GPU it opened comes from NVML
 * (kernels/nvml.h, loaded the same way), found by the PCI bus id the
 * module's probe gives (hfl_backend_process_bytes). */
#include "kernels/select.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/budget.h"
#include "kernels/cuda_module.h"
#include "kernels/nvml.h"
#include "util/util.h"

#ifndef HFL_CUDA_MODULE_BUILD_PATH
#define HFL_CUDA_MODULE_BUILD_PATH ""
#endif
#define SELECT_MODULE_FILE "libhfl_cuda.so"

static pthread_mutex_t select_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int loaded; /* 0: not tried, 1: mod is ours, -1: failed (load_err) */
    const hfl_cuda_module *mod;
    char load_err[HFL_ERR_LEN];
    int opened; /* 0: not tried, 1: be works, -1: failed (open_err) */
    const hfl_backend *be;
    hfl_device_info info; /* the device be runs on, as probed at open */
    char open_err[HFL_ERR_LEN];
} select_cuda;

static const hfl_cuda_host select_host = {
    .abi = HFL_CUDA_MODULE_ABI,
    .budget_reserve = hfl_budget_reserve,
    .budget_commit = hfl_budget_commit,
    .budget_release = hfl_budget_release,
};

static int select_driver_gpus(char *reason, size_t n);

/* 1: no file at path; 0: loaded into select_cuda.mod; -1 with err (also when
 * the driver sees no GPU: the module found is then not loaded at all). */
static int select_load_at(const char *path, char *err) {
    if (access(path, F_OK) != 0) return 1;
    char why[HFL_ERR_LEN];
    if (select_driver_gpus(why, sizeof why) == 0)
        return hfl_errf(err, "%s; the CUDA module %s was found and not loaded", why, path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return hfl_errf(err, "CUDA module %s does not load (%s)", path, dlerror());
    const hfl_cuda_module *(*entry)(void);
    void *sym = dlsym(h, HFL_CUDA_MODULE_SYMBOL);
    memcpy(&entry, &sym, sizeof entry); /* POSIX: a data pointer to a function pointer */
    const hfl_cuda_module *m = sym ? entry() : NULL;
    if (!m || m->abi != HFL_CUDA_MODULE_ABI) {
        dlclose(h);
        if (!sym) return hfl_errf(err, "CUDA module %s has no %s", path, HFL_CUDA_MODULE_SYMBOL);
        return hfl_errf(err, "CUDA module %s is from another hfl (interface %d, want %d)", path,
                        m ? m->abi : -1, HFL_CUDA_MODULE_ABI);
    }
    select_cuda.mod = m; /* never closed: the backend lives as long as the process */
    return 0;
}

static int select_driver_ask(char *reason, size_t n);

/* How many GPUs the NVIDIA driver sees (asked once per process); 0 with
 * reason when none, or no driver. The library stays loaded (the module will
 * use it). */
static int select_driver_gpus(char *reason, size_t n) {
    static int asked, gpus_seen;
    static char said[HFL_ERR_LEN];
    if (asked) {
        snprintf(reason, n, "%s", said);
        return gpus_seen;
    }
    asked = 1;
    gpus_seen = select_driver_ask(said, sizeof said);
    snprintf(reason, n, "%s", said);
    return gpus_seen;
}

/* select_driver_gpus' one look at the driver. */
static int select_driver_ask(char *reason, size_t n) {
    reason[0] = 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(reason, n, "no NVIDIA driver (cannot open libcuda.so.1)");
        return 0;
    }
    int (*init)(unsigned), (*count)(int *);
    void *si = dlsym(h, "cuInit"), *sc = dlsym(h, "cuDeviceGetCount");
    memcpy(&init, &si, sizeof init); /* POSIX: a data pointer to a function pointer */
    memcpy(&count, &sc, sizeof count);
    int gpus = 0, rc = si && sc ? init(0) : -1;
    if (rc == 0) rc = count(&gpus);
    if (rc != 0) snprintf(reason, n, "no CUDA GPU found (the NVIDIA driver's cuInit/cuDeviceGetCount failed: error %d)", rc);
    else if (gpus == 0) snprintf(reason, n, "no CUDA GPU found (the NVIDIA driver sees none)");
    return rc == 0 ? gpus : 0;
}

static void select_load_locked(void) {
    if (select_cuda.loaded) return;
    select_cuda.loaded = -1;
    char *err = select_cuda.load_err, e[HFL_ERR_LEN] = "";
    const char *env = getenv("HFL_CUDA_MODULE");
    if (env && env[0]) {
        int rc = select_load_at(env, e);
        if (rc == 0) select_cuda.loaded = 1;
        else if (rc > 0) hfl_errf(err, "CUDA module not found (HFL_CUDA_MODULE=%s: no such file)", env);
        else hfl_errf(err, "%s", e);
        return;
    }
    char dir[1024], path[4][1100];
    int n = 0;
    if (hfl_exe_dir(dir, sizeof dir) == 0) {
        snprintf(path[n++], sizeof path[0], "%s/../lib/%s", dir, SELECT_MODULE_FILE);
        snprintf(path[n++], sizeof path[0], "%s/%s", dir, SELECT_MODULE_FILE);
        snprintf(path[n++], sizeof path[0], "%s/../kernels/cuda/%s", dir, SELECT_MODULE_FILE);
    }
    if (HFL_CUDA_MODULE_BUILD_PATH[0]) snprintf(path[n++], sizeof path[0], "%s", HFL_CUDA_MODULE_BUILD_PATH);
    for (int i = 0; i < n; i++) {
        int rc = select_load_at(path[i], e[0] ? NULL : e); /* keep the first failure */
        if (rc == 0) {
            select_cuda.loaded = 1;
            return;
        }
    }
    if (e[0]) hfl_errf(err, "%s", e);
#ifdef HFL_HAVE_CUDA
    else hfl_errf(err, "CUDA module not found (no %s beside the executable or in the build tree)", SELECT_MODULE_FILE);
#else
    else hfl_errf(err, "CUDA module not found (hfl was built without CUDA)");
#endif
}

int hfl_cuda_probe(hfl_device_info *info, char *reason, int reason_len) {
    pthread_mutex_lock(&select_lock);
    select_load_locked();
    int rc = -1;
    if (select_cuda.loaded > 0) rc = select_cuda.mod->probe(info, reason, reason_len);
    else snprintf(reason, (size_t)reason_len, "%s", select_cuda.load_err);
    pthread_mutex_unlock(&select_lock);
    return rc;
}

/* Loads, probes and opens the CUDA backend, once. */
static void select_open_locked(void) {
    if (select_cuda.opened) return;
    select_cuda.opened = -1;
    select_load_locked();
    if (select_cuda.loaded < 0) {
        snprintf(select_cuda.open_err, sizeof select_cuda.open_err, "%s", select_cuda.load_err);
        return;
    }
    if (select_cuda.mod->probe(&select_cuda.info, select_cuda.open_err, (int)sizeof select_cuda.open_err) != 0) return;
    char e[HFL_ERR_LEN] = "";
    select_cuda.be = select_cuda.mod->open(&select_host, e);
    if (!select_cuda.be) {
        hfl_errf(select_cuda.open_err, "%s", e[0] ? e : "cuda backend: open failed");
        return;
    }
    select_cuda.opened = 1;
}

const hfl_backend *hfl_backend_select(const char *device, hfl_device_info *info, char *why, char *err) {
    if (why) why[0] = 0;
    if (!device || !device[0]) device = "auto";
    int want_cuda = !strcmp(device, "cuda");
    if (!want_cuda && strcmp(device, "auto") != 0) {
        if (!strcmp(device, "cpu")) {
            if (info) hfl_device_probe_cpu(info);
            return hfl_backend_cpu();
        }
        hfl_errf(err, "unknown device '%s' (auto, cpu, cuda)", device);
        return NULL;
    }
    pthread_mutex_lock(&select_lock);
    select_open_locked();
    const hfl_backend *be = select_cuda.opened > 0 ? select_cuda.be : NULL;
    char reason[HFL_ERR_LEN];
    snprintf(reason, sizeof reason, "%s", select_cuda.open_err);
    /* a fresh description (free memory now), else the one taken at open */
    if (be && info && select_cuda.mod->probe(info, reason, (int)sizeof reason) != 0) *info = select_cuda.info;
    pthread_mutex_unlock(&select_lock);
    if (be) return be;
    if (want_cuda) {
        hfl_errf(err, "device cuda unavailable: %s", reason);
        return NULL;
    }
    if (info) {
        hfl_device_probe_cpu(info);
        snprintf(info->fallback_reason, sizeof info->fallback_reason, "%.*s", (int)sizeof info->fallback_reason - 1, reason);
    }
    if (why) hfl_errf(why, "%s", reason);
    return hfl_backend_cpu();
}

/* be is the CUDA backend this process opened (NULL: not it), under the lock. */
static int select_is_cuda(const hfl_backend *be) {
    pthread_mutex_lock(&select_lock);
    int cuda = be && select_cuda.opened > 0 && be == select_cuda.be;
    pthread_mutex_unlock(&select_lock);
    return cuda;
}

int hfl_backend_process_bytes(const hfl_backend *be, uint64_t *bytes, char *why) {
    if (!select_is_cuda(be))
        return hfl_errf(why, "the %s backend's memory is resident host memory, not NVML's",
                        be ? be->name : "cpu");
    char local[HFL_ERR_LEN];
    return hfl_nvml_process_bytes(select_cuda.info.pci_bus_id, (long)getpid(), bytes, why ? why : local,
                                  HFL_ERR_LEN);
}
