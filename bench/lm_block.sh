#!/bin/sh
# lm_block.sh: one GPT block's forward and backward, hfl (bench-lm-block, CPU
# backend) against PyTorch (lm_block_torch.py) on the same shapes and thread
# count, in one run; prints ms per step for each and the ratio torch/hfl
# (above 1: hfl is faster). Builds nothing: point it at a build dir.
#
# usage: bench/lm_block.sh [BUILD_DIR [THREADS [STEPS]]]   (defaults: build 1 20)
# Shapes: n 8 sequences of T 128 and 256 tokens, C 128, H 4; hfl in fp32 and bf16.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
threads=${2:-1}
steps=${3:-20}
exe="$build/bench/bench-lm-block"
if [ ! -x "$exe" ]; then
    echo "lm_block.sh: $exe not found; build first (meson setup $build && ninja -C $build)" >&2
    exit 1
fi
export OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"
for T in 128 256; do
    args="--n 8 --T $T --C 128 --H 4 --steps $steps --threads $threads --json"
    h32=$("$exe" $args --precision fp32)
    h16=$("$exe" $args --precision bf16)
    t=$(/usr/bin/python3 "$here/lm_block_torch.py" $args)
    /usr/bin/python3 - "$h32" "$h16" "$t" <<'PY'
import json, sys
h, hb, t = (json.loads(a) for a in sys.argv[1:])
print(f"GPT block n {h['n']} T {h['T']} C {h['C']} H {h['H']}, {h['threads']} thread(s), {h['steps']} steps")
print(f"  hfl fp32   {h['ms_per_step']:8.2f} ms/step  ({h['tokens_per_s']:.0f} tokens/s)")
print(f"  hfl bf16   {hb['ms_per_step']:8.2f} ms/step  ({hb['tokens_per_s']:.0f} tokens/s)")
print(f"  torch fp32 {t['ms_per_step']:8.2f} ms/step  ({t['tokens_per_s']:.0f} tokens/s, torch {t['torch']})")
print(f"  torch/hfl fp32: {t['ms_per_step'] / h['ms_per_step']:.2f}x")
PY
done
