/* gen_corpus.c: writes the seed corpora of the libFuzzer harnesses
 * (tests/fuzz/corpus/<harness>/) from hfl's real encoders, so every seed is
 * a valid input that reaches deep into its decoder:
 *   msg_decode  messages of every kind from hfl_msg_encode, with meta and payloads;
 *   codec       a selector byte (fuzz_codec.c) and a payload from each codec's encode;
 *   scenario    the JSON files of scenarios/ and one scenario with every key;
 *   spec_json   hfl_model_spec_to_json of the built-ins and of small specs, and
 *               scenarios/models/small-cnn.json as written.
 * Every seed is checked with the parser it feeds before it is written.
 * Usage (not part of the test suites; rerun when a format changes):
 *   ninja -C build-san tests/fuzz/gen_corpus
 *   build-san/tests/fuzz/gen_corpus . tests/fuzz/corpus */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/codec.h"
#include "model/model.h"
#include "proto/msg.h"
#include "scenarios/scenario.h"
#include "util/util.h"

static const char *out_root;

static void die(const char *what, const char *err) {
    fprintf(stderr, "gen_corpus: %s: %s\n", what, err);
    exit(1);
}

static void put(const char *harness, const char *name, const void *data, size_t len) {
    char dir[1024], path[1200], err[HFL_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/%s", out_root, harness);
    if (hfl_mkdirs(dir, err) != 0) die(dir, err);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (hfl_write_file_atomic(path, data, len, err) != 0) die(path, err);
}

/* n values of a smooth signal with both signs, a zero and a few large ones. */
static float *signal(size_t n) {
    float *v = hfl_malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (float)(sin(0.7 * (double)i) * (i % 11 == 0 ? 3.0 : 0.05));
    if (n > 3) v[3] = 0.0f;
    return v;
}

static uint8_t *codec_payload(const char *name, size_t n, uint32_t block, size_t *len) {
    char err[HFL_ERR_LEN];
    const hfl_codec *c = hfl_codec_find(name, err);
    if (!c || hfl_codec_check(c, n, block, err) != 0) die(name, err);
    float *v = signal(n);
    uint8_t *out = hfl_malloc(hfl_codec_max_bytes(c, n, block));
    hfl_rng_key key = {7, 1, 2, 0};
    *len = hfl_codec_encode(c, v, NULL, n, block, &key, 1, out);
    free(v);
    return out;
}

static void msg_seed(const char *name, int type, const char *meta_json, const void *payload, size_t plen) {
    cJSON *meta = meta_json ? cJSON_Parse(meta_json) : NULL;
    if (meta_json && !meta) die(name, "meta is not JSON");
    size_t len;
    uint8_t *buf = hfl_msg_encode(type, meta, payload, plen, &len);
    if (!buf) die(name, "hfl_msg_encode refused it");
    hfl_msg m;
    char err[HFL_ERR_LEN];
    if (hfl_msg_decode(buf, len, 4096, &m, err) != 0) die(name, err);
    hfl_msg_free(&m);
    put("msg_decode", name, buf, len);
    cJSON_Delete(meta);
    free(buf);
}

static void msg_seeds(void) {
    size_t fp32_len, int8_len;
    uint8_t *fp32 = codec_payload("fp32", 8, 0, &fp32_len), *int8 = codec_payload("int8", 20, 8, &int8_len);
    msg_seed("hello", HFL_MSG_HELLO,
             "{\"name\":\"client-0\",\"samples\":6000,\"backend\":\"cpu\",\"device\":\"cpu\","
             "\"memory_bytes\":1073741824,\"plan\":{\"batch\":32,\"precision\":\"fp32\"}}", NULL, 0);
    msg_seed("welcome", HFL_MSG_WELCOME,
             "{\"client_id\":3,\"model\":\"mlp\",\"codec\":\"int8\",\"block\":256,\"seed\":1}", NULL, 0);
    msg_seed("pull", HFL_MSG_PULL, "{\"have_version\":-1}", NULL, 0);
    msg_seed("task-fp32", HFL_MSG_TASK,
             "{\"round\":3,\"version\":2,\"lr\":0.05,\"local_epochs\":1,\"weights\":\"full\",\"downlink\":\"fp32\"}",
             fp32, fp32_len);
    msg_seed("wait", HFL_MSG_WAIT, "{\"ms\":500}", NULL, 0);
    msg_seed("update-int8", HFL_MSG_UPDATE,
             "{\"round\":3,\"samples\":600,\"loss\":0.6232,\"codec\":\"int8\",\"measured_peak_bytes\":3198156}",
             int8, int8_len);
    msg_seed("ack", HFL_MSG_ACK, "{}", NULL, 0);
    msg_seed("error", HFL_MSG_ERROR, "{\"error\":\"update for round 2, but round 3 is open\"}", NULL, 0);
    msg_seed("bye-no-meta", HFL_MSG_BYE, NULL, NULL, 0);
    free(fp32);
    free(int8);
}

/* fuzz_codec.c's layout: selector (codec index | 8 for 3 threads), then the payload. */
static void codec_seed(int index, const char *name, size_t n, uint32_t block, int threads3) {
    size_t len;
    uint8_t *p = codec_payload(name, n, block, &len);
    uint8_t *buf = hfl_malloc(len + 1);
    buf[0] = (uint8_t)(index | (threads3 ? 8 : 0));
    memcpy(buf + 1, p, len);
    char file[96];
    snprintf(file, sizeof file, "%s-n%zu-b%u", name[0] == 't' ? (index == 6 ? "topk0.1" : "topk0.5") : name, n,
             (unsigned)block);
    put("codec", file, buf, len + 1);
    free(p);
    free(buf);
}

static void codec_seeds(void) {
    static const char *const names[8] = {"fp32", "fp16", "bf16", "int8", "int4", "sign", "topk:0.1", "topk:0.5"};
    for (int i = 0; i < 8; i++) {
        int blocked = i >= 3 && i <= 5;
        codec_seed(i, names[i], 40, blocked ? 16 : 0, i % 2);
        if (blocked) codec_seed(i, names[i], 300, 256, 1);
    }
    codec_seed(3, "int8", 5, 1, 0);
}

static void scenario_seed(const char *name, const char *text, size_t len) {
    hfl_scenario sc;
    char err[HFL_ERR_LEN];
    if (hfl_scenario_parse(text, len, &sc, err) != 0) die(name, err);
    hfl_scenario_free(&sc);
    put("scenario", name, text, len);
}

static void scenario_seeds(const char *root) {
    static const char *const files[] = {"quickstart.json", "quickstart-cnn.json", "byzantine.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024], err[HFL_ERR_LEN];
        size_t len;
        snprintf(path, sizeof path, "%s/scenarios/%s", root, files[i]);
        char *text = hfl_read_file(path, &len, err);
        if (!text) die(path, err);
        scenario_seed(files[i], text, len);
        free(text);
    }
    const char *all =
        "{\"name\":\"every-key\",\"model\":\"mlp\",\"clients\":4,\"clients_per_round\":3,\"min_quorum\":2,"
        "\"rounds\":2,\"local_epochs\":1,\"batch\":32,\"lr\":0.05,\"momentum\":0.9,\"weight_decay\":0.0001,"
        "\"partition\":\"dirichlet:0.5\",\"codec\":\"int8\",\"block\":256,\"seed\":1,\"deadline_s\":300,"
        "\"downlink\":\"fp16\",\"downlink_delta\":true,\"client_codecs\":{\"client-3\":\"topk:0.01\"},"
        "\"precision\":\"auto\",\"client_memory\":{\"client-0\":\"64M\"},\"device\":\"auto\","
        "\"client_devices\":{\"client-1\":\"cpu\"},\"clip_norm\":\"adaptive:2\",\"max_client_samples\":0,"
        "\"max_share\":0.2,\"server_opt\":\"fedavg\",\"strategy\":\"fedavg\","
        "\"client_attacks\":{\"client-2\":\"-10:1000000\"},\"description\":\"every key\"}";
    scenario_seed("every-key.json", all, strlen(all));
    const char *clip = "{\"name\":\"clip\",\"model\":\"cnn\",\"clients\":2,\"rounds\":1,\"partition\":\"iid\","
                       "\"codec\":\"sign\",\"clip_norm\":2.5}";
    scenario_seed("clip-number.json", clip, strlen(clip));
}

static void spec_seed(const char *name, const hfl_model_spec *spec) {
    char err[HFL_ERR_LEN];
    char *text = hfl_model_spec_to_json(spec, err);
    if (!text) die(name, err);
    hfl_model_spec back;
    if (hfl_model_spec_from_json(text, strlen(text), &back, err) != 0) die(name, err);
    put("spec_json", name, text, strlen(text));
    free(text);
}

static void spec_seeds(const char *root) {
    hfl_model_spec spec;
    char err[HFL_ERR_LEN], path[1024];
    static const char *const builtins[] = {"mlp", "cnn"};
    for (int i = 0; i < 2; i++) {
        if (hfl_model_builtin(builtins[i], &spec, err) != 0) die(builtins[i], err);
        spec_seed(builtins[i], &spec);
    }
    if (hfl_model_spec_mlp(&spec, "tiny-mlp", (const int[]){16, 8, 3}, 3, err) != 0) die("tiny-mlp", err);
    spec_seed("tiny-mlp", &spec);
    const char *strided = "{\"name\":\"strided\",\"input\":[2,9,9],\"layers\":[{\"type\":\"conv2d\",\"out\":3,"
                          "\"kernel\":3,\"pad\":1,\"stride\":2},{\"type\":\"relu\"},{\"type\":\"maxpool2d\","
                          "\"size\":2,\"stride\":1},{\"type\":\"dense\",\"out\":4}]}";
    if (hfl_model_spec_from_json(strided, strlen(strided), &spec, err) != 0) die("strided", err);
    spec_seed("strided", &spec);
    snprintf(path, sizeof path, "%s/scenarios/models/small-cnn.json", root);
    size_t len;
    char *text = hfl_read_file(path, &len, err);
    if (!text || hfl_model_spec_from_json(text, len, &spec, err) != 0) die(path, err);
    put("spec_json", "small-cnn.json", text, len);
    free(text);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: gen_corpus SOURCE_ROOT OUT_DIR (e.g. gen_corpus . tests/fuzz/corpus)\n");
        return 2;
    }
    out_root = argv[2];
    msg_seeds();
    codec_seeds();
    scenario_seeds(argv[1]);
    spec_seeds(argv[1]);
    printf("gen_corpus: seeds written under %s\n", out_root);
    return 0;
}
