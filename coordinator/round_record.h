/* round_record.h: the round log's entry as typed structs, described by
 * field tables (proto/wire.h) that render it to JSON in one place and read a
 * saved log back.
 *
 * The round engine fills a round_record when a round closes (rounds.c),
 * differential privacy its `dp` (dp_round.c), secure aggregation its
 * `secure_agg` (secagg.c) and the evaluation its test figures (evaluate.c);
 * the report, the event log and the state dir render it with
 * round_record_json, and the registry and --metrics read its members. Each
 * member is named after its JSON key; a has_ flag beside an optional one
 * says whether it is written (test_acc, test_loss, clip_norm and the norms
 * are written as null without it), and the tables' row order is the order
 * keys are written in, byte for byte the log earlier runs saved. */
#ifndef HFL_ROUND_RECORD_H
#define HFL_ROUND_RECORD_H

#include "proto/wire.h"
#include "util/util.h"

/* The most rows a saved round's list may hold (participants, folded, the
 * dropped ids): a round draws from at most COORD_MAX_CLIENTS (coord.h). */
#define HFL_RECORD_MAX_ROWS 16384

/* A drawn client's part in the round (participants[], in draw order). */
typedef struct {
    double client;
    char name[64];
    char status[16]; /* ok, refused, declined, missed_deadline, dropped, left, late, missing */
    int ok;          /* an accepted update: samples, weight, loss, train_s, bytes_up */
    double samples, weight;
    int has_norm; /* and its norm (and clipped), not under secure aggregation */
    double norm;
    int clipped;
    double loss, train_s, bytes_up;
    int has_measured_peak_bytes, has_trained_samples, has_lr, has_sim_s, has_resent, has_local_steps, has_mid_round;
    double measured_peak_bytes, trained_samples, lr_first, lr_last, sim_s;
    double bytes_down, downloads, resent, local_steps;
    int mid_round;
} round_participant;

/* A late update folded into the round (folded[]: --late fold, --async). */
typedef struct {
    double client;
    char name[64];
    double from_round, samples, weight, norm, bytes_up;
    int has_trained_samples;
    double trained_samples;
} round_folded;

/* The privacy the round spent (dp, under differential privacy). */
typedef struct {
    double noise_multiplier, update_multiplier, count_sigma, sampling_rate, epsilon, delta, order, rounds_charged;
} round_dp;

/* Secure aggregation's phases in seconds (masked: all four; clear: input, unmask). */
typedef struct {
    int masked;
    double keys, shares, input, unmask;
} round_secagg_phases;

typedef struct {
    char mode[8]; /* masked or clear */
    double bits, word_bits, shift, bound, elements, input_bytes, members, protocol_bytes_up, protocol_bytes_down;
    int masked; /* degree .. unmasked */
    double degree, threshold, keys, shared, unmasked;
    double inputs;
    round_secagg_phases phase_s;
    double unmask_compute_s;
    hfl_wire_list dropped; /* int64_t client ids: shared (masked) or drawn (clear), sent no input */
} round_secagg;

typedef struct {
    double round;
    char status[8]; /* ok or failed */
    int has_reason;
    char reason[HFL_ERR_LEN + 64];
    int has_test; /* test_acc and test_loss known: null until evaluated */
    double test_acc, test_loss;
    double train_loss, clients;
    int has_late_folded;
    double late_folded;
    double selected, target, quorum, eligible, samples, bytes_up, bytes_down;
    double tasks_delta, tasks_held, tasks_resent, tasks_short, benched, wall_s, version;
    int has_clip_norm;
    double clip_norm;
    double clipped, refused, declined;
    int has_missed_deadline, has_rule_kept;
    double missed_deadline, rule_kept;
    int has_norms; /* update_norm_median and _max: null under secure aggregation */
    double update_norm_median, update_norm_max;
    int has_secure_agg, has_dp;
    round_secagg secure_agg;
    round_dp dp;
    char model_sha256[65];
    hfl_wire_list participants; /* round_participant */
    int has_folded;
    hfl_wire_list folded; /* round_folded */
    int has_test_bpb;     /* a language model's test loss in bits per byte */
    double test_bpb;
} round_record;

/* The round log: every closed round, in order. */
typedef struct {
    round_record *v;
    int n, cap;
} round_log;

cJSON *round_record_json(const round_record *r); /* NULL when out of memory */
void round_log_add(round_log *l, round_record *r); /* takes r's lists */
cJSON *round_log_json(const round_log *l);        /* the whole log as an array */
/* A saved log (round_log_json's array) into out (zeroed by the caller): 0, or
 * -1 with err naming the round and field; out is then empty. */
int round_log_read(const cJSON *arr, round_log *out, char *err);
void round_log_free(round_log *l);

#endif
