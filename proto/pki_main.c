/* pki_main.c: the hfl-pki program, which writes a throwaway CA, a coordinator
 * certificate and client certificates for mutual TLS (see pki.h), issues
 * more from it, and revokes names (proto/identity.h).
 *
 *   hfl-pki --out DIR --clients N [--cn NAME] [--days D] [--json]
 *   hfl-pki issue NAME --out DIR [--role client|coordinator|aggregator] [--days D]
 *   hfl-pki revoke NAME --out DIR    (DIR/revoked.txt; a coordinator reloads it on SIGHUP)
 *
 * Options may come from --config FILE (util/config.h), the subcommand and its
 * NAME stay on the command line.
 *
 * Exit status: 0 on success, 1 when the files cannot be written, 2 on bad
 * arguments. --json prints the written paths as one JSON object. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto/identity.h"
#include "proto/pki.h"
#include "util/options.h"
#include "util/util.h"

typedef struct {
    const char *out, *cn, *role;
    int64_t clients; /* -1: not given */
    int64_t days;
    int json;
} pki_options;

#define AT(field) offsetof(pki_options, field), sizeof(((pki_options *)0)->field) /* a row's field */

static cJSON *show_clients(const void *o) {
    int64_t n = ((const pki_options *)o)->clients;
    return n >= 0 ? cJSON_CreateNumber((double)n) : cJSON_CreateNull();
}

static const hfl_option pki_rows[] = {
    {"out", "DIR", HFL_OPT_PTR, AT(out), 0, 0, NULL, .help = "output (CA) directory (created if missing)"},
    {"clients", "N", HFL_OPT_INT, AT(clients), 0, 100000, NULL,
     .help = "number of client certificates, 0..100000", .show = show_clients},
    {"cn", "NAME", HFL_OPT_PTR, AT(cn), 0, 0, "localhost",
     .help = "coordinator host name, put in its certificate's CN (default localhost)"},
    {"role", "R", HFL_OPT_PTR, AT(role), 0, 0, HFL_ROLE_CLIENT, .help = "issue: client (default), coordinator, or aggregator (a tier's\n"
     "aggregator, hfl-coordinator --upstream-cert)"},
    {"days", "D", HFL_OPT_INT, AT(days), 1, 36500, "365", .help = "validity in days (default 365)"},
    {"json", NULL, HFL_OPT_FLAG, AT(json), 0, 0, NULL, .help = "print the written paths as JSON"},
    {"config", "FILE", HFL_OPT_CONFIG, 0, 0, 0, 0, NULL,
     .help = "read options from FILE, a JSON object keyed by long option name, e.g.\n"
     "{\"out\": \"pki\", \"clients\": 4}; options on the command line win"},
    {"print-config", NULL, HFL_OPT_PRINT, 0, 0, 0, 0, NULL,
     .help = "print the options in effect (defaults included) as JSON and exit"},
    {"help", NULL, HFL_OPT_HELP, 0, 0, 0, 0, NULL, .help = "this text"},
    {0}};

static const hfl_options pki_opts = {
    "hfl-pki",
    "usage: hfl-pki --out DIR --clients N [--cn NAME] [--days D] [--json]\n"
    "       hfl-pki issue NAME --out DIR [--role client|coordinator|aggregator] [--days D]\n"
    "       hfl-pki revoke NAME --out DIR\n"
    "Writes a throwaway certificate authority for hfl's mutual TLS into DIR:\n"
    "  ca.crt, ca.key (0600), coordinator.pem and client-<i>.pem (certificate + key, 0600).\n"
    "  Each certificate names its holder (CN) and role (OU); a client is known by its CN.\n"
    "issue: one more certificate from DIR's CA, written to DIR/NAME.pem.\n"
    "revoke: adds NAME to DIR/revoked.txt; a coordinator refuses it after SIGHUP.\n",
    NULL, 17, pki_rows};

