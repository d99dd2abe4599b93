/* aggregate.c: exact, order-independent sums of clipped updates on a backend
 * (see aggregate.h): validation and decisions here, arithmetic through the
 * backend's aggregation ops (kernels/agg.h).
 *
 * ADDING. An update's norm (and so its clip factor and its refusal) is
 * known at once, but its addition waits: the payload sits in a slot of
 * backend memory, and up to HFL_AGG_MAX_BATCH updates (agg_pending_cap bytes
 * of them at most: the accumulator's own size, 8 bytes a value, with a
 * 16 MiB floor) are added in one pass over the accumulator (agg_pass),
 * whose 16 bytes of traffic an element dwarf a compressed body's one or
 * two. A full batch is added when the next update comes, or by mean(), whose
 * finish then rides the same pass; reset() leaves the zeroing of acc to the
 * round's first pass, which writes acc without reading it. Integer sums do
 * not depend on when or in which order they are made, so the result is the
 * same bits; reset() drops what waits with the round. topk's scattered
 * vector is added at once. */
#include "coordinator/aggregate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Bytes of bodies that may wait (ADDING). */
static size_t agg_pending_cap(const hfl_agg *a) {
    size_t acc = a->n * sizeof *a->acc, floor = (size_t)16 << 20;
    return acc > floor ? acc : floor;
}

/* n bytes of backend memory, or NULL (err set) when it cannot be had. */
static void *agg_alloc(hfl_agg *a, size_t bytes, char *err) { return a->be->try_alloc(bytes ? bytes : 1, err); }

int hfl_agg_init_on(hfl_agg *a, const hfl_backend *be, size_t n, int threads, char *err) {
    memset(a, 0, sizeof *a);
    if (!be->agg) return hfl_errf(err, "the %s backend has no aggregation ops", be->name);
    a->n = n;
    a->threads = threads;
    a->be = be;
    a->ops = be->agg;
    char why[HFL_ERR_LEN];
    if (a->ops->prepare && a->ops->prepare(why) != 0) {
        memset(a, 0, sizeof *a);
        return hfl_errf(err, "%s", why);
    }
    if (!(a->acc = agg_alloc(a, n * sizeof *a->acc, why)) || !(a->mean = agg_alloc(a, n * sizeof *a->mean, why)) ||
        !(a->partials = agg_alloc(a, hfl_agg_chunks(n) * sizeof *a->partials, why))) {
        hfl_agg_free(a);
        return hfl_errf(err, "cannot allocate the aggregator for %zu values: %s", n, why);
    }
    pthread_mutex_init(&a->lock, NULL);
    a->n_rows = -1; /* the lock is live (hfl_agg_free) */
    hfl_agg_reset(a, 0, 1.0);
    a->n_rows = 0;
    return 0;
}

void hfl_agg_free(hfl_agg *a) {
    if (!a->be) return;
    if (a->partials) pthread_mutex_destroy(&a->lock); /* made with the first three (init) */
    if (a->disk) agg_disk_free(a->disk), free(a->disk);
    void *dev[] = {a->acc, a->mean, a->partials, a->dense, a->topk_vals, a->topk_idx_dev,
                   a->rows, a->pick, a->dist_partials, a->x, a->m, a->v};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) a->be->free(dev[i]);
    for (int i = 0; i < HFL_AGG_MAX_BATCH; i++) a->be->free(a->pending_copy[i]);
    free(a->topk_idx);
    free(a->present);
    memset(a, 0, sizeof *a);
}

void hfl_agg_reset(hfl_agg *a, double clip, double value_bound) {
    a->clip = clip > 0 ? clip : 0;
    a->bound = a->clip > 0 ? a->clip : value_bound;
    int e;
    frexp(a->bound, &e); /* bound < 2^e */
    a->shift = 50 - e;
    a->acc_zero = 1;
    a->n_pending = 0, a->pending_bytes = 0;
    if (a->present) memset(a->present, 0, (size_t)a->n_rows);
    if (a->disk) { /* ON DISK: the mean lives from mean() to step() */
        agg_disk_reset(a->disk);
        a->be->free(a->mean);
        a->mean = NULL;
    }
}

void hfl_agg_widen(hfl_agg *a, double bound) {
    if (!(bound > a->bound)) return;
    int e;
    frexp(bound, &e);
    a->bound = bound;
    a->shift = 50 - e;
}

