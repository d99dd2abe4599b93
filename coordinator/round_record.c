/* round_record.c: the round log's field tables (round_record.h), and the
 * log as a growing array of records. Each row is a member under its own
 * name; every figure is a double (cJSON writes an integer-valued one as an
 * integer, as it always did, and a NaN as null: the evaluation's figures of
 * a diverged model read back as NaN, wire.h). */
#include "coordinator/round_record.h"

#include <float.h>
#include <stddef.h>
#include <stdlib.h>

/* A required field; one written when `flag` is set; one written as null
 * without it; a string (of 1 to its buffer's length less one bytes). */
#define TEXT(T, m) {#m, S, 0, 0, sizeof(((T *)0)->m) - 1, offsetof(T, m), sizeof(((T *)0)->m), 0, NULL, NULL, 0, 0}
#define ROW(T, m, kind) {#m, kind, 0, -DBL_MAX, DBL_MAX, offsetof(T, m), sizeof(((T *)0)->m), 0, NULL, NULL, 0, 0}
#define WHEN(T, m, kind, flag) \
    {#m, kind, 1, -DBL_MAX, DBL_MAX, offsetof(T, m), sizeof(((T *)0)->m), offsetof(T, flag), NULL, NULL, 0, 0}
#define NULLABLE(T, m, flag) \
    {#m, D, HFL_WIRE_NULLABLE, -DBL_MAX, DBL_MAX, offsetof(T, m), sizeof(double), offsetof(T, flag), NULL, NULL, 0, 0}
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define D HFL_WIRE_NUM
#define S HFL_WIRE_STR

#define P round_participant
static const hfl_wire_field participant_fields[] = {
    ROW(P, client, D),   TEXT(P, name),      TEXT(P, status),
    WHEN(P, samples, D, ok), WHEN(P, weight, D, ok),
    WHEN(P, norm, D, has_norm), WHEN(P, clipped, HFL_WIRE_BOOL, has_norm),
    WHEN(P, loss, D, ok), WHEN(P, train_s, D, ok), WHEN(P, bytes_up, D, ok),
    WHEN(P, measured_peak_bytes, D, has_measured_peak_bytes), WHEN(P, trained_samples, D, has_trained_samples),
    WHEN(P, lr_first, D, has_lr), WHEN(P, lr_last, D, has_lr),
    WHEN(P, sim_s, D, has_sim_s),
    ROW(P, bytes_down, D), ROW(P, downloads, D),
    WHEN(P, resent, D, has_resent), WHEN(P, local_steps, D, has_local_steps),
    WHEN(P, mid_round, HFL_WIRE_BOOL, has_mid_round),
};
static const hfl_wire_msg participant_wire = {0, "round.participants", participant_fields, N(participant_fields), 0};

#define F round_folded
static const hfl_wire_field folded_fields[] = {
    ROW(F, client, D), TEXT(F, name),   ROW(F, from_round, D), ROW(F, samples, D),
    ROW(F, weight, D), ROW(F, norm, D),   ROW(F, bytes_up, D),   WHEN(F, trained_samples, D, has_trained_samples),
};
static const hfl_wire_msg folded_wire = {0, "round.folded", folded_fields, N(folded_fields), 0};

static const hfl_wire_field dp_fields[] = {
    ROW(round_dp, noise_multiplier, D), ROW(round_dp, update_multiplier, D), ROW(round_dp, count_sigma, D),
    ROW(round_dp, sampling_rate, D),    ROW(round_dp, epsilon, D),           ROW(round_dp, delta, D),
    ROW(round_dp, order, D),            ROW(round_dp, rounds_charged, D),
};
static const hfl_wire_msg dp_wire = {0, "round.dp", dp_fields, N(dp_fields), 0};

#define H round_secagg_phases
static const hfl_wire_field phase_fields[] = {
    WHEN(H, keys, D, masked), WHEN(H, shares, D, masked), ROW(H, input, D), ROW(H, unmask, D),
};
static const hfl_wire_msg phase_wire = {0, "round.secure_agg.phase_s", phase_fields, N(phase_fields), 0};

#define A round_secagg
static const hfl_wire_field secagg_fields[] = {
    TEXT(A, mode), ROW(A, bits, D), ROW(A, word_bits, D), ROW(A, shift, D), ROW(A, bound, D),
    ROW(A, elements, D), ROW(A, input_bytes, D), ROW(A, members, D),
    ROW(A, protocol_bytes_up, D), ROW(A, protocol_bytes_down, D),
    WHEN(A, degree, D, masked), WHEN(A, threshold, D, masked), WHEN(A, keys, D, masked),
    WHEN(A, shared, D, masked), WHEN(A, unmasked, D, masked),
    ROW(A, inputs, D),
    {"phase_s", HFL_WIRE_OBJ, 0, 0, 0, offsetof(A, phase_s), sizeof(H), 0, &phase_wire, NULL, 0, 0},
    ROW(A, unmask_compute_s, D),
    {"dropped", HFL_WIRE_LIST, 0, 0, 1e9, offsetof(A, dropped), sizeof(int64_t), 0, NULL, NULL, 0,
     HFL_RECORD_MAX_ROWS},
};
static const hfl_wire_msg secagg_wire = {0, "round.secure_agg", secagg_fields, N(secagg_fields), 0};

#define R round_record
static const hfl_wire_field record_fields[] = {
    ROW(R, round, D), TEXT(R, status),
    {"reason", S, 1, 0, sizeof(((R *)0)->reason) - 1, offsetof(R, reason), sizeof(((R *)0)->reason),
     offsetof(R, has_reason), NULL, NULL, 0, 0},
    NULLABLE(R, test_acc, has_test), NULLABLE(R, test_loss, has_test),
    ROW(R, train_loss, D), ROW(R, clients, D), WHEN(R, late_folded, D, has_late_folded),
    ROW(R, selected, D), ROW(R, target, D), ROW(R, quorum, D), ROW(R, eligible, D), ROW(R, samples, D),
    ROW(R, bytes_up, D), ROW(R, bytes_down, D), ROW(R, tasks_delta, D), ROW(R, tasks_held, D),
    ROW(R, tasks_resent, D), ROW(R, tasks_short, D), ROW(R, benched, D), ROW(R, wall_s, D), ROW(R, version, D),
    NULLABLE(R, clip_norm, has_clip_norm),
    ROW(R, clipped, D), ROW(R, refused, D), ROW(R, declined, D),
    WHEN(R, missed_deadline, D, has_missed_deadline), WHEN(R, rule_kept, D, has_rule_kept),
    NULLABLE(R, update_norm_median, has_norms), NULLABLE(R, update_norm_max, has_norms),
    {"secure_agg", HFL_WIRE_OBJ, 1, 0, 0, offsetof(R, secure_agg), sizeof(A), offsetof(R, has_secure_agg),
     &secagg_wire, NULL, 0, 0},
    {"dp", HFL_WIRE_OBJ, 1, 0, 0, offsetof(R, dp), sizeof(round_dp), offsetof(R, has_dp), &dp_wire, NULL, 0, 0},
    TEXT(R, model_sha256),
    {"participants", HFL_WIRE_LIST, 0, 0, 0, offsetof(R, participants), sizeof(P), 0, &participant_wire, NULL, 0,
     HFL_RECORD_MAX_ROWS},
    {"folded", HFL_WIRE_LIST, 1, 0, 0, offsetof(R, folded), sizeof(F), offsetof(R, has_folded), &folded_wire, NULL, 0,
     HFL_RECORD_MAX_ROWS},
    {"test_bpb", D, HFL_WIRE_NAN_NULL, -DBL_MAX, DBL_MAX, offsetof(R, test_bpb), sizeof(double),
     offsetof(R, has_test_bpb), NULL, NULL, 0, 0},
};
static const hfl_wire_msg record_wire = {0, "round", record_fields, N(record_fields), 0};

cJSON *round_record_json(const round_record *r) { return hfl_wire_encode(&record_wire, r); }

void round_log_add(round_log *l, round_record *r) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = hfl_realloc(l->v, sizeof *l->v * (size_t)l->cap);
    }
    l->v[l->n++] = *r;
    *r = (round_record){0};
}

cJSON *round_log_json(const round_log *l) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < l->n; i++) {
        cJSON *o = round_record_json(&l->v[i]);
        if (!o || !cJSON_AddItemToArray(a, o)) {
            cJSON_Delete(o);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

int round_log_read(const cJSON *arr, round_log *out, char *err) {
    if (!cJSON_IsArray(arr)) return hfl_errf(err, "its round log is malformed");
    const cJSON *o;
    cJSON_ArrayForEach(o, arr) {
        round_record r = {0};
        char why[HFL_ERR_LEN];
        int rc = hfl_wire_decode(&record_wire, o, &r, why);
        round_log_add(out, &r); /* freed with the log on failure, lists decoded in part too */
        if (rc != 0) {
            hfl_errf(err, "its round log is malformed: entry %d: %s", out->n, why);
            round_log_free(out);
            return -1;
        }
    }
    return 0;
}

void round_log_free(round_log *l) {
    for (int i = 0; i < l->n; i++) hfl_wire_free(&record_wire, &l->v[i]); /* its lists */
    free(l->v);
    *l = (round_log){0};
}
