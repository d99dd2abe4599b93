/* agg_disk.c: the round's updates kept on disk until the close (agg_disk.h). */
#include "coordinator/agg_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

/* topk entries read back at a time */
#define TOPK_PIECE 65536

int agg_disk_open(agg_disk *d, const char *dir, size_t n, size_t block, char *err) {
    memset(d, 0, sizeof *d);
    d->fd = -1;
    char path[1100];
    snprintf(path, sizeof path, "%s/hfl-sum-XXXXXX", dir);
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) return hfl_errf(err, "cannot make the sum's file in %s: %s", dir, strerror(errno));
    unlink(path);
    d->fd = fd;
    d->n = n;
    d->block = block ? block : AGG_DISK_BLOCK;
    if (d->block > n && n > 0) d->block = n;
    d->acc = malloc(d->block * sizeof *d->acc);
    for (int s = 0; s < HFL_AGG_MAX_BATCH && d->acc; s++)
        if (!(d->x[s] = malloc(d->block * sizeof *d->x[s]))) break;
    if (!d->acc || !d->x[HFL_AGG_MAX_BATCH - 1]) {
        agg_disk_free(d);
        return hfl_errf(err, "cannot allocate the sum's block buffers");
    }
    return 0;
}

/* The round's entries' own memory (topk's block starts). */
static void drop_entries(agg_disk *d) {
    for (int u = 0; u < d->n_e; u++) free(d->e[u].starts);
    d->n_e = 0;
}

void agg_disk_free(agg_disk *d) {
    if (d->fd >= 0) close(d->fd);
    drop_entries(d);
    free(d->e);
    free(d->acc);
    for (int s = 0; s < HFL_AGG_MAX_BATCH; s++) free(d->x[s]), free(d->raw[s]);
    memset(d, 0, sizeof *d);
    d->fd = -1;
}

void agg_disk_reset(agg_disk *d) {
    drop_entries(d);
    int rc = d->end ? ftruncate(d->fd, 0) : 0;
    (void)rc; /* should it fail, only the space stays taken: entries are written over from 0 */
    d->end = 0;
}

