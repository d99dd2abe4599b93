"""gpt_torch.py: hfl's 2-layer GPT (tests/model/gpt_dump.c's file) redone in
PyTorch in float64 on the same weights and tokens (issue 13).

The model is written here from the layout gpt.h documents (nanoGPT's Block:
pre-norm, causal self-attention, GELU tanh MLP, both residuals; tied output
projection), the loss is F.cross_entropy's mean over the n*T next-token
predictions, and every gradient comes from autograd. hfl's fp32 loss and
gradients must agree within rtol 1e-4, atol 1e-6. A bf16 or fp16 step
(mixed precision; the file's params are its 2-byte working weights widened)
must agree within one 2-byte rounding unit u (2^-8, 2^-11) in the loss's
relative error and 4u in the gradients' relative L2 error (seen: bf16
0.03u and 1.9u, fp16 0.05u and 1.5u). Usage: gpt_torch.py FILE"""
import math
import sys

import torch
import torch.nn.functional as F
from st_f32 import load


def main():
    t, m = load(sys.argv[1])
    n, T, C, H, V, L = (int(m[k]) for k in ("n", "T", "C", "H", "V", "L"))
    params = t["params"].double().clone().requires_grad_(True)
    at = [0]

    def take(*shape):
        k = math.prod(shape)
        v = params[at[0]:at[0] + k].view(*shape)
        at[0] += k
        return v

    wte, wpe = take(V, C), take(T, C)
    blocks = []
    for _ in range(L):
        blocks.append(dict(ln1_w=take(C), ln1_b=take(C), qkv_w=take(3 * C, C), qkv_b=take(3 * C),
                           proj_w=take(C, C), proj_b=take(C), ln2_w=take(C), ln2_b=take(C),
                           fc_w=take(4 * C, C), fc_b=take(4 * C), fcp_w=take(C, 4 * C), fcp_b=take(C)))
    lnf_w, lnf_b = take(C), take(C)
    assert at[0] == params.numel(), (at[0], params.numel())

    tok = t["tokens"].long()
    x_in, y = tok[:, :T], tok[:, 1:]
    hs = C // H
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = wte[x_in] + wpe[torch.arange(T)]
    for b in blocks:
        h = F.layer_norm(x, (C,), b["ln1_w"], b["ln1_b"], eps=1e-5)
        q, k, v = F.linear(h, b["qkv_w"], b["qkv_b"]).split(C, dim=-1)
        q, k, v = (z.reshape(n, T, H, hs).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, float("-inf")), dim=-1)
        ya = (att @ v).transpose(1, 2).reshape(n, T, C)
        x = x + F.linear(ya, b["proj_w"], b["proj_b"])
        h = F.layer_norm(x, (C,), b["ln2_w"], b["ln2_b"], eps=1e-5)
        x = x + F.linear(F.gelu(F.linear(h, b["fc_w"], b["fc_b"]), approximate="tanh"), b["fcp_w"], b["fcp_b"])
    logits = F.layer_norm(x, (C,), lnf_w, lnf_b, eps=1e-5) @ wte.t()
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()

    failed = 0
    prec = m.get("precision", "fp32")
    got_loss = t["loss"].double().item()
    g, want = t["grads"].double(), params.grad
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
