#!/usr/bin/env python3
"""torch_model.py: hfl's safetensors models in PyTorch (safetensors_torch.sh).

  torch_model.py check MODEL REPORT DATA_DIR   the model, loaded into the
      equivalent PyTorch module with load_state_dict(load_file(MODEL)), gets
      the report's final test accuracy on Fashion-MNIST's test set (4 decimals)
  torch_model.py init LIKE OUT SEED            a PyTorch-initialised module of
      LIKE's model (its metadata's spec), saved with save_file to OUT
  torch_model.py same A B                      A and B hold the same tensors, bit for bit

The equivalent module is built here from the spec in the file's metadata:
nn.ModuleList "layers" holding nn.Linear, nn.ReLU, nn.Conv2d, nn.MaxPool2d in
the spec's order, flattening before the first dense layer, as hfl does. Test
images are scaled as hfl's loader does (x / 255 - 0.2860) / 0.3530."""
import gzip, json, struct, sys

import numpy as np
import torch
from torch import nn
from safetensors.torch import load_file, save_file

def spec_of(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(json.loads(raw[8:8 + n])["__metadata__"]["hfl_model"])

class Net(nn.Module):
    def __init__(self, spec):
        super().__init__()
        c, h, w = spec["input"]
        mods = []
        for ly in spec["layers"]:
            t = ly["type"]
            if t == "dense":
                mods.append(nn.Linear(c * h * w, ly["out"]))
                c, h, w = ly["out"], 1, 1
            elif t == "relu":
                mods.append(nn.ReLU())
            elif t == "conv2d":
                k, s, p = ly["kernel"], ly.get("stride", 1), ly.get("pad", 0)
                mods.append(nn.Conv2d(c, ly["out"], k, stride=s, padding=p))
                c, h, w = ly["out"], (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            elif t == "maxpool2d":
                k = ly["size"]
                s = ly.get("stride", k)
                mods.append(nn.MaxPool2d(k, stride=s))
                h, w = (h - k) // s + 1, (w - k) // s + 1
            else:
                raise SystemExit(f"torch_model.py: layer type {t}")
        self.layers = nn.ModuleList(mods)
        self.shape = spec["input"]

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.shape)
        for m in self.layers:
            if isinstance(m, nn.Linear) and x.dim() > 2:
                x = x.flatten(1)
            x = m(x)
        return x.reshape(x.shape[0], -1)

def idx(path):
    raw = gzip.open(path).read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)

def main():
    cmd = sys.argv[1]
    if cmd == "check":
        model, report, data = sys.argv[2:5]
        net = Net(spec_of(model))
        net.load_state_dict(load_file(model))  # strict: every name and shape must match
        x = idx(f"{data}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32)
        y = torch.from_numpy(idx(f"{data}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
        x = torch.from_numpy((x * np.float32(1 / 255) - np.float32(0.2860)) / np.float32(0.3530))
        with torch.no_grad():
            acc = (net(x).argmax(1) == y).double().mean().item()
        want = json.load(open(report))["final_test_acc"]
        ok = round(acc, 4) == round(want, 4)
        print(f"{'ok  ' if ok else 'FAIL'} PyTorch's test accuracy {acc:.4f}, the report's {want:.4f}")
        sys.exit(0 if ok else 1)
    if cmd == "init":
        like, out, seed = sys.argv[2], sys.argv[3], int(sys.argv[4])
        torch.manual_seed(seed)
        save_file(Net(spec_of(like)).state_dict(), out, metadata={"format": "pt"})
        print(f"ok   a PyTorch-initialised model in {out}")
        sys.exit(0)
    if cmd == "same":
        a, b = load_file(sys.argv[2]), load_file(sys.argv[3])
        ok = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        print(f"{'ok  ' if ok else 'FAIL'} {sys.argv[2]} and {sys.argv[3]} hold the same tensors")
        sys.exit(0 if ok else 1)
    raise SystemExit(f"torch_model.py: unknown command {cmd}")

if __name__ == "__main__":
    main()
