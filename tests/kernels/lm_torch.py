"""lm_torch.py: the transformer ops of hfl (tests/kernels/lm_dump.c's file)
recomputed in PyTorch on the same inputs (kernels/lm.h).

Every forward output and gradient is recomputed in float64 with autograd,
as the gradient of sum(dy * out), and hfl's fp32 results must agree within
rtol 1e-4 + atol 1e-5 (fp32 rounding over sums of at most 3C terms); AdamW
is torch.optim.AdamW itself in float32, over the same three gradients.
Attention is written out (Debian's torch 1.13 has no
scaled_dot_product_attention): softmax of the causally masked q k^T /
sqrt(hs), times v. Usage: lm_torch.py FILE.safetensors; exit 1 on any
mismatch, printing each comparison's worst error."""
import math
import sys

import torch
import torch.nn.functional as F
from st_f32 import load


failed = 0


def compare(what, got, want, rtol=1e-4, atol=1e-5):
    global failed
    got = got.double()
    want = want.detach().double()
    err = (got - want).abs()
    lim = atol + rtol * want.abs()
    worst = (err / lim).max().item()
    ok = bool((err <= lim).all())
    print(f"{'ok  ' if ok else 'FAIL'} {what}: max |err| {err.max().item():.3g}, worst err/limit {worst:.3g}")
    failed += not ok


def grad_of(fn, inputs, dy):
    xs = [x.double().clone().requires_grad_(True) for x in inputs]
    y = fn(*xs)
    (y * dy.double()).sum().backward()
    return y, [x.grad for x in xs]


def main():
    t, meta = load(sys.argv[1])
    T, C, H = int(meta["T"]), int(meta["C"]), int(meta["H"])

    tok = t["embed.tokens"].long()
    rows = tok.shape[0]
    pos = torch.arange(rows) % T
    y, (dwte, dwpe) = grad_of(lambda wte, wpe: F.embedding(tok, wte) + wpe[pos],
                              [t["embed.wte"], t["embed.wpe"]], t["embed.dy"])
    compare("embedding forward", t["embed.y"], y)
    compare("embedding d(wte)", t["embed.dwte"], dwte)
    compare("embedding d(wpe)", t["embed.dwpe"], dwpe)

    y, (dx, dw, db) = grad_of(lambda x, w, b: F.layer_norm(x, (C,), w, b, eps=1e-5),
                              [t["ln.x"], t["ln.w"], t["ln.b"]], t["ln.dy"])
    compare("layernorm forward", t["ln.y"], y)
    compare("layernorm dx", t["ln.dx"], dx)
    compare("layernorm dw", t["ln.dw"], dw)
    compare("layernorm db", t["ln.db"], db)

    y, (dx,) = grad_of(lambda x: F.gelu(x, approximate="tanh"), [t["gelu.x"]], t["gelu.dy"])
    compare("gelu forward", t["gelu.y"], y)
    compare("gelu dx", t["gelu.dx"], dx)

    n, hs = rows // T, C // H

    def attention(qkv):
        q, k, v = (z.reshape(n, T, H, hs).transpose(1, 2) for z in qkv.split(C, dim=-1))
        z = q @ k.transpose(-2, -1) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        p = torch.softmax(z.masked_fill(~mask, float("-inf")), dim=-1)
        return (p @ v).transpose(1, 2).reshape(n * T, C)

    y, (dqkv,) = grad_of(attention, [t["attn.qkv"]], t["attn.dy"])
    compare("attention forward", t["attn.y"], y)
    compare("attention d(qkv)", t["attn.dqkv"], dqkv)

    p = torch.nn.Parameter(t["adamw.w0"].clone())
    opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for s in (1, 2, 3):
        p.grad = t[f"adamw.g{s}"].clone()
        opt.step()
    compare("adamw after 3 steps (fp32 torch.optim.AdamW)", t["adamw.w3"], p.detach(), rtol=1e-6, atol=1e-7)

    print(f"lm_torch: {failed} comparison(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
