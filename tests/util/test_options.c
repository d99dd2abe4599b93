/* test_options.c: an options table read into a struct (util/options.h).
 *
 * Each kind reads its value into its field within its bounds, defaults are
 * set before the command line, --config's file comes before it, a bad value
 * is one line naming the option, --help pads and indents as written here, and
 * --print-config shows each kind as the JSON written here (null for 0 where
 * zero_null says so). Every expectation is a literal, not the code's output. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"
#include "util/options.h"
#include "util/util.h"

typedef struct {
    int quiet;
    char name[8];
    const char *file;
    int rounds;
    int64_t seed;
    double lr;
    uint64_t budget;
    char device[8];
    int twice; /* custom: the value times two */
    int batch; /* zero_null */
} test_opts;

#define AT(field) offsetof(test_opts, field), sizeof(((test_opts *)0)->field)

static int set_twice(void *o, const char *s, char *e) {
    if (strcmp(s, "1") != 0 && strcmp(s, "2") != 0) return hfl_errf(e, "'%s': use 1 or 2", s);
    ((test_opts *)o)->twice = 2 * atoi(s);
    return 0;
}
static cJSON *show_twice(const void *o) { return cJSON_CreateNumber(((const test_opts *)o)->twice / 2); }

static const hfl_option rows[] = {
    {"quiet", NULL, HFL_OPT_FLAG, AT(quiet), 0, 0, NULL, .help = "no output"},
    {"name", "NAME", HFL_OPT_STR, AT(name), 0, 0, "anna", .help = "a name\nof at most 7 bytes"},
    {"file", "FILE", HFL_OPT_PTR, AT(file), 0, 0, NULL, .help = "a file"},
    {"rounds", "N", HFL_OPT_INT, AT(rounds), 1, 100, "10", .help = "rounds"},
    {"seed", "S", HFL_OPT_INT, AT(seed), 0, 1e12, "5", .help = "seed"},
    {"lr", "LR", HFL_OPT_DOUBLE, AT(lr), 0, 1, "0.5", .help = "rate"},
    {"memory-budget", "SIZE", HFL_OPT_SIZE, AT(budget), 0, 0, NULL, .help = "bytes", .zero_null = 1},
    {"device", "D", HFL_OPT_CHOICE, AT(device), 0, 0, "auto", .help = "where", .choices = "auto|cpu|cuda"},
    {"twice", "T", HFL_OPT_CUSTOM, AT(twice), 0, 0, "1", .help = "one or two", .set = set_twice, .show = show_twice},
    {"batch", "B", HFL_OPT_INT, AT(batch), 1, 64, NULL, .help = "batch", .zero_null = 1},
    {"config", "FILE", HFL_OPT_CONFIG, 0, 0, 0, 0, NULL, .help = "options from FILE"},
    {"print-config", NULL, HFL_OPT_PRINT, 0, 0, 0, 0, NULL, .help = "print them"},
    {"help", NULL, HFL_OPT_HELP, 0, 0, 0, 0, NULL, .help = "this text"},
    {0}};

static const hfl_options prog = {"hfl-test", "usage: hfl-test [options]\n", "end\n", 16, rows};

static char **parsed; /* the arguments as the last parse left them (expanded, permuted) */

/* Parses the NULL-terminated args into *o (zeroed first); returns the parser's result. */
static int parse(test_opts *o, char **args, int *first, int *print, char *err) {
    int argc = 0;
    while (args[argc]) argc++;
    char **argv = args;
    memset(o, 0, sizeof *o);
    err[0] = 0;
    int rc = hfl_options_parse(&prog, &argc, &argv, o, first, print, err);
    parsed = argv;
    return rc;
}

/* Expects parse to fail with exactly want. */
static void expect_error(int line, char **args, const char *want) {
    test_opts o;
    char err[HFL_ERR_LEN];
    int first, print;
    CHECK_MSG(parse(&o, args, &first, &print, err) == -1, "line %d: parsed, want '%s'", line, want);
    CHECK_MSG(!strcmp(err, want), "line %d: error '%s', want '%s'", line, err, want);
}