void hfl_agg_load_sum(hfl_agg *a, const int64_t *sum, int shift) {
    a->n_pending = 0, a->pending_bytes = 0;
    a->shift = shift;
    a->ops->stage(a->acc, sum, a->n * sizeof *a->acc);
    a->acc_zero = 0;
}

/* acc (n values) += the count updates p scaled by f, from zero with
 * from_zero; with mean, the finish into it too. Returns finish's finite
 * flag (1 without mean). */
static int agg_pass_on(hfl_agg *a, int64_t *acc, size_t n, int from_zero, const hfl_payload *p, const double *f,
                       int count, double inv, float *mean) {
    if (a->ops->add_fixed_pass) return a->ops->add_fixed_pass(p, f, count, n, acc, from_zero, inv, mean);
    if (from_zero) a->ops->zero(acc, n * sizeof *acc);
    if (count) a->ops->add_fixed(p, f, count, n, acc);
    return mean ? a->ops->finish(acc, n, inv, mean) : 1;
}

/* The pass over the whole sum, from zero while acc_zero (ADDING). */
static int agg_pass(hfl_agg *a, const hfl_payload *p, const double *f, int count, double inv, float *mean) {
    int finite = agg_pass_on(a, a->acc, a->n, a->acc_zero, p, f, count, inv, mean);
    a->acc_zero = 0;
    return finite;
}

/* Adds the updates that wait (ADDING). */
static void agg_flush(hfl_agg *a) {
    if (a->n_pending) agg_pass(a, a->pending, a->pending_f, a->n_pending, 1.0, NULL);
    a->n_pending = 0, a->pending_bytes = 0;
}

/* Adds p scaled by f (ADDING): at once for topk (whose scattered vector the
 * next topk update reuses); else p is the payload agg_load put into the next
 * waiting slot, which now counts. */
static void agg_accumulate(hfl_agg *a, const hfl_payload *p, size_t bytes, double f, int is_dense_scratch) {
    if (is_dense_scratch) {
        agg_pass(a, p, &f, 1, 1.0, NULL);
        return;
    }
    int k = a->n_pending;
    a->pending[k] = *p;
    a->pending_f[k] = f;
    a->n_pending++, a->pending_bytes += bytes;
}

/* A full batch (ADDING) is added before the next update takes a slot. */
static void agg_make_room(hfl_agg *a) {
    if (a->n_pending == HFL_AGG_MAX_BATCH || a->pending_bytes >= agg_pending_cap(a)) agg_flush(a);
}

/* *buf holds at least `need` bytes of backend memory (growing it, old
 * contents dropped); -1 with err when it cannot. */
static int agg_room(hfl_agg *a, void **buf, size_t *cap, size_t need, char *err) {
    if (*buf && *cap >= need) return 0;
    a->be->free(*buf);
    *cap = 0;
    if (!(*buf = agg_alloc(a, need, err))) return -1;
    *cap = need;
    return 0;
}

/* Room for `entries` of topk's expanded indices (and, on a device, its
 * staged values and indices); -1 with err. */
static int agg_topk_room(hfl_agg *a, size_t entries, char *err) {
    if (a->topk_idx && a->topk_cap >= entries) return 0;
    uint32_t *grown = realloc(a->topk_idx, (entries ? entries : 1) * sizeof *grown);
    if (!grown) return hfl_errf(err, "cannot allocate %zu topk indices", entries);
    a->topk_idx = grown;
    size_t vals_cap = 0, idx_cap = 0; /* a->topk_cap counts both */
    if (!a->be->host_memory && (agg_room(a, (void **)&a->topk_vals, &vals_cap, 2 * entries + 2, err) != 0 ||
                                agg_room(a, (void **)&a->topk_idx_dev, &idx_cap, 4 * entries + 4, err) != 0))
        return -1;
    a->topk_cap = entries;
    return 0;
}

/* Validates the payload on the host, makes it readable by the ops and takes
 * its norm: *p describes it in backend memory, in the next waiting slot
 * (ADDING), or a dense fp32 vector for topk. The body goes into the slot
 * only after the host validated it, except int8's on the host: there the
 * copy, the norm and the body's check are one pass (the ops' stage_norm)
 * after its frame is checked, and a refused body leaves the slot unclaimed,
 * so nothing invalid reaches the sum either way. A device stages the body,
 * then takes the norm. -1 with err as hfl_agg_add refuses. */
