#!/usr/bin/env bash
# device_select.sh: the CUDA backend is a module loaded at run time.
# (1) No executable links a CUDA library (readelf -d: no libcuda*, libcublas*).
# (2) The module exports its entry point and nothing else.
# (3) --device: auto runs where it can and, when it falls back to the CPU,
#     says why exactly once; cuda fails with one line where no GPU can be had;
#     an unknown name fails with one line in every program; --help documents it.
# usage: device_select.sh HFL_CLIENT HFL_COORDINATOR HFL_SIM HFL_PKI [MODULE]
#        (MODULE: the built libhfl_cuda.so; absent in a build without CUDA)
set -u
client=$1 coord=$2 sim=$3 pki=$4 module=${5:-}
tmp=$(mktemp -d /tmp/hfl-device-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
unset HFL_CUDA_MODULE
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

for exe in "$client" "$coord" "$sim" "$pki"; do
  cuda_libs=$(readelf -d "$exe" | grep NEEDED | grep -Ei 'libcuda|libcublas|libnvidia' | tr -s ' ')
  if [ -n "$cuda_libs" ]; then fail "$(basename "$exe") links CUDA: $cuda_libs"
  else ok "$(basename "$exe") links no CUDA library"; fi
done
for exe in "$client" "$coord" "$sim"; do
  if "$exe" --help | grep -q -- '--device'; then ok "$(basename "$exe") --help documents --device"
  else fail "$(basename "$exe") --help does not mention --device"; fi
done

if [ -n "$module" ]; then
  syms=$(nm -D --defined-only "$module" | awk '{print $3}' | tr '\n' ' ')
  if [ "$syms" = "hfl_cuda_module_entry " ]; then ok "the module exports hfl_cuda_module_entry only"
  else fail "the module exports: $syms"; fi
fi

# run NAME CMD...: output in $tmp/out, $tmp/err; status in $rc
run() { local name=$1; shift; timeout 120 "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
one_error_line() { # NAME: exit 1..123 and exactly one stderr line
  local lines; lines=$(grep -c . "$tmp/err")
  if [ "$rc" -ge 1 ] && [ "$rc" -lt 124 ] && [ "$lines" -eq 1 ]; then ok "$1: exit $rc: $(cat "$tmp/err")"
  else fail "$1: exit $rc, $lines stderr lines:"; sed 's/^/  | /' "$tmp/err"; fi
}

run cuda "$client" --plan --model mlp --device cuda
if [ "$rc" -eq 0 ]; then
  # A usable GPU: auto must take it and say nothing about the CPU.
  run auto "$client" --plan --model mlp --device auto
  if [ "$rc" -eq 0 ] && ! grep -q 'training on the CPU' "$tmp/out" "$tmp/err"; then ok "auto takes the GPU"
  else fail "auto did not take the usable GPU (exit $rc)"; fi
else
  one_error_line "--device cuda without a GPU"
  grep -q 'device cuda unavailable' "$tmp/err" || fail "--device cuda: no reason given"
  run auto "$client" --plan --model mlp --device auto
  n=$(cat "$tmp/out" "$tmp/err" | grep -c 'training on the CPU: ')
  reason=$(grep -h 'training on the CPU: ' "$tmp/out" "$tmp/err" | head -1 | sed 's/.*training on the CPU: //')
  if [ "$rc" -eq 0 ] && [ "$n" -eq 1 ] && grep -q '(cpu backend)' "$tmp/out"; then ok "auto falls back to the CPU, once: $reason"
  else fail "auto: exit $rc, $n fallback lines"; sed 's/^/  | /' "$tmp/out" "$tmp/err" | head -20; fi
  [ -n "$reason" ] && [ "$(cat "$tmp/out" "$tmp/err" | grep -cF "$reason")" -eq 1 ] || fail "the reason is not printed exactly once"
  # With the module built, the loader must have found it: the reason is the driver's, not "not found"
  # (without a driver the module is found and, to spare its memory, not loaded).
  if [ -n "$module" ]; then
    case $reason in *"module not found"*|*"does not load"*) fail "the built module was not loaded: $reason";;
                    *) ok "the build tree's module was found: $reason";; esac
  fi
  run json "$client" --plan --model mlp --json
  if [ "$rc" -eq 0 ] && [ ! -s "$tmp/err" ] && python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["backend"] == "cpu" and j["fallback_reason"] == sys.argv[2], j.get("fallback_reason")' "$tmp/out" "$reason"; then
    ok "--json stays JSON, with the reason in fallback_reason"
  else fail "--plan --json with a fallback (exit $rc)"; sed 's/^/  | /' "$tmp/err" | head -3; fi
fi

HFL_CUDA_MODULE=$tmp/none.so run missing "$client" --plan --model mlp
if [ "$rc" -eq 0 ] && [ "$(grep -c 'training on the CPU: CUDA module not found' "$tmp/out")" -eq 1 ]; then
  ok "a missing module: the CPU, and why"
else fail "HFL_CUDA_MODULE=missing: exit $rc"; sed 's/^/  | /' "$tmp/out" "$tmp/err" | head; fi
HFL_CUDA_MODULE=$tmp/none.so run missing-cuda "$client" --plan --model mlp --device cuda
one_error_line "--device cuda without the module"

run bogus "$client" --plan --model mlp --device bogus
one_error_line "client --device bogus"
grep -q "unknown device 'bogus' (auto, cpu, cuda)" "$tmp/err" || fail "client: the error does not list the devices"
run bogus-coord "$coord" --insecure --listen tcp://127.0.0.1:0 --device bogus
one_error_line "coordinator --device bogus"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8"}' >"$tmp/s.json"
run bogus-sim "$sim" "$tmp/s.json" --out "$tmp/run" --device bogus
one_error_line "sim --device bogus"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "client_devices": {"client-1": "tpu"}}' >"$tmp/s2.json"
run bogus-scenario "$sim" "$tmp/s2.json" --out "$tmp/run"
one_error_line "sim: client_devices with an unknown device"

echo "$fails failed"
[ "$fails" -eq 0 ]
