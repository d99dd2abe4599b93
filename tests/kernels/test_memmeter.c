/* test_memmeter.c: the resident-memory meter (util/memmeter.h) against
 * memory whose residency is known: N MiB mapped and touched inside a reset
 * window raise the peak by N MiB (within 1 MiB), N MiB mapped but never
 * written raise it by less than 1 MiB, the same through the CPU backend's
 * allocator (touched with mem_touch, and untouched: not resident unless
 * MALLOC_PERTURB_ has glibc fill each block, which it then must be), and
 * after the memory is returned a reset brings the peak back down to the
 * resident size. A window (hfl_mem_window) counts N MiB of private memory
 * touched in it and not M MiB of a file read through a mapping meanwhile,
 * though the peak counts both.
 * The test links no OpenBLAS work and starts no threads, so nothing else
 * grows the process while it measures. Exits 77 (skipped) only where the
 * kernel has no /proc/self/clear_refs at all. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "tests/check.h"
#include "util/memmeter.h"
#include "util/util.h"

#define MIB (1024.0 * 1024.0)

/* Writes one byte per page of [p, p + bytes) (keeping its value), so every
 * page is resident and the meter sees all of it. */
static void mem_touch(void *p, size_t bytes) {
    if (!p || !bytes) return;
    /* Volatile so the compiler cannot drop the stores (it may elide a plain
     * memset into memory that is freed unread, and with it the pages). */
    volatile char *c = p;
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    for (size_t i = 0; i < bytes; i += step) c[i] = c[i];
    c[bytes - 1] = c[bytes - 1];
}

/* Opens a window: resets the peak and returns the resident size. */
static uint64_t window_open(void) {
    char err[HFL_ERR_LEN];
    uint64_t rss = 0;
    CHECK_MSG(hfl_mem_reset_peak(err) == 0 && hfl_mem_read(&rss, NULL, err) == 0, "%s", err);
    return rss;
}

static uint64_t window_growth(uint64_t rss0) {
    char err[HFL_ERR_LEN];
    uint64_t peak = 0;
    CHECK_MSG(hfl_mem_read(NULL, &peak, err) == 0, "%s", err);
    return peak > rss0 ? peak - rss0 : 0;
}

static void test_read(void) {
    char err[HFL_ERR_LEN];
    uint64_t rss = 0, peak = 0;
    CHECK(hfl_mem_read(&rss, &peak, err) == 0);
    CHECK(rss > 0 && peak >= rss);
    CHECK(hfl_mem_read(NULL, NULL, err) == 0);
}

static void test_mmap(size_t mib) {
    size_t bytes = mib << 20;
    uint64_t rss0 = window_open();
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    if (p == MAP_FAILED) return;
    double untouched = window_growth(rss0) / MIB;
    CHECK(untouched < 1.0);
    mem_touch(p, bytes);
    double touched = window_growth(rss0) / MIB;
    CHECK_CLOSE(touched, (double)mib, 1.0, 0.0);
    munmap(p, bytes);

    /* The peak stays until reset; a reset brings it back to what is resident. */
    CHECK(window_growth(rss0) / MIB > mib - 1.0);
    uint64_t rss1 = window_open();
    CHECK(window_growth(rss1) / MIB < 1.0);
    CHECK_CLOSE(rss1 / MIB, rss0 / MIB, 1.0, 0.0);
    printf("test_memmeter: %zu MiB mmap: untouched +%.2f MiB, touched +%.2f MiB\n", mib,
           untouched, touched);
}

/* Through the backend allocator (glibc serves blocks this large with mmap,
 * so they are untouched until written, and returned to the system on free).
 * Under MALLOC_PERTURB_ (which meson test sets by default) glibc fills every
 * block it hands out, so an untouched block is already all resident. */
