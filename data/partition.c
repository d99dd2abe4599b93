/* partition.c: spec parsing and the IID, Dirichlet and shard partitioners.
 *
 * All randomness comes from hfl_draw (Philox, HFL_STREAM_PARTITION) with one
 * purpose id per use, so owners depend only on (spec, seed, labels, n_clients).
 *
 * Decisions worth knowing:
 * - n < n_clients is refused: a client with no data cannot train.
 * - Dirichlet follows Hsu et al. 2019 / FedLab / Flower: per class, proportions
 *   over clients ~ Dir(alpha), the class's shuffled samples are cut by them, and
 *   the whole draw is repeated (purpose DIRICHLET_PROPS + attempt) until every
 *   client holds at least min(10, n / n_clients) samples. Only counts decide
 *   acceptance, so the proportions are redrawn per attempt and the (costly)
 *   sample shuffles are done once, for the accepted attempt.
 * - Shards: a stable counting sort by label, n_clients*k contiguous shards of
 *   near-equal size (so n >= n_clients*k is required), a seeded permutation of
 *   shards, client j taking shards perm[j*k .. j*k+k). */
#include "data/partition.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/draw.h"
#include "util/util.h"

enum {
    PART_PURPOSE_IID = 1,
    PART_PURPOSE_SHARDS = 2,
    PART_PURPOSE_DIRICHLET_SHUFFLE = 3,
    PART_PURPOSE_DIRICHLET_PROPS = 0x100, /* + attempt */
};

#define PART_DIRICHLET_ATTEMPTS 1000
#define PART_DIRICHLET_MIN 10
#define PART_ALPHA_MAX 1e6
#define PART_SHARDS_MAX 1000

static int part_bad(const char *text, char *err) {
    return hfl_errf(err, "bad partition '%.64s' (use iid, dirichlet:<alpha> or shards:<k>)", text);
}

int hfl_partition_parse(const char *text, hfl_partition_spec *spec, char *err) {
    if (!text) return part_bad("", err);
    memset(spec, 0, sizeof *spec);
    char why[HFL_ERR_LEN];
    if (strcmp(text, "iid") == 0) {
        spec->kind = HFL_PART_IID;
        return 0;
    }
    if (strncmp(text, "dirichlet:", 10) == 0) {
        double alpha;
        if (hfl_parse_double(text + 10, 0.0, PART_ALPHA_MAX, &alpha, why) != 0 || !(alpha > 0.0))
            return hfl_errf(err, "bad partition '%.64s': alpha must be a number in (0, 1e6]", text);
        spec->kind = HFL_PART_DIRICHLET;
        spec->alpha = alpha;
        return 0;
    }
    if (strncmp(text, "shards:", 7) == 0) {
        long k;
        if (hfl_parse_int(text + 7, 1, PART_SHARDS_MAX, &k, why) != 0)
            return hfl_errf(err, "bad partition '%.64s': shards per client must be an integer in [1, %d]",
                            text, PART_SHARDS_MAX);
        spec->kind = HFL_PART_SHARDS;
        spec->shards = (int)k;
        return 0;
    }
    return part_bad(text, err);
}

static void part_iid(int n, int n_clients, uint64_t seed, int32_t *owner) {
    int *perm = hfl_malloc((size_t)n * sizeof *perm);
    for (int i = 0; i < n; i++) perm[i] = i;
    hfl_draw d;
    hfl_draw_init(&d, seed, PART_PURPOSE_IID);
    hfl_draw_shuffle(&d, perm, n);
    for (int c = 0; c < n_clients; c++) {
        int lo = (int)((int64_t)n * c / n_clients), hi = (int)((int64_t)n * (c + 1) / n_clients);
        for (int i = lo; i < hi; i++) owner[perm[i]] = c;
    }
    free(perm);
}

/* Sample indices grouped by class (stable): order[start[c] .. start[c+1]). */
static void part_sort_by_label(const int32_t *labels, int n, int n_classes, int *order, int *start) {
    memset(start, 0, (size_t)(n_classes + 1) * sizeof *start);
    for (int i = 0; i < n; i++) start[labels[i] + 1]++;
    for (int c = 0; c < n_classes; c++) start[c + 1] += start[c];
    int *fill = hfl_malloc((size_t)n_classes * sizeof *fill);
    memcpy(fill, start, (size_t)n_classes * sizeof *fill);
    for (int i = 0; i < n; i++) order[fill[labels[i]]++] = i;
    free(fill);
}

static int part_shards(const int32_t *labels, int n, int n_classes, int n_clients, int k,
                       uint64_t seed, int32_t *owner, char *err) {
    int64_t n_shards = (int64_t)n_clients * k;
    if (n_shards > n)
        return hfl_errf(err, "shards:%d with %d clients needs %lld samples, have %d", k, n_clients,
                        (long long)n_shards, n);
    int *order = hfl_malloc((size_t)n * sizeof *order);
    int *start = hfl_malloc((size_t)(n_classes + 1) * sizeof *start);
    int *perm = hfl_malloc((size_t)n_shards * sizeof *perm);
    part_sort_by_label(labels, n, n_classes, order, start);
    for (int s = 0; s < n_shards; s++) perm[s] = s;
    hfl_draw d;
    hfl_draw_init(&d, seed, PART_PURPOSE_SHARDS);
    hfl_draw_shuffle(&d, perm, (int)n_shards);
    for (int64_t slot = 0; slot < n_shards; slot++) {
        int64_t s = perm[slot];
        int lo = (int)(n * s / n_shards), hi = (int)(n * (s + 1) / n_shards);
        for (int i = lo; i < hi; i++) owner[order[i]] = (int32_t)(slot / k);
    }
    free(order);
    free(start);
    free(perm);
    return 0;
}

