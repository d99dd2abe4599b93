#!/usr/bin/env bash
# lm_pretrain.sh: scenarios/lm-pretrain.json against the same model trained
# centrally in PyTorch on the same windows for the same number of samples
# (issue 13's must-show; bench/lm_central.py). Cuts the King James Bible into
# its 66 books (scripts/kjv-books) and one client per book (hfl-data text),
# runs the federated scenario, counts the samples its clients trained (the
# report's per-round sums times local epochs), trains the PyTorch model for
# that many with the scenario's batch, learning rate and momentum, and prints
# both held-out losses (nats and bits per byte) and their ratio as JSON.
# Usage: bench/lm_pretrain.sh [BUILD_DIR] [SCENARIO]
set -euo pipefail
build=${1:-build}
scenario=${2:-scenarios/lm-pretrain.json}
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/hfl-lm-pretrain-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
scripts/kjv-books "$tmp/books" >&2
model=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['model'])" "$scenario")
T=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['input'][0])" "$model")
"$build/data/hfl-data" text --out "$tmp/shards" --context "$T" "$tmp"/books/*.txt >/dev/null
"$build/scenarios/hfl-sim" "$scenario" --shards "$tmp/shards" --out "$tmp/run" >&2
read -r samples batch lr momentum hfl_loss < <($py - "$tmp/run/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
n = sum(x["samples"] for x in r["rounds"] if x["status"] == "ok") * r["local_epochs"]
last = [x for x in r["rounds"] if x["status"] == "ok"][-1]
print(n, r["batch"], r["lr"], r["momentum"], last["test_loss"])
PY
)
central=$($py bench/lm_central.py "$model" "$tmp/shards" --samples "$samples" --batch "$batch" --lr "$lr" \
          --momentum "$momentum")
$py - "$central" "$hfl_loss" "$samples" "$tmp/run/report.json" <<'PY'
import json, math, sys
c, hfl, n = json.loads(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
r = json.load(open(sys.argv[4]))
print(json.dumps({"bench": "lm_pretrain", "samples": n, "rounds": len(r["rounds"]),
                  "hfl_test_loss": hfl, "hfl_test_bpb": hfl / math.log(2),
                  "central_test_loss": c["central_test_loss"], "central_test_bpb": c["central_test_bpb"],
                  "hfl_over_central": hfl / c["central_test_loss"], "hfl_wall_s": r["wall_s"],
                  "central_wall_s": c["wall_s"]}))
PY
