/* test_idx.c: loading the real Fashion-MNIST files.
 *
 * Counts and dimensions, the first labels (checked beforehand with Python's
 * gzip module), every label and pixel against an independent zlib read of the
 * raw files, the standardised pixel statistics, and hfl_dataset_subset.
 * hfl_fmnist_load_picked gives byte for byte what the full load and subset
 * give, for every 7th sample of class 3 in reverse order, and refuses a
 * picker that names a sample twice or one past the end. hfl_idx_decompress
 * writes the raw bytes, and a directory of plain files (read with seeks past
 * the rows not picked) gives the same picked samples; a plain file cut short
 * is "truncated" even where the rows it lacks were not picked.
 * Skips (exit 77) when dataset-fashion-mnist is not installed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/idx.h"
#include "tests/check.h"
#include "util/util.h"

/* The whole decompressed file, independently of data/idx.c. */
static unsigned char *read_gz(const char *path, size_t *len) {
    gzFile f = gzopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    int got;
    while (buf && (got = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    gzclose(f);
    *len = n;
    return buf;
}

static void check_against_raw(const hfl_dataset *ds, const char *prefix) {
    char path[512];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", HFL_FMNIST_DIR, prefix);
    unsigned char *raw = read_gz(path, &len);
    CHECK_MSG(raw && len == 8 + (size_t)ds->n, "%s: %zu bytes", path, len);
    int bad = 0;
    for (int i = 0; raw && len == 8 + (size_t)ds->n && i < ds->n; i++) bad += ds->y[i] != raw[8 + i];
    CHECK_MSG(bad == 0, "%s: %d labels differ from the raw file", prefix, bad);
    free(raw);

    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", HFL_FMNIST_DIR, prefix);
    raw = read_gz(path, &len);
    size_t total = (size_t)ds->n * ds->dim;
    CHECK_MSG(raw && len == 16 + total, "%s: %zu bytes", path, len);
    bad = 0;
    for (size_t i = 0; raw && len == 16 + total && i < total; i++) {
        double want = (raw[16 + i] / 255.0 - 0.2860) / 0.3530;
        bad += fabs(ds->x[i] - want) > 1e-5;
    }
    CHECK_MSG(bad == 0, "%s: %d pixels differ from (raw/255 - 0.2860)/0.3530", prefix, bad);
    free(raw);
}

/* Every 7th sample of class 3, last first; *ctx selects a bad pick instead. */
static int pick_threes(void *ctx, const int32_t *y, int n, int **idx, char *err) {
    int bad = *(int *)ctx, k = 0;
    (void)err;
    *idx = malloc(sizeof(int) * (size_t)n);
    for (int i = n - 1, seen = 0; i >= 0; i--)
        if (y[i] == 3 && seen++ % 7 == 0) (*idx)[k++] = i;
    if (bad == 1) (*idx)[1] = (*idx)[0]; /* twice */
    if (bad == 2) (*idx)[0] = n;         /* past the end */
    return k;
}

static void test_picked(const hfl_dataset *all) {
    char err[HFL_ERR_LEN] = "";
    int bad = 0, *idx = NULL, k = pick_threes(&bad, all->y, all->n, &idx, err);
    hfl_dataset want, got;
    hfl_dataset_subset(all, idx, k, &want);
    CHECK_MSG(hfl_fmnist_load_picked(HFL_FMNIST_DIR, 1, pick_threes, &bad, &got, err) == 0, "picked load: %s", err);
    CHECK_MSG(got.n == k && k > 800 && got.dim == 784 && got.n_classes == 10, "picked n=%d of %d", got.n, k);
    CHECK_MSG(memcmp(got.x, want.x, sizeof(float) * (size_t)k * 784) == 0 &&
                  memcmp(got.y, want.y, sizeof(int32_t) * (size_t)k) == 0, "picked samples differ from load + subset");
    printf("picked load: %d samples, identical to the full load's subset\n", got.n);
    hfl_dataset_free(&got);
    hfl_dataset_free(&want);
    free(idx);
    for (bad = 1; bad <= 2; bad++) {
        CHECK_MSG(hfl_fmnist_load_picked(HFL_FMNIST_DIR, 1, pick_threes, &bad, &got, err) == -1 &&
                      strstr(err, "picked twice or outside"), "bad pick %d: %s", bad, err);
        CHECK_MSG(got.x == NULL && got.n == 0, "bad pick %d left a dataset", bad);
    }
}

static int pick_first(void *ctx, const int32_t *y, int n, int **idx, char *err) {
    (void)ctx, (void)y, (void)n, (void)err;
    *idx = malloc(sizeof(int));
    (*idx)[0] = 0;
    return 1;
}

static void test_plain(const hfl_dataset *all) {
    char dir[] = "/tmp/hfl-idx-XXXXXX", src[512], dst[512], err[HFL_ERR_LEN] = "";
    REQUIRE(mkdtemp(dir) != NULL);
    const char *names[2] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s.gz", HFL_FMNIST_DIR, names[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
        CHECK_MSG(hfl_idx_decompress(src, dst, err) == 0, "decompress: %s", err);
        size_t want_len = 0, got_len = 0;
        unsigned char *want = read_gz(src, &want_len), *got = NULL;
        FILE *f = fopen(dst, "rb");
        if (f && want) {
            got = malloc(want_len + 1);
            got_len = fread(got, 1, want_len + 1, f);
        }
        if (f) fclose(f);
        CHECK_MSG(want && got && got_len == want_len && !memcmp(got, want, want_len), "%s: plain bytes differ", names[i]);
        free(want);
        free(got);
    }
    int bad = 0, *idx = NULL, k = pick_threes(&bad, all->y, all->n, &idx, err);
    hfl_dataset want, got;
    hfl_dataset_subset(all, idx, k, &want);
    CHECK_MSG(hfl_fmnist_load_picked(dir, 1, pick_threes, &bad, &got, err) == 0, "plain picked load: %s", err);
    CHECK_MSG(got.n == k && !memcmp(got.x, want.x, sizeof(float) * (size_t)k * 784) &&
                  !memcmp(got.y, want.y, sizeof(int32_t) * (size_t)k), "plain picked samples differ");
    hfl_dataset_free(&got);
    hfl_dataset_free(&want);
    free(idx);
    /* cut the last image short: only sample 0 is picked, yet it is noticed */
    snprintf(dst, sizeof dst, "%s/%s", dir, names[0]);
    CHECK(truncate(dst, 16 + 60000L * 784 - 100) == 0);
    CHECK_MSG(hfl_fmnist_load_picked(dir, 1, pick_first, NULL, &got, err) == -1 && strstr(err, "truncated"),
              "a short plain file: %s", err);
    snprintf(src, sizeof src, "%s/%s", dir, names[1]);
    CHECK(unlink(dst) == 0 && unlink(src) == 0 && rmdir(dir) == 0);
    CHECK_MSG(hfl_idx_decompress("/nonexistent/x.gz", dst, err) == -1 && strstr(err, "/nonexistent/x.gz"), "%s", err);
}

static void test_train(void) {
    static const int first[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    hfl_dataset ds;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_fmnist_load(HFL_FMNIST_DIR, 1, &ds, err);
    CHECK_MSG(rc == 0, "train load: %s", err);
    if (rc != 0) return;
    CHECK_MSG(ds.n == 60000 && ds.dim == 784 && ds.n_classes == 10, "train n=%d dim=%d classes=%d",
              ds.n, ds.dim, ds.n_classes);
    for (int i = 0; i < 10; i++) CHECK_MSG(ds.y[i] == first[i], "train label %d = %d", i, (int)ds.y[i]);
    check_against_raw(&ds, "train");

    double s = 0, s2 = 0;
    size_t total = (size_t)ds.n * ds.dim;
    for (size_t i = 0; i < total; i++) {
        s += ds.x[i];
        s2 += (double)ds.x[i] * ds.x[i];
    }
    double mean = s / total, sd = sqrt(s2 / total - mean * mean);
    printf("train pixels: mean %.5f std %.5f\n", mean, sd);
    CHECK_MSG(fabs(mean) < 0.01, "standardised mean %g", mean);
    CHECK_MSG(fabs(sd - 1) < 0.02, "standardised std %g", sd);

    int idx[3] = {59999, 0, 1234};
    hfl_dataset sub;
    hfl_dataset_subset(&ds, idx, 3, &sub);
    CHECK_MSG(sub.n == 3 && sub.dim == 784 && sub.n_classes == 10, "subset shape");
    for (int k = 0; k < 3; k++) {
        CHECK_MSG(sub.y[k] == ds.y[idx[k]], "subset label %d", k);
        CHECK_MSG(memcmp(sub.x + (size_t)k * 784, ds.x + (size_t)idx[k] * 784, 784 * sizeof(float)) == 0,
                  "subset pixels %d", k);
    }
    hfl_dataset_free(&sub);
    CHECK_MSG(sub.x == NULL && sub.y == NULL && sub.n == 0, "free clears the struct");
    test_picked(&ds);
    test_plain(&ds);
    hfl_dataset_free(&ds);
}

static void test_test(void) {
    static const int first[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    hfl_dataset ds;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_fmnist_load(HFL_FMNIST_DIR, 0, &ds, err);
    CHECK_MSG(rc == 0, "test load: %s", err);
    if (rc != 0) return;
    CHECK_MSG(ds.n == 10000 && ds.dim == 784 && ds.n_classes == 10, "test n=%d dim=%d", ds.n, ds.dim);
    for (int i = 0; i < 10; i++) CHECK_MSG(ds.y[i] == first[i], "test label %d = %d", i, (int)ds.y[i]);
    check_against_raw(&ds, "t10k");
    hfl_dataset_free(&ds);
}

static void test_missing_dir(void) {
    hfl_dataset ds;
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(hfl_fmnist_load("/nonexistent/hfl-data", 1, &ds, err) == -1, "missing dir loads");
    CHECK_MSG(strstr(err, "/nonexistent/hfl-data/train-images-idx3-ubyte.gz") != NULL, "err: %s", err);
    CHECK_MSG(ds.x == NULL && ds.y == NULL, "output not cleared on error");
}

static const check_case cases[] = {
    {"train", test_train},
    {"test", test_test},
    {"missing_dir", test_missing_dir},
};

int main(int argc, char **argv) {
    if (access(HFL_FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: %s not installed (dataset-fashion-mnist)\n", HFL_FMNIST_DIR);
        return 77;
    }
    return check_run("test_idx", cases, CHECK_CASES(cases), argc, argv);
}
