/* downlink.c: how the global model travels to clients.
 *
 * A task carries the weights either whole ("full") or as the difference from
 * a version the client says it holds ("delta"), encoded with the downlink
 * codec (fp32, fp16 or bf16; deterministic, so every client decodes the same
 * bits). Deltas are small next to the weights, so fp16/bf16 lose far less on
 * a delta than on the weights themselves. The last DOWNLINK_HISTORY global
 * versions are kept for this; a client further behind gets a full send. A
 * client that holds the current version already (it trained on it and pulls
 * again, or hfl-client --init-model found the file to be this version) gets
 * a task without weights ("held"), with the fp32 downlink: with fp16 or bf16
 * everyone trains on the codec's rounding of the weights, sent as usual. A
 * client that asks again for a task it was sent gets it without weights too
 * ("sent"): it holds them, or asks for a re-download (rounds.c).
 * Each round's weights are encoded once per base version and reused. Weights
 * larger than --chunk-bytes do not ride in the task: it names their size and
 * the digests of the whole and of each chunk, and the client fetches the
 * chunks one by one (docs/protocol.md, "Chunked weights"), all served from
 * the one encoded buffer, so the coordinator's memory for the weights does
 * not grow with the clients in flight. Full fp32 weights in chunks are not
 * even encoded: their payload is a 12-byte header and the global model's
 * own bytes (hfl_codec_frame), so chunks are served from c->global,
 * one model's bytes less (328 MiB at GPT-2 small). That is safe because a
 * fetch is served only for the open round's version (downlink_fetch), and
 * the global model changes only when a round closes, after which every
 * fetch of it is refused and the next round's open drops this cache.
 * A client that takes deltas accumulates the rounding of each one; with
 * fp32 (the default) it holds exactly the coordinator's weights. A delta
 * covers the model's trainable part only (model.h: all of it, or LoRA's
 * adapters, the frozen rest never changing between versions). */
#include <stdlib.h>
#include <string.h>

#include <mbedtls/sha256.h>

#include "coordinator/coord.h"
#include "util/util.h"

static int downlink_slot(int version) { return version % DOWNLINK_HISTORY; }

/* Only the trainable part is kept (a delta covers nothing else), and only
 * with deltas on: at GPT-2 small's 344 MB, DOWNLINK_HISTORY whole copies kept
 * for nothing were most of the coordinator's memory; with LoRA the part is
 * the adapters' 1.2M floats. */
void downlink_record(coord *c) {
    coord_downlink *d = &c->down;
    if (!d->delta) return;
    size_t bytes = c->spec.n_trainable * sizeof(float);
    int s = downlink_slot(c->version);
    if (!d->hist[s]) d->hist[s] = hfl_malloc(bytes);
    memcpy(d->hist[s], c->global + c->spec.train_off, bytes);
    d->hist_version[s] = c->version;
}

void downlink_reset_cache(coord *c) {
    coord_downlink *d = &c->down;
    for (int i = 0; i <= DOWNLINK_HISTORY; i++) {
        free(d->pay[i].bytes);
        free(d->pay[i].chunks);
        d->pay[i] = (struct downlink_payload){0};
    }
}

void downlink_free(coord *c) {
    coord_downlink *d = &c->down;
    downlink_reset_cache(c);
    for (int i = 0; i < DOWNLINK_HISTORY; i++) free(d->hist[i]), d->hist[i] = NULL;
    free(d->scratch), d->scratch = NULL;
}

/* The payload's bytes [at, at + m) as up to two runs (a view's header,
 * then its body); the count of runs. */
static int downlink_runs(const struct downlink_payload *p, size_t at, size_t m, const uint8_t *run[2],
                         size_t run_len[2]) {
    if (!p->view) {
        run[0] = p->bytes + at, run_len[0] = m;
        return 1;
    }
    int k = 0;
    if (at < HFL_CODEC_HEADER_BYTES) {
        size_t h = HFL_CODEC_HEADER_BYTES - at < m ? HFL_CODEC_HEADER_BYTES - at : m;
        run[k] = p->head + at, run_len[k++] = h;
        at += h, m -= h;
    }
    if (m) run[k] = p->view + (at - HFL_CODEC_HEADER_BYTES), run_len[k++] = m;
    return k;
}

