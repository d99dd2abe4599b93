/* test_idx_errors.c: the IDX reader on files this test writes (plain and gzipped).
 *
 * A valid tiny pair loads with the right standardised values; each broken
 * file (missing, wrong magic, short header, truncated data, count mismatch,
 * label >= 10, absurd dimensions, a hostile header claiming terabytes,
 * corrupt gzip) returns -1 with a one-line message and a cleared dataset. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/idx.h"
#include "tests/check.h"
#include "util/util.h"

static char dir[256];

static void be32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

/* dir/name in one of 8 rotating buffers: copy a path that must outlive 8 more calls. */
static const char *path_of(const char *name) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

/* Writes header words then `len` payload bytes, gzipped when the name ends in .gz. */
static const char *write_idx(const char *name, const uint32_t *words, int n_words,
                             const unsigned char *payload, size_t len) {
    const char *path = path_of(name);
    unsigned char head[16];
    for (int i = 0; i < n_words; i++) be32(head + 4 * i, words[i]);
    size_t nl = strlen(name);
    if (nl > 3 && strcmp(name + nl - 3, ".gz") == 0) {
        gzFile f = gzopen(path, "wb");
        if (!f) return path;
        gzwrite(f, head, (unsigned)(4 * n_words));
        if (len) gzwrite(f, payload, (unsigned)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f) return path;
        fwrite(head, 1, (size_t)(4 * n_words), f);
        if (len) fwrite(payload, 1, len, f);
        fclose(f);
    }
    return path;
}

static const unsigned char pixels[12] = {0, 255, 51, 102, 0, 0, 0, 0, 255, 255, 255, 255};
static const unsigned char labels[3] = {9, 0, 4};

static void test_valid(const char *suffix) {
    char im_name[64], lb_name[64];
    snprintf(im_name, sizeof im_name, "ok-images%s", suffix);
    snprintf(lb_name, sizeof lb_name, "ok-labels%s", suffix);
    const char *im = write_idx(im_name, (uint32_t[]){0x803, 3, 2, 2}, 4, pixels, 12);
    const char *lb = write_idx(lb_name, (uint32_t[]){0x801, 3}, 2, labels, 3);
    hfl_dataset ds;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_idx_load(im, lb, &ds, err);
    CHECK_MSG(rc == 0, "valid%s: %s", suffix, err);
    if (rc != 0) return;
    CHECK_MSG(ds.n == 3 && ds.dim == 4 && ds.n_classes == 10, "valid%s shape", suffix);
    for (int i = 0; i < 3; i++) CHECK_MSG(ds.y[i] == labels[i], "valid%s label %d", suffix, i);
    for (int i = 0; i < 12; i++) {
        double want = (pixels[i] / 255.0 - 0.2860) / 0.3530;
        CHECK_MSG(fabs(ds.x[i] - want) < 1e-5, "valid%s pixel %d = %g, want %g", suffix, i, ds.x[i], want);
    }
    hfl_dataset_free(&ds);
}

