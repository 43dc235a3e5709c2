#!/usr/bin/env python3
"""bench_load's peer: PyTorch loading the same GPT-2 .safetensors into a
GPT-2-shaped torch model's parameters, one load per process.

No `safetensors` or `transformers` package is assumed: the header is read
with json, the file mapped with numpy.memmap, and each tensor copied from
the mapping into its parameter (param.copy_), the way safetensors'
load_file plus load_state_dict does it. The model is built on the meta
device and materialised with to_empty (no random initialisation: what
Hugging Face's from_pretrained does with low_cpu_mem_usage).

Usage: peer_torch_load.py PATH [mmap|readinto]
Output: one line, as bench_load's:
    bench impl=pytorch variant=load_HOW params=... model_mib=... load_s=...
    cpu_s=... peak_rss_kb=... peak_over_model=...
"""
import json
import resource
import struct
import sys
import time

import numpy as np
import torch
from torch import nn

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}


class Conv1D(nn.Module):
    """Hugging Face's GPT-2 linear: weight (in, out), y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))


class Block(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(C, 3 * C)
        self.attn.c_proj = Conv1D(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(C, 4 * C)
        self.mlp.c_proj = Conv1D(4 * C, C)


class GPT2Model(nn.Module):
    def __init__(self, V, T, C, L):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)


def read_state_dict(path):
    """The file's tensors, each a torch view of the mapped file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    sd = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        a = mm[begin:end].view(DTYPES[e["dtype"]]).reshape(e["shape"])
        sd[name] = torch.from_numpy(a)  # shares the mapping: no copy yet
    return sd


def build(V, T, C, L):
    """The model with its parameters allocated but not initialised (the
    modules' reset_parameters skipped, as transformers' no_init_weights
    does): torch.empty's memory, untouched until the copy."""
    saved = nn.Embedding.reset_parameters, nn.LayerNorm.reset_parameters
    nn.Embedding.reset_parameters = lambda self: None
    nn.LayerNorm.reset_parameters = lambda self: None
    try:
        return GPT2Model(V, T, C, L)
    finally:
        nn.Embedding.reset_parameters, nn.LayerNorm.reset_parameters = saved


def shapes(sd):
    V, C = sd["wte.weight"].shape
    T = sd["wpe.weight"].shape[0]
    L = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("h."))
    return V, T, C, L


def load_mmap(path):
    """safetensors' way: the file mapped, each tensor copied out of the
    mapping into its parameter by load_state_dict."""
    sd = read_state_dict(path)
    model = build(*shapes(sd))
    with torch.no_grad():
        model.load_state_dict(sd, strict=True)
    return model


def load_readinto(path):
    """The fewest copies Python allows: each tensor read(2) straight into
    its parameter's memory (the file's layout is the model's: float32,
    Conv1D (in, out))."""
    with open(path, "rb", buffering=0) as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        entries = sorted((e["data_offsets"][0], name, e)
                         for name, e in header.items()
                         if name != "__metadata__")
        meta = {name: torch.empty(0).new_empty(e["shape"], device="meta")
                for _, name, e in entries}
        model = build(*shapes(meta))
        params = dict(model.named_parameters())
        for begin, name, e in entries:
            assert e["dtype"] == "F32"
            buf = memoryview(params[name].detach().numpy()).cast("B")
            f.seek(8 + n + begin)
            assert f.readinto(buf) == len(buf)
    return model


def main():
    import warnings
    warnings.filterwarnings("ignore")  # non-writable numpy arrays
    torch.set_num_threads(1)
    path = sys.argv[1]
    how = sys.argv[2] if len(sys.argv) > 2 else "mmap"
    t0, c0 = time.perf_counter(), time.process_time()
    model = load_readinto(path) if how == "readinto" else load_mmap(path)
    t1, c1 = time.perf_counter(), time.process_time()
    n = sum(p.numel() for p in model.parameters())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model_kb = n * 4 / 1024
    print(f"bench impl=pytorch variant=load_{how} dtype=float32 params={n} "
          f"model_mib={model_kb / 1024:.1f} load_s={t1 - t0:.3f} "
          f"cpu_s={c1 - c0:.3f} "
          f"peak_rss_kb={peak} peak_over_model={peak / model_kb:.3f}")


if __name__ == "__main__":
    main()