/* Each chunk's digest and the whole's, in one pass over the bytes. */
static void downlink_digests(coord_downlink *d, struct downlink_payload *p) {
    p->n_chunks = (int)((p->len + d->chunk_bytes - 1) / d->chunk_bytes); /* <= HFL_WIRE_MAX_CHUNKS: downlink_init */
    p->chunks = hfl_malloc(sizeof *p->chunks * (size_t)p->n_chunks);
    mbedtls_sha256_context whole, one;
    mbedtls_sha256_init(&whole);
    mbedtls_sha256_init(&one);
    mbedtls_sha256_starts_ret(&whole, 0);
    for (int i = 0; i < p->n_chunks; i++) {
        size_t at = (size_t)i * d->chunk_bytes, m = p->len - at < d->chunk_bytes ? p->len - at : d->chunk_bytes;
        const uint8_t *run[2];
        size_t run_len[2];
        int runs = downlink_runs(p, at, m, run, run_len);
        mbedtls_sha256_starts_ret(&one, 0);
        for (int k = 0; k < runs; k++) {
            mbedtls_sha256_update_ret(&one, run[k], run_len[k]);
            mbedtls_sha256_update_ret(&whole, run[k], run_len[k]);
        }
        uint8_t h[32];
        mbedtls_sha256_finish_ret(&one, h);
        hfl_hex(h, sizeof h, p->chunks[i].sha256);
    }
    uint8_t h[32];
    mbedtls_sha256_finish_ret(&whole, h);
    mbedtls_sha256_free(&whole);
    mbedtls_sha256_free(&one);
    hfl_hex(h, sizeof h, p->sha256);
}

/* Encodes global (full) or global - hist[base] over the trainable part
 * (delta) into *p, with its digests when it will go in chunks; full fp32
 * weights in chunks become a view of the global model instead (the
 * header). */
static void downlink_build(coord *c, int base, struct downlink_payload *p) {
    coord_downlink *d = &c->down;
    size_t n = c->spec.n_params;
    const float *src = c->global;
    p->base = base;
    if (base < 0 && !strcmp(d->codec->name, "fp32") && d->chunk_bytes) {
        size_t len = hfl_codec_frame(d->codec, n, 0, p->head);
        if (len > d->chunk_bytes) {
            p->len = len, p->view = (const uint8_t *)c->global;
            downlink_digests(d, p);
            return;
        }
    }
    if (base >= 0) {
        size_t off = c->spec.train_off;
        const float *old = d->hist[downlink_slot(base)];
        n = c->spec.n_trainable;
        for (size_t i = 0; i < n; i++) d->scratch[i] = c->global[off + i] - old[i];
        src = d->scratch;
    }
    p->bytes = hfl_malloc(hfl_codec_max_bytes(d->codec, n, c->cfg.block));
    hfl_rng_key key = {c->cfg.seed, (uint32_t)c->version, 0xFFFFFFFFu, 1};
    p->len = hfl_codec_encode(d->codec, src, NULL, n, c->cfg.block, &key, 1, p->bytes);
    if (d->chunk_bytes && p->len > d->chunk_bytes) downlink_digests(d, p);
}

/* The TASK for payload p: the weights in it, or their size and digests. */
static uint8_t *downlink_message(coord *c, const hfl_task_msg *task, const struct downlink_payload *p, size_t *len) {
    hfl_task_msg t = *task;
    snprintf(t.weights, sizeof t.weights, "%s", p->base >= 0 ? "delta" : "full");
    t.base_version = p->base;
    snprintf(t.downlink, sizeof t.downlink, "%s", c->down.codec->name);
    if (!p->chunks) return hfl_wire_message(&hfl_wire_task, &t, p->bytes, p->len, len);
    t.payload_bytes = (int64_t)p->len, t.has_payload_bytes = 1;
    t.chunk_bytes = (int64_t)c->down.chunk_bytes, t.has_chunk_bytes = 1;
    snprintf(t.payload_sha256, sizeof t.payload_sha256, "%s", p->sha256), t.has_payload_sha256 = 1;
    t.chunk_sha256 = (hfl_wire_list){p->chunks, p->n_chunks}, t.has_chunk_sha256 = 1;
    return hfl_wire_message(&hfl_wire_task, &t, NULL, 0, len);
}

/* The task's settings and no weights: the client holds this version
 * ("held"), or was sent this task already ("sent"). */
static uint8_t *downlink_bare(coord *c, const hfl_task_msg *task, const char *weights, size_t *len) {
    hfl_task_msg t = *task;
    snprintf(t.weights, sizeof t.weights, "%s", weights);
    t.base_version = c->version;
    snprintf(t.downlink, sizeof t.downlink, "%s", c->down.codec->name);
    return hfl_wire_message(&hfl_wire_task, &t, NULL, 0, len);
}

