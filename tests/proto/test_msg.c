/* test_msg.c: unit tests for CRC-32C, message encode/decode and validation,
 * and the typed meta getters (proto/msg.c, proto/crc32c.c). */
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"
#include "tests/check.h"
#include "util/util.h"

#define MAX_PAYLOAD (1u << 20)

/* Bit-at-a-time reference CRC-32C to check the sliced implementation against. */
static uint32_t crc32c_reference(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void test_crc32c(void) {
    CHECK(hfl_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(hfl_crc32c(0, "", 0) == 0);
    uint8_t buf[1000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 131 + 7);
    for (size_t n = 0; n <= sizeof buf; n += 37) {
        CHECK(hfl_crc32c(0, buf, n) == crc32c_reference(buf, n));
        size_t half = n / 3; /* incremental == one shot */
        CHECK(hfl_crc32c(hfl_crc32c(0, buf, half), buf + half, n - half) == hfl_crc32c(0, buf, n));
    }
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_crc(uint8_t *buf, size_t len) {
    put_u32(buf + 16, hfl_crc32c(0, buf + HFL_MSG_HEADER_BYTES, len - HFL_MSG_HEADER_BYTES));
}

static void test_round_trip(void) {
    uint8_t payload[31 * HFL_MSG_LAST];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i ^ 0x5a);
    for (int type = HFL_MSG_HELLO; type <= HFL_MSG_LAST; type++) {
        cJSON *meta = cJSON_CreateObject();
        cJSON_AddNumberToObject(meta, "round", type * 10);
        cJSON_AddStringToObject(meta, "name", hfl_msg_type_name(type));
        size_t plen = (size_t)type * 31, len = 0;
        uint8_t *buf = hfl_msg_encode(type, meta, payload, plen, &len);
        CHECK(buf != NULL);
        hfl_msg m;
        char err[HFL_ERR_LEN] = "";
        CHECK(hfl_msg_decode(buf, len, MAX_PAYLOAD, &m, err) == 0);
        CHECK(m.type == type && m.payload_len == plen && !memcmp(m.payload, payload, plen));
        CHECK(cJSON_Compare(m.meta, meta, 1));
        CHECK(strcmp(hfl_msg_type_name(type), "unknown") != 0);
        hfl_msg_free(&m);
        free(buf);
        cJSON_Delete(meta);
    }
    size_t len;
    uint8_t *buf = hfl_msg_encode(HFL_MSG_PULL, NULL, NULL, 0, &len);
    hfl_msg m;
    char err[HFL_ERR_LEN];
    CHECK(buf && len == HFL_MSG_HEADER_BYTES);
    CHECK(buf && hfl_msg_decode(buf, len, 0, &m, err) == 0 && cJSON_IsObject(m.meta) &&
          m.meta->child == NULL && m.payload_len == 0);
    hfl_msg_free(&m);
    free(buf);
    CHECK(hfl_msg_encode(0, NULL, NULL, 0, &len) == NULL);
    CHECK(hfl_msg_encode(99, NULL, NULL, 0, &len) == NULL);
    CHECK(strcmp(hfl_msg_type_name(0), "unknown") == 0);
}

/* Decodes buf and checks it is refused with an error containing `want`. */
static void expect_reject(const uint8_t *buf, size_t len, size_t max, const char *want) {
    hfl_msg m;
    char err[HFL_ERR_LEN] = "";
    int rv = hfl_msg_decode(buf, len, max, &m, err);
    CHECK_MSG(rv == -1 && strstr(err, want), "expected an error with '%s', got rv=%d err='%s'", want, rv, err);
    if (rv == 0) hfl_msg_free(&m);
}

/* A valid UPDATE with meta text `json` (raw, not re-printed) and a 64-byte payload. */
static uint8_t *raw_message(const char *json, size_t *len) {
    size_t ml = strlen(json), pl = 64;
    *len = HFL_MSG_HEADER_BYTES + ml + pl;
    uint8_t *buf = hfl_calloc(1, *len + 8);
    put_u32(buf, HFL_MSG_MAGIC);
    buf[4] = HFL_MSG_VERSION;
    buf[6] = HFL_MSG_UPDATE;
    put_u32(buf + 8, (uint32_t)ml);
    put_u32(buf + 12, (uint32_t)pl);
    memcpy(buf + HFL_MSG_HEADER_BYTES, json, ml);
    for (size_t i = 0; i < pl; i++) buf[HFL_MSG_HEADER_BYTES + ml + i] = (uint8_t)i;
    fix_crc(buf, *len);
    return buf;
}

static void test_rejections(void) {
    size_t len;
    uint8_t *buf = raw_message("{\"loss\":0.5}", &len);
    hfl_msg m;
    char err[HFL_ERR_LEN];
    CHECK(hfl_msg_decode(buf, len, MAX_PAYLOAD, &m, err) == 0);
    hfl_msg_free(&m);

    expect_reject(buf, 0, MAX_PAYLOAD, "truncated header: 0 bytes");
    expect_reject(buf, 23, MAX_PAYLOAD, "truncated header: 23 bytes");
    expect_reject(buf, len - 1, MAX_PAYLOAD, "truncated message");
    expect_reject(buf, 30, MAX_PAYLOAD, "truncated message");
    expect_reject(buf, len + 3, MAX_PAYLOAD, "3 trailing bytes");
    expect_reject(buf, len, 63, "payload of 64 bytes exceeds limit 63");

    buf[HFL_MSG_HEADER_BYTES + 20] ^= 0x10; /* one payload bit */
    expect_reject(buf, len, MAX_PAYLOAD, "CRC mismatch");
    buf[HFL_MSG_HEADER_BYTES + 20] ^= 0x10;

    buf[0] ^= 1;
    expect_reject(buf, len, MAX_PAYLOAD, "bad magic");
    buf[0] ^= 1;
    buf[4] = 2;
    expect_reject(buf, len, MAX_PAYLOAD, "unsupported message version 2");
    buf[4] = 1;
    buf[6] = 0;
    expect_reject(buf, len, MAX_PAYLOAD, "unknown message type 0");
    buf[6] = 99;
    expect_reject(buf, len, MAX_PAYLOAD, "unknown message type 99");
    buf[6] = HFL_MSG_UPDATE;
    put_u32(buf + 8, HFL_MSG_MAX_META + 1);
    expect_reject(buf, len, MAX_PAYLOAD, "meta of 1048577 bytes exceeds limit");
    free(buf);

    static const struct { const char *json, *want; } bad_meta[] = {
        {"{\"loss\":", "not valid JSON"},  {"not json", "not valid JSON"},
        {"[1,2,3]", "not a JSON object"}, {"\"text\"", "not a JSON object"},
        {"{} ", "after its JSON value"},  {"{}{}", "after its JSON value"},
    };
    for (size_t i = 0; i < sizeof bad_meta / sizeof bad_meta[0]; i++) {
        buf = raw_message(bad_meta[i].json, &len);
        expect_reject(buf, len, MAX_PAYLOAD, bad_meta[i].want);
        free(buf);
    }
}

static void test_getters(void) {
    cJSON *meta = cJSON_Parse("{\"n\":42,\"neg\":-7,\"frac\":1.5,\"big\":1e300,\"s\":\"abc\","
                              "\"empty\":\"\",\"arr\":[1],\"N\":5}");
    int64_t i;
    double d;
    char s[8], err[HFL_ERR_LEN];
    CHECK(hfl_meta_int(meta, "n", 0, 100, &i, err) == 0 && i == 42);
    CHECK(hfl_meta_int(meta, "neg", -10, 0, &i, err) == 0 && i == -7);
    CHECK(hfl_meta_int(meta, "n", 0, 41, &i, err) == -1 && strstr(err, "'n'"));
    CHECK(hfl_meta_int(meta, "neg", 0, 10, &i, err) == -1 && strstr(err, "outside"));
    CHECK(hfl_meta_int(meta, "frac", 0, 10, &i, err) == -1 && strstr(err, "not an integer"));
    CHECK(hfl_meta_int(meta, "big", INT64_MIN, INT64_MAX, &i, err) == -1 && strstr(err, "outside"));
    CHECK(hfl_meta_int(meta, "s", 0, 10, &i, err) == -1 && strstr(err, "not a number"));
    CHECK(hfl_meta_int(meta, "missing", 0, 10, &i, err) == -1 && strstr(err, "missing field"));
    CHECK(hfl_meta_int(meta, "N", 0, 100, &i, err) == 0 && i == 5); /* case-sensitive */
    CHECK(hfl_meta_num(meta, "frac", 0, 2, &d, err) == 0 && d == 1.5);
    CHECK(hfl_meta_num(meta, "frac", 0, 1, &d, err) == -1 && strstr(err, "outside"));
    CHECK(hfl_meta_num(meta, "arr", 0, 1, &d, err) == -1 && strstr(err, "not a number"));
    CHECK(hfl_meta_num(meta, "nope", 0, 1, &d, err) == -1 && strstr(err, "missing"));
    CHECK(hfl_meta_str(meta, "s", 7, s, err) == 0 && !strcmp(s, "abc"));
    CHECK(hfl_meta_str(meta, "s", 2, s, err) == -1 && strstr(err, "limit 2"));
    CHECK(hfl_meta_str(meta, "empty", 7, s, err) == -1 && strstr(err, "empty"));
    CHECK(hfl_meta_str(meta, "n", 7, s, err) == -1 && strstr(err, "not a string"));
    CHECK(hfl_meta_str(meta, "S", 7, s, err) == -1 && strstr(err, "missing"));
    CHECK(hfl_meta_int(NULL, "n", 0, 1, &i, err) == -1);
    cJSON_Delete(meta);
}

static const check_case cases[] = {
    {"crc32c", test_crc32c},
    {"round_trip", test_round_trip},
    {"rejections", test_rejections},
    {"getters", test_getters},
};

int main(int argc, char **argv) {
    return check_run("test_msg", cases, CHECK_CASES(cases), argc, argv);
}
