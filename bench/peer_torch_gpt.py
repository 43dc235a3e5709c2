#!/usr/bin/python3
"""peer_torch_gpt: bench/bench_gpt's training step in PyTorch, timed the same way.

The model is tapegrad's tg_gpt written the same way in torch.nn (tiny_gpt's
default sizes): token and position embeddings (N(0,1)), n_layer pre-norm blocks
    x = x + proj(cat([head_h(ln1(x)) for h in heads], -1))
    x = x + fc2(gelu(fc1(ln2(x))))                   (exact GELU, 4C hidden)
each head a causal self-attention of size C / n_head with its own bias-free
q, k, v projections (softmax(q k^T / sqrt(hs), masked with -inf above the
diagonal) @ v), a final LayerNorm and a bias-free linear head to the
vocabulary. One step, as bench_gpt's:
    loss = cross_entropy(logits.view(B*T, V), targets.view(B*T))
    loss.backward(); AdamW (lr 2e-3, betas 0.9/0.999, eps 1e-8, wd 0.01).step()
    zero_grad(set_to_none=True)
on one fixed batch of random token ids (targets: the ids shifted by one).
Warm-up of at least 2 steps and --warmup-seconds, then reps steps timed one by
one, and one line of key=value fields on stdout, bench_gpt's fields:
    bench impl=torch variant=tiny_gpt B=32 T=32 ... tokens_per_s=...
Threads as bench/peer_torch.py sets them. Run it with /usr/bin/python3."""

import argparse
import os
import sys

from peer_timing import median, time_steps


def parse_args():
    p = argparse.ArgumentParser(
        description="tiny_gpt's training step in PyTorch (bench_gpt's peer).")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--block", type=int, default=32)
    p.add_argument("--embd", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=76)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--warmup-seconds", type=float, default=0.25)
    p.add_argument("--min-reps", type=int, default=3)
    p.add_argument("--max-reps", type=int, default=5000)
    p.add_argument("--impl", default="torch",
                   help="the impl= label of the output line (default torch)")
    return p.parse_args()


def main():
    args = parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import ctypes
    import resource
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps
                       if "openblas" in line and ".so" in line})
    for path in libs:
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_set_num_threads"):
            lib.openblas_set_num_threads(args.threads)
            break

    B, T, C, V = args.batch, args.block, args.embd, args.vocab
    n_head, hs = args.heads, args.embd // args.heads

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(C, hs, bias=False)
            self.k = nn.Linear(C, hs, bias=False)
            self.v = nn.Linear(C, hs, bias=False)
            self.register_buffer("tril", torch.tril(torch.ones(T, T)))

        def forward(self, x):
            t = x.shape[1]
            q, k, v = self.q(x), self.k(x), self.v(x)
            w = q @ k.transpose(-2, -1) * hs ** -0.5
            w = w.masked_fill(self.tril[:t, :t] == 0, float("-inf"))
            return F.softmax(w, dim=-1) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.heads = nn.ModuleList(Head() for _ in range(n_head))
            self.proj = nn.Linear(C, C)
            self.fc1, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.proj(torch.cat([head(h) for head in self.heads], -1))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.Sequential(*(Block() for _ in range(args.layers)))
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, V, bias=False)

        def forward(self, ids):
            x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
            return self.lm_head(self.ln_f(self.blocks(x)))

    torch.manual_seed(1337)
    model = GPT()
    data = torch.randint(0, V, (B * T + 1,))
    ids, targets = data[:-1].view(B, T), data[1:].view(B, T)
    adamw = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.999),
                              eps=1e-8, weight_decay=0.01)

    def train_step():
        logits = model(ids)
        loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
        loss.backward()
        adamw.step()
        adamw.zero_grad(set_to_none=True)

    warmup, reps, ms, cpu = time_steps(train_step, args)
    med = median(ms)
    print(f"bench impl={args.impl} variant=tiny_gpt B={B} T={T} C={C} "
          f"heads={n_head} layers={args.layers} vocab={V} "
          f"threads={args.threads} warmup={warmup} reps={reps} "
          f"median_ms={med:.4f} min_ms={ms[0]:.4f} max_ms={ms[-1]:.4f} "
          f"cpu_ms={median(cpu):.4f} tokens_per_s={B * T / (med * 1e-3):.0f} "
          f"peak_rss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
