#!/usr/bin/env python3
"""byzantine.py: scenarios/byzantine.json against the run without attackers.

Runs the scenario (10 clients, 2 sending -10x their update and claiming
1,000,000 samples) four ways with the same seed: without the attackers
(FedAvg, the coordinator's default clipping), attacked with FedAvg and no
clipping nor share cap (its clients' training diverges and their NaN
updates are refused, the clients told to skip the round, so its rounds
close on what arrived: a quorum of 1), attacked with clipping and a 20% trimmed mean (the
scenario as written), and attacked with clipping and Multi-Krum (f = 2).
Prints the final test accuracy of each and its distance from the clean run,
writes them as JSON, and exits 1 unless both defences end within 2 points of
the clean run and unprotected FedAvg does not.

usage: bench/byzantine.py BUILD_DIR [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(sim, base, name, out, **changes):
    sc = dict(base, name=name, **changes)
    sc = {k: v for k, v in sc.items() if v is not None}
    path = os.path.join(out, name + ".json")
    with open(path, "w") as f:
        json.dump(sc, f)
    report = os.path.join(out, name + "-report.json")
    subprocess.run([sim, path, "--out", os.path.join(out, name), "--report", report, "--quiet"], check=True)
    with open(report) as f:
        return json.load(f)["final_test_acc"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("--out", default="byzantine-runs")
    a = ap.parse_args()
    sim = os.path.join(a.build_dir, "scenarios", "hfl-sim")
    with open(os.path.join(ROOT, "scenarios", "byzantine.json")) as f:
        base = json.load(f)
    os.makedirs(a.out, exist_ok=True)
    rows = [
        ("no attackers, fedavg", "clean", dict(client_attacks=None, strategy="fedavg")),
        ("attacked, fedavg, no clipping or share cap", "fedavg-open",
         dict(strategy="fedavg", clip_norm="off", max_share=1, min_quorum=1)),
        ("attacked, clipping + trimmed:0.2", "trimmed", {}),
        ("attacked, clipping + multikrum:2", "multikrum", dict(strategy="multikrum:2")),
    ]
    acc = {}
    for label, name, changes in rows:
        acc[name] = run(sim, base, name, a.out, **changes)
        print(f"{label:45s} {acc[name]:.4f}  {100 * (acc[name] - acc.get('clean', acc[name])):+6.2f} points",
              flush=True)
    with open(os.path.join(a.out, "byzantine.json"), "w") as f:
        json.dump(acc, f, indent=1)
    ok = all(abs(acc[k] - acc["clean"]) <= 0.02 for k in ("trimmed", "multikrum"))
    ok = ok and acc["clean"] - acc["fedavg-open"] > 0.02
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
