/* test_spec_json.c: JSON model specs: good specs parse to the expected
 * shapes (with defaults), print back and re-parse to an equal spec, load
 * from a file; and each kind of bad spec is rejected with one line saying
 * what is wrong and, for a layer, which one (exact messages checked). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "tests/check.h"
#include "util/util.h"

static const char *small_cnn =
    "{\"name\": \"small-cnn\", \"input\": [1, 28, 28], \"layers\": ["
    "{\"type\": \"conv2d\", \"out\": 8, \"kernel\": 5, \"pad\": 2}, {\"type\": \"relu\"},"
    "{\"type\": \"maxpool2d\", \"size\": 2}, {\"type\": \"dense\", \"out\": 10}]}";

static int specs_equal(const hfl_model_spec *a, const hfl_model_spec *b) {
    if (strcmp(a->name, b->name) || a->n_layers != b->n_layers || a->n_params != b->n_params ||
        a->in_dim != b->in_dim || a->n_classes != b->n_classes || a->input.c != b->input.c ||
        a->input.h != b->input.h || a->input.w != b->input.w || a->label_rows != b->label_rows)
        return 0;
    for (int l = 0; l < a->n_layers; l++) {
        const hfl_layer *x = &a->layers[l], *y = &b->layers[l];
        if (x->kind != y->kind || x->units != y->units || x->kernel != y->kernel ||
            x->stride != y->stride || x->pad != y->pad || x->in != y->in || x->out != y->out ||
            x->param_off != y->param_off || x->n_params != y->n_params || x->vocab != y->vocab ||
            x->heads != y->heads || x->tie_off != y->tie_off)
            return 0;
    }
    return 1;
}

static void test_good(void) {
    hfl_model_spec s, back;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_model_spec_from_json(small_cnn, strlen(small_cnn), &s, err) == 0);
    CHECK(strcmp(s.name, "small-cnn") == 0 && s.n_layers == 4 && s.n_classes == 10);
    /* conv 8*25 + 8, then 8x14x14 = 1568 features into dense 10 */
    CHECK(s.n_params == 208 + 15690);
    CHECK(s.layers[0].stride == 1 && s.layers[0].pad == 2);  /* stride defaults to 1 */
    CHECK(s.layers[2].kernel == 2 && s.layers[2].stride == 2); /* pool stride defaults to size */
    CHECK(s.layers[3].in == 1568);

    /* Print and parse back: equal. Both built-ins too. */
    char *text = hfl_model_spec_to_json(&s, err);
    CHECK(text != NULL);
    CHECK(hfl_model_spec_from_json(text, strlen(text), &back, err) == 0 && specs_equal(&s, &back));
    free(text);
    const char *names[2] = {"mlp", "cnn"};
    for (int i = 0; i < 2; i++) {
        CHECK(hfl_model_builtin(names[i], &s, err) == 0);
        text = hfl_model_spec_to_json(&s, err);
        CHECK(text && hfl_model_spec_from_json(text, strlen(text), &back, err) == 0);
        CHECK(specs_equal(&s, &back));
        free(text);
    }
    CHECK(hfl_model_builtin("cnn", &s, err) == 0);
    text = hfl_model_spec_to_json(&s, err);
    CHECK(text && strncmp(text, "{\"name\":\"cnn\",\"input\":[1,28,28],\"layers\":[{\"type\":\"conv2d\","
                                "\"out\":32,\"kernel\":5,\"pad\":2,\"stride\":1},{\"type\":\"relu\"},"
                                "{\"type\":\"maxpool2d\",\"size\":2,\"stride\":2}", 131) == 0);
    free(text);

    /* A broken spec does not print. */
    s.layers[3].in = 5;
    CHECK(hfl_model_spec_to_json(&s, err) == NULL);
    CHECK(strcmp(err, "model 'cnn': layer 3: shapes or parameter block inconsistent with the layers before it") == 0);

    /* A flat input, a stride-2 convolution, trailing whitespace, and a length
     * that stops before trailing garbage. */
    const char *flat = "{\"layers\": [{\"out\": 3, \"type\": \"dense\"}], \"input\": [6], \"name\": \"lin\"} \n\t";
    CHECK(hfl_model_spec_from_json(flat, strlen(flat), &s, err) == 0 && s.n_params == 21 && s.in_dim == 6);
    const char *strided = "{\"name\": \"s2\", \"input\": [3, 9, 9], \"layers\": [{\"type\": \"conv2d\", \"out\": 2,"
                          " \"kernel\": 3, \"stride\": 2}, {\"type\": \"dense\", \"out\": 2}]}garbage";
    CHECK(hfl_model_spec_from_json(strided, strlen(strided) - 7, &s, err) == 0);
    CHECK(s.layers[0].out_shape.h == 4 && s.layers[0].out_shape.w == 4 && s.layers[1].in == 32);
}

