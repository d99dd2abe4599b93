#!/bin/sh
# secagg.sh: what secure aggregation costs, side by side in one script on one
# machine (proto/secagg.h).
#
# usage: bench/secagg.sh [BUILD_DIR [ROUNDS]]   (defaults: build 3)
#
# Three fleets, each run four ways with the same seed and a fixed clip of 1:
# the plain round with fp32 and with int8 updates (the coordinator clips),
# --client-clip (the clients clip and round to the ring, in the clear) and
# --secure-agg (the same, masked: keys, shares, masked input, unmasking).
#   10 clients:  10 client processes, all drawn every round (6,000 samples each);
#   100:     scenarios/large.json, 1,000 client processes, 100 drawn a round
#            (60 samples each), 80 needed at the deadline;
#   100-all: 100 client processes, all drawn every round (600 samples each);
#   1000:    scenarios/large.json with all 1,000 drawn every round (60 samples
#            each), 800 needed at the deadline (not in the default list: on a
#            2-core machine it takes minutes a mode; BENCH_FLEETS=1000).
# Per mode: the round wall time (the mean over the rounds after the first,
# which also waits for the fleet to start), the CPU time of the whole run
# (coordinator and clients, start-up included) over its rounds, the bytes up and down per drawn
# client (its update message, and for secure aggregation the protocol's own
# messages both ways), the bytes up per model element, and the ring's bits
# (secure modes) against the bits the sum needs: ceil(log2(2 M + 1)) for the
# stated bound M, and the issue's ceil(log2(clients x levels)) with 2^F
# levels a side of the clip (F = 24). Prints a markdown table and, on
# stderr, one JSON line per mode and the secure rounds' phase times.
# BENCH_FLEETS (10 100) and BENCH_MODES (fp32 int8 client-clip secure-agg)
# choose what runs.
set -eu
build=${1:-build}
rounds=${2:-3}
sim="$build/scenarios/hfl-sim"
if [ ! -x "$sim" ]; then
    echo "secagg.sh: $sim not found; build first (meson setup $build && ninja -C $build)" >&2
    exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fleets=${BENCH_FLEETS:-10 100 100-all}
modes=${BENCH_MODES:-fp32 int8 client-clip secure-agg}
for fleet in $fleets; do
    for mode in $modes; do
        python3 - "$fleet" "$mode" "$rounds" "$out/$fleet-$mode.json" <<'PY'
import json, sys
fleet, mode, rounds, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if fleet in ("100", "1000"):
    s = json.load(open("scenarios/large.json"))
    if fleet == "1000": s.update({"clients_per_round": 1000, "min_quorum": 800, "deadline_s": 900})
else:
    n = 10 if fleet == "10" else 100
    s = {"model": "mlp", "clients": n, "clients_per_round": n, "local_epochs": 1, "batch": 32, "lr": 0.05,
         "partition": "iid", "precision": "fp32", "seed": 1, "deadline_s": 300}
s.update({"name": f"secagg-bench-{fleet}-{mode}", "rounds": rounds, "clip_norm": 1,
          "codec": "fp32" if mode == "fp32" else "int8"})
if mode == "client-clip": s["client_clip"] = True
if mode == "secure-agg": s["secure_agg"] = True
json.dump(s, open(path, "w"))
PY
        /usr/bin/time -f "%U %S" -o "$out/$fleet-$mode.cpu" "$sim" "$out/$fleet-$mode.json" --out "$out/$fleet-$mode" \
            --quiet --timeout 1800 >/dev/null
    done
done
python3 - "$out" "$fleets" "$modes" <<'PY'
import json, math, sys
out, fleets, modes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("| fleet | mode | round wall | x int8 | CPU a round, all processes | up per client | down per client | up bytes per element | ring bits | bits the bound needs | ceil(log2(clients x 2^25)) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for fleet in fleets:
    walls = {}
    for mode in modes:
        r = json.load(open(f"{out}/{fleet}-{mode}/report.json"))
        rs = r["rounds"]
        assert all(x["status"] == "ok" for x in rs), f"{fleet} {mode}: a round failed"
        later = rs[1:] if len(rs) > 1 else rs
        wall = sum(x["wall_s"] for x in later) / len(later)
        walls[mode] = wall
        n = r["params"]
        drawn = sum(x["clients"] for x in later)
        up = sum(x["bytes_up"] for x in later) / drawn
        down = sum(x["bytes_down"] for x in later) / drawn
        sa = later[-1].get("secure_agg")
        if sa and "phase_s" in sa:
            print(f"{fleet} {mode}: phases " + ", ".join(f"{k} {sum(x['secure_agg']['phase_s'][k] for x in later) / len(later):.2f} s"
                  for k in sa["phase_s"]) + f", unmasking {sum(x['secure_agg']['unmask_compute_s'] for x in later) / len(later):.3f} s", file=sys.stderr)
        bits = need = issue = "-"
        if sa:
            up += sum(x["secure_agg"]["protocol_bytes_up"] for x in later) / drawn
            down += sum(x["secure_agg"]["protocol_bytes_down"] for x in later) / drawn
            bits = sa["bits"]
            need = math.ceil(math.log2(2 * sa["bound"] + 1))
            issue = math.ceil(math.log2(sa["members"] * 2 ** 25))
        ratio = wall / walls["int8"] if "int8" in walls else float("nan")
        cpu = sum(float(x) for x in open(f"{out}/{fleet}-{mode}.cpu").read().split()[-2:]) / len(rs)
        print(f"| {fleet} | {mode} | {wall:.2f} s | {ratio:.2f} | {cpu:.1f} s | {up / 1e6:.3f} MB | {down / 1e6:.3f} MB | "
              f"{up / n:.3f} | {bits} | {need} | {issue} |")
        print(json.dumps({"drawn": fleet, "mode": mode, "round_wall_s": wall, "up_bytes": up, "down_bytes": down,
                          "up_bytes_per_element": up / n, "ring_bits": bits}), file=sys.stderr)
PY
