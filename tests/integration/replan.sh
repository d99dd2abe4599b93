#!/usr/bin/env bash
# replan.sh: re-planning when a client's memory budget shrinks
# (client/replan.c, coordinator/replan.c, the scenario key memory_budget_at).
# mlp, 3 clients of 300 Fashion-MNIST images (shards written here), batch
# 256, 3 rounds; client-1 has 8M, in which one batch of 256 fits (about 4.2
# MiB: docs/benchmarks.md, "Small devices keep the run's batch"), and from
# round 2 on 3M, in which it does not. Three runs:
#   shrink:  between rounds 1 and 2. client-1 re-plans (micro-batches that
#            accumulate to 256), verifies, trains rounds 2 and 3 on the new
#            plan; the report lists the one re-plan (round 2, old 1 x 256,
#            new the same 256 rows in smaller micro-batches, budget 3 MiB)
#            and clients[].plan is the new one.
#   midstep: the same shrink lands during round 2's step
#            (HFL_TEST_SHRINK_MIDSTEP=1): train.c's breach check meets it,
#            client-1 re-plans and declines round 2, and trains round 3.
#   repeat:  4 rounds, and from round 2 every step's check meets a promise
#            of 1 byte (HFL_TEST_SHRINK_MIDSTEP=every): client-1 re-plans
#            and declines rounds 2 and 3 (the same choice, so no re-plan is
#            listed), and on the third breach in a row leaves, not a loop.
#   unfit:   the budget becomes 64K, in which nothing fits: client-1 says so
#            in one line naming the smallest budget that would work, leaves,
#            and the run completes on the other two.
# Oracles: the figures above (sizes set here), the report's fields and the
# client's log; every record of the state directory's overhead log holds at
# least its arena (a step cannot take less; an in-process first step after
# a re-plan read 0.41 MiB for a 1.86 MiB arena, the process keeping what the
# old trainer freed). Skips (77) without Fashion-MNIST. Usage: replan.sh HFL_SIM
set -euo pipefail
sim=$1
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || { echo "SKIP: Fashion-MNIST not installed"; exit 77; }
tmp=$(mktemp -d /tmp/hfl-test-replan-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 "$(dirname "$0")/fmnist_shards.py" /usr/share/datasets/fashion-mnist "$tmp/shards" 3 300 500
scenario() { # NAME SIZE_AT
  cat > "$tmp/$1.json" <<JSON
{"name": "$1", "model": "mlp", "clients": 3, "clients_per_round": 3, "min_quorum": 2, "rounds": 3,
 "batch": 256, "lr": 0.1, "partition": "iid", "codec": "fp32", "precision": "fp32", "seed": 7,
 "client_memory": {"client-1": "8M"}, "memory_budget_at": {"client-1": "$2"}}
JSON
}
scenario shrink 2:3M
scenario unfit 2:64K
scenario repeat 2:8M
sed -i 's/"rounds": 3/"rounds": 4/' "$tmp/repeat.json"
"$sim" "$tmp/shrink.json" --shards "$tmp/shards" --out "$tmp/a" --quiet
HFL_TEST_SHRINK_MIDSTEP=1 "$sim" "$tmp/shrink.json" --shards "$tmp/shards" --out "$tmp/b" --quiet
"$sim" "$tmp/unfit.json" --shards "$tmp/shards" --out "$tmp/c" --quiet || true
HFL_TEST_SHRINK_MIDSTEP=every "$sim" "$tmp/repeat.json" --shards "$tmp/shards" --out "$tmp/d" --quiet || true
python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
def load(d):
    return json.load(open(os.path.join(tmp, d, "report.json"))), open(os.path.join(tmp, d, "client-1.log")).read()
MiB = 1048576
def status(rep, r, name):
    for e in rep["rounds"]:
        if e.get("round") == r:
            for p in e.get("participants", []):
                if p.get("name") == name: return p.get("status")
    return None
def replanned(rep, log, run, r, d):
    rp = rep.get("replans", [])
    check(len(rp) == 1, "%s: %d re-plan(s) in the report: %s" % (run, len(rp), rp))
    if not rp: return
    e = rp[0]
    old, new = e.get("old") or {}, e.get("new") or {}
    check(e.get("name") == "client-1" and e.get("round") == r, "%s: client-1 re-planned at round %s (want %d)" % (run, e.get("round"), r))
    check(old.get("batch") == 256 and old.get("step_batch") == 256, "%s: old plan %s x %s" % (run, old.get("accumulation_steps"), old.get("batch")))
    check(new.get("batch", 256) < 256 and new.get("step_batch") == 256 and new.get("batch") * new.get("accumulation_steps") == 256,
          "%s: new plan %s x %s, the run's 256 rows accumulated" % (run, new.get("accumulation_steps"), new.get("batch")))
    check(e.get("budget_bytes") == 3 * MiB and new.get("budget_bytes") == 3 * MiB, "%s: the budget that forced it: %s" % (run, e.get("budget_bytes")))
    check(new.get("predicted_peak_bytes", 1e18) <= 0.95 * 3 * MiB, "%s: new predicted peak %.2f MiB within 3 MiB less 5%%" % (run, new.get("predicted_peak_bytes", 0) / MiB))
    c1 = [c for c in rep["clients"] if c["name"] == "client-1"][0]
    check(c1.get("plan", {}).get("batch") == new.get("batch") and "left" not in c1, "%s: client-1's record holds the new plan and it stayed" % run)
    check(rep.get("complete") is True and rep.get("rounds_aggregated") == 3, "%s: 3 rounds aggregated" % run)
    check("no longer fits" in log or "breached" in log, "%s: the client said why it re-planned" % run)
    html = open(os.path.join(tmp, d, "report.html")).read()
    row = "<tr><td>%d</td><td>client-1</td><td>1 x 256 fp32 none, %.2f MiB</td><td>%d x %d fp32 %s, %.2f MiB</td><td>3.00 MiB</td></tr>" % (
        r, old.get("predicted_peak_bytes", 0) / MiB, new.get("accumulation_steps", 0), new.get("batch", 0), new.get("checkpoint"),
        new.get("predicted_peak_bytes", 0) / MiB)
    check("<h2>re-plans</h2>" in html and row in html, "%s: the HTML report's re-plans table has %s" % (run, row))
    recs = [json.loads(l) for l in open(os.path.join(tmp, d, "state", "overhead.jsonl"))]
    low = [(r["batch"], r["measured"], r["arena"]) for r in recs if r["measured"] < r["arena"]]
    check(recs and not low, "%s: every step measured holds at least its arena (%d records; below it: %s)" % (run, len(recs), low))
# shrink between rounds
rep, log = load("a")
replanned(rep, log, "shrink", 2, "a")
check(all(status(rep, r, "client-1") == "ok" for r in (1, 2, 3)), "shrink: client-1 trained rounds 1-3: %s" % [status(rep, r, "client-1") for r in (1, 2, 3)])
check("breached" not in log, "shrink: no breach")
after = log.split("re-planning", 1)[-1]
check("verify: batch 64 fp32 none measured" in after and "first step: measured" not in after,
      "shrink: the new plan verified in a forked measurement; no in-process first-step figure after the re-plan")
# the shrink in mid-step
rep, log = load("b")
replanned(rep, log, "midstep", 2, "b")
check(status(rep, 2, "client-1") == "declined" and status(rep, 3, "client-1") == "ok",
      "midstep: client-1 declined round 2 after the breach and trained round 3: %s, %s" % (status(rep, 2, "client-1"), status(rep, 3, "client-1")))
check("memory budget breached" in log and "re-planning" in log, "midstep: the breach check caught it and the client re-planned")
# nothing fits
rep, log = load("c")
c1 = [c for c in rep["clients"] if c["name"] == "client-1"][0]
left = c1.get("left", "")
check("nothing fits in 0.06 MiB" in left and "the smallest budget that would is" in left, "unfit: client-1 left: %s" % left)
check(rep.get("replans") == [], "unfit: no re-plan listed")
check(rep.get("complete") is True and rep.get("rounds_aggregated") == 3, "unfit: the run completed on the others")
lines = [l for l in log.splitlines() if "smallest budget that would" in l]
check(len(lines) == 1 and lines[0].startswith("hfl-client: round 2: the memory budget is now 0.06 MiB"), "unfit: one line: %s" % lines)
check("Segmentation" not in log and "Aborted" not in log, "unfit: no crash")
# breaches that keep coming: two re-plans (the same choice: unlisted), then the client leaves
rep, log = load("d")
c1 = [c for c in rep["clients"] if c["name"] == "client-1"][0]
got = [status(rep, r, "client-1") for r in (1, 2, 3, 4)]
check(got == ["ok", "declined", "declined", "left"], "repeat: client-1 ok, declined twice, then left: %s" % got)
check("(3 breaches in a row)" in c1.get("left", "") and rep.get("replans") == [],
      "repeat: it left after 3 breaches in a row: %s; re-plans listed %s" % (c1.get("left"), rep.get("replans")))
check(log.count(": re-planning") == 2 and log.count("leaving the run") == 1, "repeat: 2 re-plans, then one leaving line")
check(rep.get("complete") is True and rep.get("rounds_aggregated") == 4, "repeat: the run completed on the others")
recs = [json.loads(l) for l in open(os.path.join(tmp, "d", "state", "overhead.jsonl"))]
check(all(r["measured"] >= r["arena"] for r in recs), "repeat: no record below its arena")
sys.exit(1 if fails else 0)
PY
