#!/bin/sh
# train_cnn.sh: cnn training throughput, hfl (bench-train-cnn) against PyTorch
# (train_cnn_torch.py) at the same thread count and batch, in one run; prints
# samples/s for each, the ratio hfl/torch, and PyTorch again with oneDNN off
# (per-sample unfold + OpenBLAS GEMM, the algorithm hfl runs). Builds
# nothing: point it at a build dir.
#
# usage: bench/train_cnn.sh [BUILD_DIR [THREADS [STEPS [BATCH ...]]]]
#        (defaults: build 1 100 8 32 128)
#
# Both sides get OPENBLAS_NUM_THREADS and OMP_NUM_THREADS = THREADS (hfl also
# calls hfl_blas_set_threads, torch also torch.set_num_threads, which is
# what oneDNN's convolutions run on). bench-train-cnn's memory figures (peak
# RSS growth of creating the trainer and of one step) are shown under each
# batch's line.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
threads=${2:-1}
steps=${3:-100}
if [ $# -gt 3 ]; then shift 3; batches="$*"; else batches="8 32 128"; fi
exe="$build/bench/bench-train-cnn"
if [ ! -x "$exe" ]; then
    echo "train_cnn.sh: $exe not found; build first (meson setup $build && ninja -C $build)" >&2
    exit 1
fi
export OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"
memlog=$(mktemp)
trap 'rm -f "$memlog"' EXIT
echo "cnn (FedAvg CNN, 1,663,370 params), $threads thread(s), $steps steps per run"
for batch in $batches; do
    hfl_json=$("$exe" --batch "$batch" --steps "$steps" --threads "$threads" --json 2>"$memlog")
    torch_json=$(/usr/bin/python3 "$here/train_cnn_torch.py" --batch "$batch" --steps "$steps" \
        --threads "$threads" --json)
    plain_json=$(/usr/bin/python3 "$here/train_cnn_torch.py" --batch "$batch" --steps "$steps" \
        --threads "$threads" --json --no-mkldnn)
    /usr/bin/python3 - "$hfl_json" "$torch_json" "$plain_json" <<'PY'
import json, sys
h, t, p = (json.loads(a) for a in sys.argv[1:4])
print(f"batch {h['batch']:4d}: hfl {h['samples_per_s']:8.1f}  torch {t['samples_per_s']:8.1f}"
      f"  hfl/torch {h['samples_per_s'] / t['samples_per_s']:.2f}"
      f"  | torch without oneDNN {p['samples_per_s']:8.1f}"
      f"  hfl/that {h['samples_per_s'] / p['samples_per_s']:.2f}  samples/s (torch {t['torch']})")
PY
    sed 's/^bench-train-cnn: memory: /    hfl memory: /' "$memlog"
done
