/* options.c: a program's options table read into its options struct, and
 * printed as --help and --print-config (options.h). */
#include "util/options.h"

#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"
#include "util/util.h"

cJSON *hfl_options_json_str(const char *s) { return s && s[0] ? cJSON_CreateString(s) : cJSON_CreateNull(); }

/* CHOICE: whether arg is one of choices' words ("a|b|c"). */
static int choice_has(const char *choices, const char *arg) {
    size_t n = strlen(arg);
    for (const char *w = choices;; w++) {
        size_t len = strcspn(w, "|");
        if (len == n && strncmp(w, arg, n) == 0) return 1;
        if (!w[len]) return 0;
        w += len;
    }
}

/* "unknown device 'gpu' (auto, cpu, cuda)" */
static int choice_error(const hfl_option *r, const char *arg, char *err) {
    char list[200];
    size_t n = 0;
    for (const char *c = r->choices; *c && n + 3 < sizeof list; c++) {
        if (*c == '|') list[n++] = ',', list[n++] = ' ';
        else list[n++] = *c;
    }
    list[n] = 0;
    return hfl_errf(err, "unknown %s '%s' (%s)", r->name, arg, list);
}

static void set_int(const hfl_option *r, void *f, long v) {
    if (r->size == sizeof(int64_t)) {
        int64_t w = v;
        memcpy(f, &w, sizeof w);
    } else {
        int32_t w = (int32_t)v;
        memcpy(f, &w, sizeof w);
    }
}

/* Reads arg into row r's field of opts; -1 with err "--name: why". */
static int option_set(const hfl_option *r, void *opts, const char *arg, char *err) {
    char e[HFL_ERR_LEN] = "";
    void *f = (char *)opts + r->offset;
    long v;
    int rc = 0;
    switch (r->set ? HFL_OPT_CUSTOM : r->kind) {
    case HFL_OPT_FLAG: *(int *)f = 1; break;
    case HFL_OPT_STR: /* a value cut to fit would name another file or host: refused */
        if (strlen(arg) >= r->size)
            return hfl_errf(err, "--%s: %zu bytes, more than its %zu", r->name, strlen(arg), r->size - 1);
        snprintf(f, r->size, "%s", arg);
        break;
    case HFL_OPT_PTR: *(const char **)f = arg; break;
    case HFL_OPT_INT:
        if ((rc = hfl_parse_int(arg, (long)r->lo, (long)r->hi, &v, e)) == 0) set_int(r, f, v);
        break;
    case HFL_OPT_DOUBLE: rc = hfl_parse_double(arg, r->lo, r->hi, f, e); break;
    case HFL_OPT_SIZE: rc = hfl_parse_size(arg, f, e); break;
    case HFL_OPT_CHOICE:
        if (!choice_has(r->choices, arg)) return choice_error(r, arg, err);
        snprintf(f, r->size, "%s", arg);
        break;
    case HFL_OPT_CUSTOM: rc = r->set(opts, arg, e); break;
    default: break; /* CONFIG, PRINT, HELP: the parser's own */
    }
    return rc == 0 && !e[0] ? 0 : hfl_errf(err, "--%s: %s", r->name, e);
}

int hfl_options_parse(const hfl_options *p, int *argc, char ***argv, void *opts, int *first, int *print_config,
                      char *err) {
    int n = 0;
    while (p->rows[n].name) n++;
    for (int i = 0; i < n; i++)
        if (p->rows[i].def && option_set(&p->rows[i], opts, p->rows[i].def, err) != 0) return -1;
    struct option *lo = hfl_calloc((size_t)n + 1, sizeof *lo); /* getopt_long's table: val 256 + row */
    for (int i = 0; i < n; i++)
        lo[i] = (struct option){p->rows[i].name, p->rows[i].arg ? required_argument : no_argument, NULL, 256 + i};
    int rc = hfl_config_apply(p->name, argc, argv, lo, err);
    *print_config = 0;
    optind = 0; /* glibc: start afresh */
    opterr = 0;
    while (rc == 0) {
        int c = getopt_long(*argc, *argv, ":", lo, NULL);
        if (c == -1) break;
        const hfl_option *r = c >= 256 ? &p->rows[c - 256] : NULL;
        if (c == ':') rc = hfl_errf(err, "option '%s' needs a value (see --help)", (*argv)[optind - 1]);
        else if (!r) rc = hfl_errf(err, "unknown option '%s' (see --help)", (*argv)[optind - 1]);
        else if (r->kind == HFL_OPT_HELP) hfl_options_help(p, stdout), exit(0);
        else if (r->kind == HFL_OPT_PRINT) *print_config = 1;
        else rc = option_set(r, opts, optarg, err);
    }
    *first = optind;
    free(lo);
    return rc;
}

void hfl_options_help(const hfl_options *p, FILE *f) {
    fputs(p->usage, f);
    for (const hfl_option *r = p->rows; r->name; r++) {
        int w = fprintf(f, "  --%s%s%s", r->name, r->arg ? " " : "", r->arg ? r->arg : "");
        for (const char *h = r->help;; h++) {
            int len = (int)strcspn(h, "\n");
            fprintf(f, "%*s%.*s\n", w < p->column ? p->column - w : 1, "", len, h);
            w = 0;
            h += len;
            if (!*h) break;
        }
    }
    if (p->footer) fputs(p->footer, f);
    fflush(f);
}

/* Row r's value in opts for --print-config; NULL for a row not shown. */
static cJSON *option_json(const hfl_option *r, const void *opts) {
    const void *f = (const char *)opts + r->offset;
    double v;
    switch (r->show ? HFL_OPT_CUSTOM : r->kind) {
    case HFL_OPT_FLAG: return cJSON_CreateBool(*(const int *)f);
    case HFL_OPT_STR: case HFL_OPT_CHOICE: return hfl_options_json_str(f);
    case HFL_OPT_PTR: return hfl_options_json_str(*(const char *const *)f);
    case HFL_OPT_INT:
        if (r->size == sizeof(int64_t)) {
            int64_t w;
            memcpy(&w, f, sizeof w);
            v = (double)w;
        } else {
            int32_t w;
            memcpy(&w, f, sizeof w);
            v = w;
        }
        break;
    case HFL_OPT_DOUBLE: v = *(const double *)f; break;
    case HFL_OPT_SIZE: v = (double)*(const uint64_t *)f; break;
    case HFL_OPT_CUSTOM: return r->show(opts);
    default: return NULL;
    }
    return r->zero_null && v == 0 ? cJSON_CreateNull() : cJSON_CreateNumber(v);
}

void hfl_options_print(const hfl_options *p, const void *opts) {
    cJSON *o = cJSON_CreateObject();
    for (const hfl_option *r = p->rows; r->name; r++) {
        cJSON *v = option_json(r, opts);
        if (v) cJSON_AddItemToObject(o, r->name, v);
    }
    char *s = cJSON_Print(o);
    if (s) printf("%s\n", s);
    fflush(stdout);
    cJSON_free(s);
    cJSON_Delete(o);
}
