/* test_msg_edges.c: the edges of proto/msg.c that test_msg.c leaves open,
 * written against mutants that survived scripts/mutate (docs/testing.md).
 * Every expected value is worked out by hand from msg.h's wire format, never
 * read back from the code under test:
 *
 * 1. Names: each of the fourteen types by number, and 0, 15, -1, 256 "unknown".
 * 2. The encoded header byte by byte: magic 48 46 4C 31, version 01 00, type
 *    0A 00, meta_len and payload_len little-endian (a 70,000-byte payload
 *    sets the third byte), the CRC-32C of meta + payload from a bit-at-a-time
 *    reference, reserved 0; meta is the JSON text as sent.
 * 3. Encode refusals: no payload pointer for a non-empty payload, and a meta
 *    of exactly HFL_MSG_MAX_META bytes (kept) or one more (refused).
 * 4. Decode: the high byte of the u16 version and type matters (0x8001 is
 *    not version 1, 0x8006 not type 6); meta of exactly HFL_MSG_MAX_META
 *    bytes and a payload of exactly max_payload are accepted; a flipped meta
 *    byte is a CRC mismatch; the decoded fields point where the format says.
 * 5. The getters at their bounds: lo and hi inclusive, one past refused,
 *    2^63 refused and -2^63 accepted as int64, non-finite numbers, strings of
 *    exactly maxlen bytes, the first and last printable ASCII bytes kept and
 *    0x1F and 0x7F refused, UTF-8 bytes kept, the copy's terminator.
 * 6. Refused metas leave nothing allocated (mallinfo2 over 200 decodes), nor
 *    does encoding, kept or refused (the printed meta is freed: 200 encodes
 *    of an 8-byte meta that leaked would leave at least 200 x 9 bytes, 4
 *    refused ones over 4 MiB). */
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"
#include "tests/check.h"
#include "util/util.h"

/* Bit-at-a-time CRC-32C (Castagnoli, reflected 0x82F63B78). */
static uint32_t crc_ref(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_names(void) {
    static const char *const want[] = {"hello", "welcome", "pull", "task", "wait",
                                       "update", "ack", "error", "bye", "challenge", "secagg", "fetch", "put", "tier"};
    for (int t = 1; t <= 14; t++)
        CHECK_MSG(!strcmp(hfl_msg_type_name(t), want[t - 1]), "type %d is '%s'", t, hfl_msg_type_name(t));
    CHECK(!strcmp(hfl_msg_type_name(0), "unknown"));
    CHECK(!strcmp(hfl_msg_type_name(15), "unknown"));
    CHECK(!strcmp(hfl_msg_type_name(-1), "unknown"));
    CHECK(!strcmp(hfl_msg_type_name(256), "unknown"));
}

static void test_encoded_header(void) {
    size_t plen = 70000, len = 0;
    uint8_t *payload = hfl_malloc(plen);
    for (size_t i = 0; i < plen; i++) payload[i] = (uint8_t)(i * 7 + 3);
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "a", 1);
    uint8_t *buf = hfl_msg_encode(HFL_MSG_CHALLENGE, meta, payload, plen, &len);
    if (CHECK(buf != NULL)) {
        static const uint8_t head[12] = {0x48, 0x46, 0x4C, 0x31, 0x01, 0x00, 0x0A, 0x00,
                                         7, 0, 0, 0}; /* 'HFL1', v1, type 10, meta_len 7 */
        CHECK(len == 24 + 7 + plen);
        CHECK(!memcmp(buf, head, sizeof head));
        /* payload_len 70000 = 0x00011170 */
        CHECK(buf[12] == 0x70 && buf[13] == 0x11 && buf[14] == 0x01 && buf[15] == 0x00);
        CHECK(!memcmp(buf + 24, "{\"a\":1}", 7));
        CHECK(!memcmp(buf + 31, payload, plen));
        CHECK(le32(buf + 16) == crc_ref(buf + 24, 7 + plen));
        CHECK(le32(buf + 20) == 0);
        hfl_msg m;
        char err[HFL_ERR_LEN] = "";
        CHECK(hfl_msg_decode(buf, len, plen, &m, err) == 0); /* payload == max_payload */
        CHECK(m.type == HFL_MSG_CHALLENGE && m.payload_len == plen && m.payload == buf + 31);
        CHECK(m.meta_raw == buf + 24 && m.meta_len == 7);
        CHECK(m.meta && cJSON_GetObjectItemCaseSensitive(m.meta, "a") &&
              cJSON_GetObjectItemCaseSensitive(m.meta, "a")->valuedouble == 1);
        hfl_msg_free(&m);
        CHECK(m.meta == NULL && m.payload == NULL && m.payload_len == 0 && m.type == 0);
        CHECK(hfl_msg_decode(buf, len, plen - 1, &m, err) == -1 && strstr(err, "payload of 70000 bytes"));
        /* one meta byte changed, CRC left alone: the CRC covers meta too */
        buf[26] ^= 0x01;
        CHECK(hfl_msg_decode(buf, len, plen, &m, err) == -1 && strstr(err, "CRC mismatch"));
    }
    free(buf);
    free(payload);
    hfl_msg_free(NULL); /* safe */

    /* NULL meta: meta_len 0, and type 1 (the lowest) */
    buf = hfl_msg_encode(HFL_MSG_HELLO, NULL, NULL, 0, &len);
    if (CHECK(buf != NULL && len == 24)) {
        CHECK(buf[6] == 1 && buf[7] == 0 && le32(buf + 8) == 0 && le32(buf + 12) == 0);
        CHECK(le32(buf + 16) == 0); /* CRC-32C of nothing */
    }
    free(buf);
    cJSON_Delete(meta);
}

