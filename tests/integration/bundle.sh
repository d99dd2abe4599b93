#!/usr/bin/env bash
# bundle.sh: scripts/bundle makes a folder that runs anywhere: every non-base,
# non-CUDA library the binaries load comes from its lib/ (ldd under env -i),
# no program links a CUDA library (readelf -d), its programs run from a moved
# copy with an empty environment (a one-round hfl-sim on the shipped data
# among them), and it stays under 60 MB: the script refuses, saying the size,
# a bundle over its limit. (gpu_check.sh runs the bundle's scripts/gpu-check.)
# Skips (77) without patchelf or the data. In the sanitizer build the size is
# not checked: ASan and UBSan make every program 4-7 times larger (hfl-client
# 3.4 MB instead of 0.5) and that bundle is never shipped; the plain build's
# run of this test checks the bundle that gpu-check gets.
set -u
root=${HFL_SOURCE_ROOT:?} build=${HFL_BUILD_ROOT:?}
limit=60000000
[ -n "${HFL_SANITIZED:-}" ] && { limit=1000000000; export HFL_BUNDLE_MAX_BYTES=$limit; echo "sanitizer build: size not checked"; }
command -v patchelf >/dev/null || { echo "SKIP: patchelf is not installed (scripts/setup installs it)"; exit 77; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "SKIP: Fashion-MNIST not installed"; exit 77; }
tmp=$(mktemp -d /tmp/hfl-bundle-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

HFL_BUILD_ROOT=$build "$root/scripts/bundle" "$tmp/made" || { echo "FAIL scripts/bundle"; exit 1; }
mv "$tmp/made" "$tmp/moved" # relocatable: nothing may point at where it was made
b=$tmp/moved
# The size: under 60 MB (10^6 bytes), counted here apart from the script's own check.
bytes=$(find "$b" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
echo "bundle: $bytes bytes in its files"
[ "$bytes" -lt $limit ] || fail "the bundle holds $bytes bytes, over $limit"
if HFL_BUILD_ROOT=$build HFL_BUNDLE_MAX_BYTES=$((bytes / 2)) "$root/scripts/bundle" "$tmp/small" >"$tmp/small.txt" 2>&1; then
  fail "scripts/bundle made a bundle over HFL_BUNDLE_MAX_BYTES=$((bytes / 2))"
else
  grep -q 'over the limit of' "$tmp/small.txt" || fail "scripts/bundle over its limit did not say so: $(head -1 "$tmp/small.txt")"
  echo "over a limit of $((bytes / 2)) bytes: $(head -1 "$tmp/small.txt")"
fi
rm -rf "$tmp/small"
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
  cuda=$(readelf -d "$b/bin/$p" | grep NEEDED | grep -Ei 'libcuda|libcublas|libcudart|libnvidia' | tr -s ' ')
  [ -z "$cuda" ] || fail "bin/$p links CUDA: $cuda"
done
env -i "$b/bin/hfl-client" --plan --model mlp --device cpu >"$tmp/plan.txt" 2>&1 || fail "hfl-client --plan from the bundle: $(tail -1 "$tmp/plan.txt")"
env -i "$b/bin/hfl-pki" --out "$tmp/pki" --clients 1 >/dev/null 2>&1 || fail "hfl-pki from the bundle"
[ -f "$b/scenarios/quickstart.json" ] && [ -x "$b/cuda-src/build-module.sh" ] || fail "scenarios or cuda-src missing"
# The data: the IDX headers (magic, count) of a training subset and of the whole test set.
python3 - "$b/data" <<'PY' || fail "the bundle's data is not Fashion-MNIST's first 6,000 training images and its test set"
import gzip, struct, sys
for name, magic, n in (("train-images-idx3-ubyte", 2051, 6000), ("train-labels-idx1-ubyte", 2049, 6000),
                       ("t10k-images-idx3-ubyte", 2051, 10000), ("t10k-labels-idx1-ubyte", 2049, 10000)):
    with gzip.open(f"{sys.argv[1]}/{name}.gz") as f:
        got = struct.unpack(">II", f.read(8))
    assert got == (magic, n), f"{name}.gz: magic and count {got}, want {(magic, n)}"
PY
# A one-round fleet from the bundle alone, on its data.
echo '{"name": "bundle", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "seed": 1}' >"$tmp/s.json"
if env -i "$b/bin/hfl-sim" "$tmp/s.json" --data "$b/data" --out "$tmp/sim" --quiet --json >"$tmp/sim.json" 2>"$tmp/sim.err"; then
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["complete"] and r["rounds_aggregated"] == 1 and r["final_test_acc"] > 0.5, r
print("hfl-sim from the bundle: 2 clients, 1 round, test accuracy %.4f" % r["final_test_acc"])' "$tmp/sim.json" ||
    fail "hfl-sim from the bundle: the report is not a finished run"
else
  fail "hfl-sim from the bundle: $(tail -1 "$tmp/sim.err")"
fi
if [ -f "$build/kernels/cuda/libhfl_cuda.so" ]; then
  [ -f "$b/lib/libhfl_cuda.so" ] || fail "the CUDA module is not in lib/"
fi

echo "$fails failed"
[ "$fails" -eq 0 ]
