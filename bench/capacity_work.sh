#!/bin/sh
# capacity_work.sh: capacity-aware local work against fixed local epochs on
# scenarios/edge-fleet.json, measured as simulated time to the quickstart's
# final test accuracy (issue 11's must-show: at least 1.5x less).
#
# usage: bench/capacity_work.sh [BUILD_DIR [ROUNDS [SEEDS...]]]
#        (defaults: build 40 4 5 6)
#
# The target is measured in the same script: scenarios/quickstart.json is run
# first and its final test accuracy is the bar. Then, for each seed, the edge
# fleet is run twice, with "local_work" "epochs" and "capacity", everything
# else equal (its 20% dropout included). Simulated time to the target is the
# sum of the rounds' simulated wall times up to and including the first round
# whose test accuracy reaches it. Prints a table and one JSON line at the end.
set -eu
build=${1:-build}
rounds=${2:-40}
shift 2 2>/dev/null || shift $#
seeds=${*:-4 5 6}
sim="$build/scenarios/hfl-sim"
if [ ! -x "$sim" ]; then
    echo "capacity_work.sh: $sim not found; build first (meson setup $build && ninja -C $build)" >&2
    exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "capacity_work.sh: quickstart for the target accuracy" >&2
"$sim" scenarios/quickstart.json --out "$out/quickstart" --quiet
for seed in $seeds; do
    for mode in epochs capacity; do
        python3 - "$seed" "$mode" "$rounds" "$PWD/scenarios/profiles.json" > "$out/edge-$seed-$mode.json" <<'PY'
import json, sys
s = json.load(open("scenarios/edge-fleet.json"))
s["seed"], s["local_work"], s["rounds"] = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
s["profile_library"] = sys.argv[4]
print(json.dumps(s))
PY
        echo "capacity_work.sh: edge fleet, seed $seed, local_work $mode, $rounds rounds" >&2
        "$sim" "$out/edge-$seed-$mode.json" --out "$out/run-$seed-$mode" --quiet
    done
done
python3 - "$out" "$seeds" <<'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2].split()
target = json.load(open(out + "/quickstart/report.json"))["final_test_acc"]
def reach(path):
    r, t = json.load(open(path)), 0.0
    for x in r["rounds"]:
        t += x["simulated"]["wall_s"]
        if x["test_acc"] is not None and x["test_acc"] >= target:
            return round(t, 1), x["round"], r["final_test_acc"]
    return None, None, r["final_test_acc"]
rows = []
print(f"target: the quickstart's final test accuracy, {target:.4f}")
print("| seed | fixed epochs | capacity-aware | ratio | final acc (epochs / capacity) |")
print("|---|---|---|---|---|")
for s in seeds:
    e, c = reach(f"{out}/run-{s}-epochs/report.json"), reach(f"{out}/run-{s}-capacity/report.json")
    ratio = (e[0] / c[0]) if e[0] and c[0] else None
    fmt = lambda v: f"{v[0]} s (round {v[1]})" if v[0] else "not reached"
    print(f"| {s} | {fmt(e)} | {fmt(c)} | {f'{ratio:.2f}x' if ratio else '-'} | {e[2]:.4f} / {c[2]:.4f} |")
    rows.append({"seed": int(s), "epochs_s": e[0], "epochs_round": e[1], "capacity_s": c[0],
                 "capacity_round": c[1], "ratio": ratio, "final_epochs": e[2], "final_capacity": c[2]})
print(json.dumps({"target": target, "runs": rows}))
PY