static void test_encode_refusals(void) {
    size_t len = 12345;
    CHECK(hfl_msg_encode(HFL_MSG_UPDATE, NULL, NULL, 5, &len) == NULL); /* no payload bytes */
    CHECK(hfl_msg_encode(15, NULL, NULL, 0, &len) == NULL);
    CHECK(hfl_msg_encode(-1, NULL, NULL, 0, &len) == NULL);
    uint8_t one = 0;
    CHECK(hfl_msg_encode(HFL_MSG_UPDATE, NULL, &one, (size_t)UINT32_MAX + 1, &len) == NULL);

    /* {"s":"xxx"}: 8 bytes around the string */
    size_t n = HFL_MSG_MAX_META - 8;
    char *s = hfl_malloc(n + 2);
    memset(s, 'x', n + 1);
    s[n] = 0;
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "s", s);
    uint8_t *buf = hfl_msg_encode(HFL_MSG_HELLO, meta, NULL, 0, &len);
    CHECK(buf != NULL && len == 24 + (size_t)HFL_MSG_MAX_META);
    if (buf) {
        hfl_msg m;
        char err[HFL_ERR_LEN];
        CHECK(hfl_msg_decode(buf, len, 0, &m, err) == 0 && m.meta_len == HFL_MSG_MAX_META);
        hfl_msg_free(&m);
    }
    free(buf);
    cJSON_Delete(meta);
    s[n] = 'x', s[n + 1] = 0; /* one byte more */
    meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "s", s);
    CHECK(hfl_msg_encode(HFL_MSG_HELLO, meta, NULL, 0, &len) == NULL);
    cJSON_Delete(meta);
    free(s);
}

/* A valid header-only message of `type` (meta_len 0, payload_len 0). */
static void bare(uint8_t buf[24], int version_hi, int type_hi, int type) {
    memset(buf, 0, 24);
    put32(buf, 0x314C4648u);
    buf[4] = 1, buf[5] = (uint8_t)version_hi;
    buf[6] = (uint8_t)type, buf[7] = (uint8_t)type_hi;
}

