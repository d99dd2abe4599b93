/* pki_main.c: the hfl-pki program, which writes a throwaway CA, a coordinator
 * certificate and client certificates for mutual TLS (see pki.h), issues
 * more from it, and revokes names (proto/identity.h).
 *
 *   hfl-pki --out DIR --clients N [--cn NAME] [--days D] [--json]
 *   hfl-pki issue NAME --out DIR [--role client|coordinator] [--days D]
 *   hfl-pki revoke NAME --out DIR    (DIR/revoked.txt; a coordinator reloads it on SIGHUP)
 *
 * Options may come from --config FILE (util/config.h), the subcommand and its
 * NAME stay on the command line.
 *
 * Exit status: 0 on success, 1 when the files cannot be written, 2 on bad
 * arguments. --json prints the written paths as one JSON object. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto/identity.h"
#include "proto/pki.h"
#include "util/config.h"
#include "util/util.h"

static void pki_usage(FILE *f) {
    fprintf(f,
            "usage: hfl-pki --out DIR --clients N [--cn NAME] [--days D] [--json]\n"
            "       hfl-pki issue NAME --out DIR [--role client|coordinator] [--days D]\n"
            "       hfl-pki revoke NAME --out DIR\n"
            "Writes a throwaway certificate authority for hfl's mutual TLS into DIR:\n"
            "  ca.crt, ca.key (0600), coordinator.pem and client-<i>.pem (certificate + key, 0600).\n"
            "  Each certificate names its holder (CN) and role (OU); a client is known by its CN.\n"
            "issue: one more certificate from DIR's CA, written to DIR/NAME.pem.\n"
            "revoke: adds NAME to DIR/revoked.txt; a coordinator refuses it after SIGHUP.\n"
            "  --out DIR      output (CA) directory (created if missing)\n"
            "  --clients N    number of client certificates, 0..100000\n"
            "  --cn NAME      coordinator host name, put in its certificate's CN (default localhost)\n"
            "  --role R       issue: client (default) or coordinator\n"
            "  --days D       validity in days (default 365)\n"
            "  --json         print the written paths as JSON\n"
            "  --config FILE  read options from FILE, a JSON object keyed by long option name, e.g.\n"
            "                 {\"out\": \"pki\", \"clients\": 4}; options on the command line win\n"
            "  --print-config print the options in effect (defaults included) as JSON and exit\n"
            "  --help         this text\n");
}

/* --print-config: the options in effect, keyed by long option name (null: not set). */
static void pki_print_options(const char *out, long clients, const char *cn, const char *role, long days, int json) {
    cJSON *o = cJSON_CreateObject();
    hfl_config_add_str(o, "out", out);
    if (clients >= 0) cJSON_AddNumberToObject(o, "clients", (double)clients);
    else cJSON_AddNullToObject(o, "clients");
    hfl_config_add_str(o, "cn", cn);
    hfl_config_add_str(o, "role", role);
    cJSON_AddNumberToObject(o, "days", (double)days);
    cJSON_AddBoolToObject(o, "json", json);
    hfl_config_print(o);
}

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
        if (hfl_pki_issue(dir, args[0], role, days, err) != 0) {
            fprintf(stderr, "hfl-pki: %s\n", err);
            return 1;
        }
        printf("hfl-pki: wrote %s/%s.pem (CN=%s, role %s), valid %d days\n", dir, args[0], args[0], role, days);
        return 0;
    }
    snprintf(path, sizeof path, "%s/revoked.txt", dir);
    if (hfl_revoke_name(path, args[0], err) != 0) {
        fprintf(stderr, "hfl-pki: %s\n", err);
        return 1;
    }
    printf("hfl-pki: %s revoked in %s; send SIGHUP to a running coordinator to apply it\n", args[0], path);
    return 0;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},  {"clients", required_argument, NULL, 'n'},
        {"cn", required_argument, NULL, 'c'},   {"days", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},       {"help", no_argument, NULL, 'h'},
        {"role", required_argument, NULL, 'r'}, {"config", required_argument, NULL, 'C'},
        {"print-config", no_argument, NULL, 'P'}, {NULL, 0, NULL, 0},
    };
    const char *out = NULL, *cn = "localhost", *role = HFL_ROLE_CLIENT, *cmd = NULL;
    if (argc > 1 && (!strcmp(argv[1], "issue") || !strcmp(argv[1], "revoke"))) {
        cmd = argv[1];
        argv[1] = argv[0];
        argc--, argv++;
    }
    long clients = -1, days = 365;
    int json = 0, print_config = 0, ch;
    char err[HFL_ERR_LEN];
    if (hfl_config_apply("hfl-pki", &argc, &argv, opts, err) != 0) {
        fprintf(stderr, "hfl-pki: %s\n", err);
        return 2;
    }
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'o': out = optarg; break;
        case 'c': cn = optarg; break;
        case 'r': role = optarg; break;
        case 'j': json = 1; break;
        case 'C': break; /* hfl_config_apply read it */
        case 'P': print_config = 1; break;
        case 'h': pki_usage(stdout); return 0;
        case 'n': bad = hfl_parse_int(optarg, 0, 100000, &clients, err); break;
        case 'd': bad = hfl_parse_int(optarg, 1, 36500, &days, err); break;
        case ':':
            fprintf(stderr, "hfl-pki: option '%s' needs a value (see --help)\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "hfl-pki: unknown option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "hfl-pki: --%s: %s\n", ch == 'n' ? "clients" : "days", err);
            return 2;
        }
    }
    if (!cmd && optind < argc) {
        fprintf(stderr, "hfl-pki: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (print_config) {
        pki_print_options(out, clients, cn, role, days, json);
        return 0;
    }
    if (cmd) return pki_command(cmd, argc - optind, argv + optind, out, role, (int)days);
    if (!out || clients < 0) {
        fprintf(stderr, "hfl-pki: --out and --clients are required (see --help)\n");
        return 2;
    }
    if (hfl_pki_create(out, (int)clients, cn, (int)days, err) != 0) {
        fprintf(stderr, "hfl-pki: %s\n", err);
        return 1;
    }
    if (json) {
        if (pki_print_json(out, (int)clients) != 0) {
            fprintf(stderr, "hfl-pki: out of memory printing JSON\n");
            return 1;
        }
    } else {
        printf("hfl-pki: wrote ca.crt, ca.key, coordinator.pem (CN=%s) and %ld client "
               "certificate(s) to %s, valid %ld days\n", cn, clients, out, days);
    }
    return 0;
}
