#!/usr/bin/env bash
# secagg.sh: secure aggregation end to end (proto/secagg.h).
#   same-hash  scenarios/secagg.json (masked) and secagg-plain.json (the same
#              client-side clipping and fixed point in the clear) end with the
#              same final_model_sha256; the secure run's report shows no
#              client's norm, and its ring is no wider than its stated bound
#              needs (2^bits >= 2 bound + 1 > 2^(bits - 1)). What the
#              coordinator received from one client in rounds 1 and 2 (two
#              different updates): a chi-square test of homogeneity over
#              their byte histograms (256 bins, 255 degrees of freedom, p by
#              the Wilson-Hilferty approximation) cannot tell the masked
#              uploads apart (p > 1e-4: a false alarm once in 10,000 runs, the
#              masks being fresh randomness), and tells the clear ones apart
#              (p < 1e-6; the clear run is reproducible, its p the same every
#              time: 3e-10 when this was written).
#   dropouts   10 clients, 1 round: 2 killed after sharing their keys and
#              before their masked input (their masks are in their
#              neighbours' inputs): the round aggregates, and its model is the
#              one of the clear run where the same 2 die at the same point,
#              i.e. the 8 survivors' sum computed in the clear; 2 killed after
#              their masked input and before unmasking: the round holds all
#              10 inputs, the clear run's model without kills.
#   too-many   5 of 10 killed after posting their keys: each survivor missing
#              one of the other four as a neighbour gets 3 shares, under the
#              threshold of 5, and leaves the round with a decline (it does
#              not take the task again and post fresh keys: no "keys already
#              taken" in any client's log); fewer inputs than the threshold,
#              the round fails with one line naming secure aggregation and the
#              model stays the initial one.
#   refusals   what cannot work is refused at start with one line: robust
#              rules, no clip, --async, --late fold under secure aggregation;
#              DP without a clip or with half a budget; a ring the largest
#              draw could overflow.
# Skips (77) without Fashion-MNIST. Usage: secagg.sh HFL_SIM SCENARIOS_DIR MODE
set -euo pipefail
sim=$1 dir=$2 mode=$3
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-secagg-XXXXXX)
[ -n "${HFL_KEEP_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT

# A 10-client, 1-round variant of the scenarios: key=value edits of secagg.json.
variant() { # NAME MASKED(true|false)
  python3 - "$dir/secagg.json" "$tmp/$1.json" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s.update({"clients": 10, "clients_per_round": 10, "min_quorum": 5, "rounds": 1, "deadline_s": 8, "clip_norm": 1})
s.pop("secure_agg", None)
s["secure_agg" if sys.argv[3] == "true" else "client_clip"] = True
json.dump(s, open(sys.argv[2], "w"))
PY
}
run() { # SCENARIO OUT [KILL-SPEC]
  HFL_TEST_SECAGG_KILL="${3:-}" "$sim" "$1" --out "$tmp/$2" --quiet || true
  test -s "$tmp/$2/report.json" || { echo "FAIL: $2 wrote no report"; tail -5 "$tmp/$2/coordinator.log"; exit 1; }
}

case $mode in
same-hash)
  mkdir -p "$tmp/rec-masked" "$tmp/rec-clear"
  HFL_TEST_SECAGG_RECORD="$tmp/rec-masked" run "$dir/secagg.json" masked
  HFL_TEST_SECAGG_RECORD="$tmp/rec-clear" run "$dir/secagg-plain.json" clear
  python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
m, c = (json.load(open(f"{tmp}/{d}/report.json")) for d in ("masked", "clear"))
check(all(r["status"] == "ok" for r in m["rounds"] + c["rounds"]), "every round of both runs aggregated")
check(m["final_model_sha256"] == c["final_model_sha256"],
      f"final_model_sha256 masked {m['final_model_sha256'][:16]} clear {c['final_model_sha256'][:16]}")
for r in m["rounds"]:
    sa = r["secure_agg"]
    check(sa["mode"] == "masked" and sa["inputs"] == sa["members"] == 8 and sa["unmasked"] == 8,
          f"round {r['round']}: 8 masked inputs, 8 unmask answers")
    check(2 ** sa["bits"] >= 2 * sa["bound"] + 1 > 2 ** (sa["bits"] - 1),
          f"round {r['round']}: {sa['bits']} bits for a sum bounded by {sa['bound']:.0f}")
    check(sa["input_bytes"] == (sa["elements"] * sa["bits"] + 7) // 8,
          f"round {r['round']}: {sa['input_bytes']} bytes up for {sa['elements']} elements")
    check(all("norm" not in p for p in r["participants"]) and r["update_norm_median"] is None,
          f"round {r['round']}: no client's norm in the report")
import math
def chi2_p(a, b):
    """p of the chi-square homogeneity test of two byte strings' histograms."""
    ha, hb = [0] * 256, [0] * 256
    for x in a: ha[x] += 1
    for x in b: hb[x] += 1
    na, nb, stat, dof = len(a), len(b), 0.0, -1
    for i in range(256):
        tot = ha[i] + hb[i]
        if tot == 0: continue
        dof += 1
        for h, n in ((ha[i], na), (hb[i], nb)):
            e = tot * n / (na + nb)
            stat += (h - e) ** 2 / e
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2)), stat, dof
for kind, want_same in (("masked", True), ("clear", False)):
    a = open(f"{tmp}/rec-{kind}/r1-c0.bin", "rb").read()
    b = open(f"{tmp}/rec-{kind}/r2-c0.bin", "rb").read()
    p, stat, dof = chi2_p(a, b)
    check(a != b and (p > 1e-4 if want_same else p < 1e-6),
          f"{kind}: client 0's rounds 1 and 2 as received: chi-square {stat:.0f} on {dof} dof, p {p:.3g}: "
          + ("cannot tell them apart" if want_same else "tells them apart"))
