/* test_uplink.c: updates in chunks (coordinator/uplink.c, docs/protocol.md
 * "Chunked updates"), in-process on the harness's mlp: an fp32 update is
 * 796,852 bytes, 13 puts of 64 KiB.
 *
 * The oracle is the whole path: a round where one client's update went up
 * by put must give the global model, bit for bit, of the same round with
 * that update sent whole (rounds_update on the payload), also when the
 * upload was cut and begun again from byte 0 (the coordinator says where
 * it stands and writes no chunk twice). Then every hostile put and update
 * is refused with one line naming what is wrong, the model untouched: a
 * chunk not at a chunk's start, past the end, of the wrong length, out of
 * order, of another payload than the one begun, of a payload larger than
 * any update, with no task; an update whose spool is missing, short, or
 * does not match its digest, or that also attaches a payload. A spool that
 * stalls is dropped when the next round opens, and a put storm ends with
 * skip_round. */
#include "tests/coordinator/rounds_harness.h"

#include "proto/messages.h"

#define CHUNK 65536

static int ids[2];

static void open_round(void) {
    setup(2, 2, 60, 1.0);
    c.cfg.chunk_bytes = CHUNK;
    for (size_t i = 0; i < c.spec.n_params; i++) c.global[i] = (float)sin((double)i) / 8;
    ids[0] = hello("a", 100), ids[1] = hello("b", 300);
    rounds_tick(&c);
    REQUIRE(c.r.open);
    pull(ids[0], HFL_MSG_TASK), pull(ids[1], HFL_MSG_TASK);
}

/* Client k's update: fp32 of a pattern of its own, into *len bytes (to free). */
static uint8_t *payload(int k, size_t *len) {
    size_t n = c.spec.n_params;
    float *d = hfl_malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = (float)(k ? cos(0.37 * (double)i) : sin(1.3 * (double)i)) / 64;
    const hfl_codec *fp32 = hfl_codec_find("fp32", NULL);
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(fp32, n, 256));
    hfl_rng_key key = {1, 1, 0, 0};
    *len = hfl_codec_encode(fp32, d, NULL, n, 256, &key, 1, buf);
    free(d);
    return buf;
}

/* payload(k) and its SHA-256 in hex. */
static uint8_t *payload_sha(int k, size_t *len, char sha[65]) {
    uint8_t *p = payload(k, len);
    hfl_sha256_hex(p, *len, sha);
    return p;
}

/* The update message of client id for this round: payload attached (p), or
 * naming payload_bytes and sha when p is NULL. Returns the reply's meta (to
 * free), of type want. */
static cJSON *update(int id, const uint8_t *p, size_t plen, size_t named, const char *sha, int want) {
    char extra[256];
    snprintf(extra, sizeof extra, "{\"round\":%d,\"samples\":100,\"loss\":1,\"codec\":\"fp32\"", c.r.round);
    if (sha) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",\"payload_bytes\":%zu,"
                      "\"payload_sha256\":\"%s\"", named, sha);
    strcat(extra, "}");
    hfl_msg m = {.type = HFL_MSG_UPDATE, .meta = cJSON_Parse(extra), .payload = p, .payload_len = plen};
    size_t len = 0;
    uint8_t *rep = uplink_update(&c, id, &m, 1000, &len);
    cJSON_Delete(m.meta);
    return reply_meta(rep, len, want);
}

/* A put of bytes [at, at + n) of p (payload_bytes total, digest sha) for
 * round; the reply's meta (to free), of type want. */
static cJSON *put(int id, int round, size_t at, const uint8_t *p, size_t n, size_t total, const char *sha, int want) {
    char q[300];
    snprintf(q, sizeof q, "{\"round\":%d,\"offset\":%zu,\"payload_bytes\":%zu,\"payload_sha256\":\"%s\"}", round, at,
             total, sha);
    cJSON *meta = cJSON_Parse(q);
    size_t len = 0;
    uint8_t *rep = uplink_put(&c, id, meta, p + at, n, 100 + n, &len);
    cJSON_Delete(meta);
    return reply_meta(rep, len, want);
}