static void test_load(void) {
    char path[] = "/tmp/hfl_spec_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, small_cnn, strlen(small_cnn)) == (ssize_t)strlen(small_cnn));
    close(fd);
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    CHECK(hfl_model_spec_load(path, &s, err) == 0 && s.n_layers == 4);
    /* Errors start with the path. */
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("{\"name\": 3}", f) >= 0);
    if (f) fclose(f);
    CHECK(hfl_model_spec_load(path, &s, err) == -1);
    char want[HFL_ERR_LEN];
    snprintf(want, sizeof want, "%s: model spec: \"name\" must be a string", path);
    CHECK(strcmp(err, want) == 0);
    unlink(path);
    CHECK(hfl_model_spec_load(path, &s, err) == -1 && strstr(err, path) != NULL);
}

/* Rejected with exactly this message. */
static void rejects(const char *text, const char *want, int line) {
    hfl_model_spec s;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_model_spec_from_json(text, strlen(text), &s, err);
    if (rc != -1 || strcmp(err, want) != 0)
        check_fail(__FILE__, line, "REJECTS", text, "got (%d) \"%s\", want \"%s\"", rc, err, want);
    CHECK(strchr(err, '\n') == NULL);
}

#define REJECTS(text, want) rejects(text, want, __LINE__)
#define HEAD "{\"name\": \"m\", \"input\": [1, 8, 8], \"layers\": ["
#define TAIL ", {\"type\": \"dense\", \"out\": 3}]}"

