/* config.h: --config FILE and --print-config for every hfl program.
 *
 * A config file is one JSON object whose keys are the program's long option
 * names: {"rounds": 5, "codec": "int8", "insecure": true}. It is expanded
 * into command-line arguments placed before the command line's own, so
 * getopt_long sees the file first and an option given on the command line
 * wins:
 *
 *   string  "--key=value"        number  "--key=5", "--key=0.05" (exact)
 *   true    "--key" (a flag)     false   nothing (a flag)
 *   null    nothing (not set: the default stands)
 *
 * so --print-config's output reads back as a config file. Anything else (a
 * key that is not an option of the program, "config" itself, a boolean for
 * an option that takes a value, a string or number for a flag, an array or
 * object) is a one-line error naming the file.
 *
 * --print-config: each program prints its options in effect, defaults
 * included, as one JSON object keyed by long option name (flags true/false,
 * options without a value null) and exits 0 without doing any work
 * (util/options.h prints it from the program's options table). */
#ifndef HFL_CONFIG_H
#define HFL_CONFIG_H

#include <getopt.h>
#include <stddef.h>

typedef struct {
    int argc;
    char **argv; /* argv[0], the file's options, the command line's own; argv[argc] is NULL */
    int n_owned; /* argv[1..n_owned] were allocated here (the file's options) */
} hfl_config_args;

/* Expands --config FILE (or --config=FILE, or a prefix of it getopt_long
 * would take) in argv against opts, the program's getopt_long table, which
 * must list "config"; prog names the program in errors ("see prog --help").
 * Without --config, out holds the command line as it is. Returns -1 with
 * err (out empty) on a bad file. Free out with hfl_config_free. */
int hfl_config_expand(const char *prog, int argc, char **argv, const struct option *opts, hfl_config_args *out,
                      char *err);
void hfl_config_free(hfl_config_args *a);

/* For a program's parse_args: hfl_config_expand into *argc and *argv, which
 * then stay valid (options point into them) until the process exits. */
int hfl_config_apply(const char *prog, int *argc, char ***argv, const struct option *opts, char *err);

/* A number as it travels in an argument: whole numbers without a fraction,
 * others in the fewest digits that read back as the same double. */
void hfl_config_number(double d, char *out, size_t cap);

#endif
