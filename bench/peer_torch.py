#!/usr/bin/python3
"""peer_torch: bench/bench_head's training step in PyTorch, timed the same way.

The step (the lesson's causal head, op for op as tapegrad's tg_head_forward):
    q, k, v = x @ W_q, x @ W_k, x @ W_v                     (B,T,hs) each
    scores  = q @ k^T / sqrt(hs)                            (B,T,T)
    scores  = scores.masked_fill(tril[:T,:T] == 0, -inf)
    out     = softmax(scores, -1) @ v                       (B,T,hs)
    loss    = mse_loss(out, target); loss.backward()
    AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0.01).step()
        (torch 1.13 on CPU runs the single-tensor AdamW, foreach=False, the
        path tapegrad's nn/optim.c follows)
    zero_grad(set_to_none=True)    (tapegrad's zero_grad drops the gradient too)

Warm-up of at least 2 steps and --warmup-seconds, then reps steps timed one
by one (reps = --seconds / the mean warm-up step after the first, clamped), and one line of
key=value fields on stdout, the same fields as bench_head's:
    bench impl=torch variant=composed config=large dtype=f32 threads=1 ...

Threads: OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are set before torch loads,
then torch.set_num_threads and OpenBLAS's own openblas_set_num_threads (torch
runs its matmuls on the system BLAS, whose pool torch does not size).
Run it with /usr/bin/python3 (Debian's python3-torch)."""

import argparse
import os
import sys

from peer_timing import SIZES, median, time_steps


def parse_args():
    p = argparse.ArgumentParser(
        description="One training step of the causal attention head in "
        "PyTorch (bench_head's peer).")
    p.add_argument("--config", choices=SIZES, default="tiny")
    p.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=1.5,
                   help="time budget of the timed steps (default 1.5)")
    p.add_argument("--min-reps", type=int, default=3)
    p.add_argument("--max-reps", type=int, default=5000)
    p.add_argument("--warmup-seconds", type=float, default=0.25)
    p.add_argument("--impl", default="torch",
                   help="the impl= label of the output line (default torch)")
    p.add_argument("--info", action="store_true",
                   help="print torch's build and BLAS kernel, and exit")
    return p.parse_args()


def openblas():
    """The OpenBLAS torch loaded (through libblas.so.3), or None."""
    import ctypes
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "openblas" in line}
    for path in sorted(paths):
        if ".so" not in path:
            continue
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            lib.openblas_get_num_threads.restype = ctypes.c_int
            lib.openblas_set_num_threads.argtypes = [ctypes.c_int]
            return lib
    return None


def step_flops(B, T, C, hs):
    """The six matmuls, forward and backward (twice the forward), as
    bench_head counts them."""
    forward = 3 * 2 * B * T * C * hs + 2 * (2 * B * T * T * hs)
    return 3 * forward


def peak_rss_kb():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main():
    args = parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import math
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    blas = openblas()
    if blas:
        blas.openblas_set_num_threads(args.threads)
    kernel = blas.openblas_get_corename().decode() if blas else "unknown"
    if args.info:
        config = blas.openblas_get_config().decode() if blas else "not found"
        capability = [line.split(":", 1)[1].strip()
                      for line in torch.__config__.show().splitlines()
                      if "CPU capability" in line]
        print(f"torch {torch.__version__} matmul: OpenBLAS, kernel {kernel} "
              f"({config}); ATen CPU capability "
              f"{capability[0] if capability else 'unknown'}")
        return 0

    B, T, C, hs = SIZES[args.config]
    dtype = torch.float32 if args.dtype == "f32" else torch.float64
    torch.manual_seed(1337)
    w_q, w_k, w_v = (
        (torch.randn(C, hs, dtype=dtype) / math.sqrt(C)).requires_grad_()
        for _ in range(3))
    x = torch.randn(B, T, C, dtype=dtype)
    target = torch.randn(B, T, hs, dtype=dtype)
    tril = torch.tril(torch.ones(T, T, dtype=dtype))  # the lesson's buffer
    adamw = torch.optim.AdamW([w_q, w_k, w_v], lr=1e-3, betas=(0.9, 0.999),
                              eps=1e-8, weight_decay=0.01)

    def train_step():
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
        scores = scores.masked_fill(tril[:T, :T] == 0, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        loss = F.mse_loss(out, target)
        loss.backward()
        adamw.step()
        adamw.zero_grad(set_to_none=True)

    base_rss = peak_rss_kb()
    warmup, reps, ms, cpu = time_steps(train_step, args)
    med = median(ms)
    print(f"bench impl={args.impl} variant=composed config={args.config} "
          f"dtype={args.dtype} threads={args.threads} B={B} T={T} C={C} "
          f"hs={hs} warmup={warmup} reps={reps} median_ms={med:.4f} "
          f"min_ms={ms[0]:.4f} max_ms={ms[-1]:.4f} cpu_ms={median(cpu):.4f} "
          f"gflops={step_flops(B, T, C, hs) / (med * 1e6):.2f} "
          f"peak_rss_kb={peak_rss_kb()} base_rss_kb={base_rss} "
          f"blas={kernel} "
          f"blas_threads={blas.openblas_get_num_threads() if blas else 0} "
          f"omp_threads={torch.get_num_threads()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