static void test_bad(void) {
    REJECTS("{\"name\": \"m\",", "model spec: invalid JSON at byte 12");
    REJECTS(HEAD "{\"type\": \"dense\", \"out\": 3}]} x", "model spec: trailing text at byte 75");
    REJECTS("[1, 2]", "model spec: not a JSON object");
    REJECTS("{\"name\": \"m\", \"inputs\": [4]}", "model spec: unknown key \"inputs\"");
    REJECTS("{\"Name\": \"m\"}", "model spec: unknown key \"Name\"");
    REJECTS("{\"name\": \"m\", \"name\": \"n\"}", "model spec: key \"name\" appears twice");
    REJECTS("{\"input\": [4], \"layers\": []}", "model spec: missing \"name\"");
    REJECTS("{\"name\": \"\", \"input\": [4]}", "model spec: name must be 1 to 31 characters, got 0");
    REJECTS("{\"name\": \"a b\", \"input\": [4]}",
            "model spec: name may hold only letters, digits, '.', '_' and '-'");
    REJECTS("{\"name\": \"m\", \"layers\": []}", "model 'm': missing \"input\"");
    REJECTS("{\"name\": \"m\", \"input\": [1, 28]}", "model 'm': \"input\" must be [C, H, W] or [features]");
    REJECTS("{\"name\": \"m\", \"input\": [1, 28.5, 28]}", "model 'm': \"input\" must be an integer, got 28.5");
    REJECTS("{\"name\": \"m\", \"input\": [1, \"28\", 28]}", "model 'm': \"input\" must be an integer");
    REJECTS("{\"name\": \"m\", \"input\": [4]}", "model 'm': missing \"layers\"");
    REJECTS("{\"name\": \"m\", \"input\": [4], \"layers\": {}}", "model 'm': \"layers\" must be an array");
    REJECTS("{\"name\": \"m\", \"input\": [4], \"layers\": []}", "model 'm': 0 layers outside [1, 32]");
    REJECTS("{\"name\": \"m\", \"input\": [0, 28, 28], \"layers\": [{\"type\": \"dense\", \"out\": 3}]}",
            "model 'm': input 0x28x28 outside [1, 65536] per side or over 16777216 features");
    REJECTS("{\"name\": \"m\", \"input\": [4096, 4096, 2], \"layers\": [{\"type\": \"dense\", \"out\": 3}]}",
            "model 'm': input 4096x4096x2 outside [1, 65536] per side or over 16777216 features");
    REJECTS(HEAD "3" TAIL, "model 'm': layer 0: not an object");
    REJECTS(HEAD "{\"out\": 3}" TAIL, "model 'm': layer 0: missing \"type\"");
    REJECTS(HEAD "{\"type\": \"conv3d\"}" TAIL,
            "model 'm': layer 0: unknown type \"conv3d\" (known: dense, relu, conv2d, maxpool2d, embedding, gpt_block, lm_head)");
    REJECTS(HEAD "{\"type\": \"Relu\"}" TAIL,
            "model 'm': layer 0: unknown type \"Relu\" (known: dense, relu, conv2d, maxpool2d, embedding, gpt_block, lm_head)");
    REJECTS(HEAD "{\"type\": \"relu\", \"out\": 3}" TAIL, "model 'm': layer 0 (relu): unknown key \"out\"");
    REJECTS(HEAD "{\"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"strides\": 1}" TAIL,
            "model 'm': layer 0 (conv2d): unknown key \"strides\"");
    REJECTS(HEAD "{\"type\": \"conv2d\", \"out\": 4}" TAIL, "model 'm': layer 0 (conv2d): missing \"kernel\"");
    REJECTS(HEAD "{\"type\": \"conv2d\", \"out\": 0, \"kernel\": 3}" TAIL,
            "model 'm': layer 0 (conv2d): out 0 outside [1, 65536]");
    REJECTS(HEAD "{\"type\": \"conv2d\", \"out\": 1e10, \"kernel\": 3}" TAIL,
            "model 'm': layer 0 (conv2d): \"out\" must be an integer, got 1e+10");
    REJECTS(HEAD "{\"type\": \"conv2d\", \"out\": 4, \"kernel\": 9}" TAIL,
            "model 'm': layer 0 (conv2d): a 9x9 window does not fit the 8x8 input padded by 0");
    REJECTS(HEAD "{\"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"pad\": 3}" TAIL,
            "model 'm': layer 0 (conv2d): pad 3 outside [0, 2]");
    REJECTS(HEAD "{\"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"stride\": 0}" TAIL,
            "model 'm': layer 0 (conv2d): stride 0 outside [1, 32]");
    REJECTS(HEAD "{\"type\": \"relu\"}, {\"type\": \"maxpool2d\", \"size\": 2, \"pad\": 1}" TAIL,
            "model 'm': layer 1 (maxpool2d): unknown key \"pad\"");
    REJECTS(HEAD "{\"type\": \"maxpool2d\", \"size\": 4}, {\"type\": \"maxpool2d\", \"size\": 4}" TAIL,
            "model 'm': layer 1 (maxpool2d): a 4x4 window does not fit the 2x2 input padded by 0");
    REJECTS(HEAD "{\"type\": \"dense\", \"out\": 3}, {\"type\": \"relu\"}]}",
            "model 'm': layer 1 (relu): the last layer must be dense (it gives the logits)");
    REJECTS(HEAD "{\"type\": \"dense\", \"out\": 1}]}",
            "model 'm': layer 0 (dense): the last layer needs at least 2 outputs (classes), got 1");
    REJECTS("{\"name\": \"m\", \"input\": [65536], \"layers\": [{\"type\": \"dense\", \"out\": 65536},"
            " {\"type\": \"dense\", \"out\": 2}]}",
            "model 'm': layer 0 (dense): more than 1073741824 parameters");

    /* 33 layers */
    char many[2048] = "{\"name\": \"m\", \"input\": [4], \"layers\": [";
    for (int i = 0; i < 32; i++) strcat(many, "{\"type\": \"relu\"}, ");
    strcat(many, "{\"type\": \"dense\", \"out\": 2}]}");
    REJECTS(many, "model 'm': 33 layers outside [1, 32]");
}

/* A language model (model.h, LANGUAGE MODELS): sizes from the definitions,
 * the tie, label rows, printing back, and the structural refusals. */
