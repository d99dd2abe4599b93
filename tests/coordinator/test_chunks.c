/* test_chunks.c: a task's weights in chunks (coordinator/downlink.c,
 * docs/protocol.md "Chunked weights"), in-process on the harness's mlp
 * (796,852 bytes of fp32 weights) with a chunk of 64 KiB: 13 chunks.
 *
 * The oracle is the global model itself: the chunks fetched one by one,
 * joined and decoded by the fp32 codec, give its floats bit for bit, and
 * each chunk's and the whole's SHA-256 is the one the task names. Besides:
 * every client's task leaves the weights out and all are served from the
 * global model itself, the task building no copy of it (the heap grows by
 * under half the payload: an encoded copy is all of it); weights that fit a
 * chunk ride in the task as before; and
 * every fetch that is not for a chunk of the open round's task is refused
 * with one line, the model untouched; a client may fetch the weights' bytes
 * as often as it may download them (1 + COORD_MAX_RESENDS times), and a
 * chunk size that would need more digests than a task can name is refused
 * at start. */
#include <malloc.h>

#include "tests/coordinator/rounds_harness.h"

#include "proto/messages.h"

#define CHUNK 65536

/* A round of k clients of 100 samples over a global model of a known
 * pattern, the weights chunked; ids[] tasked. */
static int ids[3];
static void open_round(int k, uint64_t chunk) {
    setup(k, k, 60, 1.0);
    c.down.chunk_bytes = chunk;
    for (size_t i = 0; i < c.spec.n_params; i++) c.global[i] = (float)sin((double)i) / 8;
    char name[16];
    for (int i = 0; i < k; i++) snprintf(name, sizeof name, "c%d", i), ids[i] = hello(name, 100);
    rounds_tick(&c);
    REQUIRE(c.r.open);
}

/* id's pull: the TASK's fields into tm (to free), its payload's length. */
static size_t pull_task(int id, hfl_task_msg *tm) {
    size_t len = 0;
    uint8_t *rep = rounds_pull(&c, id, -1, &len);
    hfl_msg m;
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(rep && hfl_msg_decode(rep, len, (size_t)1 << 30, &m, err) == 0 && m.type == HFL_MSG_TASK, "%s", err);
    memset(tm, 0, sizeof *tm);
    CHECK_MSG(hfl_wire_decode(&hfl_wire_task, m.meta, tm, err) == 0, "%s", err);
    size_t plen = m.payload_len;
    hfl_msg_free(&m);
    free(rep);
    return plen;
}

/* A fetch from id; the reply decoded into m (to free), or NULL with its error in why. */
static uint8_t *fetch(int id, const char *meta_json, hfl_msg *m, char *why) {
    cJSON *meta = cJSON_Parse(meta_json);
    REQUIRE(meta != NULL);
    size_t len = 0;
    uint8_t *rep = downlink_fetch(&c, id, meta, &len);
    cJSON_Delete(meta);
    char err[HFL_ERR_LEN] = "";
    REQUIRE_MSG(rep && hfl_msg_decode(rep, len, (size_t)1 << 30, m, err) == 0, "%s", err);
    if (m->type == HFL_MSG_FETCH) return rep;
    snprintf(why, HFL_ERR_LEN, "%s", str(m->meta, "error") ? str(m->meta, "error") : "(no error)");
    hfl_msg_free(m);
    free(rep);
    return NULL;
}

