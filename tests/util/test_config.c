/* test_config.c: --config FILE expanded into arguments (util/config.h).
 *
 * The file's options come before the command line's, so getopt_long sees the
 * command line last and it wins; --config and its file leave the arguments in
 * every spelling (--config F, --config=F, an abbreviation) but not as another
 * option's value or after "--"; true is a flag, false nothing, numbers read
 * back exactly; every bad file or value is one line naming the file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"
#include "util/config.h"
#include "util/util.h"

enum { O_ROUNDS = 256, O_CODEC, O_LR, O_INSECURE, O_QUIET, O_NAME, O_CONFIG, O_PRINTCFG };
static const struct option opts[] = {
    {"rounds", 1, 0, O_ROUNDS},     {"codec", 1, 0, O_CODEC}, {"lr", 1, 0, O_LR},
    {"insecure", 0, 0, O_INSECURE}, {"quiet", 0, 0, O_QUIET}, {"name", 1, 0, O_NAME},
    {"config", 1, 0, O_CONFIG},     {"print-config", 0, 0, O_PRINTCFG}, {0, 0, 0, 0}};

static char dir[64], path[128];

/* Writes text (len bytes) to dir/config.json; returns its path. */
static const char *write_config_n(const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    REQUIRE(f != NULL);
    REQUIRE(fwrite(text, 1, len, f) == len);
    fclose(f);
    return path;
}
static const char *write_config(const char *text) { return write_config_n(text, strlen(text)); }

/* Expands args[0..] (NULL-terminated) and compares with want[0..] (NULL-terminated). */
static void expect_args(int line, char **args, const char *const *want) {
    int argc = 0;
    while (args[argc]) argc++;
    hfl_config_args a;
    char err[HFL_ERR_LEN] = "";
    if (!CHECK_MSG(hfl_config_expand("hfl-test", argc, args, opts, &a, err) == 0, "line %d: %s", line, err)) return;
    int n = 0;
    while (want[n]) n++;
    CHECK_MSG(a.argc == n, "line %d: %d arguments, want %d", line, a.argc, n);
    for (int i = 0; i < n && i < a.argc; i++)
        CHECK_MSG(!strcmp(a.argv[i], want[i]), "line %d: argv[%d] '%s', want '%s'", line, i, a.argv[i], want[i]);
    CHECK_MSG(a.argv[a.argc] == NULL, "line %d: argv not NULL-terminated", line);
    hfl_config_free(&a);
}

/* Expands args and expects a failure whose message is exactly want. */
static void expect_error(int line, char **args, const char *want) {
    int argc = 0;
    while (args[argc]) argc++;
    hfl_config_args a;
    char err[HFL_ERR_LEN] = "";
    int rc = hfl_config_expand("hfl-test", argc, args, opts, &a, err);
    CHECK_MSG(rc == -1, "line %d: expanded, want error '%s'", line, want);
    CHECK_MSG(!strcmp(err, want), "line %d: error '%s', want '%s'", line, err, want);
    CHECK_MSG(a.argv == NULL && a.argc == 0, "line %d: arguments left after an error", line);
    if (rc == 0) hfl_config_free(&a);
}

static void test_no_config(void) {
    char *args[] = {"prog", "--rounds", "3", "pos", NULL};
    expect_args(__LINE__, args, (const char *const[]){"prog", "--rounds", "3", "pos", NULL});
}

