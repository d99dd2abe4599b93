/* fleet_lite.c: bench-fleet's light clients (see fleet_lite.h). */
#include "bench/fleet_lite.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "compress/codec.h"
#include "proto/msg.h"
#include "util/util.h"

#define FLEET_HOLD_MS 20000 /* a pull waits this long for a task */

/* Shared by every client, set once: the update (int8 of a small constant
 * change) for the welcome's params and block, its digest, the welcome's
 * chunk_bytes (0: updates go whole), and the largest payload a reply may
 * carry (the model's fp32 weights in a task). */
static uint8_t *upd;
static size_t upd_len, upd_n, up_chunk;
static char upd_sha256[65];
static int upd_block = -1;
static pthread_mutex_t upd_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t reply_max;
static int n_done;
static long n_fetches, n_puts;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;

static void lite_finish(fleet_lite *l, const char *why) {
    if (why) snprintf(l->err, sizeof l->err, "%s", why), l->failed = 1;
    l->done = 1;
    pthread_mutex_lock(&done_lock);
    n_done++;
    pthread_mutex_unlock(&done_lock);
}

/* Sends (type, meta, payload) on l's context; meta is consumed. */
static void lite_send(fleet_lite *l, int type, cJSON *meta, const void *payload, size_t plen) {
    size_t len;
    uint8_t *buf = hfl_msg_encode(type, meta, payload, plen, &len);
    cJSON_Delete(meta);
    nng_msg *m;
    if (!buf || nng_msg_alloc(&m, len) != 0) {
        free(buf);
        lite_finish(l, "cannot encode a request");
        return;
    }
    memcpy(nng_msg_body(m), buf, len);
    free(buf);
    nng_aio_set_msg(l->aio, m);
    l->sending = 1;
    nng_ctx_send(l->ctx, l->aio);
}

static cJSON *lite_meta(const fleet_lite *l) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "client_id", l->id);
    cJSON_AddStringToObject(m, "token", l->token);
    return m;
}

static void lite_pull(fleet_lite *l) {
    cJSON *m = lite_meta(l);
    cJSON_AddNumberToObject(m, "hold_ms", FLEET_HOLD_MS);
    lite_send(l, HFL_MSG_PULL, m, NULL, 0);
}

/* The update for n values at the run's block size, encoded once for every
 * client, and the chunk size of uploads: 0, or -1 when another client's
 * welcome said otherwise (one coordinator never does). */
static int lite_update(size_t n, uint32_t block, size_t chunk) {
    int rc = 0;
    pthread_mutex_lock(&upd_lock);
    if (upd_block < 0) {
        const hfl_codec *int8 = hfl_codec_find("int8", NULL);
        float *d = hfl_malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) d[i] = (i % 7 == 0 ? 1e-3f : -1e-4f);
        upd = hfl_malloc(hfl_codec_max_bytes(int8, n, block));
        hfl_rng_key key = {1, 1, 0, 0};
        upd_len = hfl_codec_encode(int8, d, NULL, n, block, &key, 1, upd);
        hfl_sha256_hex(upd, upd_len, upd_sha256);
        upd_n = n, upd_block = (int)block, up_chunk = chunk;
        free(d);
    } else if (upd_n != n || upd_block != (int)block || up_chunk != chunk) {
        rc = -1;
    }
    pthread_mutex_unlock(&upd_lock);
    return rc;
}

/* The update for the task in hand: its payload attached, or after the
 * puts (lite_put) its size and digest in its place. */
static void lite_update_send(fleet_lite *l, int spooled) {
    cJSON *u = lite_meta(l);
    cJSON_AddNumberToObject(u, "round", (double)l->round);
    cJSON_AddNumberToObject(u, "samples", 60);
    cJSON_AddNumberToObject(u, "loss", 1.0);
    cJSON_AddStringToObject(u, "codec", "int8");
    if (!spooled) {
        lite_send(l, HFL_MSG_UPDATE, u, upd, upd_len);
        return;
    }
    cJSON_AddNumberToObject(u, "payload_bytes", (double)upd_len);
    cJSON_AddStringToObject(u, "payload_sha256", upd_sha256);
    lite_send(l, HFL_MSG_UPDATE, u, NULL, 0);
}

