/* prove.c: hello with a proven identity for integration tests (prove.h). */
#include "tests/integration/prove.h"

#include <string.h>

#include "proto/hello.h"
#include "util/util.h"

int prove_hello(nng_socket sock, const char *pem, const char *ca, cJSON *fields, size_t max_payload, int *id,
                char token[64], char *why) {
    hfl_hello_auth auth = {.server_name = "localhost"};
    hfl_msg rep;
    nng_msg *raw;
    int type = -1;
    why[0] = 0;
    if (hfl_identity_load(pem, &auth.self, why) == 0 && hfl_trust_load(ca, NULL, &auth.trust, why) == 0 &&
        hfl_hello(sock, &auth, fields, max_payload, &rep, &raw, why) == 0) {
        type = rep.type;
        hfl_meta_str(rep.meta, "error", 200, why, NULL);
        int64_t v;
        if (type == HFL_MSG_WELCOME && hfl_meta_int(rep.meta, "client_id", 0, 1 << 20, &v, why) == 0) *id = (int)v;
        if (type == HFL_MSG_WELCOME) hfl_meta_str(rep.meta, "token", 63, token, why);
        hfl_msg_free(&rep);
        nng_msg_free(raw);
    }
    hfl_identity_free(auth.self);
    hfl_trust_free(auth.trust);
    cJSON_Delete(fields);
    return type;
}
