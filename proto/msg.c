/* msg.c: encoding, decoding and validation of hfl wire messages (see msg.h),
 * and the typed meta getters.
 *
 * Decisions: a NULL meta is encoded as meta_len 0, which decodes to an empty
 * object; the reserved header word is written as 0 and ignored on decode (room
 * for a future flag without a version bump); meta must be exactly one JSON
 * value filling meta_len (no trailing bytes, not even whitespace). */
#include "proto/msg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <mbedtls/sha256.h>

#include "util/util.h"

static const char *const msg_type_names[] = {
    [HFL_MSG_HELLO] = "hello", [HFL_MSG_WELCOME] = "welcome", [HFL_MSG_PULL] = "pull",
    [HFL_MSG_TASK] = "task",   [HFL_MSG_WAIT] = "wait",       [HFL_MSG_UPDATE] = "update",
    [HFL_MSG_ACK] = "ack",     [HFL_MSG_ERROR] = "error",     [HFL_MSG_BYE] = "bye",
    [HFL_MSG_CHALLENGE] = "challenge",
    [HFL_MSG_SECAGG] = "secagg", [HFL_MSG_FETCH] = "fetch", [HFL_MSG_PUT] = "put", [HFL_MSG_TIER] = "tier",
};

const char *hfl_msg_type_name(int type) {
    if (type < HFL_MSG_HELLO || type > HFL_MSG_LAST) return "unknown";
    return msg_type_names[type];
}

void hfl_sha256_hex(const void *p, size_t n, char hex[65]) {
    unsigned char d[32];
    mbedtls_sha256_ret(p, n, d, 0);
    hfl_hex(d, sizeof d, hex);
}

