/* test_safetensors.c: model/safetensors.h on mlp and cnn.
 *
 * The encoded file is checked byte by byte against the format worked out by
 * hand, not against the decoder: the first 8 bytes are the header length
 * (a multiple of 8), the header names layers.<l>.weight/bias with PyTorch's
 * shapes and the offsets of the parameter vector (mlp: layer 0's weight
 * [200, 784] at [0, 627200), its bias [200] at [627200, 628000), ...), the
 * metadata holds the spec, and the data buffer is the parameters' bytes.
 * Then a round trip, and a corpus of faults, each refused with its own one
 * line and the output untouched: short file, header length past the file,
 * not JSON, not an object, junk after the JSON, another dtype, offsets out of
 * range, overlap, a hole, bytes against shape, a transposed weight, a tensor
 * missing, an extra tensor, a name twice, metadata not a string or twice.
 * A GPT spec's file names its tensors as nanoGPT's state_dict does, with
 * shapes and offsets worked out by hand, and round-trips. A file is loaded
 * by streaming: the cnn's bits come back, and the process's peak resident
 * memory (the kernel's VmHWM, util/memmeter.h) grows by far less than the
 * file while it loads; a file truncated on disk, a directory and a file
 * that shrinks after its header was read are each refused in one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "model/safetensors.h"
#include "tests/check.h"
#include "util/memmeter.h"
#include "util/stfile.h"
#include "util/util.h"

static hfl_model_spec mlp;

/* A file of `header` (JSON text, padded to 8) over data_len bytes of data. */
static uint8_t *file_of(const char *header, size_t data_len, size_t *len) {
    size_t hl = strlen(header), padded = (hl + 7) / 8 * 8;
    uint8_t *b = hfl_calloc(8 + padded + data_len, 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, ' ', padded - hl);
    *len = 8 + padded + data_len;
    return b;
}

/* mlp's six tensors as a header, with one entry's text replaced. */
static char *mlp_header(const char *replace_name, const char *replace_entry, const char *extra) {
    static const char *names[6] = {"layers.0.weight", "layers.0.bias", "layers.2.weight",
                                   "layers.2.bias", "layers.4.weight", "layers.4.bias"};
    static const char *entries[6] = {
        "{\"dtype\":\"F32\",\"shape\":[200,784],\"data_offsets\":[0,627200]}",
        "{\"dtype\":\"F32\",\"shape\":[200],\"data_offsets\":[627200,628000]}",
        "{\"dtype\":\"F32\",\"shape\":[200,200],\"data_offsets\":[628000,788000]}",
        "{\"dtype\":\"F32\",\"shape\":[200],\"data_offsets\":[788000,788800]}",
        "{\"dtype\":\"F32\",\"shape\":[10,200],\"data_offsets\":[788800,796800]}",
        "{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":[796800,796840]}"};
    char *h = hfl_malloc(8192);
    size_t k = (size_t)snprintf(h, 8192, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < 6; i++) {
        if (replace_name && !strcmp(names[i], replace_name) && !replace_entry) continue; /* dropped */
        const char *e = replace_name && !strcmp(names[i], replace_name) ? replace_entry : entries[i];
        k += (size_t)snprintf(h + k, 8192 - k, ",\"%s\":%s", names[i], e);
    }
    snprintf(h + k, 8192 - k, "%s}", extra ? extra : "");
    return h;
}

static void refuse(const char *what, const uint8_t *buf, size_t len, const char *want) {
    char err[HFL_ERR_LEN] = "";
    float *p = hfl_malloc(sizeof(float) * mlp.n_params);
    for (size_t i = 0; i < mlp.n_params; i++) p[i] = 7.0f;
    int rc = hfl_safetensors_decode(buf, len, &mlp, p, err);
    int untouched = 1;
    for (size_t i = 0; i < mlp.n_params; i++) untouched &= p[i] == 7.0f;
    CHECK_MSG(rc == -1 && strstr(err, want) && !strchr(err, '\n') && untouched, "%s: rc %d, error '%s', expected '%s'",
              what, rc, err, want);
    printf("refused: %s: %s\n", what, err);
    free(p);
}

static void refuse_header(const char *what, const char *header, size_t data_len, const char *want) {
    size_t len;
    uint8_t *b = file_of(header, data_len, &len);
    refuse(what, b, len, want);
    free(b);
}

