/* registry.c: the clients that said hello.
 *
 * A client is known by the name in its hello (its certificate's CN in the
 * simulator). Saying hello again with the same name, after a restart or a
 * reconnect, gives back the same id, so its round state is kept. NNG 1.5
 * does not expose the peer certificate, so the name is the client's word;
 * mutual TLS already keeps out anyone without a certificate from our CA.
 * A client may ask for its own update codec (a slow uplink wants a smaller
 * one); its updates must then use that codec. */
#include <string.h>

#include "coordinator/coord.h"
#include "util/util.h"

int registry_hello(coord *c, const cJSON *meta, char *err) {
    char name[64];
    int64_t samples;
    if (hfl_meta_str(meta, "name", sizeof name - 1, name, err) != 0) return -1;
    if (hfl_meta_int(meta, "samples", 1, 100000000, &samples, err) != 0) return -1;
    const cJSON *device = cJSON_GetObjectItemCaseSensitive(meta, "device");
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(meta, "plan");
    if (device && !cJSON_IsObject(device)) return hfl_errf(err, "field 'device' must be an object");
    if (plan && !cJSON_IsObject(plan)) return hfl_errf(err, "field 'plan' must be an object");
    const hfl_codec *codec = c->codec;
    if (cJSON_GetObjectItemCaseSensitive(meta, "codec")) {
        char name[32];
        if (hfl_meta_str(meta, "codec", sizeof name - 1, name, err) != 0 || !(codec = hfl_codec_find(name, err)) ||
            hfl_codec_check(codec, c->spec.n_params, c->cfg.block, err) != 0)
            return -1;
    }

    int id = -1;
    for (int i = 0; i < c->n_clients; i++)
        if (!strcmp(c->clients[i].name, name)) id = i;
    if (id < 0) {
        if (c->n_clients >= COORD_MAX_CLIENTS)
            return hfl_errf(err, "registry full (%d clients)", COORD_MAX_CLIENTS);
        id = c->n_clients++;
    }
    coord_client *cl = &c->clients[id];
    snprintf(cl->name, sizeof cl->name, "%s", name);
    cJSON_Delete(cl->hello);
    cl->hello = cJSON_CreateObject();
    if (device) cJSON_AddItemToObject(cl->hello, "device", cJSON_Duplicate(device, 1));
    if (plan) cJSON_AddItemToObject(cl->hello, "plan", cJSON_Duplicate(plan, 1));
    cl->samples = samples;
    cl->codec = codec;
    cl->last_seen = hfl_now();
    return id;
}

int registry_check_id(const coord *c, int64_t id, char *err) {
    if (id < 0 || id >= c->n_clients) return hfl_errf(err, "unknown client id %lld (say hello first)", (long long)id);
    return 0;
}

cJSON *registry_report(const coord *c) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < c->n_clients; i++) {
        const coord_client *cl = &c->clients[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddStringToObject(o, "name", cl->name);
        cJSON_AddNumberToObject(o, "samples", (double)cl->samples);
        cJSON_AddStringToObject(o, "codec", cl->codec->name);
        cJSON_AddNumberToObject(o, "updates", (double)cl->updates);
        if (cl->hello) {
            cJSON *dev = cJSON_GetObjectItemCaseSensitive(cl->hello, "device");
            cJSON *plan = cJSON_GetObjectItemCaseSensitive(cl->hello, "plan");
            if (dev) cJSON_AddItemToObject(o, "device", cJSON_Duplicate(dev, 1));
            if (plan) cJSON_AddItemToObject(o, "plan", cJSON_Duplicate(plan, 1));
        }
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}