static int agg_load(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, hfl_payload *p,
                    size_t *body_bytes, hfl_agg_norm *nm, char *err) {
    const int host = a->be->host_memory;
    if (c->id == HFL_PAYLOAD_TOPK) {
        size_t k;
        const uint8_t *vals;
        if (agg_topk_room(a, hfl_codec_topk_entries(c, a->n), err) != 0) return -1;
        if (!a->dense && !(a->dense = agg_alloc(a, a->n * sizeof *a->dense, err))) return -1;
        if (hfl_codec_topk_expand(c, payload, len, a->n, a->topk_idx, &k, &vals, err) != 0) return -1;
        if (host) {
            a->ops->topk_scatter(a->dense, a->n, vals, a->topk_idx, k);
        } else {
            a->ops->stage(a->topk_vals, vals, 2 * k);
            a->ops->stage(a->topk_idx_dev, a->topk_idx, 4 * k);
            a->ops->topk_scatter(a->dense, a->n, a->topk_vals, a->topk_idx_dev, k);
        }
        *p = (hfl_payload){.kind = HFL_PAYLOAD_FP32, .block = 0, .body = (const uint8_t *)a->dense};
        *body_bytes = a->n * sizeof *a->dense;
        a->ops->norm(p, a->n, a->partials, nm);
        return 0;
    }
    uint32_t block;
    agg_make_room(a);
    int k = a->n_pending;
    if (agg_room(a, (void **)&a->pending_copy[k], &a->pending_room[k], len, err) != 0) return -1;
    /* int8 on the host: the staging pass checks the body (norm->refused), a
     * read of 100 MB fewer at 100M parameters; everything else is validated
     * whole first */
    const int staged_check = host && a->ops->stage_norm && c->id == HFL_PAYLOAD_INT8;
    if ((staged_check ? hfl_codec_check_frame(c, payload, len, a->n, &block, err)
                      : hfl_codec_validate(c, payload, len, a->n, &block, err)) != 0)
        return -1;
    hfl_payload src = {.kind = c->id, .block = block, .body = payload + HFL_CODEC_HEADER_BYTES};
    size_t bytes = len - HFL_CODEC_HEADER_BYTES;
    *p = (hfl_payload){.kind = c->id, .block = block, .body = a->pending_copy[k]};
    *body_bytes = bytes;
    if (host && a->ops->stage_norm) {
        a->ops->stage_norm(a->pending_copy[k], &src, bytes, a->n, a->partials, nm);
        if (staged_check && nm->refused) { /* validation names what; nothing was added */
            if (hfl_codec_validate(c, payload, len, a->n, &block, err) != 0) return -1;
            return hfl_errf(err, "%s payload: refused by the staging check, passed by validation", c->name);
        }
    } else {
        a->ops->stage(a->pending_copy[k], src.body, bytes);
        a->ops->norm(p, a->n, a->partials, nm);
    }
    return 0;
}

/* From an update's norm pass: the factor that clips it (1 without
 * clipping), and what add() reports; -1 with err as hfl_agg_add refuses. */
static int agg_clip(const hfl_agg *a, const hfl_agg_norm *nm_, double *factor, hfl_agg_update *info, char *err) {
    const hfl_agg_norm nm = *nm_;
    double norm = sqrt(nm.sumsq);
    if (!isfinite(norm)) return hfl_errf(err, "update is not finite (L2 norm %g)", norm);
    if (a->clip == 0 && nm.maxabs > a->bound)
        return hfl_errf(err, "update value %g beyond the aggregation bound %g (set a clip norm)", (double)nm.maxabs,
                        a->bound);
    *factor = a->clip > 0 && norm > a->clip ? a->clip / norm : 1.0;
    if (info) {
        info->norm = norm;
        info->clipped = a->clip > 0 && norm > a->clip;
    }
    return 0;
}

/* Loads one update and takes its norm and clip factor (agg_clip). */
static int agg_load_clip(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, hfl_payload *p,
                         size_t *body_bytes, double *factor, hfl_agg_update *info, char *err) {
    hfl_agg_norm nm = {0};
    if (agg_load(a, c, payload, len, p, body_bytes, &nm, err) != 0) return -1;
    return agg_clip(a, &nm, factor, info, err);
}

/* ON DISK: the update validated and its norm taken where it lies (host
 * memory), then kept with its factor, weight * clip * 2^S. */
