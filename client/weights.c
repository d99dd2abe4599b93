/* weights.c: a task's weights into the weights the client holds
 * (s->global): from the task message, or fetched chunk by chunk and decoded
 * as the chunks come (docs/protocol.md, "Chunked weights"), so the client
 * holds the model once beside its trainer, never a second whole copy nor
 * the whole payload. */
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "util/util.h"

/* Where a task's full or delta weights go: all of the weights we hold
 * (s->global), or for a delta from the version we hold their trainable part
 * (model.h; the rest never changes); *n values. -1 with err for weights
 * against a version we do not hold. */
static int weights_target(const hfl_task_msg *tm, client_state *s, float **into, size_t *n, char *err) {
    if (!strcmp(tm->weights, "full")) {
        *into = s->global, *n = s->spec.n_params;
        return 0;
    }
    if (!strcmp(tm->weights, "delta") && tm->base_version == s->held_version && tm->base_version >= 0) {
        *into = s->global + s->spec.train_off, *n = s->spec.n_trainable;
        return 0;
    }
    return hfl_errf(err, "task sends '%s' weights against version %lld; we hold version %d", tm->weights,
                    (long long)tm->base_version, s->held_version);
}

/* The task's weights into the ones we hold, s->global, which then hold
 * its version (held_version): decoded whole, or added to ours for a delta
 * (weights_target), or ours as they are ("held", and "sent" when we hold
 * its version). In place, so the client holds the model once beside its
 * trainer (at GPT-2 small a second copy was 344 MB): the payload is
 * validated before a byte of ours changes (a full payload first, then
 * zeros and the decode; the decoder validates a delta before it adds), so
 * a malformed one leaves our weights and version as they were. 1: a
 * "sent" task whose weights we lack, to be asked for again. */
int client_task_weights(const uint8_t *payload, size_t plen, const hfl_task_msg *tm, client_state *s, int *version,
                        char *err) {
    int64_t v = tm->version;
    const hfl_codec *dc = hfl_codec_find(tm->downlink, err);
    if (!dc) return -1;
    if ((!strcmp(tm->weights, "held") || !strcmp(tm->weights, "sent")) && tm->base_version == s->held_version &&
        tm->base_version == v && plen == 0) {
        *version = (int)v;
        return 0;
    }
    if (!strcmp(tm->weights, "sent") && plen == 0)
        return 1; /* sent before, and we do not hold it (a lost reply, a restart): ask for it again */
    float *into = NULL;
    size_t n = 0;
    uint32_t block;
    if (weights_target(tm, s, &into, &n, err) != 0) return -1;
    if (!strcmp(tm->weights, "full")) {
        if (hfl_codec_validate(dc, payload, plen, n, &block, err) != 0) return -1;
        s->held_version = -1; /* until the decode below is done */
        memset(into, 0, n * sizeof(float));
    }
    if (hfl_codec_decode_accumulate(dc, payload, plen, n, 1.0f, into, 1, err) != 0) return -1;
    *version = s->held_version = (int)v;
    return 0;
}

/* HFL_TEST_FETCH_CORRUPT=K or D:K: the K-th chunk of the first download
 * (of the D-th: downloads counted from 1 over the process) arrives with
 * one byte flipped (the digest tests). */
static void fetch_test_corrupt(uint8_t *chunk, int download, int k) {
    static int done;
    const char *want = getenv("HFL_TEST_FETCH_CORRUPT");
    if (done || !want) return;
    const char *colon = strchr(want, ':');
    int d = colon ? atoi(want) : 1, chunk_no = atoi(colon ? colon + 1 : want);
    if (d != download || chunk_no != k) return;
    done = 1;
    chunk[0] ^= 0x40;
}

/* One chunk at `at` into buf (m bytes), checked against its digest: 0; 1
 * when the request failed (the connection: try again); -1 with err
 * otherwise. k: the chunk's number in this download, from 1; download:
 * this download's number in the process, from 1. */
