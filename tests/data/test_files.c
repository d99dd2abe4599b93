/* test_files.c: datasets in the user's files (data/files.h, npy.h).
 *
 * Oracles: .npy headers and zip archives written here byte by byte from the
 * format documents (NEP 1; PKWARE's APPNOTE), not by hfl's writers, with a
 * deflated member made by zlib directly; round trips of hfl's own writer
 * must give back the very floats (pixels through hfl_idx_pixel); and every
 * broken file is refused with one line naming the fault. numpy's own files
 * are read in tests/integration/data_files.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/check.h"
#include "data/files.h"
#include "data/npy.h"
#include "util/stfile.h"
#include "util/util.h"

/* A .npy file from a header dict text, padded as NEP 1 asks, and raw data. */
static uint8_t *npy_of(int version, const char *dict, const void *data, size_t n, size_t *len) {
    size_t pre = version == 1 ? 10 : 12, hl = strlen(dict) + 1;
    hl = (pre + hl + 63) / 64 * 64 - pre;
    uint8_t *b = hfl_malloc(pre + hl + n + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)version, b[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) b[8 + i] = (uint8_t)(hl >> (8 * i));
    memset(b + pre, ' ', hl);
    memcpy(b + pre, dict, strlen(dict));
    b[pre + hl - 1] = '\n';
    if (n) memcpy(b + pre + hl, data, n);
    *len = pre + hl + n;
    return b;
}

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v), put16(p + 2, v >> 16); }

/* A zip of two members by hand: x.npy deflated (zlib raw deflate), y.npy stored. */
static uint8_t *zip_by_hand(const uint8_t *x, size_t xl, const uint8_t *y, size_t yl, size_t *len) {
    uLong cap = compressBound(xl) + 64;
    uint8_t *def = hfl_malloc(cap);
    z_stream z = {0};
    REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    z.next_in = (Bytef *)x, z.avail_in = (uInt)xl, z.next_out = def, z.avail_out = (uInt)cap;
    REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
    size_t dl = z.total_out;
    deflateEnd(&z);
    uint8_t *b = hfl_calloc(1, 2 * (30 + 5) + dl + yl + 2 * (46 + 5) + 22), *p = b;
    const char *names[2] = {"x.npy", "y.npy"};
    const uint8_t *raw[2] = {x, y}, *body[2] = {def, y};
    size_t rl[2] = {xl, yl}, bl[2] = {dl, yl}, off[2];
    for (int i = 0; i < 2; i++) {
        off[i] = (size_t)(p - b);
        put32(p, 0x04034b50), put16(p + 4, 20), put16(p + 8, i ? 0 : 8);
        put32(p + 14, (uint32_t)crc32(0, raw[i], (uInt)rl[i])), put32(p + 18, (uint32_t)bl[i]), put32(p + 22, (uint32_t)rl[i]);
        put16(p + 26, 5), memcpy(p + 30, names[i], 5), memcpy(p + 35, body[i], bl[i]);
        p += 35 + bl[i];
    }
    uint8_t *dir = p;
    for (int i = 0; i < 2; i++) {
        put32(p, 0x02014b50), put16(p + 4, 20), put16(p + 6, 20), put16(p + 10, i ? 0 : 8);
        put32(p + 16, (uint32_t)crc32(0, raw[i], (uInt)rl[i])), put32(p + 20, (uint32_t)bl[i]), put32(p + 24, (uint32_t)rl[i]);
        put16(p + 28, 5), put32(p + 42, (uint32_t)off[i]), memcpy(p + 46, names[i], 5);
        p += 51;
    }
    put32(p, 0x06054b50), put16(p + 8, 2), put16(p + 10, 2), put32(p + 12, (uint32_t)(p - dir)), put32(p + 16, (uint32_t)(dir - b));
    *len = (size_t)(p + 22 - b);
    free(def);
    return b;
}

static void refuse(const char *what, const uint8_t *buf, size_t len, const char *want) {
    char err[HFL_ERR_LEN] = "";
    hfl_dataset d;
    int rc = hfl_data_decode(buf, len, &d, err);
    CHECK_MSG(rc == -1 && strstr(err, want) && !strchr(err, '\n') && d.x == NULL, "%s: rc %d, error '%s', expected '%s'",
              what, rc, err, want);
    printf("refused: %s: %s\n", what, err);
}

/* x: 3 samples of 2 float32 features; y: int16 labels {2, 0, 1}. */
static const float xs[6] = {0.5f, -1.25f, 3.0f, 1e-3f, -7.0f, 2.5f};
static const int16_t ys[3] = {2, 0, 1};

static uint8_t *npz_of(const char *xdict, const void *xd, size_t xn, const char *ydict, const void *yd, size_t yn,
                       size_t *len) {
    size_t xl, yl;
    uint8_t *x = npy_of(1, xdict, xd, xn, &xl), *y = npy_of(2, ydict, yd, yn, &yl);
    uint8_t *z = zip_by_hand(x, xl, y, yl, len);
    free(x), free(y);
    return z;
}

