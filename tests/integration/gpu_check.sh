#!/usr/bin/env bash
# gpu_check.sh: the bundle's scripts/gpu-check, run here, where there is no GPU.
# (1) Every step, 0 to 7 in order, prints one JSON line with status "skip" and
#     a reason; the first names the device (null here); the same lines are in
#     $OUT/summary.jsonl; each step leaves its log; the exit status is 0.
# (2) HFL_GPU_CHECK_REHEARSE=cpu runs step 5's three hfl-sim runs on the CPU:
#     it passes, with sha_equal true, an accuracy gap of 0 and each client's
#     predicted and measured peak (the step's own plumbing, not the GPU).
# (3) Where nvidia-smi shows a GPU (a stand-in here) that cannot be used, a
#     step that ran nothing fails, and so does the run (exit 1); only a step
#     whose code is not in the bundle may still skip.
# Skips (77) where nvidia-smi exists (a GPU machine runs scripts/gpu-check
# itself, for minutes), or without patchelf or the data scripts/bundle needs.
set -u
root=${HFL_SOURCE_ROOT:?} build=${HFL_BUILD_ROOT:?}
command -v nvidia-smi >/dev/null && { echo "SKIP: nvidia-smi is here: run scripts/gpu-check from a bundle instead"; exit 77; }
command -v patchelf >/dev/null || { echo "SKIP: patchelf is not installed (scripts/setup installs it)"; exit 77; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "SKIP: Fashion-MNIST not installed"; exit 77; }
tmp=$(mktemp -d /tmp/hfl-gpu-check-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# A sanitizer build's bundle is over 60 MB (its programs are instrumented) and
# never shipped: bundle.sh checks the size of the plain build's.
[ -n "${HFL_SANITIZED:-}" ] && export HFL_BUNDLE_MAX_BYTES=1000000000
HFL_BUILD_ROOT=$build "$root/scripts/bundle" "$tmp/b" >/dev/null || { echo "FAIL scripts/bundle"; exit 1; }
# check NAME OUT <<PYTHON: runs PYTHON over the JSON lines of OUT/stdout.txt (the
# list `lines`, which must equal OUT/summary.jsonl's, steps 0..7); an assertion
# failing is a FAIL.
check() {
  { cat <<'PY'; cat; } | python3 - "$2" || fail "$1"
import json, os, sys
out = sys.argv[1]
lines = [json.loads(l) for l in open(os.path.join(out, "stdout.txt")) if l.startswith("{")]
summary = [json.loads(l) for l in open(os.path.join(out, "summary.jsonl"))]
assert lines == summary, "stdout's JSON lines are not summary.jsonl's"
assert [l["step"] for l in lines] == list(range(8)), [l["step"] for l in lines]
PY
}
gpu_check() { # OUT [VAR=VALUE...]: runs the bundle's gpu-check with an empty environment
  local out=$1; shift
  env -i PATH="${GPU_CHECK_PATH:-/usr/bin:/bin}" OUT="$out" "$@" "$tmp/b/scripts/gpu-check" >"$tmp/stdout.txt" 2>&1
  rc=$?
  mkdir -p "$out" && mv "$tmp/stdout.txt" "$out/"
}

# (1) No GPU: every step skips, saying why.
gpu_check "$tmp/plain"
[ "$rc" -eq 0 ] || fail "gpu-check without a GPU exited $rc"
check "every step skips with a reason" "$tmp/plain" <<'PY'
assert "device" in lines[0] and lines[0]["device"] is None, lines[0]
for l in lines:
    assert l["status"] == "skip" and l["reason"], l
    assert os.path.getsize(os.path.join(out, "step%d-%s.log" % (l["step"], l["name"]))) > 0, l["name"]
    print("step %d %s: skip: %s" % (l["step"], l["name"], l["reason"][:110]))
PY

# (2) Step 5 on the CPU.
gpu_check "$tmp/rehearse" HFL_GPU_CHECK_REHEARSE=cpu
[ "$rc" -eq 0 ] || fail "the rehearsal exited $rc"
check "step 5 rehearsed on the CPU" "$tmp/rehearse" <<'PY'
s = lines[5]
assert s["status"] == "pass" and s["sha_equal"] is True and s["acc_diff_points"] == 0, s
assert len(s["sha_a"]) == 64 and 0.5 < s["acc_a"] <= 1, s
assert sorted(c["name"] for c in s["clients_c"]) == ["client-%d" % i for i in range(4)], s["clients_c"]
assert all(c["predicted_peak_bytes"] > 0 and c["measured_peak_bytes"] > 0 for c in s["clients_c"]), s["clients_c"]
assert [l["status"] for l in lines] == ["skip"] * 5 + ["pass", "skip", "pass"], [l["status"] for l in lines]
print("step 5 on the CPU: sha_equal, accuracy %.4f both, %d clients" % (s["acc_a"], len(s["clients_c"])))
PY

# (3) A GPU that nvidia-smi shows and hfl cannot use: a failure, not a skip.
mkdir -p "$tmp/fake"
cat >"$tmp/fake/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in
  -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
  *query-gpu=name*) echo "Stand-in GPU, 9.0, 81559 MiB" ;;
  *query-gpu=driver*) echo "0.0" ;;
  *) echo "stand-in nvidia-smi" ;;
esac
SH
chmod +x "$tmp/fake/nvidia-smi"
GPU_CHECK_PATH=$tmp/fake:/usr/bin:/bin gpu_check "$tmp/gpu"
[ "$rc" -eq 1 ] || fail "gpu-check with an unusable GPU exited $rc, not 1"
check "an unusable GPU fails every step that ran nothing" "$tmp/gpu" <<'PY'
assert lines[0]["device"] == "Stand-in GPU, 9.0, 81559 MiB" and lines[0]["gpus"] == 1, lines[0]
for l in lines:
    if l["status"] == "skip":
        assert l["reason"].startswith("not built in this bundle"), l
    else:
        assert l["status"] == "fail" and l["reason"], l
assert [l["status"] for l in lines if l["step"] in (0, 1, 2, 5, 6, 7)] == ["fail"] * 6, lines
print("with a GPU shown: " + ", ".join("%d %s" % (l["step"], l["status"]) for l in lines))
PY

echo "$fails failed"
[ "$fails" -eq 0 ]
