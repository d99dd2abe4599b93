#!/usr/bin/env bash
# client_init_model.sh: hfl-client --init-model FILE (models in and out through safetensors: the client
# starts from the same safetensors file as the coordinator). The welcome
# names the global model's version and SHA-256; a client whose file is that
# model, bit for bit, takes its first task without weights ("held").
# Two runs of the same 2-client, 2-round fleet, the coordinator started from
# model F (a 1-round model written by an earlier run) in both:
#   A: client 0 starts from F, client 1 from another model G;
#   B: neither client has a file.
# The oracles: in A round 1 sent one task without weights (tasks_held 1)
# and at least one model's bytes (n_params x 4) less than B's round 1; the
# final model is the same in A and B, byte for byte (what client 0 held is
# exactly what B's download gave); client 1 says its file is not the global
# model; and bad files are one-line errors (missing, another model's).
# Skips (77) without Fashion-MNIST.
# usage: client_init_model.sh HFL_COORDINATOR HFL_CLIENT
set -u
coord=$1 client=$2
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-initmodel-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

# run NAME ROUNDS COORD-ARGS -- CLIENT0-ARGS -- CLIENT1-ARGS: a loopback run; 0 when all three exit 0.
run() {
  local name=$1 rounds=$2; shift 2
  local cargs=() a0=() a1=()
  while [ "$1" != -- ]; do cargs+=("$1"); shift; done; shift
  while [ "$1" != -- ]; do a0+=("$1"); shift; done; shift
  a1=("$@")
  rm -f "$tmp/$name.url"
  timeout 120 "$coord" --insecure --listen tcp://127.0.0.1:0 --ready-file "$tmp/$name.url" --rounds "$rounds" \
    --clients-per-round 2 --min-clients 2 --linger 1 --seed 5 --codec fp32 --report "$tmp/$name.json" \
    "${cargs[@]}" >"$tmp/$name.coord.log" 2>&1 &
  local cp=$! c0 c1 rc=0
  pids+=($cp)
  for _ in $(seq 300); do [ -s "$tmp/$name.url" ] && break; sleep 0.1; done
  local url
  url=$(cat "$tmp/$name.url" 2>/dev/null)
  timeout 120 "$client" --coordinator "$url" --insecure --client-index 0 --num-clients 2 --partition dirichlet:0.5 \
    "${a0[@]}" >"$tmp/$name.c0.log" 2>&1 &
  c0=$!
  timeout 120 "$client" --coordinator "$url" --insecure --client-index 1 --num-clients 2 --partition dirichlet:0.5 \
    "${a1[@]}" >"$tmp/$name.c1.log" 2>&1 &
  c1=$!
  pids+=($c0 $c1)
  wait $c0 || rc=1
  wait $c1 || rc=1
  wait $cp || rc=1
  return $rc
}

run seedF 1 --save-model "$tmp/F.safetensors" -- -- || fail "the run that writes F: $(tail -2 "$tmp/seedF.coord.log")"
run seedG 1 --save-model "$tmp/G.safetensors" --seed 6 -- -- || fail "the run that writes G"
run A 2 --init-model "$tmp/F.safetensors" -- --init-model "$tmp/F.safetensors" -- --init-model "$tmp/G.safetensors" ||
  fail "run A: $(tail -2 "$tmp/A.coord.log" "$tmp/A.c0.log" "$tmp/A.c1.log")"
run B 2 --init-model "$tmp/F.safetensors" -- -- || fail "run B: $(tail -2 "$tmp/B.coord.log")"
if [ "$fails" -eq 0 ]; then
  python3 - "$tmp" <<'PY' || fails=$((fails + 1))
import json, sys
t = sys.argv[1]
a, b = (json.load(open(f"{t}/{n}.json")) for n in "AB")
model = a["params"] * 4
ra, rb = a["rounds"][0], b["rounds"][0]
bad = 0
def check(ok, what):
    global bad
    print(("ok   " if ok else "FAIL ") + what)
    bad += not ok
check(ra["tasks_held"] == 1 and rb["tasks_held"] == 0, f"round 1: tasks without weights: A {ra['tasks_held']}, B {rb['tasks_held']}")
check(rb["bytes_down"] - ra["bytes_down"] >= model,
      f"round 1 downloads: A {ra['bytes_down']} bytes, B {rb['bytes_down']}: {rb['bytes_down'] - ra['bytes_down']} saved, a model is {model}")
check(a["rounds"][1]["tasks_held"] == 0, "round 2: nobody holds the new version before downloading it")
check(a["final_model_sha256"] == b["final_model_sha256"] and a["rounds_aggregated"] == 2,
      f"the same final model with and without the file: {a['final_model_sha256'][:16]} / {b['final_model_sha256'][:16]}")
sys.exit(1 if bad else 0)
PY
  if grep -q "is the global model (version 0): no download for it" "$tmp/A.c0.log" &&
     grep -q "is not the global model (version 0): the first task brings it" "$tmp/A.c1.log"; then
    ok "client 0 holds F as version 0; client 1's G is not the global model"
  else
    fail "client progress lines: $(grep -h 'global model' "$tmp/A.c0.log" "$tmp/A.c1.log")"
  fi
fi

# bad files: one line, non-zero exit, before any training
refuse() { # NAME WORD ARGS...
  local name=$1 word=$2; shift 2
  rm -f "$tmp/r.url"
  timeout 60 "$coord" --insecure --listen tcp://127.0.0.1:0 --ready-file "$tmp/r.url" --rounds 1 --clients-per-round 1 \
    --deadline 5 --linger 0 --quiet >/dev/null 2>&1 &
  local cp=$!
  pids+=($cp)
  for _ in $(seq 300); do [ -s "$tmp/r.url" ] && break; sleep 0.1; done
  timeout 60 "$client" --coordinator "$(cat "$tmp/r.url")" --insecure --quiet "$@" >/dev/null 2>"$tmp/err"
  local rc=$? lines
  kill $cp 2>/dev/null
  lines=$(grep -c . "$tmp/err")
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$word" "$tmp/err"; then
    fail "$name: exit $rc, $lines stderr lines (want one naming '$word'):"; sed 's/^/  | /' "$tmp/err"
  else ok "$name: exit $rc: $(cat "$tmp/err")"; fi
}
refuse "--init-model missing" "$tmp/none.safetensors" --init-model "$tmp/none.safetensors"
printf 'not a safetensors file' >"$tmp/junk.safetensors"
refuse "--init-model junk" "$tmp/junk.safetensors" --init-model "$tmp/junk.safetensors"
python3 - "$tmp/F.safetensors" "$tmp/cnnish.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
h["layers.0.weight"]["shape"] = [784, 200]  # transposed: the bytes fit, the layout does not
hb = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
PY
refuse "--init-model with a transposed layer" "where model mlp has [200, 784]" --init-model "$tmp/cnnish.safetensors"

if [ "$fails" -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all --init-model checks passed"