static int fetch_chunk(client_session *ss, const hfl_task_msg *tm, size_t at, size_t m, uint8_t *buf, int download,
                       int k, char *err) {
    hfl_fetch_msg f = {.round = tm->round, .version = tm->version, .base_version = tm->base_version,
                       .offset = (int64_t)at};
    cJSON *meta = client_request_meta(ss->s, &hfl_wire_fetch, &f);
    hfl_msg rep;
    nng_msg *raw;
    int rc = client_request(ss, HFL_MSG_FETCH, meta, NULL, 0, &rep, &raw, err);
    cJSON_Delete(meta);
    if (rc != 0) return 1;
    hfl_fetch_msg got = {0};
    const hfl_chunk_digest *want = (const hfl_chunk_digest *)tm->chunk_sha256.v + at / (size_t)tm->chunk_bytes;
    char hex[65];
    if (rep.type != HFL_MSG_FETCH) {
        rc = hfl_errf(err, "fetch at byte %zu: %s", at, client_reply_error(&rep, "unexpected reply").error);
    } else if (hfl_wire_decode(&hfl_wire_fetch, rep.meta, &got, err) != 0 || got.offset != (int64_t)at ||
               rep.payload_len != m) {
        rc = hfl_errf(err, "fetch at byte %zu: the reply is not that chunk (%zu bytes at %lld)", at, rep.payload_len,
                      (long long)got.offset);
    } else {
        memcpy(buf, rep.payload, m);
        fetch_test_corrupt(buf, download, k);
        hfl_sha256_hex(buf, m, hex);
        if (strcmp(hex, want->sha256) != 0) rc = hfl_errf(err, "fetch at byte %zu: the chunk does not match its digest", at);
    }
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return rc;
}

/* A chunked download decoded as it comes. The downlink codecs are dense
 * (fp32, fp16, bf16: each value its own bytes), so the payload cut at value
 * boundaries is a run of small payloads, a header (hfl_codec_frame) and
 * their values, which the codec decodes to the same floats one after
 * another; a value a chunk cuts is carried to the next. */
typedef struct {
    const hfl_codec *dc;
    float *into;
    size_t n, done, total; /* values to decode and decoded; the payload's bytes */
    size_t es, carry;      /* bytes a value; a cut value's bytes held at run + header */
    uint8_t *run;          /* a small payload: header, then a chunk's values */
} fetch_decoder;

/* The chunk of m bytes at `at` into d->into. -1 with err: a frame that is
 * not the task's (the first chunk), or values the codec refuses. */
static int fetch_decode_chunk(fetch_decoder *d, const uint8_t *p, size_t at, size_t m, char *err) {
    uint32_t block;
    if (at == 0) { /* the frame: the codec, n and the length */
        if (m < HFL_CODEC_HEADER_BYTES || hfl_codec_check_frame(d->dc, p, d->total, d->n, &block, err) != 0)
            return m < HFL_CODEC_HEADER_BYTES ? hfl_errf(err, "the first chunk is shorter than a header") : -1;
        p += HFL_CODEC_HEADER_BYTES, m -= HFL_CODEC_HEADER_BYTES;
    }
    uint8_t *vals = d->run + HFL_CODEC_HEADER_BYTES;
    size_t have = d->carry + m, k = have / d->es, take = k * d->es - (k ? d->carry : 0);
    if (k) {
        memcpy(vals + d->carry, p, take);
        if (k > d->n - d->done) return hfl_errf(err, "the weights hold more values than the task names");
        size_t len = hfl_codec_frame(d->dc, k, 0, d->run);
        if (hfl_codec_decode_accumulate(d->dc, d->run, len, k, 1.0f, d->into + d->done, 1, err) != 0) return -1;
        d->done += k, d->carry = 0;
        p += take, m -= take;
    }
    memcpy(vals + d->carry, p, m); /* what is left: part of a value */
    d->carry += m;
    return 0;
}

