#!/usr/bin/env bash
# free_shrink.sh: a client without --memory-budget follows its free memory
# (client/replan.c; kernels/device.h, hfl_host_free_bytes). Its cgroup is a
# tree written here (HFL_TEST_CGROUP_ROOT stands in for /sys/fs/cgroup; the
# limit sits at the root of both hierarchies, which every process's cgroup
# path reaches). mlp, batch 256, 2 rounds, 2 clients; the coordinator waits
# for both (--min-clients 2), so the limit changes after client-0 planned
# and before round 1's task, with no race:
#   shrink: 8 MiB of room at start-up (the plan: 1 x 256, about 5 MiB
#           predicted), 3 MiB before round 1 (in which it does not fit).
#           client-0 re-plans under 3 MiB (micro-batches that accumulate to
#           256), verifies, trains both rounds without a breach, and the
#           report lists the one re-plan with the 3 MiB it was made for.
#           Round 2 reads 3 MiB plus its own arena: no second re-plan.
#           client-1 reads this machine's free memory and never re-plans.
#   unfit:  64 KiB before round 1, 3 rounds: client-0 sits rounds 1 and 2
#           out (declined, one line each naming the smallest budget that
#           would work: free memory may come back), leaves at round 3 (the
#           third in a row), and the run ends on client-1.
#   recover: 64 KiB before round 1, 8 MiB again once client-0 said it sits
#           round 1 out (client-1's update is held 3 s by --pace, so round 1
#           is still open): client-0 plans afresh and trains round 2.
# Skips (77) without Fashion-MNIST. Usage: free_shrink.sh HFL_COORDINATOR HFL_CLIENT
set -u
coord=$1 client=$2
[ -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || { echo "SKIP: Fashion-MNIST not installed"; exit 77; }
tmp=$(mktemp -d /tmp/hfl-test-free-shrink-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# room DIR BYTES: the cgroup tree DIR leaves BYTES (v2's memory.max, v1's limit; nothing used)
room() {
  mkdir -p "$1/memory"
  echo "$2" > "$1/memory.max"
  echo 0 > "$1/memory.current"
  echo "$2" > "$1/memory/memory.limit_in_bytes"
  echo 0 > "$1/memory/memory.usage_in_bytes"
}

# run NAME SHRUNK ROUNDS [RESTORED]: the fleet, client-0 in its tree, 8 MiB
# then SHRUNK bytes (then RESTORED once it sat round 1 out)
run() {
  local name=$1 shrunk=$2 rounds=$3 restored=${4:-} cg=$tmp/$1.cg slow=()
  [ -n "$restored" ] && slow=(--link 100:100:1500 --pace 1)
  room "$cg" $((8 * 1048576))
  timeout 120 "$coord" --insecure --listen tcp://127.0.0.1:0 --ready-file "$tmp/$name.url" --rounds "$rounds" \
    --clients-per-round 2 --min-clients 2 --min-quorum 1 --linger 1 --seed 5 --codec fp32 --model mlp \
    --batch 256 --lr 0.1 --local-steps 4 --report "$tmp/$name.json" >"$tmp/$name.coord.log" 2>&1 &
  local cp=$!
  pids+=($cp)
  for _ in $(seq 300); do [ -s "$tmp/$name.url" ] && break; sleep 0.1; done
  local url
  url=$(cat "$tmp/$name.url")
  HFL_TEST_CGROUP_ROOT=$cg timeout 120 "$client" --coordinator "$url" --insecure --client-index 0 --num-clients 2 \
    --state-dir "$tmp/$name.state0" --precision fp32 >"$tmp/$name.c0.log" 2>&1 &
  local c0=$!
  pids+=($c0)
  for _ in $(seq 600); do grep -q ': plan: ' "$tmp/$name.c0.log" && break; sleep 0.1; done
  grep -q ': plan: ' "$tmp/$name.c0.log" || fail "$name: client-0 printed no plan: $(tail -3 "$tmp/$name.c0.log")"
  room "$cg" "$shrunk"
  timeout 120 "$client" --coordinator "$url" --insecure --client-index 1 --num-clients 2 \
    --state-dir "$tmp/$name.state1" --precision fp32 "${slow[@]}" >"$tmp/$name.c1.log" 2>&1 &
  local c1=$!
  pids+=($c1)
  if [ -n "$restored" ]; then
    for _ in $(seq 600); do grep -q 'sitting the round out' "$tmp/$name.c0.log" && break; sleep 0.05; done
    room "$cg" "$restored"
  fi
  wait $c0
  echo $? > "$tmp/$name.c0.rc"
  wait $c1 || fail "$name: client-1 exited $?: $(tail -3 "$tmp/$name.c1.log")"
  wait $cp || fail "$name: the coordinator exited $?: $(tail -3 "$tmp/$name.coord.log")"
}
run shrink $((3 * 1048576)) 2
run unfit 65536 3
run recover 65536 2 $((8 * 1048576))
python3 - "$tmp" <<'PY' || fails=$((fails + 1))
import json, sys
tmp = sys.argv[1]
fails = 0
MiB = 1048576
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
def status(rep, r, name):
    for e in rep["rounds"]:
        if e.get("round") == r:
            for p in e.get("participants", []):
                if p.get("name") == name: return p.get("status")
rep = json.load(open(tmp + "/shrink.json"))
log = open(tmp + "/shrink.c0.log").read()
rc = open(tmp + "/shrink.c0.rc").read().strip()
check(rc == "0", "shrink: client-0 exited %s" % rc)
first = [l for l in log.splitlines() if ": plan: batch" in l]
check(first and "batch 256, fp32" in first[0] and "of 8.0 MiB" in first[0], "shrink: the start-up plan, for 8 MiB: %s" % first[:1])
rp = rep.get("replans", [])
check(len(rp) == 1, "shrink: one re-plan in the report: %s" % rp)
if rp:
    e, new = rp[0], rp[0].get("new") or {}
    check(e.get("name") == "client-0" and e.get("round") == 1, "shrink: client-0 at round 1: %s %s" % (e.get("name"), e.get("round")))
    check(e.get("budget_bytes") == 3 * MiB and new.get("budget_bytes") == 3 * MiB, "shrink: planned for the 3 MiB it read: %s" % e.get("budget_bytes"))
    check(new.get("batch", 256) < 256 and new.get("batch", 0) * new.get("accumulation_steps", 0) == 256,
          "shrink: the new plan %s x %s accumulates the run's 256" % (new.get("accumulation_steps"), new.get("batch")))
    check(new.get("predicted_peak_bytes", 1e18) <= 0.95 * 3 * MiB, "shrink: predicted %.2f MiB within 3 MiB less 5%%" % (new.get("predicted_peak_bytes", 0) / MiB))
lines = [l for l in log.splitlines() if "re-planning" in l]
check(len(lines) == 1 and "round 1: free memory is now 3.00 MiB" in lines[0], "shrink: one line says why: %s" % lines)
check("breached" not in log, "shrink: no breach")
check([status(rep, r, "client-0") for r in (1, 2)] == ["ok", "ok"] and rep.get("rounds_aggregated") == 2,
      "shrink: client-0 trained rounds 1 and 2: %s" % [status(rep, r, "client-0") for r in (1, 2)])
rep = json.load(open(tmp + "/unfit.json"))
log = open(tmp + "/unfit.c0.log").read()
c0 = [c for c in rep["clients"] if c["name"] == "client-0"]
left = c0[0].get("left", "") if c0 else ""
check("round 3: free memory is now 0.06 MiB and nothing fits" in left and "smallest budget that would" in left
      and "(3 rounds in a row)" in left, "unfit: client-0 left at round 3: %s" % left)
got = [status(rep, r, "client-0") for r in (1, 2, 3)]
check(got == ["declined", "declined", "left"], "unfit: client-0 declined rounds 1 and 2, then left: %s" % got)
outs = [l for l in log.splitlines() if "sitting the round out" in l]
check(len(outs) == 2 and all("smallest budget that would" in l for l in outs) and outs[0].startswith("client-0: round 1: free memory"),
      "unfit: one line for each round sat out: %s" % outs)
check(rep.get("complete") is True and rep.get("rounds_aggregated") == 3 and rep.get("replans") == [],
      "unfit: the run completed on client-1, no re-plan listed")
check("Segmentation" not in log and "Aborted" not in log, "unfit: no crash")
rep = json.load(open(tmp + "/recover.json"))
log = open(tmp + "/recover.c0.log").read()
got = [status(rep, r, "client-0") for r in (1, 2)]
check(got == ["declined", "ok"], "recover: client-0 sat round 1 out and trained round 2: %s" % got)
after = log.split("sitting the round out", 1)[-1]
check("plan: batch 256, fp32" in after and "breached" not in log, "recover: it planned afresh for the memory back, no breach")
sys.exit(1 if fails else 0)
PY
exit $((fails > 0))
