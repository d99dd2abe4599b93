#!/usr/bin/env bash
# torch_check.sh: one of hfl's computations against PyTorch on the same inputs
# (tests/model/gpt_torch.py, tests/kernels/lm_torch.py): DUMP writes hfl's inputs and results as safetensors, SCRIPT (a
# Python file beside the test) redoes them with autograd and exits 1 on a
# mismatch. Skips (77) without Debian's python3-torch, which scripts/test
# installs. Usage: torch_check.sh DUMP SCRIPT [DUMP's further arguments]
set -euo pipefail
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then echo "SKIP: $py cannot import torch (python3-torch)"; exit 77; fi
tmp=$(mktemp -d /tmp/hfl-test-torch-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$1" "$tmp/dump.safetensors" "${@:3}"
PYTHONPATH="$(dirname "$0")" "$py" "$2" "$tmp/dump.safetensors"
