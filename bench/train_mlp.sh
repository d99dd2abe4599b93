#!/bin/sh
# train_mlp.sh: mlp training throughput, hfl (bench-train-mlp) against PyTorch
# (train_mlp_torch.py) at the same thread count, in one run; prints samples/s
# for each and the ratio hfl/torch. Builds nothing: point it at a build dir.
#
# usage: bench/train_mlp.sh [BUILD_DIR [THREADS [STEPS]]]   (defaults: build 1 3000)
#
# Both sides get OPENBLAS_NUM_THREADS and OMP_NUM_THREADS = THREADS (hfl also
# calls hfl_blas_set_threads, torch also torch.set_num_threads). Any
# OPENBLAS_CORETYPE in the environment reaches both, since Debian's torch does
# its Linear GEMMs in the same system OpenBLAS.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
threads=${2:-1}
steps=${3:-3000}
exe="$build/bench/bench-train-mlp"
if [ ! -x "$exe" ]; then
    echo "train_mlp.sh: $exe not found; build first (meson setup $build && ninja -C $build)" >&2
    exit 1
fi
export OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"
hfl_json=$("$exe" --batch 32 --steps "$steps" --threads "$threads" --json)
torch_json=$(/usr/bin/python3 "$here/train_mlp_torch.py" --batch 32 --steps "$steps" \
    --threads "$threads" --json)
/usr/bin/python3 - "$hfl_json" "$torch_json" <<'PY'
import json, sys
h, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"mlp 784-200-200-10, batch {h['batch']}, {h['threads']} thread(s), {h['steps']} steps")
print(f"hfl    {h['samples_per_s']:10.1f} samples/s")
print(f"torch  {t['samples_per_s']:10.1f} samples/s  (torch {t['torch']})")
print(f"ratio hfl/torch: {h['samples_per_s'] / t['samples_per_s']:.2f}")
PY
