"""lm_block_torch.py: one GPT block's forward and backward in PyTorch on the
CPU, the same shapes and math as bench-lm-block (model/gpt.h: pre-norm,
causal attention written out, tanh GELU, both residuals), timed the same
way: two warm-up steps, then --steps; prints JSON with --json.

usage: lm_block_torch.py [--n N] [--T T] [--C C] [--H H] [--steps S] [--threads K] [--json]"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("n", 8), ("T", 128), ("C", 128), ("H", 4), ("steps", 20), ("threads", 1)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    n, T, C, H = a.n, a.T, a.C, a.H
    hs = C // H
    g = torch.Generator().manual_seed(1)

    def u(*shape, s=0.1):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * s).requires_grad_(True)

    ln1_w, ln1_b, ln2_w, ln2_b = u(C), u(C), u(C), u(C)
    qkv_w, qkv_b, proj_w, proj_b = u(3 * C, C), u(3 * C), u(C, C), u(C)
    fc_w, fc_b, fcp_w, fcp_b = u(4 * C, C), u(4 * C), u(C, 4 * C), u(C)
    x = u(n, T, C, s=1.0)
    dout = torch.rand(n, T, C, generator=g) * 2 - 1
    mask = torch.ones(T, T, dtype=torch.bool).tril()

    def block(x):
        h = F.layer_norm(x, (C,), ln1_w, ln1_b, eps=1e-5)
        q, k, v = F.linear(h, qkv_w, qkv_b).split(C, dim=-1)
        q, k, v = (z.reshape(n, T, H, hs).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, float("-inf")), dim=-1)
        x = x + F.linear((att @ v).transpose(1, 2).reshape(n, T, C), proj_w, proj_b)
        h = F.layer_norm(x, (C,), ln2_w, ln2_b, eps=1e-5)
        return x + F.linear(F.gelu(F.linear(h, fc_w, fc_b), approximate="tanh"), fcp_w, fcp_b)

    t0 = 0.0
    for step in range(a.steps + 2):
        if step == 2:
            t0 = time.perf_counter()
        block(x).backward(dout)
    ms = (time.perf_counter() - t0) * 1e3 / a.steps
    r = {"n": n, "T": T, "C": C, "H": H, "threads": a.threads, "steps": a.steps, "ms_per_step": ms,
         "tokens_per_s": n * T / (ms / 1e3), "torch": torch.__version__}
    print(json.dumps(r) if a.json else f"torch GPT block: {ms:.2f} ms per forward+backward")


if __name__ == "__main__":
    main()
