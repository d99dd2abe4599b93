#!/usr/bin/env bash
# bundle.sh: scripts/bundle makes a folder that runs anywhere: every non-base,
# non-CUDA library the binaries load comes from its lib/ (ldd under env -i),
# its programs run from a moved copy with an empty environment, and its
# scripts/gpu-check ends with one JSON line that counts no failure (here,
# without a GPU: everything skipped). Skips (77) without patchelf or the data.
set -u
root=${HFL_SOURCE_ROOT:?} build=${HFL_BUILD_ROOT:?}
command -v patchelf >/dev/null || { echo "SKIP: patchelf is not installed (scripts/setup installs it)"; exit 77; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "SKIP: Fashion-MNIST not installed"; exit 77; }
tmp=$(mktemp -d /tmp/hfl-bundle-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

HFL_BUILD_ROOT=$build "$root/scripts/bundle" "$tmp/made" || { echo "FAIL scripts/bundle"; exit 1; }
mv "$tmp/made" "$tmp/moved" # relocatable: nothing may point at where it was made
b=$tmp/moved
for f in "$b"/bin/* "$b"/lib/*; do
  [ "$(head -c4 "$f" | tail -c3)" = ELF ] || continue
  env -i /usr/bin/ldd "$f" | grep -q 'not found' && fail "$(basename "$f"): a library is not found"
  outside=$(env -i /usr/bin/ldd "$f" | awk '$2 == "=>" {print $1, $3}' |
            grep -Ev '^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.|^libcu|^libnv' |
            grep -v " $b/" || true)
  [ -n "$outside" ] && fail "$(basename "$f") loads from outside the bundle: $outside"
done
[ -e "$b/lib/libcudart.so.13" ] || [ -e "$b/lib/libcublas.so.13" ] && fail "the bundle ships a CUDA library"
for p in hfl-client hfl-coordinator hfl-sim hfl-pki; do
  [ -x "$b/bin/$p" ] || fail "bin/$p missing"
done
env -i "$b/bin/hfl-client" --plan --model mlp --device cpu >"$tmp/plan.txt" 2>&1 || fail "hfl-client --plan from the bundle: $(tail -1 "$tmp/plan.txt")"
env -i "$b/bin/hfl-pki" --out "$tmp/pki" --clients 1 >/dev/null 2>&1 || fail "hfl-pki from the bundle"
[ -f "$b/data/train-images-idx3-ubyte.gz" ] && [ -f "$b/scenarios/quickstart.json" ] && [ -x "$b/cuda-src/build-module.sh" ] ||
  fail "data, scenarios or cuda-src missing"
if [ -f "$build/kernels/cuda/libhfl_cuda.so" ]; then
  [ -f "$b/lib/libhfl_cuda.so" ] || fail "the CUDA module is not in lib/"
fi

env -i PATH=/usr/bin:/bin OUT="$tmp/check" "$b/scripts/gpu-check" >"$tmp/check.txt" 2>&1
rc=$?
last=$(tail -1 "$tmp/check.txt")
echo "gpu-check: $last"
python3 -c 'import json, sys; j = json.loads(sys.argv[1]); assert j["failed"] == 0 and len(j["tests"]) >= 1, j' "$last" ||
  fail "gpu-check's last line is not a summary without failures"
if ! command -v nvidia-smi >/dev/null; then # no GPU here: it must know, and skip everything
  python3 -c '
import json, sys
j = json.loads(sys.argv[1])
assert j["reason"] and j["passed"] == 0 and j["skipped"] == len(j["tests"]) + len(j["benchmarks"]), j' "$last" ||
    fail "gpu-check without a GPU did not report every test skipped, with the reason"
fi
[ "$rc" -eq 0 ] || fail "gpu-check exited $rc"
cmp -s "$tmp/check/summary.json" <(echo "$last") || fail "gpu-check did not write the summary to \$OUT"
[ -s "$tmp/check/tests/gpu_device_probe.log" ] || fail "gpu-check kept no test output"
echo "$fails failed"
[ "$fails" -eq 0 ]