/* Sends the update's chunk at l->put_at (docs/protocol.md, "Chunked updates"). */
static void lite_put(fleet_lite *l) {
    size_t m = upd_len - l->put_at < up_chunk ? upd_len - l->put_at : up_chunk;
    cJSON *p = lite_meta(l);
    cJSON_AddNumberToObject(p, "round", (double)l->round);
    cJSON_AddNumberToObject(p, "offset", (double)l->put_at);
    cJSON_AddNumberToObject(p, "payload_bytes", (double)upd_len);
    cJSON_AddStringToObject(p, "payload_sha256", upd_sha256);
    lite_send(l, HFL_MSG_PUT, p, upd + l->put_at, m);
}

/* The update goes up: whole when it fits the welcome's chunk_bytes (or the
 * coordinator named none), else in puts of chunk_bytes, then the update. */
static void lite_upload(fleet_lite *l) {
    if (!up_chunk || upd_len <= up_chunk) {
        lite_update_send(l, 0);
        return;
    }
    l->put_at = 0;
    lite_put(l);
}

/* A put's reply: the coordinator holds `have` bytes, which must be the
 * chunk just sent added to what it held. */
static void lite_stored(fleet_lite *l, const hfl_msg *m) {
    int64_t have = -1;
    size_t sent = upd_len - l->put_at < up_chunk ? upd_len - l->put_at : up_chunk;
    hfl_meta_int(m->meta, "have", 0, (int64_t)1 << 40, &have, NULL);
    if (have != (int64_t)(l->put_at + sent)) {
        lite_finish(l, "put: the coordinator does not hold the chunk sent");
        return;
    }
    pthread_mutex_lock(&done_lock);
    n_puts++;
    pthread_mutex_unlock(&done_lock);
    l->put_at = (size_t)have;
    if (l->put_at < upd_len) lite_put(l);
    else lite_update_send(l, 1);
}

/* Asks for the chunk of the task's weights at l->at. */
static void lite_fetch(fleet_lite *l) {
    cJSON *f = lite_meta(l);
    cJSON_AddNumberToObject(f, "round", (double)l->round);
    cJSON_AddNumberToObject(f, "version", (double)l->version);
    cJSON_AddNumberToObject(f, "base_version", (double)l->base);
    cJSON_AddNumberToObject(f, "offset", (double)l->at);
    lite_send(l, HFL_MSG_FETCH, f, NULL, 0);
}

/* A task: its weights come by fetch when it names payload_bytes (they are
 * larger than the coordinator's --chunk-bytes), else they are in it and go
 * unread; then the update. */
static void lite_task(fleet_lite *l, const hfl_msg *m) {
    char err[HFL_ERR_LEN];
    int64_t n = 0, total, chunk;
    if (hfl_meta_int(m->meta, "round", 1, 1 << 30, &l->round, err) != 0 ||
        hfl_meta_int(m->meta, "version", 0, INT32_MAX, &l->version, err) != 0 ||
        hfl_meta_int(m->meta, "base_version", -1, INT32_MAX, &l->base, err) != 0 ||
        hfl_meta_int(m->meta, "trainable", 1, (int64_t)1 << 40, &n, err) != 0) {
        lite_finish(l, err);
        return;
    }
    if ((size_t)n != upd_n) {
        lite_finish(l, "the task's trainable part is not the welcome's params (LoRA?)");
        return;
    }
    if (!cJSON_GetObjectItemCaseSensitive(m->meta, "payload_bytes")) {
        lite_upload(l);
        return;
    }
    if (hfl_meta_int(m->meta, "payload_bytes", 1, (int64_t)1 << 40, &total, err) != 0 ||
        hfl_meta_int(m->meta, "chunk_bytes", 4096, 1 << 30, &chunk, err) != 0) {
        lite_finish(l, err);
        return;
    }
    if ((size_t)chunk + 4096 > reply_max) {
        lite_finish(l, "the task's chunks are larger than a reply may be");
        return;
    }
    l->total = (size_t)total, l->chunk = (size_t)chunk, l->at = 0;
    lite_fetch(l);
}

/* A fetch's reply: the chunk at l->at, of the length the task implies; the
 * bytes are dropped unchecked against their digests (a light client: the
 * real one, client/main.c's fetch_chunk, checks them). */
static void lite_chunk(fleet_lite *l, const hfl_msg *m) {
    int64_t off = -1;
    size_t want = l->total - l->at < l->chunk ? l->total - l->at : l->chunk;
    hfl_meta_int(m->meta, "offset", 0, (int64_t)1 << 40, &off, NULL);
    if (off != (int64_t)l->at || m->payload_len != want) {
        lite_finish(l, "fetch: the reply is not the chunk asked for");
        return;
    }
    pthread_mutex_lock(&done_lock);
    n_fetches++;
    pthread_mutex_unlock(&done_lock);
    l->at += want;
    if (l->at < l->total) lite_fetch(l);
    else lite_upload(l);
}