sys.exit(1 if fails else 0)
PY
  ;;
dropouts)
  variant m10 true
  variant c10 false
  run "$tmp/m10.json" m-shares "shares:1:client-3,client-7"
  run "$tmp/c10.json" c-shares "shares:1:client-3,client-7"
  run "$tmp/m10.json" m-input "input:1:client-2,client-5"
  run "$tmp/c10.json" c-none
  python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
rep = {d: json.load(open(f"{tmp}/{d}/report.json")) for d in ("m-shares", "c-shares", "m-input", "c-none")}
for d, r in rep.items():
    check(r["rounds"][0]["status"] == "ok", f"{d}: round 1 {r['rounds'][0]['status']} {r['rounds'][0].get('reason', '')}")
sa = rep["m-shares"]["rounds"][0]["secure_agg"]
check(sa["inputs"] == 8 and sorted(sa["dropped"]) != [] and len(sa["dropped"]) == 2,
      f"killed after sharing: {sa['inputs']} inputs, dropped {sa['dropped']}")
check(rep["c-shares"]["rounds"][0]["clients"] == 8, "the clear twin aggregated 8")
check(rep["m-shares"]["final_model_sha256"] == rep["c-shares"]["final_model_sha256"],
      "killed after sharing: the model of the 8 survivors' clear sum")
sa = rep["m-input"]["rounds"][0]["secure_agg"]
check(sa["inputs"] == 10 and sa["unmasked"] == 8, f"killed before unmasking: {sa['inputs']} inputs, {sa['unmasked']} unmask answers")
check(rep["m-input"]["final_model_sha256"] == rep["c-none"]["final_model_sha256"],
      "killed before unmasking: the model of all 10 inputs' clear sum")
check(rep["m-shares"]["final_model_sha256"] != rep["c-none"]["final_model_sha256"],
      "8 survivors and 10 clients give different models (the comparisons can fail)")
sys.exit(1 if fails else 0)
PY
  ;;
too-many)
  variant m10 true
  run "$tmp/m10.json" m-six "keys:1:client-1,client-2,client-4,client-6,client-8"
  python3 - "$tmp" <<'PY'
import glob, json, sys
tmp = sys.argv[1]
r = json.load(open(f"{tmp}/m-six/report.json"))
rd = r["rounds"][0]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
check(rd["status"] == "failed" and rd["reason"].startswith("secure aggregation:") and "\n" not in rd["reason"],
      f"round 1 {rd['status']}: {rd.get('reason')}")
check(rd["version"] == 0 and r["final_model_sha256"] == r["initial_model_sha256"],
      f"model kept: {r['final_model_sha256'][:16]} vs initial {r['initial_model_sha256'][:16]}")
log = open(f"{tmp}/m-six/coordinator.log").read().splitlines()
ev = [json.loads(l) for l in open(f"{tmp}/m-six/events.jsonl")]
check(sum("round 1 failed: secure aggregation:" in l for l in log) == 1, "the coordinator's output says why, in one line")
check(any(e.get("event") == "round" and e.get("reason", "").startswith("secure aggregation:") for e in ev),
      "the event log says why")
killed = {"client-1", "client-2", "client-4", "client-6", "client-8"}
st = {p["name"]: p["status"] for p in rd["participants"]}
check(all(st[n] == "dropped" for n in killed), f"the killed are dropped: {st}")
left = [n for n in st if n not in killed and st[n] == "declined"]
check(len(left) >= 1 and all(st[n] in ("declined", "ok") for n in st if n not in killed),
      f"survivors with too few shares left with a decline: {sorted(left)}")
logs = "".join(open(f).read() for f in glob.glob(f"{tmp}/m-six/client-*.log"))
check("keys already taken" not in logs and logs.count("failed on our side") == len(left),
      "no survivor took the task again to post fresh keys")
sys.exit(1 if fails else 0)
PY
  ;;
refusals)
  coord="$(dirname "$sim")/../coordinator/hfl-coordinator"
  fails=0
  refused() { # WANT-EXIT WANT-TEXT ARGS...
    local want=$1 text=$2; shift 2
    local out rc=0
    out=$("$coord" --insecure --listen tcp://127.0.0.1:0 --quiet "$@" 2>&1 >/dev/null) || rc=$?
    if [ "$rc" = "$want" ] && [ "$(printf '%s\n' "$out" | grep -c .)" = 1 ] && printf '%s' "$out" | grep -q -- "$text"; then
      echo "ok   $*: $out"
    else
      echo "FAIL $*: exit $rc (want $want): $out"; fails=$((fails + 1))
    fi
  }
  refused 2 "robust rules" --secure-agg --strategy median
  refused 2 "set --clip-norm" --secure-agg --clip-norm off
  refused 2 "not with --async" --secure-agg --async 4
  refused 2 "not with --async or --late fold" --secure-agg --late fold
  refused 2 "calibrates its noise to the clip" --dp-noise 1 --clip-norm off
  refused 2 "go together" --dp-epsilon 1
  refused 2 "noises the weighted sum" --dp-noise 1 --strategy krum
  refused 1 "bits per element" --secure-agg --fixed-bits 50 --clip-norm 1 --clients-per-round 1000 --dp-noise 50
  exit $((fails > 0))
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
