/* config.c: --config FILE expanded into command-line arguments, and the
 * helpers of --print-config (config.h). */
#include "util/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/util.h"

/* The option "--name[=value]" names as getopt_long would take it: an exact
 * match, else the only option name starts with; NULL when none (or several)
 * fit, which getopt_long itself then reports. */
static const struct option *config_lookup(const struct option *opts, const char *arg) {
    size_t len = strcspn(arg, "=");
    const struct option *found = NULL;
    int n_prefix = 0;
    for (const struct option *o = opts; o->name; o++) {
        if (strncmp(o->name, arg, len) != 0) continue;
        if (strlen(o->name) == len) return o;
        found = o, n_prefix++;
    }
    return n_prefix == 1 ? found : NULL;
}

/* Finds --config's file in argv and marks the arguments it took in skip;
 * *path stays NULL without one. */
static int config_find(int argc, char **argv, const struct option *opts, char *skip, const char **path, char *err) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strncmp(argv[i], "--", 2) != 0) continue; /* a positional argument */
        const struct option *o = config_lookup(opts, argv[i] + 2);
        const char *eq = strchr(argv[i], '=');
        if (!o || o->has_arg != required_argument) continue;
        if (strcmp(o->name, "config") != 0) {
            i += !eq; /* its value, whatever it looks like */
            continue;
        }
        if (*path) return hfl_errf(err, "--config given twice: use one file");
        if (!eq && i + 1 >= argc) return hfl_errf(err, "option '%s' needs a value (see --help)", argv[i]);
        *path = eq ? eq + 1 : argv[i + 1];
        skip[i] = 1;
        if (!eq) skip[++i] = 1;
    }
    return 0;
}

void hfl_config_number(double d, char *out, size_t cap) {
    if (d == floor(d) && fabs(d) < 1e18) {
        snprintf(out, cap, "%.0f", d);
        return;
    }
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(out, cap, "%.*g", digits, d);
        if (strtod(out, NULL) == d) return;
    }
}

/* Why value v cannot stand for option o ("" when it can). */
static const char *config_misfit(const cJSON *v, const struct option *o) {
    if (cJSON_IsNull(v)) return ""; /* not set: --print-config's output reads back */
    if (o->has_arg == no_argument) return cJSON_IsBool(v) ? "" : "is a flag: give true or false";
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? "takes a value, not true" : "takes a value, not false";
    if (cJSON_IsArray(v)) return "must be a string or a number, not an array";
    if (cJSON_IsObject(v)) return "must be a string or a number, not an object";
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) return "is not a finite number";
    return "";
}

/* The argument one key of the file stands for: "--key=value" or "--key"
 * (*arg malloc'd), or *arg NULL for a false flag. */
static int config_arg(const char *prog, const char *file, const cJSON *v, const struct option *opts, char **arg,
                      char *err) {
    const char *key = v->string;
    const struct option *o = opts;
    while (o->name && strcmp(o->name, key) != 0) o++;
    *arg = NULL;
    if (!o->name) return hfl_errf(err, "--config %s: '%s' is not an option of %s (see %s --help)", file, key, prog, prog);
    if (!strcmp(key, "config")) return hfl_errf(err, "--config %s: \"config\" cannot be set in a config file", file);
    const char *why = config_misfit(v, o);
    if (why[0]) return hfl_errf(err, "--config %s: '%s' %s", file, key, why);
    if (cJSON_IsFalse(v) || cJSON_IsNull(v)) return 0;
    char num[40] = "";
    if (cJSON_IsNumber(v)) hfl_config_number(v->valuedouble, num, sizeof num);
    const char *val = cJSON_IsString(v) ? v->valuestring : num;
    size_t n = strlen(key) + strlen(val) + 4;
    *arg = hfl_malloc(n);
    if (cJSON_IsTrue(v)) snprintf(*arg, n, "--%s", key);
    else snprintf(*arg, n, "--%s=%s", key, val);
    return 0;
}

/* Reads and parses the file: a JSON object, else NULL with err. */
static cJSON *config_load(const char *file, char *err) {
    size_t len;
    char e[HFL_ERR_LEN];
    char *text = hfl_read_file(file, &len, e);
    if (!text) {
        hfl_errf(err, "--config: %s", e);
        return NULL;
    }
    /* the terminating NUL included, so nothing may follow the value */
    const char *end = text;
    cJSON *root = strlen(text) == len ? cJSON_ParseWithLengthOpts(text, len + 1, &end, 1) : NULL;
    int line = 1;
    for (const char *p = text; !root && p < end; p++) line += *p == '\n';
    free(text);
    if (!root) {
        hfl_errf(err, "--config %s: not JSON (line %d)", file, line);
    } else if (!cJSON_IsObject(root)) {
        hfl_errf(err, "--config %s: not a JSON object of long options, e.g. {\"rounds\": 5}", file);
        cJSON_Delete(root);
        root = NULL;
    }
    return root;
}

/* The file's arguments into out->argv from index 1; -1 with err. */
static int config_args_from(const char *prog, const char *file, const struct option *opts, hfl_config_args *out,
                            int n_cli, char *err) {
    cJSON *root = config_load(file, err);
    if (!root) return -1;
    out->argv = hfl_calloc((size_t)cJSON_GetArraySize(root) + (size_t)n_cli + 2, sizeof(char *));
    out->argc = 1;
    const cJSON *v;
    int rc = 0;
    cJSON_ArrayForEach(v, root) {
        char *arg;
        if ((rc = config_arg(prog, file, v, opts, &arg, err)) != 0) break;
        if (arg) out->argv[out->argc++] = arg, out->n_owned++;
    }
    cJSON_Delete(root);
    return rc;
}

int hfl_config_expand(const char *prog, int argc, char **argv, const struct option *opts, hfl_config_args *out,
                      char *err) {
    *out = (hfl_config_args){0};
    char *skip = hfl_calloc((size_t)argc + 1, 1);
    const char *file = NULL;
    int rc = config_find(argc, argv, opts, skip, &file, err);
    if (rc == 0 && file) rc = config_args_from(prog, file, opts, out, argc, err);
    else if (rc == 0) out->argv = hfl_calloc((size_t)argc + 1, sizeof(char *)), out->argc = 1;
    if (rc == 0) {
        out->argv[0] = argv[0];
        for (int i = 1; i < argc; i++)
            if (!skip[i]) out->argv[out->argc++] = argv[i];
        out->argv[out->argc] = NULL;
    }
    free(skip);
    if (rc != 0) hfl_config_free(out);
    return rc;
}

void hfl_config_free(hfl_config_args *a) {
    for (int i = 1; i <= a->n_owned; i++) free(a->argv[i]);
    free(a->argv);
    *a = (hfl_config_args){0};
}

static hfl_config_args applied; /* the program's arguments, until exit */

static void config_free_applied(void) { hfl_config_free(&applied); }

int hfl_config_apply(const char *prog, int *argc, char ***argv, const struct option *opts, char *err) {
    hfl_config_free(&applied);
    if (hfl_config_expand(prog, *argc, *argv, opts, &applied, err) != 0) return -1;
    static int registered;
    if (!registered) registered = 1, atexit(config_free_applied);
    *argc = applied.argc, *argv = applied.argv;
    return 0;
}