/* Prints {"dir", "ca_cert", "ca_key", "coordinator", "clients": [...]}; -1 on OOM. */
static int pki_print_json(const char *dir, int n_clients) {
    cJSON *o = cJSON_CreateObject(), *clients = cJSON_CreateArray();
    char path[4200];
    int ok = o && clients && cJSON_AddStringToObject(o, "dir", dir);
    static const char *const keys[] = {"ca_cert", "ca_key", "coordinator"};
    static const char *const files[] = {"ca.crt", "ca.key", "coordinator.pem"};
    for (int i = 0; ok && i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        ok = cJSON_AddStringToObject(o, keys[i], path) != NULL;
    }
    for (int i = 0; ok && i < n_clients; i++) {
        snprintf(path, sizeof path, "%s/client-%d.pem", dir, i);
        ok = cJSON_AddItemToArray(clients, cJSON_CreateString(path));
    }
    if (ok) {
        ok = cJSON_AddItemToObject(o, "clients", clients);
        clients = NULL;
    }
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    if (s) printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(clients);
    cJSON_Delete(o);
    return s ? 0 : -1;
}

/* hfl-pki issue|revoke NAME --out DIR. */
static int pki_command(const char *cmd, int n_args, char **args, const char *dir, const char *role, int days) {
    char err[HFL_ERR_LEN], path[4200];
    if (n_args != 1 || !dir) {
        fprintf(stderr, "hfl-pki: %s needs one NAME and --out DIR (see --help)\n", cmd);
        return 2;
    }
    if (!strcmp(cmd, "issue")) {
        if (hfl_pki_issue(dir, args[0], role, days, err) != 0) return hfl_fail("hfl-pki", err, 1);
        printf("hfl-pki: wrote %s/%s.pem (CN=%s, role %s), valid %d days\n", dir, args[0], args[0], role, days);
        return 0;
    }
    snprintf(path, sizeof path, "%s/revoked.txt", dir);
    if (hfl_revoke_name(path, args[0], err) != 0) return hfl_fail("hfl-pki", err, 1);
    printf("hfl-pki: %s revoked in %s; send SIGHUP to a running coordinator to apply it\n", args[0], path);
    return 0;
}

int main(int argc, char **argv) {
    const char *cmd = NULL;
    if (argc > 1 && (!strcmp(argv[1], "issue") || !strcmp(argv[1], "revoke"))) {
        cmd = argv[1];
        argv[1] = argv[0];
        argc--, argv++;
    }
    pki_options o = {.clients = -1};
    int first, print_config;
    char err[HFL_ERR_LEN];
    if (hfl_options_parse(&pki_opts, &argc, &argv, &o, &first, &print_config, err) != 0)
        return hfl_fail("hfl-pki", err, 2);
    if (!cmd && first < argc) {
        fprintf(stderr, "hfl-pki: unexpected argument '%s' (see --help)\n", argv[first]);
        return 2;
    }
    if (print_config) {
        hfl_options_print(&pki_opts, &o);
        return 0;
    }
    if (cmd) return pki_command(cmd, argc - first, argv + first, o.out, o.role, (int)o.days);
    if (!o.out || o.clients < 0) {
        fprintf(stderr, "hfl-pki: --out and --clients are required (see --help)\n");
        return 2;
    }
    if (hfl_pki_create(o.out, (int)o.clients, o.cn, (int)o.days, err) != 0) return hfl_fail("hfl-pki", err, 1);
    if (o.json) {
        if (pki_print_json(o.out, (int)o.clients) != 0) {
            fprintf(stderr, "hfl-pki: out of memory printing JSON\n");
            return 1;
        }
    } else {
        printf("hfl-pki: wrote ca.crt, ca.key, coordinator.pem (CN=%s) and %lld client "
               "certificate(s) to %s, valid %lld days\n", o.cn, (long long)o.clients, o.out, (long long)o.days);
    }
    return 0;
}
