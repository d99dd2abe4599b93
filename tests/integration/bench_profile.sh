#!/usr/bin/env bash
# bench_profile.sh: bench-gpu-train --profile on the CPU backend reports
# the same step as hfl-client --plan --trial-step --profile: for the mlp at
# batch 8 both count the same ops per optimizer step, op by op (each a
# staged step of the same plan; the client's is its own program, the oracle
# here), no host waits, and the rows add up to the total.
# usage: bench_profile.sh BENCH_GPU_TRAIN HFL_CLIENT
set -u
bench=$1 client=$2
tmp=$(mktemp -d /tmp/hfl-bench-profile-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$bench" --device cpu --model mlp --batch 8 --steps 3 --profile --json > "$tmp/bench.json" 2> "$tmp/err" ||
  { echo "FAIL bench-gpu-train --profile exited $?"; cat "$tmp/err"; exit 1; }
"$client" --plan --device cpu --model mlp --batch 8 --memory-budget 64M --trial-step --profile --json \
  --state-dir "$tmp/state" > "$tmp/client.json" 2> "$tmp/err" ||
  { echo "FAIL hfl-client --trial-step --profile exited $?"; cat "$tmp/err"; exit 1; }
"$bench" --device cpu --model mlp --batch 8 --steps 3 --profile > "$tmp/bench.txt" 2>&1 || exit 1
python3 - "$tmp/bench.json" "$tmp/client.json" "$tmp/bench.txt" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["profile"]
t = open(sys.argv[2]).read()
c = json.loads(t[t.index("{"):])["profile"]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
bo = {o["name"]: o["count"] for o in b["ops"]}
co = {o["name"]: o["count"] for o in c["ops"]}
check(b["steps"] == 10 and b["clock"] == "cpu clock", "10 profiled steps on the cpu clock: %s, %s" % (b["steps"], b["clock"]))
check(bo == co, "the same ops per step as hfl-client's trial step: %s against %s" % (bo, co))
check(b["syncs_per_step"] == 0, "no host waits: %s" % b["syncs_per_step"])
check(abs(sum(bo.values()) - b["ops_per_step"]) < 1e-9, "the rows add up to ops_per_step %s" % b["ops_per_step"])
check(b["ms_per_step"] > 0 and all(o["ms"] >= 0 for o in b["ops"]), "timed: %s ms per step" % b["ms_per_step"])
text = open(sys.argv[3]).read()
check("profile of 10 steps (cpu clock)" in text and "ops_per_step %.1f" % b["ops_per_step"] in text,
      "the text form prints the table and its totals")
sys.exit(1 if fails else 0)
PY
