/* zip.c: the zip archives of .npz files, read through the central directory
 * and written stored (see npy.h). Layout from PKWARE's APPNOTE.TXT 6.3:
 * local headers (signature 0x04034b50, 30 bytes, name, extra, data), the
 * central directory (0x02014b50, 46 bytes, name, extra, comment per member)
 * and its end record (0x06054b50, 22 bytes and a comment); archives past
 * the 16/32-bit fields add a zip64 end record (0x06064b50) found through its
 * locator (0x07064b50), and per-member zip64 extra fields (id 0x0001). */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/npy.h"
#include "util/util.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define DEFLATE_MAX_RATIO 1032u /* deflate never expands data more than this */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v), put16(p + 2, v >> 16); }

/* The central directory's place and size, from the end record(s). */
static int find_directory(const uint8_t *buf, size_t len, uint64_t *at, uint64_t *size, uint64_t *count, char *err) {
    if (len < 22) return hfl_errf(err, "not a zip archive (%zu bytes)", len);
    size_t lo = len - 22 > 65535 ? len - 22 - 65535 : 0, e = len - 22 + 1;
    while (e-- > lo)
        if (le32(buf + e) == SIG_END && e + 22 + le16(buf + e + 20) == len) break;
    if (e + 1 == lo || le32(buf + e) != SIG_END) return hfl_errf(err, "not a zip archive (no end of central directory record)");
    *count = le16(buf + e + 10), *size = le32(buf + e + 12), *at = le32(buf + e + 16);
    if (*count == 0xffff || *size == 0xffffffffu || *at == 0xffffffffu) {
        if (e < 20 || le32(buf + e - 20) != SIG_LOC64) return hfl_errf(err, "zip: zip64 end record has no locator");
        uint64_t z = le64(buf + e - 20 + 8);
        if (len < 56 || z > len - 56 || le32(buf + z) != SIG_END64) return hfl_errf(err, "zip: zip64 end record is not where its locator says");
        *count = le64(buf + z + 32), *size = le64(buf + z + 40), *at = le64(buf + z + 48);
    }
    if (*at > len || *size > len - *at) return hfl_errf(err, "zip: central directory lies outside the file");
    return 0;
}

/* Sizes and offset that the 32-bit fields mark 0xffffffff live in the zip64 extra field. */
static int zip64_fields(const uint8_t *extra, size_t n, uint64_t *usize, uint64_t *csize, uint64_t *off, char *err) {
    for (size_t i = 0; i + 4 <= n;) {
        uint16_t id = le16(extra + i), sz = le16(extra + i + 2);
        if (i + 4 + sz > n) break;
        if (id == 1) {
            const uint8_t *p = extra + i + 4, *end = p + sz;
            uint64_t *f[3] = {usize, csize, off};
            for (int k = 0; k < 3; k++) {
                if (*f[k] != 0xffffffffu) continue;
                if (end - p < 8) return hfl_errf(err, "zip: zip64 extra field is too short");
                *f[k] = le64(p), p += 8;
            }
            return 0;
        }
        i += 4 + (size_t)sz;
    }
    if (*usize == 0xffffffffu || *csize == 0xffffffffu || *off == 0xffffffffu)
        return hfl_errf(err, "zip: a member needs a zip64 extra field and has none");
    return 0;
}

static int inflate_member(const uint8_t *src, uint64_t csize, uint8_t *dst, uint64_t usize, char *err) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -15) != Z_OK) return hfl_errf(err, "zip: zlib cannot start inflating");
    int rc = Z_OK;
    uint64_t in_left = csize, out_left = usize;
    z.next_in = (Bytef *)src, z.next_out = dst;
    while (rc == Z_OK) {
        uInt ci = in_left > (1u << 30) ? 1u << 30 : (uInt)in_left, co = out_left > (1u << 30) ? 1u << 30 : (uInt)out_left;
        z.avail_in = ci, z.avail_out = co;
        rc = inflate(&z, Z_NO_FLUSH);
        in_left -= ci - z.avail_in, out_left -= co - z.avail_out;
        if (rc == Z_OK && z.avail_in == ci && z.avail_out == co) rc = Z_BUF_ERROR; /* no progress */
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END || out_left != 0 || in_left != 0)
        return hfl_errf(err, "zip: deflated data is corrupt or does not match its sizes");
    return 0;
}