/* A task's weights that come by fetch (docs/protocol.md, "Chunked weights"),
 * chunk by chunk, each checked against its digest as it comes and then
 * decoded into the weights we hold (weights_target), the whole's digest
 * checked at the end: no buffer of the whole payload. A request that fails
 * is made again on a fresh connection, at the chunk we lack, up to
 * CLIENT_FETCH_TRIES times in a row; a refusal (the round moved on) or a
 * chunk that does not match its digest ends the download. Once a chunk
 * was decoded our weights are part of two versions: a download that ends
 * then leaves held_version -1 (the next task is a full one). 0 with
 * *version; -1 with err, *malformed set when the task itself cannot be
 * right (it ends the client). */
#define CLIENT_FETCH_TRIES 8
static int fetch_cut; /* HFL_TEST_FETCH_CUT's cut was made (client_test_cut) */
int client_fetch_weights(client_session *ss, const hfl_task_msg *tm, int *version, int *malformed, char *err) {
    client_state *s = ss->s;
    fetch_decoder d = {.total = (size_t)tm->payload_bytes};
    size_t chunk = (size_t)tm->chunk_bytes, most;
    if (!(d.dc = hfl_codec_find(tm->downlink, err)) || weights_target(tm, s, &d.into, &d.n, err) != 0) {
        *malformed = 1;
        return -1;
    }
    most = hfl_codec_max_bytes(d.dc, d.n, 0);
    if (!tm->has_chunk_bytes || !tm->has_payload_sha256 || !tm->has_chunk_sha256 ||
        (size_t)tm->chunk_sha256.n != (d.total + chunk - 1) / chunk || d.total != most ||
        (strcmp(d.dc->name, "fp32") && strcmp(d.dc->name, "fp16") && strcmp(d.dc->name, "bf16"))) {
        *malformed = 1;
        return hfl_errf(err, "task: chunked %s weights (%zu bytes, %zu for the model) without their chunk size and "
                        "digests, or not in a downlink codec (fp32, fp16, bf16)", d.dc->name, d.total, most);
    }
    d.es = (most - HFL_CODEC_HEADER_BYTES) / (d.n ? d.n : 1);
    size_t most_chunk = chunk < d.total ? chunk : d.total; /* the task may name a chunk larger than it all */
    uint8_t *buf = hfl_malloc(most_chunk), *run = hfl_malloc(HFL_CODEC_HEADER_BYTES + most_chunk + d.es);
    static int downloads; /* in this process, for HFL_TEST_FETCH_CORRUPT */
    downloads++;
    d.run = run;
    mbedtls_sha256_context whole;
    mbedtls_sha256_init(&whole);
    mbedtls_sha256_starts_ret(&whole, 0);
    int tries = 0, got = 0, rc = 0, full = !strcmp(tm->weights, "full");
    for (size_t at = 0; at < d.total && rc == 0;) {
        size_t m = d.total - at < chunk ? d.total - at : chunk;
        rc = fetch_chunk(ss, tm, at, m, buf, downloads, got + 1, err);
        if (rc == 1 && ++tries < CLIENT_FETCH_TRIES) {
            rc = 0;
            hfl_sleep_ms(50 << tries);
            continue;
        }
        if (rc != 0) break;
        if (at == 0) { /* our weights change from here: they hold no one version until the last chunk */
            s->held_version = -1;
            if (full) memset(d.into, 0, d.n * sizeof(float));
        }
        mbedtls_sha256_update_ret(&whole, buf, m);
        if ((rc = fetch_decode_chunk(&d, buf, at, m, err)) != 0) *malformed = 1;
        tries = 0, at += m;
        client_test_cut(ss, "HFL_TEST_FETCH_CUT", ++got, &fetch_cut);
    }
    uint8_t h[32];
    char hex[65];
    mbedtls_sha256_finish_ret(&whole, h);
    mbedtls_sha256_free(&whole);
    hfl_hex(h, sizeof h, hex);
    if (rc == 0 && (d.done != d.n || d.carry))
        rc = hfl_errf(err, "task: the fetched weights hold %zu of %zu values", d.done, d.n), *malformed = 1;
    if (rc == 0 && strcmp(hex, tm->payload_sha256) != 0)
        rc = hfl_errf(err, "task: the fetched weights do not match their digest");
    free(buf), free(run);
    if (rc != 0) return -1;
    *version = s->held_version = (int)tm->version;
    return 0;
}