static int agg_disk_add(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, double weight,
                        hfl_agg_update *info, char *err) {
    hfl_agg_norm nm = {0};
    uint32_t block = 0;
    size_t k = 0;
    const uint8_t *vals = NULL;
    if (c->id == HFL_PAYLOAD_TOPK) {
        if (agg_topk_room(a, hfl_codec_topk_entries(c, a->n), err) != 0 ||
            hfl_codec_topk_expand(c, payload, len, a->n, a->topk_idx, &k, &vals, err) != 0)
            return -1;
        agg_disk_topk_norm(a->ops, a->n, a->topk_idx, vals, k, a->partials, &nm);
    } else {
        if (hfl_codec_validate(c, payload, len, a->n, &block, err) != 0) return -1;
        hfl_payload p = {.kind = c->id, .block = block, .body = payload + HFL_CODEC_HEADER_BYTES};
        a->ops->norm(&p, a->n, a->partials, &nm);
    }
    double clip = 1.0;
    if (agg_clip(a, &nm, &clip, info, err) != 0) return -1;
    double f = ldexp(weight * clip, a->shift); /* as hfl_agg_add's */
    int rc = c->id == HFL_PAYLOAD_TOPK ? agg_disk_put_topk(a->disk, a->topk_idx, vals, k, f, err)
                                       : agg_disk_put(a->disk, c->id, block, payload + HFL_CODEC_HEADER_BYTES,
                                                      len - HFL_CODEC_HEADER_BYTES, f, err);
    a->disk_refused = rc != 0;
    return rc;
}

