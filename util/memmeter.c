/* memmeter.c: VmRSS and VmHWM from /proc/self/status, and the peak's reset
 * through /proc/self/clear_refs (see memmeter.h for what they count). */
#include "util/memmeter.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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

/* VmRSS, VmHWM and RssFile from /proc/self/status; any pointer may be NULL. */
static int read_status(uint64_t *rss, uint64_t *peak, uint64_t *file, char *err) {
    static const char *keys[3] = {"VmRSS", "VmHWM", "RssFile"};
    uint64_t v[3] = {0, 0, 0};
    int have[3] = {0, 0, 0}, bad = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return hfl_errf(err, "cannot open /proc/self/status: %s", strerror(errno));
    char line[256];
    while (fgets(line, sizeof line, f)) {
        for (int k = 0; k < 3; k++) {
            int r = parse_kb_field(line, keys[k], &v[k]);
            if (r == 1) have[k] = 1;
            if (r < 0) bad = 1;
        }
    }
    fclose(f);
    if (bad) return hfl_errf(err, "/proc/self/status: malformed VmRSS, VmHWM or RssFile line");
    uint64_t *out[3] = {rss, peak, file};
    for (int k = 0; k < 3; k++) {
        if (!out[k]) continue;
        if (!have[k]) return hfl_errf(err, "/proc/self/status has no %s line", keys[k]);
        *out[k] = v[k];
    }
    return 0;
}

int hfl_mem_read(uint64_t *rss, uint64_t *peak, char *err) {
    return read_status(rss, peak, NULL, err);
}

int hfl_mem_window_begin(hfl_mem_window *w, char *err) {
    return hfl_mem_reset_peak(err) == 0 ? read_status(&w->rss0, NULL, &w->file0, err) : -1;
}

int hfl_mem_window_growth(const hfl_mem_window *w, uint64_t *growth, char *err) {
    uint64_t peak, file;
    if (read_status(NULL, &peak, &file, err) != 0) return -1;
    uint64_t mapped = file > w->file0 ? file - w->file0 : 0;
    *growth = peak > w->rss0 + mapped ? peak - w->rss0 - mapped : 0;
    return 0;
}
