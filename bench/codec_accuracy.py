#!/usr/bin/env python3
"""codec_accuracy.py: accuracy against bytes for every update codec.

Runs hfl-sim on a scenario (default: the quickstart) once per codec with the
same seed and number of rounds, then prints, per codec, the final test
accuracy, its difference from fp32, and the mean bytes sent up per round
relative to fp32 (whole update messages: header, metadata and payload).
Writes the table as JSON and, with matplotlib (Debian's python3-matplotlib),
a plot of accuracy against uplink bytes.

usage: bench/codec_accuracy.py BUILD_DIR [--rounds 20] [--scenario FILE]
       [--codecs fp32,fp16,...] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys

DEFAULT_CODECS = "fp32,fp16,bf16,int8,int4,sign,topk:0.01"


def run(sim, scenario, codec, rounds, out):
    run_dir = os.path.join(out, codec.replace(":", "_"))
    report = os.path.join(run_dir, "report.json")
    cmd = [sim, scenario, "--codec", codec, "--rounds", str(rounds), "--out", run_dir, "--quiet"]
    subprocess.run(cmd, check=True)
    with open(report) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--scenario", default=os.path.join(os.path.dirname(__file__), "..", "scenarios", "quickstart.json"))
    ap.add_argument("--codecs", default=DEFAULT_CODECS)
    ap.add_argument("--out", default="runs/codec-accuracy")
    a = ap.parse_args()
    sim = os.path.join(a.build, "scenarios", "hfl-sim")
    rows = []
    for codec in a.codecs.split(","):
        print(f"running {codec} ...", file=sys.stderr, flush=True)
        r = run(sim, a.scenario, codec, a.rounds, a.out)
        up = sum(x["bytes_up"] for x in r["rounds"]) / len(r["rounds"])
        rows.append({"codec": codec, "final_test_acc": r["final_test_acc"], "bytes_up_per_round": up,
                     "acc_curve": [x["test_acc"] for x in r["rounds"]]})
    base = next((x for x in rows if x["codec"] == "fp32"), rows[0])
    print(f"| codec | final test acc | vs {base['codec']} (points) | bytes up / round | vs {base['codec']} |")
    print("| --- | --- | --- | --- | --- |")
    for x in rows:
        x["acc_delta_points"] = 100 * (x["final_test_acc"] - base["final_test_acc"])
        x["bytes_ratio"] = x["bytes_up_per_round"] / base["bytes_up_per_round"]
        print(f"| {x['codec']} | {x['final_test_acc']:.4f} | {x['acc_delta_points']:+.2f} | "
              f"{x['bytes_up_per_round']:,.0f} | {x['bytes_ratio']:.4f} |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "codec_accuracy.json"), "w") as f:
        json.dump(rows, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (apt-get install python3-matplotlib): no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for x in rows:
        ax.scatter(x["bytes_ratio"], x["final_test_acc"])
        ax.annotate(x["codec"], (x["bytes_ratio"], x["final_test_acc"]), textcoords="offset points", xytext=(4, 4))
    ax.set_xscale("log")
    ax.set_xlabel("uplink bytes per round, relative to fp32 (log)")
    ax.set_ylabel(f"test accuracy after {a.rounds} rounds")
    ax.set_title("hfl update codecs: accuracy against bytes")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    png = os.path.join(a.out, "codec_accuracy.png")
    fig.savefig(png, dpi=120)
    print(f"plot: {png}", file=sys.stderr)


if __name__ == "__main__":
    main()
