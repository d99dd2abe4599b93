#!/usr/bin/env bash
# lm_diloco.sh: DiLoCo against its fair baseline, on gpt-kjv over
# the King James Bible's 64-byte windows, every arm with the same model,
# corpus, inner optimizer (AdamW on one cosine curve over the run's S
# sequential steps) and token budget:
#   single  one worker, no communication: 1 client, batch B, S steps
#   dp      K-way data-parallel, simulated exactly as one trainer at batch
#           K B for the same S sequential steps
#   fed     K = 8 clients, H local steps, R = S / H rounds, the outer step
#           FedAvg, FedAvgM or Nesterov (DiLoCo's), fp32 deltas
#   int8    fed with Nesterov and int8 outer deltas
# for H in HS, with IID shards (8 clients, all drawn) and with books as
# clients (the 66 books, 8 drawn a round, weighted by their sizes). Every
# arm is scenarios/lm-diloco.json with keys overridden (hfl-sim --shards).
# Tuning, honestly on another seed: on TUNE_SEED (IID, H = the first of HS)
# the outer (lr, momentum) of Nesterov over NESTEROV_GRID and of FedAvgM
# over FEDAVGM_GRID, and the data-parallel trainer's lr over DP_LRS (a K x
# batch may want a larger rate: tuning it keeps the baseline honest); the
# best final held-out loss of each is then run on SEED for the table.
# Reported per arm: held-out loss in bits per byte (the report's last
# round), sequential steps, compute (samples trained, the participants'
# trained_samples summed), and bytes communicated: fed's measured up + down;
# dp's counted as K workers each sending one fp32 gradient and receiving
# the weights every step (the single run's measured upload and download of
# the whole model, the star topology hfl uses), single's none. JSON lines
# (phase "tune" and "report") on stdout, then the markdown table.
# Usage: bench/lm_diloco.sh [BUILD_DIR]
# Environment: STEPS (S, 500), HS ("50 250"), TUNE_SEED (1), SEED (2),
# NESTEROV_GRID ("0.5:0.9 0.7:0.9 1.0:0.9 0.7:0.8"), FEDAVGM_GRID
# ("1:0.9 0.5:0.9"), DP_LRS ("0.003 0.006 0.012"); TUNE=0 skips tuning and
# takes NESTEROV, FEDAVGM and DP_LR as given; KEEP=1 has the federated
# clients keep AdamW's moments and step count from round to round
# (keep_local_optimizer), as DiLoCo's workers do, where by default each
# round starts a fresh optimizer.
set -euo pipefail
build=${1:-build}
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/hfl-lm-diloco-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
scripts/kjv-books "$tmp/books" >&2
for split in "one --num-clients 1" "iid --num-clients 8" "books"; do
  read -r name args <<< "$split"
  # shellcheck disable=SC2086
  "$build/data/hfl-data" text --out "$tmp/$name" --context 64 $args "$tmp"/books/*.txt >/dev/null
done
export STEPS=${STEPS:-500} HS=${HS:-50 250} TUNE_SEED=${TUNE_SEED:-1} SEED=${SEED:-2} TUNE=${TUNE:-1} KEEP=${KEEP:-0}
export NESTEROV_GRID=${NESTEROV_GRID:-0.5:0.9 0.7:0.9 1.0:0.9 0.7:0.8} FEDAVGM_GRID=${FEDAVGM_GRID:-1:0.9 0.5:0.9}
export DP_LRS=${DP_LRS:-0.003 0.006 0.012} NESTEROV=${NESTEROV:-0.7:0.9} FEDAVGM=${FEDAVGM:-1:0.9} DP_LR=${DP_LR:-0.003}
$py - "$build" "$tmp" "$PWD" <<'PY'
import json, math, os, subprocess, sys, time
build, tmp, root = sys.argv[1:4]
env = os.environ
S, HS, K = int(env["STEPS"]), [int(h) for h in env["HS"].split()], 8
base = json.load(open(os.path.join(root, "scenarios/lm-diloco.json")))
base["model"] = os.path.join(root, base["model"])
B = base["batch"]
warmup = int(base["lr_schedule"].split(":")[1]) * S // (base["rounds"] * base["local_steps"])
base["lr_schedule"] = "cosine:%d:%s" % (warmup, base["lr_schedule"].split(":")[2])  # the same share of S
runs = 0

def run(split, seed, **keys):
    """hfl-sim on lm-diloco with `keys` over it; returns the report's figures."""
    global runs
    s = dict(base, seed=seed, **keys)
    for k in ("description", "prepare"): s.pop(k, None)
    path = "%s/s%d.json" % (tmp, runs)
    json.dump(s, open(path, "w"))
    out = "%s/run%d" % (tmp, runs)
    runs += 1
    single = s["clients"] == 1
    t0 = time.time()
    subprocess.run([build + "/scenarios/hfl-sim", path, "--shards", "%s/%s" % (tmp, split), "--out", out, "--quiet",
                    "--threads", "2" if single else "1", "--timeout", "3000"], check=True)
    r = json.load(open(out + "/report.json"))
    ok = [x for x in r["rounds"] if x["status"] == "ok"]
    assert len(ok) == s["rounds"], "%s: %d of %d rounds ok" % (path, len(ok), s["rounds"])
    parts = [p for x in ok for p in x["participants"] if p.get("status") == "ok"]
    return {"loss": ok[-1]["test_loss"], "bpb": ok[-1]["test_loss"] / math.log(2),
            "steps": s["rounds"] * s["local_steps"], "samples": sum(p["trained_samples"] for p in parts),
            "bytes": sum(x["bytes_up"] + x["bytes_down"] for x in ok), "up1": ok[0]["bytes_up"],
            "down1": ok[0]["bytes_down"], "wall_s": round(time.time() - t0, 1)}

def single(seed, batch, lr):
    return run("one", seed, clients=1, clients_per_round=1, rounds=1, local_steps=S, batch=batch, lr=lr)

def fed(split, seed, H, opt, codec="fp32"):
    n = 66 if split == "books" else K
    return run(split, seed, clients=n, clients_per_round=K, rounds=S // H, local_steps=H, server_opt=opt, codec=codec,
               keep_local_optimizer=env["KEEP"] == "1")

def say(phase, arm, split, H, seed, setting, f):
    print(json.dumps(dict(bench="lm_diloco", phase=phase, arm=arm, split=split, H=H, seed=seed, setting=setting,
                          test_loss=f["loss"], test_bpb=f["bpb"], seq_steps=f["steps"], samples=f["samples"],
                          bytes=f["bytes"], wall_s=f["wall_s"])), flush=True)

picks = {"nesterov": "nesterov:" + env["NESTEROV"], "fedavgm": "fedavgm:" + env["FEDAVGM"], "dp_lr": float(env["DP_LR"])}
if env["TUNE"] != "0":
    ts, H = int(env["TUNE_SEED"]), HS[0]
    for kind, grid in (("nesterov", env["NESTEROV_GRID"]), ("fedavgm", env["FEDAVGM_GRID"])):
        best = None
        for g in grid.split():
            f = fed("iid", ts, H, kind + ":" + g)
            say("tune", kind, "iid", H, ts, kind + ":" + g, f)
            if best is None or f["loss"] < best[0]: best = (f["loss"], kind + ":" + g)
        picks[kind] = best[1]
    best = None
    for lr in map(float, env["DP_LRS"].split()):
        f = single(ts, K * B, lr)
        say("tune", "dp", "one", S, ts, "lr %g" % lr, f)
        if best is None or f["loss"] < best[0]: best = (f["loss"], lr)
    picks["dp_lr"] = best[1]
print(json.dumps(dict(bench="lm_diloco", phase="picks", **picks)), flush=True)

seed, rows = int(env["SEED"]), []
def row(arm, split, H, setting, f, bytes_=None):
    f = dict(f, bytes=f["bytes"] if bytes_ is None else bytes_)
    say("report", arm, split, H, seed, setting, f)
    rows.append((arm, split, H, setting, f))
one = single(seed, B, base["lr"])
row("single", "all", S, "batch %d, lr %g" % (B, base["lr"]), one, 0)
dp = single(seed, K * B, picks["dp_lr"])
row("dp", "all", S, "batch %d, lr %g" % (K * B, picks["dp_lr"]), dp, S * K * (one["up1"] + one["down1"]))
for split in ("iid", "books"):
    for H in HS:
        for opt in ("fedavg", picks["fedavgm"], picks["nesterov"]):
            row("fed", split, H, opt, fed(split, seed, H, opt))
        row("int8", split, H, picks["nesterov"] + ", int8", fed(split, seed, H, picks["nesterov"], "int8"))

print("\n| arm | clients | H x R | outer step | held-out bpb | vs dp | seq. steps | samples | bytes | dp bytes / bytes |")
print("|---|---|---|---|---|---|---|---|---|---|")
for arm, split, H, setting, f in rows:
    hr = "%d x %d" % (H, S // H) if arm in ("fed", "int8") else "%d x 1" % S
    ratio = "%.0f" % (rows[1][4]["bytes"] / f["bytes"]) if f["bytes"] else "-"
    print("| %s | %s | %s | %s | %.4f | %+.2f%% | %d | %d | %d | %s |" % (arm, split, hr, setting, f["bpb"],
          100 * (f["bpb"] / rows[1][4]["bpb"] - 1), f["steps"], f["samples"], f["bytes"], ratio))
PY