/* Cuts m samples by proportions p into cut[0..n_clients]: client j gets [cut[j], cut[j+1]). */
static void part_cuts(int m, const double *p, int n_clients, int *cut) {
    double cum = 0.0;
    cut[0] = 0;
    for (int j = 0; j < n_clients - 1; j++) {
        cum += p[j];
        int c = (int)floor(m * (cum > 1.0 ? 1.0 : cum) + 0.5);
        cut[j + 1] = c < cut[j] ? cut[j] : c;
    }
    cut[n_clients] = m;
}

static int part_dirichlet(const int32_t *labels, int n, int n_classes, int n_clients, double alpha,
                          uint64_t seed, int32_t *owner, char *err) {
    int need = n / n_clients < PART_DIRICHLET_MIN ? n / n_clients : PART_DIRICHLET_MIN;
    int *order = hfl_malloc((size_t)n * sizeof *order);
    int *start = hfl_malloc((size_t)(n_classes + 1) * sizeof *start);
    double *p = hfl_malloc((size_t)n_classes * n_clients * sizeof *p);
    int *cut = hfl_malloc((size_t)(n_clients + 1) * sizeof *cut);
    int64_t *size = hfl_malloc((size_t)n_clients * sizeof *size);
    part_sort_by_label(labels, n, n_classes, order, start);
    int accepted = 0;
    for (int attempt = 0; attempt < PART_DIRICHLET_ATTEMPTS && !accepted; attempt++) {
        hfl_draw d;
        hfl_draw_init(&d, seed, PART_PURPOSE_DIRICHLET_PROPS + (uint32_t)attempt);
        memset(size, 0, (size_t)n_clients * sizeof *size);
        for (int c = 0; c < n_classes; c++) {
            hfl_draw_dirichlet(&d, alpha, n_clients, p + (size_t)c * n_clients);
            part_cuts(start[c + 1] - start[c], p + (size_t)c * n_clients, n_clients, cut);
            for (int j = 0; j < n_clients; j++) size[j] += cut[j + 1] - cut[j];
        }
        accepted = 1;
        for (int j = 0; j < n_clients; j++)
            if (size[j] < need) accepted = 0;
    }
    if (accepted) {
        hfl_draw d;
        hfl_draw_init(&d, seed, PART_PURPOSE_DIRICHLET_SHUFFLE);
        for (int c = 0; c < n_classes; c++) {
            int *cls = order + start[c];
            hfl_draw_shuffle(&d, cls, start[c + 1] - start[c]);
            part_cuts(start[c + 1] - start[c], p + (size_t)c * n_clients, n_clients, cut);
            for (int j = 0; j < n_clients; j++)
                for (int i = cut[j]; i < cut[j + 1]; i++) owner[cls[i]] = j;
        }
    } else {
        hfl_errf(err, "dirichlet:%g left some of %d clients with fewer than %d samples in %d draws "
                 "(use a larger alpha or fewer clients)", alpha, n_clients, need,
                 PART_DIRICHLET_ATTEMPTS);
    }
    free(order);
    free(start);
    free(p);
    free(cut);
    free(size);
    return accepted ? 0 : -1;
}

int hfl_partition_assign(const hfl_partition_spec *spec, const int32_t *labels, int n,
                         int n_classes, int n_clients, uint64_t seed, int32_t *owner, char *err) {
    if (n_clients < 1) return hfl_errf(err, "need at least one client, got %d", n_clients);
    if (n_classes < 1) return hfl_errf(err, "need at least one class, got %d", n_classes);
    if (n < n_clients)
        return hfl_errf(err, "cannot give each of %d clients a sample from only %d", n_clients, n);
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= n_classes)
            return hfl_errf(err, "label %d of sample %d is outside [0, %d)", (int)labels[i], i,
                            n_classes);
    switch (spec->kind) {
    case HFL_PART_IID:
        part_iid(n, n_clients, seed, owner);
        return 0;
    case HFL_PART_DIRICHLET:
        if (!(spec->alpha > 0.0) || spec->alpha > PART_ALPHA_MAX)
            return hfl_errf(err, "dirichlet alpha %g outside (0, 1e6]", spec->alpha);
        return part_dirichlet(labels, n, n_classes, n_clients, spec->alpha, seed, owner, err);
    case HFL_PART_SHARDS:
        if (spec->shards < 1 || spec->shards > PART_SHARDS_MAX)
            return hfl_errf(err, "shards per client %d outside [1, %d]", spec->shards,
                            PART_SHARDS_MAX);
        return part_shards(labels, n, n_classes, n_clients, spec->shards, seed, owner, err);
    }
    return hfl_errf(err, "unknown partition kind %d", (int)spec->kind);
}

int hfl_partition_indices(const int32_t *owner, int n, int client, int **idx) {
    int count = 0;
    for (int i = 0; i < n; i++) count += owner[i] == client;
    int *out = hfl_malloc((size_t)count * sizeof *out);
    for (int i = 0, k = 0; i < n; i++)
        if (owner[i] == client) out[k++] = i;
    *idx = out;
    return count;
}
