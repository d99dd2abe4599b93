/* memmeter.c: VmRSS and VmHWM from /proc/self/status, and the peak's reset
 * through /proc/self/clear_refs (see memmeter.h for what they count). */
#include "util/memmeter.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

int hfl_mem_reset_peak(char *err) {
#ifdef __linux__
    /* "5" resets the peak RSS (fs/proc/task_mmu.c, CLEAR_REFS_MM_HIWATER_RSS).
     * The kernel acts on write(), so a short or failed write is the error to
     * report; stdio buffering would hide it until fclose. */
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return hfl_errf(err, "cannot open /proc/self/clear_refs: %s", strerror(errno));
    setvbuf(f, NULL, _IONBF, 0);
    int bad = fputs("5", f) == EOF;
    int saved = errno;
    if (fclose(f) != 0 && !bad) bad = 1, saved = errno;
    if (bad)
        return hfl_errf(err, "cannot reset the peak RSS: writing 5 to /proc/self/clear_refs: %s",
                        strerror(saved));
    return 0;
#else
    return hfl_errf(err, "cannot reset the peak RSS: /proc/self/clear_refs is Linux-only");
#endif
}

/* "VmHWM:\t  1234 kB" -> bytes; 0 when line is not the field. */
static int parse_kb_field(const char *line, const char *key, uint64_t *bytes) {
    size_t n = strlen(key);
    if (strncmp(line, key, n) != 0 || line[n] != ':') return 0;
    unsigned long long kb;
    char unit[8];
    if (sscanf(line + n + 1, "%llu %7s", &kb, unit) != 2 || strcmp(unit, "kB") != 0) return -1;
    *bytes = (uint64_t)kb * 1024u;
    return 1;
}

int hfl_mem_read(uint64_t *rss, uint64_t *peak, char *err) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return hfl_errf(err, "cannot open /proc/self/status: %s", strerror(errno));
    char line[256];
    uint64_t v_rss = 0, v_hwm = 0;
    int have_rss = 0, have_hwm = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        int r = parse_kb_field(line, "VmRSS", &v_rss);
        if (r == 1) have_rss = 1;
        int h = parse_kb_field(line, "VmHWM", &v_hwm);
        if (h == 1) have_hwm = 1;
        if (r < 0 || h < 0) bad = 1;
    }
    fclose(f);
    if (bad) return hfl_errf(err, "/proc/self/status: malformed VmRSS or VmHWM line");
    if (!have_rss || !have_hwm)
        return hfl_errf(err, "/proc/self/status has no %s line", have_rss ? "VmHWM" : "VmRSS");
    if (rss) *rss = v_rss;
    if (peak) *peak = v_hwm;
    return 0;
}

void hfl_mem_touch(void *p, size_t bytes) {
    if (!p || !bytes) return;
    /* Volatile so the compiler cannot drop the stores (it may elide a plain
     * memset into memory that is freed unread, and with it the pages). */
    volatile char *c = p;
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    for (size_t i = 0; i < bytes; i += step) c[i] = c[i];
    c[bytes - 1] = c[bytes - 1];
}