int hfl_agg_add(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, double weight,
                hfl_agg_update *info, char *err) {
    if (!(weight > 0 && weight <= 1))
        return hfl_errf(err, "update weight %g outside (0, 1]", weight);
    pthread_mutex_lock(&a->lock);
    a->disk_refused = 0;
    if (a->disk) {
        int rc = agg_disk_add(a, c, payload, len, weight, info, err);
        pthread_mutex_unlock(&a->lock);
        return rc;
    }
    hfl_payload p;
    double clip = 1.0;
    size_t bytes;
    int rc = agg_load_clip(a, c, payload, len, &p, &bytes, &clip, info, err);
    /* every |weight * clip * v_i| <= bound < 2^(50 - shift) */
    if (rc == 0) agg_accumulate(a, &p, bytes, ldexp(weight * clip, a->shift), c->id == HFL_PAYLOAD_TOPK);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int hfl_agg_add_dense(hfl_agg *a, const float *v, double factor, char *err) {
    pthread_mutex_lock(&a->lock);
    if (a->disk) {
        int rc = agg_disk_put(a->disk, HFL_PAYLOAD_FP32, 0, (const uint8_t *)v, a->n * sizeof *v,
                              ldexp(factor, a->shift), err);
        pthread_mutex_unlock(&a->lock);
        return rc;
    }
    agg_flush(a); /* the slot below is the next waiting one */
    size_t bytes = a->n * sizeof *v;
    int rc = agg_room(a, (void **)&a->pending_copy[0], &a->pending_room[0], bytes, err);
    if (rc == 0) {
        a->ops->stage(a->pending_copy[0], v, bytes);
        hfl_payload p = {.kind = HFL_PAYLOAD_FP32, .block = 0, .body = a->pending_copy[0]};
        double f = ldexp(factor, a->shift);
        agg_pass(a, &p, &f, 1, 1.0, NULL);
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

void hfl_agg_read_sum(hfl_agg *a, int64_t *out) {
    pthread_mutex_lock(&a->lock);
    agg_flush(a);
    if (a->acc_zero) memset(out, 0, a->n * sizeof *out);
    else a->ops->download(out, a->acc, a->n * sizeof *out);
    pthread_mutex_unlock(&a->lock);
}

int hfl_agg_add_sum(hfl_agg *a, const int64_t *sum, int shift, char *err) {
    if (a->disk) return hfl_errf(err, "a sum of sums cannot be added to the sum on disk");
    if (shift != a->shift) return hfl_errf(err, "sum at scale 2^%d, the round's is 2^%d", shift, a->shift);
    pthread_mutex_lock(&a->lock);
    agg_flush(a);
    const size_t bytes = a->n * sizeof *a->acc;
    int64_t *host = a->be->host_memory ? NULL : malloc(bytes ? bytes : 1);
    if (!a->be->host_memory && !host) {
        pthread_mutex_unlock(&a->lock);
        return hfl_errf(err, "cannot allocate %zu bytes to add a sum", bytes);
    }
    int64_t *acc = host ? host : a->acc;
    if (a->acc_zero) memset(acc, 0, bytes);
    else if (host) a->ops->download(host, a->acc, bytes);
    size_t bad = a->n;
    for (size_t i = 0; i < a->n && bad == a->n; i++) /* check all before touching any */
        if ((sum[i] > 0 && acc[i] > INT64_MAX - sum[i]) || (sum[i] < 0 && acc[i] < INT64_MIN - sum[i])) bad = i;
    if (bad == a->n) {
        for (size_t i = 0; i < a->n; i++) acc[i] += sum[i];
        if (host) a->ops->stage(a->acc, host, bytes);
        a->acc_zero = 0;
    }
    free(host);
    pthread_mutex_unlock(&a->lock);
    if (bad != a->n) return hfl_errf(err, "adding a sum would overflow value %zu", bad);
    return 0;
}

/* ON DISK: block by block, every update's piece of the block added (up to
 * HFL_AGG_MAX_BATCH in a pass) into the block's sum, from zero, whose mean
 * the block's last pass writes. */
static int agg_disk_mean(hfl_agg *a, double inv) {
    agg_disk *d = a->disk;
    char *err = a->disk_err;
    if (!a->mean && !(a->mean = agg_alloc(a, a->n * sizeof *a->mean, err))) return -1;
    int finite = 1;
    for (size_t b0 = 0; b0 < a->n; b0 += d->block) {
        size_t m = a->n - b0 < d->block ? a->n - b0 : d->block;
        int u = 0, first = 1, last;
        do {
            hfl_payload p[HFL_AGG_MAX_BATCH];
            double f[HFL_AGG_MAX_BATCH];
            int count = 0;
            for (; u < d->n_e && count < HFL_AGG_MAX_BATCH; u++, count++) {
                if (agg_disk_load(d, a->ops, u, count, b0, m, &p[count], err) != 0) return -1;
                f[count] = d->e[u].f;
            }
            last = u == d->n_e;
            int fin = agg_pass_on(a, d->acc, m, first, p, f, count, inv, last ? a->mean + b0 : NULL);
            if (last) finite &= fin;
            first = 0;
        } while (!last);
    }
    return finite;
}

int hfl_agg_on_disk(hfl_agg *a, const char *dir, size_t block, char *err) {
    if (!a->be->host_memory || !a->ops->decode)
        return hfl_errf(err, "the sum on disk is for an aggregator in host memory, not the %s backend's", a->be->name);
    if (a->n_rows) return hfl_errf(err, "the sum on disk is FedAvg's: a rule holding every update cannot use it");
    agg_disk *d = calloc(1, sizeof *d);
    if (!d) return hfl_errf(err, "out of memory");
    if (a->disk || agg_disk_open(d, dir, a->n, block, err) != 0) {
        if (a->disk) hfl_errf(err, "the sum is on disk already");
        free(d);
        return -1;
    }
    pthread_mutex_lock(&a->lock);
    a->be->free(a->acc);
    a->be->free(a->mean);
    a->acc = NULL, a->mean = NULL;
    a->n_pending = 0, a->pending_bytes = 0;
    a->disk = d;
    pthread_mutex_unlock(&a->lock);
    return 0;
}

int hfl_agg_mean(hfl_agg *a, double weight_sum) {
    if (a->disk) { /* no add may grow the entries while they are read */
        pthread_mutex_lock(&a->lock);
        int finite = agg_disk_mean(a, ldexp(1.0, -a->shift) / weight_sum);
        pthread_mutex_unlock(&a->lock);
        return finite;
    }
    int finite = agg_pass(a, a->pending, a->pending_f, a->n_pending, ldexp(1.0, -a->shift) / weight_sum, a->mean);
    a->n_pending = 0, a->pending_bytes = 0;
    return finite;
}

int hfl_agg_hold(hfl_agg *a, int rows, uint64_t limit_bytes, char *err) {
    if (a->disk) return hfl_errf(err, "a rule holding every update cannot run with the sum on disk");
    double need = (double)rows * (double)a->n * sizeof(float);
    if (rows < 1 || need > (double)limit_bytes)
        return hfl_errf(err, "holding %d updates of %zu values needs %.1f MiB, over the limit of %.1f MiB "
                        "(--robust-memory)", rows, a->n, need / 1048576.0, limit_bytes / 1048576.0);
    if (rows > a->ops->max_rule_rows)
        return hfl_errf(err, "the %s backend's rules take at most %d updates a round, not %d", a->be->name,
                        a->ops->max_rule_rows, rows);
    void *old[] = {a->rows, a->pick, a->dist_partials};
    for (size_t i = 0; i < sizeof old / sizeof *old; i++) a->be->free(old[i]);
    free(a->present);
    a->rows = NULL, a->pick = NULL, a->dist_partials = NULL, a->n_rows = 0;
    size_t pairs = (size_t)rows * (rows - 1) / 2;
    char why[HFL_ERR_LEN];
    if (!(a->present = calloc((size_t)rows, 1)) || !(a->rows = agg_alloc(a, (size_t)need, why)) ||
        !(a->pick = agg_alloc(a, sizeof(int) * (size_t)rows, why)) ||
        !(a->dist_partials = agg_alloc(a, sizeof(double) * (pairs ? pairs : 1) * (hfl_agg_chunks(a->n) + 1), why))) {
        void *all[] = {a->rows, a->pick, a->dist_partials};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) a->be->free(all[i]);
        free(a->present);
        a->rows = NULL, a->pick = NULL, a->dist_partials = NULL, a->present = NULL;
        return hfl_errf(err, "cannot allocate %.1f MiB to hold %d updates", need / 1048576.0, rows);
    }
    a->n_rows = rows;
    return 0;
}

int hfl_agg_add_row(hfl_agg *a, const hfl_codec *c, const uint8_t *payload, size_t len, int row,
                    hfl_agg_update *info, char *err) {
    if (row < 0 || row >= a->n_rows) return hfl_errf(err, "row %d outside the %d held", row, a->n_rows);
    pthread_mutex_lock(&a->lock);
    hfl_payload p;
    double clip = 1.0;
    size_t bytes;
    int rc = a->present[row] ? hfl_errf(err, "row %d already added", row)
                             : agg_load_clip(a, c, payload, len, &p, &bytes, &clip, info, err);
    if (rc == 0) {
        a->ops->store_row(&p, a->n, clip, a->rows + (size_t)row * a->n);
        a->present[row] = 1;
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int hfl_agg_rule(hfl_agg *a, const hfl_rule *r, int *selected, int *kept, int *finite, char *err) {
    int k = 0;
    for (int i = 0; i < a->n_rows; i++) /* the present rows, moved up in row order */
        if (a->present[i]) {
            if (i != k) a->ops->copy(a->rows + (size_t)k * a->n, a->rows + (size_t)i * a->n, a->n * sizeof(float));
            a->present[i] = 0, a->present[k] = 1;
            k++;
        }
    if (hfl_rule_run(r, a->be, a->rows, k, a->n, a->mean, a->pick, a->dist_partials, selected, kept, err) != 0)
        return -1;
    *finite = a->ops->all_finite(a->mean, a->n);
    return 0;
}

int hfl_agg_step(hfl_agg *a, hfl_server_opt *o, float *global, char *err) {
    if (a->be->host_memory) {
        hfl_sopt_step_on(o, a->be, global, o->m, o->v, a->mean);
        o->steps++;
        if (a->disk) a->be->free(a->mean), a->mean = NULL; /* ON DISK: made again by the next mean() */
        return 0;
    }
    /* the device's copies: made at the first step, uploaded each time from
     * the host's (a resume may have rewritten them), downloaded after */
    size_t bytes = a->n * sizeof(float);
    char why[HFL_ERR_LEN];
    if ((!a->x && !(a->x = agg_alloc(a, bytes, why))) || (o->m && !a->m && !(a->m = agg_alloc(a, bytes, why))) ||
        (o->v && !a->v && !(a->v = agg_alloc(a, bytes, why))))
        return hfl_errf(err, "cannot allocate the server optimizer's device state: %s", why);
    a->ops->stage(a->x, global, bytes);
    if (o->m) a->ops->stage(a->m, o->m, bytes);
    if (o->v) a->ops->stage(a->v, o->v, bytes);
    hfl_sopt_step_on(o, a->be, a->x, o->m ? a->m : NULL, o->v ? a->v : NULL, a->mean);
    a->ops->download(global, a->x, bytes);
    if (o->m) a->ops->download(o->m, a->m, bytes);
    if (o->v) a->ops->download(o->v, a->v, bytes);
    o->steps++;
    return 0;
}
