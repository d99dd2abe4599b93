#!/bin/sh
# large_fleet.sh: scenarios/large.json (1,000 client processes) on this
# machine: the whole run's peak memory and the coordinator's.
#
# usage: bench/large_fleet.sh [BUILD_DIR [SCENARIO]]   (defaults: build scenarios/large.json)
#
# The whole run's memory is the machine's used memory (MemTotal -
# MemAvailable, sampled every 0.5 s) over what was used just before the run;
# the coordinator's peak RSS comes from its report. Prints a summary and one
# JSON line at the end.
set -eu
build=${1:-build}
scenario=${2:-scenarios/large.json}
sim="$build/scenarios/hfl-sim"
if [ ! -x "$sim" ]; then
    echo "large_fleet.sh: $sim not found; build first (meson setup $build && ninja -C $build)" >&2
    exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"; [ -n "${watch:-}" ] && kill "$watch" 2>/dev/null || true' EXIT
used() { awk '/^MemTotal:/ {t = $2} /^MemAvailable:/ {a = $2} END {printf "%.0f\n", (t - a) * 1024}' /proc/meminfo; }
base=$(used)
(while :; do used >> "$out/mem"; sleep 0.5; done) &
watch=$!
t0=$(date +%s.%N)
"$sim" "$scenario" --out "$out/run" --timeout 1800
t1=$(date +%s.%N)
kill "$watch"
watch=
python3 - "$out" "$base" "$t0" "$t1" <<'PY'
import json, sys
out, base, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
peak = max(int(l) for l in open(out + "/mem") if l.strip()) - base
r = json.load(open(out + "/run/report.json"))
rounds = r["rounds"]
clients = r["clients"]
first_open = min(json.loads(l)["t"] for l in open(out + "/run/events.jsonl") if '"round_open"' in l)
res = {"clients": len(clients), "rounds_ok": sum(x["status"] == "ok" for x in rounds),
       "final_test_acc": r["final_test_acc"], "run_s": round(t1 - t0, 1), "first_round_open_s": round(first_open, 1),
       "round_wall_s": [round(x["wall_s"], 2) for x in rounds],
       "whole_run_peak_bytes": peak, "coordinator_peak_rss_bytes": r.get("coordinator_peak_rss_bytes"),
       "client_peak_rss_bytes_median": (lambda v: v[len(v) // 2] if v else None)(sorted(
           json.loads(l)["peak_bytes"] for l in open(out + "/run/events.jsonl") if '"event":"update"' in l)),
       "final_model_sha256": r["final_model_sha256"]}
print(f"{res['clients']} clients, {res['rounds_ok']} rounds ok, final accuracy {res['final_test_acc']:.4f}")
print(f"run {res['run_s']} s (first round opened at {res['first_round_open_s']} s); rounds {res['round_wall_s']} s")
print(f"whole run peak memory {peak / 2**30:.2f} GiB over the machine's use before it; "
      f"coordinator peak RSS {res['coordinator_peak_rss_bytes'] / 2**20:.0f} MiB; "
      f"a client's peak RSS (median) {res['client_peak_rss_bytes_median'] / 2**20:.1f} MiB")
print(json.dumps(res))
PY
