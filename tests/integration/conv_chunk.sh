#!/usr/bin/env bash
# conv_chunk.sh: hfl-client --conv-chunk reaches the plan a client trains
# (plan/chooser.h, CONV CHUNK). The oracle is the cnn's layer list (two
# conv layers; model/conv.c): one sample at a time a step unfolds 4 times
# per sample (each conv's input forward, and again backward), so 32 im2col
# at batch 8; the whole batch at once unfolds 4 times and transposes each
# conv's dy once, 6 im2col at any batch, and the step's ops are the same
# count at batch 8 and 16, at most 40. Under a budget the whole batch does
# not fit, the chunk is halved to one that does, and the step stays within
# the budget. A state dir's measurement verifies its own chunk only. Out-of-
# range values are refused in one line.
# usage: conv_chunk.sh HFL_CLIENT
set -u
client=$1
tmp=$(mktemp -d /tmp/hfl-conv-chunk-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
run() { # NAME ARGS...: a trial step's JSON into $tmp/NAME.json
  local name=$1
  shift
  "$client" --plan --device cpu --trial-step --profile --json --model cnn --state-dir "${state:-$tmp/state-$name}" "$@" \
    > "$tmp/$name.json" 2> "$tmp/$name.err" ||
    { echo "FAIL hfl-client $* exited $?"; cat "$tmp/$name.err"; exit 1; }
}
run one8 --batch 8 --memory-budget 256M
run whole8 --batch 8 --memory-budget 256M --conv-chunk 4096
run whole16 --batch 16 --memory-budget 256M --conv-chunk 4096
run tight --batch 64 --memory-budget 50M --conv-chunk 4096
# A measurement verifies its own conv chunk only: one state dir, the whole
# batch, then one sample (measured afresh), then the whole batch again
# (measured before); then the same lines without their chunk, as written
# before chunks were kept, verify nothing.
state=$tmp/shared
shared=(--batch 8 --memory-budget 256M)
run keep1 "${shared[@]}" --conv-chunk 4096
run keep2 "${shared[@]}"
run keep3 "${shared[@]}" --conv-chunk 4096
sed -i 's/"conv_chunk":[0-9]*,//' "$tmp/shared/overhead.jsonl"
run keep4 "${shared[@]}" --conv-chunk 4096
unset state
fails=0
for bad in 0 4097 x; do
  out=$("$client" --plan --model cnn --conv-chunk "$bad" 2>&1)
  rc=$?
  lines=$(printf '%s\n' "$out" | wc -l)
  if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ] && [[ "$out" == *conv-chunk* ]]; then echo "ok   --conv-chunk $bad: $out"
  else echo "FAIL --conv-chunk $bad: exit $rc, $lines lines: $out"; fails=$((fails + 1)); fi
done
python3 - "$tmp" <<'PY' || fails=$((fails + 1))
import json, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
def load(name):
    d = json.load(open("%s/%s.json" % (tmp, name)))
    ops = {o["name"]: o["count"] for o in d["profile"]["ops"]}
    return d, ops
one, one_ops = load("one8")
w8, w8_ops = load("whole8")
w16, w16_ops = load("whole16")
tight, _ = load("tight")
check(one["plan"]["conv_chunk"] == 1 and one_ops.get("im2col") == 32,
      "default on the cpu, batch 8: chunk %s, %s im2col a step (want 1, 32)" % (one["plan"]["conv_chunk"], one_ops.get("im2col")))
check(w8["plan"]["conv_chunk"] == 8 and w8_ops.get("im2col") == 6,
      "--conv-chunk 4096, batch 8: chunk %s, %s im2col (want 8, 6)" % (w8["plan"]["conv_chunk"], w8_ops.get("im2col")))
check(w16["plan"]["conv_chunk"] == 16 and w16_ops.get("im2col") == 6,
      "batch 16: chunk %s, %s im2col (want 16, 6)" % (w16["plan"]["conv_chunk"], w16_ops.get("im2col")))
a, b = w8["profile"]["ops_per_step"], w16["profile"]["ops_per_step"]
check(a == b and a <= 40 and one["profile"]["ops_per_step"] > a,
      "ops a step: %s whole at batch 8, %s at 16, %s one sample at a time" % (a, b, one["profile"]["ops_per_step"]))
for d, name in ((one, "one8"), (w8, "whole8"), (w16, "whole16")):
    check(d["profile"]["syncs_per_step"] == 0 and d["trained"] and not d["breached"], "%s: trained, no sync, no breach" % name)
c = tight["plan"]["conv_chunk"]
check(1 < c < 64 and tight["trained"] and not tight["breached"] and tight["measured_peak_bytes"] <= 50 * 2**20,
      "batch 64 in 50M: chunk %s, trained %s, breached %s, peak %.2f MiB" %
      (c, tight["trained"], tight["breached"], tight["measured_peak_bytes"] / 2**20))
keep = [load("keep%d" % k)[0]["plan"] for k in (1, 2, 3, 4)]
got = [(p.get("conv_chunk"), p["verify_measurements"]) for p in keep]
check(got[0] == (8, 1) and got[1] == (1, 1) and got[2] == (8, 0) and got[3] == (8, 1),
      "(chunk, measurements) in one state dir: %s (want (8, 1), (1, 1), (8, 0), (8, 1))" % got)
sys.exit(fails > 0)
PY
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks passed"
