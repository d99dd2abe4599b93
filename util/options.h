/* options.h: a program's options as one table, as Redis's static_configs[]
 * or SQLite's pragma table: each row names a long option, says how its value
 * is read and where it lands in the program's options struct, its bounds,
 * its default and its --help text. The table alone drives getopt_long, the
 * defaults, --help, --config FILE (util/config.h) and --print-config, so an
 * option is written once; docs/options.md is each program's --help.
 *
 * A value is read by its row's kind (INT and DOUBLE within [lo, hi], the
 * strict parsers of util.h) and a bad one is "--name: why" (CHOICE: "unknown
 * name 'value' (a, b, c)"). --print-config shows each row under its name:
 * a number, a string (null when empty), true/false for a flag, null for 0
 * where zero_null says 0 means "not given", or what the row's show returns. */
#ifndef HFL_OPTIONS_H
#define HFL_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

typedef enum {
    HFL_OPT_FLAG,    /* no value: an int set to 1 */
    HFL_OPT_STR,     /* a char[size], copied (a value that does not fit is refused) */
    HFL_OPT_PTR,     /* a const char * pointing at the argument (or at def) */
    HFL_OPT_INT,     /* a whole number in [lo, hi] into an int (size 4) or int64_t (size 8) */
    HFL_OPT_DOUBLE,  /* a number in [lo, hi] into a double */
    HFL_OPT_SIZE,    /* bytes ("512M", "4G", hfl_parse_size) into a uint64_t */
    HFL_OPT_CHOICE,  /* one of choices' words ("auto|cpu|cuda") into a char[size] */
    HFL_OPT_CUSTOM,  /* the row's set reads it and its show prints it (both required) */
    HFL_OPT_CONFIG,  /* --config FILE: read before the command line (util/config.h) */
    HFL_OPT_PRINT,   /* --print-config: the caller prints once its options are final */
    HFL_OPT_HELP,    /* --help: prints the help and exits 0 */
} hfl_opt_kind;

typedef struct {
    const char *name;   /* the long option, its config-file key and its --print-config key */
    const char *arg;    /* the value's name in --help ("N", "FILE"); NULL: a flag, no value */
    hfl_opt_kind kind;
    size_t offset, size; /* the field in the program's options struct */
    double lo, hi;      /* INT and DOUBLE: the inclusive bounds */
    const char *def;    /* the default, as it would be typed, set before parsing (NULL: zero) */
    const char *help;   /* --help's text; each '\n' starts a new, indented line */
    /* rarer, given by name in a row: */
    const char *choices; /* CHOICE: the words, '|' between them */
    int zero_null;       /* --print-config shows 0 as null: not given */
    /* Any kind: reads arg (NULL for a flag) into the options struct instead of
     * the kind; -1 with err (the why, without the option's name). */
    int (*set)(void *opts, const char *arg, char *err);
    cJSON *(*show)(const void *opts); /* any kind: the --print-config value instead of the kind's */
} hfl_option;

typedef struct {
    const char *name;    /* "hfl-coordinator": errors and config files name it */
    const char *usage;   /* --help's text above the options */
    const char *footer;  /* --help's text below them, or NULL */
    int column;          /* where each option's help text starts */
    const hfl_option *rows; /* ends with a row whose name is NULL */
} hfl_options;

/* Sets every row's default in opts (a zeroed struct), then reads --config's
 * file and the command line. *argc and *argv become the expanded arguments
 * (valid until exit); *first is the index of the first operand (argc when
 * none). --help prints and exits 0; *print_config is 1 when --print-config
 * was given. -1 with err (one line, without the program's name). */
int hfl_options_parse(const hfl_options *p, int *argc, char ***argv, void *opts, int *first, int *print_config,
                      char *err);
/* --help: the usage, each row ("  --name ARG", padded to column, its help), the footer. */
void hfl_options_help(const hfl_options *p, FILE *f);
/* --print-config: every row's value in opts as one JSON object, printed to stdout. */
void hfl_options_print(const hfl_options *p, const void *opts);

/* For a row's show: s as a JSON string, or null when s is NULL or empty. */
cJSON *hfl_options_json_str(const char *s);

#endif
