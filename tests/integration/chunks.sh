#!/usr/bin/env bash
# chunks.sh: a task's weights in chunks end to end (docs/protocol.md,
# "Chunked weights"). The quickstart cut to 3 clients and 2 rounds runs three
# ways: whole (the mlp's 796,852 bytes fit the default 4 MiB chunk), in 64
# KiB chunks (13 a task), and in 64 KiB chunks with every client's connection
# cut once after its 3rd chunk (HFL_TEST_FETCH_CUT=3), so its 4th fetch fails
# and the download goes on over a fresh connection at the 4th chunk, fetching
# none twice (the same bytes down as the uncut run); the chunked runs' int8
# updates (202,338 bytes) go up by put in 4 chunks, and a fifth run cuts
# every client's connection after its 2nd put (HFL_TEST_PUT_CUT=2), the
# upload going on at the 3rd chunk over a fresh connection; a fourth run flips a
# byte of every client's 5th chunk of its first download
# (HFL_TEST_FETCH_CORRUPT=5): the client refuses it by its digest, pulls the
# task again and downloads it once more; a sixth run takes chunks of 65,538
# bytes, which cut fp32 values in two (12 + 65,526 bytes hold 16,381.5 of
# them), so the client's decoding as chunks come carries half a value from
# one chunk to the next; a seventh keeps the coordinator's sum on disk
# (sum_on_disk "on", coordinator/aggregate.h ON DISK) in blocks of 70,000
# values, so the mlp's 199,210 span three and the int8 blocks of 256 are cut
# at two of them. All seven must end with the same final_model_sha256, and
# only the seventh's report may say "sum": "disk". Deltas: three runs of 3 rounds with fp16 deltas
# down (downlink_delta), whole (398 KB ride in the task), in 4,097-byte
# chunks (98 a task, cutting fp16 values in two) with the same final hash,
# and the chunked one with every client's 2nd chunk of its 2nd download (a
# delta, decoded into the weights it holds) flipped
# (HFL_TEST_FETCH_CORRUPT=2:2): the client refuses the chunk after its 1st
# was decoded, so its weights are between two versions and it must say it
# holds none: the re-download is full, not a delta (a delta against the
# half-updated weights would train on wrong ones); so round 2 counts 3
# delta tasks and 2 downloads a client, and the run completes; in the chunked runs every participant's bytes_down
# must be the whole run's plus at least 13 fetch replies' headers (the whole
# run's under the weights plus 2 KiB: they rode in the task), and in the third
# every client must have said it dropped the connection and dialled again. Skips (77) without Fashion-MNIST. Usage: chunks.sh HFL_SIM SCENARIOS_DIR
set -euo pipefail
sim=$1 dir=$2
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-chunks-XXXXXX)
[ -n "${HFL_KEEP_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT

variant() { # NAME CHUNK_BYTES (0: the default) [delta: fp16 deltas down, 3 rounds | disk: the sum on disk]
  python3 - "$dir/quickstart.json" "$tmp/$1.json" "$2" "${3:-}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s.update({"clients": 3, "clients_per_round": 3, "rounds": 2})
if int(sys.argv[3]): s["chunk_bytes"] = int(sys.argv[3])
if sys.argv[4] == "delta": s.update({"rounds": 3, "downlink": "fp16", "downlink_delta": True})
if sys.argv[4] == "disk": s["sum_on_disk"] = "on"
json.dump(s, open(sys.argv[2], "w"))
PY
}
variant whole 0
variant chunked 65536
variant odd 65538
variant disk 65536 disk
variant delta 0 delta
variant deltac 4097 delta
"$sim" "$tmp/whole.json" --out "$tmp/whole" --quiet
"$sim" "$tmp/chunked.json" --out "$tmp/chunked" --quiet
HFL_TEST_FETCH_CUT=3 "$sim" "$tmp/chunked.json" --out "$tmp/cut" --quiet
HFL_TEST_FETCH_CORRUPT=5 "$sim" "$tmp/chunked.json" --out "$tmp/corrupt" --quiet
HFL_TEST_PUT_CUT=2 "$sim" "$tmp/chunked.json" --out "$tmp/putcut" --quiet
"$sim" "$tmp/odd.json" --out "$tmp/odd" --quiet
HFL_TEST_SUM_BLOCK=70000 "$sim" "$tmp/disk.json" --out "$tmp/disk" --quiet
"$sim" "$tmp/delta.json" --out "$tmp/delta" --quiet
"$sim" "$tmp/deltac.json" --out "$tmp/deltac" --quiet
HFL_TEST_FETCH_CORRUPT=2:2 "$sim" "$tmp/deltac.json" --out "$tmp/deltax" --quiet
python3 - "$tmp" <<'PY'
import glob, json, sys
tmp = sys.argv[1]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
rep = {d: json.load(open(f"{tmp}/{d}/report.json")) for d in ("whole", "chunked", "cut", "corrupt", "putcut", "odd", "disk")}
h = {d: r["final_model_sha256"] for d, r in rep.items()}
check(len(set(h.values())) == 1,
      f"the same model whole, chunked, resumed, re-downloaded, re-uploaded, in chunks that cut values "
      f"and summed on disk: {h}")
check([r["coordinator_device"].get("sum") for r in (rep["disk"], rep["chunked"])] == ["disk", "memory"],
      "the disk run's sum was on disk, the others' in memory")
check(all(p.get("status") == "ok" for rd in rep["odd"]["rounds"] for p in rd["participants"]),
      "odd chunks: every client trained every round")
drep = {d: json.load(open(f"{tmp}/{d}/report.json")) for d in ("delta", "deltac", "deltax")}
check(drep["delta"]["final_model_sha256"] == drep["deltac"]["final_model_sha256"],
      "fp16 deltas whole and in 4,097-byte chunks: the same model (%s, %s)" %
      (drep["delta"]["final_model_sha256"][:8], drep["deltac"]["final_model_sha256"][:8]))
r2 = {d: r["rounds"][1] for d, r in drep.items()}
check(all(r2[d].get("tasks_delta") == 3 for d in r2), "round 2 sent 3 deltas in each run: %s" %
      {d: r2[d].get("tasks_delta") for d in r2})
check([p.get("downloads") for p in r2["deltac"]["participants"]] == [1, 1, 1] and
      [p.get("downloads") for p in r2["deltax"]["participants"]] == [2, 2, 2],
      "the corrupted delta was downloaded again, whole: %s" % [p.get("downloads") for p in r2["deltax"]["participants"]])
check(drep["deltax"].get("complete") is True and all(p.get("status") == "ok" for rd in drep["deltax"]["rounds"]
                                                     for p in rd["participants"]),
      "the corrupted run completed, every client trained every round")
weights = 12 + 199210 * 4
down = {d: [sorted(p["bytes_down"] for p in rd["participants"]) for rd in r["rounds"]] for d, r in rep.items()}
check(all(len(x) == 3 and weights <= min(x) and max(x) < weights + 2048 for x in down["whole"]),
      f"whole: the weights rode in the task: {down['whole']}")
for d in ("chunked", "cut"):
    check(all(c >= w + 13 * 24 for x, y in zip(down[d], down["whole"]) for c, w in zip(x, y)),
          f"{d}: every client fetched 13 chunks besides its task: {down[d]}")
for r1, r2 in zip(rep["chunked"]["rounds"], rep["cut"]["rounds"]):
    check([p["bytes_down"] for p in r1["participants"]] == [p["bytes_down"] for p in r2["participants"]],
          f"round {r1['round']}: the resumed downloads fetched no chunk twice")
logs = [open(f).read() for f in sorted(glob.glob(f"{tmp}/cut/client-*.log"))]
check(len(logs) == 3 and all("connection dropped after 3 chunks" in l and "dialing the coordinator afresh" in l for l in logs),
      "every client dropped its connection mid-download and dialled again")
logs = [open(f).read() for f in sorted(glob.glob(f"{tmp}/putcut/client-*.log"))]
check(len(logs) == 3 and all("connection dropped after 2 chunks" in l and "dialing the coordinator afresh" in l
                             and "rejoining" not in l for l in logs),
      "every client dropped its connection mid-upload and went on over a fresh one")
up = {d: [sorted(p["bytes_up"] for p in rd["participants"]) for rd in r["rounds"]] for d, r in rep.items()}
# 4 puts' headers and metadata (under 300 bytes each) over the whole update;
# a chunk counted twice would add at least the last one's 5,730 bytes
for d in ("chunked", "putcut"):
    check(all(4 * 24 < u - w < 4 * 300 for x, y in zip(up[d], up["whole"]) for u, w in zip(x, y)),
          f"{d}: every update went in 4 puts, no chunk counted twice: {up[d]} against whole {up['whole']}")
logs = [open(f).read() for f in sorted(glob.glob(f"{tmp}/corrupt/client-*.log"))]
r1 = rep["corrupt"]["rounds"][0]["participants"]
check(len(logs) == 3 and all("the chunk does not match its digest; pulling again" in l for l in logs)
      and all(p.get("downloads") == 2 for p in r1),
      f"a corrupted chunk is refused and the task downloaded again: {[p.get('downloads') for p in r1]}")
sys.exit(1 if fails else 0)
PY
