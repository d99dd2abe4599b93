#!/bin/sh
# conv_chunk.sh: the cnn's training step with its conv layers unfolding one
# sample at a time against the whole batch at once (hfl-client --conv-chunk
# 1 and 4096; plan/chooser.h, CONV CHUNK), side by side in one run: the ops
# per step, the time per step and the measured peak of each, and their
# ratio. On the CPU the default is one sample (the whole batch's columns run
# out of cache); on a GPU the whole batch (launches cost more than memory).
# One JSON line per run and a "ratio" line per batch (whole-batch ms over
# one-sample ms: above 1, the whole batch is slower). Runs are interleaved,
# REPS of each, and the fastest counts. Builds nothing.
#
# usage: bench/conv_chunk.sh [CLIENT [DEVICE [REPS]]]
#   (defaults: build/client/hfl-client cpu 3; batches 32, 128 and 512)
set -eu
client=${1:-build/client/hfl-client}
device=${2:-cpu}
reps=${3:-3}
[ -x "$client" ] || { echo "conv_chunk.sh: $client not found" >&2; exit 1; }
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for batch in 32 128 512; do
  for r in $(seq "$reps"); do
    for chunk in 1 4096; do
      # a fresh state dir each run: no run learns from another's measurements
      "$client" --plan --trial-step --profile --json --model cnn --batch "$batch" --memory-budget 2G \
        --device "$device" --conv-chunk "$chunk" --state-dir "$tmp/s-$batch-$r-$chunk" \
        >"$tmp/$batch-$chunk-$r.json" 2>/dev/null ||
        { echo "conv_chunk.sh: batch $batch chunk $chunk failed" >&2; exit 1; }
    done
  done
  "$py" - "$tmp" "$batch" "$reps" <<'PY'
import json, sys
tmp, batch, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
best = {}
for chunk in (1, 4096):
    runs = [json.load(open("%s/%d-%d-%d.json" % (tmp, batch, chunk, r))) for r in range(1, reps + 1)]
    for d in runs:
        print(json.dumps({"batch": batch, "conv_chunk": d["plan"].get("conv_chunk"),
                          "ops_per_step": d["profile"]["ops_per_step"],
                          "ms_per_step": round(d["profile"]["ms_per_step"], 3),
                          "measured_peak_mib": round(d["measured_peak_bytes"] / 2**20, 2)}))
    best[chunk] = min(runs, key=lambda d: d["profile"]["ms_per_step"])
one, whole = best[1], best[4096]
print(json.dumps({"ratio": "whole/one", "batch": batch,
                  "ops_per_step": [one["profile"]["ops_per_step"], whole["profile"]["ops_per_step"]],
                  "ms": [round(one["profile"]["ms_per_step"], 2), round(whole["profile"]["ms_per_step"], 2)],
                  "ms_whole_over_one": round(whole["profile"]["ms_per_step"] / one["profile"]["ms_per_step"], 3),
                  "peak_whole_over_one": round(whole["measured_peak_bytes"] / one["measured_peak_bytes"], 3)}))
PY
done