static void test_read_by_hand(void) {
    char err[HFL_ERR_LEN];
    size_t len;
    uint8_t *z = npz_of("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", xs, sizeof xs,
                        "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", ys, sizeof ys, &len);
    hfl_dataset d;
    REQUIRE(hfl_data_decode(z, len, &d, err) == 0);
    CHECK(d.n == 3 && d.dim == 2 && d.n_classes == 3 && !d.pixels);
    CHECK(memcmp(d.x, xs, sizeof xs) == 0 && d.y[0] == 2 && d.y[1] == 0 && d.y[2] == 1);
    hfl_dataset_free(&d);
    /* a flipped byte in the deflated member: CRC or inflate catches it */
    z[40] ^= 0x55;
    refuse("corrupt deflate", z, len, "zip: ");
    free(z);
    /* pixels: uint8 [2, 2, 2] is 2 samples of 4 features, through hfl_idx_pixel */
    const uint8_t px[8] = {0, 255, 17, 128, 1, 2, 3, 254};
    const uint8_t py[2] = {9, 4};
    z = npz_of("{\"descr\":\"|u1\",\"fortran_order\":False,\"shape\":(2,2,2)}", px, 8,
               "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", py, 2, &len);
    REQUIRE(hfl_data_decode(z, len, &d, err) == 0);
    CHECK(d.n == 2 && d.dim == 4 && d.n_classes == 10 && d.pixels);
    for (int i = 0; i < 8; i++) CHECK_MSG(d.x[i] == hfl_idx_pixel(px[i]) && hfl_idx_unpixel(d.x[i]) == px[i], "pixel %d", i);
    CHECK(fabsf(d.x[1] - (1.0f - 0.2860f) / 0.3530f) < 1e-6f);
    hfl_dataset_free(&d);
    free(z);
}