static void test_backend(size_t mib) {
    const hfl_backend *be = hfl_backend_cpu();
    size_t bytes = mib << 20;
    const char *perturb = getenv("MALLOC_PERTURB_");
    int filled = perturb && atoi(perturb) != 0;
    uint64_t rss0 = window_open();
    void *a = be->alloc(bytes);
    double untouched = window_growth(rss0) / MIB;
    if (filled)
        CHECK_CLOSE(untouched, (double)mib, 1.0, 0.0);
    else
        CHECK(untouched < 1.0);
    be->free(a);
    rss0 = window_open();
    a = be->alloc(bytes);
    mem_touch(a, bytes);
    double touched = window_growth(rss0) / MIB;
    CHECK_CLOSE(touched, (double)mib, 1.0, 0.0);
    be->free(a);
    printf("test_memmeter: %zu MiB backend alloc%s: untouched +%.2f MiB, touched +%.2f MiB\n", mib,
           filled ? " (MALLOC_PERTURB_ set)" : "", untouched, touched);
}

/* Reads one byte per page: file pages map in without becoming private. */
static unsigned read_pages(const volatile char *p, size_t bytes) {
    unsigned sum = 0;
    for (size_t i = 0; i < bytes; i += 4096) sum += (unsigned char)p[i];
    return sum;
}

static void test_window(size_t anon_mib, size_t file_mib) {
    char path[256], err[HFL_ERR_LEN];
    snprintf(path, sizeof path, "/tmp/test_memmeter.%d", (int)getpid());
    size_t fbytes = file_mib << 20, abytes = anon_mib << 20;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd < 0) return;
    unlink(path);
    char block[65536];
    memset(block, 7, sizeof block);
    for (size_t off = 0; off < fbytes; off += sizeof block)
        CHECK(write(fd, block, sizeof block) == (ssize_t)sizeof block); /* now in the page cache */
    char *file = mmap(NULL, fbytes, PROT_READ, MAP_PRIVATE, fd, 0);
    char *anon = mmap(NULL, abytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(file != MAP_FAILED && anon != MAP_FAILED);
    if (file == MAP_FAILED || anon == MAP_FAILED) return;
    hfl_mem_window w;
    uint64_t growth = 0, peak0 = 0, peak1 = 0;
    CHECK(hfl_mem_window_begin(&w, err) == 0);
    CHECK(hfl_mem_read(NULL, &peak0, err) == 0);
    CHECK(read_pages(file, fbytes) == 7u * (unsigned)(fbytes / 4096));
    mem_touch(anon, abytes);
    CHECK(hfl_mem_read(NULL, &peak1, err) == 0);
    CHECK(hfl_mem_window_growth(&w, &growth, err) == 0);
    double peak_mib = (double)(peak1 - peak0) / MIB, private_mib = growth / MIB;
    CHECK_CLOSE(peak_mib, (double)(anon_mib + file_mib), 1.0, 0.0);
    CHECK_CLOSE(private_mib, (double)anon_mib, 1.0, 0.0);
    printf("test_memmeter: window over %zu MiB private + %zu MiB file: peak +%.2f MiB, private +%.2f MiB\n",
           anon_mib, file_mib, peak_mib, private_mib);
    munmap(file, fbytes);
    munmap(anon, abytes);
    close(fd);
}

static void case_mmap(void) {
    test_mmap(64);
    test_mmap(8);
}

static void case_backend(void) { test_backend(48); }
static void case_window(void) { test_window(8, 16); }

static const check_case cases[] = {
    {"read", test_read},
    {"mmap", case_mmap},
    {"backend", case_backend},
    {"window", case_window},
};

int main(int argc, char **argv) {
    if (access("/proc/self/clear_refs", F_OK) != 0) {
        printf("test_memmeter: skipped: no /proc/self/clear_refs (%s)\n", strerror(errno));
        return 77;
    }
    char err[HFL_ERR_LEN];
    REQUIRE_MSG(hfl_mem_reset_peak(err) == 0, "%s", err);
    return check_run("test_memmeter", cases, CHECK_CASES(cases), argc, argv);
}
