#!/usr/bin/env bash
# data_shards.sh: a fleet that trains from hfl-data split's shards on disk
# reaches the same accuracy as the built-in partition with the same seed
# (what the user's own data must show), and more: the same global model, byte for byte.
# One 4-client non-IID Fashion-MNIST scenario (dirichlet 0.5, seed 3, three
# rounds) runs three ways: each client picking its share of the IDX files
# (--partition), and from shards written by `hfl-data split` in .npz and in
# safetensors, the coordinator evaluating on the split's test file. The
# oracle is the built-in run's report: same final_model_sha256, the same
# accuracy to 4 decimals, every client the same number of samples. As a
# control, shards split with another seed must give a different model, so
# the comparison can fail. Skips (77) without Fashion-MNIST.
# usage: data_shards.sh HFL_DATA HFL_SIM
set -u
data=$1 sim=$2
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-shards-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/s.json" <<'JSON'
{"name": "shards", "model": "mlp", "clients": 4, "rounds": 3, "partition": "dirichlet:0.5", "codec": "int8",
 "seed": 3, "batch": 32, "lr": 0.05, "precision": "fp32"}
JSON
fails=0
run() { # NAME SIM-ARGS...
  local name=$1; shift
  if ! timeout 300 "$sim" "$tmp/s.json" --out "$tmp/$name" --quiet "$@" >"$tmp/$name.out" 2>&1; then
    echo "FAIL hfl-sim ($name): $(tail -3 "$tmp/$name.out")"; fails=$((fails + 1))
  fi
}
"$data" split --num-clients 4 --partition dirichlet:0.5 --seed 3 --out "$tmp/npz" >/dev/null &&
"$data" split --num-clients 4 --partition dirichlet:0.5 --seed 3 --format safetensors --out "$tmp/st" >/dev/null &&
"$data" split --num-clients 4 --partition dirichlet:0.5 --seed 4 --out "$tmp/other" >/dev/null ||
  { echo "FAIL hfl-data split"; exit 1; }
run builtin
run npz --shards "$tmp/npz"
run st --shards "$tmp/st"
run other --shards "$tmp/other"
python3 - "$tmp" "$fails" <<'PY'
import json, sys
tmp, fails = sys.argv[1], int(sys.argv[2])
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
r = {n: json.load(open(f"{tmp}/{n}/report.json")) for n in ("builtin", "npz", "st", "other")}
samples = lambda rep: {c["name"]: c["samples"] for c in rep["clients"]}
b = r["builtin"]
check(b["rounds_aggregated"] == 3, f"built-in partition: 3 rounds, accuracy {b['final_test_acc']:.4f}")
for n in ("npz", "st"):
    o = r[n]
    check(o["final_model_sha256"] == b["final_model_sha256"],
          f"{n} shards: final model {o['final_model_sha256'][:16]} = built-in {b['final_model_sha256'][:16]}")
    check(round(o["final_test_acc"], 4) == round(b["final_test_acc"], 4),
          f"{n} shards: accuracy {o['final_test_acc']:.4f} = built-in {b['final_test_acc']:.4f}")
    check(samples(o) == samples(b), f"{n} shards: client samples {sorted(samples(o).values())}")
check(r["other"]["final_model_sha256"] != b["final_model_sha256"],
      f"control: shards of seed 4 give another model (accuracy {r['other']['final_test_acc']:.4f})")
print(f"{fails} check(s) failed" if fails else "all shard checks passed")
sys.exit(1 if fails else 0)
PY
