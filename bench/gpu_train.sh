#!/bin/sh
# gpu_train.sh: cnn training on the GPU, hfl (bench-gpu-train, with and
# without input prefetch) against PyTorch (train_cnn_torch.py --device cuda)
# on the same GPU, model, batch and precision, in one run. One JSON line per
# run (the no-prefetch one with bench-gpu-train's per-op "profile") and a
# "ratio" line per configuration (hfl with prefetch / torch).
# Builds nothing: point it at a folder holding bench-gpu-train (a build's
# bench/ or a bundle's bin/).
#
# usage: bench/gpu_train.sh [BIN_DIR [STEPS [BATCH ...]]]   (defaults: build/bench 200 32 128 512)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/bench}
steps=${2:-200}
if [ $# -gt 2 ]; then shift 2; batches="$*"; else batches="32 128 512"; fi
exe="$bin/bench-gpu-train"
[ -x "$exe" ] || { echo "gpu_train.sh: $exe not found" >&2; exit 1; }
py=${PYTHON:-python3}
torch_py="$here/train_cnn_torch.py"
for b in $batches; do
  for p in fp32 bf16 fp16; do
    h=$("$exe" --device cuda --batch "$b" --steps "$steps" --precision "$p" --json) || { echo "{\"error\": \"hfl $b $p failed\"}"; continue; }
    # the no-prefetch run adds the per-op profile (10 steps after its timed ones)
    n=$("$exe" --device cuda --batch "$b" --steps "$steps" --precision "$p" --no-prefetch --profile --json) || n='{}'
    t=$("$py" "$torch_py" --device cuda --batch "$b" --steps "$steps" --precision "$p" --json 2>/dev/null) || t='{}'
    echo "$h"; echo "$n"; echo "$t"
    "$py" - "$h" "$n" "$t" <<'PY'
import json, sys
h, n, t = (json.loads(a) if a.strip() else {} for a in sys.argv[1:4])
r = {"ratio": "hfl/torch", "batch": h.get("batch"), "precision": h.get("precision"),
     "hfl_samples_per_s": h.get("samples_per_s"), "hfl_no_prefetch_samples_per_s": n.get("samples_per_s"),
     "torch_samples_per_s": t.get("samples_per_s")}
if h.get("samples_per_s") and t.get("samples_per_s"):
    r["hfl_over_torch"] = round(h["samples_per_s"] / t["samples_per_s"], 3)
if h.get("ms_per_step") and n.get("ms_per_step"):
    r["prefetch_speedup"] = round(n["ms_per_step"] / h["ms_per_step"], 3)
print(json.dumps(r))
PY
  done
done
