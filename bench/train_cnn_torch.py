#!/usr/bin/python3
"""train_cnn_torch.py: PyTorch's training throughput on the same cnn as bench-train-cnn.

FedAvg's CNN on 1x28x28 inputs: Conv2d(1,32,5,padding=2), ReLU, MaxPool2d(2),
Conv2d(32,64,5,padding=2), ReLU, MaxPool2d(2), Flatten, Linear(3136,512), ReLU,
Linear(512,10) (1,663,370 parameters), softmax cross-entropy,
torch.optim.SGD lr 0.05 without momentum, random inputs and labels cycling
through a pool of 64 batches, the same warm-up rule (a tenth of the steps, at
least 10) and the same output as bench-train-cnn. Run with Debian's
/usr/bin/python3 (python3-torch); train_cnn.sh runs both at one thread count.

As in train_mlp_torch.py, OPENBLAS_NUM_THREADS is set to --threads before
torch is imported: Debian's torch does its Linear GEMMs in the system
OpenBLAS, whose thread pool torch.set_num_threads does not reach. Its
convolutions go to oneDNN (MKL-DNN, on in this build), which runs on torch's
own OpenMP threads, so torch.set_num_threads covers those; --no-mkldnn turns
oneDNN off (torch then unfolds per sample and multiplies in OpenBLAS, as hfl
does).

--device cuda runs it on the GPU (bench/gpu_train.sh, beside bench-gpu-train):
the pool of batches lives on the device, and the clock is read after
torch.cuda.synchronize(). --precision bf16/fp16 is torch.autocast's mixed
precision (fp32 weights, 2-byte GEMMs and activations; fp16 with a
GradScaler), the counterpart of hfl's bf16/fp16 training.
"""
import argparse
import json
import os
import time

POOL_BATCHES = 64


def main():
    ap = argparse.ArgumentParser(description="PyTorch cnn training samples/s")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--no-mkldnn", action="store_true",
                    help="disable oneDNN convolutions (torch.backends.mkldnn.enabled = False)")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1 or args.threads < 1:
        ap.error("--batch, --steps and --threads must be >= 1")

    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    import torch  # after the environment is set: OpenBLAS reads it when loaded
    from torch import nn

    torch.set_num_threads(args.threads)
    if args.no_mkldnn:
        torch.backends.mkldnn.enabled = False
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 1663370, n_params
    dev = torch.device(args.device)
    if dev.type == "cuda":
        # hfl's fp32 is true fp32 (no TF32 unless HFL_TF32=1): compare like with like.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    xs = torch.rand(POOL_BATCHES, args.batch, 1, 28, 28).to(dev)
    ys = torch.randint(0, 10, (POOL_BATCHES, args.batch)).to(dev)
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    scaler = torch.cuda.amp.GradScaler() if args.precision == "fp16" else None

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    warmup = max(args.steps // 10, 10)
    t0 = 0.0
    loss = None
    for k in range(warmup + args.steps):
        if k == warmup:
            sync()
            t0 = time.perf_counter()
        b = k % POOL_BATCHES
        opt.zero_grad(set_to_none=True)
        if amp is None:
            loss = loss_fn(model(xs[b]), ys[b])
            loss.backward()
            opt.step()
        else:
            with torch.autocast(device_type=dev.type, dtype=amp):
                loss = loss_fn(model(xs[b]), ys[b])
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
    sync()
    secs = time.perf_counter() - t0
    final_loss = loss.item()
    sps = args.steps * args.batch / secs
    if args.json:
        print(json.dumps({"impl": "torch", "model": "cnn", "batch": args.batch,
                          "device": args.device, "precision": args.precision,
                          "threads": args.threads, "steps": args.steps,
                          "seconds": round(secs, 6), "samples_per_s": round(sps, 1),
                          "final_loss": round(final_loss, 5), "torch": torch.__version__,
                          "mkldnn": bool(torch.backends.mkldnn.enabled)}))
    else:
        print(f"torch {torch.__version__} (oneDNN {'on' if torch.backends.mkldnn.enabled else 'off'}): "
              f"{sps:.1f} samples/s ({1e3 * secs / args.steps:.1f} ms/step), "
              f"final loss {final_loss:.4f}")


if __name__ == "__main__":
    main()
