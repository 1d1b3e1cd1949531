#!/usr/bin/env python3
"""Tandem's GPT blocks in PyTorch eager: the baseline of benches/gpu_block_bench.cpp.

    python3 scripts/torch_block_bench.py [--layers 2] [--d-model 1024] [--heads d_model/64]
        [--seq 1024] [--batch 8] [--precision f32|tf32|bf16] [--iters 20] [--warmup 5]
        [--gemm-reps 20] [--attention sdpa[,math,...]] [--device cuda]

The block is Tandem's TransformerBlock (models/layers/transformer_block.cpp), not
nn.TransformerEncoderLayer: pre-LayerNorm,
    x1 = x + proj(attention(ln1(x))),   y = x1 + out(gelu_tanh(fc(ln2(x1)))),
LayerNorm eps 1e-5 with weight and bias, biases on every linear map, one qkv map [3d, d] whose
output rows are [q | k | v] with heads contiguous in each, causal softmax(q k^T / sqrt(d_head)),
d_ff = 4 d, dropout 0. Weights N(0, 0.02), the two output projections N(0, 0.02 / sqrt(2 L)).

Attention, one result per mode of --attention:
  sdpa       F.scaled_dot_product_attention(is_causal=True), PyTorch's own choice of kernel
  flash / efficient / cudnn / math_sdpa
             the same call restricted to that backend (torch.nn.attention.sdpa_kernel)
  math       explicit scores, mask, softmax and product: materialises the t x t probabilities
             as Tandem's attention does

Precisions (as the C++ bench's matmul precision): f32 (TF32 off: allow_tf32 False, matmul
precision "highest"), tf32 (allow_tf32 True), bf16 (autocast to bfloat16 around the forward,
f32 parameters, TF32 off for what autocast leaves in f32).

Timing is the C++ bench's: host wall clock; each measured iteration runs the forward,
synchronises, runs the backward (from a random output gradient, into fresh parameter gradients
and the input's gradient), synchronises; medians over --iters after --warmup. "pipelined" runs
--iters iterations without synchronising and reports the mean.

FLOPs (the C++ bench's formula, Layer::cost): per block, n = batch * seq, d = d_model, f = 4 d,
t = seq: maps = 2 n (4 d^2 + 2 d f), core = 4 batch t (t + 1) / 2 d (causal half only);
forward = maps + core, backward = (maps + 2 core) + maps.

The GEMM ceiling is torch.matmul on the MLP's first product [batch*seq, d] x [d, 4d] with f32
operands at the same precision (bf16: under the same autocast, so it includes the casts, as
Tandem's bf16 GEMM does), and for bf16 also with bf16 operands (the hardware's ceiling).

Prints a table and one `BENCH_JSON {...}` line per attention mode. Only torch and the standard
library are imported.
"""

import argparse
import contextlib
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def block_flops(batch, seq, d, d_ff):
    """(forward, backward input, backward weight) FLOPs of one block: TransformerBlock::cost."""
    n = float(batch * seq)
    t = float(seq)
    maps = 2 * n * (4 * d * d + 2 * d * d_ff)
    core = 2 * 2 * float(batch) * (t * (t + 1) / 2) * d
    return maps + core, maps + 2 * core, maps