static void msg_put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t msg_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t msg_get_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Returns NULL when the type is unknown, meta cannot be printed, or a length
 * exceeds what the header (or the decoder's meta limit) can carry. */
uint8_t *hfl_msg_encode(int type, const cJSON *meta, const void *payload, size_t payload_len,
                        size_t *out_len) {
    if (type < HFL_MSG_HELLO || type > HFL_MSG_LAST || payload_len > UINT32_MAX) return NULL;
    if (payload_len > 0 && !payload) return NULL;
    char *json = NULL;
    size_t meta_len = 0;
    if (meta) {
        json = cJSON_PrintUnformatted(meta);
        if (!json) return NULL;
        meta_len = strlen(json);
        if (meta_len > HFL_MSG_MAX_META) {
            cJSON_free(json);
            return NULL;
        }
    }
    size_t total = HFL_MSG_HEADER_BYTES + meta_len + payload_len;
    uint8_t *buf = hfl_malloc(total);
    uint8_t *body = buf + HFL_MSG_HEADER_BYTES;
    if (meta_len) memcpy(body, json, meta_len);
    if (payload_len) memcpy(body + meta_len, payload, payload_len);
    cJSON_free(json);
    msg_put_u32(buf, HFL_MSG_MAGIC);
    buf[4] = HFL_MSG_VERSION & 0xff;
    buf[5] = HFL_MSG_VERSION >> 8;
    buf[6] = (uint8_t)type;
    buf[7] = (uint8_t)(type >> 8);
    msg_put_u32(buf + 8, (uint32_t)meta_len);
    msg_put_u32(buf + 12, (uint32_t)payload_len);
    msg_put_u32(buf + 16, hfl_crc32c(0, body, meta_len + payload_len));
    msg_put_u32(buf + 20, 0);
    *out_len = total;
    return buf;
}

int hfl_json_depth(const char *text, size_t len, int stop) {
    int depth = 0, deepest = 0, in_string = 0;
    for (size_t i = 0; i < len && deepest < stop; i++) {
        char ch = text[i];
        if (in_string) {
            if (ch == '\\') i++; /* the escaped character is never a quote that ends the string */
            else if (ch == '"') in_string = 0;
        } else if (ch == '"') {
            in_string = 1;
        } else if (ch == '{' || ch == '[') {
            if (++depth > deepest) deepest = depth;
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
    }
    return deepest;
}

/* Parses meta (already CRC-checked) into a JSON object, at most
 * HFL_MSG_MAX_DEPTH deep: the depth is counted on the text first, so a deep
 * document is refused before cJSON recurses into it. */
static int msg_parse_meta(const uint8_t *meta, size_t meta_len, cJSON **out, char *err) {
    if (meta_len == 0) {
        *out = cJSON_CreateObject();
        if (!*out) return hfl_errf(err, "out of memory creating meta");
        return 0;
    }
    if (hfl_json_depth((const char *)meta, meta_len, HFL_MSG_MAX_DEPTH + 1) > HFL_MSG_MAX_DEPTH)
        return hfl_errf(err, "meta nests deeper than %d levels", HFL_MSG_MAX_DEPTH);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts((const char *)meta, meta_len, &end, 0);
    if (!j) {
        size_t at = end ? (size_t)(end - (const char *)meta) : 0;
        return hfl_errf(err, "meta is not valid JSON (error at byte %zu of %zu)", at, meta_len);
    }
    size_t used = (size_t)(end - (const char *)meta);
    if (used != meta_len) {
        cJSON_Delete(j);
        return hfl_errf(err, "meta has %zu bytes after its JSON value", meta_len - used);
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return hfl_errf(err, "meta is not a JSON object");
    }
    *out = j;
    return 0;
}

int hfl_msg_decode(const uint8_t *buf, size_t len, size_t max_payload, hfl_msg *out, char *err) {
    memset(out, 0, sizeof *out);
    if (len < HFL_MSG_HEADER_BYTES) return hfl_errf(err, "truncated header: %zu bytes", len);
    uint32_t magic = msg_get_u32(buf);
    if (magic != HFL_MSG_MAGIC)
        return hfl_errf(err, "bad magic 0x%08x: not an hfl message", (unsigned)magic);
    unsigned version = msg_get_u16(buf + 4);
    if (version != HFL_MSG_VERSION)
        return hfl_errf(err, "unsupported message version %u (expected %d)", version,
                        HFL_MSG_VERSION);
    unsigned type = msg_get_u16(buf + 6);
    if (type < HFL_MSG_HELLO || type > HFL_MSG_LAST)
        return hfl_errf(err, "unknown message type %u", type);
    size_t meta_len = msg_get_u32(buf + 8), payload_len = msg_get_u32(buf + 12);
    if (meta_len > HFL_MSG_MAX_META)
        return hfl_errf(err, "meta of %zu bytes exceeds limit %u", meta_len, HFL_MSG_MAX_META);
    if (payload_len > max_payload)
        return hfl_errf(err, "payload of %zu bytes exceeds limit %zu", payload_len, max_payload);
    size_t want = HFL_MSG_HEADER_BYTES + meta_len + payload_len;
    if (want > len)
        return hfl_errf(err, "truncated message: header says %zu bytes, got %zu", want, len);
    if (want < len)
        return hfl_errf(err, "%zu trailing bytes after a %zu-byte message", len - want, want);
    const uint8_t *body = buf + HFL_MSG_HEADER_BYTES;
    uint32_t crc = hfl_crc32c(0, body, meta_len + payload_len), sent = msg_get_u32(buf + 16);
    if (crc != sent)
        return hfl_errf(err, "CRC mismatch: header 0x%08x, computed 0x%08x", (unsigned)sent,
                        (unsigned)crc);
    if (msg_parse_meta(body, meta_len, &out->meta, err) != 0) return -1;
    out->type = (int)type;
    out->payload = body + meta_len;
    out->payload_len = payload_len;
    out->meta_raw = body;
    out->meta_len = meta_len;
    return 0;
}

void hfl_msg_free(hfl_msg *m) {
    if (!m) return;
    cJSON_Delete(m->meta);
    memset(m, 0, sizeof *m);
}

static const cJSON *meta_field(const cJSON *meta, const char *key, char *err) {
    const cJSON *item = cJSON_IsObject(meta) ? cJSON_GetObjectItemCaseSensitive(meta, key) : NULL;
    if (!item) hfl_errf(err, "missing field '%s'", key);
    return item;
}

int hfl_meta_int(const cJSON *meta, const char *key, int64_t lo, int64_t hi, int64_t *out,
                 char *err) {
    const cJSON *item = meta_field(meta, key, err);
    if (!item) return -1;
    if (!cJSON_IsNumber(item)) return hfl_errf(err, "field '%s' is not a number", key);
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v)) return hfl_errf(err, "field '%s' is not an integer", key);
    /* 2^63 is exact in a double; anything at or beyond it cannot be an int64. */
    if (v >= 9223372036854775808.0 || v < -9223372036854775808.0 || (int64_t)v < lo ||
        (int64_t)v > hi)
        return hfl_errf(err, "field '%s' = %.17g is outside [%lld, %lld]", key, v, (long long)lo,
                        (long long)hi);
    *out = (int64_t)v;
    return 0;
}

int hfl_meta_num(const cJSON *meta, const char *key, double lo, double hi, double *out,
                 char *err) {
    const cJSON *item = meta_field(meta, key, err);
    if (!item) return -1;
    if (!cJSON_IsNumber(item)) return hfl_errf(err, "field '%s' is not a number", key);
    double v = item->valuedouble;
    if (!isfinite(v)) return hfl_errf(err, "field '%s' is not a finite number", key);
    if (v < lo || v > hi)
        return hfl_errf(err, "field '%s' = %g is outside [%g, %g]", key, v, lo, hi);
    *out = v;
    return 0;
}

int hfl_meta_str(const cJSON *meta, const char *key, size_t maxlen, char *out, char *err) {
    const cJSON *item = meta_field(meta, key, err);
    if (!item) return -1;
    if (!cJSON_IsString(item) || !item->valuestring)
        return hfl_errf(err, "field '%s' is not a string", key);
    size_t n = strlen(item->valuestring);
    if (n == 0) return hfl_errf(err, "field '%s' is empty", key);
    if (n > maxlen) return hfl_errf(err, "field '%s' is %zu bytes long (limit %zu)", key, n, maxlen);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)item->valuestring[i] < 0x20 || item->valuestring[i] == 0x7f)
            return hfl_errf(err, "field '%s' holds a control character", key);
    memcpy(out, item->valuestring, n + 1);
    return 0;
}
