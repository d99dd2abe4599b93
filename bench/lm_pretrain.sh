#!/usr/bin/env bash
# lm_pretrain.sh: scenarios/lm-pretrain.json against the same model trained
# centrally in PyTorch on the same windows for the same number of samples
# (the language model's requirement; bench/lm_central.py). Cuts the King James Bible into
# its 66 books (scripts/kjv-books) and one client per book (hfl-data text),
# runs the federated scenario, counts the samples its clients trained (the
# report's per-round sums times local epochs), trains the PyTorch model with
# the scenario's batch, learning rate and momentum, and prints each run's
# held-out loss (nats and bits per byte) beside the central one at the same
# number of samples, and their ratio, as JSON lines.
# VARIANT (any number): K:ROUNDS[:SERVER_OPT] runs the scenario with K
# clients per round for ROUNDS rounds (and that server optimizer) instead of
# as written; the central model is trained once, to the largest total, and
# evaluated at each run's total on the way (lm_central.py --at).
# Usage: bench/lm_pretrain.sh [BUILD_DIR] [SCENARIO] [VARIANT...]
set -euo pipefail
build=${1:-build}
scenario=${2:-scenarios/lm-pretrain.json}
shift $(( $# > 2 ? 2 : $# ))
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(as-written)
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/hfl-lm-pretrain-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
scripts/kjv-books "$tmp/books" >&2
model=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['model'])" "$scenario")
T=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['input'][0])" "$model")
"$build/data/hfl-data" text --out "$tmp/shards" --context "$T" "$tmp"/books/*.txt >/dev/null
i=0
for v in "${variants[@]}"; do
  $py - "$scenario" "$v" "$PWD" "$tmp/s$i.json" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
s["model"] = os.path.join(sys.argv[3], s["model"])
if sys.argv[2] != "as-written":
    f = sys.argv[2].split(":")
    s["clients_per_round"], s["rounds"] = int(f[0]), int(f[1])
    if len(f) > 2:
        s["server_opt"] = ":".join(f[2:])  # fedavgm:1:0.9 keeps its own colons
json.dump(s, open(sys.argv[4], "w"))
PY
  "$build/scenarios/hfl-sim" "$tmp/s$i.json" --shards "$tmp/shards" --out "$tmp/run$i" >&2
  i=$((i + 1))
done
read -r samples batch lr momentum < <($py - "$tmp" "$i" <<'PY'
import json, sys
runs = [json.load(open(f"{sys.argv[1]}/run{k}/report.json")) for k in range(int(sys.argv[2]))]
n = [sum(x["samples"] for x in r["rounds"] if x["status"] == "ok") * r["local_epochs"] for r in runs]
print(",".join(map(str, n)), runs[0]["batch"], runs[0]["lr"], runs[0]["momentum"])
PY
)
top=$(tr , '\n' <<< "$samples" | sort -n | tail -1)
$py bench/lm_central.py "$model" "$tmp/shards" --samples "$top" --at "$samples" --batch "$batch" --lr "$lr" \
    --momentum "$momentum" > "$tmp/central.jsonl"
$py - "$tmp" "$i" "$tmp/central.jsonl" "${variants[@]}" <<'PY'
import json, math, sys
tmp, nruns, lines, variants = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read().split("\n"), sys.argv[4:]
final = json.loads([l for l in lines if l][-1])
points = {c[0]: c[1] for c in final.get("curve", [])}
points[final["samples"]] = final["central_test_loss"]
for k in range(nruns):
    r = json.load(open(f"{tmp}/run{k}/report.json"))
    ok = [x for x in r["rounds"] if x["status"] == "ok"]
    n = sum(x["samples"] for x in ok) * r["local_epochs"]
    at = min(p for p in points if p >= n)  # the first batch boundary reaching n
    hfl, c = ok[-1]["test_loss"], points[at]
    print(json.dumps({"bench": "lm_pretrain", "variant": variants[k], "clients_per_round": r["clients_per_round"],
                      "rounds": len(r["rounds"]), "server_opt": r["server_opt"], "samples": n,
                      "hfl_test_loss": hfl, "hfl_test_bpb": hfl / math.log(2), "central_samples": at,
                      "central_test_loss": c, "central_test_bpb": c / math.log(2), "hfl_over_central": hfl / c,
                      "hfl_wall_s": r["wall_s"], "central_wall_s": final["wall_s"]}))
PY
