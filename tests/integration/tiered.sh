#!/usr/bin/env bash
# tiered.sh: a tier of coordinators gives the flat run's model, bit for bit
# (coordinator/tier.c, upstream.c). scenarios/tiered.json runs a root, 2
# aggregators and 8 clients (client i under aggregator i % 2) for 3 rounds;
# tiered-flat.json is the same fleet straight to one coordinator. The root
# draws across the tier as the flat coordinator draws, each aggregator sums
# its clients' updates at the root's scale and weights, and the root adds
# the group sums exactly, so the two reports' final_model_sha256 must be
# equal, and every round of both must aggregate all 8 clients. Also, each
# in one line: an aggregator started with --secure-agg refuses to start
# (exit 2), and so does a root with --tier and --secure-agg; a root without
# --tier refuses an aggregator's hello, and an aggregator whose --batch is
# not its root's refuses the root (exit 1).
# Skips (77) without Fashion-MNIST.
# usage: tiered.sh SOURCE_ROOT HFL_SIM HFL_COORDINATOR
set -u
src=$1 sim=$2 coord=$3
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-tiered-XXXXXX)
trap '[ -n "${HFL_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*"; for f in "$tmp"/*/aggregator-*.log "$tmp"/*/coordinator.log; do [ -r "$f" ] && { echo "--- $f"; tail -n 8 "$f"; }; done; exit 1; }

for s in tiered tiered-flat; do
  timeout 240 "$sim" "$src/scenarios/$s.json" --out "$tmp/$s" --quiet >"$tmp/$s.out" 2>&1 ||
    { cat "$tmp/$s.out"; fail "hfl-sim $s.json"; }
  echo "ok   hfl-sim $s.json"
done
python3 - "$tmp" <<'PY' || fail "the reports"
import json, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
tier, flat = (json.load(open(f"{tmp}/{s}/report.json")) for s in ("tiered", "tiered-flat"))
for name, r in (("tiered", tier), ("flat", flat)):
    rounds = r["rounds"]
    check(len(rounds) == 3 and all(x["status"] == "ok" and x["clients"] == 8 for x in rounds),
          f"{name}: 3 rounds, each aggregated all 8 clients: {[(x['round'], x['status'], x['clients']) for x in rounds]}")
check(tier["final_model_sha256"] == flat["final_model_sha256"],
      f"final_model_sha256: tiered {tier['final_model_sha256']}, flat {flat['final_model_sha256']}")
sys.exit(1 if fails else 0)
PY

rc=0; out=$("$coord" --insecure --upstream tcp://127.0.0.1:1 --upstream-name agg --secure-agg --clip-norm 1 \
  --listen tcp://127.0.0.1:0 2>&1) || rc=$?
lines=$(printf '%s\n' "$out" | wc -l)
[ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [[ $out == *"aggregator cannot run --secure-agg"* ]] ||
  fail "an aggregator with --secure-agg: status $rc, $lines line(s): $out"
echo "ok   an aggregator with --secure-agg refuses in one line: $out"

# root_refuses ROOT_ARGS AGG_ARGS WANT: an aggregator under a root started
# with ROOT_ARGS ends with status 1 and one line holding WANT.
root_refuses() {
  rm -f "$tmp/root.url"
  "$coord" --insecure --listen tcp://127.0.0.1:0 --ready-file "$tmp/root.url" --rounds 1 --quiet $1 >"$tmp/root.log" 2>&1 &
  local rp=$!
  for _ in $(seq 100); do [ -s "$tmp/root.url" ] && break; sleep 0.1; done
  local rc=0 out
  out=$(timeout 30 "$coord" --insecure --upstream "$(cat "$tmp/root.url")" --upstream-name agg --listen tcp://127.0.0.1:0 \
    --rounds 1 --quiet $2 2>&1) || rc=$?
  kill $rp; wait $rp 2>/dev/null
  local lines=$(printf '%s\n' "$out" | wc -l)
  [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && [[ $out == *"$3"* ]] || fail "root '$1', aggregator '$2': status $rc, $lines line(s): $out"
  echo "ok   root '$1', aggregator '$2': refused in one line: $out"
}
root_refuses "--over-select 0" "" "this coordinator leads no tier (start it with --tier)"
root_refuses "--tier" "--batch 64" "other settings than this aggregator: batch 32, ours 64"
rc=0; out=$("$coord" --insecure --tier --secure-agg --clip-norm 1 --listen tcp://127.0.0.1:0 2>&1) || rc=$?
lines=$(printf '%s\n' "$out" | wc -l)
[ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [[ $out == *"a tier's root cannot run --secure-agg"* ]] ||
  fail "a root with --tier --secure-agg: status $rc, $lines line(s): $out"
echo "ok   a root with --tier and --secure-agg refuses in one line: $out"