static void lite_welcome(fleet_lite *l, const hfl_msg *m) {
    int64_t id, params, block;
    char err[HFL_ERR_LEN];
    if (hfl_meta_int(m->meta, "client_id", 0, FLEET_MAX - 1, &id, err) != 0 ||
        hfl_meta_str(m->meta, "token", 32, l->token, err) != 0 ||
        hfl_meta_int(m->meta, "params", 1, (int64_t)1 << 40, &params, err) != 0 ||
        hfl_meta_int(m->meta, "block", 1, 1 << 20, &block, err) != 0) {
        lite_finish(l, err);
        return;
    }
    l->id = (int)id;
    int64_t chunk = 0; /* absent: updates go whole */
    if (cJSON_GetObjectItemCaseSensitive(m->meta, "chunk_bytes") &&
        hfl_meta_int(m->meta, "chunk_bytes", 4096, 1 << 30, &chunk, err) != 0) {
        lite_finish(l, err);
        return;
    }
    if (lite_update((size_t)params, (uint32_t)block, (size_t)chunk) != 0) {
        lite_finish(l, "welcomes disagree on params, block or chunk_bytes");
        return;
    }
    lite_pull(l);
}

static void lite_cb(void *arg) {
    fleet_lite *l = arg;
    int rv = nng_aio_result(l->aio);
    if (rv != 0) {
        if (l->sending) nng_msg_free(nng_aio_get_msg(l->aio));
        if (rv != NNG_ECLOSED && rv != NNG_ECANCELED) lite_finish(l, nng_strerror(rv));
        return;
    }
    if (l->sending) {
        l->sending = 0;
        nng_ctx_recv(l->ctx, l->aio);
        return;
    }
    nng_msg *raw = nng_aio_get_msg(l->aio);
    hfl_msg m;
    char err[HFL_ERR_LEN];
    if (hfl_msg_decode(nng_msg_body(raw), nng_msg_len(raw), reply_max, &m, err) != 0) {
        nng_msg_free(raw);
        lite_finish(l, err);
        return;
    }
    switch (m.type) {
    case HFL_MSG_WELCOME: lite_welcome(l, &m); break;
    case HFL_MSG_WAIT:
    case HFL_MSG_ACK: lite_pull(l); break;
    case HFL_MSG_TASK: lite_task(l, &m); break;
    case HFL_MSG_FETCH: lite_chunk(l, &m); break;
    case HFL_MSG_PUT: lite_stored(l, &m); break;
    case HFL_MSG_BYE: lite_finish(l, NULL); break;
    default: {
        char why[200] = "unexpected reply";
        hfl_meta_str(m.meta, "error", sizeof why - 1, why, NULL);
        lite_finish(l, why);
    }
    }
    hfl_msg_free(&m);
    nng_msg_free(raw);
}

void fleet_lite_setup(size_t most) { reply_max = most; }

void fleet_lite_start(fleet_lite *l, int i, nng_socket sock) {
    l->i = i;
    if (nng_ctx_open(&l->ctx, sock) != 0 || nng_aio_alloc(&l->aio, lite_cb, l) != 0) {
        lite_finish(l, "cannot open a context");
        return;
    }
    nng_aio_set_timeout(l->aio, (nng_duration)(FLEET_HOLD_MS * 3));
    cJSON *h = cJSON_CreateObject();
    char name[32];
    snprintf(name, sizeof name, "lite-%d", i);
    cJSON_AddStringToObject(h, "name", name);
    cJSON_AddNumberToObject(h, "samples", 60);
    cJSON_AddObjectToObject(h, "plan");
    lite_send(l, HFL_MSG_HELLO, h, NULL, 0);
}

fleet_lite_counts fleet_lite_counts_now(void) {
    pthread_mutex_lock(&done_lock);
    fleet_lite_counts c = {n_done, n_fetches, n_puts, 0};
    pthread_mutex_unlock(&done_lock);
    pthread_mutex_lock(&upd_lock);
    c.update_bytes = upd_len;
    pthread_mutex_unlock(&upd_lock);
    return c;
}

void fleet_lite_close(fleet_lite *l, int n) {
    for (int i = 0; i < n; i++)
        if (l[i].aio) nng_aio_stop(l[i].aio);
}

void fleet_lite_free(fleet_lite *l, int n) {
    for (int i = 0; i < n; i++) {
        if (l[i].aio) nng_aio_free(l[i].aio);
        nng_ctx_close(l[i].ctx);
    }
    free(upd);
    upd = NULL;
}
