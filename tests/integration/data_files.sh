#!/usr/bin/env bash
# data_files.sh: the user's own dataset files (data/files.h) against
# NumPy, the format's owner, as the oracle:
#   - files NumPy writes (np.savez, np.savez_compressed with its zip64
#     members, np.save into a directory, .npy versions 1, 2 and 3) read in
#     hfl-data with the sample counts and label histograms NumPy computes, and
#     pass through hfl-data split (one iid shard) to files NumPy reads back
#     equal, array for array;
#   - split shards of Fashion-MNIST and of a float dataset cover the data
#     exactly once (NumPy compares the rows);
#   - a corpus of malformed files (zip, npy, safetensors and dataset faults)
#     is refused by hfl-data, hfl-client and hfl-coordinator with one stderr
#     line naming the file and a non-zero exit;
#   - a fleet trains on the user's float data end to end (hfl-sim --shards,
#     a model spec for 12 features and 3 classes) and the coordinator
#     evaluates on the user's test file: Gaussian blobs 6 sigma apart, so
#     accuracy above 0.95 is the oracle.
# Skips (77) without NumPy (Debian's python3-numpy, which python3-torch pulls in).
# usage: data_files.sh HFL_DATA HFL_CLIENT HFL_COORDINATOR HFL_SIM
set -u
data=$1 client=$2 coord=$3 sim=$4
/usr/bin/python3 -c "import numpy" 2>/dev/null || { echo "SKIP: NumPy (python3-numpy) is not installed"; exit 77; }
tmp=$(mktemp -d /tmp/hfl-test-data-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
py() { /usr/bin/python3 "$@"; }

# NumPy's own files.
py - "$tmp" <<'PY'
import numpy as np, os, sys
t = sys.argv[1]
r = np.random.default_rng(7)
np.savez(f"{t}/u8.npz", x=r.integers(0, 256, (50, 4, 5), dtype=np.uint8), y=r.integers(0, 7, 50, dtype=np.int64))
np.savez_compressed(f"{t}/f32.npz", x=r.standard_normal((40, 7)).astype(np.float32), y=r.integers(0, 4, 40).astype(np.uint8))
os.makedirs(f"{t}/dir")
np.save(f"{t}/dir/x.npy", r.standard_normal((30, 3)).astype(np.float32))
np.save(f"{t}/dir/y.npy", r.integers(0, 5, 30).astype(np.int32))
for v in (2, 3):
    os.makedirs(f"{t}/v{v}")
    for name, a in (("x", r.integers(0, 256, (20, 6), dtype=np.uint8)), ("y", r.integers(0, 3, 20).astype(np.int16))):
        with open(f"{t}/v{v}/{name}.npy", "wb") as f:
            np.lib.format.write_array(f, a, version=(v, 0))
PY
for f in u8.npz f32.npz dir v2 v3; do
  if ! "$data" stats --json "$tmp/$f" >"$tmp/stats.json" 2>"$tmp/err"; then
    fail "hfl-data stats $f: $(head -c 300 "$tmp/err")"; continue
  fi
  if msg=$(py - "$tmp" "$f" <<'PY'
import json, numpy as np, os, sys
t, f = sys.argv[1], sys.argv[2]
p = f"{t}/{f}"
z = np.load(p) if f.endswith(".npz") else {k: np.load(f"{p}/{k}.npy") for k in "xy"}
x, y = z["x"], z["y"]
s = json.load(open(f"{t}/stats.json"))[0]
want = {"samples": len(y), "features": int(np.prod(x.shape[1:])), "labels": np.bincount(y).tolist(),
        "dtype": "uint8" if x.dtype == np.uint8 else "float32"}
got = {k: s[k] for k in want}
print(got)
sys.exit(0 if got == want else 1)
PY
  ); then ok "hfl-data stats $f agrees with NumPy: $msg"; else fail "hfl-data stats $f: $msg"; fi
  # through hfl's reader and writer and back into NumPy
  for fmt in npz safetensors; do
    if "$data" split --data "$tmp/$f" --num-clients 1 --format $fmt --out "$tmp/rt-$f-$fmt" >/dev/null 2>"$tmp/err" &&
       msg=$(py - "$tmp" "$f" "$fmt" <<'PY'
import numpy as np, json, struct, sys
t, f, fmt = sys.argv[1:4]
p = f"{t}/{f}"
z = np.load(p) if f.endswith(".npz") else {k: np.load(f"{p}/{k}.npy") for k in "xy"}
x, y = z["x"], z["y"]
out = f"{t}/rt-{f}-{fmt}/client-0000.{fmt}"
if fmt == "npz":
    b = np.load(out)
    bx, by = b["x"], b["y"]
else:  # the safetensors layout read by hand from its documented header
    raw = open(out, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    dt = {"U8": np.uint8, "F32": np.float32, "I64": np.int64}
    def get(k):
        a, e = h[k]["data_offsets"]
        return np.frombuffer(raw[8 + n + a:8 + n + e], dtype=dt[h[k]["dtype"]]).reshape(h[k]["shape"])
    bx, by = get("x"), get("y")
same = bx.dtype == x.dtype and np.array_equal(bx, x.reshape(len(x), -1)) and np.array_equal(by, y) and by.dtype == np.int64
print(f"x {bx.dtype}{list(bx.shape)}, y {by.dtype}{list(by.shape)}")
sys.exit(0 if same else 1)
PY
    ); then ok "$f -> hfl-data split --format $fmt -> NumPy: equal ($msg)"
    else fail "$f -> split $fmt -> NumPy: $msg $(head -c 300 "$tmp/err")"; fi
  done
done

# Shards cover the data once: every row of the source in exactly one shard.
cover() { # NAME SOURCE_NPZ_OR_FMNIST SHARD_DIR N
  if msg=$(py - "$@" <<'PY'
import glob, gzip, numpy as np, sys
name, src, d, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if src.endswith(".npz"):
    z = np.load(src); x, y = z["x"].reshape(len(z["y"]), -1), z["y"]
else:
    x = np.frombuffer(gzip.open(f"{src}/train-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 784)
    y = np.frombuffer(gzip.open(f"{src}/train-labels-idx1-ubyte.gz").read()[8:], np.uint8)
files = sorted(glob.glob(f"{d}/client-*.npz"))
parts = [np.load(f) for f in files]
rows = lambda a, b: sorted(map(bytes, np.concatenate([a, b.reshape(-1, 1).astype(a.dtype)], axis=1)))
allx = np.concatenate([p["x"] for p in parts]); ally = np.concatenate([p["y"] for p in parts])
ok = len(files) == n and all(len(p["y"]) > 0 for p in parts) and rows(allx, ally) == rows(x, y)
print(f"{len(files)} shards, sizes {[len(p['y']) for p in parts]}, {len(ally)} of {len(y)} rows")
sys.exit(0 if ok else 1)
PY
  ); then ok "$1: $msg"; else fail "$1: $msg"; fi
}
"$data" split --data "$tmp/f32.npz" --num-clients 3 --partition dirichlet:0.3 --seed 5 --out "$tmp/f32-shards" >/dev/null 2>&1
cover "float npz split dirichlet:0.3 into 3" "$tmp/f32.npz" "$tmp/f32-shards" 3
fm=/usr/share/datasets/fashion-mnist
if [ -r $fm/train-images-idx3-ubyte.gz ]; then
  "$data" split --num-clients 5 --partition shards:2 --out "$tmp/fm" >/dev/null 2>&1
  cover "Fashion-MNIST split shards:2 into 5" $fm "$tmp/fm" 5
  if py -c 'import numpy as np, sys; z = np.load(sys.argv[1]); sys.exit(0 if len(z["y"]) == 10000 and (np.bincount(z["y"]) == 1000).all() else 1)' "$tmp/fm/test.npz"
  then ok "Fashion-MNIST split writes its test set, 1000 per class"; else fail "Fashion-MNIST test.npz"; fi
fi

# The malformed corpus: each a one-line refusal naming the file.
mkdir -p "$tmp/bad"
py - "$tmp/bad" <<'PY'
import io, json, numpy as np, os, struct, sys, zipfile
d = sys.argv[1]
x = np.zeros((4, 3), np.float32); y = np.array([0, 1, 2, 1])
def npy(a, **kw):
    b = io.BytesIO(); np.save(b, a, **kw); return b.getvalue()
def npz(name, members):
    with zipfile.ZipFile(f"{d}/{name}", "w") as z:
        for k, v in members.items(): z.writestr(k, v)
def st(name, tensors, hlen=None):
    h, data = {}, b""
    for k, (dt, shape, raw) in tensors.items():
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}; data += raw
    hb = json.dumps(h).encode()
    open(f"{d}/{name}", "wb").write(struct.pack("<Q", len(hb) if hlen is None else hlen) + hb + data)
open(f"{d}/empty.npz", "wb").write(b"")
open(f"{d}/garbage.npz", "wb").write(b"PK\x03\x04 this is not really a zip archive at all")
np.savez(f"{d}/good.npz", x=x, y=y)
raw = open(f"{d}/good.npz", "rb").read()
open(f"{d}/truncated.npz", "wb").write(raw[:len(raw) // 2])
i = raw.find(b"\x93NUMPY") + 128  # a data byte of the stored x.npy
open(f"{d}/bad_crc.npz", "wb").write(raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1:])
npz("no_y.npz", {"x.npy": npy(x)})
open(f"{d}/lone.npy", "wb").write(npy(x))
npz("big_endian.npz", {"x.npy": npy(x.astype(">f4")), "y.npy": npy(y)})
npz("fortran.npz", {"x.npy": npy(np.asfortranarray(np.zeros((4, 3), np.float32))), "y.npy": npy(y)})
npz("object.npz", {"x.npy": npy(np.array([None] * 4, dtype=object), allow_pickle=True), "y.npy": npy(y)})
npz("float_labels.npz", {"x.npy": npy(x), "y.npy": npy(y.astype(np.float32))})
npz("negative_label.npz", {"x.npy": npy(x), "y.npy": npy(np.array([0, -3, 1, 1]))})
xn = x.copy(); xn[2, 1] = np.nan
npz("nan.npz", {"x.npy": npy(xn), "y.npy": npy(y)})
npz("lengths.npz", {"x.npy": npy(x), "y.npy": npy(y[:3])})
npz("int_features.npz", {"x.npy": npy(x.astype(np.int32)), "y.npy": npy(y)})
npz("bad_npy_header.npz", {"x.npy": b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}", "y.npy": npy(y)})
st("no_x.safetensors", {"y": ("I64", [4], y.astype("<i8").tobytes())})
st("bad_header_len.safetensors", {"x": ("F32", [4, 3], x.tobytes()), "y": ("I64", [4], y.astype("<i8").tobytes())}, hlen=1 << 40)
st("f16.safetensors", {"x": ("F16", [4, 3], x.astype("<f2").tobytes()), "y": ("I64", [4], y.astype("<i8").tobytes())})
h = json.dumps({"x": {"dtype": "F32", "shape": [4, 3], "data_offsets": [0, 48]},
                "y": {"dtype": "I64", "shape": [4], "data_offsets": [16, 48]}}).encode()
open(f"{d}/overlap.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(48))
os.makedirs(f"{d}/dir_without_y")
open(f"{d}/dir_without_y/x.npy", "wb").write(npy(x))
PY
refuse() { # NAME WORD CMD...: non-zero exit below 124, one stderr line naming WORD
  local name=$1 word=$2; shift 2
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(grep -c . "$tmp/err")
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$word" "$tmp/err"; then
    fail "$name: exit $rc, $lines stderr lines (want one naming '$word'):"; sed 's/^/  | /' "$tmp/err"
  else ok "$name: exit $rc: $(cat "$tmp/err")"; fi
}
if "$data" stats "$tmp/bad/good.npz" >/dev/null 2>&1; then ok "the corpus's good.npz reads"; else fail "good.npz refused"; fi
for f in empty.npz garbage.npz truncated.npz bad_crc.npz no_y.npz lone.npy big_endian.npz fortran.npz object.npz \
         float_labels.npz negative_label.npz nan.npz lengths.npz int_features.npz bad_npy_header.npz \
         no_x.safetensors bad_header_len.safetensors f16.safetensors overlap.safetensors dir_without_y nonexistent.npz; do
  refuse "hfl-data stats $f" "$tmp/bad/$f" "$data" stats "$tmp/bad/$f"
done
refuse "hfl-client --data bad_crc.npz" "$tmp/bad/bad_crc.npz" \
  "$client" --coordinator tcp://127.0.0.1:1 --insecure --data "$tmp/bad/bad_crc.npz" --quiet
refuse "hfl-client --data FILE --num-clients 4" "this client's own data" \
  "$client" --coordinator tcp://127.0.0.1:1 --insecure --data "$tmp/bad/good.npz" --num-clients 4
refuse "hfl-coordinator --data nan.npz" "$tmp/bad/nan.npz" \
  "$coord" --listen tcp://127.0.0.1:0 --insecure --data "$tmp/bad/nan.npz" --quiet
refuse "hfl-data split to an unwritable place" "/proc" "$data" split --data "$tmp/f32.npz" --num-clients 2 --out /proc/hfl
refuse "hfl-data split: more clients than samples" "41 clients a sample from only 40" \
  "$data" split --data "$tmp/f32.npz" --num-clients 41 --out "$tmp/too-many"
refuse "hfl-data: unknown command" "unknown command 'splat'" "$data" splat

# A fleet on the user's float data: Gaussian blobs, 12 features, 3 classes.
py - "$tmp" <<'PY'
import numpy as np, os, sys
t = sys.argv[1]
r = np.random.default_rng(11)
centres = r.standard_normal((3, 12)) * 3
def blobs(n):
    y = r.integers(0, 3, n)
    return (centres[y] + r.standard_normal((n, 12))).astype(np.float32), y
x, y = blobs(3000)
np.savez_compressed(f"{t}/blobs.npz", x=x, y=y)
xt, yt = blobs(600)
os.makedirs(f"{t}/blob-shards")
np.savez(f"{t}/blob-shards/test.npz", x=xt, y=yt)
open(f"{t}/lin.json", "w").write('{"name": "blobnet", "input": [12, 1, 1], "layers": [{"type": "dense", "out": 16},'
                                 ' {"type": "relu"}, {"type": "dense", "out": 3}]}')
open(f"{t}/blobs.json", "w").write('{"name": "blobs", "model": "%s/lin.json", "clients": 3, "rounds": 3,'
                                   ' "partition": "iid", "codec": "fp32", "seed": 2, "batch": 16, "lr": 0.05,'
                                   ' "precision": "fp32"}' % t)
PY
if "$data" split --data "$tmp/blobs.npz" --num-clients 3 --partition dirichlet:1 --out "$tmp/blob-shards" >/dev/null 2>"$tmp/err" &&
   timeout 300 "$sim" "$tmp/blobs.json" --shards "$tmp/blob-shards" --out "$tmp/blob-run" --quiet 2>"$tmp/err"; then
  if msg=$(py - "$tmp" <<'PY'
import json, numpy as np, sys
t = sys.argv[1]
r = json.load(open(f"{t}/blob-run/report.json"))
sizes = sorted(len(np.load(f"{t}/blob-shards/client-000{i}.npz")["y"]) for i in range(3))
got = sorted(c["samples"] for c in r["clients"])
acc = r["final_test_acc"]
print(f"final accuracy {acc:.4f} on the user's test.npz, client samples {got} = shards {sizes}")
sys.exit(0 if acc > 0.95 and got == sizes and r["rounds_aggregated"] == 3 else 1)
PY
  ); then ok "fleet on the user's float data: $msg"; else fail "fleet on the user's float data: $msg"; fi
else
  fail "fleet on the user's float data: $(tail -3 "$tmp/err")"
fi
refuse "hfl-sim --shards without shards" "client-0000" "$sim" "$tmp/blobs.json" --shards "$tmp/bad" --out "$tmp/run"
# the coordinator refuses a test set with labels the model cannot give
py -c 'import numpy as np, sys; np.savez(sys.argv[1], x=np.zeros((5, 12), np.float32), y=np.array([0, 1, 2, 5, 1]))' "$tmp/six.npz"
refuse "hfl-coordinator: test labels beyond the model" "labels up to 5" \
  "$coord" --listen tcp://127.0.0.1:0 --insecure --data "$tmp/six.npz" --model "$tmp/lin.json" --quiet

if [ "$fails" -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all data file checks passed"
