"""gpt_torch.py: hfl's 2-layer GPT (tests/model/gpt_dump.c's file) redone in
PyTorch in float64 on the same weights and tokens (model/gpt.h).

The model is written here from the layout gpt.h documents (nanoGPT's Block:
pre-norm, causal self-attention, GELU tanh MLP, both residuals; tied output
projection), the loss is F.cross_entropy's mean over the n*T next-token
predictions, and every gradient comes from autograd. hfl's fp32 loss and
gradients must agree within rtol 1e-4, atol 1e-6. A bf16 or fp16 step
(mixed precision; the file's params are its 2-byte working weights widened)
must agree within one 2-byte rounding unit u (2^-8, 2^-11) in the loss's
relative error and 4u in the gradients' relative L2 error (seen: bf16
0.03u and 1.9u, fp16 0.05u and 1.5u).

A file with lora_r and lora_alpha (gpt_dump's LoRA mode) has adapters on
each block's four projections (Hu et al. 2021, "LoRA: Low-Rank Adaptation of
Large Language Models"; PEFT's lora_A [r, in], lora_B [out, r]): each is
y = x W^T + b + (alpha / r) (x A^T) B^T here, the base frozen (no autograd
leaf), and the checks are the loss and the adapters' gradients alone, with
the tolerances above, and that every block gradient in the file is still
the NaN sentinel hfl filled it with (the base got none). Usage: gpt_torch.py FILE"""
import math
import sys

import torch
import torch.nn.functional as F
from st_f32 import load


def main():
    t, m = load(sys.argv[1])
    n, T, C, H, V, L = (int(m[k]) for k in ("n", "T", "C", "H", "V", "L"))
    R = int(m.get("lora_r", "0"))
    scale = float(m["lora_alpha"]) / R if R else 0.0
    params = t["params"].double().clone().requires_grad_(R == 0)
    at = [0]

    def take(*shape, src=params, pos=at):
        k = math.prod(shape)
        v = src[pos[0]:pos[0] + k].view(*shape)
        pos[0] += k
        return v

    wte, wpe = take(V, C), take(T, C)
    blocks = []
    for _ in range(L):
        blocks.append(dict(ln1_w=take(C), ln1_b=take(C), qkv_w=take(3 * C, C), qkv_b=take(3 * C),
                           proj_w=take(C, C), proj_b=take(C), ln2_w=take(C), ln2_b=take(C),
                           fc_w=take(4 * C, C), fc_b=take(4 * C), fcp_w=take(C, 4 * C), fcp_b=take(C)))
    lnf_w, lnf_b = take(C), take(C)
    assert at[0] == params.numel(), (at[0], params.numel())
    if R:  # each projection's lora_A, lora_B (model/lora.h's order)
        lora = t["lora"].double().clone().requires_grad_(True)
        lat = [0]
        for b in blocks:
            for name, i, o in (("qkv", C, 3 * C), ("proj", C, C), ("fc", C, 4 * C), ("fcp", 4 * C, C)):
                b[name + "_la"], b[name + "_lb"] = take(R, i, src=lora, pos=lat), take(o, R, src=lora, pos=lat)
        assert lat[0] == lora.numel(), (lat[0], lora.numel())

    def lin(x, b, name):  # nn.Linear, plus the adapter when there is one
        y = F.linear(x, b[name + "_w"], b[name + "_b"])
        return y + scale * F.linear(F.linear(x, b[name + "_la"]), b[name + "_lb"]) if R else y

    tok = t["tokens"].long()
    x_in, y = tok[:, :T], tok[:, 1:]
    hs = C // H
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = wte[x_in] + wpe[torch.arange(T)]
    for b in blocks:
        h = F.layer_norm(x, (C,), b["ln1_w"], b["ln1_b"], eps=1e-5)
        q, k, v = lin(h, b, "qkv").split(C, dim=-1)
        q, k, v = (z.reshape(n, T, H, hs).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, float("-inf")), dim=-1)
        ya = (att @ v).transpose(1, 2).reshape(n, T, C)
        x = x + lin(ya, b, "proj")
        h = F.layer_norm(x, (C,), b["ln2_w"], b["ln2_b"], eps=1e-5)
        x = x + lin(F.gelu(lin(h, b, "fc"), approximate="tanh"), b, "fcp")
    logits = F.layer_norm(x, (C,), lnf_w, lnf_b, eps=1e-5) @ wte.t()
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()

    failed = 0
    prec = m.get("precision", "fp32")
    got_loss = t["loss"].double().item()
    g, want = t["grads"].double(), params.grad
    if R:  # the adapters' gradients; the block gradients must be hfl's untouched sentinel
        nb = 12 * C * C + 13 * C
        blk = t["grads"][(V + T) * C:(V + T) * C + L * nb]
        ok = bool(torch.isnan(blk).all())
        print(f"{'ok  ' if ok else 'FAIL'} lora r {R} alpha {m['lora_alpha']}: {blk.numel()} base block "
              f"gradients {'all' if ok else 'NOT all'} the untouched NaN sentinel")
        failed += not ok
        g, want = t["lora_grads"].double(), lora.grad
    if prec == "fp32":
        ok = abs(got_loss - loss.item()) <= 1e-6 + 1e-5 * abs(loss.item())
        print(f"{'ok  ' if ok else 'FAIL'} loss: hfl {got_loss:.7f}, torch {loss.item():.7f}")
        failed += not ok
        err = (g - want).abs()
        lim = 1e-6 + 1e-4 * want.abs()
        bad = int((err > lim).sum())
        worst = int((err / lim).argmax())
        print(f"{'ok  ' if bad == 0 else 'FAIL'} gradients: {bad} of {g.numel()} outside rtol 1e-4 + atol 1e-6; "
              f"max |err| {err.max().item():.3g}; worst [{worst}] {g[worst].item():.7g} vs {want[worst].item():.7g}; "
              f"max |grad| {want.abs().max().item():.3g}")
        failed += bad != 0
    else:
        # 2-byte storage: every activation and activation gradient is rounded
        # to 8 (bf16) or 11 (fp16) significant bits, so the step agrees with
        # float64 to a few units of that rounding: stated as the loss's
        # relative error and the gradient vector's relative L2 error.
        unit = 2.0 ** -8 if prec == "bf16" else 2.0 ** -11
        rel_loss = abs(got_loss - loss.item()) / abs(loss.item())
        rel_grad = ((g - want).norm() / want.norm()).item()
        ok_loss, ok_grad = rel_loss <= unit, rel_grad <= 4 * unit
        print(f"{'ok  ' if ok_loss else 'FAIL'} loss ({prec}): hfl {got_loss:.7f}, torch {loss.item():.7f}, "
              f"relative error {rel_loss:.3g} (limit {unit:.3g})")
        print(f"{'ok  ' if ok_grad else 'FAIL'} gradients ({prec}): relative L2 error {rel_grad:.3g} (limit {4 * unit:.3g}), "
              f"max |err| {(g - want).abs().max().item():.3g} of max |grad| {want.abs().max().item():.3g}")
        failed += (not ok_loss) + (not ok_grad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