int hfl_zip_read(const uint8_t *buf, size_t len, const char *name, uint8_t **out, size_t *out_len, char *err) {
    uint64_t at = 0, size = 0, count = 0;
    *out = NULL;
    if (find_directory(buf, len, &at, &size, &count, err) != 0) return -1;
    const uint8_t *p = buf + at, *end = buf + at + size;
    size_t nl = strlen(name);
    for (uint64_t i = 0; i < count; i++) {
        if (end - p < 46 || le32(p) != SIG_CENTRAL) return hfl_errf(err, "zip: central directory entry %llu is broken", (unsigned long long)i);
        size_t n = le16(p + 28), x = le16(p + 30), cm = le16(p + 32);
        if ((size_t)(end - p) < 46 + n + x + cm) return hfl_errf(err, "zip: central directory entry %llu runs past it", (unsigned long long)i);
        if (n != nl || memcmp(p + 46, name, nl) != 0) {
            p += 46 + n + x + cm;
            continue;
        }
        uint16_t flags = le16(p + 8), method = le16(p + 10);
        uint32_t crc = le32(p + 16);
        uint64_t csize = le32(p + 20), usize = le32(p + 24), off = le32(p + 42);
        if (zip64_fields(p + 46 + n, x, &usize, &csize, &off, err) != 0) return -1;
        if (flags & 1) return hfl_errf(err, "zip: member %s is encrypted", name);
        if (method != 0 && method != 8) return hfl_errf(err, "zip: member %s uses compression method %u (hfl reads stored and deflated)", name, method);
        if (len < 30 || off > len - 30 || le32(buf + off) != SIG_LOCAL) return hfl_errf(err, "zip: member %s has no local header where the directory says", name);
        uint64_t data = off + 30 + le16(buf + off + 26) + le16(buf + off + 28);
        if (data > len || csize > len - data) return hfl_errf(err, "zip: member %s runs past the end of the file", name);
        if (method == 0 ? usize != csize : usize > csize * DEFLATE_MAX_RATIO + 64)
            return hfl_errf(err, "zip: member %s claims %llu bytes from %llu", name, (unsigned long long)usize, (unsigned long long)csize);
        uint8_t *o = malloc(usize ? usize : 1);
        if (!o) return hfl_errf(err, "zip: out of memory for member %s (%llu bytes)", name, (unsigned long long)usize);
        if (method == 0)
            memcpy(o, buf + data, usize);
        else if (inflate_member(buf + data, csize, o, usize, err) != 0)
            return free(o), -1;
        uLong c = crc32(0L, Z_NULL, 0);
        for (uint64_t k = 0; k < usize; k += 1u << 30) c = crc32(c, o + k, (uInt)(usize - k > (1u << 30) ? 1u << 30 : usize - k));
        if (c != crc) return free(o), hfl_errf(err, "zip: member %s fails its CRC-32 check", name);
        *out = o, *out_len = (size_t)usize;
        return 0;
    }
    hfl_errf(err, "the archive has no member %s", name);
    return 1;
}

uint8_t *hfl_zip_write(const char *const *names, const uint8_t *const *data, const size_t *lens, int n, size_t *len,
                       char *err) {
    uint64_t total = 22;
    for (int i = 0; i < n; i++) total += 30 + 46 + 2 * strlen(names[i]) + lens[i];
    if (total >= 0xffffffffu) return hfl_errf(err, "zip: %llu bytes would need zip64", (unsigned long long)total), NULL;
    uint8_t *out = hfl_malloc((size_t)total), *p = out;
    uint32_t *offs = hfl_malloc(sizeof(uint32_t) * (size_t)(n ? n : 1)), *crcs = hfl_malloc(sizeof(uint32_t) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) { /* local headers and data */
        size_t nl = strlen(names[i]);
        crcs[i] = (uint32_t)crc32(crc32(0L, Z_NULL, 0), data[i], (uInt)lens[i]);
        offs[i] = (uint32_t)(p - out);
        memset(p, 0, 30);
        put32(p, SIG_LOCAL), put16(p + 4, 20), put16(p + 12, 0x21 /* 1980-01-01 */), put32(p + 14, crcs[i]);
        put32(p + 18, (uint32_t)lens[i]), put32(p + 22, (uint32_t)lens[i]), put16(p + 26, (uint32_t)nl);
        memcpy(p + 30, names[i], nl);
        if (lens[i]) memcpy(p + 30 + nl, data[i], lens[i]);
        p += 30 + nl + lens[i];
    }
    uint8_t *dir = p;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(names[i]);
        memset(p, 0, 46);
        put32(p, SIG_CENTRAL), put16(p + 4, 20), put16(p + 6, 20), put16(p + 14, 0x21), put32(p + 16, crcs[i]);
        put32(p + 20, (uint32_t)lens[i]), put32(p + 24, (uint32_t)lens[i]), put16(p + 28, (uint32_t)nl);
        put32(p + 42, offs[i]);
        memcpy(p + 46, names[i], nl);
        p += 46 + nl;
    }
    memset(p, 0, 22);
    put32(p, SIG_END), put16(p + 8, (uint32_t)n), put16(p + 10, (uint32_t)n);
    put32(p + 12, (uint32_t)(p - dir)), put32(p + 16, (uint32_t)(dir - out));
    p += 22;
    *len = (size_t)(p - out);
    free(offs), free(crcs);
    return out;
}
