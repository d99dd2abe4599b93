#!/bin/sh
# lm_block_gpu.sh: one GPT block's forward and backward on the GPU, hfl
# (bench-lm-block --device cuda) against PyTorch (lm_block_torch.py --device
# cuda, TF32 off) on the same GPU, shapes and precision, in one run. One JSON
# line per run and a "ratio" line per configuration (torch ms / hfl ms:
# above 1, hfl is faster; the goal is 0.8 or more); exits 1 when an hfl run
# failed (PyTorch's absence leaves its figures null). Builds nothing: point
# it at a folder holding bench-lm-block (a build's bench/ or a bundle's bin/).
#
# usage: bench/lm_block_gpu.sh [BIN_DIR [STEPS]]   (defaults: build/bench 50)
# Shapes: n 8 sequences of T 256 tokens, C 768 and 12 heads (GPT-2 small's
# block), and n 8, T 128, C 128, H 4 (the CPU bench's); fp32 and bf16.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/bench}
steps=${2:-50}
exe="$bin/bench-lm-block"
[ -x "$exe" ] || { echo "lm_block_gpu.sh: $exe not found" >&2; exit 1; }
py=${PYTHON:-python3}
fails=0
for shape in "8 256 768 12" "8 128 128 4"; do
  set -- $shape
  args="--n $1 --T $2 --C $3 --H $4 --steps $steps --json"
  for p in fp32 bf16; do
    # the one JSON line of each; a failed or silent hfl run fails the script at the end
    h=$("$exe" $args --device cuda --precision "$p" | grep '^{') || { echo "{\"error\": \"hfl $shape $p failed\"}"; fails=$((fails + 1)); continue; }
    t=$("$py" "$here/lm_block_torch.py" $args --device cuda --precision "$p" 2>/dev/null | grep '^{') || t='{}'
    echo "$h"; echo "$t"
    "$py" - "$h" "$t" <<'PY'
import json, sys
h, t = (json.loads(a) if a.strip() else {} for a in sys.argv[1:3])
r = {"ratio": "torch/hfl", "n": h.get("n"), "T": h.get("T"), "C": h.get("C"), "H": h.get("H"),
     "precision": h.get("precision"), "hfl_ms": h.get("ms_per_step"), "torch_ms": t.get("ms_per_step")}
if h.get("ms_per_step") and t.get("ms_per_step"):
    r["hfl_over_torch"] = round(t["ms_per_step"] / h["ms_per_step"], 3)
print(json.dumps(r))
PY
  done
done
exit $((fails > 0))