/* One tensor's header entry as worked out by hand. */
typedef struct {
    const char *name;
    int shape[2], nd;
    double begin, end;
} entry;

/* Each entry of want is in header h: F32, its shape, its byte offsets. */
static void check_entries(const cJSON *h, const entry *want, int n) {
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(h, want[i].name);
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        int ok = e && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype")), "F32") &&
                 cJSON_GetArraySize(sh) == want[i].nd && cJSON_GetArraySize(of) == 2 &&
                 cJSON_GetArrayItem(of, 0)->valuedouble == want[i].begin &&
                 cJSON_GetArrayItem(of, 1)->valuedouble == want[i].end;
        for (int d = 0; ok && d < want[i].nd; d++) ok = cJSON_GetArrayItem(sh, d)->valuedouble == want[i].shape[d];
        CHECK_MSG(ok, "entry %s", want[i].name);
    }
}

/* spec's file for p: its bytes (*b, *len), header length *hl and parsed header. */
static cJSON *encode_parse(const hfl_model_spec *spec, const float *p, uint8_t **b, size_t *len, uint64_t *hl) {
    char err[HFL_ERR_LEN];
    *b = hfl_safetensors_encode(spec, p, len, err);
    REQUIRE_MSG(*b, "%s", err);
    *hl = 0;
    for (int i = 0; i < 8; i++) *hl |= (uint64_t)(*b)[i] << (8 * i);
    cJSON *h = cJSON_ParseWithLength((const char *)*b + 8, *hl);
    REQUIRE(cJSON_IsObject(h));
    return h;
}

static void test_layout(void) {
    char err[HFL_ERR_LEN];
    float *p = hfl_malloc(sizeof(float) * mlp.n_params);
    hfl_model_init_params(&mlp, p, 5);
    size_t len;
    uint8_t *b;
    uint64_t hl;
    cJSON *h = encode_parse(&mlp, p, &b, &len, &hl);
    CHECK(hl % 8 == 0 && len == 8 + hl + 796840 && mlp.n_params == 199210);
    CHECK(memcmp(b + 8 + hl, p, 796840) == 0);
    static const entry want[6] = {{"layers.0.weight", {200, 784}, 2, 0, 627200},      {"layers.0.bias", {200, 0}, 1, 627200, 628000},
                 {"layers.2.weight", {200, 200}, 2, 628000, 788000}, {"layers.2.bias", {200, 0}, 1, 788000, 788800},
                 {"layers.4.weight", {10, 200}, 2, 788800, 796800},  {"layers.4.bias", {10, 0}, 1, 796800, 796840}};
    check_entries(h, want, 6);
    CHECK(cJSON_GetArraySize(h) == 7); /* six tensors and the metadata */
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
    const char *spec = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "hfl_model"));
    hfl_model_spec back;
    CHECK(spec && hfl_model_spec_from_json(spec, strlen(spec), &back, err) == 0 && back.n_params == mlp.n_params);
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "format")), "pt"));
    cJSON_Delete(h);

    float *q = hfl_calloc(mlp.n_params, sizeof(float));
    CHECK(hfl_safetensors_decode(b, len, &mlp, q, err) == 0 && memcmp(p, q, sizeof(float) * mlp.n_params) == 0);
    /* the file on disk, and a model it does not fit */
    char path[] = "/tmp/hfl-test-st-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    memset(q, 0, sizeof(float) * mlp.n_params);
    CHECK(hfl_safetensors_save(path, &mlp, p, err) == 0 && hfl_safetensors_load(path, &mlp, q, err) == 0 &&
          memcmp(p, q, sizeof(float) * mlp.n_params) == 0);
    hfl_model_spec cnn;
    CHECK(hfl_model_builtin("cnn", &cnn, err) == 0);
    float *c = hfl_calloc(cnn.n_params, sizeof(float));
    CHECK(hfl_safetensors_load(path, &cnn, c, err) == -1 && !strncmp(err, path, strlen(path)) &&
          strstr(err, "where model cnn has [32, 1, 5, 5]"));
    printf("refused: mlp's file as cnn: %s\n", err);
    CHECK(hfl_safetensors_load("/nonexistent/model.safetensors", &mlp, q, err) == -1 &&
          strstr(err, "/nonexistent/model.safetensors"));
    /* cnn: conv weights [out, in, k, k] */
    float *cp = hfl_malloc(sizeof(float) * cnn.n_params);
    hfl_model_init_params(&cnn, cp, 6);
    uint8_t *cb = hfl_safetensors_encode(&cnn, cp, &len, err);
    REQUIRE(cb);
    hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)cb[i] << (8 * i);
    h = cJSON_ParseWithLength((const char *)cb + 8, hl);
    const cJSON *w0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, "layers.0.weight"), "shape");
    CHECK(cJSON_GetArraySize(w0) == 4 && cJSON_GetArrayItem(w0, 0)->valuedouble == cnn.layers[0].units &&
          cJSON_GetArrayItem(w0, 1)->valuedouble == cnn.input.c &&
          cJSON_GetArrayItem(w0, 2)->valuedouble == cnn.layers[0].kernel &&
          cJSON_GetArrayItem(w0, 3)->valuedouble == cnn.layers[0].kernel);
    cJSON_Delete(h);
    CHECK(hfl_safetensors_decode(cb, len, &cnn, c, err) == 0 && memcmp(cp, c, sizeof(float) * cnn.n_params) == 0);
    unlink(path);
    free(b), free(p), free(q), free(c), free(cp), free(cb);
}

