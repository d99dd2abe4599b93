/* reply.c: the replies every request handler gives (server.c, rounds.c,
 * secagg.c, auth.c): an error (with skip_round or reauth), a wait, an ack, a
 * bye, each written through its table in proto/messages.c. They sit apart
 * so that a handler answering for the round engine need not call into it. */
#include <stdio.h>

#include "coordinator/coord.h"

/* An error reply; skip >= 0 adds skip_round, retry_ms >= 0 adds reauth (and
 * retry_ms when > 0). */
static uint8_t *error_reply(const char *msg, int skip, int retry_ms, size_t *len) {
    hfl_error_msg e = {0};
    snprintf(e.error, sizeof e.error, "%s", msg);
    e.skip_round = skip > 0, e.has_skip_round = skip >= 0;
    e.reauth = 1, e.has_reauth = retry_ms >= 0;
    e.retry_ms = retry_ms, e.has_retry_ms = retry_ms > 0;
    return hfl_wire_message(&hfl_wire_error, &e, NULL, 0, len);
}

uint8_t *coord_error_reply(const char *msg, size_t *len) { return error_reply(msg, -1, -1, len); }
uint8_t *coord_skip_reply(const char *msg, int skip, size_t *len) { return error_reply(msg, skip != 0, -1, len); }
uint8_t *coord_reauth_reply(const char *msg, size_t *len) { return error_reply(msg, -1, 0, len); }
uint8_t *coord_retry_reply(const char *msg, int retry_ms, size_t *len) {
    return error_reply(msg, -1, retry_ms > 0 ? retry_ms : 0, len);
}

uint8_t *coord_wait_reply(int ms, size_t *len) {
    hfl_wait_msg w = {.ms = ms};
    return hfl_wire_message(&hfl_wire_wait, &w, NULL, 0, len);
}

uint8_t *coord_ack_reply(int round, int missed_deadline, int folded_into, size_t *len) {
    hfl_ack_msg a = {.round = round, .missed_deadline = 1, .has_missed_deadline = missed_deadline,
                     .folded_into = folded_into, .has_folded_into = folded_into > 0};
    return hfl_wire_message(&hfl_wire_ack, &a, NULL, 0, len);
}

uint8_t *coord_bye_reply(const char *reason, size_t *len) {
    hfl_bye_msg b = {.has_reason = reason != NULL};
    if (reason) snprintf(b.reason, sizeof b.reason, "%s", reason);
    return hfl_wire_message(&hfl_wire_bye, &b, NULL, 0, len);
}
