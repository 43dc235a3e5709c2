"""peer_torch_custom: bench_custom's peer, what one call of a
torch.autograd.Function costs beyond the built-in op it wraps. One step:

    y = 2 x          x float32 of n elements, requires grad
    loss = y.sum(); loss.backward(); x.grad = None

done two ways: builtin (2 * x, the op's own backward) and function (a
torch.autograd.Function whose forward is x * 2 and whose backward is
dy * 2: the same kernels, so the difference is the Function's fixed cost),
for each n of --sizes, on one thread.

As bench_custom: the steps are timed in samples of `batch` steps (a sample
lasts about SAMPLE_MS), the two ways alternating sample by sample, after a
warm-up of each (at least 2 steps and --warmup-seconds); one line of
key=value fields per size and way, ms per step:
    bench impl=torch variant=custom-op n=16 path=builtin dtype=f32 threads=1
    batch=... samples=... median_ms=... min_ms=... max_ms=... cpu_ms=...
Run it with /usr/bin/python3 (Debian's python3-torch)."""

import argparse
import os
import sys
import time

from peer_timing import median

# as bench_custom's: long against the clock, short against the load's phases
SAMPLE_MS = 0.2
MIN_SAMPLES, MAX_SAMPLES = 3, 100000


def parse_args():
    p = argparse.ArgumentParser(
        description="y = 2x, sum, backward in PyTorch, built-in against a "
        "torch.autograd.Function (bench_custom's peer).")
    p.add_argument("--sizes", default="16,4096,262144",
                   help="element counts, comma-separated")
    p.add_argument("--seconds", type=float, default=1.5,
                   help="timed budget for all of it (default 1.5)")
    p.add_argument("--warmup-seconds", type=float, default=0.05,
                   help="warm-up per size and way (default 0.05)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    args.sizes = [int(n) for n in args.sizes.split(",")]
    if min(args.sizes) < 1 or args.seconds <= 0 or args.threads < 1:
        p.error("sizes, --seconds and --threads must be positive")
    return args


def steps(torch):
    """The two ways, each a function of x doing one step."""

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, dy):
            return dy * 2

    def builtin(x):
        (2 * x).sum().backward()
        # as bench_custom drops the gradient: each step allocates it
        x.grad = None

    def function(x):
        Twice.apply(x).sum().backward()
        x.grad = None

    return {"builtin": builtin, "function": function}


def warm_up(step, x, seconds):
    """Runs step at least twice and `seconds` long; the shortest step after
    the first in ms (not the mean, which a wait for a core would skew)."""
    clock = time.perf_counter_ns
    start, shortest, n = clock(), None, 0
    while n < 2 or (clock() - start) * 1e-9 < seconds:
        t0 = clock()
        step(x)
        ms = (clock() - t0) * 1e-6
        if n > 0 and (shortest is None or ms < shortest):
            shortest = ms
        n += 1
    return shortest


def run_size(torch, ways, n, args):
    """Times the ways at size n, alternating samples within n's share of the
    budget; prints their lines."""
    torch.manual_seed(1234)
    x = torch.randn(n, dtype=torch.float32).requires_grad_()
    step_ms = max(warm_up(step, x, args.warmup_seconds)
                  for step in ways.values())
    batch = 1 if step_ms >= SAMPLE_MS else int(SAMPLE_MS / step_ms) + 1
    ms = {name: [] for name in ways}
    cpu = {name: [] for name in ways}
    clock = time.perf_counter_ns
    budget_ns, start = args.seconds / len(args.sizes) * 1e9, clock()
    while len(ms["function"]) < MAX_SAMPLES and (
            len(ms["function"]) < MIN_SAMPLES or clock() - start < budget_ns):
        for name, step in ways.items():
            # the CPU clock is a system call: read outside the wall interval
            c0 = time.process_time_ns()
            t0 = clock()
            for _ in range(batch):
                step(x)
            ms[name].append((clock() - t0) * 1e-6 / batch)
            cpu[name].append((time.process_time_ns() - c0) * 1e-6 / batch)
    for name in ways:
        w, c = sorted(ms[name]), sorted(cpu[name])
        print(f"bench impl=torch variant=custom-op n={n} path={name} "
              f"dtype=f32 threads={args.threads} batch={batch} "
              f"samples={len(w)} median_ms={median(w):.6f} "
              f"min_ms={w[0]:.6f} max_ms={w[-1]:.6f} "
              f"cpu_ms={median(c):.6f}")


def main():
    args = parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    ways = steps(torch)
    for n in args.sizes:
        run_size(torch, ways, n, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
