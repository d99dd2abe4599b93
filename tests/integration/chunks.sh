#!/usr/bin/env bash
# chunks.sh: a task's weights in chunks end to end (docs/protocol.md,
# "Chunked weights"). The quickstart cut to 3 clients and 2 rounds runs three
# ways: whole (the mlp's 797,852 bytes fit the default 4 MiB chunk), in 64
# KiB chunks (13 a task), and in 64 KiB chunks with every client's connection
# cut once after its 3rd chunk (HFL_TEST_FETCH_CUT=3), so its 4th fetch fails
# and the download goes on over a fresh connection at the 4th chunk, fetching
# none twice (the same bytes down as the uncut run). All three must end with the
# same final_model_sha256; the chunked runs' clients must have fetched (each
# participant's bytes_down at least the weights' size every round), and in
# the third every client must have said it dropped the connection and dialled
# again. Skips (77) without Fashion-MNIST. Usage: chunks.sh HFL_SIM SCENARIOS_DIR
set -euo pipefail
sim=$1 dir=$2
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-chunks-XXXXXX)
[ -n "${HFL_KEEP_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT

variant() { # NAME CHUNK_BYTES (0: the default)
  python3 - "$dir/quickstart.json" "$tmp/$1.json" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s.update({"clients": 3, "clients_per_round": 3, "rounds": 2})
if int(sys.argv[3]): s["chunk_bytes"] = int(sys.argv[3])
json.dump(s, open(sys.argv[2], "w"))
PY
}
variant whole 0
variant chunked 65536
"$sim" "$tmp/whole.json" --out "$tmp/whole" --quiet
"$sim" "$tmp/chunked.json" --out "$tmp/chunked" --quiet
HFL_TEST_FETCH_CUT=3 "$sim" "$tmp/chunked.json" --out "$tmp/cut" --quiet
python3 - "$tmp" <<'PY'
import glob, json, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
rep = {d: json.load(open(f"{tmp}/{d}/report.json")) for d in ("whole", "chunked", "cut")}
h = {d: r["final_model_sha256"] for d, r in rep.items()}
check(h["whole"] == h["chunked"] == h["cut"], f"the same model whole, chunked and resumed: {h}")
weights = 12 + 199210 * 4
for d in ("chunked", "cut"):
    for rd in rep[d]["rounds"]:
        down = [p["bytes_down"] for p in rd["participants"]]
        check(len(down) == 3 and min(down) >= weights, f"{d} round {rd['round']}: every client fetched the weights: {down}")
for r1, r2 in zip(rep["chunked"]["rounds"], rep["cut"]["rounds"]):
    check([p["bytes_down"] for p in r1["participants"]] == [p["bytes_down"] for p in r2["participants"]],
          f"round {r1['round']}: the resumed downloads fetched no chunk twice")
logs = [open(f).read() for f in sorted(glob.glob(f"{tmp}/cut/client-*.log"))]
check(len(logs) == 3 and all("connection dropped after 3 chunks" in l and "dialing the coordinator afresh" in l for l in logs),
      "every client dropped its connection mid-download and dialled again")
sys.exit(1 if fails else 0)
PY
