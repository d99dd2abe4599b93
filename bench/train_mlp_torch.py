#!/usr/bin/python3
"""train_mlp_torch.py: PyTorch's training throughput on the same mlp as bench-train-mlp.

784-200-200-10 (Linear, ReLU, Linear, ReLU, Linear), softmax cross-entropy,
torch.optim.SGD lr 0.05 without momentum, random inputs and labels cycling
through a pool of 64 batches, the same warm-up rule (a tenth of the steps, at
least 10) and the same output as bench-train-mlp. Run with Debian's
/usr/bin/python3 (python3-torch); train_mlp.sh runs both at one thread count.

Debian's torch does its Linear GEMMs in the system OpenBLAS, whose thread pool
torch.set_num_threads does not control: OpenBLAS would start one thread per
core next to torch's own, and on a 2-core machine that oversubscription makes
torch ~6x slower. So OPENBLAS_NUM_THREADS is set to --threads before torch is
imported, as bench-train-mlp calls hfl_blas_set_threads: both sides then
run the same number of BLAS threads.
"""
import argparse
import json
import os
import time

POOL_BATCHES = 64


def main():
    ap = argparse.ArgumentParser(description="PyTorch mlp training samples/s")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--leave-blas-threads", action="store_true",
                    help="do not set OPENBLAS_NUM_THREADS (shows the oversubscription)")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1 or args.threads < 1:
        ap.error("--batch, --steps and --threads must be >= 1")

    if not args.leave_blas_threads:
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    import torch  # after the environment is set: OpenBLAS reads it when loaded

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 200), torch.nn.ReLU(),
        torch.nn.Linear(200, 200), torch.nn.ReLU(),
        torch.nn.Linear(200, 10))
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 199210, n_params
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    xs = torch.rand(POOL_BATCHES, args.batch, 784)
    ys = torch.randint(0, 10, (POOL_BATCHES, args.batch))

    warmup = max(args.steps // 10, 10)
    t0 = 0.0
    loss = None
    for k in range(warmup + args.steps):
        if k == warmup:
            t0 = time.perf_counter()
        b = k % POOL_BATCHES
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[b]), ys[b])
        loss.backward()
        opt.step()
    final_loss = loss.item()
    secs = time.perf_counter() - t0
    sps = args.steps * args.batch / secs
    if args.json:
        print(json.dumps({"impl": "torch", "model": "mlp", "batch": args.batch,
                          "threads": args.threads, "steps": args.steps,
                          "seconds": round(secs, 6), "samples_per_s": round(sps, 1),
                          "final_loss": round(final_loss, 5), "torch": torch.__version__}))
    else:
        print(f"torch {torch.__version__}: {sps:.1f} samples/s ({1e6 * secs / args.steps:.1f} us/step), "
              f"final loss {final_loss:.4f}")


if __name__ == "__main__":
    main()
