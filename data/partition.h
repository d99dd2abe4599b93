/* partition.h: splitting a labelled dataset across clients.
 *
 * Specs: "iid" (shuffle, equal shares), "dirichlet:<alpha>" (per class,
 * client proportions drawn from Dirichlet(alpha); Hsu et al. 2019),
 * "shards:<k>" (sort by label, cut into n_clients*k shards, k per client;
 * McMahan et al. 2017). The output is one owner per sample, so the parts are
 * disjoint and cover the dataset by construction; the same (spec, seed,
 * labels, n_clients) always gives the same owners. */
#ifndef HFL_PARTITION_H
#define HFL_PARTITION_H

#include <stdint.h>

typedef enum { HFL_PART_IID = 1, HFL_PART_DIRICHLET = 2, HFL_PART_SHARDS = 3 } hfl_partition_kind;

typedef struct {
    hfl_partition_kind kind;
    double alpha; /* dirichlet */
    int shards;   /* shards per client */
} hfl_partition_spec;

int hfl_partition_parse(const char *text, hfl_partition_spec *spec, char *err);

/* owner[i] in [0, n_clients) for each of the n samples. Every client gets at
 * least one sample when n >= n_clients. Returns -1 with err on impossible requests. */
int hfl_partition_assign(const hfl_partition_spec *spec, const int32_t *labels, int n,
                         int n_classes, int n_clients, uint64_t seed, int32_t *owner, char *err);

/* Indices (ascending) of the samples owned by `client`; returns the count, *idx malloc'd. */
int hfl_partition_indices(const int32_t *owner, int n, int client, int **idx);

#endif
