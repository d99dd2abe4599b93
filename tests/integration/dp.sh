#!/usr/bin/env bash
# dp.sh: client-level differential privacy end to end (coordinator/dp.h).
#   noise      4 clients, 1 round, fixed clip 1, --max-share 1: the same run
#              with and without --dp-noise 0.5, centrally and under secure
#              aggregation (each client adding its share). The two models
#              differ by the noise over the round's weight sum W, so the
#              difference's standard deviation over the model's 199,210
#              coordinates must be z w_max C / W within 3% (the estimate's own
#              spread is 0.2%), w_max and W read from the report's weights:
#              the noise is there, calibrated to the clip, and whole when
#              shared among the clients.
#   budget     --dp-noise 2 with a --dp-epsilon between what 2 and 3 rounds
#              cost (q = 1: the Gaussian's RDP T a / (2 z^2), converted here
#              as Canonne et al. 2020 do): the run stops before round 3 with
#              one line; each round's reported epsilon matches this script's
#              own within 1%. With --dp-epsilon 8 alone and adaptive
#              clipping, the derived multiplier spends 8 within 1% over the
#              planned rounds, and the update's multiplier exceeds it (Andrew
#              et al.'s split).
#   resume     2 clients, 3 rounds, --dp-noise 2 (clip 0.001: the noise, z C
#              on each coordinate, would make the model diverge at clip 1),
#              --state-dir: the coordinator
#              kills itself (HFL_TEST_CRASH) before round 2's model moves and
#              is started again with the same arguments. The continued run
#              must report what an uninterrupted one would: rounds charged 1,
#              2, 3 and epsilon after 3 rounds within 1% of this script's own
#              (q = 1, as in budget), not the 2 rounds this process saw;
#              /metrics' hfl_dp_epsilon and the event log's last round say
#              the report's epsilon.
# Skips (77) without Fashion-MNIST. Usage: dp.sh HFL_SIM MODE
set -euo pipefail
sim=$1 mode=$2
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-dp-XXXXXX)
[ -n "${HFL_KEEP_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT

scenario() { # NAME JSON-FIELDS (", key: value" pairs that override the base)
  python3 - "$tmp/$1.json" "$1" "{${2#, }}" <<'PY'
import json, sys
s = {"name": sys.argv[2], "model": "mlp", "clients": 4, "rounds": 1, "partition": "iid", "codec": "fp32", "seed": 5,
     "batch": 32, "lr": 0.05, "precision": "fp32", "clip_norm": 1, "max_share": 1, "deadline_s": 60}
s.update(json.loads(sys.argv[3]))
json.dump(s, open(sys.argv[1], "w"))
PY
  "$sim" "$tmp/$1.json" --out "$tmp/$1" --quiet || true
  test -s "$tmp/$1/report.json" || { echo "FAIL: $1 wrote no report"; tail -5 "$tmp/$1/coordinator.log"; exit 1; }
}

case $mode in
noise)
  scenario plain ''
  scenario central ', "dp_noise": 0.5'
  scenario masked ', "secure_agg": true'
  scenario masked-dp ', "secure_agg": true, "dp_noise": 0.5'
  python3 - "$tmp" <<'PY'
import json, math, struct, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
def weights(path):  # safetensors: 8-byte header length, JSON header, float32 data
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    data = b[8 + n:]
    return struct.unpack(f"<{len(data) // 4}f", data)
for base, dp in (("plain", "central"), ("masked", "masked-dp")):
    rb, rd = (json.load(open(f"{tmp}/{d}/report.json")) for d in (base, dp))
    check(rb["rounds"][0]["status"] == "ok" and rd["rounds"][0]["status"] == "ok", f"{base}, {dp}: round 1 aggregated")
    w = [p["weight"] for p in rd["rounds"][0]["participants"] if p["status"] == "ok"]
    z = rd["rounds"][0]["dp"]["update_multiplier"]
    want = z * max(w) * 1.0 / sum(w)
    a, b = weights(f"{tmp}/{base}/model.safetensors"), weights(f"{tmp}/{dp}/model.safetensors")
    d = [x - y for x, y in zip(a, b)]
    mean = sum(d) / len(d)
    std = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
    check(abs(std / want - 1) < 0.03 and abs(mean) < 5 * want / math.sqrt(len(d)),
          f"{dp}: the noise's standard deviation {std:.6g} (mean {mean:.2g}), z w_max C / W = {want:.6g}")
    check(rd["dp_epsilon"] > 0 and rd["rounds"][0]["dp"]["epsilon"] == rd["dp_epsilon"], f"{dp}: epsilon {rd['dp_epsilon']:.4g} reported")
sys.exit(1 if fails else 0)
PY
  ;;
budget)
  read -r eps2 eps3 < <(python3 - <<'PY'
import math
def eps(T, z=2.0, delta=1e-5):  # q = 1: RDP T a / (2 z^2) at the accountant's orders
    orders = [1.1 + 0.1 * i for i in range(99)] + list(range(11, 65)) + [128, 256, 512]
    return max(0, min(T * a / (2 * z * z) + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1) for a in orders))
print(eps(2), eps(3))
PY
)
  budget=$(python3 -c "print(($eps2 + $eps3) / 2)")
  scenario stop ", \"rounds\": 4, \"dp_noise\": 2, \"dp_epsilon\": $budget, \"dp_delta\": 1e-5"
  scenario derive ', "rounds": 2, "clip_norm": "adaptive:1", "dp_epsilon": 8, "dp_delta": 1e-5'
  python3 - "$tmp" "$eps2" "$budget" <<'PY'
