#!/usr/bin/env bash
# local_steps.sh: local work in optimizer steps and the run's learning-rate
# schedule, end to end through hfl-sim (coordinator --local-steps and
# --lr-schedule, the task's local_steps and lr_* fields, hfl-client's loop).
# Three clients hold 40 Fashion-MNIST images each (shards written here) and
# take 5 steps of 16 a round, so each cycles through its data (16, 16, 8,
# then 16, 16 again: 72 rows a round); the schedule is cosine:2:0.1 over
# 3 rounds x 5 = 15 steps. Oracles computed here, not by hfl: every update
# trained those 72 rows; its first and last step's rates are the formula's
# at steps 5 (r - 1) and 5 (r - 1) + 4 (warmup 2: peak (t + 1) / 2; then
# 0.1 + 0.9 (1 + cos(pi (t - 2) / 13)) / 2 of the peak); the report names
# the schedule; the held-out loss falls; and the same run with the constant
# rate ends on another model (the schedule reached the trainer).
# Skips (77) without Fashion-MNIST. Usage: local_steps.sh HFL_SIM
set -euo pipefail
sim=$1
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || { echo "SKIP: Fashion-MNIST not installed"; exit 77; }
tmp=$(mktemp -d /tmp/hfl-test-steps-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The shards: Fashion-MNIST's first 120 training images as 3 clients of 40,
# its first 500 test images as the test set (fmnist_shards.py).
python3 "$(dirname "$0")/fmnist_shards.py" /usr/share/datasets/fashion-mnist "$tmp/shards" 3 40 500
cat > "$tmp/steps.json" <<'JSON'
{"name": "steps", "model": "mlp", "clients": 3, "clients_per_round": 3, "rounds": 3, "local_steps": 5,
 "lr_schedule": "cosine:2:0.1", "batch": 16, "lr": 0.1, "partition": "iid", "codec": "fp32",
 "precision": "fp32", "seed": 3}
JSON
sed 's/"lr_schedule": "cosine:2:0.1", //' "$tmp/steps.json" > "$tmp/constant.json"
grep -qv lr_schedule "$tmp/constant.json"
"$sim" "$tmp/steps.json" --shards "$tmp/shards" --out "$tmp/a" --quiet
"$sim" "$tmp/constant.json" --shards "$tmp/shards" --out "$tmp/b" --quiet
python3 - "$tmp/a/report.json" "$tmp/b/report.json" <<'PY'
import json, math, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
H, B, n, peak, warmup, total, floor = 5, 16, 40, 0.1, 2, 15, 0.1
# rows a round: the batches of one pass over 40 (16, 16, 8: an epoch's last
# step is its tail, as in an epoch-based round), cycled for H steps
sizes = [min(B, n - i) for i in range(0, n, B)]
rows = sum(sizes[k % len(sizes)] for k in range(H))
def lr(t):
    if t < warmup: return peak * (t + 1) / warmup
    p = min(1.0, (t - warmup) / (total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))
check(a["local_steps"] == H and a["lr_schedule"] == "cosine:2:0.1", "report: local_steps %s, lr_schedule %s" % (a["local_steps"], a["lr_schedule"]))
check(b["local_steps"] == H and b["lr_schedule"] == "constant", "constant run's report: %s" % b["lr_schedule"])
rounds = [e for e in a["rounds"] if "participants" in e]
check(len(rounds) == 3, "%d rounds with clients" % len(rounds))
for e in rounds:
    r = e["round"]
    got = [c for c in e["participants"] if c.get("status") == "ok"]
    check(len(got) == 3, "round %d: %d updates" % (r, len(got)))
    for c in got:
        check(c.get("trained_samples") == rows, "round %d client %s: trained %s samples (want %d)" % (r, c.get("name"), c.get("trained_samples"), rows))
        want = (lr(H * (r - 1)), lr(H * (r - 1) + H - 1))
        have = (c.get("lr_first", -1), c.get("lr_last", -1))
        check(all(abs(x - y) <= 1e-12 * peak for x, y in zip(have, want)),  # both the same doubles, printed to 17 digits
              "round %d client %s: lr %.6g .. %.6g (want %.6g .. %.6g)" % (r, c.get("name"), *have, *want))
for e in (x for x in b["rounds"] if "participants" in x):
    check(all("lr_last" not in c and c.get("trained_samples") == rows for c in e["participants"]),
          "constant run, round %d: %d steps each, no rates said" % (e["round"], H))
losses = [e["test_loss"] for e in rounds]
check(losses[-1] < losses[0], "held-out loss %s falls" % ["%.4f" % x for x in losses])
check(a["final_model_sha256"] != b["final_model_sha256"], "the schedule changes the model")
sys.exit(1 if fails else 0)
PY
