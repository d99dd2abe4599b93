/* hfl_data.c: the hfl-data program, which cuts a dataset into per-client
 * shard files and describes dataset files (data/files.h).
 *
 *   hfl-data split --data PATH --num-clients N --out DIR [--partition SPEC] [--seed S]
 *                  [--format npz|safetensors] [--json]
 *   hfl-data stats PATH... [--json]
 *   hfl-data text --out DIR --context T [--held-out F] [--num-clients N] [--seed S]
 *                 [--format npz|safetensors] [--json] FILE...
 *
 * split assigns samples exactly as hfl-client assigns its share of the
 * built-in set (hfl_partition_assign with the same spec, seed and labels, each
 * client's samples in ascending order), so client i of a fleet reading
 * DIR/client-<i>.<fmt> trains on the very samples, in the same order, that
 * `hfl-client --client-index i --num-clients N` picks from Fashion-MNIST.
 * From a Fashion-MNIST directory it also writes the test set as DIR/test.<fmt>.
 *
 * text cuts text files into byte-level language-model windows (data/text.h):
 * without --num-clients, DIR/client-<i> holds FILE i's windows (one client
 * per source, the natural non-IID split: the 66 books of scripts/kjv-books);
 * with it, every file's training windows are pooled and dealt out IID
 * (hfl_partition_assign, iid, --seed), for comparison. DIR/test holds the
 * held-out tail of every file.
 *
 * Exit status: 0 on success, 1 when a file cannot be read or written, 2 on
 * bad arguments. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "data/files.h"
#include "data/partition.h"
#include "data/text.h"
#include "util/options.h"
#include "util/util.h"

typedef struct {
    const char *data, *out, *partition, *format;
    long num_clients, seed, context;
    double held_out;
    int json;
} data_options;

#define AT(field) offsetof(data_options, field), sizeof(((data_options *)0)->field) /* a row's field */

static const hfl_option data_rows[] = {
    {"data", "PATH", HFL_OPT_PTR, AT(data), 0, 0, HFL_FMNIST_DIR,
     .help = "dataset to split (default /usr/share/datasets/fashion-mnist)"},
    {"num-clients", "N", HFL_OPT_INT, AT(num_clients), 1, 100000, NULL,
     .help = "number of shards, 1..100000", .zero_null = 1},
    {"out", "DIR", HFL_OPT_PTR, AT(out), 0, 0, NULL, .help = "where to write the shards (created if missing)"},
    {"partition", "SPEC", HFL_OPT_PTR, AT(partition), 0, 0, "iid",
     .help = "iid (default), dirichlet:ALPHA or shards:K"},
    {"seed", "S", HFL_OPT_INT, AT(seed), 0, 0x7fffffff, "1", .help = "partition seed (default 1, as hfl-client's)"},
    {"format", "F", HFL_OPT_PTR, AT(format), 0, 0, "npz", .help = "npz (default) or safetensors"},
    {"context", "T", HFL_OPT_INT, AT(context), 1, HFL_TEXT_MAX_CONTEXT, NULL,
     .help = "text: tokens per sample, 1..4096", .zero_null = 1},
    {"held-out", "F", HFL_OPT_DOUBLE, AT(held_out), 0, 0.5, "0.05",
     .help = "text: fraction of each file's windows held out for the test set\n"
     "(default 0.05; 0..0.5)"},
    {"json", NULL, HFL_OPT_FLAG, AT(json), 0, 0, NULL, .help = "print what was written, or the statistics, as JSON"},
    {"config", "FILE", HFL_OPT_CONFIG, 0, 0, 0, 0, NULL,
     .help = "read options from FILE, a JSON object keyed by long option name"},
    {"print-config", NULL, HFL_OPT_PRINT, 0, 0, 0, 0, NULL,
     .help = "print the options in effect (defaults included) as JSON and exit"},
    {"help", NULL, HFL_OPT_HELP, 0, 0, 0, 0, NULL, .help = "this text"},
    {0}};

