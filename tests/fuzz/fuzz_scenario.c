/* fuzz_scenario.c: libFuzzer harness for the scenario parser
 * hfl_scenario_parse (scenarios/scenario.h).
 *
 * The input is the scenario's text, not NUL-terminated. Invariants:
 *   - a refusal is -1 with a one-line error and no per-client arrays left;
 *   - an accepted scenario keeps the documented ranges (1 <= min_quorum <=
 *     clients_per_round <= clients <= 1000, ...), every string is terminated
 *     inside its array and the required ones are not empty, the devices are
 *     auto, cpu or cuda, and every per-client array is there;
 *   - parsing the same text again gives the same scenario. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "scenarios/scenario.h"
#include "util/util.h"

#define TERMINATED(field) (memchr((field), 0, sizeof(field)) != NULL)

static int is_device(const char *d) { return !strcmp(d, "auto") || !strcmp(d, "cpu") || !strcmp(d, "cuda"); }

static void check_client_array(char (*a)[32], int clients, const char *what) {
    FUZZ_REQUIRE(a != NULL, "%s is missing", what);
    for (int i = 0; i < clients; i++) FUZZ_REQUIRE(TERMINATED(a[i]), "%s[%d] is not terminated", what, i);
}

static void check_scenario(const hfl_scenario *sc) {
    FUZZ_REQUIRE(sc->clients >= 1 && sc->clients <= 1000, "clients = %d", sc->clients);
    FUZZ_REQUIRE(sc->clients_per_round >= 1 && sc->clients_per_round <= sc->clients, "clients_per_round = %d",
                 sc->clients_per_round);
    FUZZ_REQUIRE(sc->min_quorum >= 1 && sc->min_quorum <= sc->clients_per_round, "min_quorum = %d", sc->min_quorum);
    FUZZ_REQUIRE(sc->rounds >= 1 && sc->local_epochs >= 1 && sc->batch >= 1 && sc->batch <= 65536,
                 "rounds %d, epochs %d, batch %d", sc->rounds, sc->local_epochs, sc->batch);
    FUZZ_REQUIRE(sc->block >= 1 && sc->block <= 65536, "block = %d", sc->block);
    FUZZ_REQUIRE(isfinite(sc->lr) && sc->lr >= 0 && isfinite(sc->momentum) && sc->momentum >= 0 &&
                     sc->momentum < 1 && isfinite(sc->weight_decay) && isfinite(sc->deadline_s) &&
                     sc->deadline_s > 0,
                 "lr %g, momentum %g, weight_decay %g, deadline_s %g", sc->lr, sc->momentum, sc->weight_decay,
                 sc->deadline_s);
    FUZZ_REQUIRE(sc->max_client_samples >= 0 && sc->max_share >= 0 && sc->max_share <= 1, "caps %g, %g",
                 sc->max_client_samples, sc->max_share);
    FUZZ_REQUIRE(TERMINATED(sc->name) && TERMINATED(sc->model) && TERMINATED(sc->partition) &&
                     TERMINATED(sc->codec) && TERMINATED(sc->downlink) && TERMINATED(sc->precision) &&
                     TERMINATED(sc->device) && TERMINATED(sc->clip_norm) && TERMINATED(sc->server_opt) &&
                     TERMINATED(sc->strategy),
                 "a string is not terminated");
    FUZZ_REQUIRE(sc->name[0] && sc->model[0] && sc->partition[0] && sc->codec[0] && sc->downlink[0] &&
                     sc->precision[0],
                 "a required string is empty");
    FUZZ_REQUIRE(is_device(sc->device), "device '%s'", sc->device);
    check_client_array(sc->client_codec, sc->clients, "client_codec");
    check_client_array(sc->client_memory, sc->clients, "client_memory");
    check_client_array(sc->client_attack, sc->clients, "client_attack");
    check_client_array(sc->client_device, sc->clients, "client_device");
    check_client_array(sc->client_profile, sc->clients, "client_profile");
    check_client_array(sc->client_crash, sc->clients, "client_crash");
    check_client_array(sc->client_slow, sc->clients, "client_slow");
    FUZZ_REQUIRE(sc->memory_scale > 0 && sc->memory_scale <= 1 && sc->dropout >= 0 && sc->dropout <= 0.95,
                 "memory_scale %g, dropout %g", sc->memory_scale, sc->dropout);
    for (int i = 0; i < sc->clients; i++)
        FUZZ_REQUIRE(!sc->client_device[i][0] || is_device(sc->client_device[i]), "client_device[%d] '%s'", i,
                     sc->client_device[i]);
}

/* The same text parsed twice: every field equal. */
static void check_same(const hfl_scenario *a, const hfl_scenario *b) {
    hfl_scenario x, y; /* memcpy, not assignment: the padding both parses zeroed is compared too */
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    size_t per_client = (size_t)a->clients * 32;
    FUZZ_REQUIRE(!memcmp(a->client_codec, b->client_codec, per_client) &&
                     !memcmp(a->client_memory, b->client_memory, per_client) &&
                     !memcmp(a->client_memory_at, b->client_memory_at, per_client) &&
                     !memcmp(a->client_device, b->client_device, per_client) &&
                     !memcmp(a->client_attack, b->client_attack, per_client) &&
                     !memcmp(a->client_profile, b->client_profile, per_client) &&
                     !memcmp(a->client_crash, b->client_crash, per_client) &&
                     !memcmp(a->client_slow, b->client_slow, per_client),
                 "a second parse gives other per-client settings");
    x.client_profile = y.client_profile = NULL;
    x.client_crash = y.client_crash = NULL;
    x.client_slow = y.client_slow = NULL;
    x.client_codec = y.client_codec = NULL;
    x.client_memory = y.client_memory = NULL;
    x.client_memory_at = y.client_memory_at = NULL;
    x.client_device = y.client_device = NULL;
    x.client_attack = y.client_attack = NULL;
    FUZZ_REQUIRE(!memcmp(&x, &y, sizeof x), "a second parse gives another scenario");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_MAX_INPUT) return 0;
    hfl_scenario sc, again;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_scenario_parse((const char *)data, size, &sc, err);
    if (rc != 0) {
        FUZZ_REQUIRE(rc == -1 && err[0], "refused with %d and error '%s'", rc, err);
        FUZZ_REQUIRE(strchr(err, '\n') == NULL, "error is not one line: %s", err);
        FUZZ_REQUIRE(!sc.client_codec && !sc.client_memory && !sc.client_memory_at && !sc.client_device && !sc.client_attack &&
                         !sc.client_profile && !sc.client_crash && !sc.client_slow,
                     "a refused scenario left its arrays");
        return 0;
    }
    check_scenario(&sc);
    FUZZ_REQUIRE(hfl_scenario_parse((const char *)data, size, &again, err) == 0, "second parse: %s", err);
    check_same(&sc, &again);
    hfl_scenario_free(&again);
    hfl_scenario_free(&sc);
    return 0;
}
