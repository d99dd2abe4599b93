/* uplink.c: updates that come in chunks (docs/protocol.md, "Chunked
 * updates").
 *
 * A client whose update is longer than --chunk-bytes puts it chunk by
 * chunk, in order. Each chunk is written to a spool file of the client's own
 * (made in the spool directory and unlinked at once, so nothing is left
 * behind however the coordinator ends) and fed to a running SHA-256. The
 * update message that follows without a payload maps the spool, and the
 * round engine takes the mapping as it takes a whole payload
 * (rounds_update): the same checks, and the same bits in the sum. So what
 * the coordinator holds of the updates in flight is a chunk per connection
 * (server.c lowers NNG's receive limit to one) and the one update being
 * added, under the lock. The disk is at most one update per task in
 * flight: a client has one spool (spool.h), for one round, and a spool its
 * round can no longer take is dropped when the next round opens
 * (spool_sweep). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "coordinator/spool.h"
#include "util/util.h"

size_t coord_max_payload(const coord *c) {
    /* a secure aggregation input packs at most 52 bits an element (secagg.h) */
    return c->spec.n_params * (c->cfg.secure_agg ? 7 : sizeof(float)) + 4096;
}

/* An error reply of one line, counted as a rejected message. */
static uint8_t *uplink_refuse(coord *c, size_t *len, const char *fmt, ...) {
    char msg[HFL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->rejected++;
    return coord_error_reply(msg, len);
}

uint8_t *uplink_put(coord *c, int id, const cJSON *meta, const uint8_t *chunk, size_t n, size_t msg_bytes,
                    size_t *len) {
    char err[HFL_ERR_LEN];
    hfl_put_msg p = {0};
    coord_client *cl = &c->clients[id];
    size_t step = c->cfg.chunk_bytes, most = coord_max_payload(c);
    cl->last_seen = hfl_now();
    if (hfl_wire_decode(&hfl_wire_put, meta, &p, err) != 0) return uplink_refuse(c, len, "put: %s", err);
    if (!step) return uplink_refuse(c, len, "put: this coordinator takes updates whole (--chunk-bytes 0)");
    if (!spool_round_ok(c, id, p.round))
        return uplink_refuse(c, len, "put: no task of round %lld awaits an update from this client", (long long)p.round);
    size_t total = (size_t)p.payload_bytes, at = (size_t)p.offset;
    if (total > most)
        return uplink_refuse(c, len, "put: a payload of %zu bytes is larger than any update of this model (%zu)", total,
                             most);
    if (strlen(p.payload_sha256) != 64 || strspn(p.payload_sha256, "0123456789abcdef") != 64)
        return uplink_refuse(c, len, "put: payload_sha256 is not a SHA-256 in lowercase hex");
    if (at % step != 0 || at >= total)
        return uplink_refuse(c, len, "put: byte %zu is not the start of a chunk of the %zu-byte payload", at, total);
    size_t want = total - at < step ? total - at : step;
    if (n != want) return uplink_refuse(c, len, "put: the chunk at byte %zu holds %zu bytes, not %zu", at, n, want);
    struct coord_spool *sp = cl->spool;
    int same = sp && sp->round == p.round && sp->len == total && !strcmp(sp->sha, p.payload_sha256);
    double put_before = sp && sp->round == p.round ? sp->put_bytes : 0;
    if (sp && !same && at > 0)
        return uplink_refuse(c, len, "put: byte %zu of another payload than the one begun (round, length or digest "
                             "differ): begin again at byte 0", at);
    if (!sp && at > 0) return uplink_refuse(c, len, "put: byte %zu, but no payload was begun: start at byte 0", at);
    /* as many bytes as the update's uploads a client may be asked for (the
     * resend cap rounds.c applies to downloads): a put storm must end */
    if (put_before + (double)n > (1.0 + COORD_MAX_RESENDS) * (double)total) {
        spool_drop(cl);
        c->rejected++;
        return coord_skip_reply("put: this round's update was put too often by this client (skip the round)", 1, len);
    }
    if (!same) { /* the first chunk, or a payload begun again */
        spool_drop(cl);
        if (!(sp = cl->spool = spool_open(c, p.round, total, p.payload_sha256, err)))
            return uplink_refuse(c, len, "put: %s", err);
    }
    sp->put_bytes = put_before + (double)n;
    if (at > sp->have)
        return uplink_refuse(c, len, "put: a chunk at byte %zu, but %zu bytes are held: chunks go in order", at,
                             sp->have);
    if (at == sp->have) {
        if (spool_write(sp, chunk, n, err) != 0) {
            spool_drop(cl);
            return uplink_refuse(c, len, "put: cannot spool the chunk: %s", err);
        }
        sp->msg_bytes += (double)msg_bytes;
    }
    hfl_put_reply_msg r = {.round = p.round, .have = (int64_t)sp->have};
    return hfl_wire_message(&hfl_wire_put_reply, &r, NULL, 0, len);
}

uint8_t *uplink_update(coord *c, int id, const hfl_msg *m, size_t n, size_t *len) {
    if (!cJSON_GetObjectItemCaseSensitive(m->meta, "payload_bytes"))
        return rounds_update(c, id, m->meta, m->payload, m->payload_len, n, len);
    char err[HFL_ERR_LEN];
    hfl_update_msg u = {0};
    coord_client *cl = &c->clients[id];
    struct coord_spool *sp = cl->spool;
    if (hfl_wire_decode(&hfl_wire_update, m->meta, &u, err) != 0) return uplink_refuse(c, len, "update: %s", err);
    if (!u.has_payload_sha256) return uplink_refuse(c, len, "update: payload_bytes without payload_sha256");
    if (m->payload_len) return uplink_refuse(c, len, "update: a payload both attached and put in chunks");
    if (!sp || sp->round != u.round)
        return uplink_refuse(c, len, "update: no payload was put for round %lld", (long long)u.round);
    if (sp->len != (size_t)u.payload_bytes || sp->have != sp->len)
        return uplink_refuse(c, len, "update: %zu bytes of a %zu-byte payload were put, not the %lld it names",
                             sp->have, sp->len, (long long)u.payload_bytes);
    if (strcmp(sp->got, u.payload_sha256) != 0 || strcmp(sp->sha, u.payload_sha256) != 0) {
        spool_drop(cl);
        return uplink_refuse(c, len, "update: the payload put does not match its digest");
    }
    void *map = mmap(NULL, sp->len, PROT_READ, MAP_PRIVATE, sp->fd, 0);
    if (map == MAP_FAILED) {
        spool_drop(cl);
        return uplink_refuse(c, len, "update: cannot map the spooled payload: %s", strerror(errno));
    }
    uint8_t *out = rounds_update(c, id, m->meta, map, sp->len, n + (size_t)sp->msg_bytes, len);
    munmap(map, sp->len);
    spool_drop(cl);
    return out;
}
