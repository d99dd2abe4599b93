/* spool.c: an update coming in chunks, held in a file (spool.h). */
#include "coordinator/spool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

void spool_drop(coord_client *cl) {
    struct coord_spool *sp = cl->spool;
    if (!sp) return;
    close(sp->fd);
    mbedtls_sha256_free(&sp->h);
    free(sp);
    cl->spool = NULL;
}

int late_fold_ok(const coord *c, int id, int64_t round) {
    const coord_round *r = &c->r;
    int64_t tau = r->round - round; /* rounds late */
    return r->open && tau >= 1 && c->clients[id].late_round == round &&
           (c->cfg.async_concurrency > 0 ? tau <= COORD_ASYNC_MAX_STALENESS : c->cfg.late_fold && tau == 1);
}

int spool_round_ok(const coord *c, int id, int64_t round) {
    const coord_round *r = &c->r;
    if (r->open && round == r->round) return r->slot[id].tasked && !r->slot[id].received && !r->slot[id].refused;
    return late_fold_ok(c, id, round);
}

const char *spool_dir(const coord *c) {
    const char *tmp = getenv("TMPDIR");
    return c->cfg.spool_dir[0] ? c->cfg.spool_dir : c->cfg.state_dir[0] ? c->cfg.state_dir : tmp && tmp[0] ? tmp : "/tmp";
}

/* A new file in the spool directory, unlinked at once (nothing is left
 * behind however the coordinator ends); -1 with errno. */
static int spool_file(const coord *c) {
    char path[1100];
    snprintf(path, sizeof path, "%s/hfl-spool-XXXXXX", spool_dir(c));
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0) unlink(path);
    return fd;
}

int spool_check_dir(const coord *c, char *err) {
    int fd = spool_file(c);
    if (fd < 0) return hfl_errf(err, "--spool-dir %s: cannot make a file there: %s", spool_dir(c), strerror(errno));
    close(fd);
    return 0;
}

void spool_sweep(coord *c) {
    for (int i = 0; i < c->n_clients; i++)
        if (c->clients[i].spool && !spool_round_ok(c, i, c->clients[i].spool->round)) spool_drop(&c->clients[i]);
}

struct coord_spool *spool_open(const coord *c, int64_t round, size_t len, const char *sha, char *err) {
    int fd = spool_file(c);
    if (fd < 0) {
        hfl_errf(err, "cannot make a spool file in %s: %s", spool_dir(c), strerror(errno));
        return NULL;
    }
    int rc = posix_fallocate(fd, 0, (off_t)len);
    if (rc != 0) {
        close(fd);
        hfl_errf(err, "cannot reserve %zu bytes of spool: %s", len, strerror(rc));
        return NULL;
    }
    struct coord_spool *sp = hfl_calloc(1, sizeof *sp);
    sp->fd = fd, sp->round = round, sp->len = len;
    snprintf(sp->sha, sizeof sp->sha, "%s", sha);
    mbedtls_sha256_init(&sp->h);
    mbedtls_sha256_starts_ret(&sp->h, 0);
    return sp;
}

int spool_write(struct coord_spool *sp, const uint8_t *b, size_t n, char *err) {
    if (hfl_pwrite_all(sp->fd, b, n, sp->have, err) != 0) return -1;
    mbedtls_sha256_update_ret(&sp->h, b, n);
    sp->have += n;
    if (sp->have == sp->len) {
        uint8_t d[32];
        mbedtls_sha256_finish_ret(&sp->h, d);
        hfl_hex(d, sizeof d, sp->got);
    }
    return 0;
}

