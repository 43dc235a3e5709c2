"""peer_timing: how the PyTorch peers (peer_torch.py, peer_torch_gpt.py) time a
training step, the way bench_head and bench_gpt time ours: a warm-up of at
least 2 steps and warmup_seconds (the first step allocates state, so the
estimate of a step's time leaves it out), then enough steps for about
`seconds`, clamped to [min_reps, max_reps], each timed on its own."""

import time

SIZES = {  # the attention head's (B, T, C, head_size), as bench/sizes.h's
    "tiny": (4, 8, 32, 16),
    "small": (16, 64, 64, 16),
    "medium": (32, 128, 128, 32),
    "large": (32, 256, 384, 64),
    "xl": (16, 1024, 512, 64),
}


def median(sorted_ms):
    n = len(sorted_ms)
    mid = n // 2
    return sorted_ms[mid] if n % 2 else (sorted_ms[mid - 1] + sorted_ms[mid]) / 2


def time_steps(train_step, args):
    """Runs train_step as above; returns (warmup steps, reps, the sorted wall
    times in ms, the sorted CPU times of the process, all threads, in ms)."""
    clock = time.perf_counter_ns
    start, after_first, warmup = clock(), 0.0, 0
    while warmup < 2 or (clock() - start) * 1e-9 < args.warmup_seconds:
        t0 = clock()
        train_step()
        if warmup > 0:
            after_first += (clock() - t0) * 1e-6
        warmup += 1
    step_ms = after_first / (warmup - 1)
    want = args.seconds * 1e3 / max(step_ms, 1e-6)
    reps = int(min(max(want, args.min_reps), max(args.max_reps, args.min_reps)))
    ms, cpu = [], []
    for _ in range(reps):
        c0 = time.process_time_ns()  # a system call: outside the wall interval
        t0 = clock()
        train_step()
        ms.append((clock() - t0) * 1e-6)
        cpu.append((time.process_time_ns() - c0) * 1e-6)
    ms.sort()
    cpu.sort()
    return warmup, reps, ms, cpu
