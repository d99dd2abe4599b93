/* fuzz_msg_decode.c: libFuzzer harness for the wire decoder hfl_msg_decode
 * and the meta getters (proto/msg.h).
 *
 * The input is one whole message, decoded as it is and, so that mutations
 * get past the CRC to the JSON and the getters, again with its CRC field
 * recomputed. Invariants:
 *   - a refusal is -1 with a one-line error and no meta to free;
 *   - an accepted message has a known type, an object as meta, and a payload
 *     that ends the buffer, within the payload limit;
 *   - a lower payload limit, or a flipped CRC bit, makes it refused;
 *   - it re-encodes, the re-encoding decodes to the same type and payload,
 *     and encoding is a fixed point from there on (encode(decode(m)) == m);
 *   - every getter on every top-level field either refuses with an error or
 *     returns a value inside the range it was asked for. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "proto/msg.h"
#include "util/util.h"

#define FUZZ_MAX_PAYLOAD 4096

static void check_refusal(int rc, const hfl_msg *m, const char *err) {
    FUZZ_REQUIRE(rc == -1, "decode returned %d", rc);
    FUZZ_REQUIRE(err[0] != 0, "refused without an error");
    FUZZ_REQUIRE(strchr(err, '\n') == NULL, "error is not one line: %s", err);
    FUZZ_REQUIRE(m->meta == NULL, "refused but left a meta: %s", err);
}

/* The getters on one field, with a few ranges each. */
static void check_getters(const cJSON *meta, const char *key) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(meta, key);
    char err[HFL_ERR_LEN];
    static const int64_t int_ranges[][2] = {{INT64_MIN, INT64_MAX}, {0, 100}, {-5, -1}};
    for (size_t r = 0; r < sizeof int_ranges / sizeof int_ranges[0]; r++) {
        int64_t v = 0;
        err[0] = 0;
        if (hfl_meta_int(meta, key, int_ranges[r][0], int_ranges[r][1], &v, err) == 0) {
            FUZZ_REQUIRE(v >= int_ranges[r][0] && v <= int_ranges[r][1], "'%s' = %lld", key, (long long)v);
            FUZZ_REQUIRE(cJSON_IsNumber(item) && item->valuedouble == (double)v, "'%s' is not %lld", key,
                         (long long)v);
        } else {
            FUZZ_REQUIRE(err[0] != 0, "hfl_meta_int refused '%s' without an error", key);
        }
    }
    static const double num_ranges[][2] = {{-1e308, 1e308}, {0, 1}};
    for (size_t r = 0; r < sizeof num_ranges / sizeof num_ranges[0]; r++) {
        double v = 0;
        err[0] = 0;
        if (hfl_meta_num(meta, key, num_ranges[r][0], num_ranges[r][1], &v, err) == 0)
            FUZZ_REQUIRE(isfinite(v) && v >= num_ranges[r][0] && v <= num_ranges[r][1], "'%s' = %g", key, v);
        else
            FUZZ_REQUIRE(err[0] != 0, "hfl_meta_num refused '%s' without an error", key);
    }
    static const size_t str_limits[] = {1, 8, 255};
    for (size_t r = 0; r < sizeof str_limits / sizeof str_limits[0]; r++) {
        char out[256];
        memset(out, 0x55, sizeof out);
        err[0] = 0;
        if (hfl_meta_str(meta, key, str_limits[r], out, err) == 0) {
            size_t n = strnlen(out, sizeof out);
            FUZZ_REQUIRE(n >= 1 && n <= str_limits[r], "'%s' gave %zu bytes (limit %zu)", key, n, str_limits[r]);
            for (size_t i = 0; i < n; i++)
                FUZZ_REQUIRE((unsigned char)out[i] >= 0x20 && out[i] != 0x7f, "'%s' holds 0x%02x", key,
                             (unsigned char)out[i]);
        } else {
            FUZZ_REQUIRE(err[0] != 0, "hfl_meta_str refused '%s' without an error", key);
        }
    }
}