static void test_defaults_and_values(void) {
    test_opts o;
    char err[HFL_ERR_LEN];
    int first, print;
    char *none[] = {"hfl-test", NULL};
    REQUIRE(parse(&o, none, &first, &print, err) == 0);
    CHECK(!o.quiet && !strcmp(o.name, "anna") && o.file == NULL && o.rounds == 10 && o.seed == 5 && o.lr == 0.5);
    CHECK(o.budget == 0 && !strcmp(o.device, "auto") && o.twice == 2 && o.batch == 0 && first == 1 && !print);

    char *all[] = {"hfl-test", "--quiet", "--name", "barthol", "--file=x.json", "--rounds", "100", "op",
                   "--seed=1000000000000", "--lr", "0", "--memory-budget", "1.5G", "--device", "cuda",
                   "--twice", "2", "--batch=64", "--print-config", NULL};
    REQUIRE(parse(&o, all, &first, &print, err) == 0);
    CHECK(o.quiet == 1 && !strcmp(o.name, "barthol") && !strcmp(o.file, "x.json") && o.rounds == 100);
    CHECK(o.seed == 1000000000000LL && o.lr == 0 && o.budget == 1610612736ULL && !strcmp(o.device, "cuda"));
    CHECK(o.twice == 4 && o.batch == 64 && print == 1);
    CHECK_MSG(first == 18 && !strcmp(parsed[first], "op"), "the operand moved to the end: first %d", first);

    char *prefix[] = {"hfl-test", "--roun=3", "--memory=1K", NULL}; /* getopt_long's unique prefixes */
    REQUIRE(parse(&o, prefix, &first, &print, err) == 0);
    CHECK(o.rounds == 3 && o.budget == 1024);
}

static void test_errors(void) {
    expect_error(__LINE__, (char *[]){"hfl-test", "--rounds", "0", NULL}, "--rounds: 0 out of range [1, 100]");
    /* cut to fit, a path or a host would be another one */
    expect_error(__LINE__, (char *[]){"hfl-test", "--name", "bartholomew", NULL},
                 "--name: 11 bytes, more than its 7");
    expect_error(__LINE__, (char *[]){"hfl-test", "--rounds=ten", NULL}, "--rounds: 'ten' is not an integer");
    expect_error(__LINE__, (char *[]){"hfl-test", "--seed", "-1", NULL}, "--seed: -1 out of range [0, 1000000000000]");
    expect_error(__LINE__, (char *[]){"hfl-test", "--lr", "1.5", NULL}, "--lr: 1.5 out of range [0, 1]");
    expect_error(__LINE__, (char *[]){"hfl-test", "--lr", "nan", NULL}, "--lr: 'nan' is not a number");
    expect_error(__LINE__, (char *[]){"hfl-test", "--memory-budget", "lots", NULL}, "--memory-budget: bad size 'lots'");
    expect_error(__LINE__, (char *[]){"hfl-test", "--device", "gpu", NULL}, "unknown device 'gpu' (auto, cpu, cuda)");
    expect_error(__LINE__, (char *[]){"hfl-test", "--device", "cp", NULL}, "unknown device 'cp' (auto, cpu, cuda)");
    expect_error(__LINE__, (char *[]){"hfl-test", "--twice", "3", NULL}, "--twice: '3': use 1 or 2");
    expect_error(__LINE__, (char *[]){"hfl-test", "--rounds", NULL}, "option '--rounds' needs a value (see --help)");
    expect_error(__LINE__, (char *[]){"hfl-test", "--colour", NULL}, "unknown option '--colour' (see --help)");
    expect_error(__LINE__, (char *[]){"hfl-test", "--quiet=1", NULL}, "unknown option '--quiet=1' (see --help)");
}

/* What f (a tmpfile) holds, in buf. */
static const char *slurp(FILE *f, char *buf, size_t cap) {
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    return buf;
}

