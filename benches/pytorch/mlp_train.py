#!/usr/bin/python3
"""PyTorch's training step on the MLP of configs/bench/mlp8x1024-single.yaml, for comparison
with `tandem train` (docs/benchmarks.md): 8 x Linear(1024, 1024) with ReLU between them, softmax
cross-entropy over 1024 classes, SGD lr 0.01, minibatch 256. `--precision bf16` runs the forward
under CPU autocast (bf16 products, f32 master weights), as PyTorch users do.

    /usr/bin/python3 benches/pytorch/mlp_train.py  # Debian 12: apt-get install python3-torch --precision bf16 --threads 2 --steps 100
prints one line: samples/s over the timed steps (after 5 warm-up steps)."""
import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--minibatch", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    layers = []
    for i in range(a.layers):
        layers.append(torch.nn.Linear(a.width, a.width))
        if i + 1 < a.layers:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, a.minibatch, a.width)
    y = torch.randint(0, a.width, (32, a.minibatch))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(i: int) -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = model(x[i % 32])
        loss = loss_fn(out.float(), y[i % 32])
        loss.backward()
        opt.step()

    for i in range(5):
        step(i)
    start = time.perf_counter()
    for i in range(a.steps):
        step(i)
    took = time.perf_counter() - start
    print(f"pytorch {torch.__version__} {a.precision} threads {a.threads}: "
          f"{a.steps * a.minibatch / took:.0f} samples/s")


if __name__ == "__main__":
    main()
