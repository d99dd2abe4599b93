#!/usr/bin/env python3
"""memory_sweep.py: the memory promise over random draws.

Each draw picks a model (mlp, cnn, scenarios/models/small-cnn.json), a run
batch, a precision policy (auto, fp32, bf16, fp16) and a memory budget drawn
log-uniformly from half the smallest configuration's arena to 1.5x the
largest cold prediction for that model and batch, and runs

    hfl-client --plan --trial-step --json --model M --batch B --precision P
               --memory-budget BUDGET --state-dir <empty dir>

which chooses and verifies a plan as a client does from a fresh state dir
and trains one optimizer step of the run's batch (client/trial.c). A draw
either trains (its measured peak must be within the budget) or is refused up
front with one line naming the smallest budget that would do (which must be
above the draw's budget). Anything else (a breach, a crash, a refusal that
is wrong or not one line) is a failure. The counts, the measured/budget and
measured/predicted ratios are printed and written as JSON.

usage: bench/memory_sweep.py BUILD_DIR [--draws 1000] [--seed 1] [--jobs 2] [--out DIR]
"""
import argparse
import concurrent.futures
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["mlp", "cnn", os.path.join(ROOT, "scenarios", "models", "small-cnn.json")]
BATCHES = [1, 8, 32, 100, 256]
POLICIES = ["auto", "fp32", "bf16", "fp16"]
MIB = 1048576.0


def trial(client, model, batch, policy, budget, extra=()):
    with tempfile.TemporaryDirectory(prefix="hfl-sweep-") as state:
        cmd = [client, "--plan", "--json", "--model", model, "--batch", str(batch), "--precision", policy,
               "--memory-budget", str(budget), "--state-dir", state, *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        out = json.loads(p.stdout)
    except json.JSONDecodeError:
        out = None
    return p.returncode, out, p.stderr


def bounds(client, model, batch):
    """Half the smallest arena and 1.5x the largest cold prediction at this batch."""
    rc, out, err = trial(client, model, batch, "auto", 1 << 40)
    if rc != 0 or out is None:
        sys.exit(f"memory_sweep: planning {model} at batch {batch} failed: {err.strip()}")
    rows = out["candidates"]
    return 0.5 * min(r["arena_bytes"] for r in rows), 1.5 * max(r["predicted_peak_bytes"] for r in rows)


def classify(draw, rc, out, err):
    """'trained', 'refused' or 'failed: why'."""
    if out is None:
        return f"failed: no JSON (exit {rc}): {err.strip()[:200]}"
    if out.get("breached"):
        return f"failed: breach: {out.get('error')}"
    if out.get("trained"):
        if rc != 0:
            return f"failed: trained but exit {rc}"
        if out["measured_peak_bytes"] <= 0 or out["measured_peak_bytes"] > draw["budget"]:
            return f"failed: measured {out['measured_peak_bytes']} over budget {draw['budget']}"
        return "trained"
    e = out.get("error") or ""
    m = re.match(r"nothing fits in [0-9.]+ MiB for model \S+: the smallest budget that would is ([0-9.]+) MiB "
                 r"as predicted, at least ([0-9.]+) MiB for the arena alone$", e)
    if rc == 0 or "\n" in e or not m:
        return f"failed: refusal (exit {rc}): {e[:200]}"
    if float(m.group(1)) * MIB <= draw["budget"] * 0.9999:
        return f"failed: refused, yet names a smaller budget: {e}"
    if float(m.group(2)) > float(m.group(1)):
        return f"failed: refused, with an arena floor above the prediction: {e}"
    return "refused"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="memory-sweep.json")
    a = ap.parse_args()
    client = os.path.join(a.build_dir, "client", "hfl-client")
    rng = random.Random(a.seed)
    limits = {(m, b): bounds(client, m, b) for m in MODELS for b in BATCHES}
    draws = []
    for i in range(a.draws):
        m, b, p = rng.choice(MODELS), rng.choice(BATCHES), rng.choice(POLICIES)
        lo, hi = limits[(m, b)]
        budget = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        draws.append({"i": i, "model": os.path.basename(m), "path": m, "batch": b, "precision": p, "budget": budget})

    results = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        futures = {pool.submit(trial, client, d["path"], d["batch"], d["precision"], d["budget"],
                               ["--trial-step"]): d for d in draws}
        for k, f in enumerate(concurrent.futures.as_completed(futures)):
            d = futures[f]
            rc, out, err = f.result()
            d["result"] = classify(d, rc, out, err)
            if out and out.get("trained"):
                plan = out["plan"]
                d["measured"] = out["measured_peak_bytes"]
                d["predicted"] = plan["predicted_peak_bytes"]
                d["plan"] = f"{plan['precision']}/{plan['checkpoint']}/{plan['batch']}x{plan['accumulation_steps']}"
                d["verify_measurements"] = plan["verify_measurements"]
            results.append(d)
            if d["result"].startswith("failed"):
                print(f"draw {d['i']}: {d['model']} batch {d['batch']} {d['precision']} "
                      f"{d['budget'] / MIB:.2f} MiB: {d['result']}", file=sys.stderr)
            print(f"\r{k + 1}/{len(draws)} draws", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    results.sort(key=lambda d: d["i"])
    trained = [d for d in results if d["result"] == "trained"]
    refused = [d for d in results if d["result"] == "refused"]
    failed = [d for d in results if d["result"].startswith("failed")]
    accum = [d for d in trained if not d["plan"].endswith("x1")]
    use = [d["measured"] / d["budget"] for d in trained]
    err = [(d["measured"] - d["predicted"]) / d["predicted"] for d in trained]
    summary = {
        "draws": len(results), "seed": a.seed, "trained": len(trained), "refused": len(refused),
        "failed": len(failed), "breaches": sum(1 for d in failed if "breach" in d["result"]),
        "accumulating": len(accum),
        "max_measured_over_budget": max(use) if use else None,
        "median_measured_over_budget": sorted(use)[len(use) // 2] if use else None,
        "max_measured_over_predicted": 1 + max(err) if err else None,
        "min_measured_over_predicted": 1 + min(err) if err else None,
        "mean_verify_measurements": sum(d["verify_measurements"] for d in trained) / len(trained) if trained else None,
    }
    with open(a.out, "w") as f:
        json.dump({"summary": summary, "draws": results}, f, indent=1)
    for k, v in summary.items():
        print(f"{k:30s} {v:.4f}" if isinstance(v, float) else f"{k:30s} {v}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