static const hfl_options data_opts = {
    "hfl-data",
    "usage: hfl-data split --data PATH --num-clients N --out DIR [--partition SPEC] [--seed S]\n"
    "                      [--format npz|safetensors] [--json]\n"
    "       hfl-data stats PATH... [--json]\n"
    "       hfl-data text --out DIR --context T [--held-out F] [--num-clients N] [--seed S]\n"
    "                     [--format npz|safetensors] [--json] FILE...\n"
    "split: cuts a dataset into one file per client, DIR/client-0000.<fmt>, ..., with the same\n"
    "  assignment hfl-client makes from --partition, --seed and --num-clients, so a fleet training\n"
    "  on the shards (hfl-client --data DIR/client-0003.npz) trains on the same samples as one\n"
    "  using the built-in partition. From a Fashion-MNIST directory it also writes DIR/test.<fmt>.\n"
    "stats: samples, features and the label histogram of each dataset (for byte-level text, or\n"
    "  more than 32 classes: the total, the distinct labels and the five most common; --json: whole).\n"
    "text: byte-level language-model windows (T + 1 bytes at stride T: T token ids, T next\n"
    "  bytes as labels) of each FILE: DIR/client-<i> holds FILE i's (one client per source),\n"
    "  or with --num-clients N all of them dealt out IID; DIR/test holds every file's tail.\n"
    "Datasets: a Fashion-MNIST directory (IDX files), an .npz with x.npy and y.npy, a directory\n"
    "holding x.npy and y.npy, or a safetensors file with tensors x and y; x uint8 or float32\n"
    "shaped [n, ...], y integer labels shaped [n].\n",
    NULL, 21, data_rows};

/* Any dataset: a dataset file, or a Fashion-MNIST directory's training set. */
static int load_any(const char *path, hfl_dataset *d, char *err) {
    if (hfl_data_is_file(path)) return hfl_data_load(path, d, err);
    return hfl_fmnist_load(path, 1, d, err);
}

static cJSON *histogram(const hfl_dataset *d) {
    int *h = hfl_calloc((size_t)d->n_classes, sizeof(int));
    for (size_t i = 0; i < (size_t)d->n * hfl_dataset_label_rows(d); i++) h[d->y[i]]++;
    cJSON *a = cJSON_CreateIntArray(h, d->n_classes);
    free(h);
    return a;
}

static cJSON *describe(const char *path, const hfl_dataset *d) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddNumberToObject(o, "samples", d->n);
    cJSON_AddNumberToObject(o, "features", d->dim);
    cJSON_AddStringToObject(o, "dtype", d->pixels ? "uint8" : "float32");
    cJSON_AddNumberToObject(o, "classes", d->n_classes);
    cJSON_AddNumberToObject(o, "labels_per_sample", hfl_dataset_label_rows(d));
    cJSON_AddItemToObject(o, "labels", histogram(d));
    return o;
}

/* A label histogram too long to read (byte-level text: 256 classes) as its
 * total, the labels that occur and the five most common, each with its
 * share; --json keeps the whole histogram. */
static void print_summary(const cJSON *labels) {
    enum { TOP = 5 };
    int top[TOP], n_top = 0, distinct = 0, k = 0;
    double total = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, labels) {
        total += c->valuedouble;
        distinct += c->valueint > 0;
    }
    printf(" %.0f, %d distinct; most common", total, distinct);
    for (int t = 0; t < TOP; t++) { /* the next largest count after those taken (ties: the smaller label) */
        int best = -1, best_n = 0;
        k = 0;
        cJSON_ArrayForEach(c, labels) {
            int taken = 0;
            for (int j = 0; j < n_top; j++) taken |= top[j] == k;
            if (!taken && c->valueint > best_n) best = k, best_n = c->valueint;
            k++;
        }
        if (best < 0) break;
        top[n_top++] = best;
        if (best >= 0x20 && best < 0x7f) printf(" '%c'", best);
        else printf(" 0x%02x", best);
        printf(" %.1f%%", 100.0 * best_n / total);
    }
}

static void print_line(const cJSON *o) {
    const cJSON *labels = cJSON_GetObjectItem(o, "labels");
    int rows = cJSON_GetObjectItem(o, "labels_per_sample")->valueint;
    printf("%s: %d samples, %d %s features, %d classes; labels", cJSON_GetStringValue(cJSON_GetObjectItem(o, "path")),
           cJSON_GetObjectItem(o, "samples")->valueint, cJSON_GetObjectItem(o, "features")->valueint,
           cJSON_GetStringValue(cJSON_GetObjectItem(o, "dtype")), cJSON_GetObjectItem(o, "classes")->valueint);
    if (rows > 1 || cJSON_GetArraySize(labels) > 32) {
        if (rows > 1) printf(" (%d a sample)", rows);
        print_summary(labels);
    } else {
        const cJSON *c;
        int k = 0;
        cJSON_ArrayForEach(c, labels) printf(" %d:%d", k++, c->valueint);
    }
    printf("\n");
}

