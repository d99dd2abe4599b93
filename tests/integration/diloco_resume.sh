#!/usr/bin/env bash
# diloco_resume.sh: scenarios/lm-diloco.json's federated configuration (its
# clients, selection, batch, AdamW and betas, lr and cosine schedule, codec,
# seed and the Nesterov outer step, all read from the scenario) for 2 rounds
# with a reduced model (a 1-block GPT of width 16 over 16-byte windows, 3
# local steps, warmup 1) survives a coordinator kill -9: run B's coordinator
# kills itself at round 2's first update (HFL_TEST_CRASH=update:2, as
# test_resume.c's runs do), after round 1's state was saved, and is started
# again with the same arguments, port and --state-dir; its clients rejoin by
# themselves. Oracles computed here, not by hfl:
# - B ends with run A's (uninterrupted) final_model_sha256 and counts 1 restart;
# - the momentum survives: round 1's saved state (x1, v1, copied when B died)
#   and A's final state (x2, v2) obey DiLoCo's Nesterov step, v2 = mu v1 + D,
#   x2 = x1 + lr (D + mu v2), so x2 = x1 + lr ((1 + mu) v2 - mu v1) (in
#   double), and v1 is not zero;
# - a restart that lost it would give another model: run C continues the
#   same saved round-1 state with v1 zeroed (the state's SHA-256 recomputed
#   here) and ends on a model other than A's.
# The state file's layout (coordinator/persist.c): "HFLCOORD", u32 format,
# u32 0, u64 JSON length, u64 binary length, SHA-256 of JSON and binary, the
# JSON, then the model's floats and the momentum's (n_params each).
# Skips (77) without bible-kjv.
# Usage: diloco_resume.sh HFL_COORDINATOR HFL_CLIENT HFL_DATA HFL_PKI SOURCE_ROOT
set -euo pipefail
coord=$1 client=$2 data=$3 pki=$4 root=$5
if ! command -v bible >/dev/null; then echo "SKIP: bible-kjv is not installed"; exit 77; fi
tmp=$(mktemp -d /tmp/hfl-test-diloco-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; [ -n "${HFL_KEEP_TMP:-}" ] || rm -rf "$tmp"; }
trap cleanup EXIT
# Stopped by meson's time limit (SIGTERM, sent to the whole process group, so
# the coordinator and clients get it too): say where each process's log
# stopped. Twice a client sat silent after "dialing the coordinator afresh"
# until the limit, and a CI run may have lost about 300 s to a test that
# never said which; the log tails name the silent process.
on_term() {
  echo "TIMEOUT: where each log stopped:"
  for f in "$tmp"/*.log; do [ -e "$f" ] && { echo "--- ${f##*/}"; tail -n 3 "$f"; }; done
  exit 1
}
trap on_term TERM
"$root/scripts/kjv-books" "$tmp/books"
"$data" text --out "$tmp/shards" --context 16 --held-out 0.1 --num-clients 8 --seed 1 \
    "$tmp"/books/{31-obadiah,57-philemon,63-2-john,64-3-john,65-jude}.txt >/dev/null
"$pki" --out "$tmp/pki" --clients 8 >/dev/null
cat > "$tmp/gpt.json" <<'JSON'
{"name": "gpt-tiny", "input": [16], "layers": [{"type": "embedding", "vocab": 256, "width": 16},
 {"type": "gpt_block", "heads": 2}, {"type": "lm_head"}]}
JSON
# The scenario's settings as the coordinator's and clients' arguments (as hfl-sim passes them),
# with the reduced model, 2 rounds, 3 local steps and a warmup of 1.
python3 - "$root/scenarios/lm-diloco.json" "$tmp" <<'PY'
import json, sys
s, tmp = json.load(open(sys.argv[1])), sys.argv[2]
assert s["clients"] == s["clients_per_round"] == 8 and s["server_opt"].startswith("nesterov:"), s
kind, _, floor = s["lr_schedule"].split(":")
args = ["--model", tmp + "/gpt.json", "--rounds", "2", "--clients-per-round", str(s["clients_per_round"]),
        "--min-clients", str(s["clients"]), "--local-steps", "3", "--lr-schedule", "%s:1:%s" % (kind, floor),
        "--batch", str(s["batch"]), "--lr", repr(s["lr"]), "--optimizer", s["optimizer"], "--betas", s["betas"],
        "--server-opt", s["server_opt"], "--codec", s["codec"], "--clip-norm", s["clip_norm"],
        "--seed", str(s["seed"]), "--data", tmp + "/shards/test.npz"]
open(tmp + "/coord.args", "w").write("\n".join(args) + "\n")
open(tmp + "/client.args", "w").write("\n".join(["--partition", s["partition"], "--precision", s["precision"],
                                                 "--seed", str(s["seed"])]) + "\n")
_, lr, mu = s["server_opt"].split(":")
open(tmp + "/nesterov", "w").write("%s %s\n" % (lr, mu))
PY
mapfile -t cargs < "$tmp/coord.args"
mapfile -t kargs < "$tmp/client.args"