import json, math, sys
tmp, eps2, budget = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
r = json.load(open(f"{tmp}/stop/report.json"))
check(len(r["rounds"]) == 2 and "privacy budget spent" in r.get("stopped", ""),
      f"budget {budget:.4g}: {len(r['rounds'])} rounds, stopped: {r.get('stopped')}")
check(abs(r["rounds"][-1]["dp"]["epsilon"] / eps2 - 1) < 0.01 and r["rounds"][-1]["dp"]["epsilon"] <= budget,
      f"epsilon after 2 rounds {r['rounds'][-1]['dp']['epsilon']:.5g}, this script's {eps2:.5g}")
log = open(f"{tmp}/stop/coordinator.log").read().splitlines()
check(sum("privacy budget spent" in l for l in log) == 1, "one line says the budget is spent")
d = json.load(open(f"{tmp}/derive/report.json"))
dp = d["rounds"][-1]["dp"]
check(all(x["status"] == "ok" for x in d["rounds"]) and 7.92 <= d["dp_epsilon"] <= 8,
      f"--dp-epsilon 8: multiplier {dp['noise_multiplier']:.4g} spends {d['dp_epsilon']:.4g} over 2 rounds")
check(dp["update_multiplier"] > dp["noise_multiplier"] and dp["count_sigma"] >= dp["noise_multiplier"],
      f"adaptive clipping: update multiplier {dp['update_multiplier']:.4g}, count sigma {dp['count_sigma']:.4g}")
sys.exit(1 if fails else 0)
PY
  ;;
resume)
  bin=$(dirname "$sim")/..
  coord=$bin/coordinator/hfl-coordinator client=$bin/client/hfl-client
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; [ -n "${HFL_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
  mport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  start_coord() { # LISTEN [CRASH-POINT]
    HFL_TEST_CRASH="${2:-}" "$coord" --insecure --listen "$1" --ready-file "$tmp/url" --rounds 3 --clients-per-round 2 \
      --clip-norm 0.001 --dp-noise 2 --seed 5 --deadline 120 --state-dir "$tmp/state" --report "$tmp/report.json" \
      --log "$tmp/events.jsonl" --metrics "127.0.0.1:$mport" --linger 3 --quiet >>"$tmp/coordinator.log" 2>&1 &
    cpid=$!
    for _ in $(seq 300); do [ -s "$tmp/url" ] && break; sleep 0.1; done
    test -s "$tmp/url" || { echo "FAIL: the coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
  }
  start_coord tcp://127.0.0.1:0 aggregate:2
  url=$(cat "$tmp/url")
  for i in 0 1; do
    "$client" --coordinator "$url" --insecure --client-index $i --num-clients 30 --precision fp32 --quiet \
      >"$tmp/client-$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0; wait $cpid || rc=$?
  [ $rc = 137 ] || { echo "FAIL: the coordinator exited $rc, not killed at aggregate:2"; tail -5 "$tmp/coordinator.log"; exit 1; }
  rm -f "$tmp/url"
  start_coord "$url"
  pids+=($cpid)
  python3 - "$mport" >"$tmp/metrics.txt" <<'PY' # /metrics once round 3 is done (the coordinator lingers 3 s)
import sys, time, urllib.request
for _ in range(1200):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=2).read().decode()
        if "\nhfl_rounds_total 3\n" in text:
            print(text)
            break
    except OSError:
        pass
    time.sleep(0.05)
PY
  rc=0; wait $cpid || rc=$?
  [ $rc = 0 ] || { echo "FAIL: the continued coordinator exited $rc"; tail -5 "$tmp/coordinator.log"; exit 1; }
  python3 - "$tmp/report.json" "$tmp/metrics.txt" "$tmp/events.jsonl" <<'PY'
import json, math, re, sys
def eps(T, z=2.0, delta=1e-5):  # q = 1: RDP T a / (2 z^2) at the accountant's orders, as in budget
    orders = [1.1 + 0.1 * i for i in range(99)] + list(range(11, 65)) + [128, 256, 512]
    return max(0, min(T * a / (2 * z * z) + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1) for a in orders))
r = json.load(open(sys.argv[1]))
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
charged = [e.get("dp", {}).get("rounds_charged") for e in r["rounds"]]
check(r.get("restarts") == 1 and charged == [1, 2, 3], f"restarts {r.get('restarts')}, rounds charged {charged}")
check(abs(r["dp_epsilon"] / eps(3) - 1) < 0.01, f"epsilon {r['dp_epsilon']:.5g}, uninterrupted 3 rounds {eps(3):.5g} "
      f"(2 rounds: {eps(2):.5g})")
m = re.search(r"^hfl_dp_epsilon (\S+)$", open(sys.argv[2]).read(), re.M)
check(m is not None and float(m.group(1)) == r["dp_epsilon"], f"/metrics hfl_dp_epsilon {m and m.group(1)}")
logged = [e["dp"]["epsilon"] for e in map(json.loads, open(sys.argv[3])) if e.get("event") == "round" and "dp" in e]
check(logged[-1:] == [r["dp_epsilon"]], f"the event log's last round's epsilon {logged[-1:]}")
sys.exit(1 if fails else 0)
PY
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