uint8_t *downlink_task(coord *c, const hfl_task_msg *task, int64_t have_version, size_t *len, int *kind) {
    coord_downlink *d = &c->down;
    int base = -1;
    /* fp32 only: a lossy downlink's client trains on the rounded weights, which
     * a client holding the exact ones (--init-model) would not */
    if (have_version >= 0 && have_version == c->version && !strcmp(d->codec->name, "fp32")) {
        *kind = DOWNLINK_HELD;
        return downlink_bare(c, task, "held", len);
    }
    if (d->delta && have_version >= 0 && have_version < c->version &&
        c->version - have_version <= DOWNLINK_HISTORY - 1 &&
        d->hist_version[downlink_slot((int)have_version)] == have_version)
        base = (int)have_version;
    /* cache slot 0: full; 1 + slot(base): delta from base */
    int k = base < 0 ? 0 : 1 + downlink_slot(base);
    *kind = base >= 0 ? DOWNLINK_DELTA : DOWNLINK_FULL;
    if (!d->pay[k].len) downlink_build(c, base, &d->pay[k]);
    return downlink_message(c, task, &d->pay[k], len);
}

uint8_t *downlink_fetch(coord *c, int id, const cJSON *meta, size_t *len) {
    coord_round *r = &c->r;
    coord_downlink *d = &c->down;
    char err[HFL_ERR_LEN], msg[HFL_ERR_LEN + 16];
    hfl_fetch_msg f = {0};
    c->clients[id].last_seen = hfl_now();
    if (hfl_wire_decode(&hfl_wire_fetch, meta, &f, err) != 0) {
        snprintf(msg, sizeof msg, "fetch: %s", err);
        return coord_error_reply(msg, len);
    }
    if (!r->open || f.round != r->round || f.version != c->version)
        return coord_error_reply("fetch: the task's weights are gone (a new round began)", len);
    if (!r->slot[id].tasked) return coord_error_reply("fetch: no task of this round was sent to this client", len);
    int k = f.base_version < 0 ? 0 : 1 + downlink_slot((int)f.base_version);
    const struct downlink_payload *p = &d->pay[k];
    if (!p->chunks || p->base != f.base_version)
        return coord_error_reply("fetch: no chunked weights of this round against that base version", len);
    if ((uint64_t)f.offset % d->chunk_bytes != 0 || (uint64_t)f.offset >= p->len)
        return coord_error_reply("fetch: the offset is not the start of a chunk of the weights", len);
    size_t n = p->len - (size_t)f.offset < d->chunk_bytes ? p->len - (size_t)f.offset : d->chunk_bytes;
    /* as many bytes as the weights' downloads a client may ask for (rounds.c's
     * resend cap): a fetch storm must not cost the coordinator without end */
    if (r->slot[id].fetched + (double)n > (1.0 + COORD_MAX_RESENDS) * (double)p->len) {
        c->rejected++;
        return coord_skip_reply("fetch: this round's weights were fetched too often by this client (skip the round)",
                                1, len);
    }
    const uint8_t *run[2] = {NULL, NULL};
    size_t run_len[2] = {0, 0};
    uint8_t *joined = NULL; /* a view's first chunk: its header and the model's first bytes */
    if (downlink_runs(p, (size_t)f.offset, n, run, run_len) == 2) {
        joined = hfl_malloc(n);
        memcpy(joined, run[0], run_len[0]);
        memcpy(joined + run_len[0], run[1], run_len[1]);
        run[0] = joined;
    }
    uint8_t *out = hfl_wire_message(&hfl_wire_fetch, &f, run[0], n, len);
    free(joined);
    if (out) r->bytes_down += *len, r->slot[id].bytes_down += (double)*len, r->slot[id].fetched += (double)n;
    return out;
}

uint8_t *downlink_sent(coord *c, const hfl_task_msg *task, size_t *len) {
    return downlink_bare(c, task, "sent", len);
}

int downlink_init(coord *c, const char *codec_name, int delta, uint64_t chunk_bytes, char *err) {
    coord_downlink *d = &c->down;
    if (strcmp(codec_name, "fp32") && strcmp(codec_name, "fp16") && strcmp(codec_name, "bf16"))
        return hfl_errf(err, "downlink codec '%s' not supported (use fp32, fp16 or bf16)", codec_name);
    if (!(d->codec = hfl_codec_find(codec_name, err))) return -1;
    size_t most = hfl_codec_max_bytes(d->codec, c->spec.n_params, c->cfg.block);
    if (chunk_bytes && (most + chunk_bytes - 1) / chunk_bytes > HFL_WIRE_MAX_CHUNKS)
        return hfl_errf(err, "--chunk-bytes %llu cuts the model's %zu bytes into more than %d chunks, more than a task "
                        "can name: use at least %zu", (unsigned long long)chunk_bytes, most, HFL_WIRE_MAX_CHUNKS,
                        (most + HFL_WIRE_MAX_CHUNKS - 1) / HFL_WIRE_MAX_CHUNKS);
    d->delta = delta;
    d->chunk_bytes = chunk_bytes;
    if (delta) d->scratch = hfl_malloc(c->spec.n_trainable * sizeof(float));
    for (int i = 0; i < DOWNLINK_HISTORY; i++) d->hist_version[i] = -1;
    downlink_record(c);
    return 0;
}