static void test_decode_u16(void) {
    uint8_t buf[24];
    hfl_msg m;
    char err[HFL_ERR_LEN] = "";
    bare(buf, 0, 0, HFL_MSG_UPDATE);
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == 0 && m.type == HFL_MSG_UPDATE);
    hfl_msg_free(&m);
    bare(buf, 0x80, 0, HFL_MSG_UPDATE);
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == -1 && strstr(err, "version 32769"));
    bare(buf, 0x01, 0, HFL_MSG_UPDATE);
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == -1 && strstr(err, "version 257"));
    bare(buf, 0, 0x80, HFL_MSG_UPDATE);
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == -1 && strstr(err, "type 32774"));
    bare(buf, 0, 0x01, HFL_MSG_UPDATE);
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == -1 && strstr(err, "type 262"));
    bare(buf, 0, 0, HFL_MSG_CHALLENGE);
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == 0 && m.type == HFL_MSG_CHALLENGE);
    hfl_msg_free(&m);
    bare(buf, 0, 0, HFL_MSG_HELLO);
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == 0 && m.type == HFL_MSG_HELLO);
    hfl_msg_free(&m);
    bare(buf, 0, 0, 15);
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == -1 && strstr(err, "unknown message type 15"));
    /* lengths: meta_len 0x00010000 (byte 2) against a 24-byte buffer */
    bare(buf, 0, 0, HFL_MSG_PULL);
    buf[10] = 1;
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == -1 && strstr(err, "header says 65560 bytes"));
    bare(buf, 0, 0, HFL_MSG_PULL);
    buf[13] = 1; /* payload_len 256 */
    CHECK(hfl_msg_decode(buf, 24, 1000, &m, err) == -1 && strstr(err, "header says 280 bytes"));
    bare(buf, 0, 0, HFL_MSG_PULL);
    buf[15] = 1; /* payload_len 2^24 */
    CHECK(hfl_msg_decode(buf, 24, 1u << 24, &m, err) == -1 && strstr(err, "header says 16777240 bytes"));
    buf[16] = 1; /* a CRC over nothing must be 0 */
    buf[15] = 0;
    CHECK(hfl_msg_decode(buf, 24, 0, &m, err) == -1 && strstr(err, "CRC mismatch: header 0x00000001, computed 0x00000000"));
}

static void test_decode_meta_limit(void) {
    /* a raw message whose meta is exactly HFL_MSG_MAX_META bytes */
    size_t ml = HFL_MSG_MAX_META, len = 24 + ml;
    uint8_t *buf = hfl_calloc(1, len);
    put32(buf, 0x314C4648u);
    buf[4] = 1, buf[6] = HFL_MSG_HELLO;
    put32(buf + 8, (uint32_t)ml);
    char *meta = (char *)buf + 24;
    memset(meta, ' ', ml);
    memcpy(meta, "{\"k\":\"", 6);
    memset(meta + 6, 'v', ml - 8);
    memcpy(meta + ml - 2, "\"}", 2);
    put32(buf + 16, crc_ref(buf + 24, ml));
    hfl_msg m;
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(hfl_msg_decode(buf, len, 0, &m, err) == 0, "%s", err);
    hfl_msg_free(&m);
    free(buf);
}

static void test_meta_errors(void) {
    /* where the JSON breaks, and the meta's size, in the error */
    const char *json = "{\"a\":1,x}";
    size_t ml = strlen(json), len = 24 + ml;
    uint8_t buf[64] = {0};
    put32(buf, 0x314C4648u);
    buf[4] = 1, buf[6] = HFL_MSG_HELLO;
    put32(buf + 8, (uint32_t)ml);
    memcpy(buf + 24, json, ml);
    put32(buf + 16, crc_ref(buf + 24, ml));
    hfl_msg m;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_msg_decode(buf, len, 0, &m, err) == -1 && strstr(err, "not valid JSON") && strstr(err, "of 9)"));
    /* an object followed by a second value: 2 bytes after it */
    json = "{}[]";
    ml = strlen(json), len = 24 + ml;
    put32(buf + 8, (uint32_t)ml);
    memcpy(buf + 24, json, ml);
    put32(buf + 16, crc_ref(buf + 24, ml));
    CHECK(hfl_msg_decode(buf, len, 0, &m, err) == -1 && strstr(err, "meta has 2 bytes after"));
}

