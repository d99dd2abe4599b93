/* fuzz_meta.c: libFuzzer harness for the coordinator's checks of what a
 * client says: registry_hello's hello fields and rounds_update's update
 * metadata and payload (coordinator/registry.c, rounds.c), on a live round
 * engine in this process with a tiny model (4 inputs, 2 classes, 10
 * parameters) so that small inputs can be whole, valid updates.
 *
 * Input: byte 0 picks a fetch (2 mod 4), puts (4 mod 8), hello (0 mod 8)
 * or update (odd); for an update, bytes 1-2 give the metadata's length; the
 * rest is metadata JSON, then the payload. The round's weights go in chunks
 * of 16 bytes (4 of the 52-byte task; a coordinator takes no less than 4
 * KiB, but the chunking does not care), so a fetch can ask for any of them,
 * and so do updates (coordinator/uplink.c): puts are a sequence of up to 8
 * messages, each a kind byte (even: put, odd: the update naming them), a
 * metadata length byte, the metadata, a payload length byte and the
 * payload, so a seed can hold a whole valid upload for mutations to start
 * from.
 * Invariants:
 *   - a refused hello is -1 with a one-line error and leaves the registry as
 *     it was; an accepted one is the one identity "fuzz" with its sample
 *     claim within [1, 1e8] and capped by --max-client-samples;
 *   - an update gets an ack or an error reply that decodes; an error leaves
 *     the round's exact sum untouched; an ack adds one received update whose
 *     weight is in (0, 1] and whose clipped contribution stays within the
 *     clip norm. The round is reset after every input;
 *   - a fetch gets either its chunk, at a chunk's start and byte for byte the
 *     task's weights there, or an error reply of one line; the global model
 *     never changes;
 *   - a put gets an error reply of one line or a put reply whose `have` is
 *     a chunk's end within its payload, and never touches the sum; the
 *     update that follows is held to the update's invariants above. */
#include <math.h>
#include <string.h>

#include "coordinator/coord.h"
#include "fuzz.h"
#include "kernels/backend.h"
#include "plan/planner.h"
#include "util/util.h"

static coord c;
static int drawn = -1; /* the client drawn in the open round */
static float *global0; /* the global model as it started: no request may change it */

static const char tiny_spec[] =
    "{\"name\":\"tiny\",\"input\":[1,1,4],\"layers\":[{\"type\":\"dense\",\"out\":2}]}";

static void fuzz_init(void) {
    char err[HFL_ERR_LEN];
    coord_config *cfg = &c.cfg;
    snprintf(cfg->codec, sizeof cfg->codec, "fp32");
    snprintf(cfg->server_opt, sizeof cfg->server_opt, "fedavg");
    snprintf(cfg->strategy, sizeof cfg->strategy, "fedavg");
    cfg->block = 256, cfg->rounds = 1000000, cfg->clients_per_round = 1, cfg->min_quorum = 1;
    cfg->deadline_s = 1e6, cfg->local_epochs = 1, cfg->batch = 4, cfg->lr = 0.05, cfg->seed = 1;
    cfg->clip_norm = 1, cfg->max_share = 1, cfg->quiet = 1, cfg->liveness_s = 1e6, cfg->session_ttl_s = 1e6;
    cfg->max_client_samples = 1000, cfg->token_ttl_s = 1e6, cfg->chunk_bytes = 16;
    FUZZ_REQUIRE(hfl_model_spec_from_json(tiny_spec, strlen(tiny_spec), &c.spec, err) == 0, "%s", err);
    c.codec = hfl_codec_find("fp32", err);
    c.global = hfl_calloc(c.spec.n_params, sizeof(float));
    hfl_model_init_params(&c.spec, c.global, 3); /* not zeros: a chunk served from the wrong place shows */
    global0 = hfl_malloc(c.spec.n_params * sizeof(float));
    memcpy(global0, c.global, c.spec.n_params * sizeof(float));
    c.be = hfl_backend_cpu();
    c.eval = hfl_trainer_create(&c.spec, c.be, 4);
    c.test.n = 4, c.test.dim = c.spec.in_dim, c.test.n_classes = 2;
    c.test.x = hfl_calloc((size_t)4 * c.spec.in_dim, sizeof(float));
    c.test.y = hfl_calloc(4, sizeof(int32_t));
    pthread_mutex_init(&c.lock, NULL);
    FUZZ_REQUIRE(downlink_init(&c, "fp32", 0, 16, err) == 0 && rounds_init(&c, err) == 0, "%s", err);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "samples", 100);
    cJSON_AddObjectToObject(m, "plan");
    drawn = registry_hello(&c, "honest", m, err);
    cJSON_Delete(m);
    FUZZ_REQUIRE(drawn == 0, "%s", err);
    rounds_tick(&c);
    size_t len;
    free(rounds_pull(&c, drawn, -1, &len)); /* tasked */
    FUZZ_REQUIRE(c.r.open && c.r.slot[drawn].tasked, "no open round");
}

