/* spool.h: an update coming in chunks, held in a file while it comes
 * (coordinator/uplink.c takes the puts; docs/protocol.md, "Chunked
 * updates"). A client has at most one (coord_client.spool). The file is
 * made in --spool-dir ($TMPDIR, else /tmp) and unlinked at once, so nothing
 * is left behind however the coordinator ends; its bytes are hashed as they
 * are written, in order. This file calls nothing of the round engine, so
 * the registry and the rounds may drop spools without a circle. */
#ifndef HFL_COORDINATOR_SPOOL_H
#define HFL_COORDINATOR_SPOOL_H

#include <mbedtls/sha256.h>

#include "coordinator/coord.h"

struct coord_spool {
    int fd;
    int64_t round;
    size_t len, have;         /* the payload's length; its bytes held, from the start */
    char sha[65];             /* the digest its puts name */
    char got[65];             /* the digest of the bytes held, once all are */
    mbedtls_sha256_context h; /* over bytes [0, have) */
    double put_bytes;         /* every put's bytes for this round, resent ones too */
    double msg_bytes;         /* the put messages whose chunks were written: the update's bytes up */
};

/* A spool of len bytes for round's payload of digest sha, its space
 * reserved (a full disk says so now, not mid-way); NULL with err. */
struct coord_spool *spool_open(const coord *c, int64_t round, size_t len, const char *sha, char *err);
/* Appends n bytes at sp->have and hashes them (sp->got once all are in); -1
 * with err when the file will not take them. */
int spool_write(struct coord_spool *sp, const uint8_t *b, size_t n, char *err);
/* 1 when client id may send an update for round: the open round's task it
 * has not answered, or the earlier one a late fold waits for. */
int spool_round_ok(const coord *c, int id, int64_t round);

#endif
