#!/usr/bin/env bash
# speed_predict.sh: the chooser's predicted samples/s against measured, per
# model and batch, on this machine (docs/benchmarks.md, "Predicted against
# measured samples/s").
#
# One state dir for every row. Its first use calibrates the device (the
# GEMM rates and the per-op costs of plan/op_cost.h, timed on synthetic
# shapes only, none a model's) and every later row reads the kept costs: no
# prediction is learnt from any model's timings, its own or another's.
# Per model and batch B (fp32 forced, so that every row is the same
# configuration kind; --memory-budget 2G, so that B x 1 without
# checkpointing is chosen):
#   predicted  hfl-client --plan --json: the chosen row's predicted_samples_per_s
#              and the speed model that gave it (per-op, or flops: the fallback)
#   measured   hfl-client --plan --trial-step --profile --json, REPS times: the
#              profile's ms_per_step (TRIAL_PROFILE_STEPS warm optimizer steps,
#              client/trial.c), as B / ms_per_step; the best of REPS (load from
#              elsewhere only slows a step, and the calibration keeps each
#              timing's fastest too) and the median
# Prints a markdown table with predicted/measured for the best and the
# median, `uptime` before and after, and how many rows are within 30%.
# Usage: bench/speed_predict.sh [BUILD_DIR] [BATCHES] [REPS] [MODELS...]
set -euo pipefail
build=${1:-build}
batches=${2:-8 32 128}
reps=${3:-3}
shift $(( $# > 3 ? 3 : $# ))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(mlp cnn scenarios/models/gpt-kjv.json)
client="$build/client/hfl-client"
# One BLAS thread, as the tests and the other CPU benchmarks here run (a
# second thread on this 2-core host shares a core with whatever else runs)
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
tmp=$(mktemp -d /tmp/hfl-speed-predict-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
state="$tmp/state"
mkdir -p "$state"
echo "uptime before: $(uptime)"
echo "OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS"
run() { "$client" --plan --precision fp32 --memory-budget 2G --state-dir "$state" "$@" --json; }
t0=$(date +%s.%N)
run --model "${models[0]}" --batch 8 > /dev/null
t1=$(date +%s.%N)
echo "first use (calibration included): $(python3 -c "print(f'{$t1 - $t0:.2f}')") s"
for i in "${!models[@]}"; do
  for b in $batches; do
    run --model "${models[$i]}" --batch "$b" > "$tmp/p$i-$b.json"
    for r in $(seq 1 "$reps"); do
      run --model "${models[$i]}" --batch "$b" --trial-step --profile > "$tmp/m$i-$b-$r.json"
    done
  done
done
echo "uptime after: $(uptime)"
python3 - "$tmp" "$batches" "$reps" "${models[@]}" <<'PY'
import json, statistics, sys
tmp, batches, reps, models = sys.argv[1], [int(b) for b in sys.argv[2].split()], int(sys.argv[3]), sys.argv[4:]
name = lambda m: m.split("/")[-1].removesuffix(".json")
print("| model | batch | chosen | speed model | predicted samples/s | measured best | measured median "
      "| predicted/best | predicted/median |")
print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
within = {"best": 0, "median": 0}
n = 0
for i, m in enumerate(models):
    for b in batches:
        p = json.load(open(f"{tmp}/p{i}-{b}.json"))
        c = next(r for r in p["candidates"] if r["chosen"])
        rates = []
        for r in range(1, reps + 1):
            t = json.load(open(f"{tmp}/m{i}-{b}-{r}.json"))
            prof = t["profile"]
            step = c["step_batch"]
            rates.append(step / (prof["ms_per_step"] / 1e3))
        best, med = max(rates), statistics.median(rates)
        pred = c["predicted_samples_per_s"]
        rb, rm = pred / best, pred / med
        n += 1
        within["best"] += abs(rb - 1) <= 0.3
        within["median"] += abs(rm - 1) <= 0.3
        chosen = f"{c['batch']} x {c['accumulation_steps']} {c['precision']} {c['checkpoint']}"
        print(f"| {name(m)} | {b} | {chosen} | {c['speed_model']} | {pred:.0f} | {best:.0f} | {med:.0f} "
              f"| {rb:.2f} | {rm:.2f} |")
print(f"within 30%: {within['best']} of {n} against the best, {within['median']} of {n} against the median")
PY