/* Back to one open round with the honest client tasked and nothing summed. */
static void fuzz_reset_round(void) {
    coord_round *r = &c.r;
    r->slot[drawn].received = 0, r->slot[drawn].refused = 0, r->n_received = 0, r->n_refused = 0, r->n_declined = 0;
    r->weight_samples = 0, r->weight_max = 0, r->samples_sum = 0, r->loss_sum = 0, r->n_clipped = 0;
    hfl_agg_reset(&c.agg, r->clip, COORD_VALUE_BOUND);
}

static int64_t acc_abs_sum(void) {
    int64_t s = 0;
    if (c.agg.acc_zero) return 0; /* reset's zeros, not yet written */
    for (size_t i = 0; i < c.agg.n; i++) s += c.agg.acc[i] < 0 ? -c.agg.acc[i] : c.agg.acc[i];
    return s;
}

static void fuzz_hello(const uint8_t *data, size_t size) {
    cJSON *meta = cJSON_ParseWithLength((const char *)data, size);
    if (!cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        return;
    }
    char err[HFL_ERR_LEN] = "";
    int before = c.n_clients;
    int id = registry_hello(&c, "fuzz", meta, err);
    if (id < 0) {
        FUZZ_REQUIRE(id == -1 && err[0] && !strchr(err, '\n'), "refused hello: %d '%s'", id, err);
        FUZZ_REQUIRE(c.n_clients == before, "a refused hello changed the registry");
    } else {
        const coord_client *cl = &c.clients[id];
        FUZZ_REQUIRE(!strcmp(cl->name, "fuzz") && cl->declared >= 1 && cl->declared <= 100000000 &&
                         cl->samples >= 1 && cl->samples <= c.cfg.max_client_samples && cl->samples <= cl->declared,
                     "accepted: name %s, declared %lld, samples %lld", cl->name, (long long)cl->declared,
                     (long long)cl->samples);
        FUZZ_REQUIRE(c.n_clients <= before + 1, "one hello made %d sessions", c.n_clients - before);
        FUZZ_REQUIRE(strlen(cl->token) == 32 && cl->codec, "session without a token or codec");
    }
    cJSON_Delete(meta);
}

static void check_update_reply(uint8_t *rep, size_t len);

static void fuzz_update(const uint8_t *data, size_t size) {
    if (size < 2) return;
    size_t mlen = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2, size -= 2;
    if (mlen > size) return;
    cJSON *meta = cJSON_ParseWithLength((const char *)data, mlen);
    if (!cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        return;
    }
    fuzz_reset_round();
    size_t len;
    uint8_t *rep = rounds_update(&c, drawn, meta, data + mlen, size - mlen, size, &len);
    cJSON_Delete(meta);
    check_update_reply(rep, len);
}

/* An update's reply: an error that left the sum alone, or an ack of one
 * update within its weight and clip (the invariants above). */
static void check_update_reply(uint8_t *rep, size_t len) {
    hfl_msg m;
    char err[HFL_ERR_LEN];
    FUZZ_REQUIRE(rep && hfl_msg_decode(rep, len, 0, &m, err) == 0, "reply does not decode: %s", err);
    if (m.type == HFL_MSG_ERROR) {
        FUZZ_REQUIRE(c.r.n_received == 0 && acc_abs_sum() == 0, "a refused update touched the sum");
        char why[256];
        FUZZ_REQUIRE(hfl_meta_str(m.meta, "error", 255, why, NULL) == 0, "error reply without a reason");
    } else {
        FUZZ_REQUIRE(m.type == HFL_MSG_ACK, "update answered with %s", hfl_msg_type_name(m.type));
        double w = (double)c.r.weight_samples / c.r.samples_planned;
        FUZZ_REQUIRE((c.r.n_received == 1 && w > 0 && w <= 1) || c.r.n_declined == 1, "ack: %d received, weight %g",
                     c.r.n_received, w);
        /* |sum| <= weight * clip * sqrt(n) in fixed point, with rounding */
        double bound = ldexp(w * c.r.clip * sqrt((double)c.agg.n) + 1e-6, c.agg.shift) + (double)c.agg.n;
        FUZZ_REQUIRE((double)acc_abs_sum() <= bound, "the summed update exceeds its clip: %lld > %g",
                     (long long)acc_abs_sum(), bound);
    }
    hfl_msg_free(&m);
    free(rep);
}