/* The next entry, its place the file's end; NULL when memory is short. */
static agg_disk_entry *new_entry(agg_disk *d) {
    if (d->n_e == d->cap_e) {
        int cap = d->cap_e ? 2 * d->cap_e : 64;
        agg_disk_entry *e = realloc(d->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        d->e = e, d->cap_e = cap;
    }
    agg_disk_entry *e = &d->e[d->n_e];
    memset(e, 0, sizeof *e);
    e->off = d->end;
    return e;
}

int agg_disk_put(agg_disk *d, int kind, uint32_t block, const uint8_t *body, size_t bytes, double f, char *err) {
    agg_disk_entry *e = new_entry(d);
    char why[HFL_ERR_LEN];
    if (!e) return hfl_errf(err, "cannot keep the update for the sum: out of memory");
    if (hfl_pwrite_all(d->fd, body, bytes, e->off, why) != 0)
        return hfl_errf(err, "cannot keep the update for the sum on disk: %s", why);
    e->kind = kind, e->block = block, e->f = f;
    d->end += bytes;
    d->n_e++;
    return 0;
}

int agg_disk_put_topk(agg_disk *d, const uint32_t *idx, const uint8_t *vals, size_t k, double f, char *err) {
    agg_disk_entry *e = new_entry(d);
    char why[HFL_ERR_LEN];
    size_t blocks = (d->n + d->block - 1) / d->block;
    if (!e || !(e->starts = malloc((blocks + 1) * sizeof *e->starts)))
        return hfl_errf(err, "cannot keep the update for the sum: out of memory");
    /* where each block's entries start, so that the close reads each entry once */
    for (size_t b = 0, j = 0; b <= blocks; b++) {
        while (j < k && idx[j] < b * d->block) j++;
        e->starts[b] = j;
    }
    e->starts[blocks] = k;
    if (hfl_pwrite_all(d->fd, idx, 4 * k, e->off, why) != 0 || hfl_pwrite_all(d->fd, vals, 2 * k, e->off + 4 * k, why) != 0) {
        free(e->starts);
        return hfl_errf(err, "cannot keep the update for the sum on disk: %s", why);
    }
    e->kind = HFL_PAYLOAD_TOPK, e->k = k, e->f = f;
    d->end += 6 * k;
    d->n_e++;
    return 0;
}

/* Slot s's byte buffer holds at least need bytes; -1 with err. */
static int raw_room(agg_disk *d, int s, size_t need, char *err) {
    if (d->raw_cap[s] >= need) return 0;
    uint8_t *r = realloc(d->raw[s], need);
    if (!r) return hfl_errf(err, "cannot allocate %zu bytes to read the sum's updates", need);
    d->raw[s] = r, d->raw_cap[s] = need;
    return 0;
}

/* A topk entry's values [b0, b0 + m) scattered into slot s's floats: the
 * block's entries (starts), read a piece at a time, each index checked to
 * lie in the block and to follow the one before (a file that does not give
 * back what was written is refused, never written through). */
static int load_topk(agg_disk *d, const agg_disk_entry *e, int s, size_t b0, size_t m, char *err) {
    float *x = d->x[s];
    memset(x, 0, m * sizeof *x);
    char why[HFL_ERR_LEN];
    if (raw_room(d, s, 6 * (size_t)TOPK_PIECE, err) != 0) return -1;
    uint32_t *idx = (uint32_t *)(void *)d->raw[s];
    uint8_t *vals = d->raw[s] + 4 * (size_t)TOPK_PIECE;
    size_t bi = b0 / d->block;
    int64_t last = (int64_t)b0 - 1; /* the index before, strictly below the next */
    for (uint64_t at = e->starts[bi], end = e->starts[bi + 1]; at < end;) {
        size_t got = end - at < TOPK_PIECE ? (size_t)(end - at) : TOPK_PIECE;
        if (hfl_pread_all(d->fd, idx, 4 * got, e->off + 4 * at, why) != 0 ||
            hfl_pread_all(d->fd, vals, 2 * got, e->off + 4 * e->k + 2 * at, why) != 0)
            return hfl_errf(err, "cannot read the sum's updates back: %s", why);
        for (size_t j = 0; j < got; j++) {
            if ((int64_t)idx[j] <= last || idx[j] >= b0 + m)
                return hfl_errf(err, "cannot read the sum's updates back: topk index %u out of place", idx[j]);
            x[idx[j] - b0] = hfl_payload_topk_value(vals, j);
            last = idx[j];
        }
        at += got;
    }
    return 0;
}

int agg_disk_load(agg_disk *d, const hfl_agg_ops *ops, int u, int s, size_t b0, size_t m, hfl_payload *p,
                  char *err) {
    const agg_disk_entry *e = &d->e[u];
    char why[HFL_ERR_LEN];
    if (e->kind == HFL_PAYLOAD_TOPK) {
        if (load_topk(d, e, s, b0, m, err) != 0) return -1;
        *p = (hfl_payload){.kind = HFL_PAYLOAD_FP32, .block = 0, .body = (const uint8_t *)d->x[s]};
        return 0;
    }
    /* the bytes of the codec blocks that hold values [b0, b0 + m) */
    hfl_payload whole = {.kind = e->kind, .block = e->block, .body = NULL};
    int blocked = e->kind != HFL_PAYLOAD_FP32 && e->kind != HFL_PAYLOAD_FP16 && e->kind != HFL_PAYLOAD_BF16;
    size_t lo = blocked ? b0 - b0 % e->block : b0, hi = b0 + m;
    if (blocked && hi % e->block) hi += e->block - hi % e->block;
    if (hi > d->n) hi = d->n;
    size_t from = hfl_payload_bytes_upto(&whole, lo), to = hfl_payload_bytes_upto(&whole, hi);
    if (raw_room(d, s, to - from, err) != 0) return -1;
    if (hfl_pread_all(d->fd, d->raw[s], to - from, e->off + from, why) != 0)
        return hfl_errf(err, "cannot read the sum's updates back: %s", why);
    *p = (hfl_payload){.kind = e->kind, .block = e->block, .body = d->raw[s]};
    if (lo == b0) return 0; /* a payload of its own from value 0 */
    /* b0 inside a codec block: decoded into floats by the backend's vector
     * decoder (the same bits as hfl_payload_value; hfl_agg_on_disk wants it) */
    float *x = d->x[s];
    ops->decode(p, b0 - lo, m, x);
    *p = (hfl_payload){.kind = HFL_PAYLOAD_FP32, .block = 0, .body = (const uint8_t *)x};
    return 0;
}

void agg_disk_topk_norm(const hfl_agg_ops *ops, size_t n, const uint32_t *idx, const uint8_t *vals, size_t k,
                        double *partials, hfl_agg_norm *out) {
    float x[HFL_AGG_CHUNK];
    double total = 0.0;
    float top = 0.0f;
    for (size_t j = 0; j < k;) {
        size_t c0 = idx[j] - idx[j] % HFL_AGG_CHUNK, m = n - c0 < HFL_AGG_CHUNK ? n - c0 : HFL_AGG_CHUNK;
        memset(x, 0, sizeof x);
        for (; j < k && idx[j] < c0 + m; j++) x[idx[j] - c0] = hfl_payload_topk_value(vals, j);
        hfl_payload p = {.kind = HFL_PAYLOAD_FP32, .block = 0, .body = (const uint8_t *)x};
        hfl_agg_norm one = {0};
        ops->norm(&p, m, partials, &one);
        total += one.sumsq;
        top = one.maxabs > top ? one.maxabs : top;
    }
    *out = (hfl_agg_norm){.sumsq = total, .maxabs = top, .refused = 0};
}