/* encode(m) decodes to m's type and payload; returns the encoding (caller frees). */
static uint8_t *reencode(const hfl_msg *m, size_t *len) {
    uint8_t *buf = hfl_msg_encode(m->type, m->meta, m->payload, m->payload_len, len);
    FUZZ_REQUIRE(buf != NULL, "a decoded %s message does not re-encode", hfl_msg_type_name(m->type));
    hfl_msg back;
    char err[HFL_ERR_LEN] = "";
    FUZZ_REQUIRE(hfl_msg_decode(buf, *len, FUZZ_MAX_PAYLOAD, &back, err) == 0, "re-encoding refused: %s", err);
    FUZZ_REQUIRE(back.type == m->type, "type %d came back as %d", m->type, back.type);
    FUZZ_REQUIRE(back.payload_len == m->payload_len &&
                     (m->payload_len == 0 || memcmp(back.payload, m->payload, m->payload_len) == 0),
                 "payload changed in a re-encoding");
    hfl_msg_free(&back);
    return buf;
}

static void check_message(const uint8_t *data, size_t size) {
    hfl_msg m;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_msg_decode(data, size, FUZZ_MAX_PAYLOAD, &m, err);
    if (rc != 0) {
        check_refusal(rc, &m, err);
        return;
    }
    FUZZ_REQUIRE(strcmp(hfl_msg_type_name(m.type), "unknown") != 0, "accepted type %d", m.type);
    FUZZ_REQUIRE(cJSON_IsObject(m.meta), "meta is not an object");
    FUZZ_REQUIRE(m.payload_len <= FUZZ_MAX_PAYLOAD, "payload of %zu bytes", m.payload_len);
    FUZZ_REQUIRE(m.payload >= data + HFL_MSG_HEADER_BYTES && m.payload + m.payload_len == data + size,
                 "payload does not end the buffer");

    /* Tighter limits and a bad CRC are refused. */
    hfl_msg other;
    if (m.payload_len > 0) {
        err[0] = 0;
        check_refusal(hfl_msg_decode(data, size, m.payload_len - 1, &other, err), &other, err);
    }
    uint8_t *copy = hfl_malloc(size);
    memcpy(copy, data, size);
    copy[16 + data[size - 1] % 4] ^= (uint8_t)(1u << (data[0] % 8));
    err[0] = 0;
    check_refusal(hfl_msg_decode(copy, size, FUZZ_MAX_PAYLOAD, &other, err), &other, err);
    free(copy);

    /* Re-encoding: same type and payload, then a fixed point. */
    size_t len1, len2;
    uint8_t *enc1 = reencode(&m, &len1);
    hfl_msg m1;
    FUZZ_REQUIRE(hfl_msg_decode(enc1, len1, FUZZ_MAX_PAYLOAD, &m1, err) == 0, "%s", err);
    uint8_t *enc2 = reencode(&m1, &len2);
    FUZZ_REQUIRE(len1 == len2 && memcmp(enc1, enc2, len1) == 0, "encode(decode(m)) is not a fixed point");
    hfl_msg_free(&m1);
    free(enc1);
    free(enc2);

    /* The getters on every top-level field (and one that is absent). */
    int fields = 0;
    for (const cJSON *it = m.meta->child; it && fields < 32; it = it->next, fields++)
        if (it->string) check_getters(m.meta, it->string);
    int64_t v;
    err[0] = 0;
    if (!cJSON_GetObjectItemCaseSensitive(m.meta, "missing"))
        FUZZ_REQUIRE(hfl_meta_int(m.meta, "missing", 0, 1, &v, err) == -1 && err[0], "absent field accepted");
    hfl_msg_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    check_message(data, size);
    if (size < HFL_MSG_HEADER_BYTES) return 0;
    uint8_t *fixed = hfl_malloc(size);
    memcpy(fixed, data, size);
    uint32_t crc = hfl_crc32c(0, fixed + HFL_MSG_HEADER_BYTES, size - HFL_MSG_HEADER_BYTES);
    for (int i = 0; i < 4; i++) fixed[16 + i] = (uint8_t)(crc >> (8 * i));
    if (memcmp(fixed + 16, data + 16, 4) != 0) check_message(fixed, size);
    free(fixed);
    return 0;
}