/* Bytes the allocator has handed out (its heap and its own mmaps). */
static size_t heap_bytes(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void test_serve(void) {
    open_round(3, CHUNK);
    hfl_task_msg tm;
    size_t total = HFL_CODEC_HEADER_BYTES + c.spec.n_params * sizeof(float), n = (total + CHUNK - 1) / CHUNK;
    size_t heap0 = heap_bytes();
    CHECK_MSG(pull_task(ids[0], &tm) == 0, "the task carries no weights");
    size_t grown = heap_bytes() - heap0;
    CHECK_MSG(grown < total / 2, "the first task grew the heap by %zu bytes: a copy of the %zu-byte weights?", grown,
              total);
    CHECK_MSG(tm.has_payload_bytes && tm.payload_bytes == (int64_t)total && tm.chunk_bytes == CHUNK &&
                  tm.has_chunk_sha256 && tm.chunk_sha256.n == (int)n && !strcmp(tm.weights, "full"),
              "payload_bytes %lld, chunk %lld, %d digests", (long long)tm.payload_bytes, (long long)tm.chunk_bytes,
              tm.chunk_sha256.n);
    uint8_t *all = hfl_calloc(total, 1);
    double before = c.r.slot[ids[0]].bytes_down;
    size_t reply_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        char q[160], why[HFL_ERR_LEN] = "", hex[65];
        snprintf(q, sizeof q, "{\"round\":%d,\"version\":%d,\"base_version\":-1,\"offset\":%zu}", c.r.round,
                 c.version, i * CHUNK);
        hfl_msg m;
        uint8_t *rep = fetch(ids[0], q, &m, why);
        if (!CHECK_MSG(rep, "chunk %zu: %s", i, why)) break;
        size_t want = i + 1 < n ? CHUNK : total - i * CHUNK;
        CHECK_MSG(m.payload_len == want, "chunk %zu: %zu bytes, want %zu", i, m.payload_len, want);
        hfl_sha256_hex(m.payload, m.payload_len, hex);
        CHECK_MSG(!strcmp(hex, ((hfl_chunk_digest *)tm.chunk_sha256.v)[i].sha256), "chunk %zu's digest", i);
        memcpy(all + i * CHUNK, m.payload, m.payload_len < want ? m.payload_len : want);
        reply_bytes += 24 + m.meta_len + m.payload_len;
        hfl_msg_free(&m);
        free(rep);
    }
    char hex[65];
    hfl_sha256_hex(all, total, hex);
    CHECK(!strcmp(hex, tm.payload_sha256));
    /* joined and decoded: the global weights, bit for bit */
    float *w = hfl_calloc(c.spec.n_params, sizeof(float));
    char err[HFL_ERR_LEN] = "";
    CHECK_MSG(hfl_codec_decode_accumulate(hfl_codec_find("fp32", NULL), all, total, c.spec.n_params, 1.0f, w, 1,
                                          err) == 0, "%s", err);
    CHECK(!memcmp(w, c.global, c.spec.n_params * sizeof(float)));
    /* the chunks count as the client's download */
    CHECK_MSG(c.r.slot[ids[0]].bytes_down - before == (double)reply_bytes, "bytes_down grew %.0f, replies %zu",
              c.r.slot[ids[0]].bytes_down - before, reply_bytes);
    /* every client's task from the same weights, each a few hundred bytes,
     * and no copy made for them */
    heap0 = heap_bytes();
    for (int i = 1; i < 3; i++) {
        size_t len = 0;
        uint8_t *rep = rounds_pull(&c, ids[i], -1, &len);
        CHECK_MSG(len < 8192, "client %d's task is %zu bytes", i, len);
        free(rep);
    }
    CHECK_MSG(heap_bytes() - heap0 < total / 2, "two more tasks grew the heap by %zu bytes", heap_bytes() - heap0);
    hfl_wire_free(&hfl_wire_task, &tm);
    free(all), free(w);
    teardown();
}

/* A fetch that must be refused with an error containing want. */
static void refused(int id, const char *meta_json, const char *want) {
    hfl_msg m;
    char why[HFL_ERR_LEN] = "";
    uint8_t *rep = fetch(id, meta_json, &m, why);
    if (rep) hfl_msg_free(&m), free(rep);
    CHECK_MSG(!rep && strstr(why, want) && !strchr(why, '\n'), "%s: '%s', expected '%s'", meta_json, why, want);
}

static void test_refusals(void) {
    open_round(2, CHUNK);
    hfl_task_msg tm;
    pull_task(ids[0], &tm);
    hfl_wire_free(&hfl_wire_task, &tm);
    float *before = hfl_malloc(c.spec.n_params * sizeof(float));
    memcpy(before, c.global, c.spec.n_params * sizeof(float));
    char q[200];
    const char *fmt = "{\"round\":%d,\"version\":%d,\"base_version\":%d,\"offset\":%lld}";
    long long total = HFL_CODEC_HEADER_BYTES + (long long)c.spec.n_params * 4;
    snprintf(q, sizeof q, fmt, c.r.round, c.version, -1, (long long)CHUNK + 1);
    refused(ids[0], q, "fetch: the offset is not the start of a chunk");
    snprintf(q, sizeof q, fmt, c.r.round, c.version, -1, (total + CHUNK - 1) / CHUNK * CHUNK);
    refused(ids[0], q, "fetch: the offset is not the start of a chunk");
    snprintf(q, sizeof q, fmt, c.r.round + 1, c.version, -1, 0LL);
    refused(ids[0], q, "the task's weights are gone (a new round began)");
    snprintf(q, sizeof q, fmt, c.r.round, c.version + 1, -1, 0LL);
    refused(ids[0], q, "the task's weights are gone");
    snprintf(q, sizeof q, fmt, c.r.round, c.version, 0, 0LL);
    refused(ids[0], q, "no chunked weights of this round against that base version");
    snprintf(q, sizeof q, fmt, c.r.round, c.version, -1, 0LL);
    refused(ids[1], q, "no task of this round was sent to this client"); /* drawn, not yet pulled */
    refused(ids[0], "{\"round\":1,\"version\":0,\"base_version\":-1}", "fetch: missing field 'offset'");
    refused(ids[0], "{\"round\":1,\"version\":0,\"base_version\":-1,\"offset\":-4}", "field 'offset'");
    CHECK(!memcmp(before, c.global, c.spec.n_params * sizeof(float)));
    free(before);
    teardown();
}

