#!/usr/bin/env python3
"""fmnist_shards.py: Fashion-MNIST shards for hfl-sim's --shards, written by
the integration tests that need small fixed clients (local_steps.sh,
replan.sh): the first CLIENTS x PER training images as CLIENTS files of PER
(client-0000.npz ...), and the first TEST test images as test.npz, each
x uint8 [n, 784] and y int64 [n].
usage: fmnist_shards.py FMNIST_DIR OUT CLIENTS PER TEST"""
import gzip, os, struct, sys, zipfile

src, out = sys.argv[1], sys.argv[2]
clients, per, test = (int(a) for a in sys.argv[3:6])
os.makedirs(out)
def idx(name, n, row):
    with gzip.open(os.path.join(src, name)) as f:
        f.read(16 if row > 1 else 8)
        return f.read(n * row)
def npy(descr, shape, body):
    head = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join("%d, " % d for d in shape))
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + body
def write(path, x, y):
    n = len(y)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", npy("|u1", (n, 784), x))
        z.writestr("y.npy", npy("<i8", (n,), struct.pack("<%dq" % n, *y)))
x, y = idx("train-images-idx3-ubyte.gz", clients * per, 784), idx("train-labels-idx1-ubyte.gz", clients * per, 1)
for c in range(clients):
    write(os.path.join(out, "client-%04d.npz" % c), x[c * per * 784:(c + 1) * per * 784], y[c * per:(c + 1) * per])
write(os.path.join(out, "test.npz"), idx("t10k-images-idx3-ubyte.gz", test, 784), idx("t10k-labels-idx1-ubyte.gz", test, 1))