static void fuzz_fetch(const uint8_t *data, size_t size) {
    cJSON *meta = cJSON_ParseWithLength((const char *)data, size);
    if (!cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        return;
    }
    size_t len;
    uint8_t *rep = downlink_fetch(&c, drawn, meta, &len);
    cJSON_Delete(meta);
    hfl_msg m;
    char err[HFL_ERR_LEN], why[256];
    FUZZ_REQUIRE(rep && hfl_msg_decode(rep, len, 1 << 20, &m, err) == 0, "fetch reply does not decode: %s", err);
    if (m.type == HFL_MSG_ERROR) {
        FUZZ_REQUIRE(hfl_meta_str(m.meta, "error", 255, why, NULL) == 0 && !strchr(why, '\n'),
                     "fetch refused without a one-line reason");
    } else {
        /* the weights as the fp32 codec encodes them, whether the coordinator
         * serves an encoded copy or the global model's own bytes */
        static uint8_t *want;
        static size_t want_len;
        if (!want) {
            want = hfl_malloc(hfl_codec_max_bytes(hfl_codec_find("fp32", NULL), c.spec.n_params, 0));
            want_len = hfl_codec_encode(hfl_codec_find("fp32", NULL), c.global, NULL, c.spec.n_params, 0, NULL, 1, want);
        }
        int64_t at = -1;
        FUZZ_REQUIRE(m.type == HFL_MSG_FETCH && hfl_meta_int(m.meta, "offset", 0, (int64_t)want_len - 1, &at, NULL) == 0 &&
                         at % 16 == 0 && m.payload_len == (want_len - (size_t)at < 16 ? want_len - (size_t)at : 16) &&
                         !memcmp(m.payload, want + at, m.payload_len),
                     "fetch answered %s at %lld with %zu bytes", hfl_msg_type_name(m.type), (long long)at,
                     m.payload_len);
    }
    FUZZ_REQUIRE(!memcmp(c.global, global0, c.spec.n_params * sizeof(float)), "a fetch changed the global model");
    hfl_msg_free(&m);
    free(rep);
}

/* One put's reply: a put whose `have` ends a chunk of its payload, or an
 * error of one line; the sum untouched either way. */
static void check_put_reply(uint8_t *rep, size_t len, const cJSON *meta) {
    hfl_msg m;
    char err[HFL_ERR_LEN], why[256];
    FUZZ_REQUIRE(rep && hfl_msg_decode(rep, len, 0, &m, err) == 0, "put reply does not decode: %s", err);
    if (m.type == HFL_MSG_ERROR) {
        FUZZ_REQUIRE(hfl_meta_str(m.meta, "error", 255, why, NULL) == 0 && !strchr(why, '\n'),
                     "put refused without a one-line reason");
    } else {
        int64_t total = -1, have = -1;
        FUZZ_REQUIRE(m.type == HFL_MSG_PUT && hfl_meta_int(meta, "payload_bytes", 1, 1 << 30, &total, NULL) == 0 &&
                         hfl_meta_int(m.meta, "have", 1, total, &have, NULL) == 0 && (have % 16 == 0 || have == total),
                     "put answered %s: have %lld of %lld", hfl_msg_type_name(m.type), (long long)have,
                     (long long)total);
    }
    FUZZ_REQUIRE(c.r.n_received == 0 && acc_abs_sum() == 0, "a put touched the sum");
    hfl_msg_free(&m);
    free(rep);
}

static void fuzz_puts(const uint8_t *data, size_t size) {
    fuzz_reset_round();
    for (int k = 0; k < 8 && size >= 3; k++) {
        int kind = data[0] % 2;
        size_t mlen = data[1];
        if (mlen + 3 > size || (size_t)data[2 + mlen] + mlen + 3 > size) break;
        size_t plen = data[2 + mlen];
        cJSON *meta = cJSON_ParseWithLength((const char *)data + 2, mlen);
        const uint8_t *payload = data + 3 + mlen;
        if (cJSON_IsObject(meta)) {
            size_t len;
            if (kind == 0) {
                check_put_reply(uplink_put(&c, drawn, meta, payload, plen, plen + 100, &len), len, meta);
            } else {
                hfl_msg m = {.type = HFL_MSG_UPDATE, .meta = meta, .payload = payload, .payload_len = plen};
                check_update_reply(uplink_update(&c, drawn, &m, plen + 100, &len), len);
                fuzz_reset_round();
            }
        }
        cJSON_Delete(meta);
        data += 3 + mlen + plen, size -= 3 + mlen + plen;
    }
    spool_drop(&c.clients[drawn]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (drawn < 0) fuzz_init();
    if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
    if (data[0] % 4 == 2) fuzz_fetch(data + 1, size - 1);
    else if (data[0] % 8 == 4) fuzz_puts(data + 1, size - 1);
    else if (data[0] % 2 == 0) fuzz_hello(data + 1, size - 1);
    else fuzz_update(data + 1, size - 1);
    return 0;
}
