/* profile.h: device profiles for simulated fleets, and the simulated time of
 * a run.
 *
 * A profile (scenarios/profiles.json; each entry cites its vendor figures)
 * gives a device's memory, its throughput per precision (TFLOPS; 0 where the
 * precision does not run) and its link (uplink and downlink Mbit/s,
 * latency). hfl-sim enforces the memory as the client's budget and, after
 * the run, prices each round in simulated time from what really happened
 * (who took part, the samples each trained, the bytes each moved, the
 * precision each chose) and the profiles alone, so a loaded host reports
 * the same simulated times as an idle one:
 *   download = the round's task bytes / downlink + latency
 *   train    = slow x samples trained x 3 x forward FLOPs / (TFLOPS[precision] x
 *              HFL_PROFILE_UTILISATION)   (backward ~ 2x forward; slow: the scenario's
 *              slow-down times its compute_scale;
 *              samples trained: as the client reports, else epochs x its samples)
 *   upload   = the update's bytes / uplink + latency
 * Time is a virtual clock: round r starts when round r-1 ended, and a task
 * drawn at the round's open starts then. A round ends at the latest end of
 * the updates it took, or at its deadline when a drawn client never
 * answered, declined (a real dropout is silent) or missed the deadline in
 * simulated time (virtual_time) and the round did not
 * reach its target of updates (over-selection: it closes at the slowest
 * update it took; the late are not waited for). A late update folded into a
 * later round (--late fold, --async) ends at its task's start in its own
 * round plus its task's time; a client --async draws mid-round starts when
 * its previous task ended (it asked for work then). Which updates a round
 * took is what really happened on the host; with the scenario's "pace" the
 * clients send in the simulated order, so the two agree; with
 * "virtual_time" the coordinator takes exactly the updates whose simulated
 * time is within the deadline, whatever the host's speed. The coordinator's
 * aggregation and evaluation are not priced. */
#ifndef HFL_PROFILE_H
#define HFL_PROFILE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "scenarios/scenario.h"

/* The share of peak throughput a small model's training step sustains: an
 * assumption, not a measurement (small GEMMs run far from peak). */
#define HFL_PROFILE_UTILISATION 0.3

typedef struct {
    char name[32];
    uint64_t memory; /* bytes */
    double tflops[3]; /* per hfl_precision: fp32, bf16, fp16 */
    double up_bps, down_bps, latency_s;
} hfl_profile;

/* Each client's profile (out[clients], zeroed for a client without one) from
 * the library at path; -1 with err for a missing or malformed library or an
 * unknown profile. */
int hfl_profiles_resolve(const char *path, const hfl_scenario *sc, hfl_profile *out, char *err);

/* Client i's factor on simulated training time: its "slow" times the
 * scenario's compute_scale. */
double hfl_profile_slowdown(const hfl_scenario *sc, int i);

/* The samples per second a profile trains the model at in a precision
 * (slow: the scenario's slow-down factor), as the pricing below counts it. */
double hfl_profile_samples_per_s(const hfl_profile *p, int precision, double slow, const hfl_model_spec *spec);

/* Adds to every round of rep a "sim" object {wall_s, download_s, train_s,
 * upload_s, slowest} and to rep "simulated_s" (their sum), for clients with
 * profiles. */
void hfl_profiles_price(cJSON *rep, const hfl_scenario *sc, const hfl_profile *p, const hfl_model_spec *spec);

#endif
