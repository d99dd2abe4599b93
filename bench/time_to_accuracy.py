#!/usr/bin/env python3
"""time_to_accuracy.py: round policies compared on one scenario, as simulated
time until the test accuracy first reaches a target (the round policies of README.md, The programs).

usage: bench/time_to_accuracy.py [--build DIR] [--scenario FILE] [--seeds 4,5,6]
                                 [--target ACC | --target quickstart]
                                 NAME='{"key": value, ...}' ...

Each variant is the scenario with the given keys overridden (rounds included)
and is run once per seed with hfl-sim. The target "quickstart" (the default)
runs scenarios/quickstart.json first and takes its final test accuracy.
Simulated time to the target is the sum of the rounds' simulated walls up to
and including the first round at or above it (scenarios/profile.h prices
them). Prints a Markdown table per seed, the median over seeds, and one JSON
line at the end."""
import argparse, json, os, statistics, subprocess, sys, tempfile

def run(sim, scenario, out):
    subprocess.run([sim, scenario, "--out", out, "--quiet"], check=True)
    return json.load(open(os.path.join(out, "report.json")))

def reach(rep, target):
    t = 0.0
    for x in rep["rounds"]:
        t += x["simulated"]["wall_s"]
        if x["test_acc"] is not None and x["test_acc"] >= target:
            return round(t, 1), x["round"]
    return None, None

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--scenario", default="scenarios/edge-fleet.json")
    ap.add_argument("--seeds", default="4,5,6")
    ap.add_argument("--target", default="quickstart")
    ap.add_argument("variants", nargs="+", help="NAME='{json overrides}'")
    a = ap.parse_args()
    sim = os.path.join(a.build, "scenarios", "hfl-sim")
    if not os.access(sim, os.X_OK):
        sys.exit(f"time_to_accuracy.py: {sim} not found; build first (meson setup {a.build} && ninja -C {a.build})")
    variants = []
    for v in a.variants:
        name, _, js = v.partition("=")
        try:
            variants.append((name, json.loads(js or "{}")))
        except json.JSONDecodeError as e:
            sys.exit(f"time_to_accuracy.py: variant {name}: {e}")
    base = json.load(open(a.scenario))
    lib = os.path.abspath(os.path.join(os.path.dirname(a.scenario), base.get("profile_library", "profiles.json")))
    seeds = [int(s) for s in a.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        if a.target == "quickstart":
            print("time_to_accuracy.py: quickstart for the target accuracy", file=sys.stderr)
            target = run(sim, "scenarios/quickstart.json", os.path.join(tmp, "quickstart"))["final_test_acc"]
        else:
            target = float(a.target)
        rows = []
        for seed in seeds:
            for name, over in variants:
                sc = dict(base, seed=seed, profile_library=lib, **over)
                path = os.path.join(tmp, f"{name}-{seed}.json")
                json.dump(sc, open(path, "w"))
                print(f"time_to_accuracy.py: {name}, seed {seed}", file=sys.stderr)
                rep = run(sim, path, os.path.join(tmp, f"run-{name}-{seed}"))
                s, r = reach(rep, target)
                rows.append({"variant": name, "seed": seed, "time_s": s, "round": r, "rounds": len(rep["rounds"]),
                             "final_test_acc": rep["final_test_acc"], "simulated_s": round(rep["simulated_s"], 1),
                             "updates": sum(x["clients"] + x.get("late_folded", 0) for x in rep["rounds"])})
    print(f"target: {target:.4f} ({a.target}); scenario {a.scenario}")
    print("| variant | seed | time to target | round | rounds run | simulated total | updates | final acc |")
    print("|---|---|---|---|---|---|---|---|")
    for x in rows:
        t = f"{x['time_s']} s" if x["time_s"] is not None else "not reached"
        print(f"| {x['variant']} | {x['seed']} | {t} | {x['round'] or '-'} | {x['rounds']} | {x['simulated_s']} s | "
              f"{x['updates']} | {x['final_test_acc']:.4f} |")
    print("| variant | median time to target over seeds (not reached counts as the run's total) |")
    print("|---|---|")
    for name, _ in variants:
        ts = [x["time_s"] if x["time_s"] is not None else x["simulated_s"] for x in rows if x["variant"] == name]
        print(f"| {name} | {statistics.median(ts):.1f} s |")
    print(json.dumps({"target": target, "runs": rows}))

if __name__ == "__main__":
    main()