static int stats(int n, char **paths, int json) {
    char err[HFL_ERR_LEN];
    if (n < 1) {
        fprintf(stderr, "hfl-data: stats needs at least one PATH (see --help)\n");
        return 2;
    }
    cJSON *all = cJSON_CreateArray();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        hfl_dataset d;
        if (load_any(paths[i], &d, err) != 0) {
            fprintf(stderr, "hfl-data: %s\n", err);
            rc = 1;
            break;
        }
        cJSON *o = describe(paths[i], &d);
        if (!json) print_line(o);
        cJSON_AddItemToArray(all, o);
        hfl_dataset_free(&d);
    }
    if (rc == 0 && json) {
        char *s = cJSON_PrintUnformatted(all);
        printf("%s\n", s);
        free(s);
    }
    cJSON_Delete(all);
    return rc;
}

/* Writes d to DIR/name.<fmt> and adds its description to list. */
static int write_shard(const data_options *o, hfl_data_format f, const char *name, const hfl_dataset *d, cJSON *list,
                       char *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.%s", o->out, name, hfl_data_format_ext(f));
    if (hfl_data_save(path, d, f, err) != 0) return -1;
    cJSON *e = describe(path, d);
    if (!o->json) print_line(e);
    cJSON_AddItemToArray(list, e);
    return 0;
}

/* Deals d's samples out by spec (--num-clients, --seed) and writes each
 * client's share as DIR/client-<i>.<fmt>, described in shards. */
static int write_clients(const data_options *o, hfl_data_format f, const hfl_partition_spec *spec,
                         const hfl_dataset *d, cJSON *shards, char *err) {
    int32_t *owner = hfl_malloc(sizeof(int32_t) * (size_t)d->n);
    int rc = hfl_partition_assign(spec, d->y, d->n, d->n_classes, (int)o->num_clients, (uint64_t)o->seed,
                                  owner, err);
    for (int c = 0; rc == 0 && c < o->num_clients; c++) {
        int *idx = NULL, k = hfl_partition_indices(owner, d->n, c, &idx);
        hfl_dataset part;
        char name[32];
        snprintf(name, sizeof name, "client-%04d", c);
        if (k <= 0) {
            rc = hfl_errf(err, "partition %s gives client %d no samples", o->partition, c);
        } else {
            hfl_dataset_subset(d, idx, k, &part);
            rc = write_shard(o, f, name, &part, shards, err);
            hfl_dataset_free(&part);
        }
        free(idx);
    }
    free(owner);
    return rc;
}

/* The end of split and text: the error, or the shards as JSON with --json. */
static void report_shards(const data_options *o, int rc, const cJSON *shards, const char *err) {
    if (rc != 0) fprintf(stderr, "hfl-data: %s\n", err);
    if (rc == 0 && o->json) {
        char *j = cJSON_PrintUnformatted(shards);
        printf("%s\n", j);
        free(j);
    }
}

static int split(const data_options *o) {
    char err[HFL_ERR_LEN];
    hfl_partition_spec spec;
    hfl_data_format f;
    if (!o->out || o->num_clients < 1) {
        fprintf(stderr, "hfl-data: split needs --out DIR and --num-clients N (see --help)\n");
        return 2;
    }
    if (hfl_partition_parse(o->partition, &spec, err) != 0 || hfl_data_format_parse(o->format, &f, err) != 0)
        return hfl_fail("hfl-data", err, 2);
    hfl_dataset d, test = {0};
    int from_idx = !hfl_data_is_file(o->data);
    if (load_any(o->data, &d, err) != 0 || (from_idx && hfl_fmnist_load(o->data, 0, &test, err) != 0)) {
        hfl_dataset_free(&d);
        fprintf(stderr, "hfl-data: %s\n", err);
        return 1;
    }
    if (hfl_dataset_label_rows(&d) > 1 && spec.kind != HFL_PART_IID) {
        fprintf(stderr, "hfl-data: %s has %d labels per sample: only --partition iid splits it "
                        "(label-skewed partitions need one label per sample)\n", o->data,
                hfl_dataset_label_rows(&d));
        hfl_dataset_free(&d);
        return 2;
    }
    cJSON *shards = cJSON_CreateArray();
    int rc = hfl_mkdirs(o->out, err);
    if (rc == 0) rc = write_clients(o, f, &spec, &d, shards, err);
    if (rc == 0 && from_idx) rc = write_shard(o, f, "test", &test, shards, err);
    report_shards(o, rc, shards, err);
    if (rc == 0 && !o->json)
        fprintf(stderr, "hfl-data: %ld shards of %d samples (partition %s, seed %ld) in %s\n", o->num_clients, d.n,
                o->partition, o->seed, o->out);
    cJSON_Delete(shards);
    hfl_dataset_free(&d);
    hfl_dataset_free(&test);
    return rc ? 1 : 0;
}