#define GPT(body) "{\"name\": \"g\", \"input\": [8], \"layers\": [" body "]}"
#define EMB "{\"type\": \"embedding\", \"vocab\": 32, \"width\": 16}"
#define BLK "{\"type\": \"gpt_block\", \"heads\": 2}"
#define HD "{\"type\": \"lm_head\"}"
static void test_lm(void) {
    hfl_model_spec s, back;
    char err[HFL_ERR_LEN] = "";
    const char *g = GPT(EMB ", " BLK ", " BLK ", " HD);
    CHECK_MSG(hfl_model_spec_from_json(g, strlen(g), &s, err) == 0, "%s", err);
    /* wte 32x16 + wpe 8x16, two blocks of 12 C^2 + 13 C, ln_f 2C */
    CHECK(s.n_params == 512 + 128 + 2 * (12 * 256 + 13 * 16) + 32);
    CHECK(s.label_rows == 8 && s.n_classes == 32 && s.in_dim == 8);
    CHECK(s.layers[1].in_shape.c == 8 && s.layers[1].in_shape.w == 16 && s.layers[3].out == 8 * 32);
    CHECK(s.layers[3].tie_off == 0 && s.layers[3].vocab == 32 && s.layers[3].n_params == 32);
    char *text = hfl_model_spec_to_json(&s, err);
    CHECK(text && hfl_model_spec_from_json(text, strlen(text), &back, err) == 0 && specs_equal(&s, &back));
    free(text);
    REJECTS(GPT(BLK ", " HD), "model 'g': layer 0 (gpt_block): input must be (T, 1, C) from an "
                              "embedding or a block, got 8x1x1");
    REJECTS(GPT(EMB ", " EMB ", " HD), "model 'g': layer 1 (embedding): an embedding must be layer 0");
    REJECTS(GPT(EMB ", " HD ", " BLK), "model 'g': layer 1 (lm_head): lm_head must be the last layer "
                                       "of a model whose layer 0 is an embedding");
    REJECTS(GPT("{\"type\": \"dense\", \"out\": 4}, " HD),
            "model 'g': layer 1 (lm_head): lm_head must be the last layer of a model whose layer 0 is an embedding");
    REJECTS(GPT(EMB ", " BLK ", {\"type\": \"dense\", \"out\": 4}"),
            "model 'g': layer 2 (dense): a model starting with an embedding must end with lm_head");
    REJECTS(GPT(EMB ", {\"type\": \"gpt_block\", \"heads\": 3}, " HD),
            "model 'g': layer 1 (gpt_block): heads 3 must divide the width 16");
    REJECTS(GPT("{\"type\": \"embedding\", \"vocab\": 1, \"width\": 16}, " HD),
            "model 'g': layer 0 (embedding): vocab 1 outside [2, 65536]");
    REJECTS(GPT("{\"type\": \"embedding\", \"vocab\": 32}, " HD),
            "model 'g': layer 0 (embedding): missing \"width\"");
    REJECTS(GPT(EMB ", {\"type\": \"lm_head\", \"vocab\": 32}"),
            "model 'g': layer 1 (lm_head): unknown key \"vocab\"");
    REJECTS("{\"name\": \"g\", \"input\": [2, 4], \"layers\": [" EMB ", " HD "]}",
            "model 'g': \"input\" must be [C, H, W] or [features]");
    REJECTS("{\"name\": \"g\", \"input\": [8, 2, 1], \"layers\": [" EMB ", " HD "]}",
            "model 'g': layer 0 (embedding): input must be [T] token ids, got 8x2x1");
}

/* The GPT-2-small-sized specs in scenarios/models: GPT-2 small's shape
 * (Radford et al. 2019: 12 layers, C = 768, 12 heads, T = 1024) with the
 * byte vocabulary, counted here by hand: wte 256 C + wpe 1024 C, each block
 * 12 C^2 + 13 C (two layer norms 4C, qkv 3C^2 + 3C, proj C^2 + C, MLP 8C^2 +
 * 5C), ln_f 2C, the head tied to wte: 86,039,040 (GPT-2's own 124M is this
 * plus 50,257 - 256 more embedding rows). The LoRA variant, rank 8, adds
 * r (in + out) on each block's four projections, 16 r C a block, and trains
 * those alone. */
static void test_gpt2_small(void) {
    const char *root = getenv("HFL_SOURCE_ROOT");
    if (!CHECK_MSG(root != NULL, "HFL_SOURCE_ROOT is not set")) return;
    char path[600], err[HFL_ERR_LEN] = "";
    const size_t C = 768, L = 12, r = 8;
    const size_t base = 256 * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C;
    if (!CHECK(base == 86039040)) return;
    hfl_model_spec s;
    snprintf(path, sizeof path, "%s/scenarios/models/gpt2-small.json", root);
    if (CHECK_MSG(hfl_model_spec_load(path, &s, err) == 0, "%s", err)) {
        CHECK_MSG(s.n_params == base, "%zu params, want %zu", (size_t)s.n_params, base);
        CHECK(s.n_trainable == base && s.in_dim == 1024 && s.n_layers == 14 && s.n_classes == 256);
    }
    snprintf(path, sizeof path, "%s/scenarios/models/gpt2-small-lora.json", root);
    if (CHECK_MSG(hfl_model_spec_load(path, &s, err) == 0, "%s", err)) {
        size_t lora = L * 16 * r * C;
        CHECK_MSG(s.n_trainable == lora && s.n_params == base + lora, "%zu params, %zu trainable, want %zu and %zu",
                  (size_t)s.n_params, (size_t)s.n_trainable, base + lora, lora);
    }
}

static const check_case cases[] = {
    {"gpt2_small", test_gpt2_small},
    {"good", test_good},
    {"load", test_load},
    {"bad", test_bad},
    {"lm", test_lm},
};

int main(int argc, char **argv) {
    return check_run("test_spec_json", cases, CHECK_CASES(cases), argc, argv);
}
