#!/bin/sh
# dp_quickstart.sh: the quickstart (scenarios/quickstart.json: 10 clients,
# all drawn, 10 rounds, Dirichlet 0.5) with client-level differential privacy
# at epsilon 1, 4 and 8 (delta 1e-5), against the same run without it
# (coordinator/dp.h).
#
# usage: bench/dp_quickstart.sh [BUILD_DIR [CLIP]]   (defaults: build, the quickstart's adaptive clip)
#
# --dp-epsilon derives the noise multiplier for the 10 rounds at sampling rate
# 1 (every client every round: no amplification). Prints a markdown table:
# the multiplier, the epsilon spent, the final test accuracy.
set -eu
build=${1:-build}
clip=${2:-}
sim="$build/scenarios/hfl-sim"
if [ ! -x "$sim" ]; then
    echo "dp_quickstart.sh: $sim not found; build first" >&2
    exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for eps in none 1 4 8; do
    python3 - "$eps" "$clip" "$out/q-$eps.json" <<'PY'
import json, sys
eps, clip, path = sys.argv[1], sys.argv[2], sys.argv[3]
s = json.load(open("scenarios/quickstart.json"))
s["name"] = f"quickstart-dp-{eps}"
if clip: s["clip_norm"] = float(clip) if clip[0].isdigit() else clip
if eps != "none": s.update({"dp_epsilon": float(eps), "dp_delta": 1e-5})
json.dump(s, open(path, "w"))
PY
    "$sim" "$out/q-$eps.json" --out "$out/q-$eps" --quiet --timeout 1800 >/dev/null
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| epsilon (delta 1e-5) | noise multiplier z | update multiplier | epsilon spent | final test accuracy |")
print("|---|---|---|---|---|")
for eps in ("none", "1", "4", "8"):
    r = json.load(open(f"{out}/q-{eps}/report.json"))
    dp = r["rounds"][-1].get("dp")
    acc = r["rounds"][-1]["test_acc"]
    if dp:
        print(f"| {eps} | {dp['noise_multiplier']:.3g} | {dp['update_multiplier']:.3g} | {r['dp_epsilon']:.3g} | {acc:.4f} |")
    else:
        print(f"| no DP | - | - | - | {acc:.4f} |")
PY
