#!/usr/bin/env bash
# lm_fleet.sh: a byte-level language model trained federated end to end
# (data/text.h, model/gpt.h): scripts/kjv-books cuts Debian's King James Bible into its 66
# books, hfl-data text turns five small ones into one client each (and, for
# the IID partition, the same windows dealt out), and hfl-sim trains a
# 1-block GPT spec over mutual TLS for three rounds.
# hfl-data stats prints a byte-level shard's label summary as the .npz's labels,
# counted here, give it. Oracles independent of the code: the windows are counted from the books'
# byte lengths (floor((L - 1) / T) per book, the held-out tail round(F W));
# a model that has learned nothing predicts 256 bytes uniformly, 8 bits per
# byte, so the held-out loss must fall round on round and end under 7 bits;
# test_bpb must be test_loss / ln 2. The same fleet again with AdamW as the
# clients' optimizer: the report names it and its betas, every client
# planned its two moments (the plan says so, and its arena exceeds the SGD
# run's, which holds one momentum buffer, by at least one more copy of the
# parameters, counted here from the spec: V C + T C + 12 C^2 + 13 C + 2 C),
# and the held-out loss falls likewise. The SGD run's saved model, loaded by
# PyTorch by nanoGPT's names, has the report's held-out loss. LoRA: that
# model fine-tuned with rank-1 adapters (AdamW, deltas down): its base
# tensors stay the starting model's bit for bit, the held-out loss falls
# below the starting model's, each round's upload is the adapters' 16 r C
# floats per client (20x under full training's) and a delta down no more,
# and PyTorch gets the report's loss from the saved LoRA model; at learning
# rate 0 every update is exactly zero, so the run's final model is its
# initial one bit for bit (an update taken against the wrong weights would
# move it). Skips (77)
# without bible-kjv.
# Usage: lm_fleet.sh HFL_SIM HFL_DATA SOURCE_ROOT
set -euo pipefail
sim=$1 data=$2 root=$3
if ! command -v bible >/dev/null; then echo "SKIP: bible-kjv is not installed"; exit 77; fi
tmp=$(mktemp -d /tmp/hfl-test-lm-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$root/scripts/kjv-books" "$tmp/books"
books=("$tmp"/books/{31-obadiah,57-philemon,63-2-john,64-3-john,65-jude}.txt)
"$data" text --out "$tmp/shards" --context 16 --held-out 0.1 --json "${books[@]}" > "$tmp/shards.json"
"$data" text --out "$tmp/iid" --context 16 --held-out 0.1 --num-clients 3 --seed 2 --json "${books[@]}" > "$tmp/iid.json"
# hfl-data stats summarises a byte-level histogram (total, distinct, the five
# most common with their shares) where the 256 counts would be unreadable:
# checked against the labels read here from the .npz's y.npy (int64).
"$data" stats "$tmp/shards/client-0000.npz" > "$tmp/stats.txt"
python3 - "$tmp/shards/client-0000.npz" "$tmp/stats.txt" <<'PY'
import ast, collections, struct, sys, zipfile
raw = zipfile.ZipFile(sys.argv[1]).read("y.npy")
hlen = struct.unpack("<H", raw[8:10])[0]
head = ast.literal_eval(raw[10:10 + hlen].decode())
assert head["descr"] == "<i8", head
y = struct.unpack("<%dq" % (len(raw[10 + hlen:]) // 8), raw[10 + hlen:])
counts = collections.Counter(y)
top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
show = lambda b: "'%c'" % b if 0x20 <= b < 0x7f else "0x%02x" % b
want = "labels (%d a sample) %d, %d distinct; most common %s" % (
    head["shape"][1], len(y), len(counts), " ".join("%s %.1f%%" % (show(b), 100.0 * n / len(y)) for b, n in top))
got = open(sys.argv[2]).read().strip()
assert got.endswith(want), "hfl-data stats printed\n  %s\nwanted it to end\n  %s" % (got, want)
print("hfl-data stats: " + want)
PY
cat > "$tmp/gpt.json" <<'JSON'
{"name": "gpt-test", "input": [16], "layers": [{"type": "embedding", "vocab": 256, "width": 16},
 {"type": "gpt_block", "heads": 2}, {"type": "lm_head"}]}
JSON
cat > "$tmp/lm.json" <<JSON
{"name": "lm-test", "model": "$tmp/gpt.json", "clients": 5, "rounds": 3, "local_epochs": 1,
 "batch": 8, "lr": 0.1, "momentum": 0.9, "partition": "iid", "codec": "fp32", "precision": "fp32",
 "clip_norm": "off", "seed": 1}
JSON
"$sim" "$tmp/lm.json" --shards "$tmp/shards" --out "$tmp/run" --quiet
sed -e 's/"lr": 0.1, "momentum": 0.9/"lr": 0.003, "momentum": 0, "optimizer": "adamw", "betas": "0.9,0.95", "weight_decay": 0.01/' \
  "$tmp/lm.json" > "$tmp/adamw.json"
grep -q adamw "$tmp/adamw.json"
"$sim" "$tmp/adamw.json" --shards "$tmp/shards" --out "$tmp/adamw" --quiet
# LoRA fine-tuning of the SGD run's saved model: the same spec with rank-1
# adapters, AdamW, deltas down; only the adapters train and travel.
sed 's/"layers"/"lora": {"rank": 1, "alpha": 2}, "layers"/' "$tmp/gpt.json" > "$tmp/lora.json"
sed -e "s#$tmp/gpt.json#$tmp/lora.json#" \
    -e 's/"lr": 0.1, "momentum": 0.9/"lr": 0.01, "momentum": 0, "optimizer": "adamw", "downlink_delta": true/' \
  "$tmp/lm.json" > "$tmp/lora-run.json"
grep -q lora.json "$tmp/lora-run.json"
"$sim" "$tmp/lora-run.json" --shards "$tmp/shards" --out "$tmp/lora" --init-model "$tmp/run/model.safetensors" --quiet
# The same at learning rate 0: every client's update is exactly zero (its
# adapters less the adapters it was sent), so the run ends on the model it
# started from, bit for bit.
sed 's/"lr": 0.01,/"lr": 0,/' "$tmp/lora-run.json" > "$tmp/lora0-run.json"
grep -q '"lr": 0,' "$tmp/lora0-run.json"
"$sim" "$tmp/lora0-run.json" --shards "$tmp/shards" --out "$tmp/lora0" --init-model "$tmp/run/model.safetensors" --quiet
# The saved model in PyTorch (bench/lm_central.py: nanoGPT's module names,
# strict load_state_dict, float64): its held-out loss is the report's.
torch_loss=skip
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  torch_loss=$(/usr/bin/python3 "$root/bench/lm_central.py" "$tmp/gpt.json" "$tmp/shards" \
               --eval-model "$tmp/run/model.safetensors")
  torch_lora=$(/usr/bin/python3 "$root/bench/lm_central.py" "$tmp/lora.json" "$tmp/shards" \
               --eval-model "$tmp/lora/model.safetensors")
  torch_loss="$torch_loss|$torch_lora"
fi
python3 - "$tmp" "$torch_loss" "${books[@]}" <<'PY'
import json, math, os, sys
tmp, torch_loss, books = sys.argv[1], sys.argv[2], sys.argv[3:]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
T, F = 16, 0.1
V, C = 256, 16
train, held = [], 0
for b in books:
    w = (os.path.getsize(b) - 1) // T
    h = max(1, round(F * w))
    train.append(w - h)
    held += h
shards = {os.path.basename(d["path"]): d for d in json.load(open(f"{tmp}/shards.json"))}
for i, n in enumerate(train):
    d = shards.get(f"client-{i:04d}.npz", {})
    check(d.get("samples") == n and d.get("features") == T,
          f"client {i}: {d.get('samples')} windows of {d.get('features')} bytes, expected {n} of {T}")
check(shards.get("test.npz", {}).get("samples") == held, f"test set: {held} held-out windows")
for d in shards.values():
    check(sum(d["labels"]) == d["samples"] * T, f"{os.path.basename(d['path'])}: {T} labels per window")
def npy(z, name):  # a .npy member: its dtype string, shape and values
    import ast, struct
    raw = z.read(name)
    hl = struct.unpack("<H", raw[8:10])[0]
    h = ast.literal_eval(raw[10:10 + hl].decode())
    n = math.prod(h["shape"])
    fmt = {"<f4": "f", "<i8": "q"}[h["descr"]]
    return h["descr"], h["shape"], struct.unpack("<%d%s" % (n, fmt), raw[10 + hl:])
import zipfile
text = open(books[0], "rb").read()
z = zipfile.ZipFile(f"{tmp}/shards/client-0000.npz")
(xd, xs, x), (yd, ys, y) = npy(z, "x.npy"), npy(z, "y.npy")
check(xd == "<f4" and yd == "<i8" and xs == (train[0], T) and ys == (train[0], T),
      f"client 0's arrays: x {xd} {xs}, y {yd} {ys}")
check(all(x[k * T + t] == text[k * T + t] and y[k * T + t] == text[k * T + t + 1]
          for k in range(train[0]) for t in range(T)),
      "client 0's windows are the book's bytes at stride 16, each label the byte after its input")
iid = [d for d in json.load(open(f"{tmp}/iid.json")) if "client-" in d["path"]]
check(len(iid) == 3 and sum(d["samples"] for d in iid) == sum(train),
      f"IID: {[d['samples'] for d in iid]} windows over 3 clients, {sum(train)} in all")
r = json.load(open(f"{tmp}/run/report.json"))
rounds = [x for x in r["rounds"] if x["status"] == "ok"]
check(r["complete"] and len(rounds) == 3, f"3 rounds aggregated ({len(rounds)})")
bpb = [x.get("test_bpb", float("nan")) for x in rounds]
for x in rounds:
    check(abs(x["test_bpb"] - x["test_loss"] / math.log(2)) < 1e-6,
          f"round {x['round']}: test_bpb {x['test_bpb']:.4f} = test_loss {x['test_loss']:.4f} / ln 2")
check(bpb[0] > bpb[1] > bpb[2], f"held-out bits per byte fall round on round: {[round(b, 3) for b in bpb]}")
check(bpb[2] < 7.0, f"final {bpb[2]:.3f} bits per byte, under 7 (8 is knowing nothing)")
if torch_loss == "skip":
    print("skip PyTorch's loss of the saved model: /usr/bin/python3 has no torch")
else:
    full, lora = torch_loss.split("|")
    tl, hl = json.loads(full)["test_loss"], rounds[-1]["test_loss"]
    check(abs(tl - hl) <= 1e-5 * hl, f"the saved model in PyTorch: held-out loss {tl:.6f}, the report's {hl:.6f}")
    lr_ = json.load(open(f"{tmp}/lora/report.json"))["rounds"][-1]["test_loss"]
    tl = json.loads(lora)["test_loss"]
    check(abs(tl - lr_) <= 1e-5 * lr_, f"the LoRA model in PyTorch (adapters by PEFT's names): {tl:.6f}, the report's {lr_:.6f}")
def tensors(path):  # a safetensors file's tensors as raw bytes by name
    raw = open(path, "rb").read()
    hl = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + hl])
    return {k: raw[8 + hl + e["data_offsets"][0]:8 + hl + e["data_offsets"][1]] for k, e in head.items() if k != "__metadata__"}
base, tuned = tensors(f"{tmp}/run/model.safetensors"), tensors(f"{tmp}/lora/model.safetensors")
adapters = [k for k in tuned if ".lora_" in k]
check(len(adapters) == 8 and all(tuned[k] == base[k] for k in base) and set(tuned) == set(base) | set(adapters),
      f"LoRA: every base tensor of the fine-tuned model is the starting model's, bit for bit; {len(adapters)} adapters")
check(any(b != 0 for k in adapters if "lora_B" in k for b in tuned[k]), "LoRA: the B adapters moved from zero")
z = json.load(open(f"{tmp}/lora0/report.json"))
check(z["rounds_aggregated"] == 3 and z["final_model_sha256"] == z["initial_model_sha256"],
      f"LoRA at lr 0: 3 rounds of zero updates leave the model as it started: {z['final_model_sha256'][:16]} "
      f"against {z['initial_model_sha256'][:16]}")
lo = json.load(open(f"{tmp}/lora/report.json"))
lbpb = [x["test_bpb"] for x in lo["rounds"] if x["status"] == "ok"]
check(len(lbpb) == 3 and bpb[-1] > lbpb[0] > lbpb[1] > lbpb[2],
      f"LoRA: held-out bits per byte fall from the starting model's {bpb[-1]:.4f}: {[round(b, 4) for b in lbpb]}")
n_lora = 16 * 1 * C  # 16 r C adapter floats in the one block
up_full = [x["bytes_up"] for x in rounds]
up_lora = [x["bytes_up"] for x in lo["rounds"] if x["status"] == "ok"]
check(all(f >= 20 * l for f, l in zip(up_full, up_lora)) and all(5 * 4 * n_lora <= l <= 5 * (4 * n_lora + 512) for l in up_lora),
      f"LoRA: bytes up per round {up_lora} (5 clients x {4 * n_lora} bytes of adapters, plus headers), "
      f"at least 20x under full training's {up_full}")
down = [x["bytes_down"] for x in lo["rounds"] if x["status"] == "ok"][1:]
check(all(d <= 5 * (4 * n_lora + 2048) for d in down), f"LoRA: deltas down carry the adapters alone: {down} bytes")
a = json.load(open(f"{tmp}/adamw/report.json"))
check(a.get("optimizer") == "adamw" and a.get("betas") == [0.9, 0.95] and r.get("optimizer") == "sgd",
      f"the reports name the optimizers: {r.get('optimizer')}, {a.get('optimizer')} {a.get('betas')}")
n = V * C + T * C + 12 * C * C + 13 * C + 2 * C
sgd_arena = {c["name"]: c["plan"]["arena_bytes"] for c in r["clients"]}
for c in a["clients"]:
    p = c.get("plan", {})
    grow = p.get("arena_bytes", 0) - sgd_arena.get(c["name"], 1 << 60)
    check(p.get("adamw") is True and p.get("momentum") is False and grow >= 4 * n,
          f"{c['name']}: AdamW's moments planned, arena {grow} bytes over SGD's (>= {4 * n})")
abpb = [x["test_bpb"] for x in a["rounds"] if x["status"] == "ok"]
check(len(abpb) == 3 and abpb[0] > abpb[1] > abpb[2] and abpb[2] < 7.0,
      f"AdamW: held-out bits per byte fall round on round: {[round(b, 3) for b in abpb]}")
sys.exit(1 if fails else 0)
PY