# start_coord RUN LISTEN [CRASH]: starts run RUN's coordinator; its URL in $tmp/RUN.url
start_coord() {
  local run=$1 listen=$2 crash=${3:-}
  rm -f "$tmp/$run.url"
  env ${crash:+HFL_TEST_CRASH=$crash} "$coord" --listen "$listen" --ca "$tmp/pki/ca.crt" \
      --cert "$tmp/pki/coordinator.pem" --deadline 120 --linger 3 --ready-file "$tmp/$run.url" \
      --report "$tmp/$run.json" --state-dir "$tmp/$run-state" "${cargs[@]}" >> "$tmp/$run-coord.log" 2>&1 &
  cpid=$!
  pids+=("$cpid")
  for _ in $(seq 300); do [ -s "$tmp/$run.url" ] && return 0; kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
  echo "FAIL $run: the coordinator did not start:"; tail -5 "$tmp/$run-coord.log"; exit 1
}
start_clients() {
  local run=$1 url; url=$(cat "$tmp/$run.url")
  cl=()
  for i in $(seq 0 7); do
    "$client" --coordinator "$url" --ca "$tmp/pki/ca.crt" --cert "$tmp/pki/client-$i.pem" --name "client-$i" \
        --data "$tmp/shards/client-000$i.npz" --client-index "$i" --num-clients 1 --threads 1 \
        --state-dir "$tmp/$run-clients" "${kargs[@]}" > "$tmp/$run-client-$i.log" 2>&1 &
    cl+=($!)
    pids+=($!)
  done
}
wait_clients() {
  local run=$1
  for i in $(seq 0 7); do
    wait "${cl[$i]}" || { echo "FAIL $run: client-$i failed:"; tail -5 "$tmp/$run-client-$i.log"; exit 1; }
  done
}
sha() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['final_model_sha256'])" "$tmp/$1.json"; }

# A: uninterrupted
start_coord a tls+tcp://127.0.0.1:0
start_clients a
wait "$cpid" || { echo "FAIL a: the coordinator failed:"; tail -5 "$tmp/a-coord.log"; exit 1; }
wait_clients a

# B: killed at round 2's first update, started again on the same port and state
start_coord b tls+tcp://127.0.0.1:0 update:2
url=$(cat "$tmp/b.url")
start_clients b
rc=0; wait "$cpid" || rc=$?
[ "$rc" -eq 137 ] || { echo "FAIL b: the coordinator ended with $rc, not killed at update:2"; tail -5 "$tmp/b-coord.log"; exit 1; }
echo "b: coordinator killed at round 2's first update; starting it again"
cp -r "$tmp/b-state" "$tmp/round1-state"
start_coord b "$url"
wait "$cpid" || { echo "FAIL b: the restarted coordinator failed:"; tail -5 "$tmp/b-coord.log"; exit 1; }
wait_clients b

# C: round 1's state with the momentum zeroed, continued by fresh clients
mkdir "$tmp/c-state"
python3 - "$tmp/round1-state/coordinator.state" "$tmp/c-state/coordinator.state" <<'PY'
import hashlib, json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
jl, bl = struct.unpack("<QQ", b[16:32])
o = json.loads(b[64:64 + jl])
assert o["round"] == 1 and o["sopt_v"] and not o["sopt_m"], (o["round"], o["sopt_v"], o["sopt_m"])
n = bl // 8  # the model's floats, then the momentum's
b[64 + jl + 4 * n:] = bytes(4 * n)
b[32:64] = hashlib.sha256(b[64:]).digest()
open(sys.argv[2], "wb").write(b)
PY
start_coord c tls+tcp://127.0.0.1:0
start_clients c
wait "$cpid" || { echo "FAIL c: the coordinator failed:"; tail -5 "$tmp/c-coord.log"; exit 1; }
wait_clients c

python3 - "$tmp" "$(sha a)" "$(sha b)" "$(sha c)" $(cat "$tmp/nesterov") <<'PY'
import array, json, struct, sys
tmp, sha_a, sha_b, sha_c, lr, mu = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
def state(path):
    b = open(path, "rb").read()
    jl, bl = struct.unpack("<QQ", b[16:32])
    f = array.array("f", b[64 + jl:])  # little-endian floats, read as Python's doubles
    return json.loads(b[64:64 + jl]), list(f[:len(f) // 2]), list(f[len(f) // 2:])
a, b = (json.load(open("%s/%s.json" % (tmp, r))) for r in "ab")
check(len(sha_a) == 64 and sha_a == sha_b, "uninterrupted %s, killed and restarted %s" % (sha_a, sha_b))
check(b.get("restarts") == 1, "run b counts %s restart(s)" % b.get("restarts"))
check([r["model_sha256"] for r in a["rounds"]] == [r["model_sha256"] for r in b["rounds"]],
      "every round's model the same in a and b")
o1, x1, v1 = state(tmp + "/round1-state/coordinator.state")
o2, x2, v2 = state(tmp + "/a-state/coordinator.state")
check(o1["round"] == 1 and o2["round"] == 2, "states after rounds %d and %d" % (o1["round"], o2["round"]))
check(max(map(abs, v1)) > 0, "round 1's saved momentum is not zero (max |v1| %.3g)" % max(map(abs, v1)))
# x2 = x1 + lr (D + mu v2) with D = v2 - mu v1, done in double from float state with v2 and x2
# rounded to float (kernels/agg_hd.h): the stored v2 is off by at most half an ulp (2^-24 relative),
# which lr (1 + mu) carries into x2, and x2's own rounding adds half an ulp of x2; twice that bounds it.
worst = 0.0
for a1, b1, a2, b2 in zip(x1, v1, x2, v2):
    err = abs(a2 - (a1 + lr * ((1 + mu) * b2 - mu * b1)))
    worst = max(worst, err / (2.0 ** -23 * (abs(a2) + lr * (1 + mu) * abs(b2)) + 1e-30))
check(len(x1) == len(x2) > 0 and worst <= 1, "round 2 continued round 1's momentum: |x2 - (x1 + lr ((1 + mu) v2 - mu v1))| "
      "at most %.3g of its bound over %d values" % (worst, len(x1)))
check(sha_c != sha_a, "the same restart with round 1's momentum zeroed ends on another model (%s)" % sha_c)
sys.exit(1 if fails else 0)
PY
