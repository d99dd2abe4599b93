/* sum_place.c: where the round's exact sum lives, in memory or on disk
 * (--sum-on-disk; coordinator/aggregate.h, ON DISK).
 *
 * On disk the sum's file takes a round's accepted update bodies, in the
 * spool directory. That is only a saving where the directory is a disk
 * with room for them: on a tmpfs or ramfs the file is memory again, outside
 * the process, and a full disk would refuse updates the sum in memory
 * would have taken. So auto (for sums of COORD_DISK_SUM_BYTES or more)
 * keeps the sum in memory there, saying why in one line; on goes to disk
 * all the same, with the same line as a warning. */
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

#include "coordinator/coord.h"
#include "coordinator/spool.h"
#include "util/util.h"

/* Why dir cannot take a round's updates as a disk would (into why), or 0. */
static int sum_dir_unfit(const coord *c, const char *dir, char *why, size_t cap) {
    struct statfs fs;
    if (statfs(dir, &fs) != 0) return 0; /* the file's making says what is wrong with dir */
    if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
        snprintf(why, cap, "%s is a %s, which keeps the file in memory", dir,
                 fs.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs");
        return 1;
    }
    /* a round's drawn clients' updates, each at most the largest this model takes */
    double drawn = c->cfg.clients_per_round * (1 + c->cfg.over_select);
    double need = drawn * (double)coord_max_payload(c), room;
    if ((room = (double)fs.f_bavail * (double)fs.f_bsize) < need) {
        snprintf(why, cap, "%s has %.1f GiB free, under a round's %.0f updates of up to %.1f MiB", dir,
                 room / 1073741824.0, drawn, coord_max_payload(c) / 1048576.0);
        return 1;
    }
    return 0;
}

int sum_place(coord *c, char *err) {
    const char *w = c->cfg.sum_on_disk, *test = getenv("HFL_TEST_SUM_BLOCK");
    /* a tier's sums are read and added whole (tier.c, upstream.c): in memory */
    int can = c->be->host_memory && c->rule.kind == HFL_RULE_FEDAVG && !c->cfg.secure_agg && !c->cfg.tier &&
              !c->cfg.upstream[0];
    int on = !strcmp(w, "on"), big = 8 * c->spec.n_trainable >= COORD_DISK_SUM_BYTES;
    if (!on && !(!strcmp(w, "auto") && can && big)) return 0; /* "": an in-process test's, off */
    if (!can) return hfl_errf(err, "--sum-on-disk on: only where the CPU aggregates fedavg without --secure-agg, "
                                   "and not in a tier");
    /* HFL_TEST_SUM_BLOCK=V (tests): V values a block, so a small model spans several */
    long block = 0;
    char why[HFL_ERR_LEN];
    if (test && hfl_parse_int(test, 1, (long)c->spec.n_trainable, &block, why) != 0)
        return hfl_errf(err, "HFL_TEST_SUM_BLOCK: %s", why);
    const char *dir = spool_dir(c);
    if (sum_dir_unfit(c, dir, why, sizeof why)) {
        if (!on) {
            fprintf(stderr, "hfl-coordinator: the sum stays in memory: %s (--spool-dir on a disk)\n", why);
            return 0;
        }
        fprintf(stderr, "hfl-coordinator: --sum-on-disk on, but %s\n", why);
    }
    if (hfl_agg_on_disk(&c->agg, dir, (size_t)block, why) != 0) return hfl_errf(err, "--sum-on-disk: %s", why);
    return 0;
}