/* Puts chunks [from, to) of p in order; each reply must say the bytes held. */
static void put_chunks(int id, const uint8_t *p, size_t total, const char *sha, size_t from, size_t to) {
    for (size_t k = from; k < to; k++) {
        size_t at = k * CHUNK, n = total - at < CHUNK ? total - at : CHUNK;
        cJSON *r = put(id, c.r.round, at, p, n, total, sha, HFL_MSG_PUT);
        CHECK_MSG(num(r, "have") == (double)(at + n), "chunk %zu: have %g", k, num(r, "have"));
        cJSON_Delete(r);
    }
}

/* The global model after a round where client a sends whole and client b
 * by way: 0 whole, 1 put, 2 put cut after 3 chunks and begun again at 0
 * (the chunk at 0 and the one at `have` then). */
static float *round_by(int way) {
    open_round();
    size_t la, lb;
    uint8_t *pa = payload(0, &la), *pb = payload(1, &lb);
    char sha[65];
    hfl_sha256_hex(pb, lb, sha);
    size_t n_chunks = (lb + CHUNK - 1) / CHUNK;
    cJSON_Delete(update(ids[0], pa, la, 0, NULL, HFL_MSG_ACK));
    if (way == 0) {
        cJSON_Delete(update(ids[1], pb, lb, 0, NULL, HFL_MSG_ACK));
    } else {
        put_chunks(ids[1], pb, lb, sha, 0, way == 2 ? 3 : n_chunks);
        if (way == 2) { /* the client lost its place: at 0, it is told where the coordinator stands */
            cJSON *r = put(ids[1], c.r.round, 0, pb, CHUNK, lb, sha, HFL_MSG_PUT);
            CHECK_MSG(num(r, "have") == 3.0 * CHUNK, "a resent first chunk: have %g", num(r, "have"));
            cJSON_Delete(r);
            put_chunks(ids[1], pb, lb, sha, 3, n_chunks);
        }
        CHECK(c.clients[ids[1]].spool != NULL);
        cJSON_Delete(update(ids[1], NULL, 0, lb, sha, HFL_MSG_ACK));
        CHECK_MSG(c.clients[ids[1]].spool == NULL, "the spool is dropped once its update is taken");
    }
    rounds_tick(&c);
    CHECK_MSG(c.version == 1, "the round aggregated (version %d)", c.version);
    float *g = hfl_malloc(c.spec.n_params * sizeof *g);
    memcpy(g, c.global, c.spec.n_params * sizeof *g);
    free(pa), free(pb);
    teardown();
    return g;
}

static void test_same_bits(void) {
    float *whole = round_by(0), *put_whole = round_by(1), *cut = round_by(2);
    size_t bytes = NP * sizeof(float);
    CHECK_MSG(!memcmp(whole, put_whole, bytes), "put in chunks: the same model as sent whole");
    CHECK_MSG(!memcmp(whole, cut, bytes), "cut and resumed: the same model as sent whole");
    free(whole), free(put_whole), free(cut);
}

/* A reply of type error whose message contains want, on one line. */
static void refused(cJSON *r, const char *want) {
    const char *e = str(r, "error");
    CHECK_MSG(e && strstr(e, want) && !strchr(e, '\n'), "error '%s', expected '%s'", e ? e : "(none)", want);
    cJSON_Delete(r);
}

