"""lm_block_torch.py: one GPT block's forward and backward in PyTorch, the
same shapes and math as bench-lm-block (model/gpt.h: pre-norm, causal
attention written out, tanh GELU, both residuals), timed the same way: two
warm-up steps, then --steps; prints JSON with --json. --device cuda runs it
on the GPU (TF32 off, as hfl's fp32 GEMMs are plain fp32; synchronised at
each end of the timed steps); --precision bf16 casts the weights and inputs
to bfloat16 there (PyTorch's autocast-free pure-bf16 block).

usage: lm_block_torch.py [--n N] [--T T] [--C C] [--H H] [--steps S] [--threads K]
                         [--device cpu|cuda] [--precision fp32|bf16] [--json]"""
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
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev, dt = torch.device(a.device), torch.bfloat16 if a.precision == "bf16" else torch.float32
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    n, T, C, H = a.n, a.T, a.C, a.H
    hs = C // H
    g = torch.Generator().manual_seed(1)

    def u(*shape, s=0.1):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * s).to(dev, dt).requires_grad_(True)

    ln1_w, ln1_b, ln2_w, ln2_b = u(C), u(C), u(C), u(C)
    qkv_w, qkv_b, proj_w, proj_b = u(3 * C, C), u(3 * C), u(C, C), u(C)
    fc_w, fc_b, fcp_w, fcp_b = u(4 * C, C), u(4 * C), u(C, 4 * C), u(C)
    x = u(n, T, C, s=1.0)
    dout = (torch.rand(n, T, C, generator=g) * 2 - 1).to(dev, dt)
    mask = torch.ones(T, T, dtype=torch.bool, device=dev).tril()

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
            sync()
            t0 = time.perf_counter()
        block(x).backward(dout)
    sync()
    ms = (time.perf_counter() - t0) * 1e3 / a.steps
    r = {"n": n, "T": T, "C": C, "H": H, "threads": a.threads, "steps": a.steps, "device": a.device,
         "precision": a.precision, "ms_per_step": ms, "tokens_per_s": n * T / (ms / 1e3), "torch": torch.__version__}
    print(json.dumps(r) if a.json else f"torch GPT block: {ms:.2f} ms per forward+backward")


if __name__ == "__main__":
    main()
