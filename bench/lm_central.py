"""lm_central.py: the central PyTorch baseline of a federated language-model
run (the language model's requirement: "lm-pretrain.json over the 66 book-clients reaches a
held-out loss within 5% of the same model trained centrally in PyTorch for the
same number of samples").

The same model as hfl's GPT spec (the layout model/gpt.h documents:
embedding + position embedding, pre-norm blocks with causal self-attention
and a tanh-GELU MLP, final layer norm, output tied to the token embedding;
GPT-2's initialisation: N(0, 0.02) weights and embeddings, zero biases, unit
layer norms), the same optimizer (SGD with momentum in PyTorch's form, which
hfl's matches, or AdamW), batch and learning rate, trained on the union of every
client's windows, shuffled, for exactly SAMPLES samples, then evaluated on
the same held-out windows (mean cross-entropy per byte). Prints one JSON
line. With --eval-model it instead loads hfl's saved model (a safetensors
file, nanoGPT's names, LoRA adapters included) into the same module and
prints its held-out loss. Usage:
  lm_central.py SPEC.json SHARDS_DIR --samples N --batch B --lr LR [--momentum M | --optimizer adamw
                [--betas B1,B2]] [--weight-decay WD] [--seed S] [--curve K | --at N,N...]
  lm_central.py SPEC.json SHARDS_DIR --eval-model MODEL.safetensors
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


class Linear(nn.Linear):
    """nn.Linear with optional LoRA adapters (Hu et al. 2021; PEFT's lora_A
    [r, in], lora_B [out, r]): y = x W^T + b + (alpha / r) (x A^T) B^T."""

    def __init__(self, i, o, r=0, alpha=0.0):
        super().__init__(i, o)
        self.scale = alpha / r if r else 0.0
        if r:
            self.lora_A, self.lora_B = nn.Linear(i, r, bias=False), nn.Linear(r, o, bias=False)

    def forward(self, x):
        y = super().forward(x)
        return y + self.scale * self.lora_B(self.lora_A(x)) if self.scale else y


class Block(nn.Module):
    def __init__(self, C, H, r=0, alpha=0.0):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.attn = nn.Module()
        self.attn.c_attn, self.attn.c_proj = Linear(C, 3 * C, r, alpha), Linear(C, C, r, alpha)
        self.mlp = nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = Linear(C, 4 * C, r, alpha), Linear(4 * C, C, r, alpha)

    def forward(self, x):
        n, T, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (z.view(n, T, self.H, C // self.H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.attn.c_proj((att @ v).transpose(1, 2).reshape(n, T, C))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """nanoGPT's module names, so hfl's safetensors file (model/safetensors.h)
    loads with load_state_dict: transformer.wte, .wpe, .h.<b>, .ln_f."""

    def __init__(self, V, T, C, H, L, r=0, alpha=0.0):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte, self.transformer.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.transformer.h = nn.ModuleList(Block(C, H, r, alpha) for _ in range(L))
        self.transformer.ln_f = nn.LayerNorm(C)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
        for b in t.h:
            x = b(x)
        return t.ln_f(x) @ t.wte.weight.t()


def load_safetensors(path):
    """A safetensors file's F32 tensors (the format: u64 header length, JSON
    header, data), read here so the baseline needs no safetensors package."""
    raw = open(path, "rb").read()
    hl = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + hl])
    out = {}
    for k, e in head.items():
        if k == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(raw[8 + hl + a:8 + hl + b], dtype="<f4").copy()).view(*e["shape"])
    return out


def evaluate(model, tx, ty, V):
    with torch.no_grad():
        total = 0.0
        for s in range(0, len(tx), 256):
            logits = model(tx[s:s + 256])
            total += F.cross_entropy(logits.reshape(-1, V), ty[s:s + 256].reshape(-1), reduction="sum").item()
    return total / ty.numel()


def load(path):
    z = np.load(path)
    return torch.from_numpy(z["x"].astype(np.int64)), torch.from_numpy(z["y"].astype(np.int64))


def spec_dims(path):
    s = json.load(open(path))
    layers = s["layers"]
    emb = layers[0]
    assert emb["type"] == "embedding" and layers[-1]["type"] == "lm_head", "not a GPT spec"
    blocks = [l for l in layers if l["type"] == "gpt_block"]
    lora = s.get("lora", {})
    return (emb["vocab"], s["input"][0], emb["width"], blocks[0]["heads"], len(blocks), lora.get("rank", 0),
            float(lora.get("alpha", lora.get("rank", 0))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("shards")
    ap.add_argument("--samples", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--eval-model", help="evaluate this hfl safetensors file instead of training")
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd",
                    help="adamw: torch's AdamW with --betas, eps 1e-8 (HFL_ADAMW_EPS) and --weight-decay, as hfl's")
    ap.add_argument("--betas", default="0.9,0.999")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--curve", type=int, default=0,
                    help="also evaluate every this many samples and print the held-out loss curve")
    ap.add_argument("--at", default="",
                    help="also evaluate at these sample counts (comma-separated; at the first batch boundary "
                         "reaching each), e.g. the federated runs' totals, from one run")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    V, T, C, H, L, r, alpha = spec_dims(a.spec)
    tx, ty = load(f"{a.shards}/test.npz")
    if a.eval_model:  # hfl's model, loaded by name, every tensor (strict)
        model = GPT(V, T, C, H, L, r, alpha).double()
        model.load_state_dict({k: v.double() for k, v in load_safetensors(a.eval_model).items()}, strict=True)
        loss = evaluate(model, tx, ty, V)
        print(json.dumps({"test_loss": loss, "test_bpb": loss / math.log(2)}))
        return
    if a.samples is None or a.batch is None or a.lr is None:
        ap.error("--samples, --batch and --lr are needed to train")
    parts = [load(p) for p in sorted(glob.glob(f"{a.shards}/client-*.npz"))]
    x = torch.cat([p[0] for p in parts])
    y = torch.cat([p[1] for p in parts])
    model = GPT(V, T, C, H, L)
    if a.optimizer == "adamw":
        b1, b2 = (float(v) for v in a.betas.split(","))
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(b1, b2), eps=1e-8, weight_decay=a.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    t0, seen, order, at, curve, next_eval = time.time(), 0, torch.randperm(len(x)), 0, [], a.curve
    marks = sorted(int(v) for v in a.at.split(",") if v)
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
        due = (a.curve and seen >= next_eval) or (marks and seen >= marks[0])
        while a.curve and next_eval <= seen:
            next_eval += a.curve
        while marks and marks[0] <= seen:
            marks.pop(0)
        if due and seen < a.samples:
            curve.append([seen, evaluate(model, tx, ty, V)])
            print(json.dumps({"samples": seen, "central_test_loss": curve[-1][1]}), flush=True)
    test_loss = evaluate(model, tx, ty, V)
    print(json.dumps({"central_test_loss": test_loss, "central_test_bpb": test_loss / math.log(2),
                      "samples": seen, "train_windows": len(x), "test_windows": len(tx),
                      "wall_s": round(time.time() - t0, 1), **({"curve": curve} if curve else {})}))


if __name__ == "__main__":
    main()
