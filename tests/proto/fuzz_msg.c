/* fuzz_msg.c: a fixed-time (default 3 s) mutation fuzzer for hfl_msg_decode.
 *
 * It mutates valid encoded messages (bit flips, byte stores, truncation,
 * extension, header length/type edits, JSON-ish bytes in the meta) and, in
 * half the cases, recomputes the CRC so the later checks (JSON, object) are
 * reached. Every decode must either return a consistent message or -1 with a
 * non-empty error. Usage: fuzz_msg [seconds] [seed]. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proto/msg.h"
#include "util/util.h"

#define FUZZ_MAX_PAYLOAD 4096
#define FUZZ_CORPUS 16

static uint64_t fuzz_state;

static uint32_t fuzz_rand(void) { /* xorshift64* */
    fuzz_state ^= fuzz_state >> 12;
    fuzz_state ^= fuzz_state << 25;
    fuzz_state ^= fuzz_state >> 27;
    return (uint32_t)((fuzz_state * 0x2545F4914F6CDD1DULL) >> 32);
}

static void fuzz_put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t fuzz_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Applies one random mutation to buf (capacity cap), updating *len. */
static void fuzz_mutate(uint8_t *buf, size_t *len, size_t cap) {
    static const char json_bytes[] = "{}[]\":,01-.eE tfnul\\";
    size_t n = *len;
    switch (fuzz_rand() % 7) {
    case 0: /* flip 1..8 bits */
        for (int k = 1 + fuzz_rand() % 8; k > 0 && n; k--) buf[fuzz_rand() % n] ^= (uint8_t)(1u << (fuzz_rand() % 8));
        break;
    case 1: /* truncate */
        *len = n ? fuzz_rand() % n : 0;
        break;
    case 2: /* extend with random bytes */
        for (int k = 1 + fuzz_rand() % 16; k > 0 && *len < cap; k--) buf[(*len)++] = (uint8_t)fuzz_rand();
        break;
    case 3: /* edit meta_len or payload_len */
        if (n >= HFL_MSG_HEADER_BYTES) {
            uint8_t *f = buf + (fuzz_rand() % 2 ? 8 : 12);
            uint32_t v = fuzz_get_u32(f), r = fuzz_rand();
            fuzz_put_u32(f, r % 4 == 0 ? r : v + (r % 9) - 4);
        }
        break;
    case 4: /* type 0..15 */
        if (n >= HFL_MSG_HEADER_BYTES) buf[6] = (uint8_t)(fuzz_rand() % 16);
        break;
    case 5: /* JSON-ish bytes into the meta */
        if (n > HFL_MSG_HEADER_BYTES) {
            size_t meta_len = fuzz_get_u32(buf + 8), room = n - HFL_MSG_HEADER_BYTES;
            size_t span = meta_len && meta_len < room ? meta_len : room;
            for (int k = 1 + fuzz_rand() % 3; k > 0; k--)
                buf[HFL_MSG_HEADER_BYTES + fuzz_rand() % span] =
                    (uint8_t)json_bytes[fuzz_rand() % (sizeof json_bytes - 1)];
        }
        break;
    default: /* random byte store */
        if (n) buf[fuzz_rand() % n] = (uint8_t)fuzz_rand();
        break;
    }
}

/* A decoded message must be self-consistent and lie inside the buffer. */
static int fuzz_valid(const hfl_msg *m, const uint8_t *buf, size_t len) {
    return cJSON_IsObject(m->meta) && m->type >= HFL_MSG_HELLO && m->type <= HFL_MSG_LAST &&
           m->payload_len <= FUZZ_MAX_PAYLOAD && m->payload >= buf + HFL_MSG_HEADER_BYTES &&
           m->payload + m->payload_len == buf + len;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    fuzz_state = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x9E3779B97F4A7C15ULL;
    if (!fuzz_state) fuzz_state = 1;
    uint8_t *corpus[FUZZ_CORPUS];
    size_t corpus_len[FUZZ_CORPUS];
    uint8_t payload[1024];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)fuzz_rand();
    for (int i = 0; i < FUZZ_CORPUS; i++) {
        cJSON *meta = i % 4 == 0 ? NULL : cJSON_CreateObject();
        if (meta) {
            cJSON_AddNumberToObject(meta, "round", i);
            cJSON_AddStringToObject(meta, "client", "client-3");
            if (i % 2) cJSON_AddItemToObject(meta, "dims", cJSON_CreateIntArray((int[]){784, 10}, 2));
        }
        corpus[i] = hfl_msg_encode(1 + i % 9, meta, payload, (size_t)(i * 61) % 1024, &corpus_len[i]);
        CHECK(corpus[i] != NULL);
        cJSON_Delete(meta);
    }
    size_t cap = 2048, accepted = 0, rejected = 0, json_errors = 0, iterations = 0;
    uint8_t *buf = hfl_malloc(cap);
    double start = hfl_now();
    while (hfl_now() - start < seconds && !check_failures) {
        for (int batch = 0; batch < 256; batch++, iterations++) {
            int c = (int)(fuzz_rand() % FUZZ_CORPUS);
            size_t len = corpus_len[c];
            memcpy(buf, corpus[c], len);
            for (int k = 1 + fuzz_rand() % 3; k > 0; k--) fuzz_mutate(buf, &len, cap);
            if (fuzz_rand() % 2 && len >= HFL_MSG_HEADER_BYTES)
                fuzz_put_u32(buf + 16, hfl_crc32c(0, buf + HFL_MSG_HEADER_BYTES, len - HFL_MSG_HEADER_BYTES));
            /* decode from an exact-size copy so any over-read is a real over-read */
            uint8_t *exact = hfl_malloc(len);
            memcpy(exact, buf, len);
            hfl_msg m;
            char err[HFL_ERR_LEN] = "";
            int rv = hfl_msg_decode(exact, len, FUZZ_MAX_PAYLOAD, &m, err);
            if (rv == 0) {
                accepted++;
                CHECK(fuzz_valid(&m, exact, len));
                hfl_msg_free(&m);
            } else {
                rejected++;
                CHECK(rv == -1 && err[0] != 0);
                if (strstr(err, "JSON")) json_errors++;
            }
            free(exact);
        }
    }
    printf("fuzz_msg: %zu iterations, %zu accepted, %zu rejected (%zu at the JSON checks)\n",
           iterations, accepted, rejected, json_errors);
    CHECK(accepted > 0);
    CHECK(rejected > 0);
    CHECK(json_errors > 0);
    for (int i = 0; i < FUZZ_CORPUS; i++) free(corpus[i]);
    free(buf);
    return check_exit("fuzz_msg");
}