static void test_faults(void) {
    const size_t D = 796840;
    uint8_t small[7] = {0};
    refuse("7 bytes", small, sizeof small, "too short");
    size_t len;
    char *good = mlp_header(NULL, NULL, NULL);
    uint8_t *b = file_of(good, D, &len);
    b[0] = 0xff, b[1] = 0xff, b[2] = 0xff; /* header length 16 MB: past the file */
    refuse("header length past the file", b, len, "does not fit the file");
    free(b);
    refuse_header("not JSON", "{\"layers.0.weight\": [", D, "not JSON");
    refuse_header("not an object", "[1, 2, 3]", D, "not a JSON object");
    char junk[8300];
    snprintf(junk, sizeof junk, "%s x", good);
    refuse_header("junk after the JSON", junk, D, "other than space padding");
    char *h;
    /* a well-formed F16 tensor in the bias's 800 bytes: the container is valid, the model is not */
    h = mlp_header("layers.0.bias", "{\"dtype\":\"F16\",\"shape\":[400],\"data_offsets\":[627200,628000]}", NULL);
    refuse_header("dtype F16", h, D, "dtype F16; hfl reads F32");
    free(h);
    h = mlp_header("layers.0.bias", "{\"dtype\":\"F31\",\"shape\":[200],\"data_offsets\":[627200,628000]}", NULL);
    refuse_header("undefined dtype", h, D, "dtype 'F31', which safetensors does not define");
    free(h);
    h = mlp_header("layers.4.bias", "{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":[796800,796880]}", NULL);
    refuse_header("offsets past the buffer", h, D, "outside the 796840-byte data buffer");
    free(h);
    h = mlp_header("layers.0.bias", "{\"dtype\":\"F32\",\"shape\":[200],\"data_offsets\":[627196,627996]}", NULL);
    refuse_header("overlap", h, D, "overlap");
    free(h);
    h = mlp_header("layers.0.bias", "{\"dtype\":\"F32\",\"shape\":[199],\"data_offsets\":[627200,627996]}", NULL);
    refuse_header("a hole", h, D, "belong to no tensor");
    free(h);
    h = mlp_header("layers.0.bias", "{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[627200,628000]}", NULL);
    refuse_header("bytes against shape", h, D, "800 bytes for a shape of 100 F32 values");
    free(h);
    h = mlp_header("layers.0.weight", "{\"dtype\":\"F32\",\"shape\":[784,200],\"data_offsets\":[0,627200]}", NULL);
    refuse_header("transposed weight", h, D, "shape [784, 200] where model mlp has [200, 784]");
    free(h);
    h = mlp_header("layers.4.bias", NULL, NULL);
    refuse_header("missing tensor", h, D - 40, "'layers.4.bias' is missing");
    free(h);
    h = mlp_header(NULL, NULL, ",\"layers.6.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[796840,796844]}");
    refuse_header("extra tensor", h, D + 4, "'layers.6.weight' is not in model mlp");
    free(h);
    h = mlp_header(NULL, NULL, ",\"layers.4.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[796840,796844]}");
    refuse_header("a name twice", h, D + 4, "appears twice");
    free(h);
    char twice[8400];
    snprintf(twice, sizeof twice, "{\"__metadata__\":{},\"__metadata__\":{}%s", strchr(good, ',') + 0);
    refuse_header("metadata twice", twice, D, "__metadata__ appears twice");
    char meta[8300];
    snprintf(meta, sizeof meta, "{\"__metadata__\":{\"format\":3}%s", strchr(good, ','));
    refuse_header("metadata not a string", meta, D, "__metadata__ 'format' is not a string");
    /* and the good header over the right bytes is taken */
    b = file_of(good, D, &len);
    float *p = hfl_malloc(sizeof(float) * mlp.n_params);
    char err[HFL_ERR_LEN];
    CHECK_MSG(hfl_safetensors_decode(b, len, &mlp, p, err) == 0, "hand-written header: %s", err);
    free(b), free(p), free(good);
}

