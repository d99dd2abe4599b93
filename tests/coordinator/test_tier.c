/* test_tier.c: a tier's root (coordinator/tier.c) driven in-process.
 *
 * 1. Same model: clients a (100 samples, update 0.5) and b (300, update
 *    -0.25) straight to the root (rounds_update) give global model G; the
 *    same two listed by an aggregator's sync, drawn by the root, summed by
 *    an aggregator of their own at the root's scale and weights and sent as
 *    one partial give G's bits, with the round's counts the flat round's.
 * 2. Refusals, each an error of one line with nothing touched (no client
 *    received, the sum still zero): a partial for a round not open, at
 *    another scale, of the wrong length, naming a client not drawn via this
 *    aggregator, naming one twice, with a weight past its caps; a tier
 *    request from a client whose hello did not say aggregator; and a row for
 *    a client already final. */
#include "tests/coordinator/rounds_harness.h"

/* A TIER request of meta (taken) and payload to the root from id; the reply's meta. */
static cJSON *tier(int id, cJSON *meta, const void *payload, size_t n, int want) {
    hfl_msg m = {.type = HFL_MSG_TIER, .meta = meta, .payload = payload, .payload_len = n};
    size_t len;
    uint8_t *rep = tier_request(&c, id, &m, &len);
    cJSON_Delete(meta);
    return reply_meta(rep, len, want);
}

static int aggregator(void) {
    char err[HFL_ERR_LEN];
    cJSON *h = cJSON_Parse("{\"samples\": 1, \"aggregator\": true}");
    int id = registry_hello(&c, "agg", h, err);
    cJSON_Delete(h);
    CHECK_MSG(id >= 0, "%s", err);
    return id;
}

static cJSON *sync_meta(void) {
    return cJSON_Parse("{\"op\": \"sync\", \"have_version\": 0, \"clients\": ["
                       "{\"name\": \"a\", \"hello\": {\"samples\": 100, \"plan\": {}}, \"seen_ms\": 10},"
                       "{\"name\": \"b\", \"hello\": {\"samples\": 300, \"plan\": {}}, \"seen_ms\": 10}]}");
}

/* fp32's payload of v in every trainable value. */
static uint8_t *payload_of(float v, size_t *plen) {
    size_t n = c.spec.n_trainable;
    float *d = hfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) d[i] = v;
    const hfl_codec *fp32 = hfl_codec_find("fp32", NULL);
    uint8_t *buf = hfl_malloc(hfl_codec_max_bytes(fp32, n, 256));
    hfl_rng_key key = {1, 1, 0, 0};
    *plen = hfl_codec_encode(fp32, d, NULL, n, 256, &key, 1, buf);
    free(d);
    return buf;
}

/* A partial's metadata: round, shift and rows "name:status:samples:weighed". */
static cJSON *partial_meta(int round, int shift, const char *rows) {
    char text[2048];
    snprintf(text, sizeof text, "{\"op\": \"partial\", \"round\": %d, \"shift\": %d, \"rows\": [%s]}", round, shift,
             rows);
    return cJSON_Parse(text);
}

#define ROW(name, status, samples, weighed)                                                                     \
    "{\"name\": \"" name "\", \"status\": \"" status "\", \"samples\": " #samples ", \"weighed\": " #weighed \
    ", \"norm\": 1, \"clipped\": false, \"loss\": 0.5, \"train_s\": 0.1, \"bytes\": 1000, \"measured_peak\": 0,"  \
    " \"predicted_peak\": 0, \"trained\": 0}"

static void refused(int id, cJSON *meta, const void *payload, size_t n, const char *want) {
    cJSON *m = tier(id, meta, payload, n, HFL_MSG_ERROR);
    const char *e = str(m, "error");
    CHECK_MSG(e && strstr(e, want) && !strchr(e, '\n'), "error '%s', expected '%s'", e ? e : "(none)", want);
    cJSON_Delete(m);
    CHECK(c.r.n_received == 0 && c.r.n_refused == 0 && c.r.n_declined == 0 && c.r.weight_samples == 0);
}

