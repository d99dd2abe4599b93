/* upload.c: an update longer than the welcome's chunk_bytes goes up by put,
 * chunk by chunk, before the update message that names it
 * (docs/protocol.md, "Chunked updates"). Each reply says how much of the
 * payload the coordinator holds from the start, and the next put begins
 * there: after a lost connection (dialled again by client_request), after a
 * rejoin (the coordinator kept what it had), or when a reply was lost after
 * its chunk was written. So a cut upload goes on where it stopped and no
 * chunk is written twice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "util/util.h"

static int put_cut; /* HFL_TEST_PUT_CUT's cut was made (client_test_cut) */

int client_put_update(client_session *ss, const client_pending *p, const char sha[65], hfl_msg *rep, nng_msg **raw,
                      char *why) {
    size_t total = p->len, step = (size_t)ss->w.chunk_bytes;
    hfl_put_msg q = {.round = p->round, .payload_bytes = (int64_t)total};
    snprintf(q.payload_sha256, sizeof q.payload_sha256, "%s", sha);
    int tries = 0, puts = 0;
    for (size_t at = 0; at < total;) {
        size_t m = total - at < step ? total - at : step;
        q.offset = (int64_t)at;
        cJSON *meta = client_request_meta(ss->s, &hfl_wire_put, &q);
        int rc = client_request(ss, HFL_MSG_PUT, meta, p->bytes + at, m, rep, raw, why);
        cJSON_Delete(meta);
        if (rc != 0 && ++tries < CLIENT_PUT_TRIES) {
            hfl_sleep_ms(50 << tries);
            continue;
        }
        if (rc != 0) return -1;
        tries = 0;
        if (rep->type != HFL_MSG_PUT) return 1; /* a refusal: the caller reads it */
        hfl_put_reply_msg got = {0};
        int ok = hfl_wire_decode(&hfl_wire_put_reply, rep->meta, &got, why) == 0 && got.round == p->round &&
                 got.have > (int64_t)at && got.have <= (int64_t)total &&
                 ((size_t)got.have % step == 0 || (size_t)got.have == total);
        if (ok) at = (size_t)got.have;
        else hfl_errf(why, "put at byte %zu: the reply holds %lld bytes of round %lld, not the chunk's end", at,
                      (long long)got.have, (long long)got.round);
        hfl_msg_free(rep);
        nng_msg_free(*raw);
        if (!ok) return -1;
        client_test_cut(ss, "HFL_TEST_PUT_CUT", ++puts, &put_cut);
    }
    return 0;
}