class Block(torch.nn.Module):
    def __init__(self, d, heads, d_ff, n_layers, attention):
        super().__init__()
        self.d = d
        self.heads = heads
        self.attention = attention
        self.ln1 = torch.nn.LayerNorm(d, eps=1e-5)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d, eps=1e-5)
        self.fc = torch.nn.Linear(d, d_ff)
        self.out = torch.nn.Linear(d_ff, d)
        out_std = 0.02 / math.sqrt(2.0 * max(1, n_layers))
        with torch.no_grad():
            for lin, std in ((self.qkv, 0.02), (self.proj, out_std), (self.fc, 0.02),
                             (self.out, out_std)):
                lin.weight.normal_(0.0, std)
                lin.bias.zero_()

    def attend(self, q, k, v):
        # q, k, v: [b, heads, t, d_head]
        if self.attention == "math":
            t = q.shape[-2]
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu_(1)
            scores = scores.masked_fill(mask, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            return torch.matmul(probs.to(v.dtype), v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward(self, x):
        b, t, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.heads, dh).transpose(1, 2)
        k = k.view(b, t, self.heads, dh).transpose(1, 2)
        v = v.view(b, t, self.heads, dh).transpose(1, 2)
        a = self.attend(q, k, v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(a)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def sdpa_context(mode):
    """Restricts F.scaled_dot_product_attention to one backend for the forced modes."""
    if mode in ("sdpa", "math"):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math_sdpa": SDPBackend.MATH,
    }[mode]
    return sdpa_kernel([backend])


def set_precision(precision):
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def autocast_context(precision, device):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_ceiling(args, device, bf16_operands=False):
    m, n, k = args.batch * args.seq, 4 * args.d_model, args.d_model
    dtype = torch.bfloat16 if bf16_operands else torch.float32
    a = torch.rand(m, k, device=device, dtype=dtype) * 2 - 1
    b = torch.rand(n, k, device=device, dtype=dtype) * 2 - 1
    ctx = contextlib.nullcontext() if bf16_operands else autocast_context(args.precision, device)
    with torch.no_grad(), ctx:
        for _ in range(5):
            torch.matmul(a, b.t())
        sync(device)
        rates = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(args.gemm_reps):
                torch.matmul(a, b.t())
            sync(device)
            dt = (time.perf_counter() - t0) / args.gemm_reps
            rates.append(2.0 * m * n * k / dt / 1e12)
    return statistics.median(rates), (m, n, k)


def run_mode(args, device, mode, flops, ceilings):
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        *[Block(args.d_model, args.heads, 4 * args.d_model, args.layers, mode)
          for _ in range(args.layers)]).to(device)
    params = list(model.parameters())
    shape = (args.batch, args.seq, args.d_model)
    x = (torch.rand(shape, device=device) * 2 - 1).requires_grad_(True)
    dy = torch.rand(shape, device=device) * 2 - 1

    def clear_grads():
        for p in params:
            p.grad = None
        x.grad = None

    def forward():
        with autocast_context(args.precision, device):
            return model(x)

    fwd_ms, bwd_ms, total_ms = [], [], []
    with sdpa_context(mode):
        for i in range(args.warmup + args.iters):
            clear_grads()
            sync(device)
            t0 = time.perf_counter()
            y = forward()
            sync(device)
            t1 = time.perf_counter()
            y.backward(dy)
            sync(device)
            t2 = time.perf_counter()
            del y
            if i >= args.warmup:
                fwd_ms.append((t1 - t0) * 1e3)
                bwd_ms.append((t2 - t1) * 1e3)
                total_ms.append((t2 - t0) * 1e3)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.iters):
            clear_grads()
            y = forward()
            y.backward(dy)
            del y
        sync(device)
        pipelined_ms = (time.perf_counter() - t0) * 1e3 / args.iters

    forward_flops, backward_flops = flops
    total_flops = forward_flops + backward_flops
    f_ms = statistics.median(fwd_ms)
    b_ms = statistics.median(bwd_ms)
    t_ms = statistics.median(total_ms)

    def tflops(fl, ms):
        return fl / (ms * 1e-3) / 1e12 if ms > 0 else 0.0

    ceiling = ceilings["gemm_tflops"]
    print(f"PyTorch {torch.__version__} eager, attention '{mode}':")
    print(f"{'':28} {'ms/iter':>10} {'GFLOP':>10} {'TFLOP/s':>10} {'of GEMM':>10}")
    for name, ms, fl in (("forward (median)", f_ms, forward_flops),
                         ("backward (median)", b_ms, backward_flops),
                         ("forward+backward (median)", t_ms, total_flops),
                         ("pipelined (mean)", pipelined_ms, total_flops)):
        r = tflops(fl, ms)
        print(f"{name:28} {ms:10.3f} {fl / 1e9:10.1f} {r:10.2f} "
              f"{(r / ceiling if ceiling > 0 else 0.0):10.3f}")
    line = {
        "suite": "gpu_block",
        "impl": "torch",
        "attention": mode,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "config": {
            "layers": args.layers, "d_model": args.d_model, "heads": args.heads,
            "d_ff": 4 * args.d_model, "seq": args.seq, "batch": args.batch,
            "precision": args.precision, "iters": args.iters, "warmup": args.warmup,
        },
        "flops": {"forward": forward_flops, "backward": backward_flops, "total": total_flops},
        "results": {
            "forward_ms": f_ms, "backward_ms": b_ms, "total_ms": t_ms,
            "pipelined_ms": pipelined_ms,
            "tflops": tflops(total_flops, t_ms),
            "pipelined_tflops": tflops(total_flops, pipelined_ms),
            "of_gemm": tflops(total_flops, t_ms) / ceiling if ceiling > 0 else 0.0,
            **ceilings,
        },
    }
    print("BENCH_JSON " + json.dumps(line), flush=True)
    del model, params, x, dy
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=0, help="0: d_model / 64")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--precision", choices=("f32", "tf32", "bf16"), default="f32")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--gemm-reps", type=int, default=20)
    p.add_argument("--attention", default="sdpa",
                   help="comma-separated: sdpa, math, flash, efficient, cudnn, math_sdpa")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    if args.heads == 0:
        args.heads = max(1, args.d_model // 64)
    if args.d_model % args.heads != 0:
        p.error(f"--heads {args.heads} does not divide --d-model {args.d_model}")
    modes = [m for m in args.attention.split(",") if m]
    for m in modes:
        if m not in ("sdpa", "math", "flash", "efficient", "cudnn", "math_sdpa"):
            p.error(f"unknown attention mode '{m}'")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device")
        return 0
    device = torch.device(args.device)
    set_precision(args.precision)

    per_block = block_flops(args.batch, args.seq, args.d_model, 4 * args.d_model)
    flops = (args.layers * per_block[0], args.layers * (per_block[1] + per_block[2]))

    ceilings = {}
    ceilings["gemm_tflops"], (m, n, k) = gemm_ceiling(args, device)
    if args.precision == "bf16":
        ceilings["gemm_bf16_operands_tflops"], _ = gemm_ceiling(args, device, bf16_operands=True)
    print(f"GPT blocks in PyTorch on {device} "
          f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else device.type}): "
          f"{args.layers} blocks, d_model {args.d_model}, heads {args.heads}, "
          f"d_ff {4 * args.d_model}, seq {args.seq}, batch {args.batch}, "
          f"precision {args.precision}; {args.iters} iterations after {args.warmup} warm-up")
    print(f"GEMM ceiling: torch.matmul {m}x{n}x{k} (m x n x k), f32 operands at {args.precision}: "
          f"{ceilings['gemm_tflops']:.2f} TFLOP/s"
          + (f"; bf16 operands: {ceilings['gemm_bf16_operands_tflops']:.2f} TFLOP/s"
             if "gemm_bf16_operands_tflops" in ceilings else ""))
    status = 0
    for mode in modes:
        try:
            run_mode(args, device, mode, flops, ceilings)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # e.g. no such sdpa backend
            print(f"attention '{mode}' failed: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