static void test_same_model(void) {
    setup(2, 0, 60, 1);
    int a = hello("a", 100), b = hello("b", 300);
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 2);
    pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
    accept(a, 100, 0.5, 0.5f), accept(b, 300, 0.5, -0.25f);
    rounds_tick(&c);
    CHECK(c.version == 1);
    float *flat = hfl_malloc(sizeof(float) * NP);
    memcpy(flat, c.global, sizeof(float) * NP);
    double flat_w = c.rounds.v[0].samples;
    teardown();

    setup(2, 0, 60, 1);
    int agg = aggregator();
    cJSON_Delete(tier(agg, sync_meta(), NULL, 0, HFL_MSG_TIER));
    rounds_tick(&c);
    CHECK(c.r.open && c.r.n_selected == 2);
    cJSON *rep = tier(agg, sync_meta(), NULL, 0, HFL_MSG_TIER);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(rep, "selected")) == 2);
    CHECK(num(rep, "shift") == c.agg.shift && num(rep, "samples_planned") == 400);
    cJSON_Delete(rep);
    /* the aggregator's sum: the root's scale, weights of the root's divisor */
    char err[HFL_ERR_LEN];
    hfl_agg g;
    CHECK(hfl_agg_init_on(&g, hfl_backend_cpu(), c.spec.n_trainable, 1, err) == 0);
    hfl_agg_reset(&g, c.r.clip, COORD_VALUE_BOUND);
    size_t la, lb;
    uint8_t *pa = payload_of(0.5f, &la), *pb = payload_of(-0.25f, &lb);
    CHECK(hfl_agg_add(&g, c.codec, pa, la, 100.0 / 400, NULL, err) == 0);
    CHECK(hfl_agg_add(&g, c.codec, pb, lb, 300.0 / 400, NULL, err) == 0);
    size_t n = c.spec.n_trainable;
    int64_t *sum = hfl_malloc(n * sizeof *sum);
    hfl_agg_read_sum(&g, sum);
    const int s = c.agg.shift, r = c.r.round;
    int not_agg = hello("mallory", 5);
    refused(not_agg, partial_meta(r, s, ROW("a", "ok", 100, 100)), sum, n * 8, "not an aggregator");
    refused(agg, partial_meta(r + 1, s, ROW("a", "ok", 100, 100)), sum, n * 8, "partial for round 2");
    refused(agg, partial_meta(r, s + 1, ROW("a", "ok", 100, 100)), sum, n * 8, "scale");
    refused(agg, partial_meta(r, s, ROW("a", "ok", 100, 100)), sum, n * 8 - 8, "int64 values");
    refused(agg, partial_meta(r, s, ROW("zed", "ok", 100, 100)), sum, n * 8, "not drawn via this aggregator");
    refused(agg, partial_meta(r, s, ROW("a", "ok", 100, 100) "," ROW("a", "ok", 100, 100)), sum, n * 8, "two rows");
    refused(agg, partial_meta(r, s, ROW("a", "ok", 100, 101)), sum, n * 8, "not as it was drawn");
    refused(agg, partial_meta(r, s, ROW("a", "ok", 100, 99)), sum, n * 8, "not as it was drawn");
    /* a sum its rows could not make: any value with no ok row; without a
     * clip, a value over the weights times the value bound */
    refused(agg, partial_meta(r, s, ROW("a", "declined", 0, 0)), sum, n * 8, "more than its 0 updates can make");
    int64_t *big = hfl_malloc(n * sizeof *big);
    memcpy(big, sum, n * sizeof *big);
    big[n / 2] = (int64_t)ldexp(1.5 * COORD_VALUE_BOUND, s);
    refused(agg, partial_meta(r, s, ROW("a", "ok", 100, 100) "," ROW("b", "ok", 300, 300)), big, n * 8,
            "more than its 2 updates can make");
    refused(agg, partial_meta(r, s, ROW("a", "maybe", 100, 100)), sum, n * 8, "not ok, declined or refused");
    int64_t *zero = hfl_malloc(n * sizeof *zero);
    hfl_agg_read_sum(&c.agg, zero);
    int untouched = 1;
    for (size_t i = 0; i < n; i++) untouched &= zero[i] == 0;
    CHECK_MSG(untouched, "a refused partial touched the root's sum");
    cJSON_Delete(tier(agg, partial_meta(r, s, ROW("a", "ok", 100, 100) "," ROW("b", "ok", 300, 300)), sum, n * 8,
                      HFL_MSG_ACK));
    CHECK(c.r.n_received == 2 && c.r.weight_samples == 400 && c.r.weight_max == 300);
    cJSON *again = tier(agg, partial_meta(r, s, ROW("a", "declined", 0, 0)), NULL, 0, HFL_MSG_ERROR);
    CHECK(strstr(str(again, "error"), "came from this aggregator already") != NULL);
    cJSON_Delete(again);
    rounds_tick(&c);
    CHECK(c.version == 1 && c.rounds.n == 1 && c.rounds.v[0].clients == 2);
    CHECK(c.rounds.v[0].samples == flat_w);
    CHECK_MSG(memcmp(flat, c.global, sizeof(float) * NP) == 0, "the tier's model is not the flat run's");
    printf("test_tier: an aggregator's partial sum gives the flat round's model, bit for bit; 12 refusals\n");
    hfl_agg_free(&g);
    free(pa), free(pb), free(sum), free(zero), free(flat), free(big);
    teardown();
}

static const check_case cases[] = {{"same_model", test_same_model}};

int main(int argc, char **argv) { return check_run("test_tier", cases, CHECK_CASES(cases), argc, argv); }
