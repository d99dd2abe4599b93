/* test_partition.c: partitioners on the real Fashion-MNIST training labels.
 *
 * For every spec with 10 clients: every sample has exactly one owner in
 * range, every client is non-empty, hfl_partition_indices agrees with the
 * owners, the same seed repeats and another seed differs. Then the shape of
 * each scheme: IID sizes within 1 and near-uniform classes; Dirichlet(0.1)
 * far more skewed than Dirichlet(100); shards:k clients span at most 2k
 * labels (each contiguous sorted shard crosses at most one class boundary
 * when shards are no larger than the smallest class) and mostly at most k+1.
 * Also parsing and the refusals. Skips (exit 77) without the dataset. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/idx.h"
#include "data/partition.h"
#include "tests/check.h"
#include "util/util.h"

#define CLIENTS 10
#define CLASSES 10

static hfl_partition_spec spec_of(const char *text) {
    hfl_partition_spec s;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_partition_parse(text, &s, err);
    CHECK_MSG(rc == 0, "parse '%s': %s", text, err);
    return s;
}

/* hist[c * CLASSES + k]: samples of class k held by client c. */
static void histogram(const int32_t *y, const int32_t *owner, int n, int *hist) {
    memset(hist, 0, sizeof(int) * CLIENTS * CLASSES);
    for (int i = 0; i < n; i++) hist[owner[i] * CLASSES + y[i]]++;
}

/* Assigns with `seed` and checks coverage, indices and determinism; returns malloc'd owners. */
static int32_t *assign_checked(const char *text, const int32_t *y, int n, uint64_t seed) {
    hfl_partition_spec s = spec_of(text);
    int32_t *owner = malloc((size_t)n * sizeof *owner), *again = malloc((size_t)n * sizeof *again);
    int32_t *other = malloc((size_t)n * sizeof *other);
    for (int i = 0; i < n; i++) owner[i] = again[i] = other[i] = -1;
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(hfl_partition_assign(&s, y, n, CLASSES, CLIENTS, seed, owner, err) == 0, "%s: %s", text, err);
    CHECK_MSG(hfl_partition_assign(&s, y, n, CLASSES, CLIENTS, seed, again, err) == 0, "%s: %s", text, err);
    CHECK_MSG(hfl_partition_assign(&s, y, n, CLASSES, CLIENTS, seed + 1, other, err) == 0, "%s: %s", text, err);
    CHECK_MSG(memcmp(owner, again, (size_t)n * sizeof *owner) == 0, "%s: same seed, other owners", text);
    int moved = 0, count[CLIENTS] = {0};
    for (int i = 0; i < n; i++) {
        moved += owner[i] != other[i];
        CHECK_MSG(owner[i] >= 0 && owner[i] < CLIENTS, "%s: owner[%d] = %d", text, i, (int)owner[i]);
        if (owner[i] >= 0 && owner[i] < CLIENTS) count[owner[i]]++;
    }
    CHECK_MSG(moved > n / 2, "%s: another seed moved only %d samples", text, moved);
    int total = 0;
    for (int c = 0; c < CLIENTS; c++) {
        int *idx = NULL;
        int k = hfl_partition_indices(owner, n, c, &idx);
        CHECK_MSG(k == count[c] && k > 0, "%s: client %d has %d indices, %d owners", text, c, k, count[c]);
        for (int j = 0; j < k; j++) {
            CHECK_MSG(owner[idx[j]] == c, "%s: index %d not owned by %d", text, idx[j], c);
            if (j) CHECK_MSG(idx[j] > idx[j - 1], "%s: indices not ascending", text);
        }
        free(idx);
        total += count[c];
    }
    CHECK_MSG(total == n, "%s: clients hold %d of %d samples", text, total, n);
    free(again);
    free(other);
    return owner;
}

