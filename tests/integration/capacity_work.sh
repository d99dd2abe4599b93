#!/usr/bin/env bash
# capacity_work.sh: capacity-aware local work end to end (README.md, The programs). Two
# clients with equal IID shares, on a T4 and an A100 profile (8.1 and 19.5
# TFLOPS fp32), run one round with "local_work": "capacity": hfl-sim gives
# each its profile's speed, the coordinator sizes each client's steps by it,
# and each client trains exactly those steps. The report's participants must
# show local_steps in the ratio of the speeds (within rounding) and
# trained_samples of at most local_steps x batch and more than (local_steps -
# epochs begun) x batch. With "epochs" no client gets local_steps and each
# trains its share once. Skips (77) without Fashion-MNIST.
# Usage: capacity_work.sh HFL_SIM PROFILES_JSON
set -euo pipefail
sim=$1
profiles=$2
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-capacity-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for work in capacity epochs; do
  cat > "$tmp/$work.json" <<JSON
{"name": "cap", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "seed": 5,
 "batch": 32, "profiles": {"t4-16g": 1, "a100-80g": 1}, "profile_library": "$profiles",
 "precision": "fp32", "local_work": "$work"}
JSON
  "$sim" "$tmp/$work.json" --out "$tmp/$work" --quiet
done
python3 - "$tmp" "$profiles" <<'PY'
import json, math, sys
tmp, lib = sys.argv[1], json.load(open(sys.argv[2]))
prof = lib.get("profiles", lib)
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
cap = json.load(open(tmp + "/capacity/report.json"))
names = {c["name"]: c["profile"] for c in cap["clients"]}
parts = cap["rounds"][0]["participants"]
steps = {p["name"]: p.get("local_steps") for p in parts}
trained = {p["name"]: p.get("trained_samples") for p in parts}
samples = {p["name"]: p.get("samples") for p in parts}
check(all(steps.values()) and all(trained.values()), f"capacity: every client got local_steps and reported trained_samples: {steps} {trained}")
if all(steps.values()) and all(trained.values()):
    t4 = [n for n in names if names[n] == "t4-16g"][0]
    a100 = [n for n in names if names[n] == "a100-80g"][0]
    ratio = prof["a100-80g"]["tflops"]["fp32"] / prof["t4-16g"]["tflops"]["fp32"]
    check(abs(steps[a100] - ratio * steps[t4]) <= ratio + 1,
          f"steps {steps[a100]} (A100) and {steps[t4]} (T4) in the speed ratio {ratio:.3f}")
    for n in steps:
        crossed = math.ceil(trained[n] / samples[n])  # epochs begun
        check(trained[n] <= steps[n] * 32 and trained[n] > (steps[n] - crossed) * 32,
              f"{n}: {trained[n]} samples trained in {steps[n]} steps of at most 32 over {crossed} epoch(s)")
ep = json.load(open(tmp + "/epochs/report.json"))
eparts = ep["rounds"][0]["participants"]
check(all("local_steps" not in p and p.get("trained_samples") == p.get("samples") for p in eparts),
      "epochs: no local_steps, each client trained its share once")
sys.exit(1 if fails else 0)
PY
