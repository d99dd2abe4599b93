/* reply.c: the replies every request handler gives (server.c, rounds.c,
 * secagg.c): a message from its metadata, an error, a wait. They sit apart
 * so that a handler answering for the round engine need not call into it. */
#include "coordinator/coord.h"

uint8_t *coord_reply(int type, cJSON *meta, const void *payload, size_t plen, size_t *len) {
    uint8_t *m = hfl_msg_encode(type, meta, payload, plen, len);
    cJSON_Delete(meta);
    return m;
}

uint8_t *coord_error_reply(const char *msg, size_t *len) {
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "error", msg);
    return coord_reply(HFL_MSG_ERROR, meta, NULL, 0, len);
}

uint8_t *coord_wait_reply(int ms, size_t *len) {
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "ms", ms);
    return coord_reply(HFL_MSG_WAIT, meta, NULL, 0, len);
}