static void test_iid(const int32_t *y, int n) {
    int32_t *owner = assign_checked("iid", y, n, 7);
    int hist[CLIENTS * CLASSES];
    histogram(y, owner, n, hist);
    int class_total[CLASSES] = {0};
    for (int i = 0; i < n; i++) class_total[y[i]]++;
    for (int c = 0; c < CLIENTS; c++) {
        int size = 0;
        for (int k = 0; k < CLASSES; k++) {
            size += hist[c * CLASSES + k];
            int want = class_total[k] / CLIENTS; /* 600; binomial sd about 23 */
            CHECK_MSG(abs(hist[c * CLASSES + k] - want) < 120, "iid: client %d class %d has %d", c, k,
                      hist[c * CLASSES + k]);
        }
        CHECK_MSG(abs(size - n / CLIENTS) <= 1, "iid: client %d has %d samples", c, size);
    }
    free(owner);
}

/* Mean over clients of the largest class's share of the client's data. */
static double mean_max_fraction(const int32_t *y, const int32_t *owner, int n, int *min_size) {
    int hist[CLIENTS * CLASSES];
    histogram(y, owner, n, hist);
    double sum = 0;
    *min_size = n;
    for (int c = 0; c < CLIENTS; c++) {
        int size = 0, max = 0;
        for (int k = 0; k < CLASSES; k++) {
            size += hist[c * CLASSES + k];
            if (hist[c * CLASSES + k] > max) max = hist[c * CLASSES + k];
        }
        if (size < *min_size) *min_size = size;
        sum += size ? (double)max / size : 0;
    }
    return sum / CLIENTS;
}

static void test_dirichlet(const int32_t *y, int n) {
    int min_lo, min_hi;
    int32_t *lo = assign_checked("dirichlet:0.1", y, n, 11);
    int32_t *hi = assign_checked("dirichlet:100", y, n, 11);
    double skew_lo = mean_max_fraction(y, lo, n, &min_lo);
    double skew_hi = mean_max_fraction(y, hi, n, &min_hi);
    printf("mean max-class fraction: dirichlet:0.1 %.3f, dirichlet:100 %.3f (iid would be ~0.1)\n",
           skew_lo, skew_hi);
    CHECK_MSG(skew_lo > 0.45, "dirichlet:0.1 mean max fraction %g", skew_lo);
    CHECK_MSG(skew_hi < 0.15, "dirichlet:100 mean max fraction %g", skew_hi);
    CHECK_MSG(min_lo >= 10 && min_hi >= 10, "smallest clients %d, %d (want >= 10)", min_lo, min_hi);
    free(lo);
    free(hi);
    free(assign_checked("dirichlet:0.5", y, n, 3));
}

static void test_shards(const char *text, int k, const int32_t *y, int n) {
    int32_t *owner = assign_checked(text, y, n, 5);
    int hist[CLIENTS * CLASSES];
    histogram(y, owner, n, hist);
    int at_most_k1 = 0, shard_lo = n / (CLIENTS * k), shard_hi = shard_lo + 1;
    for (int c = 0; c < CLIENTS; c++) {
        int labels = 0, size = 0;
        for (int j = 0; j < CLASSES; j++) {
            labels += hist[c * CLASSES + j] > 0;
            size += hist[c * CLASSES + j];
        }
        CHECK_MSG(labels <= 2 * k, "%s: client %d spans %d labels", text, c, labels);
        CHECK_MSG(size >= k * shard_lo && size <= k * shard_hi, "%s: client %d has %d samples", text, c, size);
        at_most_k1 += labels <= k + 1;
    }
    printf("%s on %d samples: %d of %d clients span at most %d labels\n", text, n, at_most_k1,
           CLIENTS, k + 1);
    CHECK_MSG(at_most_k1 >= CLIENTS * 7 / 10, "%s: only %d clients span <= %d labels", text, at_most_k1, k + 1);
    free(owner);
}