static void test_refusals(void) {
    open_round();
    size_t lb;
    uint8_t *pb = payload(1, &lb);
    char sha[65], other[65];
    hfl_sha256_hex(pb, lb, sha);
    memcpy(other, sha, sizeof other);
    other[0] = other[0] == '0' ? '1' : '0';
    float *before = hfl_malloc(NP * sizeof(float));
    memcpy(before, c.global, NP * sizeof(float));
    int a = ids[0], r = c.r.round;
    uint64_t rejected = c.rejected;
    refused(put(a, r, CHUNK, pb, CHUNK, lb, sha, HFL_MSG_ERROR), "no payload was begun: start at byte 0");
    refused(put(a, r, CHUNK + 1, pb, CHUNK, lb, sha, HFL_MSG_ERROR), "is not the start of a chunk");
    refused(put(a, r, (lb + CHUNK - 1) / CHUNK * CHUNK, pb, 0, lb, sha, HFL_MSG_ERROR), "is not the start of a chunk");
    refused(put(a, r, 0, pb, CHUNK + 1, lb, sha, HFL_MSG_ERROR), "holds 65537 bytes, not 65536");
    refused(put(a, r, 0, pb, CHUNK, coord_max_payload(&c) + 1, sha, HFL_MSG_ERROR), "larger than any update");
    refused(put(a, r, 0, pb, CHUNK, lb, "ABC", HFL_MSG_ERROR), "not a SHA-256");
    refused(put(a, r + 1, 0, pb, CHUNK, lb, sha, HFL_MSG_ERROR), "no task of round 2");
    CHECK_MSG(c.clients[a].spool == NULL && c.rejected == rejected + 7, "nothing spooled, 7 rejected");
    put_chunks(a, pb, lb, sha, 0, 2);
    refused(put(a, r, 3 * CHUNK, pb, CHUNK, lb, sha, HFL_MSG_ERROR), "but 131072 bytes are held: chunks go in order");
    refused(put(a, r, 2 * CHUNK, pb, CHUNK, lb, other, HFL_MSG_ERROR), "another payload than the one begun");
    refused(update(a, NULL, 0, lb, sha, HFL_MSG_ERROR), "131072 bytes of a 796852-byte payload were put");
    refused(update(a, pb, 10, lb, sha, HFL_MSG_ERROR), "both attached and put");
    refused(update(ids[1], NULL, 0, lb, sha, HFL_MSG_ERROR), "no payload was put for round 1");
    put_chunks(a, pb, lb, sha, 2, (lb + CHUNK - 1) / CHUNK);
    refused(update(a, NULL, 0, lb - 1, sha, HFL_MSG_ERROR), "not the 796851 it names");
    refused(update(a, NULL, 0, lb, other, HFL_MSG_ERROR), "does not match its digest");
    CHECK_MSG(c.clients[a].spool == NULL, "a spool that does not match its digest is dropped");
    CHECK_MSG(!c.r.slot[a].received && !memcmp(before, c.global, NP * sizeof(float)), "nothing reached the model");
    /* chunks that are not the payload the puts name: refused at the update */
    pb[5] ^= 1;
    put_chunks(a, pb, lb, sha, 0, (lb + CHUNK - 1) / CHUNK);
    refused(update(a, NULL, 0, lb, sha, HFL_MSG_ERROR), "does not match its digest");
    pb[5] ^= 1;
    CHECK(!c.r.slot[a].received);
    free(before), free(pb);
    teardown();
}

/* A spool that stalls mid-way is dropped when the next round opens, and its
 * late update finds nothing. */
static void test_stalled(void) {
    open_round();
    size_t lb;
    char sha[65];
    uint8_t *pb = payload_sha(1, &lb, sha);
    put_chunks(ids[0], pb, lb, sha, 0, 4);
    CHECK(c.clients[ids[0]].spool != NULL);
    c.r.opened_at -= 120; /* past its 60 s deadline: the round fails its quorum, the next opens */
    rounds_tick(&c);
    rounds_tick(&c);
    CHECK_MSG(c.r.round == 2 && c.r.open, "round %d open %d", c.r.round, c.r.open);
    CHECK_MSG(c.clients[ids[0]].spool == NULL, "the stalled spool was dropped");
    free(pb);
    teardown();
}

/* Putting one chunk over and over: as many bytes as the update's uploads
 * allow (1 + COORD_MAX_RESENDS), then skip_round. */
static void test_put_cap(void) {
    open_round();
    size_t lb;
    char sha[65];
    uint8_t *pb = payload_sha(1, &lb, sha);
    size_t allowed = (size_t)((1.0 + COORD_MAX_RESENDS) * (double)lb / CHUNK);
    for (size_t i = 0; i < allowed; i++) cJSON_Delete(put(ids[0], c.r.round, 0, pb, CHUNK, lb, sha, HFL_MSG_PUT));
    cJSON *r = put(ids[0], c.r.round, 0, pb, CHUNK, lb, sha, HFL_MSG_ERROR);
    CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "skip_round")), "skip_round after %zu puts", allowed);
    refused(r, "put too often by this client");
    CHECK(c.clients[ids[0]].spool == NULL);
    free(pb);
    teardown();
}

static const check_case cases[] = {
    {"same_bits", test_same_bits},
    {"refusals", test_refusals},
    {"stalled", test_stalled},
    {"put_cap", test_put_cap},
};

int main(int argc, char **argv) {
    return check_run("test_uplink", cases, CHECK_CASES(cases), argc, argv);
}
