#!/usr/bin/env bash
# async_pace.sh: FedBuff (--async) and paced simulated clients end to end
# (README.md, The programs). Skips (77) without Fashion-MNIST.
#
# 1. Pacing: four profiled clients (A100, T4, Jetson Orin, laptop) in one
#    synchronous round with "pace" 10. The oracle prices each client's task
#    here, from profiles.json and the bytes in the report, by the formula in
#    scenarios/profile.h (download + training at the profile's rate +
#    upload): every update must reach the coordinator (its event log's
#    times) no sooner than 10x its task's price after the round opened, and
#    the clients whose paced time exceeds the host's real training time (the
#    slow devices: pacing cannot make the host faster than itself) must
#    arrive last, in the order of their prices; the report's simulated wall
#    is the slowest price.
# 2. FedBuff: the same fleet, K = 2, C = 3, 8 rounds, unpaced (paced, the
#    slow devices can arrive after the run ends, and nothing folds). Every round closes with
#    at least K updates (fresh + folded); no draw leaves more than C tasks
#    out; some updates fold in late and some clients are drawn mid-round;
#    each folded update weighs samples x round(65536 / sqrt(1 + tau)) / 65536
#    over the fleet's samples (FedBuff's staleness weight, computed here),
#    tau in [1, 8]; the simulated clock adds up.
# Usage: async_pace.sh HFL_SIM PROFILES_JSON
set -euo pipefail
sim=$1
profiles=$2
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-async-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
common='"model": "mlp", "clients": 4, "partition": "iid", "codec": "int8", "seed": 9, "batch": 64,
 "precision": "fp32", "profiles": {"a100-80g": 1, "t4-16g": 1, "jetson-orin-8g": 1, "laptop-cpu": 1},
 "profile_library": "'"$profiles"'"'
cat > "$tmp/pace.json" <<JSON
{"name": "pace", "rounds": 1, "pace": 10, $common}
JSON
cat > "$tmp/async.json" <<JSON
{"name": "async", "rounds": 8, "clients_per_round": 2, "min_quorum": 1, "async_concurrency": 3, $common}
JSON
"$sim" "$tmp/pace.json" --out "$tmp/pace" --quiet
"$sim" "$tmp/async.json" --out "$tmp/async" --quiet
python3 - "$tmp" "$profiles" <<'PY'
import json, math, sys
tmp, lib = sys.argv[1], json.load(open(sys.argv[2]))
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
# mlp's forward FLOPs per sample: 2 in out + out per dense layer, out per ReLU
FWD = sum(2 * i * o + o for i, o in ((784, 200), (200, 200), (200, 10))) + 200 + 200
def task_time(prof, down_bytes, up_bytes, trained):
    p = lib[prof]
    rate = p["tflops"]["fp32"] * 1e12 * 0.3 / (3 * FWD)  # HFL_PROFILE_UTILISATION 0.3, backward 2x forward
    lat = p["latency_ms"] / 1000
    return (down_bytes / (p["downlink_mbit"] * 1e6 / 8) + lat + trained / rate +
            up_bytes / (p["uplink_mbit"] * 1e6 / 8) + lat)

# 1. pacing
r = json.load(open(tmp + "/pace/report.json"))
prof = {c["name"]: c["profile"] for c in r["clients"]}
rnd = r["rounds"][0]
parts = [p for p in rnd["participants"] if p["status"] == "ok"]
per_task = rnd["bytes_down"] / len(rnd["participants"])
want = {p["name"]: task_time(prof[p["name"]], per_task, p["bytes_up"], p.get("trained_samples", p["samples"]))
        for p in parts}
ids = {p["client"]: p["name"] for p in parts}
events = [json.loads(l) for l in open(tmp + "/pace/events.jsonl")]
opened = [e["t"] for e in events if e["event"] == "round_open"][0]
arrived = {ids[e["client"]]: e["t"] - opened for e in events if e["event"] == "update"}
order = sorted(arrived, key=arrived.get)
for n in order:
    check(arrived[n] >= 10 * want[n], f"{n} ({prof[n]}): arrived {arrived[n]:.3f} s after the open, paced {10 * want[n]:.3f} s")
real = max(p["train_s"] for p in parts)
paced = sorted((n for n in want if 10 * want[n] > real + 0.3), key=want.get)
check(len(paced) >= 2 and order[len(order) - len(paced):] == paced,
      f"the paced clients {paced} (over {real:.2f} s of real training) arrive last, in simulated order: {order}")
check(rnd["wall_s"] >= max(want.values()), f"the round lasted {rnd['wall_s']:.3f} s, the slowest task {max(want.values()):.3f} s")
sim = rnd["simulated"]["wall_s"]
check(abs(sim - max(want.values())) <= 1e-6 * sim, f"simulated wall {sim:.6f} s against {max(want.values()):.6f} s priced here")

# 2. FedBuff
a = json.load(open(tmp + "/async/report.json"))
check(a["complete"] and a["rounds_aggregated"] == 8 and a["async_concurrency"] == 3,
      f"async run complete: {a['rounds_aggregated']} aggregations, concurrency {a.get('async_concurrency')}")
fleet = sum(c["samples"] for c in a["clients"])
folded = mid = 0
for x in a["rounds"]:
    got = x["clients"] + x.get("late_folded", 0)
    check(x["status"] == "ok" and got >= 2, f"round {x['round']}: {x['clients']} fresh + {x.get('late_folded', 0)} late >= K = 2")
    mid += sum(bool(p.get("mid_round")) for p in x["participants"])
    for f in x.get("folded", []):
        folded += 1
        tau = x["round"] - f["from_round"]
        q = round(65536 / math.sqrt(1 + tau)) / 65536
        w = f["samples"] * q / fleet
        check(1 <= tau <= 8 and abs(f["weight"] - w) <= 1e-12,
              f"round {x['round']}: {f['name']} from round {f['from_round']} weighs {f['weight']:.9f}, FedBuff's {w:.9f}")
outs = [json.loads(l)["outstanding"] for l in open(tmp + "/async/events.jsonl") if '"event":"drawn"' in l]
check(all(o <= 3 for o in outs), f"tasks out after each mid-round draw: {outs} (C = 3)")
check(folded > 0 and mid > 0, f"{folded} late updates folded in, {mid} mid-round draws")
total = sum(x["simulated"]["wall_s"] for x in a["rounds"])
check(abs(a["simulated_s"] - total) <= 1e-9 * total and total > 0, f"simulated {a['simulated_s']:.3f} s = the rounds' sum")
check(a["final_test_acc"] > 0.7, f"final accuracy {a['final_test_acc']:.4f} > 0.7")
sys.exit(1 if fails else 0)
PY