/* Fetching the same chunks again and again: as many bytes as the weights'
 * downloads allowed, then skip_round. */
static void test_fetch_cap(void) {
    open_round(1, CHUNK);
    hfl_task_msg tm;
    pull_task(ids[0], &tm);
    hfl_wire_free(&hfl_wire_task, &tm);
    size_t total = HFL_CODEC_HEADER_BYTES + c.spec.n_params * sizeof(float);
    /* the last chunk (total mod CHUNK bytes) until the allowance runs out */
    size_t last = (total - 1) / CHUNK * CHUNK, m = total - last;
    size_t allowed = (size_t)((1.0 + COORD_MAX_RESENDS) * (double)total / (double)m);
    char q[160], why[HFL_ERR_LEN] = "";
    snprintf(q, sizeof q, "{\"round\":%d,\"version\":%d,\"base_version\":-1,\"offset\":%zu}", c.r.round, c.version,
             last);
    uint64_t rejected = c.rejected;
    for (size_t i = 0; i < allowed; i++) {
        hfl_msg msg;
        uint8_t *rep = fetch(ids[0], q, &msg, why);
        if (!CHECK_MSG(rep, "fetch %zu of %zu allowed: %s", i + 1, allowed, why)) break;
        hfl_msg_free(&msg), free(rep);
    }
    hfl_msg msg;
    uint8_t *rep = fetch(ids[0], q, &msg, why);
    CHECK_MSG(!rep && strstr(why, "fetched too often") && c.rejected == rejected + 1, "the next fetch: '%s'", why);
    if (rep) hfl_msg_free(&msg), free(rep);
    teardown();
}

/* A chunk size that would need more digests than a task can name. */
static void test_too_many_chunks(void) {
    setup(1, 1, 60, 1.0); /* mlp: 796,852 bytes */
    downlink_free(&c);
    char err[HFL_ERR_LEN] = "";
    size_t n = c.spec.n_params;
    c.spec.n_params = (size_t)HFL_WIRE_MAX_CHUNKS * 1024 + 1; /* fp32: > 8192 chunks of 4 KiB; nothing allocated */
    CHECK(downlink_init(&c, "fp32", 0, 4096, err) == -1);
    CHECK_MSG(strstr(err, "more than 8192 chunks") && strstr(err, "use at least 4097"), "%s", err);
    c.spec.n_params = n;
    CHECK_MSG(downlink_init(&c, "fp32", 0, 4096, err) == 0, "%s", err); /* the mlp: 195 chunks */
    teardown();
}

/* Weights no larger than a chunk ride in the task, as without chunking. */
static void test_whole(void) {
    open_round(1, (uint64_t)1 << 20);
    hfl_task_msg tm;
    size_t plen = pull_task(ids[0], &tm);
    CHECK_MSG(plen == HFL_CODEC_HEADER_BYTES + c.spec.n_params * 4 && !tm.has_payload_bytes && !tm.has_chunk_sha256,
              "payload %zu bytes", plen);
    hfl_wire_free(&hfl_wire_task, &tm);
    teardown();
}

static const check_case cases[] = {
    {"serve", test_serve},
    {"refusals", test_refusals},
    {"whole", test_whole},
    {"fetch_cap", test_fetch_cap},
    {"too_many_chunks", test_too_many_chunks},
};

int main(int argc, char **argv) {
    return check_run("test_chunks", cases, CHECK_CASES(cases), argc, argv);
}
