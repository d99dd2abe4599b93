#!/usr/bin/env bash
# keep_optimizer.sh: --keep-local-optimizer end to end through hfl-sim (the
# coordinator's flag, the task's keep_optimizer, hfl-client's trainer). Three
# clients hold 40 Fashion-MNIST images each and take 5 AdamW steps a round
# for 3 rounds, all drawn. Oracles, none of them hfl's arithmetic:
#  - with the flag every client says, in rounds 2 and 3, that its optimizer
#    went on from the round before's state; without it none does;
#  - keeping AdamW's moments and step count changes the model (the final
#    hashes differ);
#  - SGD without momentum has no state: kept or not, the same model to the
#    bit, so the flag touches the optimizer's state and nothing else (data
#    order, learning rates, weights);
#  - SGD with momentum 0.9 has one: kept, another model.
# Skips (77) without Fashion-MNIST. Usage: keep_optimizer.sh HFL_SIM
set -euo pipefail
sim=$1
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || { echo "SKIP: Fashion-MNIST not installed"; exit 77; }
tmp=$(mktemp -d /tmp/hfl-test-keep-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 "$(dirname "$0")/fmnist_shards.py" /usr/share/datasets/fashion-mnist "$tmp/shards" 3 40 500
variant() { # NAME OPTIMIZER MOMENTUM KEEP
  cat > "$tmp/$1.json" <<JSON
{"name": "$1", "model": "mlp", "clients": 3, "clients_per_round": 3, "rounds": 3, "local_steps": 5,
 "batch": 16, "lr": 0.01, "optimizer": "$2", "momentum": $3, "keep_local_optimizer": $4,
 "partition": "iid", "codec": "fp32", "precision": "fp32", "seed": 3}
JSON
  "$sim" "$tmp/$1.json" --shards "$tmp/shards" --out "$tmp/$1" >/dev/null
}
variant adam adamw 0 false
variant adamk adamw 0 true
variant sgd sgd 0 false
variant sgdk sgd 0 true
variant mom sgd 0.9 false
variant momk sgd 0.9 true
python3 - "$tmp" <<'PY'
import glob, json, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
h = {d: json.load(open(f"{tmp}/{d}/report.json"))["final_model_sha256"] for d in
     ("adam", "adamk", "sgd", "sgdk", "mom", "momk")}
for d in h:
    logs = [open(f).read() for f in sorted(glob.glob(f"{tmp}/{d}/client-*.log"))]
    said = [sum(f"round {r}: the local optimizer went on from round {r - 1}'s state" in l for r in (2, 3))
            for l in logs]
    want = [2] * 3 if d.endswith("k") else [0] * 3
    check(said == want, f"{d}: rounds 2 and 3 said to go on from the round before's state, per client: {said}")
    rep = json.load(open(f"{tmp}/{d}/report.json"))
    check(rep.get("keep_local_optimizer") is d.endswith("k") and rep.get("complete") is True,
          f"{d}: the report says keep_local_optimizer {rep.get('keep_local_optimizer')}, run complete")
check(h["adam"] != h["adamk"], f"AdamW's moments kept: another model ({h['adam'][:8]}, {h['adamk'][:8]})")
check(h["sgd"] == h["sgdk"], f"SGD without momentum has no state: the same model kept or not ({h['sgd'][:8]}, {h['sgdk'][:8]})")
check(h["mom"] != h["momk"], f"SGD's momentum kept: another model ({h['mom'][:8]}, {h['momk'][:8]})")
sys.exit(1 if fails else 0)
PY
