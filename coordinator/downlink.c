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
 * Each round's messages are built once per base version and reused.
 * A client that takes deltas accumulates the rounding of each one; with
 * fp32 (the default) it holds exactly the coordinator's weights. A delta
 * covers the model's trainable part only (model.h: all of it, or LoRA's
 * adapters, the frozen rest never changing between versions). */
#include <stdlib.h>
#include <string.h>

#include "coordinator/coord.h"
#include "util/util.h"

static int downlink_slot(int version) { return version % DOWNLINK_HISTORY; }

void downlink_record(coord *c) {
    coord_downlink *d = &c->down;
    size_t bytes = c->spec.n_params * sizeof(float);
    int s = downlink_slot(c->version);
    if (!d->hist[s]) d->hist[s] = hfl_malloc(bytes);
    memcpy(d->hist[s], c->global, bytes);
    d->hist_version[s] = c->version;
}

void downlink_reset_cache(coord *c) {
    coord_downlink *d = &c->down;
    for (int i = 0; i <= DOWNLINK_HISTORY; i++) {
        free(d->msg[i]);
        d->msg[i] = NULL;
        d->msg_len[i] = 0;
    }
}

/* Encodes global (full) or global - hist[base] over the trainable part
 * (delta) into a TASK message. */
static uint8_t *downlink_build(coord *c, const hfl_task_msg *task, int base, size_t *len) {
    coord_downlink *d = &c->down;
    size_t n = c->spec.n_params;
    const float *src = c->global;
    if (base >= 0) {
        size_t off = c->spec.train_off;
        const float *old = d->hist[downlink_slot(base)];
        n = c->spec.n_trainable;
        for (size_t i = 0; i < n; i++) d->scratch[i] = c->global[off + i] - old[off + i];
        src = d->scratch;
    }
    uint8_t *payload = hfl_malloc(hfl_codec_max_bytes(d->codec, n, c->cfg.block));
    hfl_rng_key key = {c->cfg.seed, (uint32_t)c->version, 0xFFFFFFFFu, 1};
    size_t plen = hfl_codec_encode(d->codec, src, NULL, n, c->cfg.block, &key, 1, payload);
    hfl_task_msg t = *task;
    snprintf(t.weights, sizeof t.weights, "%s", base >= 0 ? "delta" : "full");
    t.base_version = base;
    snprintf(t.downlink, sizeof t.downlink, "%s", d->codec->name);
    uint8_t *m = hfl_wire_message(&hfl_wire_task, &t, payload, plen, len);
    free(payload);
    return m;
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

uint8_t *downlink_task(coord *c, const hfl_task_msg *task, int64_t have_version, size_t *len, int *kind,
                       int cacheable) {
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
    if (!cacheable) return downlink_build(c, task, base, len);
    if (!d->msg[k]) d->msg[k] = downlink_build(c, task, base, &d->msg_len[k]);
    if (!d->msg[k]) return NULL;
    uint8_t *m = hfl_malloc(d->msg_len[k]);
    memcpy(m, d->msg[k], d->msg_len[k]);
    *len = d->msg_len[k];
    return m;
}

uint8_t *downlink_sent(coord *c, const hfl_task_msg *task, size_t *len) {
    return downlink_bare(c, task, "sent", len);
}

int downlink_init(coord *c, const char *codec_name, int delta, char *err) {
    coord_downlink *d = &c->down;
    if (strcmp(codec_name, "fp32") && strcmp(codec_name, "fp16") && strcmp(codec_name, "bf16"))
        return hfl_errf(err, "downlink codec '%s' not supported (use fp32, fp16 or bf16)", codec_name);
    if (!(d->codec = hfl_codec_find(codec_name, err))) return -1;
    d->delta = delta;
    d->scratch = hfl_malloc(c->spec.n_params * sizeof(float));
    for (int i = 0; i < DOWNLINK_HISTORY; i++) d->hist_version[i] = -1;
    downlink_record(c);
    return 0;
}