/* The file's options first, then the command line's less --config FILE. */
static void test_order(void) {
    write_config("{\"rounds\": 5, \"codec\": \"int8\", \"insecure\": true, \"quiet\": false}");
    char *args[] = {"prog", "--rounds", "7", "--config", path, "pos", NULL};
    expect_args(__LINE__, args,
                (const char *const[]){"prog", "--rounds=5", "--codec=int8", "--insecure", "--rounds", "7", "pos", NULL});
    char eq[160];
    snprintf(eq, sizeof eq, "--config=%s", path);
    char *args2[] = {"prog", eq, "--codec=fp16", NULL};
    expect_args(__LINE__, args2, (const char *const[]){"prog", "--rounds=5", "--codec=int8", "--insecure", "--codec=fp16", NULL});
    char *args3[] = {"prog", "--conf", path, NULL}; /* getopt_long takes a unique prefix */
    expect_args(__LINE__, args3, (const char *const[]){"prog", "--rounds=5", "--codec=int8", "--insecure", NULL});
    /* null is "not set" (--print-config prints it so), for values and flags alike */
    write_config("{\"rounds\": null, \"codec\": \"int4\", \"quiet\": null}");
    char *args4[] = {"prog", "--config", path, NULL};
    expect_args(__LINE__, args4, (const char *const[]){"prog", "--codec=int4", NULL});
}

/* What getopt_long makes of the expansion: the command line wins. */
static void test_command_line_wins(void) {
    write_config("{\"rounds\": 5, \"codec\": \"int8\", \"insecure\": true, \"name\": \"file\"}");
    char *args[] = {"prog", "--config", path, "--rounds", "9", "--name=cli", NULL};
    hfl_config_args a;
    char err[HFL_ERR_LEN];
    if (!CHECK_MSG(hfl_config_expand("hfl-test", 6, args, opts, &a, err) == 0, "%s", err)) return;
    const char *rounds = NULL, *codec = NULL, *name = NULL;
    int insecure = 0, c;
    optind = 0, opterr = 0;
    while ((c = getopt_long(a.argc, a.argv, ":", opts, NULL)) != -1) {
        if (c == O_ROUNDS) rounds = optarg;
        if (c == O_CODEC) codec = optarg;
        if (c == O_NAME) name = optarg;
        insecure |= c == O_INSECURE;
        CHECK_MSG(c >= O_ROUNDS && c <= O_NAME, "getopt_long returned %d", c);
    }
    CHECK(rounds && !strcmp(rounds, "9"));
    CHECK(name && !strcmp(name, "cli"));
    CHECK(codec && !strcmp(codec, "int8"));
    CHECK(insecure);
    CHECK(optind == a.argc);
    hfl_config_free(&a);
}

/* --config as another option's value, or after "--", is not --config. */
static void test_not_config(void) {
    char *args[] = {"prog", "--name", "--config", "--", "--config", "x", NULL};
    expect_args(__LINE__, args, (const char *const[]){"prog", "--name", "--config", "--", "--config", "x", NULL});
    char *args2[] = {"prog", "--co", "x", NULL}; /* ambiguous (codec, config): left to getopt_long */
    expect_args(__LINE__, args2, (const char *const[]){"prog", "--co", "x", NULL});
}