/* A 2-block GPT (V 32, T 8, C 16): nanoGPT's names, [out, in] matrices. */
static void test_lm_layout(void) {
    static const char js[] = "{\"name\": \"gpt-st\", \"input\": [8], \"layers\": ["
                             "{\"type\": \"embedding\", \"vocab\": 32, \"width\": 16},"
                             "{\"type\": \"gpt_block\", \"heads\": 2}, {\"type\": \"gpt_block\", \"heads\": 2},"
                             "{\"type\": \"lm_head\"}]}";
    char err[HFL_ERR_LEN];
    hfl_model_spec gpt;
    REQUIRE(hfl_model_spec_from_json(js, strlen(js), &gpt, err) == 0);
    CHECK(gpt.n_params == 7232);
    float *p = hfl_malloc(sizeof(float) * gpt.n_params), *q = hfl_calloc(gpt.n_params, sizeof(float));
    hfl_model_init_params(&gpt, p, 3);
    size_t len;
    uint8_t *b;
    uint64_t hl;
    cJSON *h = encode_parse(&gpt, p, &b, &len, &hl);
    CHECK(len == 8 + hl + 4 * 7232 && memcmp(b + 8 + hl, p, 4 * 7232) == 0);
    static const entry want[7] = {{"transformer.wte.weight", {32, 16}, 2, 0, 2048},
                 {"transformer.wpe.weight", {8, 16}, 2, 2048, 2560},
                 {"transformer.h.0.ln_1.weight", {16, 0}, 1, 2560, 2624},
                 {"transformer.h.0.attn.c_attn.weight", {48, 16}, 2, 2688, 5760},
                 {"transformer.h.1.mlp.c_proj.weight", {16, 64}, 2, 24640, 28736},
                 {"transformer.ln_f.weight", {16, 0}, 1, 28800, 28864},
                 {"transformer.ln_f.bias", {16, 0}, 1, 28864, 28928}};
    check_entries(h, want, 7);
    CHECK(cJSON_GetArraySize(h) == 29); /* 2 + 2 x 12 + 2 tensors and the metadata */
    cJSON_Delete(h);
    CHECK(hfl_safetensors_decode(b, len, &gpt, q, err) == 0 && memcmp(p, q, sizeof(float) * gpt.n_params) == 0);
    CHECK(hfl_safetensors_decode(b, len, &mlp, q, err) == -1 && strstr(err, "transformer.") && !strchr(err, '\n'));
    printf("refused: a GPT's file as mlp: %s\n", err);
    free(b), free(p), free(q);
}

/* hfl_safetensors_save writes the file in parts, straight from the
 * parameters: its bytes are the encoded buffer's (checked above against
 * the layout worked out by hand), and nothing is left beside it. */
static void test_save_streamed(void) {
    char err[HFL_ERR_LEN], path[] = "/tmp/hfl-test-st-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    float *p = hfl_malloc(sizeof(float) * mlp.n_params);
    hfl_model_init_params(&mlp, p, 9);
    size_t len, got_len = 0;
    uint8_t *want = hfl_safetensors_encode(&mlp, p, &len, err);
    REQUIRE_MSG(want && hfl_safetensors_save(path, &mlp, p, err) == 0, "%s", err);
    char *got = hfl_read_file(path, &got_len, err);
    CHECK_MSG(got && got_len == len && !memcmp(got, want, len), "saved %zu bytes, encoded %zu", got_len, len);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    CHECK(access(tmp, F_OK) != 0);
    /* a directory that is not there: one line naming it */
    CHECK(hfl_safetensors_save("/nonexistent-dir/m.safetensors", &mlp, p, err) == -1 && strstr(err, "/nonexistent-dir") &&
          !strchr(err, '\n'));
    unlink(path);
    free(got), free(want), free(p);
}