/* hfl-data text (header comment). */
static int text(const data_options *o, int n_files, char **files) {
    char err[HFL_ERR_LEN];
    hfl_data_format f;
    if (!o->out || o->context < 1 || n_files < 1) {
        fprintf(stderr, "hfl-data: text needs --out DIR, --context T and at least one FILE (see --help)\n");
        return 2;
    }
    if (hfl_data_format_parse(o->format, &f, err) != 0) return hfl_fail("hfl-data", err, 2);
    int iid = o->num_clients > 0, rc = hfl_mkdirs(o->out, err);
    hfl_dataset pool = {0}, test = {0};
    cJSON *shards = cJSON_CreateArray();
    for (int i = 0; rc == 0 && i < n_files; i++) {
        size_t len = 0;
        uint8_t *bytes = (uint8_t *)hfl_read_file(files[i], &len, err);
        hfl_dataset tr, te;
        char why[HFL_ERR_LEN], name[32];
        if (!bytes) {
            rc = -1;
        } else if (hfl_text_windows(bytes, len, (int)o->context, o->held_out, &tr, &te, why) != 0) {
            rc = hfl_errf(err, "%s: %s", files[i], why);
        } else {
            hfl_dataset_append(&test, &te);
            snprintf(name, sizeof name, "client-%04d", i);
            if (iid) hfl_dataset_append(&pool, &tr);
            else rc = write_shard(o, f, name, &tr, shards, err);
            hfl_dataset_free(&tr);
            hfl_dataset_free(&te);
        }
        free(bytes);
    }
    if (rc == 0 && iid) {
        hfl_partition_spec spec = {.kind = HFL_PART_IID};
        rc = write_clients(o, f, &spec, &pool, shards, err);
    }
    if (rc == 0 && test.n > 0) rc = write_shard(o, f, "test", &test, shards, err);
    report_shards(o, rc, shards, err);
    if (rc == 0 && !o->json)
        fprintf(stderr, "hfl-data: %d file(s) as %ld client(s) of %ld-byte windows, %d held out, in %s\n",
                n_files, iid ? o->num_clients : (long)n_files, o->context, test.n, o->out);
    cJSON_Delete(shards);
    hfl_dataset_free(&pool);
    hfl_dataset_free(&test);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    data_options o = {0};
    int first, print_config;
    char err[HFL_ERR_LEN];
    if (hfl_options_parse(&data_opts, &argc, &argv, &o, &first, &print_config, err) != 0)
        return hfl_fail("hfl-data", err, 2);
    if (print_config) {
        hfl_options_print(&data_opts, &o);
        return 0;
    }
    const char *cmd = first < argc ? argv[first] : "";
    if (!strcmp(cmd, "split")) {
        if (first + 1 < argc) {
            fprintf(stderr, "hfl-data: unexpected argument '%s' (see --help)\n", argv[first + 1]);
            return 2;
        }
        return split(&o);
    }
    if (!strcmp(cmd, "stats")) return stats(argc - first - 1, argv + first + 1, o.json);
    if (!strcmp(cmd, "text")) return text(&o, argc - first - 1, argv + first + 1);
    if (cmd[0]) fprintf(stderr, "hfl-data: unknown command '%s' (split, stats or text; see --help)\n", cmd);
    else fprintf(stderr, "hfl-data: no command (split, stats or text; see --help)\n");
    return 2;
}