static void test_numbers(void) {
    write_config("{\"rounds\": 5, \"lr\": 0.05, \"codec\": -3, \"name\": 2147483648, \"quiet\": true}");
    char *args[] = {"prog", "--config", path, NULL};
    expect_args(__LINE__, args,
                (const char *const[]){"prog", "--rounds=5", "--lr=0.05", "--codec=-3", "--name=2147483648", "--quiet", NULL});
    static const struct {
        double d;
        const char *s;
    } cases[] = {{0, "0"}, {1e15, "1000000000000000"}, {2.5, "2.5"}, {1e-7, "1e-07"},
                 {0.1 + 0.2, "0.30000000000000004"}, {1e300, "1e+300"}, {-0.125, "-0.125"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[40];
        hfl_config_number(cases[i].d, out, sizeof out);
        CHECK_MSG(!strcmp(out, cases[i].s), "%.17g gave '%s', want '%s'", cases[i].d, out, cases[i].s);
    }
}

/* One bad file or value: the exact message. */
static void bad(int line, const char *text, const char *tail) {
    write_config(text);
    char *args[] = {"prog", "--config", path, NULL};
    char want[HFL_ERR_LEN];
    snprintf(want, sizeof want, "--config %s: %s", path, tail);
    expect_error(line, args, want);
}

static void test_errors(void) {
    bad(__LINE__, "{\"rounds\": 5,\n \"lr\": }", "not JSON (line 2)");
    bad(__LINE__, "", "not JSON (line 1)");
    bad(__LINE__, "{\"rounds\": 5} trailing", "not JSON (line 1)");
    bad(__LINE__, "[1, 2]", "not a JSON object of long options, e.g. {\"rounds\": 5}");
    bad(__LINE__, "\"rounds\"", "not a JSON object of long options, e.g. {\"rounds\": 5}");
    bad(__LINE__, "{\"colour\": 1}", "'colour' is not an option of hfl-test (see hfl-test --help)");
    bad(__LINE__, "{\"round\": 1}", "'round' is not an option of hfl-test (see hfl-test --help)"); /* no prefixes */
    bad(__LINE__, "{\"a\\nb\": 1}", "'a?b' is not an option of hfl-test (see hfl-test --help)");
    bad(__LINE__, "{\"config\": \"other.json\"}", "\"config\" cannot be set in a config file");
    bad(__LINE__, "{\"rounds\": [1]}", "'rounds' must be a string or a number, not an array");
    bad(__LINE__, "{\"rounds\": {}}", "'rounds' must be a string or a number, not an object");
    bad(__LINE__, "{\"rounds\": true}", "'rounds' takes a value, not true");
    bad(__LINE__, "{\"rounds\": false}", "'rounds' takes a value, not false");
    bad(__LINE__, "{\"rounds\": 1e999}", "'rounds' is not a finite number");
    bad(__LINE__, "{\"insecure\": \"yes\"}", "'insecure' is a flag: give true or false");
    bad(__LINE__, "{\"insecure\": 1}", "'insecure' is a flag: give true or false");
    write_config_n("{\"rounds\": 5}\0{", 15);
    char *args[] = {"prog", "--config", path, NULL};
    char want[HFL_ERR_LEN];
    snprintf(want, sizeof want, "--config %s: not JSON (line 1)", path);
    expect_error(__LINE__, args, want);
}

static void test_argument_errors(void) {
    char missing[160];
    snprintf(missing, sizeof missing, "%s/none.json", dir);
    char *args[] = {"prog", "--config", missing, NULL};
    char want[HFL_ERR_LEN];
    snprintf(want, sizeof want, "--config: cannot open %s: No such file or directory", missing);
    expect_error(__LINE__, args, want);
    char *no_value[] = {"prog", "--rounds", "3", "--config", NULL};
    expect_error(__LINE__, no_value, "option '--config' needs a value (see --help)");
    write_config("{}");
    char *twice[] = {"prog", "--config", path, "--config", path, NULL};
    expect_error(__LINE__, twice, "--config given twice: use one file");
    char *empty[] = {"prog", "--config", path, NULL};
    expect_args(__LINE__, empty, (const char *const[]){"prog", NULL});
}

/* hfl_config_apply replaces argc/argv for good, and again when called again. */
static void test_apply(void) {
    write_config("{\"rounds\": 2}");
    char *args[] = {"prog", "--config", path, "x", NULL};
    int argc = 4;
    char **argv = args, err[HFL_ERR_LEN];
    CHECK(hfl_config_apply("hfl-test", &argc, &argv, opts, err) == 0);
    CHECK(argc == 3 && !strcmp(argv[1], "--rounds=2") && !strcmp(argv[2], "x") && argv[3] == NULL);
    argc = 4, argv = args;
    CHECK(hfl_config_apply("hfl-test", &argc, &argv, opts, err) == 0 && argc == 3);
}

static const check_case cases[] = {
    {"no_config", test_no_config},
    {"order", test_order},
    {"command_line_wins", test_command_line_wins},
    {"not_config", test_not_config},
    {"numbers", test_numbers},
    {"errors", test_errors},
    {"argument_errors", test_argument_errors},
    {"apply", test_apply},
};

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "/tmp/hfl-config-XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = check_run("test_config", cases, CHECK_CASES(cases), argc, argv);
    unlink(path);
    rmdir(dir);
    return rc;
}
