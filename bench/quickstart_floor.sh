#!/bin/sh
# quickstart_floor.sh: the quickstart's wall time against its compute floor,
# in one run on the same cores.
#
# usage: bench/quickstart_floor.sh [BUILD_DIR [SCENARIO]]   (defaults: build scenarios/quickstart.json)
#
# 1. hfl-sim runs the scenario (real processes over loopback TLS); the report
#    gives the samples trained and each round's wall time (open to close).
# 2. The floor: mlp samples trained back to back at the same batch, split
#    over as many single-threaded trainers as the machine has cores
#    (bench-train-mlp --staged: one OpenBLAS thread each, staged as every
#    client trains, cycling through their halves of the 60,000 samples so
#    the data streams from memory as the clients' does), run at once.
#    floor_s = samples / (their samples/s
#    together). This host's speed drifts, so the floor is measured before and
#    after the run and the faster (the lower floor, the harder target) kept.
# Prints both, the ratios, and one JSON line at the end.
set -eu
build=${1:-build}
scenario=${2:-scenarios/quickstart.json}
sim="$build/scenarios/hfl-sim"
bench="$build/bench/bench-train-mlp"
for exe in "$sim" "$bench"; do
    if [ ! -x "$exe" ]; then
        echo "quickstart_floor.sh: $exe not found; build first (meson setup $build && ninja -C $build)" >&2
        exit 1
    fi
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cores=$(nproc)
batch=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("batch", 32))' "$scenario")
steps=${FLOOR_STEPS:-6000} # per trainer: enough for a steady rate

floor() { # $1: tag, $2: distinct batches per trainer
    i=0
    while [ $i -lt "$cores" ]; do
        OPENBLAS_NUM_THREADS=1 "$bench" --batch "$batch" --steps "$steps" --threads 1 --staged --pool "$2" --json \
            > "$out/floor.$1.$i" &
        i=$((i + 1))
    done
    wait
}

# each trainer cycles through its half of the data, as the clients' shares
# (60,000 samples) do not stay in cache either
pool=$(python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(max(1, 60000 // int(sys.argv[2]) // s.get("batch", 32)))' "$scenario" "$cores")
floor a "$pool"
t0=$(date +%s.%N)
"$sim" "$scenario" --out "$out/run" --quiet
t1=$(date +%s.%N)
floor b "$pool"
python3 - "$out" "$cores" "$t0" "$t1" <<'PY'
import glob, json, sys
out, cores, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
r = json.load(open(out + "/run/report.json"))
samples = sum(x["samples"] for x in r["rounds"])
# from the first round's opening to the last one's publication (its evaluation done)
ev = [json.loads(l) for l in open(out + "/run/events.jsonl")]
rounds_s = max(e["t"] for e in ev if e["event"] == "round") - min(e["t"] for e in ev if e["event"] == "round_open")
rate = {t: sum(json.load(open(f))["samples_per_s"] for f in glob.glob(f"{out}/floor.{t}.*")) for t in "ab"}
floor = samples / max(rate.values())
run = t1 - t0
print(f"samples trained       {samples}")
print(f"compute floor         {floor:7.2f} s  ({cores} trainers together: {rate['a']:.0f} samples/s before "
      f"the run, {rate['b']:.0f} after; the faster kept)")
print(f"rounds (open->last)   {rounds_s:7.2f} s  {rounds_s / floor:5.2f}x the floor")
print(f"whole run (hfl-sim)   {run:7.2f} s  {run / floor:5.2f}x the floor (start-up, PKI and data included)")
print(json.dumps({"samples": samples, "floor_s": round(floor, 3),
                  "floor_samples_per_s": [round(rate["a"]), round(rate["b"])], "rounds_s": round(rounds_s, 3),
                  "run_s": round(run, 3), "rounds_ratio": round(rounds_s / floor, 3),
                  "run_ratio": round(run / floor, 3), "cores": cores}))
PY