static void test_getters(void) {
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "ten", 10);
    cJSON_AddNumberToObject(meta, "two63", 9223372036854775808.0);
    cJSON_AddNumberToObject(meta, "minus63", -9223372036854775808.0);
    cJSON_AddNumberToObject(meta, "inf", INFINITY);
    cJSON_AddNumberToObject(meta, "nan", NAN);
    cJSON_AddNumberToObject(meta, "mhalf", -0.5);
    cJSON_AddNumberToObject(meta, "x", 2.5);
    cJSON_AddStringToObject(meta, "s5", "abcde");
    cJSON_AddStringToObject(meta, "edges", " ~");
    cJSON_AddStringToObject(meta, "us", "a\x1f");
    cJSON_AddStringToObject(meta, "del", "a\x7f");
    cJSON_AddStringToObject(meta, "utf8", "caf\xc3\xa9");
    int64_t i = 0;
    double d = 0;
    char err[HFL_ERR_LEN], s[16];
    CHECK(hfl_meta_int(meta, "ten", 10, 10, &i, err) == 0 && i == 10);
    CHECK(hfl_meta_int(meta, "ten", 11, 20, &i, err) == -1 && strstr(err, "outside [11, 20]"));
    CHECK(hfl_meta_int(meta, "ten", 0, 9, &i, err) == -1 && strstr(err, "outside [0, 9]"));
    CHECK(hfl_meta_int(meta, "two63", INT64_MIN, INT64_MAX, &i, err) == -1 && strstr(err, "outside"));
    i = 0;
    CHECK(hfl_meta_int(meta, "minus63", INT64_MIN, INT64_MAX, &i, err) == 0 && i == INT64_MIN);
    CHECK(hfl_meta_int(meta, "inf", INT64_MIN, INT64_MAX, &i, err) == -1 && strstr(err, "not an integer"));
    CHECK(hfl_meta_int(meta, "nan", INT64_MIN, INT64_MAX, &i, err) == -1 && strstr(err, "not an integer"));
    CHECK(hfl_meta_int(meta, "mhalf", -10, 10, &i, err) == -1 && strstr(err, "not an integer"));
    CHECK(hfl_meta_num(meta, "x", 2.5, 2.5, &d, err) == 0 && d == 2.5);
    CHECK(hfl_meta_num(meta, "x", 2.6, 3, &d, err) == -1 && strstr(err, "outside"));
    CHECK(hfl_meta_num(meta, "x", 0, 2.4, &d, err) == -1 && strstr(err, "outside"));
    CHECK(hfl_meta_num(meta, "inf", -INFINITY, INFINITY, &d, err) == -1 && strstr(err, "not a finite number"));
    CHECK(hfl_meta_num(meta, "nan", -INFINITY, INFINITY, &d, err) == -1 && strstr(err, "not a finite number"));
    CHECK(hfl_meta_num(meta, "s5", 0, 1, &d, err) == -1 && strstr(err, "not a number"));
    memset(s, 'X', sizeof s);
    CHECK(hfl_meta_str(meta, "s5", 5, s, err) == 0 && !memcmp(s, "abcde", 6));
    CHECK(hfl_meta_str(meta, "s5", 4, s, err) == -1 && strstr(err, "5 bytes long (limit 4)"));
    CHECK(hfl_meta_str(meta, "edges", 8, s, err) == 0 && !strcmp(s, " ~"));
    CHECK(hfl_meta_str(meta, "us", 8, s, err) == -1 && strstr(err, "control character"));
    CHECK(hfl_meta_str(meta, "del", 8, s, err) == -1 && strstr(err, "control character"));
    CHECK(hfl_meta_str(meta, "utf8", 8, s, err) == 0 && !strcmp(s, "caf\xc3\xa9"));
    CHECK(hfl_meta_str(meta, "ten", 8, s, err) == -1 && strstr(err, "not a string"));
    /* a meta that is not an object has no fields */
    cJSON *arr = cJSON_CreateArray();
    CHECK(hfl_meta_int(arr, "ten", 0, 100, &i, err) == -1 && strstr(err, "missing field 'ten'"));
    cJSON_Delete(arr);
    cJSON_Delete(meta);
}

