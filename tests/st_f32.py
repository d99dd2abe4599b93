"""st_f32.py: reads a safetensors file of F32 tensors (what hfl's dump
programs for the PyTorch checks write) into torch tensors, with its metadata."""
import json
import struct

import numpy as np
import torch


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, t in head.items():
        assert t["dtype"] == "F32", name
        b, e = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").copy().reshape(t["shape"]))
    return out, meta
