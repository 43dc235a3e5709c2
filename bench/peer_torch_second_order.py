"""peer_torch_second_order: bench_second_order's peer, what a Hessian-vector
product and a Jacobian-vector product cost against one forward + backward
of the attention head's loss in PyTorch, on one thread.

The loss, op for op as peer_torch.py's head:
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores  = (q @ k^T / sqrt(hs)).masked_fill(tril == 0, -inf)
    loss    = mse_loss(softmax(scores, -1) @ v, target)
The ways, each one call timed:
    fwd       the loss, the three weights requiring grad (the graph kept)
    fwdbwd    the same and loss.backward(); grads set to None
    hvp       H v of loss(W_q) by double backward: g = autograd.grad(loss,
              W_q, create_graph=True), then autograd.grad(g, W_q, v)
              (tg_hvp's algorithm, reverse over reverse)
    hvpfunc   torch.autograd.functional.hvp(loss, W_q, v) (which takes
              one more backward: its double-backward trick)
    jvp       J v of loss(W_q) by torch.autograd.forward_ad (dual numbers)
    fwdrev    H v as forward over reverse, functorch.jvp(functorch.grad(
              loss), W_q, v), when this torch can (1.13 cannot: the
              backward of mse_loss and of softmax have no forward-mode
              rule there); failed=1 otherwise, the reason on stderr
W_k, W_v are constants for the last four, v is drawn once.

As bench_second_order: the ways alternate call by call, after a warm-up
of each (at least 2 calls and --warmup-seconds); a `check` line, then one
line of key=value fields per dtype and way, ms per call:
    bench impl=torch variant=second-order config=medium dtype=f64
    path=hvp threads=1 samples=... median_ms=... min_ms=... max_ms=...
    cpu_ms=...
Run it with /usr/bin/python3 (Debian's python3-torch)."""

import argparse
import math
import os
import sys
import time

from peer_timing import SIZES, median

MIN_SAMPLES, MAX_SAMPLES = 3, 10000
WAYS = ("fwd", "fwdbwd", "hvp", "hvpfunc", "jvp", "fwdrev")