/* Refused messages free what they parsed: 200 decodes of each kind leave
 * nothing allocated (mallinfo2). */
static void test_no_leak(void) {
    static const char *metas[] = {"{}[]", "[1,2]", "{\"a\":1}"};
    uint8_t buf[64];
    for (int k = 0; k < 3; k++) {
        size_t ml = strlen(metas[k]), len = 24 + ml;
        memset(buf, 0, sizeof buf);
        put32(buf, 0x314C4648u);
        buf[4] = 1, buf[6] = HFL_MSG_HELLO;
        put32(buf + 8, (uint32_t)ml);
        memcpy(buf + 24, metas[k], ml);
        put32(buf + 16, crc_ref(buf + 24, ml));
        hfl_msg m;
        char err[HFL_ERR_LEN];
        if (hfl_msg_decode(buf, len, 0, &m, err) == 0) hfl_msg_free(&m); /* warm up */
        size_t before = mallinfo2().uordblks;
        for (int t = 0; t < 200; t++)
            if (hfl_msg_decode(buf, len, 0, &m, err) == 0) hfl_msg_free(&m);
        size_t after = mallinfo2().uordblks;
        CHECK_MSG(after < before + 1024, "meta '%s': %zu bytes left allocated by 200 decodes", metas[k], after - before);
    }
}

static void test_encode_no_leak(void) {
    cJSON *meta = cJSON_Parse("{\"a\":1}");
    REQUIRE(meta);
    for (int pass = 0; pass < 2; pass++) {
        size_t len, before = mallinfo2().uordblks;
        for (int t = 0; t < 200; t++) free(hfl_msg_encode(HFL_MSG_HELLO, meta, NULL, 0, &len));
        size_t after = mallinfo2().uordblks;
        if (pass == 1) /* the first pass fills malloc's caches (freed chunks it keeps count as in use) */
            CHECK_MSG(after < before + 1024, "%zu bytes left allocated by 200 encodes", after - before);
    }
    cJSON_Delete(meta);

    /* a meta one byte over HFL_MSG_MAX_META, refused: its printed text (over
     * 1 MiB, maybe mmapped: hblkhd counts those) is freed too */
    size_t n = HFL_MSG_MAX_META - 7; /* {"s":""} is 8 bytes */
    char *s = hfl_malloc(n + 1);
    memset(s, 'x', n);
    s[n] = 0;
    meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "s", s);
    free(s);
    for (int pass = 0; pass < 2; pass++) {
        struct mallinfo2 mi = mallinfo2();
        size_t len, before = mi.uordblks + mi.hblkhd;
        for (int t = 0; t < 4; t++) CHECK(hfl_msg_encode(HFL_MSG_HELLO, meta, NULL, 0, &len) == NULL);
        mi = mallinfo2();
        size_t after = mi.uordblks + mi.hblkhd;
        if (pass == 1)
            CHECK_MSG(after < before + HFL_MSG_MAX_META, "%zu bytes left allocated by 4 refused encodes",
                      after - before);
    }
    cJSON_Delete(meta);
}

static const check_case cases[] = {
    {"names", test_names},
    {"encoded_header", test_encoded_header},
    {"encode_refusals", test_encode_refusals},
    {"decode_u16", test_decode_u16},
    {"decode_meta_limit", test_decode_meta_limit},
    {"meta_errors", test_meta_errors},
    {"getters", test_getters},
    {"no_leak", test_no_leak},
    {"encode_no_leak", test_encode_no_leak},
};

int main(int argc, char **argv) {
    return check_run("test_msg_edges", cases, CHECK_CASES(cases), argc, argv);
}