/* hfl_safetensors_load streams: the cnn's 4.8 MB file back bit for bit,
 * with the peak resident set grown by under a quarter of the file (reading
 * it whole, as before, grows it by the whole file: the data buffer is
 * touched by read()), and one line for every way the file can be short. */
static void test_load_streamed(void) {
    char err[HFL_ERR_LEN], path[] = "/tmp/hfl-test-st-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    hfl_model_spec cnn;
    REQUIRE(hfl_model_builtin("cnn", &cnn, err) == 0);
    size_t bytes = sizeof(float) * cnn.n_params, len = 0;
    float *p = hfl_malloc(bytes), *q = hfl_malloc(bytes);
    hfl_model_init_params(&cnn, p, 5);
    memset(q, 0xff, bytes); /* resident before the window: only the load's own memory grows it */
    REQUIRE_MSG(hfl_safetensors_save(path, &cnn, p, err) == 0, "%s", err);
    char *file = hfl_read_file(path, &len, err);
    REQUIRE(file && len > bytes);
    free(file);
    uint64_t rss0 = 0, peak = 0;
    int metered = hfl_mem_reset_peak(err) == 0 && hfl_mem_read(&rss0, NULL, err) == 0;
    CHECK_MSG(hfl_safetensors_load(path, &cnn, q, err) == 0, "%s", err);
    if (metered && hfl_mem_read(NULL, &peak, err) == 0)
        CHECK_MSG(peak - rss0 < len / 4, "loading a %zu-byte file grew the peak resident set by %llu bytes", len,
                  (unsigned long long)(peak - rss0));
    else
        fprintf(stderr, "test_safetensors: no memory meter here (%s): the growth is not checked\n", err);
    CHECK(!memcmp(p, q, bytes));
    /* the file shrinks after its header was read: the tensor's read says so */
    hfl_st_file f;
    REQUIRE_MSG(hfl_st_open(path, &f, err) == 0, "%s", err);
    REQUIRE(truncate(path, (off_t)(len - 4)) == 0);
    const hfl_st_tensor *last = &f.t[0];
    for (int i = 1; i < f.n; i++)
        if (f.t[i].offset > last->offset) last = &f.t[i];
    CHECK_MSG(hfl_st_read(&f, last, q, err) == -1 && strstr(err, "the file ends early") && !strchr(err, '\n'), "%s",
              err);
    hfl_st_free(&f);
    /* truncated on disk before the load: the header's offsets are past the data */
    memset(q, 0xff, bytes);
    CHECK_MSG(hfl_safetensors_load(path, &cnn, q, err) == -1 && !strncmp(err, path, strlen(path)) &&
                  strstr(err, "data buffer") && !strchr(err, '\n'),
              "%s", err);
    float ff;
    memset(&ff, 0xff, sizeof ff);
    int untouched = 1;
    for (size_t i = 0; i < cnn.n_params; i++) untouched &= !memcmp(&q[i], &ff, sizeof ff);
    CHECK(untouched);
    REQUIRE(truncate(path, 5) == 0);
    CHECK_MSG(hfl_safetensors_load(path, &cnn, q, err) == -1 && strstr(err, "too short") && !strchr(err, '\n'), "%s",
              err);
    CHECK_MSG(hfl_safetensors_load("/tmp", &cnn, q, err) == -1 && strstr(err, "not a regular file"), "%s", err);
    unlink(path);
    free(p), free(q);
}

static const check_case cases[] = {
    {"layout", test_layout},
    {"save_streamed", test_save_streamed},
    {"load_streamed", test_load_streamed},
    {"lm_layout", test_lm_layout},
    {"faults", test_faults},
};

int main(int argc, char **argv) {
    char err[HFL_ERR_LEN];
    REQUIRE(hfl_model_builtin("mlp", &mlp, err) == 0);
    return check_run("test_safetensors", cases, CHECK_CASES(cases), argc, argv);
}