def parse_args():
    p = argparse.ArgumentParser(
        description="HVP and JVP of the attention head's loss against one "
        "forward + backward in PyTorch (bench_second_order's peer).")
    p.add_argument("--config", choices=SIZES, default="medium")
    p.add_argument("--dtypes", default="f64,f32",
                   help="f64, f32 or both, comma-separated")
    p.add_argument("--seconds", type=float, default=3,
                   help="timed budget for all of it (default 3)")
    p.add_argument("--warmup-seconds", type=float, default=0.05,
                   help="warm-up per dtype and way (default 0.05)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    args.dtypes = args.dtypes.split(",")
    if any(d not in ("f32", "f64") for d in args.dtypes):
        p.error("--dtypes is f64, f32 or both, comma-separated")
    if args.seconds <= 0 or args.threads < 1:
        p.error("--seconds and --threads must be positive")
    return args


def ways(torch, config, dtype):
    """The ways, each a function of no arguments doing one call and
    returning its result (the gradient of W_q, H v, J v), and the
    direction v."""
    import torch.autograd.forward_ad as fwAD
    import torch.nn.functional as F

    B, T, C, hs = SIZES[config]
    torch.manual_seed(1337)
    w_q, w_k, w_v = ((torch.randn(C, hs, dtype=dtype) / math.sqrt(C))
                     .requires_grad_() for _ in range(3))
    x = torch.randn(B, T, C, dtype=dtype)
    target = torch.randn(B, T, hs, dtype=dtype)
    v = torch.randn(C, hs, dtype=dtype)
    tril = torch.tril(torch.ones(T, T, dtype=dtype))
    k_const, v_const = w_k.detach(), w_v.detach()

    def loss(wq, wk=k_const, wv=v_const):
        q, k, vv = x @ wq, x @ wk, x @ wv
        scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
        scores = scores.masked_fill(tril[:T, :T] == 0, float("-inf"))
        return F.mse_loss(F.softmax(scores, dim=-1) @ vv, target)

    def fwd():
        return loss(w_q, w_k, w_v)

    def fwdbwd():
        loss(w_q, w_k, w_v).backward()
        g = w_q.grad
        w_q.grad = w_k.grad = w_v.grad = None
        return g

    def hvp():
        w = w_q.detach().requires_grad_()
        g, = torch.autograd.grad(loss(w), w, create_graph=True)
        return torch.autograd.grad(g, w, v)[0]

    def hvpfunc():
        return torch.autograd.functional.hvp(loss, w_q.detach(), v)[1]

    def jvp():
        with fwAD.dual_level():
            y = loss(fwAD.make_dual(w_q.detach(), v))
            return fwAD.unpack_dual(y).tangent

    def fwdrev():
        import functorch  # here: its import costs a fraction of a second

        return functorch.jvp(functorch.grad(loss), (w_q.detach(),), (v,))[1]

    return {"fwd": fwd, "fwdbwd": fwdbwd, "hvp": hvp, "hvpfunc": hvpfunc,
            "jvp": jvp, "fwdrev": fwdrev}, v


def warm_up(name, dt, call, seconds):
    """Runs call at least twice and `seconds` long; False (the reason on
    stderr) when it fails."""
    clock = time.perf_counter_ns
    start, n = clock(), 0
    try:
        while n < 2 or (clock() - start) * 1e-9 < seconds:
            call()
            n += 1
    except Exception as e:  # any failure fails this way alone
        print(f"peer_torch_second_order: {dt} {name}: "
              f"{str(e).splitlines()[0]}", file=sys.stderr)
        return False
    return True


def check(torch, dt, calls, ok, v):
    """hvp against fwdrev (or hvpfunc when fwdrev cannot run) and jvp
    against the gradient's dot with v, relative: a `check` line."""
    def rel(a, b):
        return ((a - b).abs().max() / b.abs().max().clamp(min=1)).item()

    hv = calls["hvp"]()
    other = "fwdrev" if ok["fwdrev"] else "hvpfunc"
    dot = (calls["fwdbwd"]() * v).sum()
    jv = calls["jvp"]()
    print(f"check impl=torch variant=second-order dtype={dt} "
          f"{other}_vs_hvp={rel(calls[other](), hv):.3g} "
          f"jvp_vs_grad_dot_v={abs((jv - dot) / dot).item():.3g}")


def run_dtype(torch, dt, args):
    """Times the ways that warmed up, one call of each in turn, within the
    dtype's share of the budget; prints their lines."""
    dtype = torch.float32 if dt == "f32" else torch.float64
    calls, v = ways(torch, args.config, dtype)
    ok = {n: warm_up(n, dt, c, args.warmup_seconds) for n, c in calls.items()}
    ms = {name: [] for name in calls}
    cpu = {name: [] for name in calls}
    clock = time.perf_counter_ns
    budget_ns, start = args.seconds / len(args.dtypes) * 1e9, clock()
    while len(ms["fwdbwd"]) < MAX_SAMPLES and (
            len(ms["fwdbwd"]) < MIN_SAMPLES or clock() - start < budget_ns):
        for name, call in calls.items():
            if not ok[name]:
                continue
            # the CPU clock is a system call: outside the wall interval
            c0 = time.process_time_ns()
            t0 = clock()
            call()
            ms[name].append((clock() - t0) * 1e-6)
            cpu[name].append((time.process_time_ns() - c0) * 1e-6)
    check(torch, dt, calls, ok, v)
    for name in calls:
        line = (f"bench impl=torch variant=second-order config={args.config} "
                f"dtype={dt} path={name} threads={args.threads}")
        if not ok[name]:
            print(line + " failed=1")
            continue
        w, c = sorted(ms[name]), sorted(cpu[name])
        print(f"{line} samples={len(w)} median_ms={median(w):.4f} "
              f"min_ms={w[0]:.4f} max_ms={w[-1]:.4f} "
              f"cpu_ms={median(c):.4f}")


def main():
    args = parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    for dt in args.dtypes:
        run_dtype(torch, dt, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