static void test_parse(void) {
    static const char *bad[] = {"", "dirichlet:", "dirichlet:-1", "dirichlet:0", "dirichlet:1e7",
                                "dirichlet:nan", "dirichlet:0.5x", "shards:0", "shards:1001",
                                "shards:1.5", "shards:", "foo", "iid:3", "IID", "dirichlet"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hfl_partition_spec s;
        char err[HFL_ERR_LEN] = "";
        CHECK_MSG(hfl_partition_parse(bad[i], &s, err) == -1, "'%s' parsed", bad[i]);
        CHECK_MSG(strstr(err, "bad partition") != NULL, "'%s': message '%s'", bad[i], err);
    }
    char err[HFL_ERR_LEN] = "";
    hfl_partition_spec s;
    hfl_partition_parse("foo", &s, err);
    CHECK_MSG(strcmp(err, "bad partition 'foo' (use iid, dirichlet:<alpha> or shards:<k>)") == 0, "%s", err);
    s = spec_of("dirichlet:0.3");
    CHECK_MSG(s.kind == HFL_PART_DIRICHLET && s.alpha == 0.3, "dirichlet:0.3 -> %d %g", s.kind, s.alpha);
    s = spec_of("dirichlet:1e6");
    CHECK_MSG(s.kind == HFL_PART_DIRICHLET && s.alpha == 1e6, "dirichlet:1e6");
    s = spec_of("shards:1000");
    CHECK_MSG(s.kind == HFL_PART_SHARDS && s.shards == 1000, "shards:1000");
    s = spec_of("iid");
    CHECK_MSG(s.kind == HFL_PART_IID, "iid");
}

static void expect_refused(const char *text, const int32_t *y, int n, int classes, int clients,
                           const char *needle) {
    hfl_partition_spec s = spec_of(text);
    int32_t *owner = malloc((size_t)(n ? n : 1) * sizeof *owner);
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(hfl_partition_assign(&s, y, n, classes, clients, 1, owner, err) == -1, "%s accepted", text);
    CHECK_MSG(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", text, err, needle);
    printf("refused %-14s n=%-5d clients=%-4d -> %s\n", text, n, clients, err);
    free(owner);
}

static void test_refusals(const int32_t *y, int n) {
    expect_refused("iid", y, 5, CLASSES, 10, "only 5");
    expect_refused("iid", y, n, CLASSES, 0, "at least one client");
    expect_refused("shards:10", y, 50, CLASSES, 10, "needs 100 samples");
    /* Ten classes cannot cover a thousand clients with near one-class draws. */
    expect_refused("dirichlet:0.001", y, n, CLASSES, 1000, "fewer than");
    int32_t wrong[3] = {0, 10, 2};
    expect_refused("iid", wrong, 3, CLASSES, 2, "label 10");
}

static hfl_dataset ds; /* the training labels every case but parse reads, loaded once in main */

static void test_iid_all(void) { test_iid(ds.y, ds.n); }
static void test_dirichlet_all(void) { test_dirichlet(ds.y, ds.n); }
static void test_refusals_all(void) { test_refusals(ds.y, ds.n); }

static void test_shards_all(void) {
    test_shards("shards:2", 2, ds.y, ds.n);
    test_shards("shards:5", 5, ds.y, ds.n);
    /* An unbalanced prefix, so that shards straddle class boundaries. */
    test_shards("shards:2", 2, ds.y, 10007);
    test_shards("shards:3", 3, ds.y, 4999);
}

static const check_case cases[] = {
    {"parse", test_parse},
    {"iid", test_iid_all},
    {"dirichlet", test_dirichlet_all},
    {"shards", test_shards_all},
    {"refusals", test_refusals_all},
};

int main(int argc, char **argv) {
    if (access(HFL_FMNIST_DIR "/train-labels-idx1-ubyte.gz", R_OK) != 0) {
        printf("SKIP: %s not installed (dataset-fashion-mnist)\n", HFL_FMNIST_DIR);
        return 77;
    }
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(hfl_fmnist_load(HFL_FMNIST_DIR, 1, &ds, err) == 0, "%s", err);
    int rc = check_run("test_partition", cases, CHECK_CASES(cases), argc, argv);
    hfl_dataset_free(&ds);
    return rc;
}
