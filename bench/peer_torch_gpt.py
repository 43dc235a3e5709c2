#!/usr/bin/python3
"""peer_torch_gpt: bench/bench_gpt's training step in PyTorch, timed the same way.

The model is tapegrad's tg_gpt written the same way in torch.nn (tiny_gpt's
default sizes, or bench_gpt's --model small / gpt2 presets and its --gelu,
--bias, --tie options): token and position embeddings (N(0,1)), n_layer
pre-norm blocks
    x = x + proj(cat([head_h(ln1(x)) for h in heads], -1))
    x = x + fc2(gelu(fc1(ln2(x))))         (exact or tanh GELU, 4C hidden)
each head a causal self-attention of size C / n_head with its own q, k, v
projections (biased with --bias all) (softmax(q k^T / sqrt(hs), masked with
-inf above the diagonal) @ v), a final LayerNorm and a linear head to the
vocabulary, bias-free, or the token embedding's weight with --tie. --bias
linear: layer norms, proj, fc1, fc2 biased; all: q/k/v too; none: no bias
anywhere (layer norms without beta). One step, as bench_gpt's:
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


# bench_gpt's --model presets: batch, block, context, embd, heads, layers,
# vocab, GPT-2's layout (tanh GELU, all biases, tied head)
MODELS = {
    "tiny": (32, 32, 32, 64, 4, 2, 76, False),
    "small": (8, 128, 128, 256, 4, 4, 8000, True),
    "gpt2": (4, 64, 1024, 768, 12, 12, 50257, True),
}


def parse_args():
    p = argparse.ArgumentParser(
        description="a GPT's training step in PyTorch (bench_gpt's peer).")
    p.add_argument("--model", choices=MODELS, default="tiny",
                   help="the preset the other options change")
    p.add_argument("--batch", type=int)
    p.add_argument("--block", type=int)
    p.add_argument("--embd", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--gelu", choices=("exact", "tanh"))
    p.add_argument("--bias", choices=("linear", "all", "none"))
    p.add_argument("--tie", action="store_true", default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--warmup-seconds", type=float, default=0.25)
    p.add_argument("--min-reps", type=int, default=3)
    p.add_argument("--max-reps", type=int, default=5000)
    p.add_argument("--impl", default="torch",
                   help="the impl= label of the output line (default torch)")
    args = p.parse_args()
    batch, block, ctx, embd, heads, layers, vocab, gpt2 = MODELS[args.model]
    preset = {"batch": batch, "block": block, "embd": embd, "heads": heads,
              "layers": layers, "vocab": vocab,
              "gelu": "tanh" if gpt2 else "exact",
              "bias": "all" if gpt2 else "linear", "tie": gpt2}
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.ctx = max(ctx, args.block)
    return args


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
    qkv_bias, bias = args.bias == "all", args.bias != "none"
    approximate = "tanh" if args.gelu == "tanh" else "none"

    class LayerNorm(nn.Module):
        """nn.LayerNorm, with no beta for --bias none (1.13's has no bias=)."""

        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))
            self.bias = nn.Parameter(torch.zeros(C)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, (C,), self.weight, self.bias, 1e-5)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(C, hs, bias=qkv_bias)
            self.k = nn.Linear(C, hs, bias=qkv_bias)
            self.v = nn.Linear(C, hs, bias=qkv_bias)
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
            self.ln1, self.ln2 = LayerNorm(), LayerNorm()
            self.heads = nn.ModuleList(Head() for _ in range(n_head))
            self.proj = nn.Linear(C, C, bias=bias)
            self.fc1 = nn.Linear(C, 4 * C, bias=bias)
            self.fc2 = nn.Linear(4 * C, C, bias=bias)

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.proj(torch.cat([head(h) for head in self.heads], -1))
            h = F.gelu(self.fc1(self.ln2(x)), approximate=approximate)
            return x + self.fc2(h)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, C)
            self.pos = nn.Embedding(args.ctx, C)
            self.blocks = nn.Sequential(*(Block() for _ in range(args.layers)))
            self.ln_f = LayerNorm()
            self.lm_head = nn.Linear(C, V, bias=False)
            if args.tie:
                self.lm_head.weight = self.tok.weight

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
    variant = "tiny_gpt" if args.model == "tiny" else args.model
    print(f"bench impl={args.impl} variant={variant} B={B} T={T} C={C} "
          f"heads={n_head} layers={args.layers} vocab={V} gelu={args.gelu} "
          f"bias={args.bias} tie={int(args.tie)} "
          f"threads={args.threads} warmup={warmup} reps={reps} "
          f"median_ms={med:.4f} min_ms={ms[0]:.4f} max_ms={ms[-1]:.4f} "
          f"cpu_ms={median(cpu):.4f} tokens_per_s={B * T / (med * 1e-3):.0f} "
          f"peak_rss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
