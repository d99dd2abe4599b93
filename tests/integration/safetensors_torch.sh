#!/usr/bin/env bash
# safetensors_torch.sh: models in and out of hfl through safetensors, checked
# in PyTorch (model/safetensors.h). Skips (77) without Fashion-MNIST or without the
# Python that scripts/test prepares (build/pyvenv: Debian's python3-torch and
# the safetensors package from PyPI).
#  1. A 3-client run saves its model; PyTorch loads it into the equivalent
#     module (torch_model.py) and gets the report's test accuracy to 4 decimals.
#  2. A PyTorch-initialised model (save_file) as --init-model, with lr 0 for a
#     round: the saved model is the same tensors, bit for bit (hfl read every
#     weight where PyTorch put it and wrote it back there).
#  3. The same model as --init-model trains: above 0.7 after 2 rounds, and
#     PyTorch agrees with the report again.
# Usage: safetensors_torch.sh HFL_SIM
set -euo pipefail
sim=$1
data=/usr/share/datasets/fashion-mnist
py=${HFL_BUILD_ROOT:-build}/pyvenv/bin/python
if [ ! -r $data/t10k-images-idx3-ubyte.gz ]; then echo "SKIP: Fashion-MNIST not installed"; exit 77; fi
if ! "$py" -c "import torch, safetensors" 2>/dev/null; then
  echo "SKIP: $py cannot import torch and safetensors (scripts/test makes it)"; exit 77
fi
here=$(dirname "$0")
tmp=$(mktemp -d /tmp/hfl-test-safetensors-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
scenario() { # NAME ROUNDS LR
  cat > "$tmp/$1.json" <<JSON
{"name": "$1", "model": "mlp", "clients": 3, "rounds": $2, "partition": "iid", "codec": "int8", "seed": 2,
 "lr": $3, "precision": "fp32"}
JSON
}
scenario out 2 0.05
"$sim" "$tmp/out.json" --out "$tmp/out" --quiet
"$py" "$here/torch_model.py" check "$tmp/out/model.safetensors" "$tmp/out/report.json" $data

"$py" "$here/torch_model.py" init "$tmp/out/model.safetensors" "$tmp/torch.safetensors" 11
scenario still 1 0
"$sim" "$tmp/still.json" --out "$tmp/still" --init-model "$tmp/torch.safetensors" --quiet
"$py" "$here/torch_model.py" same "$tmp/torch.safetensors" "$tmp/still/model.safetensors"

scenario from 2 0.05
"$sim" "$tmp/from.json" --out "$tmp/from" --init-model "$tmp/torch.safetensors" --quiet
"$py" - "$tmp/from/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = r["final_test_acc"] > 0.7 and r.get("init_model", "").endswith("torch.safetensors")
print(f"{'ok  ' if ok else 'FAIL'} from PyTorch's init: test accuracy {r['final_test_acc']:.4f} after 2 rounds")
sys.exit(0 if ok else 1)
PY
"$py" "$here/torch_model.py" check "$tmp/from/model.safetensors" "$tmp/from/report.json" $data
