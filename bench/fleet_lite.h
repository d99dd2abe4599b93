/* fleet_lite.h: bench-fleet's light clients, many in one process
 * (bench/fleet_overhead.c says what they do and why).
 *
 * Each is an NNG context on a shared req socket with its own aio, driven by
 * its callback: hello, long-poll pulls, and for each task the weights'
 * chunks fetched in order when the task names them (offset and length
 * checked, the bytes dropped unhashed), then an int8 update of a small
 * constant change, sized from the welcome's params, encoded and hashed once
 * for all, put in chunks when longer than the welcome's chunk_bytes
 * (docs/protocol.md, "Chunked weights", "Chunked updates"). A client is done
 * at bye, or failed with one line in err. */
#ifndef HFL_BENCH_FLEET_LITE_H
#define HFL_BENCH_FLEET_LITE_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "util/util.h"

#define FLEET_MAX 16384 /* clients, and the client ids a welcome may give */

/* One light client; a caller allocates them zeroed and reads done, failed
 * and err once fleet_lite_counts_now().done says every one is done. */
typedef struct {
    int i, id, done, failed;
    char token[33];
    nng_ctx ctx;
    nng_aio *aio;
    int sending; /* 1: the aio is sending; 0: receiving */
    /* the task in hand */
    int64_t round, version, base;
    size_t total, chunk, at; /* chunked weights: their bytes, the chunk size, the next offset */
    size_t put_at;           /* a chunked upload: the bytes the coordinator holds */
    char err[HFL_ERR_LEN];
} fleet_lite;

typedef struct {
    int done;            /* clients done or failed */
    long fetches, puts;  /* chunks fetched and put, all clients */
    size_t update_bytes; /* the update's length (0 before the first welcome) */
} fleet_lite_counts;

/* The largest payload a reply may carry (a task's weights whole). Before
 * the first start. */
void fleet_lite_setup(size_t most);
/* Client i on sock: opens its context and says hello. */
void fleet_lite_start(fleet_lite *l, int i, nng_socket sock);
fleet_lite_counts fleet_lite_counts_now(void);
/* Stops n clients' aios (no callback runs after), then frees them and the update. */
void fleet_lite_close(fleet_lite *l, int n);
void fleet_lite_free(fleet_lite *l, int n);

#endif