static void test_help(void) {
    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    hfl_options_help(&prog, f);
    char got[2048];
    const char *want = "usage: hfl-test [options]\n"
                       "  --quiet       no output\n"
                       "  --name NAME   a name\n"
                       "                of at most 7 bytes\n"
                       "  --file FILE   a file\n"
                       "  --rounds N    rounds\n"
                       "  --seed S      seed\n"
                       "  --lr LR       rate\n"
                       "  --memory-budget SIZE bytes\n"
                       "  --device D    where\n"
                       "  --twice T     one or two\n"
                       "  --batch B     batch\n"
                       "  --config FILE options from FILE\n"
                       "  --print-config print them\n"
                       "  --help        this text\n"
                       "end\n";
    CHECK_MSG(!strcmp(slurp(f, got, sizeof got), want), "--help:\n%s\nwant:\n%s", got, want);
    fclose(f);
}

/* hfl_options_print's JSON (it prints to stdout), parsed. */
static cJSON *printed(const test_opts *o) {
    fflush(stdout);
    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    int saved = dup(1);
    REQUIRE(saved >= 0 && dup2(fileno(f), 1) == 1);
    hfl_options_print(&prog, o);
    fflush(stdout);
    REQUIRE(dup2(saved, 1) == 1);
    close(saved);
    char buf[2048];
    cJSON *j = cJSON_Parse(slurp(f, buf, sizeof buf));
    fclose(f);
    REQUIRE(j != NULL);
    return j;
}

static void test_print(void) {
    test_opts o = {.quiet = 1, .name = "bo", .rounds = 7, .seed = 1000000000000LL, .lr = 0.25, .budget = 0,
                   .device = "cpu", .twice = 4, .batch = 0};
    cJSON *j = printed(&o);
    char *s = cJSON_PrintUnformatted(j);
    const char *want = "{\"quiet\":true,\"name\":\"bo\",\"file\":null,\"rounds\":7,\"seed\":1000000000000,\"lr\":0.25,"
                       "\"memory-budget\":null,\"device\":\"cpu\",\"twice\":2,\"batch\":null}";
    CHECK_MSG(!strcmp(s, want), "--print-config %s, want %s", s, want);
    free(s);
    cJSON_Delete(j);
    o.batch = 3, o.budget = 4096, o.name[0] = 0, o.file = "f";
    j = printed(&o);
    s = cJSON_PrintUnformatted(j);
    CHECK_MSG(strstr(s, "\"name\":null,\"file\":\"f\"") && strstr(s, "\"memory-budget\":4096") &&
              strstr(s, "\"batch\":3}"), "--print-config %s", s);
    free(s);
    cJSON_Delete(j);
}

static void test_config_file(void) {
    char dir[] = "/tmp/hfl-options-XXXXXX", path[64];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/c.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs("{\"rounds\": 20, \"lr\": 0.125, \"quiet\": true, \"device\": \"cpu\"}", f);
    fclose(f);
    test_opts o;
    char err[HFL_ERR_LEN];
    int first, print;
    char *args[] = {"hfl-test", "--rounds", "30", "--config", path, NULL};
    REQUIRE(parse(&o, args, &first, &print, err) == 0);
    CHECK_MSG(o.rounds == 30 && o.lr == 0.125 && o.quiet && !strcmp(o.device, "cpu"),
              "the file's values, the command line's rounds: rounds %d lr %g", o.rounds, o.lr);
    f = fopen(path, "w");
    fputs("{\"colour\": 1}", f);
    fclose(f);
    char want[200];
    snprintf(want, sizeof want, "--config %s: 'colour' is not an option of hfl-test (see hfl-test --help)", path);
    expect_error(__LINE__, (char *[]){"hfl-test", "--config", path, NULL}, want);
    unlink(path);
    rmdir(dir);
}

static const check_case cases[] = {
    {"defaults_and_values", test_defaults_and_values},
    {"errors", test_errors},
    {"help", test_help},
    {"print", test_print},
    {"config_file", test_config_file},
};

int main(int argc, char **argv) {
    return check_run("test_options", cases, CHECK_CASES(cases), argc, argv);
}
