#!/usr/bin/env bash
# lm_budgets.sh: what the client's chooser picks for a GPT spec as the memory
# budget shrinks (the language model's requirement: "for budgets from large to small, the
# configuration chosen (micro-batch, precision, schedule), the predicted and
# measured peak and the predicted and measured step time; the smallest budget
# at which the model can still train"). Each budget runs `hfl-client --plan
# --trial-step` from a fresh state directory (no learned overhead), which
# chooses for a run batch of 32, verifies the choice in a forked child and
# trains one step of it; the table is that JSON. Markdown to stdout.
# Usage: bench/lm_budgets.sh [BUILD_DIR] [SPEC] [BUDGETS...]
set -euo pipefail
build=${1:-build}
spec=${2:-scenarios/models/gpt-kjv.json}
shift $(( $# > 2 ? 2 : $# ))
budgets=("$@")
[ ${#budgets[@]} -gt 0 ] || budgets=(256M 64M 32M 16M 12M 8M 6M 5M 4M 3M 2M)
tmp=$(mktemp -d /tmp/hfl-lm-budgets-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for b in "${budgets[@]}"; do
  "$build/client/hfl-client" --plan --model "$spec" --memory-budget "$b" --trial-step --batch 32 --json \
    --state-dir "$tmp/state-$b" > "$tmp/$b.json" 2>/dev/null || true
done
python3 - "$tmp" "$spec" "${budgets[@]}" <<'PY'
import json, sys
tmp, spec, budgets = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"model {spec}, run batch 32\n")
print("| budget | micro-batch x steps | precision | ckpt | predicted MiB | measured MiB | predicted samples/s | measured samples/s |")
print("| ---: | --- | --- | --- | ---: | ---: | ---: | ---: |")
smallest = None
for b in budgets:
    try:
        r = json.load(open(f"{tmp}/{b}.json"))
    except (OSError, ValueError):
        print(f"| {b} | (no output) | | | | | | |")
        continue
    p = r.get("plan")
    if not r.get("trained") or not p:
        print(f"| {b} | refused: {(r.get('error') or '')[:90]} | | | | | | |")
        continue
    smallest = b
    mib = 1 << 20
    print(f"| {b} | {p['batch']} x {p['accumulation_steps']} | {p['precision']} | {p['checkpoint']} | "
          f"{p['predicted_peak_bytes'] / mib:.2f} | {r['measured_peak_bytes'] / mib:.2f} | "
          f"{p['predicted_samples_per_s']:.0f} | {p['step_batch'] / r['step_s'] if r['step_s'] else 0:.0f} |")
print(f"\nsmallest budget that trained: {smallest}")
PY