/* Expects failure with a message containing `needle` (and the dataset left empty). */
static void expect_fail(const char *what, const char *im, const char *lb, const char *needle) {
    hfl_dataset ds;
    memset(&ds, 0xAB, sizeof ds);
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_idx_load(im, lb, &ds, err);
    CHECK_MSG(rc == -1, "%s: returned %d", what, rc);
    CHECK_MSG(err[0] != 0 && strchr(err, '\n') == NULL, "%s: message '%s'", what, err);
    CHECK_MSG(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", what, err, needle);
    CHECK_MSG(ds.x == NULL && ds.y == NULL && ds.n == 0, "%s: dataset not cleared", what);
    printf("%-28s -> %s\n", what, err);
    if (rc == 0) hfl_dataset_free(&ds);
}

static void test_errors(void) {
    char im[512], lb[512]; /* copies: path_of's buffers are reused */
    snprintf(im, sizeof im, "%s", write_idx("images.gz", (uint32_t[]){0x803, 3, 2, 2}, 4, pixels, 12));
    snprintf(lb, sizeof lb, "%s", write_idx("labels.gz", (uint32_t[]){0x801, 3}, 2, labels, 3));
    const char *missing = path_of("missing.gz");
    expect_fail("missing images", missing, lb, "missing.gz");
    expect_fail("missing labels", im, missing, "No such file");
    expect_fail("images given as labels", im, im, "bad magic");
    expect_fail("labels given as images", lb, lb, "bad magic");

    const char *p = write_idx("short-header", (uint32_t[]){0x803, 3}, 2, NULL, 0);
    expect_fail("short header", p, lb, "truncated");
    p = write_idx("trunc-images", (uint32_t[]){0x803, 3, 2, 2}, 4, pixels, 11);
    expect_fail("truncated images", p, lb, "trunc-images is truncated");
    p = write_idx("trunc-images.gz", (uint32_t[]){0x803, 3, 2, 2}, 4, pixels, 8);
    expect_fail("truncated images (gz)", p, lb, "trunc-images.gz is truncated");
    p = write_idx("trunc-labels", (uint32_t[]){0x801, 3}, 2, labels, 2);
    expect_fail("truncated labels", im, p, "trunc-labels is truncated");

    p = write_idx("labels4.gz", (uint32_t[]){0x801, 4}, 2, (const unsigned char[]){1, 2, 3, 4}, 4);
    expect_fail("count mismatch", im, p, "3 images");
    p = write_idx("labels-big.gz", (uint32_t[]){0x801, 3}, 2, (const unsigned char[]){1, 10, 3}, 3);
    expect_fail("label 10", im, p, "label 10");

    p = write_idx("zero.gz", (uint32_t[]){0x803, 0, 2, 2}, 4, NULL, 0);
    expect_fail("zero images", p, lb, "out of range");
    p = write_idx("many.gz", (uint32_t[]){0x803, 10000001, 1, 1}, 4, pixels, 12);
    expect_fail("too many images", p, lb, "out of range");
    p = write_idx("wide.gz", (uint32_t[]){0x803, 3, 1001, 1000}, 4, pixels, 12);
    expect_fail("image too large", p, lb, "out of range");
    p = write_idx("overflow.gz", (uint32_t[]){0x803, 3, 0x10000, 0x10000}, 4, pixels, 12);
    expect_fail("rows*cols overflows 32 bits", p, lb, "out of range");
    p = write_idx("zero-rows.gz", (uint32_t[]){0x803, 3, 0, 4}, 4, pixels, 12);
    expect_fail("zero rows", p, lb, "out of range");

    /* Header claims 10M x 1000 x 1000 pixels with 12 present: must fail, not allocate 40 TB. */
    const char *hi = write_idx("huge.gz", (uint32_t[]){0x803, 10000000, 1000, 1000}, 4, pixels, 12);
    const char *hl = path_of("huge-labels");
    FILE *f = fopen(hl, "wb");
    if (f) {
        unsigned char head[8];
        be32(head, 0x801);
        be32(head + 4, 10000000);
        fwrite(head, 1, 8, f);
        for (int i = 0; i < 10000000; i++) fputc(i % 10, f);
        fclose(f);
    }
    expect_fail("hostile header", hi, hl, "huge.gz is truncated");
    unlink(hi);
    unlink(hl);

    /* gzip magic followed by garbage: zlib reports an error. */
    const char *bad = path_of("corrupt.gz");
    f = fopen(bad, "wb");
    if (f) {
        const unsigned char junk[32] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff};
        fwrite(junk, 1, sizeof junk, f);
        fclose(f);
    }
    expect_fail("corrupt gzip", bad, lb, "corrupt.gz");
}

static void cleanup(void) {
    static const char *names[] = {"ok-images", "ok-labels", "ok-images.gz", "ok-labels.gz",
                                  "images.gz", "labels.gz", "short-header", "trunc-images",
                                  "trunc-images.gz", "trunc-labels", "labels4.gz", "labels-big.gz",
                                  "zero.gz", "many.gz", "wide.gz", "overflow.gz", "zero-rows.gz",
                                  "corrupt.gz"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(path_of(names[i]));
    rmdir(dir);
}

static void test_valid_raw(void) { test_valid(""); }
static void test_valid_gz(void) { test_valid(".gz"); }

static const check_case cases[] = {
    {"valid", test_valid_raw},
    {"valid_gz", test_valid_gz},
    {"errors", test_errors},
};

int main(int argc, char **argv) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/hfl-idx-XXXXXX", tmp && *tmp && strlen(tmp) < 200 ? tmp : "/tmp");
    REQUIRE_MSG(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    int rc = check_run("test_idx_errors", cases, CHECK_CASES(cases), argc, argv);
    cleanup();
    return rc;
}
