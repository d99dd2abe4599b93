"""lm_central.py: the central PyTorch baseline of a federated language-model
run (issue 13, must-show: "lm-pretrain.json over the 66 book-clients reaches a
held-out loss within 5% of the same model trained centrally in PyTorch for the
same number of samples").

The same model as hfl's GPT spec (the layout model/gpt.h documents:
embedding + position embedding, pre-norm blocks with causal self-attention
and a tanh-GELU MLP, final layer norm, output tied to the token embedding;
GPT-2's initialisation: N(0, 0.02) weights and embeddings, zero biases, unit
layer norms), the same optimizer (SGD with momentum, PyTorch's form, which
hfl's matches), batch and learning rate, trained on the union of every
client's windows, shuffled, for exactly SAMPLES samples, then evaluated on
the same held-out windows (mean cross-entropy per byte). Prints one JSON
line. Usage:
  lm_central.py SPEC.json SHARDS_DIR --samples N --batch B --lr LR --momentum M [--seed S]
"""
import argparse
import glob
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        n, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (z.view(n, T, self.H, C // self.H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).reshape(n, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, C, H, L):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


def load(path):
    z = np.load(path)
    return torch.from_numpy(z["x"].astype(np.int64)), torch.from_numpy(z["y"].astype(np.int64))


def spec_dims(path):
    s = json.load(open(path))
    layers = s["layers"]
    emb = layers[0]
    assert emb["type"] == "embedding" and layers[-1]["type"] == "lm_head", "not a GPT spec"
    blocks = [l for l in layers if l["type"] == "gpt_block"]
    return emb["vocab"], s["input"][0], emb["width"], blocks[0]["heads"], len(blocks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("shards")
    ap.add_argument("--samples", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    V, T, C, H, L = spec_dims(a.spec)
    parts = [load(p) for p in sorted(glob.glob(f"{a.shards}/client-*.npz"))]
    x = torch.cat([p[0] for p in parts])
    y = torch.cat([p[1] for p in parts])
    tx, ty = load(f"{a.shards}/test.npz")
    model = GPT(V, T, C, H, L)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    t0, seen, order, at = time.time(), 0, torch.randperm(len(x)), 0
    while seen < a.samples:
        b = min(a.batch, a.samples - seen)
        if at + b > len(order):
            order, at = torch.randperm(len(x)), 0
        i = order[at:at + b]
        at += b
        loss = F.cross_entropy(model(x[i]).reshape(-1, V), y[i].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += b
    with torch.no_grad():
        total = 0.0
        for s in range(0, len(tx), 256):
            logits = model(tx[s:s + 256])
            total += F.cross_entropy(logits.reshape(-1, V), ty[s:s + 256].reshape(-1), reduction="sum").item()
    test_loss = total / ty.numel()
    print(json.dumps({"central_test_loss": test_loss, "central_test_bpb": test_loss / math.log(2),
                      "samples": seen, "train_windows": len(x), "test_windows": len(tx),
                      "wall_s": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