static void test_refusals(void) {
    size_t len;
    uint8_t *z;
#define NPZ(what, xdict, ydict, want)                                                                         \
    z = npz_of(xdict, xs, sizeof xs, ydict, ys, sizeof ys, &len);                                          \
    refuse(what, z, len, want);                                                                             \
    free(z)
    const char *X = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
    const char *Y = "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }";
    NPZ("big-endian", "{'descr': '>f4', 'fortran_order': False, 'shape': (3, 2), }", Y, "big-endian");
    NPZ("fortran order", "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", Y, "Fortran order");
    NPZ("object dtype", "{'descr': '|O8', 'fortran_order': False, 'shape': (3, 2), }", Y, "'|O8' is not a plain");
    NPZ("structured dtype", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3, 2), }", Y, "structured");
    NPZ("shape against bytes", "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3), }", Y,
        "24 bytes where its shape and dtype need 36");
    NPZ("no shape", "{'descr': '<f4', 'fortran_order': False, }", Y, "lacks 'shape'");
    NPZ("unknown key", "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), 'x': 1}", Y, "unknown key 'x'");
    NPZ("float labels", X, "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", "labels must be integers");
    NPZ("int16 features", "{'descr': '<i2', 'fortran_order': False, 'shape': (3, 4), }", Y, "uint8 or float32");
    NPZ("labels against samples", X, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", "y.npy: npy data");
    NPZ("y two-dimensional", X, "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 3), }", "y must be shaped [3]");
#undef NPZ
    int16_t neg[3] = {2, -1, 0};
    z = npz_of(X, xs, sizeof xs, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", neg, sizeof neg, &len);
    refuse("negative label", z, len, "y[1] = -1 is not a label");
    free(z);
    float nan[6] = {0, 0, 0, NAN, 0, 0};
    z = npz_of(X, nan, sizeof nan, Y, ys, sizeof ys, &len);
    refuse("NaN feature", z, len, "x[1][1] is not finite");
    free(z);
    /* a lone .npy, a truncated archive, a missing member */
    uint8_t *one = npy_of(1, X, xs, sizeof xs, &len);
    refuse("a lone npy", one, len, "a .npy file holds one array");
    free(one);
    z = npz_of(X, xs, sizeof xs, Y, ys, sizeof ys, &len);
    refuse("truncated archive", z, len - 5, "no end of central directory");
    z[len - 22 + 10] = 1, z[len - 22 + 8] = 1; /* the directory now lists only x.npy */
    refuse("no y member", z, len, "no member y.npy");
    free(z);
    refuse("nothing", (const uint8_t *)"", 0, "too short");
    /* safetensors: x and y are needed, with dtypes a dataset has */
    char err[HFL_ERR_LEN];
    hfl_st_put t[2] = {{.name = "x", .dtype = "F32", .ndim = 2, .shape = {3, 2}, .data = xs},
                       {.name = "y", .dtype = "I16", .ndim = 1, .shape = {3}, .data = ys}};
    uint8_t *st = hfl_st_encode(t, 1, NULL, 0, &len, err);
    refuse("safetensors without y", st, len, "no tensor 'y'");
    free(st);
    t[0].dtype = "BF16", t[0].shape[1] = 4;
    st = hfl_st_encode(t, 2, NULL, 0, &len, err);
    refuse("bf16 features", st, len, "x has dtype BF16");
    free(st);
    t[0] = (hfl_st_put){.name = "x", .dtype = "F32", .ndim = 2, .shape = {3, 2}, .data = xs};
    st = hfl_st_encode(t, 2, NULL, 0, &len, err);
    hfl_dataset d;
    CHECK(hfl_data_decode(st, len, &d, err) == 0 && d.n == 3 && d.y[0] == 2 && !memcmp(d.x, xs, sizeof xs));
    hfl_dataset_free(&d);
    free(st);
}

/* hfl's writer: both formats read back to the same samples, bit for bit. */
static void test_round_trip(void) {
    char err[HFL_ERR_LEN], path[] = "/tmp/hfl-test-files-XXXXXX";
    REQUIRE(mkdtemp(path));
    const uint8_t px[6] = {0, 9, 200, 255, 31, 77};
    int32_t y[3] = {4, 0, 11};
    float fx[6];
    for (int i = 0; i < 6; i++) fx[i] = hfl_idx_pixel(px[i]);
    hfl_dataset src[2] = {{.n = 3, .dim = 2, .n_classes = 12, .x = fx, .y = y, .pixels = 1},
                          {.n = 3, .dim = 2, .n_classes = 12, .x = (float *)xs, .y = y, .pixels = 0}};
    for (int s = 0; s < 2; s++)
        for (int f = HFL_DATA_NPZ; f <= HFL_DATA_SAFETENSORS; f++) {
            char file[128];
            snprintf(file, sizeof file, "%s/d%d.%s", path, s, hfl_data_format_ext((hfl_data_format)f));
            hfl_dataset back;
            REQUIRE(hfl_data_save(file, &src[s], (hfl_data_format)f, err) == 0);
            REQUIRE_MSG(hfl_data_load(file, &back, err) == 0, "%s", err);
            CHECK_MSG(back.n == 3 && back.dim == 2 && back.n_classes == 12 && back.pixels == src[s].pixels &&
                          !memcmp(back.x, src[s].x, sizeof fx) && !memcmp(back.y, y, sizeof y) && hfl_data_is_file(file),
                      "%s", file);
            hfl_dataset_free(&back);
            unlink(file);
        }
    /* two labels per sample (y [3, 2]: a language model's windows) */
    int32_t y2[6] = {5, 1, 0, 7, 255, 3};
    hfl_dataset lm = {.n = 3, .dim = 2, .n_classes = 256, .x = (float *)xs, .y = y2, .label_rows = 2};
    for (int f = HFL_DATA_NPZ; f <= HFL_DATA_SAFETENSORS; f++) {
        char file[128];
        snprintf(file, sizeof file, "%s/lm.%s", path, hfl_data_format_ext((hfl_data_format)f));
        hfl_dataset back;
        REQUIRE(hfl_data_save(file, &lm, (hfl_data_format)f, err) == 0);
        REQUIRE_MSG(hfl_data_load(file, &back, err) == 0, "%s", err);
        CHECK_MSG(back.n == 3 && back.label_rows == 2 && back.n_classes == 256 &&
                      !memcmp(back.y, y2, sizeof y2) && !memcmp(back.x, xs, sizeof xs), "%s", file);
        hfl_dataset_free(&back);
        unlink(file);
    }
    /* a directory of x.npy and y.npy */
    char xp[128], yp[128];
    snprintf(xp, sizeof xp, "%s/x.npy", path);
    snprintf(yp, sizeof yp, "%s/y.npy", path);
    CHECK(!hfl_data_is_file(path));
    size_t xl, yl;
    uint8_t *xb = npy_of(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", xs, sizeof xs, &xl);
    uint8_t *yb = npy_of(1, "{'descr': '<u8', 'fortran_order': False, 'shape': (3,), }", (uint64_t[]){1, 1, 0}, 24, &yl);
    REQUIRE(hfl_write_file_atomic(xp, xb, xl, err) == 0 && hfl_write_file_atomic(yp, yb, yl, err) == 0);
    hfl_dataset d;
    CHECK(hfl_data_is_file(path) && hfl_data_load(path, &d, err) == 0 && d.n == 3 && d.n_classes == 2 &&
          !memcmp(d.x, xs, sizeof xs));
    hfl_dataset_free(&d);
    unlink(yp);
    CHECK(hfl_data_load(path, &d, err) == -1 && strstr(err, "y.npy"));
    printf("refused: no y.npy: %s\n", err);
    unlink(xp);
    rmdir(path);
    free(xb), free(yb);
    CHECK(hfl_data_load("/nonexistent/d.npz", &d, err) == -1 && strstr(err, "/nonexistent/d.npz"));
}

static const check_case cases[] = {
    {"read_by_hand", test_read_by_hand},
    {"refusals", test_refusals},
    {"round_trip", test_round_trip},
};

int main(int argc, char **argv) {
    return check_run("data_files", cases, CHECK_CASES(cases), argc, argv);
}
